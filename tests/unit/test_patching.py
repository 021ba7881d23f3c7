"""The patching API: pairs, shared scaling and placeholder, the batched engine against naive hooked runs, metrics.

The construction-level predictions are in ``test_patching_predictions.py``; the command line in
``test_patching_cli.py``.
"""

import numpy as np
import pytest
import torch

from analysis.patching.experiment import Patch, PatchingExperiment, encode_pair, positions_of
from analysis.patching.unpatched import verify_unpatched
from analysis.patching.metrics import E_TOL, Outcome, compare, fraction_restored, mismatch_up_to_renaming
from analysis.patching.pairs import CORRUPTIONS, add_outlier, make_pair, move_centroid, move_point, swap_centroids
from analysis.patching.sweeps import heatmap, sweep_components, sweep_layer_subspace
from analysis.report import page
from circuits import hook_names, reference

from conftest import lloyd_circuit
from test_patching_predictions import C0, T, X, experiment


# ------------------------------------------------------------------------------------------------------ pairs
def test_move_point_crosses_the_bisector_by_the_stated_margin():
    pair = move_point(X, C0, margin=0.5)
    i, a = pair.details["point"], pair.details["nearest"]
    D = reference.sq_distances(X, C0)
    b = int(np.argsort(D[i])[1])
    x1 = pair.X_corrupted[i]
    # |x' - c_a|^2 - |x' - c_b|^2 = margin |c_b - c_a|^2, and x' moved along c_b - c_a only.
    lhs = ((x1 - C0[a]) ** 2).sum() - ((x1 - C0[b]) ** 2).sum()
    assert lhs == pytest.approx(0.5 * ((C0[b] - C0[a]) ** 2).sum(), rel=1e-12)
    step = x1 - X[i]
    u = C0[b] - C0[a]
    assert abs(step @ np.array([-u[1], u[0]])) < 1e-12
    # Only that point moved, and its first assignment changed.
    assert (pair.X_corrupted != X).any(axis=1).sum() == 1
    assert reference.assign(x1[None], C0)[0] != a
    # The default point is the non-tied one nearest to a boundary.
    gaps = reference.gaps(D)
    assert i == int(np.argmin(gaps))


def test_pair_constructors_and_their_errors():
    mc = move_centroid(X, C0, 1, to=[0.0, 0.0])
    np.testing.assert_array_equal(mc.C0_corrupted[[0, 2]], C0[[0, 2]])
    np.testing.assert_array_equal(mc.C0_corrupted[1], [0, 0])
    default = move_centroid(X, C0, 0)
    far = X[np.argmax(reference.sq_distances(X, C0).min(axis=1))]
    np.testing.assert_array_equal(default.C0_corrupted[0], far)
    sw = swap_centroids(X, C0, 0, 2)
    np.testing.assert_array_equal(sw.C0_corrupted, C0[[2, 1, 0]])
    out = add_outlier(X, C0, at=[100.0, 100.0])
    assert out.placeholder == len(X) and out.n_points == len(X) + 1
    np.testing.assert_array_equal(out.X_corrupted[-1], [100, 100])
    np.testing.assert_array_equal(out.compared_points, np.arange(len(X)))
    assert set(CORRUPTIONS) == {"move-centroid", "move-point", "swap-centroids", "add-outlier"}
    for bad in [lambda: move_centroid(X, C0, 3), lambda: move_centroid(X, C0, 0, to=C0[0]),
                lambda: move_centroid(X, C0, 0, to=[1.0]), lambda: swap_centroids(X, C0, 1, 1),
                lambda: move_point(X, C0[:1]), lambda: move_point(X, C0, point=99),
                lambda: add_outlier(X, C0, at=[np.nan, 0]), lambda: make_pair("nope", X, C0)]:
        with pytest.raises(ValueError):
            bad()


