"""Circuit discovery on the k-means circuit: the ground-truth graph against a hand derivation, one weight block
adding or removing exactly its edge, ACDC with exact patching, EAP through hard attention, and the scoring
functions against scikit-learn."""

import copy

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from analysis.discovery import scoring
from analysis.discovery.graph import circuit_graph, graph_from_blocks
from circuits.blocks import unembed_matrix
from circuits.build import build_lloyd_circuit

# The tiny case d=2, k=2, T=1 (blocks U0 A1 U2 A3), derived by hand from docs/circuit.md: the input carries data
# in X (points) and C_stage (initial centroids). U head: value X + C -> C_stage (its q/k read only ID, Y and flags:
# Y is data). U MLP: reads C_stage, C, N (+ flags), writes C, C_stage, N. A head: query X, key C and N, value ID
# (constant) -> Y_stage. A MLP: reads Y_stage, Y, writes Y, Y_stage. The readout reads Y and C. An edge u -> v.port
# exists when u comes first and writes a data subspace the port reads.
TINY_CIRCUIT = {
    "in->A0.v", "in->M0", "A0->M0",                                            # U0: commit the initial centroids
    "in->A1.q", "M0->A1.k", "A1->M1",                                          # A1: assign
    "M1->A2.k", "in->A2.v", "M0->A2.v", "in->M2", "A0->M2", "M0->M2", "A2->M2",  # U2: update
    "in->A3.q", "M0->A3.k", "M2->A3.k", "A1->M3", "M1->M3", "A3->M3",          # A3: final assign
    "M0->out", "M1->out", "M2->out", "M3->out",
}


@pytest.fixture(scope="module")
def tiny():
    return build_lloyd_circuit(2, 2, 1)


@pytest.fixture(scope="module")
def tiny_patcher(tiny):
    from analysis.discovery.run import make_patcher
    from analysis.patching.pairs import make_pair
    from sklearn.datasets import make_blobs
    from circuits.initialisation import initial_centroids

    X, _ = make_blobs(n_samples=10, centers=2, random_state=1)
    C0 = initial_centroids(X, 2, "random", seed=1)
    return make_patcher(tiny, [make_pair("move-centroid", X, C0), make_pair("move-point", X, C0)])


def test_tiny_graph_is_the_hand_derivation(tiny):
    g = circuit_graph(tiny)
    assert {e.label for e in g.circuit} == TINY_CIRCUIT
    assert g.data == {"X", "C", "C_stage", "N", "Y", "Y_stage"}
    # 4 blocks: 3 head ports + 1 MLP port per block and the readout, fed by every earlier source.
    assert len(g.edges) == sum(3 * (1 + 2 * L) + (2 + 2 * L) for L in range(4)) + 9
    assert dict((e.label, e.subspaces) for e in g.circuit)["M0->M2"] == ("C", "C_stage", "N")


def _graph(blocks, layout):
    return {e.label for e in graph_from_blocks(blocks, layout, unembed_matrix(layout)).circuit}


def untied(blocks):
    """A copy of each block on its own: the circuit ties weights (one object per block kind), so changing a copy of
    the list would change every block of that kind."""
    return [copy.deepcopy(b) for b in blocks]


def test_one_weight_block_adds_or_removes_exactly_its_edges(tiny):
    layout = tiny.layout
    base = _graph(tiny.blocks, layout)
    blocks = untied(tiny.blocks)
    blocks[3].head.W_V[layout.index("X", 1), 0] = 0.25   # A3's value now reads X as well as ID
    assert _graph(blocks, layout) - base == {"in->A3.v"} and base <= _graph(blocks, layout)
    blocks = untied(tiny.blocks)
    blocks[3].head.W_Q[layout["X"], :] = 0               # A3's query no longer reads X: the (X, C) block of W_QK goes
    assert base - _graph(blocks, layout) == {"in->A3.q"} and _graph(blocks, layout) <= base
    g = graph_from_blocks(blocks, layout, unembed_matrix(layout))
    assert {e.label: e.subspaces for e in g.circuit}["M2->A3.k"] == ("N",)  # the key reads C only against X
    blocks = untied(tiny.blocks)
    blocks[2].head.W_V[layout["X"], :] = 0               # U2's value no longer reads the points
    assert base - _graph(blocks, layout) == {"in->A2.v"} and _graph(blocks, layout) <= base


