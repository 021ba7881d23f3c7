"""Self-contained HTML pages: the document engine and the reports built on it.

* :mod:`~analysis.report.document` — the engine: a :class:`Report` (header and sections of figures, tables and
  text) rendered as one HTML file with plotly.js embedded, which opens offline; :func:`page` for a plain page.
* :mod:`~analysis.report.assets` — what every page carries: its stylesheet, the script that draws its figures, and
  plotly.js (embedded, or one shared file beside the pages).
* :mod:`~analysis.report.circuit` — the circuit report of a verified run (:func:`build_report`) and the ways to
  extend it (:func:`register_section`, :meth:`Report.add_section`).
* :mod:`~analysis.report.drift` — what training changed (:func:`drift_report`).

The patching page (:mod:`analysis.patching.report`) and the sweep page (:func:`analysis.sweep.figures.sweep_html`) are
drawn by the same engine.

Names are imported on first use, so that the engine (plotly only) stays cheap for pages that need no circuit.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    **dict.fromkeys(["Badge", "Fact", "FigureItem", "Header", "Html", "Item", "Report", "Section", "Table",
                     "figure_json", "page", "render_html", "slug", "write_text_atomic"], "document"),
    **dict.fromkeys(["BOOT_JS", "CSS", "PLOTLY_JS_MODES", "plotly_js_name", "write_plotly_js"], "assets"),
    **dict.fromkeys(["DEFAULT_SECTIONS", "ReportContext", "SectionBuilder", "build_header", "build_report",
                     "register_section", "schedule_text", "unregister_section"], "circuit"),
    "drift_report": "drift",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
