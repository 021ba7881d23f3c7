"""The structured execution path: same residual stream as the dense HookedTransformer forward, refusals, capture."""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

from analysis.capture import PathUnavailable, capture
from analysis.verify import verify_problem
from circuits import hook_names
from circuits.build import build_lloyd_circuit
from circuits.encoding import encode
from circuits.initialisation import initial_centroids
from circuits.structured import (
    PAIR_BUDGET,
    StructuredPathUnavailable,
    group_identical_rows,
    structured_forward,
)
from circuits.variants import VARIANTS, get_variant
from circuits.variants.attention import sparsemax_grouped_rows, sparsemax_rows

from conftest import lloyd_circuit
from command_server import run_command


def problem(n, d, k, seed=0):
    X, _ = make_blobs(n, n_features=d, centers=max(k, 1), random_state=seed)
    return X, initial_centroids(X, k, "random", seed)


def dense_residuals(circuit, encoded):
    with torch.no_grad():
        _, cache = circuit.model.run_with_cache(encoded.resid, start_at_layer=0,
                                                names_filter=lambda name: name.endswith("resid_post"))
    return [cache[hook_names.resid_post(layer)] for layer in range(circuit.n_layers)]


def max_layer_difference(circuit, encoded):
    """Largest difference between the structured and the dense residual stream; the structured path runs the same
    bits on the circuit's plain modules (no TransformerLens, circuits.plain) and on its HookedTransformer."""
    _, plain = structured_forward(circuit.weights.plain(), encoded.resid, circuit.score_hooks)
    _, records = structured_forward(circuit.model, encoded.resid, circuit.score_hooks)
    assert all(torch.equal(p.resid_post, r.resid_post) for p, r in zip(plain, records))
    dense = dense_residuals(circuit, encoded)
    return max(float((r.resid_post - d).abs().max()) for r, d in zip(records, dense))


@pytest.mark.parametrize("n", [1, 7, 300, 2000])
def test_lloyd_residual_stream_equals_the_dense_forward(n):
    X, C0 = problem(n, 3, min(4, n))
    circuit = lloyd_circuit(3, C0.shape[0], 2)
    # The residual stream is unit-scaled, so 1e-12 here is 1e-12 of the data scale.
    assert max_layer_difference(circuit, encode(circuit.layout, X, C0)) <= 1e-12


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("n", [5, 300])
def test_every_variant_equals_the_dense_forward(variant, n):
    X, C0 = problem(n, 2, 3, seed=2)
    circuit = get_variant(variant).build(2, 3, 3)
    cap = capture(circuit, encode(circuit.layout, X, C0), path="structured")  # re-encodes as the variant asks
    assert cap.path == "structured"
    assert max_layer_difference(circuit, cap.encoded) <= 1e-12


def test_batch_of_problems():
    Xs = np.stack([problem(50, 2, 3, seed=s)[0] for s in range(3)])
    C0s = Xs[:, :3]
    circuit = lloyd_circuit(2, 3, 2)
    assert max_layer_difference(circuit, encode(circuit.layout, Xs, C0s)) <= 1e-12


def test_groups_are_few_in_the_constructed_circuit():
    """Assign heads: all point keys coincide; update heads: points with one label share a key. So one side of
    every head has at most k + 2 groups (k centroids, BOS, and the points), and an update head k + 1 + (k + 1)."""
    X, C0 = problem(600, 2, 5)
    circuit = lloyd_circuit(2, 5, 3)
    _, records = structured_forward(circuit.model, encode(circuit.layout, X, C0).resid)
    for layer, record in enumerate(records):
        g = record.attention[0]
        assert min(g.queries.size, g.keys.size) <= 2 * 5 + 2, layer


def test_capture_and_verification_agree_with_the_dense_path():
    X, C0 = problem(400, 2, 4, seed=3)
    circuit = lloyd_circuit(2, 4, 3)
    enc = encode(circuit.layout, X, C0)
    dense, fast = capture(circuit, enc), capture(circuit, enc, path="structured")
    rd, rf = verify_problem(dense), verify_problem(fast)
    assert rd.verified and rf.verified and rf.hard_attention
    for a, b in zip(dense.layers, fast.layers):
        np.testing.assert_allclose(b.post.centroids, a.post.centroids, rtol=0, atol=1e-12 * rd.scale)
        np.testing.assert_array_equal(b.post.labels, a.post.labels)
        if b.kind == "assign":
            np.testing.assert_array_equal(b.attention.chosen, a.attention.chosen)
            np.testing.assert_allclose(b.attention.pattern, a.attention.pattern, atol=1e-15)
            np.testing.assert_allclose(b.attention.margin, a.attention.margin, rtol=1e-9)
            np.testing.assert_array_equal(b.attention.leak_bound, a.attention.leak_bound)
        else:
            np.testing.assert_allclose(b.attention.pattern, a.attention.pattern, atol=1e-15)
            np.testing.assert_allclose(b.attention.margin, a.attention.margin, rtol=1e-9)
    assert [r.min_margin for r in rf.per_iteration] == pytest.approx([r.min_margin for r in rd.per_iteration], rel=1e-9)


