"""``cluster`` at scale (issue 31): without ``--out`` it keeps only what the verification reads (a lean capture,
from ``analysis.scheduler.AT_SCALE_POINTS`` points on) and prints what the full capture would; with ``--out`` (a
report is drawn from every layer's attention) it never runs lean."""

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
    assert main([str(a) for a in argv + ["--out", tmp_path / "out"]]) == 0
    assert asked[-1] is False
