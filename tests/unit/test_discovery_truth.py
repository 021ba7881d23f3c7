"""The ground truth of a discovery task (analysis/discovery/truth.py), checked by another implementation of edge
removal: every member changes the readout on its witness, and ablating any set of non-members changes nothing,
on problems the truth never saw (Hypothesis); the abstract interpretation's intervals hold the concrete runs; the
distractor variant's components carry weight and no effect."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from analysis.discovery.abstract import Val, abstract_model, forward
from analysis.discovery.family import SAMPLERS, encode_pairs, family_pairs, input_abstraction
from analysis.discovery.graph import circuit_graph
from analysis.discovery.run import build_construction
from analysis.discovery.truth import MEMBER, WITNESS_TOL, derive_truth, search_pairs, witness_patcher

SHAPE = (2, 2, 8)  # d, k, n
TASKS = [("lloyd", "move-point", "resample"), ("lloyd", "move-centroid", "resample"), ("lloyd", "move-point", "zero"),
         ("lloyd", "move-point", "mean"), ("distractor", "move-centroid", "resample"),
         ("distractor", "move-point", "zero"), ("distractor", "move-point", "mean")]


@pytest.fixture(scope="module")
def truths():
    d, k, n = SHAPE
    circuits = {name: build_construction(name, d, k, 1) for name in ("lloyd", "distractor")}
    graphs = {name: circuit_graph(c) for name, c in circuits.items()}
    return {task: (circuits[task[0]], derive_truth(circuits[task[0]], graphs[task[0]], task[1], task[2], d, k, n))
            for task in TASKS}


def test_every_member_changes_the_readout_on_its_witness(truths):
    """The witness was found with TransformerLens's split-input hooks; here the methods' patcher (an edge's
    difference added after the port's projection) removes the edge on the same input, and must see the change."""
    for (name, corruption, ablation), (circuit, truth) in truths.items():
        searched = search_pairs(truth)
        members = np.flatnonzero(truth.members)
        assert len(members) > 0
        by_witness: dict = {}
        for i in members:
            w = truth.verdicts[i].witness
            by_witness.setdefault((w["sampler"], w["seed"]), []).append(int(i))
        for edges in by_witness.values():
            changes = witness_patcher(circuit, truth, edges[0], searched).readout_changes(edges)[:, 0]
            for i, change in zip(edges, changes):
                assert change > WITNESS_TOL, (name, corruption, ablation, truth.graph.edges[i].label, change)
                assert change == pytest.approx(truth.verdicts[i].witness["change"], rel=1e-6, abs=1e-12)


@settings(max_examples=20, deadline=None)
@given(task=st.sampled_from(TASKS), kind=st.sampled_from(SAMPLERS), seed=st.integers(0, 5000),
       density=st.floats(0.05, 1.0), pick=st.integers(0, 2**31))
def test_random_ablations_of_non_members_change_nothing(truths, task, kind, seed, density, pick):
    """A fresh problem of the family (seeds the truth's search never used), any subset of the inert edges removed
    at once: the readout is the clean one to float64 rounding."""
    from analysis.discovery.edges import CorruptionInvisible, EdgePatcher

    circuit, truth = truths[task]
    d, k, n = SHAPE
    found = family_pairs(task[1], d, k, n, [seed], (kind,))
    if not found:
        return
    enc = encode_pairs(circuit, [found[0][0]])
    try:
        patcher = EdgePatcher(circuit.model, truth.graph, circuit.layout, enc.sequence, enc.clean, enc.corrupted,
                              reads=enc.reads, ablation=task[2], reference=enc.clean)
    except CorruptionInvisible:
        return
    inert = np.flatnonzero([v.status == "inert" for v in truth.verdicts])
    rng = np.random.default_rng(pick)
    removed = torch.zeros(1, patcher.E, dtype=torch.float64)
    removed[0, inert[rng.random(len(inert)) < density]] = 1
    with torch.no_grad():
        r = patcher.run(removed, readouts=True)[0]
    assert float((r - patcher.r_clean).abs().max()) <= 1e-12


def test_the_inert_edges_are_proven_together(truths):
    for (circuit, truth) in truths.values():
        assert truth.jointly_inert


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(["lloyd", "distractor", "trimmed"]), kind=st.sampled_from(SAMPLERS),
       seed=st.integers(0, 10_000))