def test_both_runs_share_one_unit_scaling():
    """Encoded with one scaling, the same user point has the same residual coordinates in both runs; every token
    of both runs lies in the unit ball."""
    circ = lloyd_circuit(2, 3, T)
    pair = add_outlier(X, C0)
    clean, corrupted = encode_pair(circ, pair)
    layout, seq = circ.layout, clean.sequence
    assert clean.scaling is corrupted.scaling or np.array_equal(clean.scaling.scale, corrupted.scaling.scale)
    both = seq.points.start, seq.points.start + len(X)
    np.testing.assert_array_equal(clean.resid[0, both[0]:both[1], layout["X"]],
                                  corrupted.resid[0, both[0]:both[1], layout["X"]])
    for enc in (clean, corrupted):
        for name in ("X", "C_stage"):
            assert enc.resid[0, :, layout[name]].norm(dim=-1).max() <= 1 + 1e-12
    # The outlier sets the scale: it is the farthest token from the clean mean, at radius exactly 1.
    assert float(corrupted.resid[0, seq.point(len(X)), layout["X"]].norm()) == pytest.approx(1.0, abs=1e-15)
    # The placeholder is a copy of the BOS token.
    np.testing.assert_array_equal(clean.resid[0, seq.point(len(X))], clean.resid[0, seq.bos])


@pytest.mark.parametrize("build", [lambda R: add_outlier(X, C0, at=X.mean(axis=0) + R * np.eye(X.shape[1])[0]),
                                   lambda R: move_centroid(X, C0, 0, to=X.mean(axis=0) + R * np.eye(X.shape[1])[0])])
def test_pairs_float64_cannot_compute_are_refused_at_the_limit(build):
    """Just inside the stated radius the corrupted problem's numpy Lloyd's run is finite; beyond it the pair is
    refused (squared distances summed over the points overflow float64)."""
    probe = build(1.0)
    limit = 0.5 * np.sqrt(np.finfo(np.float64).max / probe.n_points)
    inside = build(0.9 * limit)
    trace = reference.lloyd(inside.X_corrupted, inside.C0_corrupted, 2)
    assert np.isfinite(trace.final_centroids).all() and np.isfinite(trace.objectives).all()
    for R in (1.1 * limit, 1e300):
        with pytest.raises(ValueError, match="overflow float64"):
            build(R)


def test_placeholder_is_inert_and_unpatched_runs_verify():
    """The clean run with its placeholder equals the clean problem without it at every shared token and layer,
    and both unpatched runs verify against the reference; the clean labels are the reference's on the clean data."""
    exp = experiment("add-outlier")
    check = verify_unpatched(exp)
    assert check.verified and check.placeholder_deviation <= 1e-12
    ref = reference.lloyd(X, C0, T, tie_break=exp.circuit.sharpness.tie_break * exp.scaling.scale[0] ** 2)
    np.testing.assert_array_equal(exp.outcome("clean").labels[0], ref.labels)
    np.testing.assert_allclose(exp.outcome("clean").centroids[0], ref.final_centroids, atol=1e-12)
    assert exp.state("clean").labels[0, exp.pair.placeholder] == -1  # nobody's member: Y = 0


def test_positions_by_name():
    seq = experiment("move-centroid").sequence
    assert positions_of(seq, "c1") == (seq.centroid(1),)
    assert positions_of(seq, ["BOS", "x2", 0]) == (0, seq.point(2))
    assert positions_of(seq, "points") == tuple(range(1, 1 + seq.n))
    assert positions_of(seq, "centroid") == tuple(range(1 + seq.n, seq.n_tokens))
    assert len(positions_of(seq, "all")) == seq.n_tokens
    with pytest.raises(ValueError):
        positions_of(seq, "y7")
    with pytest.raises(ValueError):
        positions_of(seq, seq.n_tokens)


# ------------------------------------------------------------------------------------------------------ engine
def naive_patched_run(exp: PatchingExperiment, patch: Patch, read: int) -> torch.Tensor:
    """The textbook way: the full corrupted run from layer 0, one hook per site overwriting with the clean cache."""
    hooks = []
    for s in patch.sites:
        clean = exp.cache("clean", [s.hook])[s.hook]

        def hook(act, hook, s=s, clean=clean):
            act = act.clone()
            inner = s.dims if s.dims is not None else s.heads
            for p in s.positions:
                if inner is None:
                    act[:, p] = clean[:, p]
                else:
                    for i in inner:
                        act[:, p, i] = clean[:, p, i]
            return act

        hooks.append((s.hook, hook))
    with torch.no_grad():
        return exp.model.run_with_hooks(exp.corrupted_input.resid, start_at_layer=0, stop_at_layer=read + 1,
                                        fwd_hooks=hooks)