def test_small_beta_certificate_matches_the_dense_one():
    """With soft attention the leak sums (with multiplicities) must match the dense sums over every key."""
    from circuits.sharpness import Sharpness

    X, C0 = problem(300, 2, 3, seed=4)
    circuit = build_lloyd_circuit(2, 3, 2, sharpness=Sharpness(beta=20.0))
    enc = encode(circuit.layout, X, C0)
    dense, fast = capture(circuit, enc), capture(circuit, enc, path="structured")
    for a, b in zip(dense.layers, fast.layers):
        if a.kind == "assign":
            assert a.attention.leak_bound.max() > 1e-3
            np.testing.assert_allclose(b.attention.leak_bound, a.attention.leak_bound, rtol=1e-9)
            np.testing.assert_allclose(b.attention.leak_observed, a.attention.leak_observed, rtol=1e-9, atol=1e-15)


def test_refuses_unstructured_weights_and_auto_falls_back():
    """A model whose queries and keys all differ (random weights, as after training) is not structured."""
    circuit = build_lloyd_circuit(2, 3, 1)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for block in circuit.model.blocks:
            block.attn.W_Q.copy_(torch.randn(block.attn.W_Q.shape, generator=gen, dtype=torch.float64))
            block.attn.W_K.copy_(torch.randn(block.attn.W_K.shape, generator=gen, dtype=torch.float64))
    X, C0 = problem(PAIR_BUDGET + 50, 2, 3)
    enc = encode(circuit.layout, X, C0)
    with pytest.raises(StructuredPathUnavailable, match="not structured"):
        structured_forward(circuit.model, enc.resid)
    cap = capture(circuit, enc, path="auto")
    assert cap.path == "dense" and "not structured" in cap.path_note
    with pytest.raises(PathUnavailable, match="not structured"):
        capture(circuit, enc, path="structured")


@pytest.mark.parametrize("where", ["pattern", "mlp_out", "resid_post", "torch hook on an MLP", "hooks() context"])
def test_refuses_a_hook_it_cannot_see_through(where):
    """Any forward hook on the model refuses the structured path, which computes the blocks from their weights and
    runs none of their hooks; ``auto`` then runs the dense forward, hook included. Before, only the attention's hook
    points were looked at: a permanent hook zeroing ``hook_mlp_out`` was skipped, and the run reported VERIFIED."""
    circuit = build_lloyd_circuit(2, 3, 2)  # its own: the hooks must not reach the shared test circuits
    model = circuit.model
    zero = lambda value, hook: torch.zeros_like(value)  # noqa: E731
    X, C0 = problem(20, 2, 3)
    enc = encode(circuit.layout, X, C0)
    expected = verify_problem(capture(circuit, enc, path="auto"))
    assert expected.verified
    hooks = {"pattern": hook_names.pattern(1), "mlp_out": hook_names.mlp_out(2),
             "resid_post": hook_names.resid_post(2)}
    if where in hooks:
        model.add_hook(hooks[where], zero, is_permanent=True)
    elif where == "torch hook on an MLP":
        model.blocks[2].mlp.register_forward_hook(lambda module, args, out: torch.zeros_like(out))
    with model.hooks(fwd_hooks=[(hook_names.mlp_out(2), zero)] if where == "hooks() context" else []):
        with pytest.raises(StructuredPathUnavailable, match="hook"):
            structured_forward(model, enc.resid)
        cap = capture(circuit, enc, path="auto")
        assert cap.path == "dense" and "hook" in cap.path_note
        assert not verify_problem(cap).verified  # the hook ran: each of these changes the run


def test_grouping_is_exact_even_when_the_hash_collides():
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [2.0, -1.0]], dtype=torch.float64)
    # Every row projects to 1 on (1, 1): all collide, yet only rows 0 and 2 are equal.
    groups = group_identical_rows(rows, direction=torch.tensor([1.0, 1.0], dtype=torch.float64))
    assert groups.inverse[0] == groups.inverse[2]
    assert len({int(groups.inverse[i]) for i in (0, 1, 3)}) == 3
    assert torch.equal(rows[groups.representative][groups.inverse], rows)
    assert groups.counts.sum() == 4