def test_the_patched_forward_spans_clean_to_corrupted(tiny_patcher):
    p = tiny_patcher
    M = p.run(torch.stack([torch.zeros(p.E), torch.ones(p.E)]).double())
    assert torch.equal(M[0], torch.ones(2, dtype=torch.float64))
    assert torch.allclose(M[1], torch.zeros(2, dtype=torch.float64), atol=1e-12)


def test_edges_outside_the_circuit_have_exactly_no_effect(tiny_patcher):
    effects = tiny_patcher.single_edge_effects()
    truth = tiny_patcher.graph.truth
    assert (effects[~truth] == 0).all()
    assert (effects[truth] != 0).any(axis=1).sum() >= 12


def test_acdc_with_exact_patching_finds_exactly_the_exercised_circuit(tiny_patcher):
    """At threshold 0 ACDC keeps every edge whose removal changes the readout: no spurious edge (outside the circuit
    nothing has an effect), and of the circuit exactly the edges these pairs exercise. The ones they cannot are
    silent by construction: in the first update block no point is assigned yet, so each centroid attends only to
    itself, whose X + C is still 0 — A0 writes 0 and reads no point's X."""
    from analysis.discovery.acdc import acdc, exercised_edges

    p = tiny_patcher
    kept = acdc(p, [0.0, 1.0]).kept
    exercised = exercised_edges(p)
    truth = p.graph.truth
    assert not (kept[0] & ~truth).any()
    assert np.array_equal(kept[0], exercised & truth)
    silent = {e.label for e, x in zip(p.graph.edges, exercised) if e.subspaces and not x}
    assert {"in->A0.v", "A0->M0", "A0->M2"} <= silent
    assert not kept[1].any()


def test_eap_sees_nothing_through_hard_attention_but_does_through_finite_beta():
    """Lloyd's assign head (beta ~ 1e16): every attention weight is exactly 0 or 1, so query and key edges of the
    assign heads get an attribution of exactly 0. The soft construction (finite beta) has gradients there."""
    from analysis.discovery.eap import eap
    from analysis.discovery.run import blobs_problem, make_patcher
    from analysis.patching.pairs import make_pair
    from circuits.variants import get_variant

    X, C0 = blobs_problem(2, 2, 10, 1)
    for variant, nonzero in (("lloyd", False), ("soft", True)):
        circuit = get_variant(variant).build(2, 2, 1)
        p = make_patcher(circuit, [make_pair("move-point", X, C0)])
        s = eap(p)
        assign_qk = [i for i, e in enumerate(p.graph.edges) if e.subspaces and e.dst in ("A1", "A3") and e.port in "qk"]
        assert bool((s[assign_qk] != 0).any()) == nonzero, variant


def test_subgraph_auc_matches_sklearn_on_score_thresholds():
    rng = np.random.default_rng(3)
    truth = np.array([1, 1, 1, 0, 0, 0, 0, 1, 0, 0], dtype=bool)
    scores = rng.permutation(10).astype(float)
    kept = np.array([scores >= t for t in np.unique(scores)])
    assert scoring.auc_from_subgraphs(kept, truth) == pytest.approx(roc_auc_score(truth, scores), abs=1e-12)
    family = scoring.subgraphs_from_scores(scores)
    assert scoring.curve_metrics(family, truth)["auroc"] == pytest.approx(roc_auc_score(truth, scores), abs=1e-12)


