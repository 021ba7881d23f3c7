"""The report in a real browser: headless Chromium opens it offline and every figure must draw, with no error.

``kmeans-circuits report --dataset iris --k 3 --out r.html`` is run as a user runs it; the page is opened with the
network emulated offline, through the DevTools protocol (``tests/browser.py``), and checked for: an SVG drawn
by plotly in every figure, visible traces that all hold data and drew marks, the report's own record that every
figure finished, no console error, no uncaught exception, no error in the browser log, and no request to
anything but the file itself. The checker is shown to fail on pages broken in each of those ways.

Skipped only when no Chromium is installed (CI installs Debian's ``chromium``).
"""


import plotly.graph_objects as go
import pytest

from analysis import report as R
from browser import Chromium, check_page, find_chromium, static_external_references
from command_server import run_command

pytestmark = pytest.mark.skipif(find_chromium() is None,
                                reason="headless Chromium is not installed (apt-get install chromium)")

EXPECTED_VIEWS = ["centroid_trajectories", "assign_attention", "update_attention", "residual_norms",
                  "residual_tokens", "qk_circuit", "ov_circuit", "objective", "ties"]


@pytest.fixture(scope="module")
def browser():
    with Chromium(timeout=120) as b:
        yield b


@pytest.fixture(scope="module")
def iris_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "r.html"
    res = run_command("report", "--dataset", "iris", "--k", "3", "--out", out, timeout=600)
    # Exit 0: iris's decimal ties are ties at the data's precision, which the circuit sends to the lower index as
    # the reference does (docs/exactness.md).
    assert res.returncode == 0 and out.exists(), res.stderr
    return out


def test_iris_report_draws_every_view_offline_without_errors(iris_page, browser):
    check = check_page(iris_page, browser, timeout=120)
    assert check.problems() == []
    assert [f.view for f in check.figures] == EXPECTED_VIEWS
    assert check.state["done"] and check.state["rendered"] == check.state["total"] == len(EXPECTED_VIEWS)
    for fig in check.figures:
        assert fig.svg and fig.visible and all(t["size"] > 0 for t in fig.visible), fig.view
    # What each view must have drawn.
    marks = {f.view: f.marks for f in check.figures}
    assert marks["assign_attention"]["heatmap"] == 1 and marks["assign_attention"]["scatter"] >= 150
    assert marks["centroid_trajectories"]["scatter"] >= 150
    assert marks["residual_norms"]["heatmap"] == 3
    assert marks["ties"]["table"] > 0
    assert check.console_errors == check.exceptions == check.log_errors == []
    # The only requests: the file itself and data: URLs plotly makes for its own images.
    assert check.requests[0] == check.url and check.external_requests == []
    assert static_external_references(iris_page.read_text()) == []


# ---------------------------------------------------------------------------------- the checker can fail


def tiny_page(tmp_path, name: str, *items, header=None) -> str:
    """A report page with the report's own renderer around ``items``."""
    head = header or R.Header("t", "VERIFIED", True, True, {})
    page = R.render_html(R.Report(head, [R.Section("S", "", list(items))]))
    path = tmp_path / f"{name}.html"
    path.write_text(page)
    return path


def test_a_good_tiny_page_passes(tmp_path, browser):
    path = tiny_page(tmp_path, "good", go.Figure(go.Scatter(x=[1, 2], y=[3, 4])))
    assert check_page(path, browser).problems() == []


def test_an_empty_trace_is_caught(tmp_path, browser):
    path = tiny_page(tmp_path, "empty", go.Figure([go.Scatter(x=[1], y=[1], name="fine"),
                                                   go.Scatter(x=[], y=[], name="nothing")]))
    problems = check_page(path, browser).problems()
    assert problems == ["figure-1: scatter trace 'nothing' was not drawn (plotly found no valid data)"], problems


def test_a_heatmap_without_cells_is_caught(tmp_path, browser):
    path = tiny_page(tmp_path, "noz", go.Figure(go.Heatmap(z=[], name="blank")))
    problems = check_page(path, browser).problems()
    assert problems == ["figure-1: no visible trace",
                        "figure-1: heatmap trace 'blank' was not drawn (plotly found no valid data)"], problems


def test_a_figure_that_cannot_be_drawn_is_caught(tmp_path, browser):
    path = tiny_page(tmp_path, "corrupt", go.Figure(go.Scatter(x=[1], y=[1])), go.Figure(go.Bar(x=[1], y=[1])))
    text = path.read_text()
    # Corrupt the second figure's JSON: the page reports it, logs an error, and never draws an SVG for it.
    start = text.index('id="plot-2-json">') + len('id="plot-2-json">')
    path.write_text(text[:start] + "{not json" + text[start:])
    check = check_page(path, browser)
    problems = check.problems()
    assert check.state["failed"] == ["plot-2"] and check.state["rendered"] == 1
    assert any("console error: figure plot-2 could not be drawn" in p for p in problems), problems
    assert any("plotly drew no SVG" in p for p in problems), problems


def test_an_uncaught_exception_is_caught(tmp_path, browser):
    path = tiny_page(tmp_path, "throws", go.Figure(go.Scatter(x=[1], y=[1])),
                     R.Html("<script>null.boom();</script>"))
    problems = check_page(path, browser).problems()
    assert any(p.startswith("uncaught exception") and "boom" in p for p in problems), problems


def test_a_network_request_is_caught(tmp_path, browser):
    path = tiny_page(tmp_path, "fetches", go.Figure(go.Scatter(x=[1], y=[1])),
                     R.Html('<img src="http://127.0.0.1:9/pixel.png">'))
    check = check_page(path, browser)
    assert check.external_requests == ["http://127.0.0.1:9/pixel.png"]
    assert any(p.startswith("network request") for p in check.problems())
    assert static_external_references(path.read_text()) != []


def test_a_page_without_plotly_is_caught(tmp_path, browser):
    path = tiny_page(tmp_path, "noplotly", go.Figure(go.Scatter(x=[1], y=[1])))
    text = path.read_text()
    start = text.index("<script>")
    path.write_text(text[:start] + text[text.index("</script>", start) + len("</script>"):])
    check = check_page(path, browser)
    assert check.state["failed"] == ["plot-1"]
    assert any("Plotly is not defined" in p for p in check.problems()), check.problems()


def test_a_report_with_shared_plotly_js_draws_offline_from_its_folder(tmp_path, browser):
    from analysis.report.assets import plotly_js_name

    fig = go.Figure(go.Scatter(x=[0, 1, 2], y=[1, 3, 2]))
    report = R.Report(R.Header("shared"), [R.Section("one", items=[fig])])
    page = report.write(tmp_path / "sub" / "page.html", plotly_js="shared")
    check = check_page(page, browser)
    asset = (tmp_path / "sub" / plotly_js_name()).resolve().as_uri()
    # The one request outside the page is the sibling plotly.js, read from disk (the network is off).
    assert check.external_requests == [asset]
    assert [p for p in check.problems() if not p.startswith("network request")] == []
    assert check.state["done"] and check.state["rendered"] == 1 and check.figures[0].svg
