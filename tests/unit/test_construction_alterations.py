"""A construction's run that the user altered (weights edited, hooks added to the stacked model) is named as altered
by its verdict, its document and its page, and the page never draws a re-run of another circuit as the run.

The oracle is what the test itself did: the one parameter it edited, the one hook point it hooked, and whether it
undid them before the page was made.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from analysis.constructions.common import ConstructionResult, cluster_document, run_on_path
from analysis.constructions.learned import LEARNED
from analysis.constructions.swap import SWAP
from analysis.report.construction import construction_report
from circuits import hook_names


def _problem() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(c, 0.3, size=(12, 2)) for c in ([0, 0], [3, 0], [0, 3])])
    return X, X[[0, 1, 12]].copy()


def _run(construction, circuit, X, C0) -> ConstructionResult:
    """The steps of :func:`analysis.constructions.common.run_construction`, on a circuit the test altered first."""
    run = run_on_path(circuit, X, C0, "auto")
    checked = construction.verify(run, X, C0, circuit)
    return ConstructionResult(construction, circuit, run, checked,
                              cluster_document(circuit, run, checked, X, C0, construction), X, C0)


def _text(result) -> str:
    return re.sub(r"<script.*?</script>", "", construction_report(result, "blobs").to_html(), flags=re.S)


def _drawn(result) -> int:
    return len(construction_report(result, "blobs").figures())


def test_a_run_as_built_records_no_alteration_and_its_page_draws_the_attention():
    X, C0 = _problem()
    result = SWAP.run(X, C0, 2)
    assert not result.run.alterations and result.run.alterations.weight_edits == []
    assert not {"weight_edits", "added_hooks", "altered_by"} & set(result.doc)
    assert not any(note.startswith("altered") for note in result.doc["notes"])
    assert _drawn(result) == 3 and "attention not drawn" not in _text(result)  # objectives and the two heads


@pytest.mark.parametrize("construction", [SWAP, LEARNED], ids=["swap", "learned"])
def test_a_weight_edited_before_the_run_is_named_by_its_verdict_document_and_page(construction):
    X, C0 = _problem()
    circuit = construction.circuit_for([(X, C0)], 2, None)
    layer = circuit.layer(0, "select")
    name = hook_names.param(layer, "attn", "W_O")
    with torch.no_grad():
        circuit.model.blocks[layer].attn.W_O.data *= -1  # through .data: the bits tell it, not a version counter
    result = _run(construction, circuit, X, C0)
    assert result.run.alterations.weight_edits == [name]
    doc = result.doc
    assert not doc["verified"] and doc["weight_edits"] == [name] and "added_hooks" not in doc
    assert doc["altered_by"] == [f"weight {name} (changed since the build)"]
    assert f"altered by weight {name} (changed since the build)" in doc["verdict"]
    assert any(note.startswith("altered: weights changed since the build (1 parameter(s): " + name)
               for note in doc["notes"])
    text = _text(result)
    assert "altered" in text and name in text and "need not hold of it" in text
    assert _drawn(result) == 3  # the circuit is as it ran: its re-run is the run


def test_bits_put_back_as_built_are_no_edit():
    X, C0 = _problem()
    circuit = SWAP.circuit_for([(X, C0)], 2, None)
    W = circuit.model.blocks[3].attn.W_Q
    before = W.detach().clone()
    with torch.no_grad():
        W.data *= 2
        assert circuit.alterations().weight_edits == ["blocks.3.attn.W_Q"]
        W.data.copy_(before)
    assert not circuit.alterations()


def test_an_edit_after_the_run_leaves_the_attention_out_and_says_why():
    X, C0 = _problem()
    result = SWAP.run(X, C0, 2)
    W = result.circuit.model.blocks[3].attn.W_Q
    before = W.detach().clone()
    with torch.no_grad():
        W.data *= 2
    text = _text(result)
    assert "attention not drawn: the circuit was changed after this run" in text
    assert "blocks.3.attn.W_Q" in text and "the run: the construction as built" in text
    assert _drawn(result) == 1 and "need not hold of it" not in text  # the run itself was the construction's
    with torch.no_grad():
        W.data.copy_(before)
    assert _drawn(result) == 3


def test_a_hook_added_to_the_model_is_named_and_taking_it_off_after_the_run_leaves_the_attention_out():
    X, C0 = _problem()
    circuit = SWAP.circuit_for([(X, C0)], 2, None)
    point = hook_names.resid_post(0)
    circuit.model.add_hook(point, lambda activation, hook: None)  # runs, changes nothing
    result = _run(SWAP, circuit, X, C0)
    assert result.run.alterations.hooks == (point,) and result.run.path == "dense"  # the structured path refuses it
    doc = result.doc
    assert doc["verified"] and doc["added_hooks"] == [point] and "weight_edits" not in doc
    assert any(note.startswith(f"altered: hooks added on {point}") for note in doc["notes"])
    assert _drawn(result) == 3
    circuit.model.reset_hooks()
    text = _text(result)
    assert "attention not drawn: the circuit was changed after this run" in text and _drawn(result) == 1