def test_batched_runs_equal_naive_hooked_runs():
    """Batched, late-starting, mask-based runs give what one hooked run per patch from layer 0 gives."""
    exp = experiment("move-centroid")
    rng = np.random.default_rng(0)
    components = ["resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z"]
    patches = [Patch(())]
    while len(patches) < 25:
        sites = []
        for _ in range(int(rng.integers(1, 3))):
            comp = components[rng.integers(len(components))]
            layer = int(rng.integers(exp.n_layers))
            pos = sorted(rng.choice(exp.sequence.n_tokens, size=int(rng.integers(1, 5)), replace=False).tolist())
            subspaces = None
            if comp not in ("z",) and rng.random() < 0.6:
                subspaces = list(rng.choice(["X", "C", "N", "Y", "C_stage", "Y_stage", "ID"], size=2, replace=False))
            sites.append(exp.site(comp, layer, pos, subspaces))
        patch = Patch.of(*sites)
        if exp.effective(patch).sites:  # keep patches that overwrite something that differs
            patches.append(patch)
    for read in (exp.final_layer, 4):
        got = exp.run(patches, read)
        for b, patch in enumerate(patches):
            want = naive_patched_run(exp, patch, read)[0]
            # A batch of 25 instead of 1 can change BLAS blocking and so the last bit of a sum (seen: 1.1e-16).
            torch.testing.assert_close(got[b], want, rtol=0, atol=1e-13)
        # Many patches change the residual stream read: the comparison is not between unpatched runs.
        assert sum(not torch.equal(got[b], got[0]) for b in range(1, len(patches))) >= 8


def test_no_op_sites_are_dropped_and_full_patch_gives_the_clean_run():
    exp = experiment("move-centroid")
    same = exp.site("resid_pre", 0, "points")  # points are identical before the first assignment
    differs = exp.site("resid_pre", 0, "c0")
    assert exp.effective(Patch.of(same, differs)).sites == (differs,)
    assert exp.effective(Patch.of(exp.site("resid_pre", 5, "all")), read_layer=3).sites == ()
    for layer in range(exp.n_layers):
        got = exp.run([Patch.of(exp.site("resid_pre", layer, "all"))])[0]
        torch.testing.assert_close(got, exp.cache("clean", [hook_names.resid_post(exp.final_layer)])[
            hook_names.resid_post(exp.final_layer)][0], rtol=0, atol=1e-13)


def test_site_validation():
    exp = experiment("move-centroid")
    with pytest.raises(ValueError):
        exp.site("z", 1, "all", subspaces=["X"])
    with pytest.raises(ValueError):
        exp.site("resid_pre", 1, "all", heads=[0])
    with pytest.raises(ValueError):
        exp.site("resid_pre", exp.n_layers, "all")
    with pytest.raises(ValueError):
        exp.site("hook_q", 1, "all")
    with pytest.raises(ValueError):
        exp.site("z", 1, "all", heads=[1])
    with pytest.raises(ValueError):
        exp.check_read_layer(exp.n_layers)
    with pytest.raises(ValueError, match="use_attn_result"):
        exp.run([Patch.of(exp.site("result", 1, "all"))])


# ------------------------------------------------------------------------------------------------------ metrics
def outcome(labels, centroids, objective=0.0):
    c = np.asarray(centroids, dtype=float)[None]
    return Outcome(np.asarray(labels)[None], c, c, np.array([objective]))


def test_fraction_restored_by_hand():
    clean = outcome([0, 0, 1, 1], [[0.0, 0.0], [1.0, 0.0]], 1.0)
    corrupted = outcome([0, 1, 1, 0], [[0.0, 0.0], [0.0, 1.0]], 3.0)
    patched = Outcome(np.array([[0, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 0]]),
                      np.array([[[0, 0], [0.5, 0.5]], [[0, 0], [1, 0]], [[0, 0], [0, 3]]], dtype=float),
                      np.array([[[0, 0], [0.5, 0.5]], [[0, 0], [1, 0]], [[0, 0], [0, 3]]], dtype=float),
                      np.array([2.0, 1.0, 5.0]))
    m = compare(patched, clean, corrupted)
    # labels: corrupted differs from clean at 2 points; patched at 1, 0, 3.
    np.testing.assert_allclose(m.restored_labels, [0.5, 1.0, -0.5])
    # centroids: E(corrupted) = sqrt(2); E(patched) = sqrt(0.5), 0, sqrt(1 + 9).
    np.testing.assert_allclose(m.restored_centroids, [0.5, 1.0, 1 - np.sqrt(10) / np.sqrt(2)])
    np.testing.assert_allclose(m.restored, (m.restored_labels + m.restored_centroids) / 2)
    np.testing.assert_array_equal(m.label_flips, [1, 2, 1])
    np.testing.assert_array_equal(m.flipped[2], [True, False, False, False])
    np.testing.assert_allclose(m.objective_change, [-1.0, -2.0, 2.0])
    np.testing.assert_allclose(m.centroid_displacement[2], [0.0, 2.0])


