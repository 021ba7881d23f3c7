"""Weights changed after a circuit was built (an ablation through ``.data``, an edit of its HookedTransformer) are
named wherever the run is described: ``KMeansCircuit.weight_edits``, the verification report and its verdict, the
JSON, the report's header and the weight views. The reference for "changed" is the weights as the build wrote them;
a change of bits that changes no behaviour (the sign of a zero) is named too, and the verdict stays the run's."""

import copy

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

from analysis.capture import capture
from analysis.pipeline import as_run
from analysis.report import build_report
from analysis.views import qk_circuit
from circuits.build import build_lloyd_circuit
from circuits.encoding import encode
from circuits.initialisation import initial_centroids

W_OUT = "blocks.2.mlp.W_out"  # the second update block's MLP output


def problem():
    X, _ = make_blobs(60, n_features=2, centers=3, random_state=0)
    return X, initial_centroids(X, 3, "random", 0)


def run_of(circuit, path="structured"):
    X, C0 = problem()
    return as_run(capture(circuit, encode(circuit.layout, X, C0), path=path))


def test_a_fresh_circuit_has_none_and_its_json_no_key():
    circuit = build_lloyd_circuit(2, 3, 2)
    run = run_of(circuit)
    assert circuit.weight_edits() == [] and run.report.weight_edits == []
    assert "weight_edits" not in run.to_json() and "weight_edits" not in run.report.to_dict()
    assert run.report.verified


@pytest.mark.parametrize("where", ["state dict", "model"])
def test_an_edit_through_data_is_named_in_the_verdict_json_header_and_weight_views(where):
    circuit = build_lloyd_circuit(2, 3, 2)
    if where == "model":
        circuit.model.blocks[2].mlp.W_out.data.mul_(1.5)
    else:
        circuit.weights.parameters[W_OUT].data.mul_(1.5)
    assert circuit.weight_edits() == [W_OUT]
    for path in ("structured", "dense"):
        run = run_of(circuit, path)
        assert run.report.weight_edits == [W_OUT] and not run.report.verified
        assert f"weight {W_OUT} (changed since the build)" in run.report.verdict
        assert run.to_json()["weight_edits"] == [W_OUT] and run.report.to_dict()["weight_edits"] == [W_OUT]
    facts = {f.label: f.value for group in build_report(run).header.groups.values() for f in group}
    assert facts["weights changed since the build"] == f"1 parameter(s): {W_OUT}"
    # The variant's own line ("none: the exact construction") describes the build, and says so.
    assert "alteration" not in facts and facts["alteration, as built"].startswith("none")
    assert any(W_OUT in caveat for caveat in qk_circuit(run).caveats)


def test_a_change_of_bits_alone_is_named_and_the_run_still_verified():
    """-0.0 for a zero weight: the same run bit for bit, so VERIFIED is still the run's word; the weights are
    nonetheless not the ones built, and the header says so."""
    circuit = build_lloyd_circuit(2, 3, 2)
    before = run_of(circuit)
    W = circuit.weights.parameters[W_OUT]
    zeros = W.data == 0
    assert bool(zeros.any())
    W.data[zeros] = -0.0
    after = run_of(circuit)
    assert after.report.weight_edits == [W_OUT] and after.report.verified
    np.testing.assert_array_equal(after.labels, before.labels)
    assert after.report.verdict == before.report.verdict


def test_edits_of_the_state_dict_after_the_model_exists_did_not_run_and_are_not_named():
    """Once the HookedTransformer exists it is what runs (``runnable``); it holds copies of the weights, so an edit
    of the state dict after it was built changes nothing that runs."""
    circuit = build_lloyd_circuit(2, 3, 2)
    circuit.model
    circuit.weights.parameters[W_OUT].data.mul_(1.5)
    assert circuit.weight_edits() == []
    assert run_of(circuit).report.verified


def test_a_tensor_shared_by_tied_layers_is_named_under_each_of_its_names():
    from analysis.estimator import with_assign_knobs
    from circuits.sharpness import Sharpness

    derived = with_assign_knobs(build_lloyd_circuit(2, 3, 0, Sharpness()), Sharpness(beta=50.0), 2)
    derived.weights.parameters["blocks.0.mlp.W_out"].data.mul_(1.5)  # every update layer's W_out
    assert derived.weight_edits() == ["blocks.0.mlp.W_out", "blocks.2.mlp.W_out", "blocks.4.mlp.W_out"]


def test_a_copy_of_an_edited_circuit_keeps_what_it_was_built_with():
    circuit = build_lloyd_circuit(2, 3, 2)
    W = circuit.weights.parameters[W_OUT]
    built = W.detach().clone()
    W.data.mul_(1.5)
    assert copy.deepcopy(circuit).weight_edits() == [W_OUT]
    with torch.no_grad():
        W.copy_(built)  # back to the bits it was built with
    assert circuit.weight_edits() == []


def test_weights_changed_after_the_run_are_drawn_with_a_caveat_saying_so():
    """The weight views read the weights as they are when drawn; an edit made after the run (of a fitted
    estimator's circuit, say) is then not what ran, and the caveat above them says so."""
    from analysis.estimator import CircuitKMeans, clear_circuit_cache

    X, _ = problem()
    clear_circuit_cache()
    est = CircuitKMeans(3, max_iter=3, random_state=0).fit(X)
    assert est.report_.weight_edits == [] and est.report_.verified
    est.circuit_.weights.parameters[W_OUT].data.mul_(1.5)
    caveats = qk_circuit(est).caveats
    assert any("changed after this run" in c and W_OUT in c for c in caveats)
    assert est.report_.verified  # the run's report is the run's
