"""The visual circuit report: the problem, the construction, the verdict, and the circuit section by section.

:func:`build_report` assembles a :class:`~analysis.report.document.Report` whose header states the problem, the
construction's parameters, the verification verdict and its certificate (:func:`build_header`), followed by the
default sections built from :mod:`analysis.views` (:data:`DEFAULT_SECTIONS`). Other parts of the toolkit add
theirs either on a report object (:meth:`Report.add_section`) or for every report built from then on
(:func:`register_section`)::

    report = build_report(run)                                   # run: analysis.pipeline.RunResult
    report.add_section(Section("Patching", "What restores what.", [my_view]), after="residual")
    report.write("report.html")

Large problems stay responsive because the views draw a sample of the points (:func:`analysis.views.point_sample`,
chosen once per report and shared by all views) while every number comes from all points; the header says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from analysis import views
from analysis.report.document import Fact, Header, Report, Section, Table
from analysis.views import DEFAULT_MAX_POINTS, PointSample
from analysis.pipeline import as_run
from analysis.views._common import as_circuit
from analysis.verify.report import weight_edits_text
from analysis.verify.verdict import bound_text, convergence_text, not_applicable

# ----------------------------------------------------------------------------------------------------- building


@dataclass
class ReportContext:
    """What the section builders share: the drawing sample, the problem description, the residual streams."""

    run: object
    sample: PointSample
    problem: object = None
    _streams: object = None

    @property
    def streams(self):
        if self._streams is None:
            self._streams = views.residual_streams(self.run)
        return self._streams


SectionBuilder = Callable[[object, ReportContext], "Section | None"]


def _variant_caveat(run) -> str:
    """For a variant circuit: the construction described is the exact one, altered as the header says."""
    circ = as_circuit(run)
    if circ.spec.unaltered:
        return ""
    return (f"\n\nThis run is the `{circ.variant}` variant: the description above is the exact Lloyd "
            "construction, which the variant alters as stated in the header (alteration, parameters, hooks); the "
            "figures show what this circuit actually does.")


@dataclass(frozen=True)
class DefaultSection:
    """One default section, declared as data: its title and text, the views it shows, and whether the text gets the
    variant caveat (it describes the exact construction)."""

    key: str
    title: str
    text: str
    views: Callable[[object, ReportContext], list]
    caveat: bool = False

    def __call__(self, run, ctx: ReportContext) -> Section:
        text = self.text + (_variant_caveat(run) if self.caveat else "")
        return Section(self.title, text, self.views(run, ctx), key=self.key)


def _residual_views(run, ctx: ReportContext) -> list:
    layout = as_circuit(run).layout
    table = Table(["subspace", "dimensions", "width", "holds"],
                  [[r["name"], f"{r['start']}..{r['stop'] - 1}", r["width"], r["holds"]] for r in layout.describe()],
                  caption=f"The residual stream: d_model = {layout.d_model}, named subspaces (circuits/layout.py).")
    return [table, views.residual_norms(run, streams=ctx.streams), views.residual_tokens(run, streams=ctx.streams)]


#: The default sections, in page order.
DEFAULT_SECTIONS: list[DefaultSection] = [
    DefaultSection(
        "trajectories", "The algorithm: centroids across iterations",
        "Every point coloured by the assignment the circuit wrote into its `Y` slot, and every centroid at the "
        "position held in its `C` slot, read off the residual stream after each block. Open circles are the "
        "reference algorithm's centroids, computed independently in numpy from the same initial centroids; "
        "the crosses sit inside them when the circuit runs the algorithm exactly. Move the slider to step "
        "through the iterations.",
        lambda run, ctx: [views.centroid_trajectories(run, sample=ctx.sample)]),
    DefaultSection(
        "assign", "Assignment heads: each point picks its nearest centroid",
        "The query of a point carries `2 beta x` and `-beta`, the key of centroid j carries `c_j` and "
        "`|c_j|^2` (plus a tiny tie-break), so the score is `-beta |x - c_j|^2` up to a constant of the query "
        "and the softmax over the centroid keys picks the nearest centroid. Rows are the point queries, "
        "ordered by the centroid they attend to and then by margin, so a hard assignment is one block per "
        "cluster. Right: each point's margin, the score of its chosen key minus the best other key; beyond the "
        "dashed line the other weights underflow to exactly 0 in float64 and the pattern is exactly one-hot.",
        lambda run, ctx: [views.assign_attention(run, sample=ctx.sample)], caveat=True),
    DefaultSection(
        "update", "Update heads: each centroid averages its members",
        "The query of centroid j scores `beta_u` on every point whose `Y` has bit j and `beta_u / 2` on its own "
        "key, so the softmax is uniform over its members (their mean, since the value is `X + C`) or, for an "
        "empty cluster, all on itself. The first update layer commits the initial centroids: no point is "
        "assigned yet, so every centroid attends to itself.",
        lambda run, ctx: [views.update_attention(run, sample=ctx.sample)], caveat=True),
    DefaultSection(
        "residual", "The residual stream, subspace by subspace",
        "The residual stream is a named basis: every dimension belongs to one subspace of the table below. "
        "Each block is read twice, after its attention and after its MLP: heads write into the staging slots "
        "(`Y_stage`, `C_stage`), and the MLP of the same block commits them into `Y` and `C` and empties the "
        "slots.",
        _residual_views),
    DefaultSection(
        "weights", "The weights: QK and OV circuits in the named basis",
        "Each head's bilinear maps, from TransformerLens `FactoredMatrix` objects (`attn.QK[h]`, `attn.OV[h]`), "
        "with rows and columns labelled by the layout. QK: the row is what the query reads, the column what "
        "the key reads (the assignment head's `X` x `C` entry is `2 beta`). OV: the row is what the value reads "
        "on the attended token, the column what is written into the attending token (`ID` -> `Y_stage` in the "
        "assignment head, `X` and `C` -> `C_stage` in the update head). Layers with identical weights are shown "
        "once.",
        lambda run, ctx: [views.qk_circuit(run), views.ov_circuit(run)]),
    DefaultSection(
        "verification", "Verification against the reference, layer by layer",
        "Every block's output, decoded from the residual stream, is compared with the reference operation applied "
        "to the block's own input (step-wise), and the circuit's iterates with the reference run from the same "
        "initial centroids (trajectory). Ties (points whose nearest centroids are equally near within the stated "
        "window) are listed, not hidden.",
        lambda run, ctx: [_html_table(views.verification_table(run)), views.objective_plot(run),
                          views.ties_table(run)]),
]


def _html_table(view) -> Table:
    """A table view as an HTML table of the page: every row on the page (a plotly table scrolls past its height)."""
    return Table(view.data["header"], view.data["rows"], caption=view.title, name=view.name, notes=view.notes)

_EXTRA_SECTIONS: list[tuple[str, SectionBuilder, str | None]] = []


def register_section(key: str, builder: SectionBuilder, after: str | None = None) -> None:
    """Add a section to every report built from now on.

    ``builder(run, ctx)`` returns a :class:`Section` (or ``None`` to skip it for this run); ``after`` names the
    section it follows (default: the end). Registering the same key again replaces the builder.
    """
    _EXTRA_SECTIONS[:] = [e for e in _EXTRA_SECTIONS if e[0] != key]
    _EXTRA_SECTIONS.append((key, builder, after))


def unregister_section(key: str) -> None:
    _EXTRA_SECTIONS[:] = [e for e in _EXTRA_SECTIONS if e[0] != key]


def build_report(run, problem=None, *, seed: int | None = None, title: str | None = None,
                 max_points: int | None = DEFAULT_MAX_POINTS, extra_sections: list[Section] = ()) -> Report:
    """The full report of a verified run: anything :func:`analysis.pipeline.as_run` takes (a
    :class:`~analysis.pipeline.RunResult`, a :class:`~analysis.capture.Capture`, a fitted estimator, or an
    ``(ActivationCache, EncodedBatch)`` pair).

    ``problem`` (an :class:`analysis.cli.options.LoadedProblem`) and ``seed`` describe where the data and the
    initial centroids came from; ``max_points`` bounds the points drawn per figure (``None``: all).
    """
    run = as_run(run)
    sample = views.point_sample(run, max_points)
    ctx = ReportContext(run, sample, problem)
    report = Report(build_header(run, problem, seed, title, sample))
    for section in DEFAULT_SECTIONS:
        report.add_section(section(run, ctx))
    for key, builder, after in list(_EXTRA_SECTIONS):
        section = builder(run, ctx)
        if section is not None:
            section.key = key
            known = after is not None and any(s.key == after for s in report.sections)
            report.add_section(section, after=after if known else None)
    for section in extra_sections:
        report.add_section(section)
    return report


def schedule_text(schedule: list[str]) -> str:
    """``"(U A) x 11"`` for a repeated pattern of block kinds, else the kinds in order (U update, A assign)."""
    letters = ["U" if kind == "update" else "A" if kind == "assign" else kind for kind in schedule]
    for period in range(1, len(letters) // 2 + 1):
        if len(letters) % period == 0 and letters == letters[:period] * (len(letters) // period):
            unit = " ".join(letters[:period])
            return f"({unit}) x {len(letters) // period}" if period > 1 else f"{unit} x {len(letters)}"
    return " ".join(letters)


def _g(x: float) -> str:
    return f"{x:.4g}" if np.isfinite(x) else str(x)


def build_header(run, problem=None, seed: int | None = None, title: str | None = None,
                 sample: PointSample | None = None) -> Header:
    """The facts at the top of the page: problem, construction, verdict, certificate."""
    from circuits.variants import get_variant

    try:
        variant = get_variant(run.circuit.variant)
    except KeyError:
        variant = None
    rep = run.report
    source = getattr(problem, "source", None) or "data given in Python"
    # The badge names the first failure; every failure is listed below it.
    messages = [f"failure: {f}" for f in rep.failures] + [f"note: {n}" for n in rep.notes] + _hooked_messages(run)
    if sample is not None:
        messages.append(sample.note())
    return Header(
        title=title or f"k-means circuit report: {source}, k = {run.encoded.k}",
        verdict=rep.verdict,
        verified=bool(rep.verified),
        exact=bool(rep.exact),
        verdict_kind=rep.verdict_record.kind,
        groups={"Problem": _problem_facts(run, source, problem, seed, variant),
                "Construction": _construction_facts(run, variant), "Certificate": _certificate_facts(rep)},
        messages=messages,
    )


def _hooked_messages(run) -> list[str]:
    """What a run read from a user's cache is, and where its hooks replaced attention patterns."""
    cap = run.capture
    if not cap.from_user_cache:
        return []
    out = ["read from the run's ActivationCache: every view below draws that run as it ran, hooks included (the weight"
           " views draw the weights)"]
    if cap.hooked_patterns:
        where = ", ".join(f"layer {layer} ({rows} query rows)" for layer, rows in sorted(cap.hooked_patterns.items()))
        out.append(f"a hook replaced the attention pattern of {where}: there the certificate's leak bound is that"
                   " pattern's own distance from the hard pattern, and the margins (its scores') certify nothing")
    return out