def test_grouped_sparsemax_equals_sparsemax_of_the_expanded_rows():
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        z = torch.randn(4, 6, generator=gen, dtype=torch.float64) * 2
        counts = torch.randint(1, 5, (6,), generator=gen)
        expanded = z.repeat_interleave(counts, dim=1)
        dense = sparsemax_rows(expanded)
        grouped = sparsemax_grouped_rows(z, counts).repeat_interleave(counts, dim=1)
        torch.testing.assert_close(grouped, dense, rtol=0, atol=1e-14)


def test_report_residual_views_rerun_on_the_structured_path():
    """The residual views re-run the circuit; after a structured capture they re-run it structured (resid_mid
    included) and must read the same streams as after a dense capture."""
    from analysis import views

    X, C0 = problem(60, 2, 3, seed=5)
    circuit = lloyd_circuit(2, 3, 2)
    enc = encode(circuit.layout, X, C0)
    dense = views.residual_streams(capture(circuit, enc))
    fast = views.residual_streams(capture(circuit, enc, path="structured"))
    assert fast.hooks == dense.hooks and fast.token_positions == dense.token_positions
    np.testing.assert_allclose(fast.values, dense.values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fast.mean_norm, dense.mean_norm, rtol=1e-12, atol=1e-15)
    assert fast.notes == [] and dense.notes == []


def test_sweep_structured_runner_equals_the_dense_circuit_runner():
    from analysis import sweep

    problems = [sweep.mixture_problem(2, 3, 40, 1.0, seed) for seed in range(2)]
    X, C0 = np.stack([p[0] for p in problems]), np.stack([p[1] for p in problems])
    for beta in (1.0, 100.0):
        dense = sweep.circuit_runner(X, C0, beta, 5)
        fast = sweep.structured_runner(X, C0, beta, 5)
        np.testing.assert_allclose(fast, dense, rtol=0, atol=1e-13)


