"""The report of a run at scale (issue 41 item 6): drawn from a lean capture's sampled rows, it shows for those points
exactly what the full capture's views show, and says above each figure what it cannot show.

The full run (``lean=False``) is the oracle: the same problem run lean with a sample keeps the same rows, so every
view's data for the sampled points must equal the full view's for the same points, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from analysis import views
from analysis.pipeline import RunOptions, run_problem
from analysis.report import build_report


@pytest.fixture(scope="module")
def runs():
    rng = np.random.default_rng(11)
    X = np.concatenate([rng.normal(c, 0.5, size=(80, 3)) for c in ([0, 0, 0], [3, 0, 1], [0, 4, -2])])
    C0 = X[[0, 80, 160]] + 0.2
    full = run_problem(X, C0, 3, options=RunOptions(path="structured"))
    lean = run_problem(X, C0, 3, options=RunOptions(path="structured", lean=True, sample=17))
    return full, lean


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def test_the_sample_is_the_kept_points_and_says_so(runs):
    full, lean = runs
    sample = views.point_sample(lean)
    assert _same(sample.indices, lean.capture.sampled.points) and sample.drawn == 17 and sample.n == 240
    assert sample.note().startswith("Drawn: 17 of 240 points, a uniform random sample (seed 0) chosen before the run")
    assert "chosen before the run" not in views.point_sample(full).note()
    assert _same(views.point_sample(lean, max_points=5).indices,
                 lean.capture.sampled.points[np.sort(np.random.default_rng(0).choice(17, 5, replace=False))])


def test_assign_view_draws_the_full_runs_rows(runs):
    full, lean = runs
    rows = lean.capture.sampled.points
    a, b = views.assign_attention(full).data, views.assign_attention(lean).data
    assert _same(b["rows"], rows)
    for name in ("pattern", "scores", "margin", "leak_bound"):
        assert _same(b[name], a[name][:, rows]), name
    assert [b["point_labels"][i] for i in rows] == [a["point_labels"][i] for i in rows]


def test_update_view_draws_the_full_runs_columns(runs):
    full, lean = runs
    a, b = views.update_attention(full).data, views.update_attention(lean).data
    assert _same(b["pattern"], a["pattern"][:, :, lean.capture.sampled.positions])
    for name in ("cluster_size", "weight_on_self", "margin", "leak_bound", "leak_observed"):
        assert _same(b[name], a[name]), name
    assert b["weight_on_members"] is None
    view = views.update_attention(lean)
    assert any("not on all 240" in c for c in view.caveats)


def test_trajectories_and_objective_read_the_labels(runs):
    full, lean = runs
    a, b = views.centroid_trajectories(full).data, views.centroid_trajectories(lean).data
    for name in ("clusters", "weights", "centroids", "reference_centroids", "projected_points"):
        assert _same(b[name], a[name]), name
    assert _same(views.objective_plot(lean).data["objective_circuit"], views.objective_plot(full).data["objective_circuit"])


def test_residual_views_hold_the_sampled_tokens_and_say_so(runs):
    full, lean = runs
    streams = views.residual_streams(lean)
    seq = lean.encoded.sequence
    assert streams.labels[0] == "input" and all("after MLP" in label for label in streams.labels[1:])
    assert set(streams.token_positions) <= set(int(p) for p in lean.capture.sampled.positions)
    assert "the 17 sampled points" in streams.caveats[0] and f"not all {seq.n:,}" in streams.caveats[0]
    # The kept residual decodes to the run's own assignments of the sampled points.
    from circuits.layout import ResidualLayout  # noqa: F401 (the layout names the Y slot)
    layout = lean.circuit.layout
    final = lean.capture.sampled.resid[streams.hooks[-1]][0][lean.capture.sampled.point_positions]
    assert _same(final[:, layout["Y"]].argmax(axis=-1), lean.labels[lean.capture.sampled.points])


def test_page_states_the_sample_in_the_header_and_above_the_figures(runs):
    _, lean = runs
    report = build_report(lean)
    assert any(m.startswith("Drawn: 17 of 240 points, a uniform random sample") for m in report.header.messages)
    caveated = {view.name for section in report.sections for view in section.items
                if any("chosen before the run" in c for c in getattr(view, "caveats", []))}
    assert caveated == {"centroid_trajectories", "assign_attention", "update_attention"}


def test_a_run_at_scale_hands_the_verifications_reference_to_the_report(monkeypatch):
    """At scale the reference runs beside the circuit; the report draws those iterates, bit for bit what running the
    reference again gives (so it need not: two more reference runs were 40 s of CPU at a million points)."""
    from analysis import scheduler
    from analysis.verify import reference_trace

    monkeypatch.setattr(scheduler, "AT_SCALE_POINTS", 50)
    rng = np.random.default_rng(4)
    X = np.concatenate([rng.normal(c, 0.4, size=(40, 2)) for c in ([0, 0], [3, 1])])
    run = run_problem(X, X[[0, 40]] + 0.3, 4, options=RunOptions(path="structured", lean=True, sample=9))
    trace = reference_trace(run.capture, 0)
    assert run.reference_iterates is not None
    assert _same(run.reference_iterates[0], trace.centroids) and _same(run.reference_iterates[1], trace.objectives)
    assert _same(views.trajectories.reference_run(run).centroids, trace.centroids)


def test_a_lean_run_without_a_sample_says_what_is_missing():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 2))
    run = run_problem(X, X[:2], 2, options=RunOptions(path="structured", lean=True))
    for view in (views.assign_attention, views.update_attention):
        with pytest.raises(ValueError, match="kept only what its verification reads"):
            view(run)


SETTLED = """
import gc, sys, weakref
import analysis.cli.main as _  # noqa: F401
main = sys.modules["analysis.cli.main"]


class Node:
    pass


def garbage_cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


gc.disable()  # no automatic collection: only the report stage's own can collect the cycle below
full_collections = []  # whether TransformerLens was imported, at the start of each full collection
gc.callbacks.append(lambda phase, info: full_collections.append("transformer_lens" in sys.modules)
                    if phase == "start" and info["generation"] == 2 else None)
if sys.argv[1] == "frozen-before":
    gc.freeze()
before = gc.get_freeze_count()
gone = garbage_cycle()
alive = Node()
with main.settled_for_the_report(at_scale=False):
    inside = gc.get_freeze_count()
    print(gone() is None, "transformer_lens" in sys.modules, inside > before, gc.isenabled())
print(gc.get_freeze_count() > 0, gc.isenabled(), full_collections == [False])
"""


@pytest.mark.parametrize("frozen_before", [False, True])
def test_the_report_stage_freezes_what_is_alive_after_collecting_it_and_unfreezes(frozen_before):
    """The command line's report stage (analysis.cli.main.settled_for_the_report) collects the cycles that are
    garbage (none is kept alive by the freeze), then imports TransformerLens, freezes while the report is made and
    unfreezes after; where the process had frozen objects already, it freezes nothing and unfreezes nothing."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", SETTLED, "frozen-before" if frozen_before else "fresh"],
                         capture_output=True, text=True, check=True, cwd=root)
    collected, imported, froze, enabled, frozen_after, enabled_after, before_import = out.stdout.split()
    assert (imported, froze, enabled, frozen_after, enabled_after) == (
        "True", str(not frozen_before), "False", str(frozen_before), "False")
    assert collected == str(not frozen_before)  # collected, not frozen (and where nothing is frozen, not collected)
    # One full collection, before the import: it walks the run's objects, not TransformerLens's as well.
    assert before_import == str(not frozen_before)
