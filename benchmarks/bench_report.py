"""Benchmark: size and render time of the HTML report at n = 2,000, with and without subsampled drawing.

For each setting it runs the circuit (blobs, d=8, k=10, T=10, float64), verifies it, builds the report, writes it,
and opens it in headless Chromium offline (``tests/browser.py``), recording:

* ``build s``: building the report from the verified run (views, residual re-run, HTML), not the run itself;
* ``MiB``: the HTML file (plotly.js, about 4.6 MiB, is embedded once);
* ``render ms``: the page's own measure, from its first script to the last figure drawn
  (``window.kmeansReport.ms``); ``load+render s``: from navigation until every figure is drawn;
* ``slider ms``: the slowest response to a slider step or menu choice (``Plotly.update`` with that step's
  arguments, awaited), over every step of every figure: what a reader waits for when dragging a slider;
* ``problems``: what the browser check found (should be none).

Run: ``python benchmarks/bench_report.py [--n 2000] [--max-points 400 0]`` (0 draws every point).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import warnings
from pathlib import Path

#: The browser driver is test tooling (tests/browser.py), not part of the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


#: Applies every slider step and menu button of every figure in turn and returns the slowest, in ms.
STEP_JS = """
(async function () {
  var worst = 0;
  var divs = document.querySelectorAll("div.plot[data-figure]");
  for (var d = 0; d < divs.length; d++) {
    var gd = divs[d], lay = gd.layout || {};
    var steps = [];
    (lay.sliders || []).forEach(function (s) { steps = steps.concat(s.steps || []); });
    (lay.updatemenus || []).forEach(function (u) { steps = steps.concat(u.buttons || []); });
    for (var i = 0; i < steps.length; i++) {
      var a = steps[i].args || [];
      var t0 = performance.now();
      await Plotly.update(gd, a[0] || {}, a[1] || {});
      worst = Math.max(worst, performance.now() - t0);
    }
  }
  return worst;
})()
"""


def slowest_step_ms(browser, path: Path) -> float:
    from browser import wait_drawn

    session = browser.open(path.resolve().as_uri())
    try:
        wait_drawn(browser, session, math.inf)
        return float(browser.evaluate(session, STEP_JS, await_promise=True))
    finally:
        browser.close_tab(session)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--max-points", type=int, nargs="+", default=[400, 0])
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")

    import torch
    from sklearn.datasets import make_blobs

    from browser import Chromium, check_page
    from analysis.pipeline import run_problem
    from analysis.report import build_report
    from circuits.initialisation import initial_centroids

    torch.set_num_threads(2)
    X, _ = make_blobs(n_samples=args.n, n_features=args.d, centers=args.k, random_state=0)
    C0 = initial_centroids(X, args.k, "k-means++", seed=0)
    t0 = time.perf_counter()
    run = run_problem(X, C0, args.iterations)
    run_s = time.perf_counter() - t0
    print(f"report benchmark: blobs n={args.n} d={args.d} k={args.k} T={args.iterations}; run + verify {run_s:.1f} s, "
          f"verified {run.report.verified}")
    print(f"{'drawn':>7} {'build s':>8} {'MiB':>6} {'render ms':>10} {'load+render s':>14} {'slider ms':>10}  problems")
    with tempfile.TemporaryDirectory() as tmp, Chromium(timeout=300) as browser:
        for m in args.max_points:
            t0 = time.perf_counter()
            report = build_report(run, max_points=m or None)
            path = report.write(Path(tmp) / f"report-{m}.html")
            build_s = time.perf_counter() - t0
            check = check_page(path, browser, timeout=300)
            slowest = slowest_step_ms(browser, path)
            drawn = m if m and m < args.n else args.n
            print(f"{drawn:>7} {build_s:>8.1f} {path.stat().st_size / 2**20:>6.2f} {check.state['ms']:>10.0f}"
                  f" {check.load_ms / 1e3:>14.2f} {slowest:>10.0f}  {check.problems() or 'none'}")


if __name__ == "__main__":
    main()
