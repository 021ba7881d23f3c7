"""Scoring as the field does (analysis/discovery/scoring.py): the step ("pessimistic") AUC against hand-computed
ROC curves, the monotone envelope, average precision and the envelope AUROC against scikit-learn, node-level
scores, and the baselines."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from sklearn.metrics import average_precision_score, roc_auc_score

from analysis.discovery import scoring


def test_step_auc_of_a_hand_computed_roc():
    """Truth: edges 0-3 in, 4-7 out. Subgraphs, as a threshold sweep gives them: {0}, {0, 4}, {0, 1, 4, 5},
    {0, 1, 2, 4, 5}, everything. ROC points (FPR, TPR): (0, 1/4), (1/4, 1/4), (1/2, 1/2), (1/2, 3/4), (1, 1).
    Step area by hand: rises of 1/4 at x = 0, 1/4 at x = 1/2, 1/4 at x = 1/2 and 1/4 at x = 1:
    1/4 (1 - 0) + 1/4 (1 - 1/2) + 1/4 (1 - 1/2) + 1/4 (1 - 1) = 1/2. The trapezoid of the same points:
    1/4 * 1/4 + 1/4 * 3/8 + 1/2 * 7/8 = 1/16 + 3/32 + 7/16 = 19/32."""
    truth = np.array([1, 1, 1, 1, 0, 0, 0, 0], dtype=bool)
    kept = np.zeros((5, 8), dtype=bool)
    for r, edges in enumerate([[0], [0, 4], [0, 1, 4, 5], [0, 1, 2, 4, 5], list(range(8))]):
        kept[r, edges] = True
    m = scoring.curve_metrics(kept, truth)
    assert m["step_auc"] == pytest.approx(1 / 2, abs=1e-15)
    assert m["auroc"] == pytest.approx(19 / 32, abs=1e-15)
    # The reference implementations' own examples: a diagonal of steps loses the triangles.
    assert scoring.step_auc(np.array([0, 0.5, 1.0]), np.array([0, 0.5, 1.0])) == pytest.approx(0.25)
    assert scoring.step_auc(np.array([0, 0.25, 0.5, 1.0]), np.array([0, 0.25, 0.5, 1.0])) == pytest.approx(5 / 16)
    assert scoring.step_auc(np.array([0, 1.0]), np.array([0, 1.0])) == 0.0


def test_a_non_monotone_sweep_is_scored_on_its_envelope():
    """ACDC's subgraphs at two thresholds need not be nested: here one threshold keeps half the truth and nothing
    else (FPR 0, TPR 1/2), another a single false edge (FPR 1/4, TPR 0). Sorted by FPR the raw points dip:
    (0, 0), (0, 1/2), (1/4, 0), (1, 1), a trapezoid of 1/4 * 1/4 + 3/4 * 1/2 = 7/16. The envelope drops the dip,
    as InterpBench's make_monotonically_increasing does: (0, 0), (0, 1/2), (1, 1), trapezoid 3/4, step area 1/2."""
    truth = np.array([1, 1, 0, 0, 0, 0], dtype=bool)
    kept = np.array([[1, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0]], dtype=bool)
    xs, ys = scoring.monotone_envelope(*scoring.rates(kept, truth))
    assert xs.tolist() == [0.0, 0.0, 1.0] and ys.tolist() == [0.0, 0.5, 1.0]
    m = scoring.curve_metrics(kept, truth)
    assert m["auroc_raw"] == pytest.approx(7 / 16)
    assert m["auroc"] == pytest.approx(3 / 4) and m["step_auc"] == pytest.approx(1 / 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=3, max_size=40))
def test_score_thresholds_agree_with_sklearn(items):
    """For a score, the envelope's trapezoid is scikit-learn's roc_auc_score, average precision is its
    average_precision_score, and the step area never exceeds the trapezoid (equal without ties)."""
    scores = np.array([s for s, _ in items], dtype=float)
    truth = np.array([t for _, t in items])
    if truth.all() or not truth.any():
        return
    family = scoring.subgraphs_from_scores(scores)
    m = scoring.curve_metrics(family, truth)
    assert m["auroc"] == pytest.approx(roc_auc_score(truth, scores), abs=1e-12)
    assert m["auprc"] == pytest.approx(average_precision_score(truth, scores), abs=1e-12)
    assert m["step_auc"] <= m["auroc"] + 1e-12
    if len(np.unique(scores)) == len(scores):
        assert m["step_auc"] == pytest.approx(m["auroc"], abs=1e-12)


def test_nodes_are_in_the_truth_through_their_edges():
    """Edges 0: in->A0, 1: A0->M0, 2: M0->out; incidence over nodes A0, M0."""
    inc = np.array([[1, 0], [1, 1], [0, 1]], dtype=bool)
    assert scoring.node_family(np.array([True, False, False]), inc).tolist() == [[True, False]]
    assert scoring.node_family(np.array([[False, False, True], [False, False, False]]), inc).tolist() == [
        [False, True], [False, False]]
    # Every node in the truth: no curve, NaN (never a number that looks like a score).
    assert np.isnan(scoring.curve_metrics(np.ones((1, 2), bool), np.ones(2, bool))["step_auc"])


def test_precision_recall_and_status_hand_case():
    truth = np.array([1, 1, 0, 0], dtype=bool)
    pr = scoring.precision_recall(np.array([1, 0, 1, 0], dtype=bool), truth)
    assert (pr.precision, pr.recall, pr.found, pr.missed, pr.spurious) == (0.5, 0.5, 1, 1, 1)
    empty = scoring.precision_recall(np.zeros(4, dtype=bool), truth)
    assert np.isnan(empty.precision) and empty.to_dict()["precision"] is None
    assert scoring.edge_status(np.array([1, 0, 1, 0], dtype=bool), truth) == ["found", "missed", "spurious", "absent"]
    assert scoring.top_k(np.array([0.0, 3.0, 1.0, 2.0]), 2).tolist() == [False, True, False, True]
    assert scoring.top_k(np.array([0.0, 0.0, 1.0, 0.0]), 2).tolist() == [False, False, True, False]


def test_baselines_hand_case():
    """Weights-only flags edges 0-3, of which 0-1 are in the truth (2 of 4 out): its one point is (FPR 1/2, TPR 1),
    step area 1/2, trapezoid 3/4. Random scores have mean AUROC about 1/2."""
    truth = np.array([1, 1, 0, 0, 0, 0], dtype=bool)
    connected = np.array([1, 1, 1, 1, 0, 0], dtype=bool)
    inc = np.eye(6, dtype=bool)
    base = scoring.baselines(truth, np.ones(6, bool), connected, inc, draws=400, seed=1)
    w = base["weights-only"].edges
    assert w["step_auc"] == pytest.approx(0.5) and w["auroc"] == pytest.approx(0.75)
    mean, std = base["random"]["edges"]["auroc"]
    assert abs(mean - 0.5) < 3 * std / np.sqrt(400) + 1e-9 and std > 0