def test_subgraph_auc_hand_case():
    truth = np.array([1, 1, 0, 0], dtype=bool)
    # One subgraph {edge 0, edge 2}: TPR 1/2 at FPR 1/2 -> trapezoids (0,0)-(.5,.5)-(1,1): 0.5.
    assert scoring.auc_from_subgraphs(np.array([[1, 0, 1, 0]], dtype=bool), truth) == pytest.approx(0.5)
    # {0, 1}: TPR 1 at FPR 0 -> 1.0; {0}: (0, .5) -> 0.75.
    assert scoring.auc_from_subgraphs(np.array([[1, 1, 0, 0]], dtype=bool), truth) == pytest.approx(1.0)
    assert scoring.auc_from_subgraphs(np.array([[1, 0, 0, 0]], dtype=bool), truth) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        scoring.rates(np.ones((1, 2), dtype=bool), np.ones(2, dtype=bool))


def test_headline_weights_add_the_xb_path_that_drift_measured():
    """docs/training.md measures (analysis/drift, block by block) that training made the update head write `XB`
    (OV `X -> XB`, `C -> XB`) and the assign head read it (QK `XB x XB`). The weight-derived graphs of one step must
    show exactly that as new edges from the update head A0 into the assign head A1, through `XB`; the construction
    has no edge out of A0 through `XB` at all."""
    from analysis.discovery.headline import HEADLINE, step_graphs
    from circuits.training.checkpoint import build_from_config, load_model
    from circuits.training.construction import CONSTANT_SUBSPACES

    model, config = load_model(HEADLINE)
    names = set(model.layout.names)
    construction, trained = step_graphs(model, build_from_config(config), (names, names - set(CONSTANT_SUBSPACES)
                                                                           | {"X"}), atol=0.05)
    assert [e.key for e in construction.edges] == [e.key for e in trained.edges]
    assert not any(e.src == "A0" and "XB" in e.subspaces for e in construction.circuit)
    new = {e.label: e.subspaces for e in trained.circuit}
    assert "XB" in new["A0->A1.k"] and "XB" in new["A0->A1.q"]
    assert {e.label for e in construction.circuit} <= set(new)


def test_swap_graph_reads_its_own_encoder():
    """The swap circuit's encoder puts data in `X` (points) and `C`, `N` (every candidate group's initial centroids)
    and constants everywhere else (point index `PIDX`, group identities and flags): only the former carry edges from
    the input."""
    from analysis.discovery.graph import encoder_subspaces
    from circuits.swap.build import build_swap_circuit

    circuit = build_swap_circuit(2, 3, 1)
    written, data = encoder_subspaces(circuit.encode, circuit.layout)
    assert data == {"X", "C", "N"} and {"PIDX", "ONE", "IS_POINT"} <= written - data
    g = circuit_graph(circuit)
    assert g.n_layers == circuit.n_layers
    from_input = {s for e in g.circuit if e.src == "in" for s in e.subspaces}
    assert from_input == {"X", "C", "N"}


def test_acdc_grouped_per_node_pair_keeps_or_removes_a_group_whole(tiny_patcher):
    """Grouped ACDC tries the edges from one source into one destination node together: in every subgraph of the
    sweep a group is kept whole or removed whole, and at threshold 0 a kept group holds an exercised circuit edge
    (so every spurious edge shares its group with one)."""
    from analysis.discovery.acdc import acdc, exercised_edges, trials, visit_order

    p = tiny_patcher
    groups = [g for _, incoming in visit_order(p) for g in trials(p, incoming, group=True)]
    assert sorted(i for g in groups for i in g) == list(range(p.E))
    assert all(len({(p.graph.edges[i].src, p.graph.edges[i].dst) for i in g}) == 1 for g in groups)
    assert max(len(g) for g in groups) == 3  # a head's q, k and v from one source
    result = acdc(p, [0.0, 1e-3], group=True)
    for g in groups:
        assert (result.kept[:, g] == result.kept[:, g[:1]]).all()
    exercised = exercised_edges(p) & p.graph.truth
    kept_groups = [g for g in groups if result.kept[0, g[0]]]
    assert kept_groups and all(exercised[g].any() for g in kept_groups)
    assert result.runs < len(groups) + 1 <= p.E


