"""Why EAP and EAP-IG give the same AUROC and recall on the safeguarded swap circuit (docs/discovery.md, "EAP and
EAP-IG on the swap circuit"): not because their scores agree — they do not — but because both give a nonzero
score to the same few circuit edges and exactly zero to every other edge, and AUROC and top-k recall see only
that support. The zeros come from the weights: a head whose attention weights are all exactly 0 or 1 has a
softmax Jacobian of exactly 0, so its query and key ports have no gradient at all."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from analysis.discovery import scoring


@pytest.fixture(scope="module")
def swap_patcher():
    from analysis.discovery.run import blobs_problem, make_patcher
    from analysis.patching.pairs import make_pair
    from circuits.swap.build import build_swap_circuit

    circuit = build_swap_circuit(1, 2, 1)
    X, C0 = blobs_problem(1, 2, 8, 0)
    return circuit, make_patcher(circuit, [make_pair("move-point", X, C0), make_pair("swap-centroids", X, C0)])


def test_eap_and_eap_ig_differ_in_value_but_share_their_support(swap_patcher):
    from analysis.discovery.eap import eap, eap_ig

    _, p = swap_patcher
    truth = p.graph.truth
    s_eap, s_ig = eap(p), eap_ig(p, steps=8)
    support = s_eap != 0
    # The values differ (the gradient moves along the path: the MLPs' pieces and the update head's finite beta)...
    assert not np.array_equal(s_eap, s_ig)
    # ...the support does not, and it lies inside the circuit and is smaller than it.
    assert np.array_equal(support, s_ig != 0)
    assert not (support & ~truth).any() and 0 < support.sum() < truth.sum()
    # So the ROC curve is the support's: AUROC = 1/2 + 1/2 * (share of circuit edges scored), for both methods,
    # and the top-|circuit| edges are the support (recall = that share).
    share = support[truth].mean()
    for s in (s_eap, s_ig):
        assert scoring.curve_metrics(scoring.subgraphs_from_scores(s), truth)["auroc"] == pytest.approx(
            0.5 + 0.5 * share, abs=1e-12)
        assert roc_auc_score(truth, s) == pytest.approx(0.5 + 0.5 * share, abs=1e-12)
        assert np.array_equal(scoring.top_k(s, int(truth.sum())), support)


def test_hard_attention_heads_have_exactly_zero_query_and_key_gradients(swap_patcher):
    """At every point of EAP-IG's path, a head whose attention weights are all exactly 0 or 1 gives its q and k
    ports a gradient of exactly 0; the heads with a gradient there are among those with a weight strictly
    between 0 and 1 (the update head's beta_update = 4000, means over tied members)."""
    from circuits import hook_names

    circuit, p = swap_patcher
    L = p.graph.n_layers
    with_qk_gradient = set()
    from analysis.discovery.eap import interpolation_points

    for a in interpolation_points(8):
        x = p.corrupted + float(a) * (p.clean - p.corrupted)
        _, grads = p.run(torch.zeros(1, p.E, dtype=p.dtype), x=x, probe=True)
        names = [hook_names.pattern(layer) for layer in range(L)]
        _, cache = circuit.model.run_with_cache(x, names_filter=hook_names.names_filter(names))
        for layer, name in enumerate(names):
            pattern = cache[name]
            hard = bool(((pattern == 0) | (pattern == 1)).all())
            moved = any(bool(grads[(f"A{layer}", port)].abs().max() > 0) for port in "qk")
            assert not (hard and moved), f"layer {layer}: all weights 0/1 but a q/k gradient at a={a}"
            if moved:
                with_qk_gradient.add(layer)
    # Only the update head (finite beta_update): every other head's queries and keys are invisible to EAP(-IG).
    update = {layer for layer, block in enumerate(circuit.stacked_blocks()) if block.kind == "update"}
    assert with_qk_gradient == update and len(update) == 1
