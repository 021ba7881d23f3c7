"""The HTML document engine: one self-contained page of sections of figures, tables and text.

Every page the toolkit writes goes through here: the circuit report (:mod:`analysis.report.circuit`), the drift
report (:mod:`analysis.report.drift`), the activation-patching page (:mod:`analysis.patching.report`) and the
finite-temperature sweep (:mod:`analysis.sweep`). A :class:`Report` is a :class:`Header` (a title and, where the
page has them, a verdict, groups of facts and messages) followed by :class:`Section` objects, each a title, some
explanatory text and a list of items: a :class:`FigureItem` (a figure with a name and notes, such as
:class:`analysis.views.View`; its ``caveats``, where it has them, are printed above the figure: what the figure
cannot show of the run it describes), a plotly figure, a :class:`Table` or trusted :class:`Html`. A page about
several runs (the patching page: the clean and the corrupted run) gives each its own :class:`Badge`. :func:`page` is the
shortest way to a page: a title, some HTML and figures.

:meth:`Report.to_html` embeds plotly.js once (in the page head) and each figure as a JSON block drawn by one
small script, figure after figure, yielding to the browser between them; the page references no external URL
and makes no network request (``tests/acceptance/test_report_browser.py`` checks both in headless Chromium). Progress is
published as ``window.kmeansReport = {total, rendered, failed, done, ms}`` so a browser test (or a curious
reader's console) can see what drew.

For a folder of reports, ``plotly_js="shared"`` (:meth:`Report.write`, ``kmeans-circuits report --plotly-js
shared``) writes plotly.js once, as ``plotly-<version>.min.js`` beside the page, and references it by that
relative name: the page still opens offline (``file://``) and makes no request outside its folder, and a
hundred reports share one 4.6 MiB file instead of embedding it a hundred times.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Protocol, Union, runtime_checkable

import plotly.graph_objects as go
import plotly.io as pio

from analysis.report.assets import BOOT_JS, CSS, plotly_js_name, plotly_script, write_plotly_js
from circuits.files import write_text_atomic


@runtime_checkable
class FigureItem(Protocol):
    """A named figure with notes printed under it (:class:`analysis.views.View` is one). The engine needs no more,
    so it does not import the views (which import the circuit and torch)."""

    name: str
    figure: go.Figure
    notes: list[str]


@dataclass
class Table:
    """An HTML table (header row plus rows of cells, written as text): every row is on the page, none scrolled out
    of view. ``name`` marks it for whoever reads the page (``data-view``, as a figure's); ``notes`` are printed
    under it."""

    header: list[str]
    rows: list[list[object]]
    caption: str = ""
    name: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class Html:
    """Trusted HTML inserted as is (for content a section builds itself; never user input)."""

    markup: str


Item = Union[FigureItem, go.Figure, Table, Html]


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
class Badge:
    """The verdict of one run of a page about several runs: ``label`` names the run (``"clean run"``), ``text`` is
    its verdict with its cause; coloured like the header's verdict, written with ``data-run``, ``data-verified`` and
    ``data-kind`` for whoever reads the page."""

    key: str
    label: str
    text: str
    verified: bool
    exact: bool = False
    kind: str = ""


@dataclass
class Header:
    """The top of a page: its title and, where the page has them, a verdict (coloured by ``verified`` and
    ``exact``), groups of :class:`Fact` lines and messages."""

    title: str
    verdict: str = ""
    verified: bool = False
    exact: bool = False
    groups: dict[str, list[Fact]] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    #: The verdict's kind in the vocabulary of :mod:`analysis.verify.verdict` (``exact``, ``variant``, ...), written
    #: on the badge as ``data-kind`` for whoever reads the page.
    verdict_kind: str = ""
    #: One badge per run, for a page about several runs (below the verdict, if there is one).
    badges: list[Badge] = field(default_factory=list)


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
                if isinstance(item, FigureItem):
                    out.append(item.figure)
                elif isinstance(item, go.Figure):
                    out.append(item)
        return out

    def to_html(self, plotly_js: str = "inline") -> str:
        return render_html(self, plotly_js)

    def write(self, path: str | os.PathLike, plotly_js: str = "inline") -> Path:
        """Write the HTML atomically (a temporary sibling renamed into place); with ``plotly_js="shared"`` also
        plotly.js beside it (:func:`write_plotly_js`), first, so the page never references a missing file."""
        path = Path(path)
        if plotly_js == "shared":
            write_plotly_js(path.parent)
        return write_text_atomic(path, self.to_html(plotly_js))


# ---------------------------------------------------------------------------------------------------- rendering


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
    name = f' data-view="{html.escape(table.name)}"' if table.name else ""
    notes = "".join(f'<p class="note">{html.escape(note)}</p>' for note in table.notes)
    return f'<table class="data"{name}>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}'


def figure_json(fig: go.Figure) -> str:
    """A figure as plotly JSON without its template (the page sets one shared template on every figure)."""
    spec = json.loads(pio.to_json(fig, validate=False))
    spec.get("layout", {}).pop("template", None)
    return json.dumps(spec, separators=(",", ":"), allow_nan=False)


def _template_json() -> str:
    from plotly.utils import PlotlyJSONEncoder

    template = pio.templates[pio.templates.default].to_plotly_json()
    return json.dumps(template, cls=PlotlyJSONEncoder, separators=(",", ":"))


def _header_html(h: Header) -> str:
    facts = []
    for group, items in h.groups.items():
        rows = "".join(
            f"<dt>{html.escape(f.label)}</dt><dd>{html.escape(f.value)}"
            + (f"<small>{html.escape(f.help)}</small>" if f.help else "") + "</dd>"
            for f in items)
        facts.append(f"<div><h3>{html.escape(group)}</h3><dl>{rows}</dl></div>")
    messages = "".join(f"<li>{html.escape(m)}</li>" for m in h.messages)
    badges = badges_html(h.badges)
    return (f'<header class="report"><h1>{html.escape(h.title)}</h1>'
            + (f'<div class="verdict {_badge_class(h.verified, h.exact)}" id="verdict"'
               f' data-verified="{str(h.verified).lower()}" data-kind="{html.escape(h.verdict_kind)}">'
               f"{html.escape(h.verdict)}</div>" if h.verdict else "")
            + badges
            + (f'<div class="facts">{"".join(facts)}</div>' if facts else "")
            + (f'<ul class="messages">{messages}</ul>' if messages else "") + "</header>")


def badges_html(badges: Sequence[Badge]) -> str:
    """One coloured badge per run (:class:`Badge`), stacked; empty for none. Each has the id ``verdict-<key>``."""
    if not badges:
        return ""
    return '<div class="badges">' + "".join(
        f'<div class="verdict {_badge_class(b.verified, b.exact)}" id="verdict-{html.escape(b.key)}"'
        f' data-run="{html.escape(b.key)}" data-verified="{str(b.verified).lower()}" data-kind="{html.escape(b.kind)}">'
        f"<b>{html.escape(b.label)}:</b> {html.escape(b.text)}</div>" for b in badges) + "</div>"


def _badge_class(verified: bool, exact: bool) -> str:
    return "ok" if verified and exact else "approx" if verified else "bad"


def _figure_html(item: FigureItem | go.Figure, n: int) -> list[str]:
    """The figure's caveats (what it cannot show of the run, above it), the placeholder the boot script draws into,
    the figure's JSON and (for a named figure) its notes."""
    fig = item if isinstance(item, go.Figure) else item.figure
    name = f"figure-{n}" if isinstance(item, go.Figure) else item.name
    bar = "" if any(t.type != "table" for t in fig.data) else ' data-modebar="off"'
    caveats = [] if isinstance(item, go.Figure) else list(getattr(item, "caveats", None) or [])
    out = [f'<p class="caveat" data-caveat-of="{html.escape(name)}">{html.escape(c)}</p>' for c in caveats]
    out += [f'<div class="plot" id="plot-{n}" data-view="{html.escape(name)}" data-figure="plot-{n}-json"{bar}></div>',
            _json_script(f"plot-{n}-json", figure_json(fig))]
    if not isinstance(item, go.Figure):
        out.extend(f'<p class="note">{html.escape(note)}</p>' for note in item.notes)
    return out


def _section_html(s: Section, counter) -> list[str]:
    title = f"<h2>{html.escape(s.title)}</h2>" if s.title else ""
    parts = [f'<section class="part" id="{html.escape(s.key)}">{title}', _text_html(s.text)]
    for item in s.items:
        if isinstance(item, (go.Figure, FigureItem)):
            parts.extend(_figure_html(item, next(counter)))
        elif isinstance(item, Table):
            parts.append(_table_html(item))
        elif isinstance(item, Html):
            parts.append(item.markup)
        else:
            raise TypeError(f"a section item must be a View, Figure, Table or Html, got {type(item).__name__}")
    parts.append("</section>")
    return parts


def render_html(report: Report, plotly_js: str = "inline") -> str:
    """The report as one HTML document: plotly.js embedded once (``plotly_js="inline"``) or referenced as the
    sibling file :func:`plotly_js_name` (``"shared"``); no other reference outside the page."""
    counter = iter(range(1, 10**9))
    h = report.header
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(h.title)}</title>", f"<style>{CSS}</style>",
             plotly_script(plotly_js), "</head><body><main>", _header_html(h)]
    if len(report.sections) > 1:  # a table of contents helps only where there is more than one section
        toc = "".join(f'<a href="#{html.escape(s.key)}">{html.escape(s.title)}</a>' for s in report.sections)
        parts.append(f'<nav class="toc">{toc}</nav>')
    for s in report.sections:
        parts.extend(_section_html(s, counter))
    where = "plotly.js embedded" if plotly_js == "inline" else f"plotly.js in the sibling file {plotly_js_name()}"
    parts.append(f"<footer>kmeans-circuits report: {html.escape(where)}; opens offline.</footer>")
    parts.append(_json_script("kmeans-plotly-template", _template_json()))
    parts.append(f"<script>{BOOT_JS}</script></main></body></html>")
    return "\n".join(parts)


def page(title: str, intro_html: str, figures: Sequence[go.Figure | FigureItem] = ()) -> str:
    """A page of one untitled section: trusted ``intro_html``, then ``figures``; rendered by :func:`render_html`."""
    return render_html(Report(Header(title), [Section("", items=[Html(intro_html), *figures], key="main")]))