def _acdc_one_threshold(p, tau, group):
    """ACDC as published, written out plainly: one threshold, one trial per forward pass, one subgraph a run."""
    from analysis.discovery.acdc import ROUNDING, trials, visit_order
    from analysis.discovery.graph import OUTPUT

    removed = np.zeros(p.E, dtype=bool)
    outgoing = {}
    for i, e in enumerate(p.graph.edges):
        outgoing.setdefault(e.src, []).append(i)
    current = p.run(torch.as_tensor(removed[None], dtype=p.dtype))[0]
    for node, incoming in visit_order(p):
        if node != OUTPUT and removed[outgoing.get(node, [])].all():
            removed[incoming] = True
            continue
        for edges in trials(p, incoming, group):
            trial = removed.copy()
            trial[edges] = True
            new = p.run(torch.as_tensor(trial[None], dtype=p.dtype))[0]
            if float((new - current).abs().mean()) <= tau + ROUNDING:
                removed, current = trial, new
    return ~removed


# Edge by edge the plain reference makes ~150 forward passes (about 5 s on the loaded machine): the slow layer.
@pytest.mark.parametrize("group", [pytest.param(False, marks=pytest.mark.slow), True])
def test_acdc_sweep_with_lookahead_is_acdc_run_once_per_threshold(tiny_patcher, group):
    """The batched sweep (all thresholds in one batch, distinct subgraphs once, up to `lookahead` trials a pass)
    decides exactly as the plain algorithm run on each threshold alone, and with fewer forward passes."""
    from analysis.discovery.acdc import acdc

    p = tiny_patcher
    taus = [0.0, 0.3]
    plain = np.array([_acdc_one_threshold(p, t, group) for t in taus])
    one = acdc(p, taus, group=group, lookahead=1)
    ahead = acdc(p, taus, group=group, lookahead=8)
    assert np.array_equal(one.kept, plain) and np.array_equal(ahead.kept, plain)
    assert np.array_equal(one.metric, ahead.metric)
    assert len({tuple(k) for k in plain}) > 1  # the thresholds do not all agree: the rows are really separate
    assert ahead.runs < one.runs
    with pytest.raises(ValueError):
        acdc(p, taus, lookahead=0)


@pytest.fixture(scope="module")
def swap_case():
    from analysis.discovery.run import blobs_problem, make_patcher
    from analysis.patching.pairs import make_pair
    from circuits.swap.build import build_swap_circuit

    circuit = build_swap_circuit(1, 2, 1)
    X, C0 = blobs_problem(1, 2, 8, 0)
    pairs = [make_pair("move-point", X, C0), make_pair("move-centroid", X, C0)]
    return circuit, X, C0, pairs, make_patcher(circuit, pairs)


def test_swap_pair_encoding_is_the_encoder_in_the_pairs_unit(swap_case):
    """With the problem's own scaling (median-centred, as the swap encoder fits it) the shared-scaling encoder is
    the circuit's encoder bit for bit, for the swap and the learned swap (more centroid groups, one of them
    written only by the step); a pair's two runs share the pair's unit."""
    from analysis.discovery.swap import encode_swap_pair, encode_with_scaling
    from circuits.encoding import fit_unit_scaling
    from circuits.learned.build import build_learned_circuit

    circuit, X, C0, pairs, _ = swap_case
    own = fit_unit_scaling(X, C0, "median")
    for c in (circuit, build_learned_circuit(1, 2, 1)):
        resid, seq = encode_with_scaling(c, X, C0, own.offset[0], float(own.scale[0]))
        assert torch.equal(resid, c.encode(X, C0)[0])
    clean, corrupted, seq = encode_swap_pair(circuit, pairs[0])
    offset, scale = pairs[0].shared_scale()
    lay = circuit.layout
    assert np.array_equal(clean[0, seq.points, lay["X"]].numpy(), (pairs[0].X_clean - offset) / scale)
    assert np.array_equal(corrupted[0, seq.points, lay["X"]].numpy(), (pairs[0].X_corrupted - offset) / scale)


