"""The finite-temperature sweep: its problems, its runners, its verdict on the paper's claims, its command."""

import csv
import math
import io
from dataclasses import replace

import numpy as np
import pytest
from sklearn.cluster import KMeans

from analysis import sweep
from circuits import reference
from command_server import run_command

MICRO = sweep.SweepGrid(betas=(1.0, 30.0), d=(2,), k=(2, 3), n=(12,), scale=(0.5, 4.0),
                        base={"d": 2, "k": 2, "n": 12, "scale": 1.0}, seeds=2, iterations=4)


def test_mixture_problems_live_in_the_scaled_unit_cube():
    X, C0 = sweep.mixture_problem(d=3, k=4, n=50, scale=7.0, seed=1)
    assert X.shape == (50, 3) and C0.shape == (4, 3)
    np.testing.assert_allclose(X.min(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(X.max(axis=0), 7.0, rtol=1e-12)
    assert all(any(np.array_equal(c, x) for x in X) for c in C0) and len(np.unique(C0, axis=0)) == 4
    X2, C02 = sweep.mixture_problem(d=3, k=4, n=50, scale=7.0, seed=1)
    np.testing.assert_array_equal(X, X2)


def test_circuit_runner_equals_the_soft_reference():
    rows = sweep.run_sweep(MICRO, sweep.circuit_runner)
    assert len(rows) == MICRO.n_problems
    worst = max(r.deviation_from_reference / r.scale for r in rows)
    assert worst < 1e-12, worst


def test_gap_is_measured_against_lloyd_from_the_same_start():
    rows = sweep.run_sweep(MICRO, sweep.reference_runner)
    row = next(r for r in rows if r.grid == "k-scale" and r.k == 3 and r.scale == 4.0 and r.beta == 1.0)
    X, C0 = sweep.mixture_problem(row.d, row.k, row.n, row.scale, row.seed)
    km = KMeans(3, init=C0, n_init=1, max_iter=MICRO.iterations, tol=0, algorithm="lloyd").fit(X)
    assert row.objective_lloyd == pytest.approx(reference.objective(X, km.cluster_centers_), rel=1e-12)
    assert row.gap == pytest.approx((row.objective_soft - row.objective_lloyd) / row.objective_lloyd)


def test_a_plugged_in_runner_is_the_one_that_runs():
    calls = []

    def lloyd_runner(X, C0, beta, iterations):
        calls.append(beta)
        return np.stack([reference.lloyd(x, c, iterations).final_centroids for x, c in zip(X, C0)])

    rows = sweep.run_sweep(MICRO, lloyd_runner)
    assert calls and all(r.gap == 0.0 for r in rows)
    assert all(c.holds for c in sweep.trend_checks(rows))


def _row(grid, k, scale, beta, gap):
    return sweep.SweepRow(grid, 2, k, 100, scale, beta, 0, 1.0 + gap, 1.0, gap, 0.0)


def test_trend_checks_accept_the_paper_and_name_every_violation():
    good = [_row("k-scale", k, s, b, 0.1 * k / (s * b)) for k in (2, 4) for s in (1.0, 10.0) for b in (1.0, 10.0)]
    assert all(c.holds for c in sweep.trend_checks(good))
    bad = [r if not (r.k == 4 and r.scale == 10.0 and r.beta == 10.0) else _row("k-scale", 4, 10.0, 10.0, 5.0) for r in good]
    checks = {c.claim: c for c in sweep.trend_checks(bad)}
    assert not checks["the gap shrinks as the stiffness (temperature) beta grows"].holds
    assert not checks["the gap shrinks as the data scale grows"].holds
    assert checks["the gap grows with k"].holds
    lines = sweep.summary_lines(bad, list(checks.values()))
    assert "PARTLY" in lines[0] and any("k=4" in line and "scale=10" in line for line in lines)


def test_trend_checks_treat_gaps_at_the_float_floor_as_equal():
    rows = [_row("k-scale", k, s, 1.0, 1e-14 * k * s) for k in (2, 4) for s in (1.0, 10.0)]
    assert all(c.holds for c in sweep.trend_checks(rows))


def test_command_writes_html_and_csv_and_states_the_verdict(tmp_path):
    out = tmp_path / "sw"
    res = run_command("sweep", "--grid", "tiny", "--runner", "reference", "--out", out, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "reproduces the paper's qualitative finding:" in res.stdout
    rows = list(csv.DictReader(io.StringIO((out / "sweep.csv").read_text())))
    assert len(rows) == sweep.GRIDS["tiny"].n_problems
    assert {"grid", "d", "k", "n", "scale", "beta", "seed", "objective_soft", "objective_lloyd", "gap"} <= set(rows[0])
    page = (out / "sweep.html").read_text()
    assert "<script src=" not in page and "Plotly" in page and page.count("heatmap") >= 8
    assert sorted(p.name for p in out.iterdir()) == ["sweep.csv", "sweep.html"]


@pytest.mark.parametrize("args, message", [
    (["--k", "2,40"], "exceeds n"),
    (["--betas", "0,1"], "betas"),
    (["--scale", "x"], "comma-separated"),
])
def test_bad_grids_exit_2_in_one_line(tmp_path, args, message):
    res = run_command("sweep", "--grid", "tiny", "--runner", "reference", "--out", tmp_path / "o", *args, timeout=60)
    assert res.returncode == 2 and message in res.stderr and res.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", [("--scale", "1e300"), ("--betas", "1e308"), ("--scale", "1e-300"),
                                    ("--scale", "1e150")])
def test_scales_and_stiffnesses_float64_cannot_carry_are_refused_in_one_line(tmp_path, option):
    """Objectives of n d scale^2 past float64's range were NaN rows under a "YES" verdict; stiffnesses whose unit
    frame overflows failed every cell; squared distances below the normal range made every gap 0."""
    out = tmp_path / "sw"
    res = run_command("sweep", "--grid", "tiny", "--runner", "reference", *option, "--out", out, timeout=300)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "float64" in res.stderr, res.stderr
    assert not out.exists() and res.stdout == ""


def test_the_range_check_admits_only_runs_with_finite_results():
    """Just inside the limits (scale 1e150 with a small stiffness, scale 1e-140) every run is finite, in the
    numpy reference and the circuit alike, and the gaps are those of the same problem at scale 1."""
    grid = sweep.SweepGrid(betas=(1e-300, 1e-299), d=(2,), k=(2,), n=(16,), scale=(1e150,),
                           base={"d": 2, "k": 2, "n": 16, "scale": 1e150}, seeds=1, iterations=3)
    grid.validate()
    assert sweep.range_problem(1e-299, 1e151, 1e151, 2, 16) is None
    assert sweep.range_problem(1.0, 1e160, 1e160, 2, 16) is not None
    assert sweep.range_problem(1.0, 1e-140, 1e-140, 2, 16) is None
    assert sweep.range_problem(1.0, 1e-150, 1e-150, 2, 16) is not None
    for scale, beta in ((1e150, 1e-299), (1e-140, 1e279)):
        cell = (("k", "scale"), {"d": 2, "k": 2, "n": 16, "scale": scale})
        rows = sweep.sweep_cell((replace(grid, betas=(beta,), scale=(scale,)), sweep.circuit_runner), cell)
        unit = sweep.sweep_cell((replace(grid, betas=(beta * scale**2,), scale=(1.0,)), sweep.reference_runner),
                                (("k", "scale"), {"d": 2, "k": 2, "n": 16, "scale": 1.0}))
        for r, u in zip(rows, unit):
            assert math.isfinite(r.gap) and math.isfinite(r.objective_soft) and r.objective_lloyd > 0
            assert r.gap == pytest.approx(u.gap, rel=1e-6, abs=1e-9)


def test_a_non_finite_run_or_a_failed_cell_never_reads_as_the_finding():
    good = [_row("k-scale", k, s, b, 0.1 * k / (s * b)) for k in (2, 4) for s in (1.0, 10.0) for b in (1.0, 10.0)]
    assert sweep.summary_lines(good, sweep.trend_checks(good))[0].startswith(
        "reproduces the paper's qualitative finding: YES")
    nan = good[:-1] + [_row("k-scale", 4, 10.0, 10.0, math.nan)]
    assert "UNDETERMINED" in sweep.summary_lines(nan, sweep.trend_checks(nan))[0]
    assert "UNDETERMINED" in sweep.summary_lines(good, sweep.trend_checks(good), missing=2)[0]
