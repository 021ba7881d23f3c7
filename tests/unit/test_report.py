"""The report: its sections and the public ways to extend it, the HTML it renders, and the ``report`` command.

The browser's view of the same HTML (does every figure draw, offline, without errors?) is in
``test_report_browser.py``.
"""

import json
import re
import sys

import numpy as np
import plotly.graph_objects as go
import pytest
from plotly.offline import get_plotlyjs
from sklearn.datasets import load_iris, make_blobs

from circuits.tl import TL_MAJOR
from analysis import report as R
from analysis.report.document import _json_script
from browser import static_external_references
from analysis.cli import main
from analysis.pipeline import run_problem
from circuits.initialisation import initial_centroids
from circuits.sharpness import Sharpness
from conftest import run_circuit

DEFAULT_KEYS = ["trajectories", "assign", "update", "residual", "weights", "verification"]
DEFAULT_VIEWS = ["centroid_trajectories", "assign_attention", "update_attention", "residual_norms", "residual_tokens",
                 "qk_circuit", "ov_circuit", "objective", "ties"]


@pytest.fixture(scope="module")
def iris_run():
    X = load_iris().data
    return run_circuit(X, initial_centroids(X, 3, "random", 0), 3)


@pytest.fixture(scope="module")
def iris_report(iris_run):
    return R.build_report(iris_run)


@pytest.fixture(scope="module")
def iris_html(iris_report):
    return iris_report.to_html()


def figure_blocks(page: str) -> dict[str, dict]:
    """The JSON of every figure placeholder, keyed by the view it belongs to."""
    out = {}
    for div_id, view, json_id in re.findall(r'<div class="plot" id="([^"]+)" data-view="([^"]+)" data-figure="([^"]+)"',
                                            page):
        body = re.search(rf'<script type="application/json" id="{json_id}">(.*?)</script>', page, re.S).group(1)
        out[view] = json.loads(body.replace("<\\/", "</"))
    return out


