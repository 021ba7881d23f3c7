"""Every heatmap a reader is shown can be read: checked in headless Chromium on the drift, patching and sweep pages.

Each page is made as a user makes it (a tiny checkpoint trained here, ``drift`` on it and on the learned
construction, ``patch`` on iris, ``sweep --grid tiny``) and opened offline through the DevTools protocol
(``tests/browser.py``). In the browser, every state a reader can reach with one control (each slider step, each
menu button) is applied with plotly's own ``Plotly.update``/``restyle``/``relayout``, and every visible heatmap is
read back from plotly's computed figure (``_fullData``: the colour range plotly actually drew with):

* its colour bar covers its data (no value beyond either end), and its data reaches over a quarter of the bar
  (:func:`reach`: a trained head whose peak is a twentieth of a shared bar is invisible);
* the drift page opens at a step where every attention panel has non-zero attention;
* no text on the page (HTML or the figures' SVG) reads ``nan``.

Panels on one colour axis (the sweep's betas, which share one scale so that they compare) are judged together: each
panel's data within the bar, and their data together reaching over a quarter of it. The sweep's panels must all be
on one scale (issue 39: each on its own bar hid the comparison across betas), and the patching page must state each
unpatched run's verdict as a badge that is the one in its ``patching.json``.

The checker is shown to fail on a heatmap drawn under a bar twenty times its data, on one whose data overflows its
bar, and on a page that prints ``nan``.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import plotly.graph_objects as go
import pytest

from analysis import report as R
from browser import Chromium, find_chromium, wait_drawn
from command_server import run_command

pytestmark = pytest.mark.skipif(find_chromium() is None,
                                reason="headless Chromium is not installed (apt-get install chromium)")

ROOT = Path(__file__).resolve().parents[2]
#: The least share of its colour bar a heatmap's data must span.
QUARTER = 0.25

#: For every figure: its heatmaps in the state it opens in and in every state one control reaches, as plotly drew
#: them (``_zmin``/``_zmax`` are the ends plotly computed when the figure leaves them automatic).
_RANGES_JS = r"""
(async function () {
  function stats(z) {
    var out = {min: Infinity, max: -Infinity, n: 0, bad: 0};
    function walk(v) {
      if (v === null || v === undefined) { return; }
      if (typeof v === "number") {
        if (!isFinite(v)) { out.bad++; return; }
        out.n++; if (v < out.min) { out.min = v; } if (v > out.max) { out.max = v; }
        return;
      }
      if (v.length !== undefined && typeof v !== "string") { for (var i = 0; i < v.length; i++) { walk(v[i]); } return; }
      out.bad++;
    }
    walk(z);
    return out;
  }
  function heatmaps(gd) {
    return (gd._fullData || []).filter(function (t) { return t.type === "heatmap" && t.visible === true; })
      .map(function (t) {
        var s = stats(t.z);
        var zmin = t._zmin !== undefined ? t._zmin : t.zmin, zmax = t._zmax !== undefined ? t._zmax : t.zmax;
        var axis = t.coloraxis ? gd._fullLayout[t.coloraxis] : null;
        if (axis) {
          zmin = axis._cmin !== undefined ? axis._cmin : axis.cmin;
          zmax = axis._cmax !== undefined ? axis._cmax : axis.cmax;
        }
        return {name: t.name || "", zmin: zmin, zmax: zmax, min: s.min, max: s.max, n: s.n, bad: s.bad,
                axis: t.coloraxis || null};
      });
  }
  function controls(gd) {
    var out = [], lay = gd.layout || {};
    (lay.sliders || []).forEach(function (s, si) {
      (s.steps || []).forEach(function (st, i) { out.push({label: "slider " + si + " step " + (st.label || i), c: st}); });
    });
    (lay.updatemenus || []).forEach(function (m, mi) {
      (m.buttons || []).forEach(function (b, i) { out.push({label: "menu " + mi + " " + (b.label || i), c: b}); });
    });
    return out;
  }
  var figs = Array.prototype.slice.call(document.querySelectorAll("div.plot[data-figure], .js-plotly-plot"));
  var result = [];
  for (var f = 0; f < figs.length; f++) {
    var gd = figs[f];
    if (!gd._fullLayout) { continue; }
    var name = gd.getAttribute("data-view") || gd.id || ("figure " + f);
    var states = [{label: "as opened", heatmaps: heatmaps(gd)}];
    var list = controls(gd);
    for (var i = 0; i < list.length; i++) {
      var c = list[i].c;
      if (!c.method || c.method === "skip" || c.method === "animate") { continue; }
      await Plotly[c.method].apply(null, [gd].concat(c.args || []));
      states.push({label: list[i].label, heatmaps: heatmaps(gd)});
    }
    result.push({view: name, states: states});
  }
  return result;
})()
"""

#: The text a reader sees: every text node outside scripts and styles, the figures' SVG text included.
_TEXT_JS = r"""
(function () {
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT), parts = [], node;
  while ((node = walker.nextNode())) {
    var p = node.parentNode && node.parentNode.nodeName.toLowerCase();
    if (p !== "script" && p !== "style") { parts.push(node.nodeValue); }
  }
  return parts.join(" ");
})()
"""


#: The verdict badges in the page's header.
_BADGES_JS = r"""
Array.prototype.map.call(document.querySelectorAll("header .badges .verdict"), function (b) {
  return {run: b.getAttribute("data-run"), verified: b.getAttribute("data-verified"), kind: b.getAttribute("data-kind"),
          text: b.textContent, bad: b.classList.contains("bad")};
})
"""


def read_page(browser: Chromium, path: Path) -> dict:
    """One opening of ``path`` (each costs Chromium about 2 s of compiling plotly.js): the page's visible text and
    its verdict badges as it opens, then every figure's heatmaps in every state one control reaches."""
    session = browser.open(path.resolve().as_uri(), width=1280, height=900)
    try:
        wait_drawn(browser, session, 120)
        browser.drain(0.5)
        text = browser.evaluate(session, _TEXT_JS)
        badges = browser.evaluate(session, _BADGES_JS)
        states = browser.evaluate(session, _RANGES_JS, await_promise=True)
    finally:
        browser.close_tab(session)
    return {"text": text, "badges": badges, "states": states}