def _problem_facts(run, source: str, problem, seed: int | None, variant) -> list[Fact]:
    circ, enc, rep = run.circuit, run.encoded, run.report
    init = getattr(problem, "init", None) or "given centroids"
    if seed is not None and init in ("random", "k-means++"):
        init = f"{init} (seed {seed})"
    return [
        Fact("data", source),
        Fact("points x dimensions", f"n = {enc.n:,}, d = {enc.d}"),
        Fact("clusters", f"k = {enc.k}"),
        Fact("iterations", f"T = {circ.iterations}; {convergence_text(rep.converged, rep.n_iter, circ.iterations)}",
             "t = 0 is the initial centroids, t = s the centroids after s updates (and the assignment to them)"),
        Fact("initial centroids", init),
        Fact("variant", circ.variant + (f": {variant.algorithm}" if variant else "")),
        Fact("checked against", str(getattr(rep, "reference", "Lloyd's k-means (circuits.reference.lloyd)"))),
        Fact("device", str(enc.device), "where torch ran the circuit"),
    ]


def _construction_facts(run, variant) -> list[Fact]:
    circ, rep = run.circuit, run.report
    cfg, sharp = circ.model.cfg, circ.sharpness
    s = float(run.encoded.scaling.scale[0])
    user = sharp.in_user_units(s)
    kinds = schedule_text(circ.schedule)
    construction = [
        Fact("model", f"{_transformer_lens_class(circ.model)}, {cfg.n_layers} blocks: {kinds}",
             "U: update block, A: assign block"),
        Fact("widths", f"d_model = {cfg.d_model}, d_head = {cfg.d_head}, d_mlp = {cfg.d_mlp}, "
                       f"{cfg.n_heads} head(s) per block"),
        Fact("configuration", f"attention {cfg.attention_dir}, normalization {cfg.normalization_type}, "
                              f"use_attn_scale {cfg.use_attn_scale}, gated {cfg.act_fn} MLP, dtype {rep.dtype}"),
        Fact("beta (assignment sharpness)", f"{sharp.beta:g}",
             f"per unit-scaled squared distance; {user['beta_per_user_sq_distance']:.4g} per squared data unit"),
        Fact("beta_update (update sharpness)", f"{sharp.beta_update:g}"),
        Fact("mask (big-M on non-centroid keys)", f"{sharp.mask:g}"),
        Fact("tie_break", f"{sharp.tie_break:g}",
             f"unit-scaled; {user['tie_break_user_sq_distance']:.3g} in squared data units"),
        Fact("scale", f"s = {s:.6g}", "unit = (x - mean) / s: every token lies in the unit ball"),
        Fact("exact-gap threshold", f"{user['exact_gap_threshold_user_sq_distance']:.3g}",
             "squared data units: points whose two nearest centroids differ by more are assigned by an exactly "
             "one-hot pattern"),
    ]
    alterations = list(getattr(rep, "alterations", []) or [])
    edited = bool(getattr(rep, "weight_edits", None))
    added = list(getattr(rep, "added_hooks", []) or [])
    if alterations:
        # A cache run with hooks: the construction is the variant's, the run is not.
        construction.insert(0, Fact("alteration", "hooks changed this run: " + "; ".join(alterations),
                                    "found by re-running each block on its cached input: the first activation"
                                    " that differs from the block's own is named"))
    elif variant is not None and variant.alteration:
        construction.insert(0, Fact("alteration, as built" if edited or added else "alteration", variant.alteration))
    if edited:
        # Edited weights (through .data, say): the facts below are the build's, the run was not that build.
        construction.insert(0, Fact("weights changed since the build", weight_edits_text(rep.weight_edits),
                                    "what ran is not the construction: the knobs below are those it was built with,"
                                    " and the weight views draw the weights as they ran"))
    if added:
        construction.insert(0, Fact("hooks added to the model", ", ".join(added),
                                    "they ran in this run (permanent, or in a hooks() context); what they changed is"
                                    " not checked here: the verification holds the run, hooks and all, to the"
                                    " reference"))
    params = dict(getattr(circ, "params", {}) or {})
    if params:
        construction.append(Fact("variant parameters", ", ".join(f"{k} = {v:g}" for k, v in params.items()),
                                 "distances unit-scaled, like the knobs"))
    hooks = list(getattr(circ, "hooks", []) or [])
    if hooks:
        construction.append(Fact("permanent hooks", _hooks_text(hooks)))
    return construction