def test_swap_discovery_reads_the_kept_candidate_and_nothing_outside_the_graph(swap_case):
    """The metric's clean readout is the circuit's answer (the kept candidate's centroids, scaled back, equal to
    `SwapCircuit.run`'s on the dense path; `CHOICE` one-hot on its choice); the patched forward spans clean (1) to
    corrupted (0); every candidate edge outside the weight-derived graph has exactly zero effect and exactly zero
    EAP score, so the methods' precision against the graph can only fall through ranking, not through leakage."""
    from analysis.discovery.eap import eap

    circuit, X, C0, pairs, p = swap_case
    run = circuit.run(X, C0, path="dense")
    offset, scale = pairs[0].shared_scale()
    k = circuit.layout.k
    choice, C = p.r_clean[0, :3].numpy(), p.r_clean[0, 3:].numpy().reshape(k, 1)
    np.testing.assert_allclose(C * scale + offset, run.centroids[-1], rtol=1e-12, atol=1e-12 * scale)
    assert choice.tolist() == np.eye(3)[circuit.SPEC.slot(run.choices[-1])].tolist()
    M = p.run(torch.stack([torch.zeros(p.E), torch.ones(p.E)]).double())
    assert torch.equal(M[0], torch.ones(2, dtype=torch.float64))
    assert torch.allclose(M[1], torch.zeros(2, dtype=torch.float64), atol=1e-12)
    truth = p.graph.truth
    effects = p.single_edge_effects()
    assert (effects[~truth] == 0).all() and (effects[truth] != 0).any(axis=1).sum() >= 5
    scores = eap(p)
    assert (scores[~truth] == 0).all() and (scores[truth] != 0).any()


def test_swap_metric_rounding_by_batch_row_is_far_inside_acdcs_margin(swap_case):
    """A subgraph's metric may differ in the last bits with its row in the batch (the swap circuit's update head
    sums fractional attention weights with another vector alignment on odd rows); ACDC's ROUNDING margin must be
    far above that, or its decisions at threshold 0 and 1 would depend on how the trials were batched."""
    from analysis.discovery.acdc import ROUNDING

    p = swap_case[4]
    gen = torch.Generator().manual_seed(0)
    masks = (torch.rand(12, p.E, generator=gen) < torch.linspace(0, 0.9, 12)[:, None]).double()
    batched = p.run(masks)
    alone = torch.cat([p.run(masks[i:i + 1]) for i in range(len(masks))])
    assert float((batched - alone).abs().max()) <= ROUNDING * 1e-2
    assert float((batched - 1).abs().max()) > 0.1  # the subgraphs really differ from the full graph


@pytest.mark.parametrize("name", ["lloyd", "trimmed", "distractor", "swap", "learned"])
def test_the_work_estimate_reads_the_built_circuits_shape_before_building_it(name):
    """discover refuses too much work before it builds anything: the tokens, blocks and candidate edges it
    estimates from a construction's declaration are those of the circuit and patcher it would build."""
    from analysis.discovery.graph import candidate_count
    from analysis.discovery.run import build_construction, construction_layers, construction_tokens, make_patcher
    from analysis.discovery.table import dataset_pairs

    d, k, n, steps = 2, 3, 7, 1
    patcher = make_patcher(build_construction(name, d, k, steps), dataset_pairs("move-point", d, k, n, 0, 2))
    assert patcher.clean.shape[1] == construction_tokens(name, n, k)
    assert patcher.graph.n_layers == construction_layers(name, steps)
    assert patcher.E == candidate_count(construction_layers(name, steps))
