"""What every page carries besides its content: its stylesheet (:data:`CSS`), the script that draws its figures one
after another and publishes its progress (:data:`BOOT_JS`), and plotly.js, embedded in the page or written once as
a shared, versioned file beside it (:data:`PLOTLY_JS_MODES`, :func:`write_plotly_js`). :mod:`analysis.report.document`
renders pages with them.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from plotly.offline import get_plotlyjs

from circuits.files import write_text_atomic

#: The page's stylesheet: the header, its verdict badges and facts, the sections, tables, notes and caveats.
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
pre { font-size: 13px; white-space: pre-wrap; }
.plot { width: 100%; min-height: 200px; }
.plot.failed { color: var(--bad); border: 1px dashed var(--bad); padding: 12px; }
p.note { font-size: 13px; color: var(--muted); margin: 2px 0 10px; }
p.caveat { font-size: 14px; color: var(--ink); background: #fff4e0; border-left: 4px solid var(--warn);
           padding: 6px 10px; margin: 8px 0; max-width: 980px; }
div.badges { display: flex; flex-direction: column; gap: 6px; margin: 4px 0 12px; }
div.badges .verdict { margin: 0; font-weight: 600; } div.badges .verdict b { font-weight: 800; }
table.data { border-collapse: collapse; font-size: 13px; margin: 8px 0 14px; }
table.data th, table.data td { border-bottom: 1px solid var(--rule); padding: 3px 10px; text-align: left; }
table.data caption { text-align: left; color: var(--muted); padding-bottom: 4px; }
table.data[data-view] td { white-space: nowrap; font-variant-numeric: tabular-nums; }
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


#: How a page gets plotly.js: embedded in the page, or one shared file beside it (see the module docstring).
PLOTLY_JS_MODES = ("inline", "shared")


def plotly_js_name() -> str:
    """File name of the shared plotly.js: versioned, so reports written by different plotly versions can share a
    folder without one overwriting the library another needs."""
    import plotly

    return f"plotly-{plotly.__version__}.min.js"


def write_plotly_js(folder: str | os.PathLike) -> Path:
    """Write plotly.js into ``folder`` as :func:`plotly_js_name` (atomically; skipped when it is already there
    with the same content) and return its path."""
    path = Path(folder) / plotly_js_name()
    code = get_plotlyjs()
    if path.is_file() and path.stat().st_size == len(code.encode("utf-8")) and path.read_text("utf-8") == code:
        return path
    return write_text_atomic(path, code)


def plotly_script(mode: str) -> str:
    """The page's plotly.js: embedded (``"inline"``) or the shared file beside it (``"shared"``)."""
    if mode == "inline":
        return f"<script>{get_plotlyjs()}</script>"
    if mode == "shared":
        return f'<script src="{html.escape(plotly_js_name())}"></script>'
    raise ValueError(f"plotly_js must be one of {', '.join(PLOTLY_JS_MODES)}, got {mode!r}")