def test_cli_says_which_path_ran_and_refuses_a_dense_run_too_large(tmp_path):
    import json

    cli = ["cluster", "--dataset", "blobs", "--k", "3"]
    res = run_command(*cli, "--n", "300", "--iterations", "2", "--json", timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["path"] == "structured" and doc["verified"]
    res = run_command(*cli, "--n", "300", "--iterations", "2", "--path", "dense", timeout=300)
    assert res.returncode == 0 and "dense path" in res.stdout.splitlines()[0]
    res = run_command(*cli, "--n", "20000", "--path", "dense", "--out", tmp_path / "big", timeout=300)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "too many for the dense path" in res.stderr
    assert not (tmp_path / "big").exists()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_exp_of_the_assign_summary_is_torch_exp_bit_for_bit(dtype):
    """The leak sum's exp skips the arguments below EXP_ZERO_BELOW (where exp is exactly 0): same bits, same layout."""
    from analysis.capture.summaries import EXP_ZERO_BELOW, _exp_nonzero

    g = torch.Generator().manual_seed(0)
    wide = -torch.logspace(-3, 300 if dtype == torch.float64 else 37, 20_000, dtype=torch.float64).to(dtype)
    special = torch.tensor([0.0, -0.0, 1.0, 80.0, float("nan"), float("-inf"), float("inf"), -745.1, -745.2, -746.0,
                            EXP_ZERO_BELOW, EXP_ZERO_BELOW * (1 + 1e-7)], dtype=dtype)
    values = torch.cat([wide, special, torch.rand(5000, generator=g, dtype=torch.float64).to(dtype) * -1200])
    x = values[: values.numel() // 6 * 6].reshape(6, -1).T  # column-major, as an assign head's scores
    out = _exp_nonzero(x)
    assert out.stride() == torch.exp(x).stride()
    assert torch.equal(out.isnan(), torch.exp(x).isnan())
    assert torch.equal(torch.nan_to_num(out), torch.nan_to_num(torch.exp(x)))
    assert not bool(torch.exp(values[values < EXP_ZERO_BELOW]).any())


def test_grouped_assign_summary_equals_a_dense_reference_with_ties():
    """Key groups with equal best scores (the lowest position wins, as numpy's argmax over every key) and groups of
    several keys (the runner-up is the best score again): the grouped summary against one computed key by key."""
    from analysis.capture.summaries import summarise_assign_grouped
    from circuits.structured import GroupedAttention, Groups, identity_groups

    X, C0 = problem(6, 2, 3)
    encoded = encode(lloyd_circuit(2, 3, 1).layout, X, C0)
    seq = encoded.sequence
    rng = np.random.default_rng(0)
    # Key groups, not in position order (grouping orders them by hash): centroids 0 and 2 together, BOS, centroid 1
    # alone, the points.
    inverse = torch.tensor([1] + [3] * 6 + [0, 2, 0])
    keys = Groups(torch.tensor([7, 0, 8, 1]), inverse, torch.bincount(inverse))
    for _ in range(20):
        grouped = torch.tensor(rng.integers(-3, 3, size=(seq.n_tokens, 4)), dtype=torch.float64)  # many ties
        grouped[:, 1] = -torch.inf
        pattern = torch.softmax(grouped[:, inverse], dim=-1)[:, keys.representative]
        grouped, pattern = grouped.T.contiguous().T, pattern.T.contiguous().T  # key-major storage, as the forward makes
        fast = summarise_assign_grouped([GroupedAttention(identity_groups(seq.n_tokens), keys, grouped, pattern)],
                                        encoded)
        s, p = grouped[:, inverse].numpy()[seq.points], pattern[:, inverse].numpy()[seq.points]
        top = s.argmax(axis=-1)  # the first (lowest) key among equal best scores
        top_score = s[np.arange(len(top)), top]
        others = np.ones_like(s, dtype=bool)
        others[np.arange(len(top)), top] = False
        chosen = np.where(top >= seq.centroids.start, top - seq.centroids.start, -1)
        np.testing.assert_array_equal(fast.chosen[0], chosen)
        np.testing.assert_array_equal(fast.margin[0], top_score - np.where(others, s, -np.inf).max(axis=-1))
        np.testing.assert_array_equal(fast.scores[0], s[:, seq.centroids])
        np.testing.assert_array_equal(fast.pattern[0], p[:, seq.centroids])
        np.testing.assert_allclose(fast.leak_bound[0], np.where(others, np.exp(s - top_score[:, None]), 0).sum(-1),
                                   rtol=1e-15)
        np.testing.assert_allclose(fast.leak_observed[0], np.where(others, p, 0).sum(-1), rtol=1e-14, atol=1e-16)



def _fresh_copy(model):
    """``model``'s copy with no plan kept: every module is planned from its weights as they are."""
    import copy

    fresh = copy.deepcopy(model)
    for module in fresh.modules():
        module.__dict__.pop("_structured_plan", None)
    return fresh


@pytest.mark.parametrize("edit", ["none", "no_grad", "data", "new tensor", "sign of zero"])
def test_an_edited_weight_is_planned_again_however_it_was_edited(edit):
    """The structured path keeps each module's plan between runs; a weight edited after a run must run as edited,
    also when the edit went through ``.data`` (which torch's version counter does not see) or changed only the sign
    of a zero (equal to ``==``, another bit pattern in the plan's products)."""
    from circuits.structured import MLPPlan, cached_plan

    X, C0 = problem(40, 2, 3)
    circuit = build_lloyd_circuit(2, 3, 2)  # its own: the edits must not reach the shared test circuits
    encoded = encode(circuit.layout, X, C0)
    model = circuit.model
    before, _ = structured_forward(model, encoded.resid, circuit.score_hooks)
    mlp = model.blocks[3].mlp
    plan = cached_plan(mlp, MLPPlan)
    if edit == "no_grad":
        with torch.no_grad():
            mlp.W_out.mul_(2.0)
    elif edit == "data":
        mlp.W_out.data.mul_(2.0)
    elif edit == "new tensor":
        mlp.W_out.data = mlp.W_out.data * 2.0
    elif edit == "sign of zero":
        zeros = mlp.W_out.data == 0
        assert bool(zeros.any())
        mlp.W_out.data[zeros] = -0.0
    assert (cached_plan(mlp, MLPPlan) is plan) == (edit == "none")
    after, records = structured_forward(model, encoded.resid, circuit.score_hooks)
    expected, fresh = structured_forward(_fresh_copy(model), encoded.resid, circuit.score_hooks)
    assert torch.equal(after, expected)
    assert all(torch.equal(r.resid_post, f.resid_post) for r, f in zip(records, fresh))
    assert torch.equal(before, after) == (edit in ("none", "sign of zero"))


def test_a_verification_after_an_edit_through_data_is_the_edited_model_s():
    """A user who verifies, edits a weight through ``.data`` and verifies again gets the edited model's verdict on
    the structured path, as on the dense one (before plans were checked by value: VERIFIED, the unedited run)."""
    X, C0 = problem(60, 2, 3)
    circuit = build_lloyd_circuit(2, 3, 2)  # its own: the edits must not reach the shared test circuits
    encoded = encode(circuit.layout, X, C0)
    model = circuit.model  # built first: the structured path runs it from now on
    assert verify_problem(capture(circuit, encoded, path="structured")).verified
    model.blocks[2].mlp.W_out.data.mul_(1.5)
    structured = verify_problem(capture(circuit, encoded, path="structured"))
    dense = verify_problem(capture(circuit, encoded, path="dense"))
    assert not structured.verified and not dense.verified
    assert structured.failures[0] == dense.failures[0]
