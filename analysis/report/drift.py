"""The drift report: what training changed, as a page of the document engine (:mod:`analysis.report.document`).

:func:`drift_report` lays out a :class:`~analysis.drift.record.DriftAnalysis` (computed by
:func:`analysis.drift.analyse`): the plain-words summary, behaviour, attention patterns, the knobs read back from
the weights, head circuits and MLPs against the construction, ablations and the stiffness sweep, the training
history and the residual layout. Its figures are the views of :mod:`analysis.views.drift`.
"""

from __future__ import annotations

import html

from analysis.drift.record import DriftAnalysis
from analysis.drift.summary import fmt as _fmt, spread
from analysis.drift.weights import BLOCK_NAMES, KNOB_DOCS
from analysis.report.document import Fact, Header, Html, Report, Section, Table
from analysis.views.drift import (
    view_behaviour, view_blocks, view_circuits, view_history, view_patterns, view_similarity, view_singular_values,
    view_sweep,
)
from circuits.training.construction import EXTRA_SUBSPACES_DOCS


def drift_report(a: DriftAnalysis, title: str = "What training changed") -> Report:
    """The analysis as a :class:`~analysis.report.document.Report` (write it with ``.write(path)``)."""
    report = Report(_header(a, title))
    for section in (*_behaviour_sections(a), *_weight_sections(a), *_change_sections(a)):
        report.add_section(section)
    return report


def _header(a: DriftAnalysis, title: str) -> Header:
    beh = a.behaviour
    r_t = beh.ratio["trained"][-1]
    tr = a.config["training"]
    return Header(
        title=title,
        verdict=f"trained / Lloyd's after {beh.steps} steps: {r_t:.4f} (mean; std {beh.spread['ratio']['trained'][-1]:.3g})"
                f" on {beh.tasks} held-out tasks (n={beh.n})",
        verified=r_t < 1, exact=False,
        groups={
            "run": [Fact("tasks", f"d={tr['d']} k={tr['k']} n={tr['n']}, gaussian mixtures"),
                    Fact("init", tr["init"], "construction at finite sharpness, or random weights"),
                    Fact("steps", str(a.config.get("progress", {}).get("step", tr["steps"]))),
                    Fact("best validation step", str(a.config.get("progress", {}).get("best_step")))],
            "construction it is compared with": [Fact(k, _fmt(v)) for k, v in a.config["model"]["sharpness"].items()],
        },
        messages=["Comparisons are against the construction at the run's initial sharpness; the exact (Lloyd's)"
                  " construction appears in the attention patterns."],
    )


def _behaviour_sections(a: DriftAnalysis) -> list[Section]:
    """What the model does: the summary, behaviour step by step, the attention patterns."""
    summary = "".join(f"<li>{html.escape(s)}</li>" for s in a.summary)
    sections = [Section("What the trained model does differently", "", [Html(f"<ul class='summary'>{summary}</ul>")]),
                Section("Behaviour", "Mean over held-out tasks, step by step: objective, ARI, softness, stiffness.",
                        [view_behaviour(a)])]
    if a.patterns is not None:
        sections.append(Section("Attention patterns", "The same problem through the exact construction (Lloyd's, hard"
                                " attention) and the trained model. Points are sorted by the component that generated"
                                " them; white lines separate components. Each panel has its own colour bar, from 0 to its own largest"
                                " weight. Use the slider to change step.",
                                [view_patterns(a)]))
    return sections


def _weight_sections(a: DriftAnalysis) -> list[Section]:
    """What the weights hold, read in the named basis: knobs, head circuits, MLP coefficients."""
    knob_rows = [[name, KNOB_DOCS[name][0], _fmt(a.knobs["construction"][name]), _fmt(a.knobs["trained"][name]),
                  KNOB_DOCS[name][1]] for name in KNOB_DOCS]
    items = [view_similarity(a), view_singular_values(a), view_blocks(a), view_circuits(a)]
    top_rows = [[f"{BLOCK_NAMES[c.block]} {c.which}", r[0], r[1], _fmt(r[3]), _fmt(r[2]), _fmt(r[4])]
                for c in a.circuits for r in c.blocks[:5]]
    items.append(Table(["circuit", "rows", "cols", "|construction|", "|trained|", "|change|"], top_rows,
                       caption="The five most changed subspace blocks of every circuit"))
    mlp_rows = [[BLOCK_NAMES[r.block], r.role, r.units, _fmt(r.construction), _fmt(r.trained), _fmt(r.max_rel_change)]
                for r in a.mlps]
    return [
        Section("Knobs read back from the weights", "The construction's named knobs, read from the"
                " trained weights in the named basis.",
                [Table(["knob", "where", "construction", "trained", "meaning"], knob_rows)]),
        Section("Head circuits: trained vs construction", "QK = W_Q W_K^T (rows: what the query reads,"
                " columns: what the key reads); OV = W_V W_O (rows: what the value reads, columns: what is"
                " written). The fixed structural channel (point x point masked) is left out: it is never"
                " trained.", items),
        Section("MLPs: coefficients by unit role", "Units keep the construction's wiring; the effective"
                " coefficient is out x gate x linear (the unit's output for unit inputs).",
                [Table(["block", "role: gate x linear -> writes", "units", "construction (mean)",
                        "trained (mean)", "largest relative change"], mlp_rows)]),
    ]


def _change_sections(a: DriftAnalysis) -> list[Section]:
    """Which changes matter (ablations, the sweep), drift against training step, the residual layout."""
    sections = []
    extra = []
    if a.ablations:
        extra.append(Table(["weights", "ratio with these reverted to the construction", "ratio with only these trained"],
                           [[r["group"], spread(r["reverted"], r["reverted_std"]),
                             spread(r["only_this_trained"], r["only_this_trained_std"])] for r in a.ablations],
                           caption="mean over the tasks (standard deviation over them)"))
    sweep = view_sweep(a)
    if sweep is not None:
        extra.append(sweep)
    if extra:
        sections.append(Section("Which changes matter", f"Objective / Lloyd's after {a.behaviour.steps} steps on the"
                                f" same {a.behaviour.tasks} tasks: mean over them, with its standard deviation.", extra))
    hist = view_history(a)
    if hist is not None:
        sections.append(Section("Drift against training step", "From the checkpoint's training log.", [hist]))
    layout_rows = [[r["name"], r["width"], EXTRA_SUBSPACES_DOCS.get(r["name"], r["holds"])] for r in a.layout.describe()]
    sections.append(Section("Residual layout", "The exact circuit's subspaces plus the two the trainable model adds.",
                            [Table(["subspace", "width", "holds"], layout_rows)]))
    return sections
