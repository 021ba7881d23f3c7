"""The visual circuit report: one self-contained HTML file, an ordered list of sections of figures and tables.

A :class:`Report` is a header (the problem, the construction's parameters, the verification verdict and its
certificate) followed by :class:`Section` objects, each a title, some explanatory text and a list of items
(:class:`~analysis.views.View`, plotly figures, :class:`Table`, :class:`Html`). :func:`build_report` assembles the
default sections from :mod:`analysis.views`; other parts of the toolkit add theirs either on a report object
(:meth:`Report.add_section`) or for every report built from then on (:func:`register_section`)::

    report = build_report(run)                                   # run: analysis.pipeline.RunResult
    report.add_section(Section("Patching", "What restores what.", [my_view]), after="residual")
    report.write("report.html")

:meth:`Report.to_html` embeds plotly.js once (in the page head) and each figure as a JSON block drawn by one
small script, figure after figure, yielding to the browser between them; the page references no external URL
and makes no network request (``tests/test_report_browser.py`` checks both in headless Chromium). Progress is
published as ``window.kmeansReport = {total, rendered, failed, done, ms}`` so a browser test (or a curious
reader's console) can see what drew.

Large problems stay responsive because the views draw a sample of the points (:func:`analysis.views.point_sample`,
chosen once per report and shared by all views) while every number comes from all points; the header says so.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from analysis import views
from analysis.views import DEFAULT_MAX_POINTS, PointSample, View
from analysis.views._common import as_circuit
from circuits.files import write_text_atomic


@dataclass
class Table:
    """A small HTML table (header row plus rows of cells, written as text)."""

    header: list[str]
    rows: list[list[object]]
    caption: str = ""


@dataclass
class Html:
    """Trusted HTML inserted as is (for content a section builds itself; never user input)."""

    markup: str


Item = Union[View, go.Figure, Table, Html]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


@dataclass
class Section:
    """A titled part of the report. ``text`` is plain text: blank lines separate paragraphs, `backticks`
    mark code."""

    title: str
    text: str = ""
    items: list[Item] = field(default_factory=list)
    key: str = ""

    def __post_init__(self) -> None:
        self.key = self.key or slug(self.title)

    def add(self, item: Item) -> "Section":
        self.items.append(item)
        return self


@dataclass
class Fact:
    """One line of the header: a label, a value and an optional explanation."""

    label: str
    value: str
    help: str = ""


@dataclass
class Header:
    title: str
    verdict: str
    verified: bool
    exact: bool
    groups: dict[str, list[Fact]]
    messages: list[str] = field(default_factory=list)


@dataclass
class Report:
    """A header and an ordered list of sections; render with :meth:`to_html`."""

    header: Header
    sections: list[Section] = field(default_factory=list)

    def section(self, key: str) -> Section:
        for s in self.sections:
            if s.key == key:
                return s
        raise KeyError(f"no section {key!r}; the report has {', '.join(s.key for s in self.sections)}")

    def add_section(self, section: Section, after: str | None = None, before: str | None = None) -> Section:
        """Append ``section``, or place it right after/before the section with key ``after``/``before``."""
        if after is not None and before is not None:
            raise ValueError("give at most one of after= and before=")
        if any(s.key == section.key for s in self.sections):
            raise ValueError(f"the report already has a section {section.key!r}")
        if after is None and before is None:
            self.sections.append(section)
        else:
            anchor = self.sections.index(self.section(after if after is not None else before))
            self.sections.insert(anchor + (1 if after is not None else 0), section)
        return section

    def figures(self) -> list[go.Figure]:
        """Every plotly figure of the report, in page order."""
        out = []
        for s in self.sections:
            for item in s.items:
                if isinstance(item, View):
                    out.append(item.figure)
                elif isinstance(item, go.Figure):
                    out.append(item)
        return out

    def to_html(self) -> str:
        return render_html(self)

    def write(self, path: str | os.PathLike) -> Path:
        """Write the HTML atomically (a temporary sibling renamed into place)."""
        return write_text_atomic(Path(path), self.to_html())


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
    if circ.variant == "lloyd":
        return ""
    return (f"\n\nThis run is the `{circ.variant}` variant: the description above is the exact Lloyd "
            "construction, which the variant alters as stated in the header (alteration, parameters, hooks); the "
            "figures show what this circuit actually does.")


def _trajectory_section(run, ctx: ReportContext) -> Section:
    return Section(
        "The algorithm: centroids across iterations",
        "Every point coloured by the assignment the circuit wrote into its `Y` slot, and every centroid at the "
        "position held in its `C` slot, read off the residual stream after each block. Open circles are the "
        "reference algorithm's centroids, computed independently in numpy from the same initial centroids; "
        "the crosses sit inside them when the circuit runs the algorithm exactly. Move the slider to step "
        "through the iterations.",
        [views.centroid_trajectories(run, sample=ctx.sample)],
        key="trajectories",
    )


def _assign_section(run, ctx: ReportContext) -> Section:
    return Section(
        "Assignment heads: each point picks its nearest centroid",
        "The query of a point carries `2 beta x` and `-beta`, the key of centroid j carries `c_j` and "
        "`|c_j|^2` (plus a tiny tie-break), so the score is `-beta |x - c_j|^2` up to a constant of the query "
        "and the softmax over the centroid keys picks the nearest centroid. Rows are the point queries, "
        "ordered by the centroid they attend to and then by margin, so a hard assignment is one block per "
        "cluster. Right: each point's margin, the score of its chosen key minus the best other key; beyond the "
        "dashed line the other weights underflow to exactly 0 in float64 and the pattern is exactly one-hot."
        + _variant_caveat(run),
        [views.assign_attention(run, sample=ctx.sample)],
        key="assign",
    )


def _update_section(run, ctx: ReportContext) -> Section:
    return Section(
        "Update heads: each centroid averages its members",
        "The query of centroid j scores `beta_u` on every point whose `Y` has bit j and `beta_u / 2` on its own "
        "key, so the softmax is uniform over its members (their mean, since the value is `X + C`) or, for an "
        "empty cluster, all on itself. The first update layer commits the initial centroids: no point is "
        "assigned yet, so every centroid attends to itself." + _variant_caveat(run),
        [views.update_attention(run, sample=ctx.sample)],
        key="update",
    )


def _residual_section(run, ctx: ReportContext) -> Section:
    layout = as_circuit(run).layout
    table = Table(["subspace", "dimensions", "width", "holds"],
                  [[r["name"], f"{r['start']}..{r['stop'] - 1}", r["width"], r["holds"]] for r in layout.describe()],
                  caption=f"The residual stream: d_model = {layout.d_model}, named subspaces (circuits/layout.py).")
    return Section(
        "The residual stream, subspace by subspace",
        "The residual stream is a named basis: every dimension belongs to one subspace of the table below. "
        "Each block is read twice, after its attention and after its MLP: heads write into the staging slots "
        "(`Y_stage`, `C_stage`), and the MLP of the same block commits them into `Y` and `C` and empties the "
        "slots.",
        [table, views.residual_norms(run, streams=ctx.streams), views.residual_tokens(run, streams=ctx.streams)],
        key="residual",
    )


def _weights_section(run, ctx: ReportContext) -> Section:
    return Section(
        "The weights: QK and OV circuits in the named basis",
        "Each head's bilinear maps, from TransformerLens `FactoredMatrix` objects (`attn.QK[h]`, `attn.OV[h]`), "
        "with rows and columns labelled by the layout. QK: the row is what the query reads, the column what "
        "the key reads (the assignment head's `X` x `C` entry is `2 beta`). OV: the row is what the value reads "
        "on the attended token, the column what is written into the attending token (`ID` -> `Y_stage` in the "
        "assignment head, `X` and `C` -> `C_stage` in the update head). Layers with identical weights are shown "
        "once.",
        [views.qk_circuit(run), views.ov_circuit(run)],
        key="weights",
    )


def _verification_section(run, ctx: ReportContext) -> Section:
    return Section(
        "Verification against the reference, layer by layer",
        "Every block's output, decoded from the residual stream, is compared with the reference operation applied "
        "to the block's own input (step-wise), and the circuit's iterates with the reference run from the same "
        "initial centroids (trajectory). Ties (points whose nearest centroids are equally near within the stated "
        "window) are listed, not hidden.",
        [views.verification_table(run), views.objective_plot(run), views.ties_table(run)],
        key="verification",
    )


#: The default sections, in page order: (key, builder).
DEFAULT_SECTIONS: list[tuple[str, SectionBuilder]] = [
    ("trajectories", _trajectory_section),
    ("assign", _assign_section),
    ("update", _update_section),
    ("residual", _residual_section),
    ("weights", _weights_section),
    ("verification", _verification_section),
]

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
    """The full report of a verified run (:class:`~analysis.pipeline.RunResult`).

    ``problem`` (an :class:`analysis.commands._problem.Problem`) and ``seed`` describe where the data and the
    initial centroids came from; ``max_points`` bounds the points drawn per figure (``None``: all).
    """
    sample = views.point_sample(run, max_points)
    ctx = ReportContext(run, sample, problem)
    report = Report(build_header(run, problem, seed, title, sample))
    for key, builder in DEFAULT_SECTIONS:
        section = builder(run, ctx)
        section.key = key
        report.add_section(section)
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

    circ, enc, rep = run.circuit, run.encoded, run.report
    cfg = circ.model.cfg
    source = getattr(problem, "source", None) or "data given in Python"
    init = getattr(problem, "init", None) or "given centroids"
    if seed is not None and init in ("random", "k-means++"):
        init = f"{init} (seed {seed})"
    try:
        variant = get_variant(circ.variant)
    except KeyError:
        variant = None
    problem_facts = [
        Fact("data", source),
        Fact("points x dimensions", f"n = {enc.n:,}, d = {enc.d}"),
        Fact("clusters", f"k = {enc.k}"),
        Fact("iterations", f"T = {circ.iterations} ({rep.n_iter} until nothing changes)"),
        Fact("initial centroids", init),
        Fact("variant", circ.variant + (f": {variant.algorithm}" if variant else "")),
        Fact("checked against", str(getattr(rep, "reference", "Lloyd's k-means (circuits.reference.lloyd)"))),
    ]
    sharp = circ.sharpness
    s = float(enc.scaling.scale[0])
    user = sharp.in_user_units(s)
    kinds = schedule_text(circ.schedule)
    construction = [
        Fact("model", f"HookedTransformer, {cfg.n_layers} blocks: {kinds}", "U: update block, A: assign block"),
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
    if variant is not None and variant.alteration:
        construction.insert(0, Fact("alteration", variant.alteration))
    params = dict(getattr(circ, "params", {}) or {})
    if params:
        construction.append(Fact("variant parameters", ", ".join(f"{k} = {v:g}" for k, v in params.items()),
                                 "distances unit-scaled, like the knobs"))
    hooks = list(getattr(circ, "hooks", []) or [])
    if hooks:
        construction.append(Fact("permanent hooks", "; ".join(f"{name}: {what}" for name, what in hooks)))
    # NaN marks a certificate that does not apply (an update head whose normalisation a variant swapped).
    update_margins = [r.update_min_margin for r in rep.per_iteration if np.isfinite(r.update_min_margin)]
    update_leaks = [r.update_leak_bound for r in rep.per_iteration if np.isfinite(r.update_leak_bound)]
    leaks = [r.leak_bound for r in rep.per_iteration] + [rep.final_leak_bound]
    certificate = [
        Fact("smallest assignment margin", _g(rep.min_margin), "beta * gap (+ tie-break) over every point and layer"),
        Fact("largest assignment leak bound", _g(max(leaks)),
             "bounds the attention mass off the chosen centroid; 0 means exactly one-hot"),
        Fact("smallest update margin", _g(min(update_margins)) if update_margins else "n/a"),
        Fact("largest update leak bound", _g(max(update_leaks)) if update_leaks else "n/a"),
        Fact("hard attention everywhere", str(rep.hard_attention)),
        Fact("final label agreement", f"{rep.final_label_agreement:.2%}"),
        Fact("errors / ties", f"{len(rep.errors)} errors, {len(rep.ties)} ties "
                              f"({len(rep.tie_mismatches)} resolved unlike the reference)"),
        Fact("tolerances", f"centroids {rep.tolerances.centroid:.3g}, tie window {rep.tolerances.tie_window:.3g}",
             "in data units (squared for the tie window), derived from the dtype's eps"),
    ]
    messages = [f"failure: {f}" for f in rep.failures] + [f"note: {n}" for n in rep.notes]
    if sample is not None:
        messages.append(sample.note())
    return Header(
        title=title or f"k-means circuit report: {source}, k = {enc.k}",
        verdict=rep.verdict,
        verified=bool(rep.verified),
        exact=bool(rep.exact),
        groups={"Problem": problem_facts, "Construction": construction, "Certificate": certificate},
        messages=messages,
    )


# ---------------------------------------------------------------------------------------------------- rendering

CSS = """
:root { --ink: #1d232b; --muted: #5b6470; --rule: #d9dee5; --ok: #1b7837; --bad: #b2182b; --warn: #b26a00; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       margin: 0; background: #f6f7f9; }
main { max-width: 1280px; margin: 0 auto; padding: 24px 28px 80px; }
h1 { font-size: 26px; margin: 0 0 6px; }
h2 { font-size: 20px; margin: 0 0 8px; }
header.report { background: white; border: 1px solid var(--rule); border-radius: 8px; padding: 20px 24px; }
.verdict { display: inline-block; font-weight: 700; padding: 4px 12px; border-radius: 4px; color: white;
           margin: 4px 0 12px; }
.verdict.ok { background: var(--ok); } .verdict.bad { background: var(--bad); } .verdict.approx { background: var(--warn); }
.facts { display: grid; grid-template-columns: repeat(auto-fit, minmax(380px, 1fr)); gap: 12px 32px; }
.facts h3 { font-size: 14px; text-transform: uppercase; letter-spacing: .05em; color: var(--muted); margin: 8px 0 4px; }
.facts dl { margin: 0; display: grid; grid-template-columns: minmax(110px, 38%) 1fr; gap: 3px 12px; font-size: 14px; }
.facts dt { color: var(--muted); } .facts dd { margin: 0; font-variant-numeric: tabular-nums; }
.facts dd small { color: var(--muted); display: block; }
ul.messages { font-size: 14px; color: var(--muted); margin: 12px 0 0; padding-left: 20px; }
nav.toc { margin: 16px 0; font-size: 14px; } nav.toc a { margin-right: 14px; color: #2a5d9f; }
section.part { background: white; border: 1px solid var(--rule); border-radius: 8px; padding: 18px 24px;
               margin-top: 18px; }
section.part p { max-width: 980px; }
code { background: #eef1f4; padding: 0 4px; border-radius: 3px; font-size: 13px; }
.plot { width: 100%; min-height: 200px; }
.plot.failed { color: var(--bad); border: 1px dashed var(--bad); padding: 12px; }
p.note { font-size: 13px; color: var(--muted); margin: 2px 0 10px; }
table.data { border-collapse: collapse; font-size: 13px; margin: 8px 0 14px; }
table.data th, table.data td { border-bottom: 1px solid var(--rule); padding: 3px 10px; text-align: left; }
table.data caption { text-align: left; color: var(--muted); padding-bottom: 4px; }
footer { color: var(--muted); font-size: 12px; margin-top: 24px; }
"""

#: Draws every figure in page order, one per task so the page stays responsive, and publishes progress.
BOOT_JS = """
(function () {
  var template = JSON.parse(document.getElementById("kmeans-plotly-template").textContent);
  var config = {responsive: true, displaylogo: false, showLink: false, showSendToCloud: false};
  var divs = Array.prototype.slice.call(document.querySelectorAll("div.plot[data-figure]"));
  var state = window.kmeansReport = {total: divs.length, rendered: 0, failed: [], done: false, ms: null};
  var t0 = performance.now();
  function next(i) {
    if (i >= divs.length) {
      state.done = true; state.ms = performance.now() - t0;
      document.documentElement.setAttribute("data-report", "done");
      return;
    }
    var div = divs[i];
    var drawn;
    try {
      var spec = JSON.parse(document.getElementById(div.getAttribute("data-figure")).textContent);
      var layout = spec.layout || {};
      layout.template = JSON.parse(JSON.stringify(template));
      var own = div.getAttribute("data-modebar") === "off" ? Object.assign({}, config, {displayModeBar: false}) : config;
      drawn = Plotly.newPlot(div, spec.data || [], layout, own).then(function () {
        return spec.frames ? Plotly.addFrames(div, spec.frames) : null;
      });
    } catch (err) {
      drawn = Promise.reject(err);
    }
    Promise.resolve(drawn).then(function () {
      state.rendered += 1;
    }, function (err) {
      state.failed.push(div.id);
      div.className += " failed";
      div.textContent = "This figure could not be drawn: " + err;
      console.error("figure " + div.id + " could not be drawn: " + err);
    }).then(function () { setTimeout(function () { next(i + 1); }, 0); });
  }
  next(0);
})();
"""


def _text_html(text: str) -> str:
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    out = []
    for p in paras:
        esc = html.escape(p)
        esc = re.sub(r"`([^`]+)`", r"<code>\1</code>", esc)
        out.append(f"<p>{esc}</p>")
    return "\n".join(out)


def _json_script(element_id: str, payload: str) -> str:
    # "</" inside a script element would end it early; "<\/" is the same JSON string.
    return f'<script type="application/json" id="{element_id}">{payload.replace("</", "<" + chr(92) + "/")}</script>'


def _table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in table.header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in table.rows)
    caption = f"<caption>{html.escape(table.caption)}</caption>" if table.caption else ""
    return f'<table class="data">{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def figure_json(fig: go.Figure) -> str:
    """A figure as plotly JSON without its template (the page sets one shared template on every figure)."""
    spec = json.loads(pio.to_json(fig, validate=False))
    spec.get("layout", {}).pop("template", None)
    return json.dumps(spec, separators=(",", ":"), allow_nan=False)


def _template_json() -> str:
    from plotly.utils import PlotlyJSONEncoder

    template = pio.templates[pio.templates.default].to_plotly_json()
    return json.dumps(template, cls=PlotlyJSONEncoder, separators=(",", ":"))


def render_html(report: Report) -> str:
    """The report as one HTML document with plotly.js embedded once and no external reference."""
    counter = iter(range(1, 10**9))
    h = report.header
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(h.title)}</title>", f"<style>{CSS}</style>",
             f"<script>{get_plotlyjs()}</script>", "</head><body><main>"]
    cls = "ok" if h.verified and h.exact else "approx" if h.verified else "bad"
    facts = []
    for group, items in h.groups.items():
        rows = "".join(
            f"<dt>{html.escape(f.label)}</dt><dd>{html.escape(f.value)}"
            + (f"<small>{html.escape(f.help)}</small>" if f.help else "") + "</dd>"
            for f in items)
        facts.append(f"<div><h3>{html.escape(group)}</h3><dl>{rows}</dl></div>")
    messages = "".join(f"<li>{html.escape(m)}</li>" for m in h.messages)
    parts.append(
        f'<header class="report"><h1>{html.escape(h.title)}</h1>'
        f'<div class="verdict {cls}" id="verdict">{html.escape(h.verdict)}</div>'
        f'<div class="facts">{"".join(facts)}</div>'
        + (f'<ul class="messages">{messages}</ul>' if messages else "") + "</header>")
    toc = "".join(f'<a href="#{html.escape(s.key)}">{html.escape(s.title)}</a>' for s in report.sections)
    parts.append(f'<nav class="toc">{toc}</nav>')
    for s in report.sections:
        parts.append(f'<section class="part" id="{html.escape(s.key)}"><h2>{html.escape(s.title)}</h2>')
        parts.append(_text_html(s.text))
        for item in s.items:
            if isinstance(item, (View, go.Figure)):
                fig = item.figure if isinstance(item, View) else item
                n = next(counter)
                name = item.name if isinstance(item, View) else f"figure-{n}"
                bar = "" if any(t.type != "table" for t in fig.data) else ' data-modebar="off"'
                parts.append(f'<div class="plot" id="plot-{n}" data-view="{html.escape(name)}" '
                             f'data-figure="plot-{n}-json"{bar}></div>')
                parts.append(_json_script(f"plot-{n}-json", figure_json(fig)))
                if isinstance(item, View):
                    parts.extend(f'<p class="note">{html.escape(note)}</p>' for note in item.notes)
            elif isinstance(item, Table):
                parts.append(_table_html(item))
            elif isinstance(item, Html):
                parts.append(item.markup)
            else:
                raise TypeError(f"a section item must be a View, Figure, Table or Html, got {type(item).__name__}")
        parts.append("</section>")
    parts.append("<footer>kmeans-circuits report: self-contained (plotly.js embedded), opens offline.</footer>")
    parts.append(_json_script("kmeans-plotly-template", _template_json()))
    parts.append(f"<script>{BOOT_JS}</script></main></body></html>")
    return "\n".join(parts)