def figure_states(browser: Chromium, path: Path) -> tuple[list[dict], str]:
    """Every figure's heatmaps in every state one control reaches, and the page's visible text."""
    seen = read_page(browser, path)
    return seen["states"], seen["text"]


def reach(h: dict) -> float:
    """How far into its colour bar a heatmap's data reaches: on a diverging bar (below and above 0) its largest
    magnitude over the bar's, otherwise its largest value's place on the bar (0 at the bottom, 1 at the top)."""
    lo, hi = h["zmin"], h["zmax"]
    if lo < 0 < hi:
        return max(abs(h["min"]), abs(h["max"])) / max(abs(lo), abs(hi))
    return (h["max"] - lo) / (hi - lo)


def shared_axes(heatmaps: list[dict]) -> list[dict]:
    """Heatmaps on one colour axis (a scale shared on purpose, so that panels compare) as one heatmap of all their
    data, named by their names; the others as they are."""
    out, groups = [], {}
    for h in heatmaps:
        if h.get("axis"):
            groups.setdefault(h["axis"], []).append(h)
        else:
            out.append(h)
    for axis, hs in groups.items():
        out.append({**hs[0], "name": f"{axis} ({', '.join(h['name'] for h in hs)})", "n": sum(h["n"] for h in hs),
                    "bad": sum(h["bad"] for h in hs), "min": min(h["min"] for h in hs if h["n"]) if any(
                        h["n"] for h in hs) else 0, "max": max(h["max"] for h in hs if h["n"]) if any(
                        h["n"] for h in hs) else 0})
    return out


def range_problems(states: list[dict]) -> list[str]:
    """Heatmaps whose colour bar does not cover their data, or whose data reaches under a quarter of the bar (for
    panels on one shared colour axis: all their data together, since comparing them is what it is shared for)."""
    out = []
    for fig in states:
        for state in fig["states"]:
            for h in shared_axes(state["heatmaps"]):
                where = f"{fig['view']} ({state['label']}) heatmap {h['name']!r}"
                if h["n"] == 0 or h["bad"]:
                    out.append(f"{where}: {h['n']} finite values, {h['bad']} not finite")
                    continue
                lo, hi = h["zmin"], h["zmax"]
                width = hi - lo
                slack = 1e-9 * max(abs(lo), abs(hi), 1e-300)
                if h["min"] < lo - slack or h["max"] > hi + slack:
                    out.append(f"{where}: data {h['min']:.4g}..{h['max']:.4g} beyond its bar {lo:.4g}..{hi:.4g}")
                elif width > 0 and reach(h) < QUARTER:
                    out.append(f"{where}: data {h['min']:.4g}..{h['max']:.4g} reaches under a quarter of its bar"
                               f" {lo:.4g}..{hi:.4g}")
    return out


