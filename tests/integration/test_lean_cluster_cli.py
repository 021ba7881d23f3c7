"""``cluster`` and ``report`` at scale (issues 31, 41): from ``analysis.scheduler.AT_SCALE_POINTS`` points on a run
keeps only what the verification reads (a lean capture) and prints what the full capture would; with ``--out`` (or
``report``) it keeps beside that the rows of a sample of points chosen before the run, writes the very labels,
centroids and verification the full capture writes, and its page states the sample."""

from __future__ import annotations

import json

import numpy as np


def test_cluster_without_out_is_lean_at_scale_and_prints_the_same(monkeypatch, capsys, tmp_path):
    """``cluster --json`` (no ``--out``) from AT_SCALE_POINTS points on runs lean and prints, byte for byte, what
    the full capture prints; with ``--out`` (a report is drawn) it never runs lean."""
    import analysis.pipeline as pipeline
    from analysis import scheduler
    from analysis.cli import main

    rng = np.random.default_rng(6)
    X = np.concatenate([rng.normal(centre, 0.3, size=(20, 2)) for centre in ([0, 0], [3, 0], [0, 3])])
    C0 = X[[0, 20, 40]] + 0.1
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "C0.npy", C0)
    asked = []
    real_capture = pipeline.capture

    def spy(*args, **kwargs):
        asked.append(not kwargs["keep"].everything)
        return real_capture(*args, **kwargs)

    monkeypatch.setattr(pipeline, "capture", spy)
    argv = ["cluster", "--data", tmp_path / "X.npy", "--init", tmp_path / "C0.npy", "--k", "3", "--iterations", "3",
            "--path", "structured", "--json"]
    printed = []
    for threshold in (10**9, len(X)):
        monkeypatch.setattr(scheduler, "AT_SCALE_POINTS", threshold)
        assert main([str(a) for a in argv]) == 0
        printed.append(capsys.readouterr().out)
    assert asked == [False, True]
    assert printed[0] == printed[1] and json.loads(printed[0])["verified"]


def _problem(tmp_path, n_per=20):
    rng = np.random.default_rng(6)
    X = np.concatenate([rng.normal(centre, 0.3, size=(n_per, 2)) for centre in ([0, 0], [3, 0], [0, 3])])
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "C0.npy", X[[0, n_per, 2 * n_per]] + 0.1)
    return ["--data", tmp_path / "X.npy", "--init", tmp_path / "C0.npy", "--k", "3", "--iterations", "3", "--path",
            "structured"]


def test_cluster_out_at_scale_keeps_a_sample_and_writes_the_same_files(monkeypatch, capsys, tmp_path):
    """``cluster --out`` at scale runs lean with a sample's rows: labels.csv, centroids.csv, verification.json and
    ``--json`` byte for byte the full capture's; the page states the sample (drawn of n, seed, chosen before the
    run) in its header and above every figure that draws points, and the full capture's page does not."""
    import analysis.cli.cluster as cluster
    import analysis.pipeline as pipeline
    from analysis import scheduler
    from analysis.cli import main

    kept = []
    real_capture = pipeline.capture

    def spy(*args, **kwargs):
        kept.append(kwargs["keep"])
        return real_capture(*args, **kwargs)

    monkeypatch.setattr(pipeline, "capture", spy)
    monkeypatch.setattr(cluster, "MAX_POINTS", 7)
    argv = ["cluster", *_problem(tmp_path), "--json"]
    printed, folders = [], []
    for threshold in (10**9, 60):
        monkeypatch.setattr(scheduler, "AT_SCALE_POINTS", threshold)
        folders.append(tmp_path / f"out{threshold}")
        assert main([str(a) for a in argv + ["--out", folders[-1]]]) == 0
        printed.append(capsys.readouterr().out)
    assert kept[0].everything and not kept[1].everything and len(kept[1].sample) == 7
    assert printed[0] == printed[1]
    for name in ("labels.csv", "centroids.csv", "verification.json"):
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name
    full, lean = ((folder / "report.html").read_text() for folder in folders)
    statement = "Drawn: 7 of 60 points, a uniform random sample (seed 0) chosen before the run"
    assert statement in lean and statement not in full and "chosen before the run" not in full
    # Above the trajectories, the assignment heads and the update heads; the residual figures say what they hold.
    assert lean.count("a uniform random sample (seed 0) chosen before the run (the header says why)") == 3
    assert lean.count("it kept the residual of BOS, the 7 sampled points and the 3 centroids alone") == 2


def test_report_at_scale_keeps_the_max_points_sample(monkeypatch, capsys, tmp_path):
    """``report --max-points M`` at scale keeps M points' rows (a seeded draw) and states them."""
    import analysis.pipeline as pipeline
    from analysis import scheduler
    from analysis.cli import main

    kept = []
    real_capture = pipeline.capture
    monkeypatch.setattr(pipeline, "capture", lambda *a, **kw: kept.append(kw["keep"]) or real_capture(*a, **kw))
    monkeypatch.setattr(scheduler, "AT_SCALE_POINTS", 60)
    out = tmp_path / "r.html"
    assert main([str(a) for a in ["report", *_problem(tmp_path), "--max-points", "11", "--out", out]]) == 0
    assert len(kept[-1].sample) == 11 and not kept[-1].everything
    assert "Drawn: 11 of 60 points, a uniform random sample (seed 0) chosen before the run" in out.read_text()