def array_len(value) -> int:
    """Length of a plotly JSON array, plain or typed (``{"dtype": "f8", "bdata": base64}``)."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        shape = value.get("shape")
        if shape:
            return int(str(shape).split(",")[0])
        return len(base64.b64decode(value["bdata"])) // np.dtype(value["dtype"]).itemsize
    return len(value)


# ------------------------------------------------------------------------------------------------ structure


def test_default_sections_in_order_with_every_view(iris_report):
    assert [s.key for s in iris_report.sections] == DEFAULT_KEYS
    names = [item.name for s in iris_report.sections for item in s.items if hasattr(item, "figure")]
    assert names == DEFAULT_VIEWS
    assert len(iris_report.figures()) == len(DEFAULT_VIEWS)
    # The layout table sits in the residual section, one row per subspace.
    table = next(i for i in iris_report.section("residual").items if isinstance(i, R.Table))
    assert [row[0] for row in table.rows] == list(iris_report_layout_names())
    # The verification table is an HTML table of every t = 0 .. T (a plotly table scrolled its last rows away).
    table = next(i for i in iris_report.section("verification").items if isinstance(i, R.Table))
    assert table.name == "verification_table" and [row[0] for row in table.rows] == [0, 1, 2, 3]


def iris_report_layout_names():
    from circuits.layout import ResidualLayout

    return ResidualLayout(4, 3).names


def test_sections_can_be_added_placed_and_registered(iris_run):
    rep = R.build_report(iris_run, max_points=50)
    fig = go.Figure(go.Bar(x=["a"], y=[1]))
    rep.add_section(R.Section("Patching", "What restores what.", [fig]), after="residual")
    rep.add_section(R.Section("First", key="first"), before="trajectories")
    rep.add_section(R.Section("Last"))
    assert [s.key for s in rep.sections] == ["first", *DEFAULT_KEYS[:4], "patching", *DEFAULT_KEYS[4:], "last"]
    with pytest.raises(ValueError, match="already has"):
        rep.add_section(R.Section("Patching"))
    with pytest.raises(KeyError, match="no section"):
        rep.add_section(R.Section("X"), after="nowhere")
    assert rep.figures()[len(DEFAULT_VIEWS[:5])] is fig  # in page order, after the residual section's views

    calls = []
    R.register_section("extra", lambda run, ctx: calls.append(ctx.sample.drawn) or R.Section("Extra", "text"),
                       after="update")
    R.register_section("skipped", lambda run, ctx: None)
    try:
        built = R.build_report(iris_run, max_points=50, extra_sections=[R.Section("Appendix")])
    finally:
        R.unregister_section("extra")
        R.unregister_section("skipped")
    assert [s.key for s in built.sections] == [*DEFAULT_KEYS[:3], "extra", *DEFAULT_KEYS[3:], "appendix"]
    assert calls == [50]
    assert [s.key for s in R.build_report(iris_run, max_points=50).sections] == DEFAULT_KEYS


# ------------------------------------------------------------------------------------------------------ HTML


def test_html_embeds_plotly_once_and_every_figure(iris_report, iris_html):
    banner = get_plotlyjs()[:300]
    assert iris_html.count(banner) == 1
    assert iris_html.count("<script>") == 2  # plotly.js and the small script that draws the figures
    assert "<script src" not in iris_html and "<link" not in iris_html
    blocks = figure_blocks(iris_html)
    assert list(blocks) == DEFAULT_VIEWS
    table = re.search(r'<table class="data" data-view="verification_table">(.*?)</table>', iris_html, re.S).group(1)
    assert re.findall(r"<tr><td>(\d+)</td>", table) == ["0", "1", "2", "3"]
    for view, spec in blocks.items():
        assert spec["data"], view
        assert "template" not in spec["layout"], "one shared template, not one per figure"
    # The figures are the report's figures, serialised.
    qk = next(i for i in iris_report.section("weights").items if i.name == "qk_circuit")
    assert len(blocks["qk_circuit"]["data"]) == len(qk.figure.data)


def test_html_references_nothing_outside_the_file(iris_html):
    assert static_external_references(iris_html) == []


@pytest.mark.parametrize("markup, found", [
    ('<script src="https://cdn.plot.ly/plotly.min.js"></script>', "src="),
    ('<link rel="stylesheet" href="http://example.org/x.css">', "href="),
    ('<img src="//example.org/x.png">', "src="),
    ('<img srcset="pic.png 2x">', "srcset="),
    ("<style>body { background: url('http://example.org/bg.png') }</style>", "<style>"),
    ('<style>@import "theme.css";</style>', "theme.css"),
    ('<div style="background-image: url(bg.png)"></div>', "bg.png"),
    ('<meta http-equiv="refresh" content="0; url=http://example.org">', "content="),
    ('<script type="application/json">{"source": "https://example.org/logo.png"}</script>', "embedded JSON"),
    ('<iframe src="other.html"></iframe>', "src="),
])
def test_static_scan_finds_external_references(markup, found):
    hits = static_external_references(f"<html><body>{markup}</body></html>")
    assert len(hits) == 1 and found in hits[0]


def test_static_scan_allows_what_stays_inside_the_file():
    page = ('<a href="#verification">v</a><img src="data:image/png;base64,AAAA"><style>.x{background:'
            'url(data:image/png;base64,AAAA)}</style><script>var u = "https://plot.ly"; /* in JS: not a fetch */</script>'
            '<meta name="viewport" content="width=device-width">')
    assert static_external_references(page) == []


def test_header_states_problem_construction_verdict_certificate(iris_run, iris_report, iris_html):
    h = iris_report.header
    # Iris's decimal ties are ties at the data's precision: the badge says how many comparisons tied and names the
    # first (docs/exactness.md, Verdicts).
    ties = iris_run.report.ties
    first = min(ties, key=lambda tie: (tie.iteration, tie.point))
    assert h.verdict.startswith("VERIFIED (exact Lloyd's k-means, float64); "
                                f"{sum(t.comparisons for t in ties)} comparison(s) tied at the data's precision"
                                f" and went to the lower index (first: point {first.point} at t = {first.iteration},")
    assert h.verified and h.exact and h.verdict_kind == "exact"
    facts = {f.label: f.value for group in h.groups.values() for f in group}
    assert facts["points x dimensions"] == "n = 150, d = 4" and facts["clusters"] == "k = 3"
    # beta is chosen from the data (circuits.sharpness.for_problem): the header shows what the circuit was built with.
    assert facts["beta (assignment sharpness)"] == f"{iris_run.circuit.sharpness.beta:g}"
    assert iris_run.circuit.sharpness.beta > 1e14 and facts["beta_update (update sharpness)"] == "4000"
    assert facts["scale"] == f"s = {iris_run.encoded.scaling.scale[0]:.6g}"
    assert facts["smallest assignment margin"] == f"{iris_run.report.min_margin:.4g}"
    # TransformerLens 4 has no HookedTransformer: the circuit is a HookedRootModule there (circuits/hooked/).
    tl_class = "HookedTransformer" if TL_MAJOR == 3 else "HookedRootModule"
    assert facts["model"].startswith(f"{tl_class}, 8 blocks: (U A) x 4")
    assert facts["errors / ties"].startswith(f"0 errors, {len(ties)} ties at the data's precision")
    assert 'class="verdict ok" id="verdict" data-verified="true" data-kind="exact"' in iris_html
    assert "All 150 points are drawn." in iris_html


def test_a_failed_verification_says_so():
    X, _ = make_blobs(n_samples=40, n_features=2, centers=3, random_state=0)
    run = run_problem(X, X[[0, 1, 2]], 2, sharpness=Sharpness(beta=1.0))  # far too soft to be Lloyd's
    assert not run.report.verified
    rep = R.build_report(run)
    # A float64 run that fails is not called exact: it was held to exact tolerances.
    assert rep.header.verdict.startswith("NOT VERIFIED against Lloyd's k-means: first failing layer")
    assert not rep.header.verified
    page = rep.to_html()
    assert 'class="verdict bad"' in page and "failure: " in page


def test_large_problems_are_drawn_from_a_sample_and_say_so():
    X, _ = make_blobs(n_samples=500, n_features=2, centers=4, random_state=0)
    run = run_circuit(X, X[[0, 1, 2, 3]], 2)
    rep = R.build_report(run, max_points=80)
    page = rep.to_html()
    assert "Drawn: 80 of 500 points" in page and "use all 500 points" in page
    blocks = figure_blocks(page)
    points = [t for t in blocks["centroid_trajectories"]["data"] if t.get("name") == "points (colour: their centroid)"]
    assert points and all(array_len(t["x"]) == 80 for t in points)
    assert array_len(blocks["assign_attention"]["data"][0]["y"]) == 80
    # Norms are over all tokens, not the sample.
    norms = next(i for i in rep.section("residual").items if getattr(i, "name", "") == "residual_norms")
    assert "point tokens (500)" in [a.text for a in norms.figure.layout.annotations]


def test_text_is_escaped_and_code_marked(iris_run):
    rep = R.Report(R.build_header(iris_run), [R.Section("A <b>", "x < y and `C_stage`\n\n<script>alert(1)</script>",
                                                        [R.Table(["h"], [["<i>"]])])])
    page = rep.to_html()
    assert "<h2>A &lt;b&gt;</h2>" in page and "<code>C_stage</code>" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<td>&lt;i&gt;</td>" in page


def test_figure_json_cannot_close_its_script_element():
    fig = go.Figure(go.Scatter(x=[1], y=[2], name="</script><script>alert(1)</script>"))
    payload = R.figure_json(fig)
    html_block = _json_script("f", payload)
    assert html_block.count("</script>") == 1 and json.loads(payload)["data"][0]["name"].startswith("</script>")


# ------------------------------------------------------------------------------------------------- command


def test_report_command_writes_one_file_and_exit_codes(tmp_path, capsys):
    out = tmp_path / "deep" / "r.html"
    assert main(["report", "--dataset", "wine", "--k", "3", "--iterations", "2", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.html"], "no temporary file left behind"
    page = out.read_text()
    assert ">VERIFIED (exact Lloyd&#x27;s k-means, float64)<" in page and "wine" in page and "initial centroids" in page
    assert "random (seed 0)" in page
    assert "VERIFIED" in capsys.readouterr().out
    # Not verified: the report is still written and says so, exit code 1.
    soft = tmp_path / "soft.html"
    assert main(["report", "--dataset", "blobs", "--n", "40", "--k", "3", "--iterations", "2", "--beta", "1",
                 "--out", str(soft)]) == 1
    assert "NOT VERIFIED" in soft.read_text()


@pytest.mark.parametrize("args, message", [
    (["--dataset", "nope", "--k", "3"], "unknown dataset"),
    (["--dataset", "iris", "--k", "0"], "k"),
    (["--dataset", "iris", "--k", "3", "--variant", "nope"], "unknown variant"),
    (["--dataset", "iris", "--k", "3", "--max-points", "0"], "--max-points"),
])
def test_report_command_bad_input_writes_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "r.html"
    assert main(["report", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_report_command_rejects_unwritable_outputs(tmp_path, capsys):
    assert main(["report", "--dataset", "iris", "--k", "3", "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["report", "--dataset", "iris", "--k", "3", "--out", str(tmp_path / "r.txt")]) == 2
    assert ".html" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["report", "--dataset", "iris", "--k", "3", "--out", str(blocker / "r.html")]) == 2
    assert "not a writable folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_report_help_is_fast_without_torch():
    import subprocess

    code = ("import sys; from analysis.cli import build_parser\n"
            "try:\n    build_parser().parse_args(['report', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("False"), out.stdout + out.stderr
    assert "--max-points" in out.stdout


def test_cluster_out_also_writes_the_report(tmp_path):
    out = tmp_path / "run"
    assert main(["cluster", "--dataset", "wine", "--k", "3", "--iterations", "2", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert ">VERIFIED (exact Lloyd&#x27;s k-means, float64)<" in page and list(figure_blocks(page)) == DEFAULT_VIEWS
    labels = np.loadtxt(out / "labels.csv", skiprows=1, dtype=int)
    assert len(labels) == 178


def test_shared_plotly_js_is_written_once_beside_the_reports(iris_report, tmp_path):
    from analysis.report.assets import plotly_js_name

    folder = tmp_path / "reports"
    a = iris_report.write(folder / "a.html", plotly_js="shared")
    b = iris_report.write(folder / "b.html", plotly_js="shared")
    asset = folder / plotly_js_name()
    assert sorted(p.name for p in folder.iterdir()) == sorted(["a.html", "b.html", asset.name])
    assert asset.read_text() == get_plotlyjs()
    for page in (a, b):
        text = page.read_text()
        # plotly.js is referenced by the sibling's relative name and not embedded; nothing else points outside.
        assert get_plotlyjs()[:2000] not in text and f'<script src="{asset.name}"></script>' in text
        assert static_external_references(text) == [f"<script src='{asset.name}'>"]
        assert page.stat().st_size < iris_report.to_html().__len__() - len(get_plotlyjs()) + 10_000
    with pytest.raises(ValueError, match="plotly_js"):
        iris_report.to_html(plotly_js="cdn")


def test_report_command_shared_plotly_js(tmp_path, capsys):
    from analysis.report.assets import plotly_js_name

    out = tmp_path / "r.html"
    assert main(["report", "--dataset", "wine", "--k", "3", "--iterations", "1", "--plotly-js", "shared",
                 "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["r.html", plotly_js_name()])
    assert f'src="{plotly_js_name()}"' in out.read_text()
    with pytest.raises(SystemExit) as exc:  # argparse refuses an unknown choice with exit code 2
        main(["report", "--dataset", "iris", "--k", "3", "--plotly-js", "cdn", "--out", str(tmp_path / "x.html")])
    assert exc.value.code == 2 and not (tmp_path / "x.html").exists()
