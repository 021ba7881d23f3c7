"""The proven finite-sharpness bound holds on every kind of problem the suite uses, layer by layer.

Checked on each run (``analysis.proof.bound.bound_violations``), against the hard trajectory: every layer's
``sum |softmax - hardmax|``, every assignment's ``|Y - one-hot|`` and labels, every update's centroids; and, in the
verification report, ``max_centroid_error <= proven_bound + tolerance``. Problems: hypothesis-generated ones (the
strategy of ``test_lloyd_layers.py``), the bundled datasets, the hard inputs of ``test_lloyd_hard_inputs.py``, and the
certificate tests' blobs; each with the default knobs and with small ``beta`` / ``beta_update`` where the bound is
far from 0 and the softmax visibly soft.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine, make_blobs

from analysis.pipeline import run_problem
from analysis.proof.bound import bound_for_capture, bound_violations, sharpness_bound
from circuits.build import build_lloyd_circuit
from circuits.initialisation import initial_centroids
from circuits.sharpness import Sharpness

from test_lloyd_layers import problems

#: (beta, beta_update): the defaults, and softer settings where the bound is non-trivial.
KNOBS = [(1e14, 4000.0), (1e9, 4000.0), (1e6, 4000.0), (1e5, 4000.0), (1e14, 60.0), (1e7, 60.0), (1e3, 30.0)]


@functools.lru_cache(maxsize=64)
def circuit(d: int, k: int, T: int, beta: float, beta_update: float):
    return build_lloyd_circuit(d, k, T, sharpness=Sharpness(beta=beta, beta_update=beta_update))


def run(X, C0, T, beta=1e14, beta_update=4000.0):
    X, C0 = np.asarray(X, float), np.asarray(C0, float)
    return run_problem(X, C0, T, circuit=circuit(X.shape[1], C0.shape[0], T, beta, beta_update))


def assert_bound_holds(result):
    rep = result.report
    assert rep.sharpness_bound is not None
    violations = bound_violations(result.capture)
    assert not violations, violations
    if rep.diverged_after_tie is None:
        for r in rep.per_iteration:
            assert r.max_centroid_error <= r.proven_bound + rep.tolerances.centroid, (r.iteration, r.max_centroid_error,
                                                                                      r.proven_bound)
    return rep


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problems(max_n=80, max_d=6, max_k=6), st.sampled_from(KNOBS))
def test_bound_holds_on_hypothesis_problems(problem, knobs):
    X, C0, T = problem
    assert_bound_holds(run(X, C0, T, *knobs))


def _datasets():
    X_blobs, _ = make_blobs(600, n_features=2, centers=5, random_state=0)
    return {
        "iris": load_iris().data, "wine": load_wine().data, "breast_cancer": load_breast_cancer().data,
        "digits": load_digits().data[:600], "blobs": X_blobs,
    }


DATASETS = _datasets()


@pytest.mark.parametrize("name", list(DATASETS))
@pytest.mark.parametrize("knobs", [(1e14, 4000.0), (1e6, 4000.0), (1e14, 60.0)])
def test_bound_holds_on_datasets(name, knobs):
    X = DATASETS[name]
    k = 10 if name == "digits" else 3
    rep = assert_bound_holds(run(X, initial_centroids(X, k, "random", 0), 3, *knobs))
    if knobs == (1e14, 4000.0):
        # Hard everywhere: the proven bound is below anything float64 can show.
        assert max(r.proven_bound for r in rep.per_iteration) < 1e-200


def test_the_bound_is_far_from_zero_where_the_softmax_is_soft():
    """Non-trivial and tight: the bound sits within a small factor of what the soft circuit actually does."""
    X = DATASETS["blobs"]
    result = run(X, initial_centroids(X, 5, "random", 0), 3, 1e6, 4000.0)
    bound, _ = bound_for_capture(result.capture)
    first = bound.layer(1)
    assert 1e-13 < first.softmax_l1 < 1e-6 and first.uncertified_labels == 0
    observed = result.capture.assign_attention(0).leak_observed[0].max()
    assert observed > 0 and first.softmax_l1 <= 4 * observed + 1e-300
    rep = assert_bound_holds(result)
    assert 1e-12 < rep.per_iteration[0].proven_bound < 1e-3
    assert rep.per_iteration[0].max_centroid_error > rep.tolerances.centroid  # the softness is visible


def test_violations_are_detected_when_the_bound_is_for_a_sharper_circuit():
    """The check has teeth: a bound computed for beta = 1e7 does not hold for the circuit built with beta = 1e6."""
    X = DATASETS["blobs"]
    C0 = initial_centroids(X, 5, "random", 0)
    result = run(X, C0, 2, 1e6, 4000.0)
    assert not bound_violations(result.capture)
    _, traj = bound_for_capture(result.capture)
    L = result.circuit.layout
    seq = result.encoded.sequence
    Xu = result.encoded.resid[0, seq.points, L["X"]].numpy()
    Cu = result.encoded.resid[0, seq.centroids, L["C_stage"]].numpy()
    wrong = sharpness_bound(Xu, Cu, 2, 1e7, 4000.0, 16.0, 1e-11, result.report.scale)
    found = bound_violations(result.capture, proven=wrong)
    assert found and "layer 1 (assign)" in found[0]


@pytest.mark.parametrize("case", ["constant_columns", "all_equal", "duplicates", "offset", "tiny", "sixty_four"])
@pytest.mark.parametrize("knobs", [(1e14, 4000.0), (1e7, 60.0)])
def test_bound_holds_on_hard_inputs(case, knobs):
    if case == "constant_columns":
        X, _ = make_blobs(200, n_features=3, centers=3, random_state=0)
        X = np.hstack([X, np.full((200, 2), 7.0)])
        C0 = initial_centroids(X, 3, "random", 1)
    elif case == "all_equal":
        X = np.full((10, 3), -2.5)
        C0 = X[:1]
    elif case == "duplicates":
        X = np.repeat(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]), [3, 1, 4, 2], axis=0)
        C0 = initial_centroids(X, 4, "random", 0)
    elif case == "offset":
        X, _ = make_blobs(300, n_features=2, centers=3, random_state=2)
        X = X + 1e8
        C0 = initial_centroids(X, 3, "random", 0)
    elif case == "tiny":
        X, _ = make_blobs(300, n_features=4, centers=3, random_state=4)
        X = X * 1e-8
        C0 = initial_centroids(X, 3, "random", 0)
    else:
        X, _ = make_blobs(300, n_features=64, centers=8, random_state=5)
        C0 = initial_centroids(X, 8, "k-means++", 0)
    rep = assert_bound_holds(run(X, C0, 3, *knobs))
    assert all(math.isfinite(r.proven_bound) or knobs != (1e14, 4000.0) for r in rep.per_iteration)


def test_report_shows_the_bound_next_to_the_observed_error():
    X = DATASETS["iris"]
    result = run(X, initial_centroids(X, 3, "random", 0), 2, 1e6, 4000.0)
    text = result.report.summary()
    head = text.splitlines()[0]
    assert head.index("max |dc|") < head.index("proven |dc|") < head.index("objective")
    doc = result.report.to_dict()
    assert all("proven_bound" in r for r in doc["per_iteration"])
    assert doc["sharpness_bound"]["layers"][0]["kind"] == "update"


# ---- the variants with a bound: damped (step eta) and trimmed (an attention sink in the assign head) ----------

#: (variant, parameters): eta = 0.5 and 0.25 (1 - eta a float64, as the bound requires); radii that leave out points.
BOUNDED = [("damped", {"eta": 0.5}), ("damped", {"eta": 0.25}), ("trimmed", {"radius": 0.3}), ("trimmed", {"radius": 0.2})]


@functools.lru_cache(maxsize=64)
def variant_circuit(name: str, param: tuple, d: int, k: int, T: int, beta: float, beta_update: float):
    from circuits.variants import get_variant

    return get_variant(name).build(d, k, T, sharpness=Sharpness(beta=beta, beta_update=beta_update), **dict(param))


def run_variant(name, params, X, C0, T, beta=1e14, beta_update=4000.0):
    X, C0 = np.asarray(X, float), np.asarray(C0, float)
    circ = variant_circuit(name, tuple(sorted(params.items())), X.shape[1], C0.shape[0], T, beta, beta_update)
    return run_problem(X, C0, T, circuit=circ)


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problems(max_n=60, max_d=5, max_k=5), st.sampled_from(BOUNDED), st.sampled_from(KNOBS))
def test_variant_bound_holds_on_hypothesis_problems(problem, variant, knobs):
    X, C0, T = problem
    assert_bound_holds(run_variant(*variant, X, C0, T, *knobs))


@pytest.mark.parametrize("variant", BOUNDED, ids=lambda v: f"{v[0]}-{list(v[1].values())[0]}")
@pytest.mark.parametrize("knobs", [(1e14, 4000.0), (1e6, 4000.0), (1e3, 30.0)])
def test_variant_bound_holds_on_iris(variant, knobs):
    X = DATASETS["iris"]
    rep = assert_bound_holds(run_variant(*variant, X, initial_centroids(X, 3, "random", 0), 3, *knobs))
    if knobs == (1e14, 4000.0):
        assert max(r.proven_bound for r in rep.per_iteration) < 1e-200


@pytest.mark.parametrize("variant", BOUNDED, ids=lambda v: f"{v[0]}-{list(v[1].values())[0]}")
def test_variant_bound_is_far_from_zero_where_the_softmax_is_soft(variant):
    """At beta = 1e6 on blobs the softmax is visibly soft: the bound is non-trivial, within ~100x of the observed
    centroid error, and holds at every layer (trimmed: with outliers present)."""
    X = DATASETS["blobs"]
    result = run_variant(*variant, X, initial_centroids(X, 5, "random", 0), 3, 1e6, 4000.0)
    rep = assert_bound_holds(result)
    first = rep.per_iteration[0]
    assert 1e-12 < first.proven_bound < 1e-6
    assert rep.tolerances.centroid < first.max_centroid_error <= first.proven_bound <= 100 * first.max_centroid_error
    if variant[0] == "trimmed":
        assert first.outliers > 0
        _, traj = bound_for_capture(result.capture)
        # Record t's outliers are those of the assignment to the centroids after t updates (assign layer t).
        assert (traj.labels[first.iteration] == -1).sum() == first.outliers


def test_damped_bound_with_lloyds_propagation_is_caught(monkeypatch):
    """Damping carries a fraction |1 - eta| of each centroid's error into the next iteration. Lloyd's propagation
    (the new error is the head's alone) is too small for damped: once the assignments are hard again the head adds
    nothing, but half of the earlier error is still there; the layer-by-layer check finds it."""
    import analysis.proof.bound.update as bound

    X = DATASETS["blobs"]
    result = run_variant("damped", {"eta": 0.5}, X, initial_centroids(X, 5, "random", 0), 3, 1e6, 4000.0)
    assert not bound_violations(result.capture)
    monkeypatch.setattr(bound, "commit_error", lambda delta, head, eta: head)
    found = bound_violations(result.capture)
    assert found and all("centroids" in f for f in found), found


def test_trimmed_bound_for_a_sharper_circuit_or_without_the_sink_is_caught():
    X = DATASETS["blobs"]
    result = run_variant("trimmed", {"radius": 0.3}, X, initial_centroids(X, 5, "random", 0), 2, 1e6, 4000.0)
    assert not bound_violations(result.capture)
    circ, seq = result.circuit, result.encoded.sequence
    L = circ.layout
    Xu = result.encoded.resid[0, seq.points, L["X"]].numpy()
    Cu = result.encoded.resid[0, seq.centroids, L["C_stage"]].numpy()
    sink = float(circ.model.blocks[1].attn.sinks.detach()[0])
    args = (Xu, Cu, 2, 1e7, 4000.0, 16.0, 1e-11, result.report.scale)
    assert sink == -1e6 * (0.3**2 + 5e-11)
    sharper = sharpness_bound(*args[:3], 1e7, *args[4:], sink=-1e7 * (0.3**2 + 5e-11), update_sink=-1e300)
    found = bound_violations(result.capture, proven=sharper)
    assert found and "layer 1 (assign)" in found[0], found
    no_sink = sharpness_bound(*args[:3], 1e6, *args[4:])
    found = bound_violations(result.capture, proven=no_sink)
    assert found and "layer 1 (assign)" in found[0], found


def test_only_damped_and_trimmed_variants_report_a_bound():
    X = DATASETS["iris"]
    C0 = initial_centroids(X, 3, "random", 0)
    for name in ["damped", "trimmed", "soft", "spherical"]:
        rep = run_problem(X, C0, 2, variant=name).report
        bounded = [r.proven_bound is not None for r in rep.per_iteration]
        assert all(bounded) if name in ("damped", "trimmed") else not any(bounded), name
        assert ("proven |dc|" in rep.summary().splitlines()[0]) == (name in ("damped", "trimmed"))
    # A damped step whose 1 - eta is not a float64 breaks the exact |c|^2 of N: no bound is claimed.
    assert run_problem(X, C0, 1, variant="damped:eta=0.1").report.per_iteration[0].proven_bound is None


@pytest.mark.parametrize("live_share", [0.0, 0.01, 0.2, 0.3, 1.0])
@pytest.mark.parametrize("size", [1, 4095, 4096, 65_536])
def test_exp_is_numpys_bit_for_bit(live_share, size):
    """The bound's ``exp`` (:func:`analysis.proof.bound.records.exp`) writes exact zeros for arguments below
    :data:`EXP_ZERO_BELOW` instead of calling ``exp`` on them: it must give ``np.exp``'s numbers, where it skips
    (few live elements) and where it does not, at the edge of the skip (where exp's results are the smallest
    subnormals and 0), for -inf, +inf, NaN, -0.0 and overflowing arguments, as 1-d and 2-d arrays."""
    from analysis.proof.bound.records import EXP_ZERO_BELOW, exp

    rng = np.random.default_rng(size + int(100 * live_share))
    dead = EXP_ZERO_BELOW - rng.random(size) * 10.0 ** rng.integers(-3, 17, size=size)
    special = np.array([-745.2, -745.13, -745.1, -744.44, -708.5, -30.0, -1e-300, -0.0, 0.0, 1.0, 709.7, 710.0,
                        np.inf, np.nan])
    live = np.where(rng.random(size) < 0.5, rng.choice(special, size=size), rng.uniform(-760.0, 10.0, size=size))
    a = np.where(rng.random(size) < live_share, live, dead)
    edges = [EXP_ZERO_BELOW, -np.inf, np.nextafter(EXP_ZERO_BELOW, 0.0), np.nextafter(EXP_ZERO_BELOW, -np.inf)]
    a[: min(size, 4)] = edges[: min(size, 4)]
    for shaped in (a, a.reshape(-1, 1), a.reshape(1, -1)):
        with np.errstate(over="ignore", under="ignore"):
            want = np.exp(shaped)
        got = exp(shaped)
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("seed", range(40))
def test_update_layers_off_support_mass_is_logsumexp_of_each_querys_scores_bit_for_bit(seed):
    """The update layer evaluates every centroid query's off-support ``log sum exp`` from terms shared by all
    queries (:func:`analysis.proof.bound.update.off_mass_terms`); each must equal :func:`logsumexp_vector` of that
    query's own scores (the non-members' ``beta_u (eps_i - 1)``, then the constants and the sinks) to the last bit,
    with empty clusters, outliers (label k) and scores that are -inf or all equal."""
    from analysis.proof.bound import update
    from analysis.proof.bound.records import BoundProblem, log_sum_shifted, logsumexp_vector

    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 40)), int(rng.integers(1, 6))
    beta_u = float(rng.choice([1.0, 30.0, 1e4, 1e7]))
    sink_terms = np.array([] if seed % 2 else [float(rng.normal(0, 20))])
    eps = rng.choice([0.0, 5e-324, 1e-12, 0.3, 1.0], size=n) * (rng.random(n) if seed % 3 else 1.0)
    a = rng.integers(0, k + (1 if sink_terms.size else 0), size=n)
    p = BoundProblem(np.zeros((n, 1)), np.zeros(k), 1.0, beta_u, 1.0, 1.0, None, sink_terms, 0.0, np.zeros(n))
    order = np.argsort(a, kind="stable")
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        shifted, keep, top = update.off_mass_terms(p, eps, a, order, k)
        for j in range(k):
            scores = np.concatenate([beta_u * (eps[a != j] - 1), [-beta_u / 2, math.log(k) - beta_u],
                                     sink_terms - beta_u])
            got = log_sum_shifted(shifted[j][keep[j]], top[j])
            assert np.float64(got).tobytes() == np.float64(logsumexp_vector(scores)).tobytes()


@pytest.mark.parametrize("seed", range(60))
def test_update_layer_equals_each_clusters_straightforward_bound_bit_for_bit(seed):
    """:func:`analysis.proof.bound.update.update_layer` evaluates all clusters' sums, ``log`` and ``exp`` in shared
    calls; each cluster's next centroid, float error, ``delta`` and ``|softmax - hardmax|_1`` bound must equal the
    formulas of the module docstring evaluated for that cluster alone (its members selected by mask, its own scores' ``log sum
    exp``) to the last bit: with empty clusters, outliers (label k), members whose weights are far from uniform
    (``denom <= 0``), damped steps and update sinks."""
    from analysis.proof.bound import update
    from analysis.proof.bound.records import U, BoundProblem, HardState, logsumexp_vector, round_up_scalar

    rng = np.random.default_rng(seed)
    n, d, k = int(rng.integers(1, 50)), int(rng.integers(1, 5)), int(rng.integers(1, 6))
    beta_u = float(rng.choice([1.0, 30.0, 4000.0, 1e7]))
    eta = float(rng.choice([1.0, 1.0, 0.5, 1.25]))
    sink_terms = np.array([] if seed % 2 else [float(rng.normal(0, 20))])
    eps = rng.choice([0.0, 5e-324, 1e-12, 0.3, 1.0], size=n) * (rng.random(n) if seed % 3 else 1.0)
    a = rng.integers(0, k + (1 if sink_terms.size else 0), size=n)
    X = rng.normal(size=(n, d)) * 10.0 ** rng.integers(-3, 3)
    x_inf = np.abs(X).max(axis=1)
    r_x = float((np.sqrt((X**2).sum(axis=1)) * (1 + (d + 2) * U)).max())
    p = BoundProblem(X, np.zeros(k), 1.0, beta_u, 1.0, eta, None, sink_terms, r_x, x_inf)
    C, e, delta = rng.normal(size=(k, d)), rng.random(k) * 1e-15, rng.random(k) * 1e-3
    state = HardState(C.copy(), e.copy(), delta.copy())
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        l1 = update.update_layer(p, state, a, eps)
    c_norm = np.sqrt((C**2).sum(axis=1)) * (1 + (d + 2) * U) + np.sqrt(d) * e
    r_v = r_x + max(r_x, float((c_norm + delta).max()))
    for j in range(k):
        members = a == j
        size = int(members.sum())
        if not size:
            continue  # an empty cluster's formula is evaluated by itself, unchanged
        S = round_up_scalar(np.sum(-np.expm1(-beta_u * eps[members])))
        spread, w_off = 2.0, 1.0
        if size - S > 0:
            spread = min(2.0, round_up_scalar(2 * S / (size - S)))
            scores = np.concatenate([beta_u * (eps[a != j] - 1), [-beta_u / 2, math.log(k) - beta_u],
                                     sink_terms - beta_u])
            log_w = logsumexp_vector(scores) - math.log(size - S)
            with np.errstate(over="ignore", under="ignore"):
                w_off = min(1.0, round_up_scalar(np.exp(np.float64(min(log_w, 1.0)))))
        head = min(round_up_scalar(2 * r_x * spread + w_off * r_v), round_up_scalar(r_v))
        mean = X[members].mean(axis=0)
        e_mean = (size + 1) * U * 1.01 * float(x_inf[members].max())
        assert state.delta[j] == update.commit_error(float(delta[j]), head, eta), j
        if eta == 1.0:
            assert state.C[j].tobytes() == mean.tobytes() and state.e[j] == e_mean, j
        else:
            assert state.C[j].tobytes() == (C[j] + eta * (mean - C[j])).tobytes(), j
        assert l1[j] == min(2.0, round_up_scalar(spread + 2 * w_off)), j


def test_the_reports_bound_is_evaluated_when_first_read_and_is_the_bound(monkeypatch):
    """Verification reads the bound's inputs and leaves its evaluation to the first read of the report's
    ``sharpness_bound`` or a record's ``proven_bound`` (the verdict does not depend on it): the values read must be
    those of :func:`bound_for_capture` to the last bit, evaluated once, and a report pickled, copied or compared
    before the read must carry the same numbers."""
    import copy
    import dataclasses
    import pickle

    import analysis.proof.bound as bound_module
    from analysis.verify import verify_problem

    X, _ = make_blobs(60, centers=3, n_features=2, random_state=4)
    result = run(X, initial_centroids(X, 3, "random", 0), 3, beta=1e5)
    eager = bound_for_capture(result.capture)[0]
    evaluations = []
    evaluate = bound_module.sharpness_bound
    monkeypatch.setattr(bound_module, "sharpness_bound", lambda *a, **k: evaluations.append(1) or evaluate(*a, **k))
    rep = verify_problem(result.capture, 0)
    pickled, copied = pickle.dumps(rep), copy.deepcopy(rep)
    assert evaluations == []  # not evaluated by the verification, nor by pickling or copying
    assert repr(rep.sharpness_bound) == repr(eager) and len(evaluations) == 1
    assert [r.proven_bound for r in rep.per_iteration] == [eager.iteration_bound(t + 1)
                                                          for t in range(len(rep.per_iteration))]
    assert len(evaluations) == 1  # the records share the report's evaluation
    assert rep.per_iteration[-1].proven_bound > 0  # soft enough that the bound is a number, not 0
    for other in (pickle.loads(pickled), copied, dataclasses.replace(rep)):
        assert other == rep and other.to_dict() == rep.to_dict()
    assert rep.to_dict() == result.report.to_dict()
    # Variants without a bound: None, read or not.
    soft = run_problem(X, initial_centroids(X, 3, "random", 0), 2, variant="soft").report
    assert soft.sharpness_bound is None and all(r.proven_bound is None for r in soft.per_iteration)