def test_zero_over_zero_is_nan_not_a_number_that_looks_like_a_result():
    assert np.isnan(fraction_restored(np.array([0.0, 1.0]), 0.0)).all()
    clean = outcome([0, 1], [[0.0], [1.0]])
    same_labels_other_centroids = outcome([0, 1], [[0.0], [1.5]])
    m = compare(clean, clean, same_labels_other_centroids)
    assert np.isnan(m.restored_labels[0]) and m.restored_centroids[0] == 1.0 and m.restored[0] == 1.0
    m = compare(same_labels_other_centroids, clean, clean)
    assert np.isnan(m.restored[0])
    # Rounding-level centroid differences are not a displacement.
    tiny = outcome([0, 1], [[0.0], [1.0 + 0.5 * E_TOL]])
    assert np.isnan(compare(clean, clean, tiny).restored[0])


def test_mismatch_up_to_renaming_by_hand():
    # Two clusters exchanged: every label differs as an id, none once ids are matched.
    assert mismatch_up_to_renaming([0, 0, 1, 1, 2], [1, 1, 0, 0, 2], 3) == 0
    # ... plus one point that really moved (3 -> cluster 2), and one more cluster id never used by b.
    assert mismatch_up_to_renaming([0, 0, 1, 1, 2], [1, 1, 0, 2, 2], 3) == 1
    assert mismatch_up_to_renaming([0, 0, 0, 1], [2, 2, 2, 2], 3) == 1
    # Outliers (-1, trimmed runs) are compared as they are and never renamed.
    assert mismatch_up_to_renaming([0, -1, 1], [0, -1, 2], 3) == 0
    assert mismatch_up_to_renaming([0, -1, 1], [0, 1, 1], 3) == 1
    # The best matching, not the first one found: a majority decides which id is which.
    assert mismatch_up_to_renaming([0, 0, 0, 1, 1], [1, 1, 0, 0, 0], 2) == 1


def test_summary_separates_renamed_clusters_from_moved_points():
    exp = experiment("swap-centroids")
    s = exp.summary()
    assert s["labels_differing"] > 0 and s["labels_differing_up_to_renaming"] == 0


# ------------------------------------------------------------------------------------------------------ sweeps
def test_subspace_sweep_labels_and_staging_slots_do_nothing():
    """Columns are the layout's subspaces; staging slots are empty between blocks in both runs and ID, ONE and
    the flags are the same in both, so those columns are exactly 0 everywhere."""
    exp = experiment("move-point")
    sweep = sweep_layer_subspace(exp)
    assert sweep.col_labels == [*exp.layout.names, "C+N"]
    assert sweep["restored"].shape == (exp.n_layers + 1, len(exp.layout.names) + 1)
    inert = [sweep.col_labels.index(n) for n in ("C_stage", "Y_stage", "ID", "ONE", "IS_POINT", "IS_CENTROID",
                                                 "IS_BOS")]
    assert (sweep["restored"][1:, inert] == 0).all()  # row 0: C_stage holds the initial centroids (same here)
    assert sweep.flipped.shape == (exp.n_layers + 1, len(exp.layout.names) + 1, exp.pair.compared_points.size)
    # With a moved centroid (the points the same in both runs) C+N restores every assign block's input.
    moved = sweep_layer_subspace(experiment("move-centroid"), subspaces=[("C", "N"), "C", "Y"])
    assert moved.col_labels == ["C+N", "C", "Y"]
    for t, A in enumerate(exp.circuit.assignment_layers):
        assert moved["restored"][moved.row_labels.index(f"pre L{A} A{t}"), 0] == 1.0
    assert sweep.displacement.shape[-1] == exp.pair.k