def nan_problems(text: str) -> list[str]:
    import re

    return [f"rendered {m.group(0)!r} in ...{text[max(0, m.start() - 60):m.end() + 20]}..."
            for m in re.finditer(r"(?<![\w.])nan(?![\w])", text, flags=re.I)]


def first_step_attended(states: list[dict], view: str) -> list[str]:
    """The attention figure ``view`` opens with every panel holding non-zero attention."""
    fig = next(f for f in states if f["view"] == view)
    opened = fig["states"][0]["heatmaps"]
    if not opened:
        return [f"{view}: no attention panel drawn as the page opens"]
    return [f"{view}: panel {h['name']!r} is all zero as the page opens" for h in opened if h["max"] <= 0]


def run_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    res = run_command(*args, timeout=900, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return res


@pytest.fixture(scope="module")
def browser():
    with Chromium(timeout=180) as b:
        yield b


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """The pages, made as the README makes them, small: a tiny checkpoint trained here and its drift page, the
    learned construction's drift page, patching on iris, the tiny sweep."""
    tmp = tmp_path_factory.mktemp("pages")
    run_cli("train", "--d", 4, "--k", 5, "--n", 64, "--steps", 30, "--out", tmp / "tiny", cwd=tmp)
    run_cli("drift", "--checkpoint", tmp / "tiny", "--out", tmp / "drift.html", "--tasks", 3, "--steps", 4, cwd=tmp)
    run_cli("drift", "--construction", "learned", "--out", tmp / "learned.html", "--tasks", 2, "--steps", 3,
            "--n", 40, cwd=tmp)
    run_cli("patch", "--dataset", "iris", "--k", 3, "--seed", 1, "--iterations", 3, "--corruption", "move-point",
            "--out", tmp / "patch", cwd=tmp)
    run_cli("sweep", "--grid", "tiny", "--out", tmp / "sweep", cwd=tmp)
    return {"drift": tmp / "drift.html", "learned drift": tmp / "learned.html",
            "patching": tmp / "patch" / "patching.html", "sweep": tmp / "sweep" / "sweep.html"}


@pytest.fixture(scope="module")
def drawn(pages, browser):
    """page name -> :func:`read_page` of it, each page opened once for the tests below."""
    read = {}

    def get(page: str) -> dict:
        if page not in read:
            read[page] = read_page(browser, pages[page])
        return read[page]

    return get


@pytest.mark.parametrize("page", ["drift", "learned drift", "patching", "sweep"])
def test_every_heatmap_covers_its_data_and_no_nan_is_shown(drawn, page):
    states, text = drawn(page)["states"], drawn(page)["text"]
    assert states, "no figure was drawn"
    assert range_problems(states) == []
    assert nan_problems(text) == []
    if page == "drift":
        # Every state of the patterns' slider was reached and read, and the page opens where there is attention.
        patterns = next(f for f in states if f["view"] == "drift-patterns")
        assert len(patterns["states"]) > 2 and all(s["heatmaps"] for s in patterns["states"][1:])
        assert first_step_attended(states, "drift-patterns") == []


def test_the_sweeps_panels_share_one_colour_scale(pages, drawn):
    states = drawn("sweep")["states"]
    heatmaps = [h for fig in states for h in fig["states"][0]["heatmaps"]]
    rows = list(csv.DictReader(pages["sweep"].with_name("sweep.csv").open()))
    panels = {(r["grid"], r["beta"]) for r in rows}
    assert len(heatmaps) == len(panels) == 8  # the tiny grid: four pairs of axes at two betas
    assert len({(h["zmin"], h["zmax"]) for h in heatmaps}) == 1, [(h["zmin"], h["zmax"]) for h in heatmaps]
    lo, hi = heatmaps[0]["zmin"], heatmaps[0]["zmax"]
    assert lo <= min(h["min"] for h in heatmaps) and max(h["max"] for h in heatmaps) <= hi


def test_the_patching_page_badges_each_run_as_its_json_does(pages, drawn):
    doc = json.loads(pages["patching"].with_name("patching.json").read_text())["unpatched"]
    badges, text = drawn("patching")["badges"], drawn("patching")["text"]
    assert [b["run"] for b in badges] == ["clean", "corrupted"]
    for badge in badges:
        record = doc[badge["run"]]
        assert badge["verified"] == str(record["verified"]).lower() and badge["bad"] == (not record["verified"])
        assert badge["text"] == f"{badge['run']} run: {record['verdict']}" and badge["kind"] == record["verdict_kind"]
        if not record["verified"]:  # the cause is on the badge: the first failure
            assert record["failures"] and record["failures"][0] in badge["text"]
    assert "Both unpatched runs" not in text


# ---------------------------------------------------------------------------------- the checker can fail


def tiny_page(tmp_path: Path, name: str, *items, text: str = "") -> Path:
    page = R.render_html(R.Report(R.Header("t", "VERIFIED", True, True, {}, messages=[text] if text else []),
                                  [R.Section("S", "", list(items))]))
    path = tmp_path / f"{name}.html"
    path.write_text(page)
    return path


@pytest.fixture(scope="module")
def checker_pages(tmp_path_factory, browser) -> dict:
    """Two tiny pages, each opened once: a good one (a heatmap on its own bar, one on an automatic bar) and a bad
    one (a heatmap washed out under a bar twenty times its data, one overflowing its bar, a slider whose second step
    is washed out, an all-zero panel, and a header that prints ``nan``). Each figure's states, and each page's
    text."""
    tmp = tmp_path_factory.mktemp("checker")
    good = go.Figure(go.Heatmap(z=[[0.0, 0.05], [0.01, 0.02]], zmin=0, zmax=0.05, name="own"))
    automatic = go.Figure(go.Heatmap(z=[[1.0, 2.0]]))
    washed = go.Figure(go.Heatmap(z=[[0.0, 0.05], [0.01, 0.02]], zmin=0, zmax=1.0, name="shared"))
    clipped = go.Figure(go.Heatmap(z=[[0.0, 2.0], [0.5, 1.0]], zmin=0, zmax=1.0, name="clipped"))
    # A slider whose second step shows a washed-out trace: states behind a control are read too.
    stepped = go.Figure([go.Heatmap(z=[[0.0, 1.0]], zmin=0, zmax=1, name="a"),
                         go.Heatmap(z=[[0.0, 0.1]], zmin=0, zmax=1, name="b", visible=False)])
    stepped.update_layout(sliders=[dict(steps=[dict(method="update", label="0", args=[{"visible": [True, False]}]),
                                               dict(method="update", label="1", args=[{"visible": [False, True]}])])])
    zero = go.Figure(go.Heatmap(z=[[0.0, 0.0]], zmin=0, zmax=1e-12, name="update"))
    return {"good": figure_states(browser, tiny_page(tmp, "good", good, automatic)),
            "bad": figure_states(browser, tiny_page(tmp, "bad", washed, clipped, stepped, zero,
                                                    text="update margin nan"))}


def test_the_checker_catches_a_washed_out_panel_an_overflowing_bar_and_a_nan(checker_pages):
    states, text = checker_pages["good"]
    assert len(states) == 2 and range_problems(states) == [] and nan_problems(text) == []
    assert first_step_attended([{**states[0], "view": "p"}], "p") == []
    states, text = checker_pages["bad"]
    assert len(states) == 4
    # Each bad figure is caught, once, and named: the checker judges figure by figure.
    for fig, bad in zip(states, ("'shared'", "'clipped'", "slider 0 step 1", "'update'")):
        problems = range_problems([fig])
        assert len(problems) == 1 and bad in problems[0], problems
    assert nan_problems(text) and not nan_problems("nano finance, 1.5nan-free")
    assert first_step_attended([{**states[3], "view": "p"}], "p") == ["p: panel 'update' is all zero as the page opens"]


def test_json_of_the_checker_is_plain(checker_pages):
    """The states come back as plain JSON (numbers, not typed arrays), so a failure message can quote them."""
    states, _ = checker_pages["good"]
    assert json.loads(json.dumps(states))[1]["states"][0]["heatmaps"][0]["max"] == 2.0