def test_the_intervals_hold_every_run(name, kind, seed):
    """Soundness of the abstract interpretation against the model: on a problem of the family, every source's
    output lies in its interval, and equals its constant where the interpretation says constant."""
    from circuits import hook_names

    d, k, n = SHAPE
    circuit = build_construction(name, d, k, 1)
    samples = [p for p, _ in family_pairs("move-point", d, k, n, range(100, 116))]
    found = family_pairs("move-point", d, k, n, [seed], (kind,))
    if not found:
        return
    enc = encode_pairs(circuit, samples + [found[0][0]])
    inputs = input_abstraction(enc.clean[:-1].numpy(), enc.corrupted[:-1].numpy(), circuit.layout)
    assert inputs.covers(enc.clean[-1:].numpy()) and inputs.covers(enc.corrupted[-1:].numpy())
    model = abstract_model(circuit.model, circuit.score_hooks)
    trace = forward(model, inputs.val, np.zeros(inputs.val.lo.shape, bool))
    names = {(layer, "attn"): hook_names.attn_out(layer) for layer in range(model.n_layers)}
    names.update({(layer, "mlp"): hook_names.mlp_out(layer) for layer in range(model.n_layers)})
    _, cache = circuit.model.run_with_cache(torch.cat([enc.clean[-1:], enc.corrupted[-1:]]))
    for key, name in names.items():
        val: Val = trace.outputs[key][0]
        out = cache[name].numpy()
        assert (out >= val.lo).all() and (out <= val.hi).all(), key
        assert (out[:, val.zero] == 0).all(), key
        assert np.allclose(out[:, val.const], val.lo[val.const], rtol=1e-9, atol=1e-12), key


def test_the_first_update_head_writes_exactly_zero():
    """Before any point is assigned (Y = 0 on every input), each centroid attends only to itself, whose X + C is
    still 0: the interpretation proves A0's output exactly zero everywhere, on every input."""
    d, k, n = SHAPE
    circuit = build_construction("lloyd", d, k, 1)
    enc = encode_pairs(circuit, [p for p, _ in family_pairs("move-point", d, k, n, range(8))])
    inputs = input_abstraction(enc.clean.numpy(), enc.corrupted.numpy(), circuit.layout)
    trace = forward(abstract_model(circuit.model), inputs.val, np.zeros(inputs.val.lo.shape, bool))
    assert trace.outputs[(0, "attn")][0].zero.all()
    assert not trace.outputs[(2, "attn")][0].zero.all()


def test_distractors_carry_weight_and_no_effect(truths):
    """The distractor variant's extra edges (echo and scratch into the next assign MLPs, the input into the assign
    MLPs through units that never fire) are weight-connected, so the weights-only baseline counts them, but inert
    under resample and mean; under a zero ablation the input's ONE leaves the never-firing units and they fire."""
    lloyd = truths[("lloyd", "move-centroid", "resample")][1]
    labels = {e.label for e in lloyd.graph.edges if e.subspaces}
    for task in [("distractor", "move-centroid", "resample"), ("distractor", "move-point", "mean")]:
        truth = truths[task][1]
        extra = [i for i, e in enumerate(truth.graph.edges) if e.subspaces and e.label not in labels]
        assert {truth.graph.edges[i].label for i in extra} >= {"A0->M1", "A0->M3", "M0->M1", "M2->M3", "in->M1"}
        assert all(truth.weight_connected[i] and truth.verdicts[i].status == "inert" for i in extra), task
        assert {truth.verdicts[i].reason for i in extra} >= {"flow"}
    zero = truths[("distractor", "move-point", "zero")][1]
    index = {e.label: i for i, e in enumerate(zero.graph.edges)}
    assert zero.verdicts[index["in->M3"]].status == MEMBER