def _hooks_text(hooks: list[tuple[str, str]]) -> str:
    """Permanent hooks, each description said once with the hook points it is on."""
    by_what: dict[str, list[str]] = {}
    for name, what in hooks:
        by_what.setdefault(what, []).append(name)
    return "; ".join(f"{what} (on {names[0]})" if len(names) == 1 else f"{what} (on {len(names)} hook points:"
                     f" {', '.join(names)})" for what, names in by_what.items())


def _certificate_facts(rep) -> list[Fact]:
    # None marks a certificate that does not apply (an update head whose normalisation a variant swapped).
    records = rep.records if hasattr(rep, "records") else rep.per_iteration
    update_margins = [r.update_min_margin for r in records if r.update_min_margin is not None]
    update_leaks = [r.update_leak_bound for r in records if r.update_leak_bound is not None]
    leaks = [r.leak_bound for r in records] + [rep.final_leak_bound]
    swapped = not_applicable("the update head's normalisation is swapped: no softmax margin to certify")
    return [
        Fact("smallest assignment margin", _g(rep.min_margin), "beta * gap (+ tie-break) over every point and layer"),
        Fact("largest assignment leak bound", bound_text(max(leaks)),
             "bounds the attention mass off the chosen centroid; 0 means exactly one-hot; 1 or more bounds nothing"),
        Fact("smallest update margin", _g(min(update_margins)) if update_margins else swapped),
        Fact("largest update leak bound", bound_text(max(update_leaks)) if update_leaks else swapped),
        Fact("hard attention everywhere", str(rep.hard_attention)),
        Fact("final label agreement", f"{rep.final_label_agreement:.2%}"),
        Fact("errors / ties", f"{len(rep.errors)} errors, {len(rep.ties)} ties"
                              + (" at the data's precision" if rep.ties and all(t.bounds for t in rep.ties) else "")
                              + f" ({len(rep.tie_mismatches)} resolved unlike the reference)"),
        Fact("tolerances", f"centroids {rep.tolerances.centroid:.3g}, tie window {rep.tolerances.tie_window:.3g}",
             "in data units (squared for the tie window: the widest bound of a tie at the data's precision, for"
             " Lloyd's and the other distance references), derived from the run"),
    ]


def _transformer_lens_class(model) -> str:
    """The TransformerLens class the circuit is: HookedTransformer on 3.x, HookedRootModule on 4.x (which has no
    HookedTransformer; docs/python.md#transformerlens-versions)."""
    return next(cls.__name__ for cls in type(model).__mro__ if cls.__module__.startswith("transformer_lens"))