def test_components_sweep_and_figures():
    exp = experiment("move-centroid")
    sweep = sweep_components(exp, columns=["c0", "points", "centroids"])
    assert sweep.row_labels[:4] == ["L0 U0 attn_out", "L0 U0 mlp_out", "L1 A0 attn_out", "L1 A0 mlp_out"]
    assert sweep.col_labels == ["c0", "points", "centroids"]
    fig = heatmap(sweep)
    assert list(fig.data[0].x) == sweep.col_labels and list(fig.data[0].y) == sweep.row_labels
    doc = page("t", "<p>x</p>", [fig])
    assert 'src="http' not in doc and "<script" in doc and "plotly" in doc.lower()
    d = sweep.to_dict()
    assert d["rows"] == sweep.row_labels and len(d["values"]["restored"]) == len(sweep.row_labels)
    assert "L1 A0 attn_out" in d["restoring_rows"]


# ------------------------------------------------------------------------------------------- the page's figures


def test_local_readout_reads_each_row_right_after_its_block():
    from analysis.patching.report import local_readout

    exp = experiment("move-centroid")
    sw = sweep_layer_subspace(exp)
    local = local_readout(exp, sw)
    final = sw.values["restored"].numpy()
    # Independent path: the same sweep run with the read layer set to each row's block.
    for r, row in enumerate(sw.rows):
        if row["component"] == "resid_post":
            np.testing.assert_array_equal(local[r], final[r])
            continue
        at = sweep_layer_subspace(exp, read_layer=row["layer"])
        r_at = at.row_labels.index(sw.row_labels[r])
        np.testing.assert_array_equal(local[r], at.values["restored"].numpy()[r_at])
    # The readout right after the block differs from the final one somewhere (Lloyd's re-converges).
    assert not np.array_equal(np.nan_to_num(local, nan=9), np.nan_to_num(final, nan=9))


def test_the_page_states_what_its_heatmaps_show():
    from analysis.patching.report import RESTORED, local_readout, patching_page, restoring_sentence

    exp = experiment("move-centroid")
    sw = sweep_layer_subspace(exp)
    local = local_readout(exp, sw)
    c = sw.col_labels.index("C")
    sentence = restoring_sentence(sw, local, ["C"])
    full_local = [sw.row_labels[r] for r in range(len(sw.row_labels)) if local[r, c] >= RESTORED]
    full_final = [sw.row_labels[r] for r in range(len(sw.row_labels)) if sw.values["restored"][r, c] >= RESTORED]
    local_part, final_part = sentence.split("; read after")
    assert (", ".join(full_local) or "no row") in local_part
    assert (", ".join(full_final) or "no row") in final_part
    # Generated from the data: a different readout gives a different sentence.
    changed = local.copy()
    changed[:, c] = 1.0
    assert ", ".join(sw.row_labels) in restoring_sentence(sw, changed, ["C"])
    page = patching_page(exp, [sw])
    assert "neither" not in page.lower()


def test_heatmap_pair_draws_both_readouts_and_greys_out_0_over_0():
    from analysis.patching.sweeps import NAN_COLOUR, heatmap_pair

    exp = experiment("move-centroid")
    sw = sweep_layer_subspace(exp)
    local = np.array(sw.values["restored"].numpy(), dtype=float)
    local[0, :] = np.nan  # a row whose readout the corruption does not change: 0/0
    fig = heatmap_pair(sw, local)
    main_local, blank_local, main_final = fig.data[0], fig.data[1], fig.data[2]
    assert main_local.xaxis == "x" and main_final.xaxis == "x2"
    assert all(v is None for v in main_local.z[0]) and all(v == 1.0 for v in blank_local.z[0])
    assert all(v is None for row in blank_local.z[1:] for v in row)
    assert {c for _, c in blank_local.colorscale} == {NAN_COLOUR} and NAN_COLOUR.lower() not in ("#ffffff", "white")
    np.testing.assert_array_equal(np.array(main_final.z, dtype=float), sw.values["restored"].numpy())
    # Zeros stay zeros on the colour scale (white of RdBu), not grey.
    assert main_final.zmid == 0 and fig.layout.plot_bgcolor == "white"
