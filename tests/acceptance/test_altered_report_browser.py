"""The report of a run a user altered with hooks shows that run, in a real browser (issue 39).

Wine (T = 5), run by the user with TransformerLens hooks and read back with ``build_report((cache, encoded))``:
zeroing ``blocks.5.hook_mlp_out`` (the assign block of t = 2 stages its assignment and does not commit it), and
zeroing ``blocks.5.attn.hook_pattern`` (that head attends nowhere). Headless Chromium opens each page offline; what
it drew is read back from plotly's own figure data and compared with the user's cache, read directly here:

* the residual-norm heatmaps are the cache's norms, cell by cell (``Y_stage`` full after L5's MLP, as it ran; a
  re-run without the hooks, which the page drew before, empties it);
* the assign panel of L5 is the cache's pattern (all zero), with a caveat above the figure saying a hook replaced it;
* the header's "hard attention everywhere" and leak bound are those of the patterns that ran, and the convergence
  line is what the cache's iterates show.

Skipped only when no Chromium is installed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_wine

from analysis.pipeline import run_problem
from analysis.report import build_report
from browser import Chromium, check_page, find_chromium
from circuits import hook_names
from circuits.initialisation import initial_centroids

pytestmark = pytest.mark.skipif(find_chromium() is None,
                                reason="headless Chromium is not installed (apt-get install chromium)")

LAYER = 5

READ_JS = r"""
(async function () {
  var maps = [];
  var plots = Array.prototype.slice.call(document.querySelectorAll("div.plot[data-figure]"));
  // Every trace shown (the slider shows one layer at a time; plotly computes only what is visible).
  for (var i = 0; i < plots.length; i++) { await Plotly.restyle(plots[i], {visible: true}); }
  plots.forEach(function (gd) {
    (gd._fullData || []).forEach(function (t) {
      if (t.type !== "heatmap") { return; }
      var z = Array.from(t.z || []).map(function (row) { return Array.from(row); });
      maps.push({view: gd.getAttribute("data-view"), name: t.name || "", z: z, x: Array.from(t.x || []),
                 y: Array.from(t.y || [])});
    });
  });
  var facts = {};
  document.querySelectorAll(".facts dt").forEach(function (dt) {
    var dd = dt.nextElementSibling;
    facts[dt.textContent] = dd.firstChild ? dd.firstChild.textContent : "";
  });
  // Each caveat with the view of the first figure after it in the page.
  var caveats = Array.prototype.map.call(document.querySelectorAll("p.caveat"), function (p) {
    var next = p.nextElementSibling;
    while (next && !(next.classList.contains("plot"))) { next = next.nextElementSibling; }
    return {text: p.textContent, of: p.getAttribute("data-caveat-of"), before: next ? next.getAttribute("data-view") : null};
  });
  return {heatmaps: maps, facts: facts, caveats: caveats};
})()
"""


@pytest.fixture(scope="module")
def browser():
    with Chromium(timeout=180) as b:
        yield b


@pytest.fixture(scope="module")
def clean():
    X = load_wine().data
    return run_problem(X, initial_centroids(X, 3, "k-means++", seed=0), iterations=5)


def ablated_page(clean, hook: str, tmp_path_factory):
    def zero(value, hook):
        return torch.zeros_like(value)

    with clean.circuit.model.hooks(fwd_hooks=[(hook, zero)]):
        _, cache = clean.circuit.model.run_with_cache(clean.encoded.resid)
    path = tmp_path_factory.mktemp("altered") / "report.html"
    build_report((cache, clean.encoded)).write(path)
    return path, cache


def read(browser, path) -> dict:
    check = check_page(path, browser, timeout=120, read=READ_JS, await_promise=True)
    assert check.problems() == []
    return check.read


def test_residual_norms_on_the_page_are_the_ablated_cache(clean, browser, tmp_path_factory):
    path, cache = ablated_page(clean, hook_names.mlp_out(LAYER), tmp_path_factory)
    seen = read(browser, path)
    seq, layout, circ = clean.encoded.sequence, clean.circuit.layout, clean.circuit
    hooks = {"input": hook_names.resid_pre(0)}
    for layer in range(circ.n_layers):
        hooks[f"L{layer} {circ.schedule[layer]}, after attn"] = hook_names.resid_mid(layer)
        hooks[f"L{layer} {circ.schedule[layer]}, after MLP"] = hook_names.resid_post(layer)
    panels = [h for h in seen["heatmaps"] if h["view"] == "residual_norms"]
    assert [p["name"] for p in panels] == ["bos tokens", "point tokens", "centroid tokens"]
    for panel, kind in zip(panels, ("bos", "point", "centroid")):
        assert panel["y"] == list(hooks) and panel["x"] == list(layout.names)
        for r, label in enumerate(panel["y"]):
            tokens = cache[hooks[label]][0, seq.positions(kind)].numpy()
            expected = [np.linalg.norm(tokens[:, layout[name]], axis=-1).mean() for name in layout.names]
            np.testing.assert_allclose(panel["z"][r], expected, rtol=1e-12, atol=1e-15, err_msg=f"{kind} {label}")
    point = panels[1]
    after = point["y"].index(f"L{LAYER} assign, after MLP")
    assert point["z"][after][point["x"].index("Y_stage")] == pytest.approx(1.0)
    # The header: this run never settles (its table shows the centroids moving at t = 4 and 5).
    assert "not converged" in seen["facts"]["iterations"]


def test_a_zeroed_pattern_is_drawn_as_it_ran_and_the_header_says_so(clean, browser, tmp_path_factory):
    path, cache = ablated_page(clean, hook_names.pattern(LAYER), tmp_path_factory)
    seen = read(browser, path)
    seq = clean.encoded.sequence
    panel = next(h for h in seen["heatmaps"] if h["view"] == "assign_attention" and h["name"] == f"L{LAYER} assign")
    ran = cache[hook_names.pattern(LAYER)][0, 0, seq.points][:, seq.centroids].numpy()
    assert not ran.any() and np.array_equal(np.array(panel["z"]), np.zeros((seq.n, seq.k)))
    caveat = next(c for c in seen["caveats"] if c["of"] == "assign_attention")
    assert caveat["before"] == "assign_attention" and f"L{LAYER} assign ({seq.n} query rows)" in caveat["text"]
    # Hard attention and the leak bound are those of the patterns that ran: a zeroed row is 1 from one-hot.
    assert seen["facts"]["hard attention everywhere"] == "False"
    assert seen["facts"]["largest assignment leak bound"] == "no bound"


def test_weights_edited_after_the_build_are_named_in_the_header_and_above_the_weight_views(browser, tmp_path_factory):
    """An ablation through ``.data`` (the L2 update MLP's output weights halved) on a fresh wine circuit: the page's
    header names the parameter in its own line, the verdict names it as what altered the run, and the caveat above
    the QK and OV views says they draw the weights as they ran."""
    from analysis.capture import capture
    from analysis.pipeline import as_run

    X = load_wine().data
    run = run_problem(X, initial_centroids(X, 3, "k-means++", seed=0), iterations=5)
    run.circuit.model.blocks[2].mlp.W_out.data.mul_(0.5)
    edited = as_run(capture(run.circuit, run.encoded))
    path = tmp_path_factory.mktemp("edited") / "report.html"
    build_report(edited).write(path)
    seen = read(browser, path)
    assert seen["facts"]["weights changed since the build"] == "1 parameter(s): blocks.2.mlp.W_out"
    for view in ("qk_circuit", "ov_circuit"):
        caveat = next(c for c in seen["caveats"] if c["of"] == view)
        assert caveat["before"] == view and "blocks.2.mlp.W_out" in caveat["text"] and "as they ran" in caveat["text"]
    assert not edited.report.verified and "weight blocks.2.mlp.W_out" in edited.report.verdict
