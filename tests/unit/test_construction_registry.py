"""Every construction declared in the registry (analysis/constructions: one ConstructionSpec each) runs through its
declaration alone, held to independent references: its own numpy reference run from the same start, Lloyd's as
scikit-learn computes it, and its circuit's depth as built. A new declaration is picked up here by itself."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from analysis.constructions import CONSTRUCTIONS, checkpoint_construction, trained_constructions
from analysis.verify.swap import CENTROID_TOLERANCE, spread
from circuits import reference

NAMES = sorted(CONSTRUCTIONS)


def blobs(seed: int, n: int = 40, d: int = 2, k: int = 3):
    """Blobs started from ``k`` points of one blob (the start the swap's moves matter on: its candidates differ)."""
    X, y = make_blobs(n_samples=n, centers=k, n_features=d, cluster_std=1.2, random_state=seed)
    return X, X[np.flatnonzero(y == 0)[:k]]


@pytest.mark.parametrize("name", NAMES)
def test_a_declared_construction_runs_as_its_reference_and_beside_sklearns_lloyd(name):
    construction = CONSTRUCTIONS[name]
    X, C0 = blobs(1)
    result = construction.run(X, C0, 3)
    doc = result.doc
    assert doc["verified"] and doc["variant"] == f"construction:{name}"
    # Its own reference from the same start, with the knobs of the circuit the run built.
    ref = construction.reference_run(result.circuit, X, C0, 3)
    assert [r["choice"] for r in doc["per_iteration"]] == list(ref.choices)
    np.testing.assert_allclose(doc["centroids"], ref.centroids[-1], rtol=0, atol=CENTROID_TOLERANCE * spread(X))
    # Lloyd's yardstick is scikit-learn's Lloyd from the same initial centroids.
    for rec in doc["per_iteration"]:
        km = KMeans(3, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=rec["iteration"]).fit(X)
        assert rec["objective_lloyd"] == pytest.approx(km.inertia_, rel=1e-9)
    # Its candidates per step are the declared circuit's; the reference's objective of the candidate it kept is the
    # objective of the reference's next state (and the circuit's, of its own).
    assert doc["candidates"] == [c for c, _ in result.circuit.SPEC.candidates]
    for rec, C in zip(doc["per_iteration"], ref.centroids[1:]):
        assert rec["reference_candidate_objectives"][rec["reference_choice"]] == pytest.approx(
            reference.objective(X, C), rel=1e-9)
        assert rec["candidate_objectives"][rec["choice"]] == pytest.approx(rec["objective_circuit"], rel=1e-9)
    assert doc["inertia"] == pytest.approx(reference.objective(X, ref.centroids[-1]), rel=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_its_depth_is_known_before_it_is_built(name):
    construction = CONSTRUCTIONS[name]
    for steps in (1, 3):
        assert construction.layers(steps) == construction.build(2, 3, steps).n_layers


@pytest.mark.parametrize("name", NAMES)
def test_its_evaluation_model_follows_its_reference(name):
    model = CONSTRUCTIONS[name].model()
    pairs = [blobs(s, 30, 2, 3) for s in (4, 5)]
    X, C0 = np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
    cents, agreement = model.trajectory(X, C0, 2)
    assert np.all(agreement == 1.0)
    for b, (x, c0) in enumerate(pairs):
        ref = model.reference(model.circuit([(x, c0)], 2), x, c0, 2)
        np.testing.assert_allclose(cents[:, b], ref.centroids, rtol=0, atol=CENTROID_TOLERANCE * spread(x))



@pytest.mark.parametrize("name", NAMES)
def test_a_run_gets_its_own_circuit_whatever_an_earlier_caller_did_to_theirs(name):
    """Two runs of one problem are two circuits: a weight one caller edits (through ``.data``, as interpretability
    code does) is not in the next caller's circuit, whose run is still its reference's."""
    construction = CONSTRUCTIONS[name]
    X, C0 = blobs(2)
    first = construction.run(X, C0, 2)
    assert first.doc["verified"]
    for p in first.circuit.model.parameters():
        p.data.mul_(0.5)
    second = construction.run(X, C0, 2)
    assert second.circuit is not first.circuit and second.doc["verified"]
    assert second.doc["centroids"] == first.doc["centroids"]

def test_a_checkpoint_names_its_trained_construction_and_nothing_else(tmp_path):
    import json

    from circuits.learned import checkpoint

    assert trained_constructions() == ("learned",)
    found = checkpoint_construction(checkpoint.DEFAULT_PATH.parent)  # the shipped folder, checkpoints/learned
    assert found == (CONSTRUCTIONS["learned"], checkpoint.DEFAULT_PATH)
    assert np.array_equal(found[0].factors(found[1]), checkpoint.load().alphas)
    (tmp_path / "config.json").write_text(json.dumps({"model": {}}))  # a trained model's folder
    assert checkpoint_construction(tmp_path) is None and checkpoint_construction(None) is None
    assert CONSTRUCTIONS["swap"].factors() is None
