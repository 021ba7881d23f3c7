"""Activation patching checked against the construction: each test states what the weights predict and asserts it.

Each prediction is derived from the blocks of :mod:`circuits.blocks` (the docstrings say how, and where it is
cheap the test reads the fact off the weights first), and each comes with a control: the same patch at another
layer or subspace, which the construction says must *not* have the effect — so a patching engine that patched
the wrong place, or a circuit built differently, fails.

One small hand-written problem (15 points in 2-D, k = 3, T = 3: 8 blocks U0 A0 U1 A1 U2 A2 U3 A3) with no ties
(smallest gap 0.36) and no empty cluster in any run below.
"""

import numpy as np
import pytest

from analysis.patching.experiment import Patch, PatchingExperiment
from analysis.patching.pairs import add_outlier, move_centroid, move_point, swap_centroids
from analysis.patching.sweeps import sweep_layer_position
from circuits import hook_names

from conftest import lloyd_circuit

X = np.array([[8.9, -7.16], [5.82, 5.1], [4.22, 0.73], [10.74, 6.69], [4.52, 0.7], [8.39, 7.06], [8.47, -7.21],
              [5.82, -7.9], [10.67, -6.8], [5.02, 5.35], [8.44, -5.56], [8.66, 4.17], [2.5, -0.86], [3.87, -1.54],
              [1.52, 2.13]])
C0 = np.array([[10.74, 6.69], [8.39, 7.06], [8.66, 4.17]])
T = 3
EPS = np.finfo(np.float64).eps
PAIRS = {
    "move-centroid": lambda: move_centroid(X, C0, 0),  # centroid 0 to (5.82, -7.9), the farthest point
    "move-point": lambda: move_point(X, C0),  # point 9 crosses from centroid 1 to 2
    "add-outlier": lambda: add_outlier(X, C0),  # (19.21, 20.75) in point slot 15
    "swap-centroids": lambda: swap_centroids(X, C0, 0, 2),
}
_experiments: dict[str, PatchingExperiment] = {}


def experiment(kind: str) -> PatchingExperiment:
    if kind not in _experiments:
        _experiments[kind] = PatchingExperiment(lloyd_circuit(2, 3, T), PAIRS[kind]())
    return _experiments[kind]


def circuit():
    return lloyd_circuit(2, 3, T)


def read_subspaces(W, layout, axis: int) -> set[str]:
    """Subspaces a weight matrix reads (axis 1: its rows are the residual) or writes (axis 0)."""
    used = np.flatnonzero(np.abs(W).sum(axis=axis))
    return {layout.subspace_of(int(dim))[0] for dim in used}


def patched(exp, *sites, read):
    return exp.patched_states([Patch.of(*sites)], read)


def test_no_empty_cluster_and_visible_corruption_preconditions():
    """The statements below assume every cluster has members at every update, in every run used."""
    for kind in ("move-centroid", "move-point", "add-outlier"):
        exp = experiment(kind)
        for A in exp.circuit.assignment_layers:
            for run in ("clean", "corrupted"):
                labels = exp.state(run, A).labels[0]
                assert np.bincount(labels[labels >= 0], minlength=3).min() > 0, (kind, run, A)


def test_C_and_N_of_the_centroids_before_an_assign_block_restore_its_assignments_exactly():
    """Assign head: the point query reads ``X`` and the flags; the key reads ``C`` and ``N`` (and ``ID`` for the
    tie-break, flags for the mask), so the score of centroid j for point i is ``2 beta x_i.c_j - beta (N_j + tau j)``;
    the value reads ``ID``. The assign MLP overwrites ``Y`` with the staged one-hot. So the block's output ``Y`` is a
    function of the points' ``X`` (the same in both runs here) and the centroids' ``C`` and ``N`` only: patching
    ``C`` and ``N`` of every centroid token gives the clean ``Y`` bit for bit — at every assign block, even when the
    points' old ``Y`` is the corrupted one. Controls: ``C`` without ``N`` is not enough (the score needs ``-|c|^2``),
    and the same patch one layer earlier (before an update block, whose MLP overwrites ``C`` and ``N``) does nothing.
    """
    circ, layout = circuit(), circuit().layout
    head = circ.blocks[circ.assignment_layers[0]].head
    assert read_subspaces(head.W_QK, layout, axis=0) == {"C", "N", "ID", "IS_POINT", "IS_BOS"}  # key side
    assert read_subspaces(head.W_QK.T, layout, axis=0) == {"X", "IS_POINT", "IS_CENTROID", "IS_BOS"}  # query side
    assert read_subspaces(head.W_OV.T, layout, axis=0) == {"ID"}

    exp = experiment("move-centroid")
    only_c_restored = []
    for t, A in enumerate(circ.assignment_layers):
        clean, corrupted = exp.state("clean", A), exp.state("corrupted", A)
        assert (clean.labels != corrupted.labels).any(), f"the corruption is visible at A{t}"
        got = patched(exp, exp.site("resid_pre", A, "centroids", ["C", "N"]), read=A)
        np.testing.assert_array_equal(got.assignments, clean.assignments)
        np.testing.assert_array_equal(got.staged_assignments, 0.0)
        only_c = patched(exp, exp.site("resid_pre", A, "centroids", ["C"]), read=A)
        only_c_restored.append(np.array_equal(only_c.labels, clean.labels))
        if t >= 1:
            early = patched(exp, exp.site("resid_pre", A - 1, "centroids", ["C", "N"]), read=A)
            np.testing.assert_array_equal(early.assignments, corrupted.assignments)
    assert not any(only_c_restored), "with the corrupted N the scores are wrong at every block"


def test_one_point_X_patched_after_the_assign_head_changes_nothing_before_the_next_update():
    """The assign MLP's gate and linear weights have no row on ``X``: once the head of an assign block has read the
    points' ``X``, nothing reads it again until the next update head (value ``X + C``). So patching one point's ``X``
    at ``resid_mid`` of an assign block leaves every other coordinate of every token bit-identical to the corrupted
    run at the input of the next update block, and that update then moves only the centroid the point belongs to,
    by ``(x_clean - x_corrupted) / |cluster|`` (a mean over the same members). Control: the same ``X`` patch at
    ``resid_pre`` of the assign block, before its head, gives the point its clean label.
    """
    exp = experiment("move-point")
    circ, layout, seq = exp.circuit, exp.layout, exp.sequence
    i = exp.pair.details["point"]
    A, U = circ.assignment_layers[0], circ.centroid_layers[1]
    mlp = circ.blocks[A].mlp
    assert not np.any(mlp.W_gate[layout["X"]]) and not np.any(mlp.W_in[layout["X"]])

    site = exp.site("resid_mid", A, f"x{i}", "X")
    after = exp.run([Patch.of(site)], A)[0]
    corrupted_after = exp.cache("corrupted", [hook_names.resid_post(A)])[hook_names.resid_post(A)][0]
    changed = np.argwhere((after != corrupted_after).numpy())
    assert {(int(p), layout.subspace_of(int(dim))[0]) for p, dim in changed} == {(seq.point(i), "X")}
    clean_label = exp.state("clean", A).labels[0, i]
    corrupted_label = exp.state("corrupted", A).labels[0, i]
    assert clean_label != corrupted_label

    moved = exp.patched_states([Patch.of(site)], U).centroids[0]
    corrupted_c = exp.state("corrupted", U).centroids[0]
    members = int((exp.state("corrupted", A).labels[0] == corrupted_label).sum())
    expected = (exp.pair.X_clean[i] - exp.pair.X_corrupted[i]) / members
    scale = exp.scaling.scale[0]
    np.testing.assert_allclose(moved[corrupted_label] - corrupted_c[corrupted_label], expected, rtol=0,
                               atol=16 * EPS * scale)
    others = [j for j in range(3) if j != corrupted_label]
    np.testing.assert_array_equal(moved[others], corrupted_c[others])

    before_head = patched(exp, exp.site("resid_pre", A, f"x{i}", "X"), read=A)
    assert before_head.labels[0, i] == clean_label


def test_Y_of_a_point_that_is_nobodys_member_has_no_effect_on_any_centroid():
    """Update head: centroid query j scores ``beta_update * Y_i[j]`` on point i and ``beta_update / 2`` on its own key,
    so a point whose ``Y`` is 0 scores 0 and its weight ``exp(-beta_update / 2)`` underflows to exactly 0 next to
    any member (beta_update = 4000): it is nobody's member, and its value ``X + C`` — here the outlier's coordinates —
    counts nowhere. The clean run's placeholder has ``Y = 0``; patching that ``Y`` into the corrupted run's outlier
    slot before an update block gives the clean centroids, the outlier still sitting in ``X``. Patching it before
    every update block removes the outlier from the whole computation: the final readout is the clean one. Control:
    patching the slot's ``X`` instead (the placeholder's 0) leaves the outlier a member, and its cluster's centroid
    is neither the clean nor the corrupted one.
    """
    exp = experiment("add-outlier")
    circ, slot = exp.circuit, exp.pair.placeholder
    tag = f"x{slot}"
    U = circ.centroid_layers[1]
    clean_c, corrupted_c = exp.state("clean", U).unit_centroids, exp.state("corrupted", U).unit_centroids
    outlier_label = exp.state("corrupted", U - 1).labels[0, slot]
    assert outlier_label >= 0 and np.abs(corrupted_c - clean_c)[0, outlier_label].max() > 1e-3
    assert exp.cache("clean", [hook_names.resid_pre(U)])[hook_names.resid_pre(U)][0, exp.sequence.point(slot),
                                                                                    exp.layout["Y"]].abs().max() == 0

    got = patched(exp, exp.site("resid_pre", U, tag, "Y"), read=U)
    np.testing.assert_allclose(got.unit_centroids, clean_c, rtol=0, atol=4 * EPS)

    every_update = [exp.site("resid_pre", L, tag, "Y") for L in circ.centroid_layers[1:]]
    final = exp.measure([Patch.of(*every_update)])
    assert final.restored[0] == 1.0 and final.label_mismatch[0] == 0

    control = patched(exp, exp.site("resid_pre", U, tag, "X"), read=U).unit_centroids
    assert np.abs(control - clean_c)[0, outlier_label].max() > 1e-3
    assert np.abs(control - corrupted_c)[0, outlier_label].max() > 1e-3
    others = [j for j in range(3) if j != outlier_label]
    np.testing.assert_allclose(control[0, others], corrupted_c[0, others], rtol=0, atol=4 * EPS)


def test_Y_of_one_point_before_an_update_moves_exactly_its_two_clusters():
    """A point's ``Y`` is read only as an update key: it decides which centroid query averages the point. Patching
    one point's ``Y`` from cluster b (corrupted) to a (clean) before an update changes the means of a and b and no
    other centroid (bit for bit: the other queries' scores on this key are 0 either way). Control: the same patch
    before the preceding assign block, whose MLP overwrites ``Y``, moves no centroid at all."""
    exp = experiment("move-centroid")
    U = exp.circuit.centroid_layers[1]
    clean_l, corrupted_l = exp.state("clean", U - 1).labels[0], exp.state("corrupted", U - 1).labels[0]
    i = int(np.flatnonzero(clean_l != corrupted_l)[0])
    a, b = int(clean_l[i]), int(corrupted_l[i])
    got = patched(exp, exp.site("resid_pre", U, f"x{i}", "Y"), read=U).centroids[0]
    corrupted_c = exp.state("corrupted", U).centroids[0]
    moved = {j for j in range(3) if not np.array_equal(got[j], corrupted_c[j])}
    assert moved == {a, b}
    control = patched(exp, exp.site("resid_pre", U - 1, f"x{i}", "Y"), read=U).centroids[0]
    np.testing.assert_array_equal(control, corrupted_c)


def test_Y_of_every_point_before_an_update_block_restores_its_centroids():
    """Update head: centroid j's softmax is uniform over the points whose ``Y`` has bit j, its own key weighs
    ``exp(-beta_update / 2)`` = 0 next to any member, and the value is ``X + C`` (``X`` of a point). With every cluster
    non-empty, the new centroids depend on the points' ``X`` and ``Y`` only, so patching ``Y`` of every point before
    an update block restores that block's centroids. The update MLP computes ``C + (s - C)``, which rounds at one
    ulp of the unit-scaled value, so the tolerance is 4 eps. Control: ``Y`` patched before the preceding assign
    block (whose MLP overwrites ``Y``) leaves the corrupted centroids."""
    exp = experiment("move-centroid")
    for t, U in enumerate(exp.circuit.centroid_layers[1:], start=1):
        clean_c, corrupted_c = exp.state("clean", U).unit_centroids, exp.state("corrupted", U).unit_centroids
        assert np.abs(clean_c - corrupted_c).max() > 1e-3, f"visible at U{t}"
        got = patched(exp, exp.site("resid_pre", U, "points", "Y"), read=U)
        np.testing.assert_allclose(got.unit_centroids, clean_c, rtol=0, atol=4 * EPS)
        control = patched(exp, exp.site("resid_pre", U - 1, "points", "Y"), read=U)
        np.testing.assert_array_equal(control.unit_centroids, corrupted_c)


def test_C_and_N_entering_an_update_block_are_overwritten():
    """Update MLP: ``C += relu(s - C) - relu(C - s)`` and ``N += |s|^2 - relu(N)`` with ``s = C_stage``, so the old ``C``
    and ``N`` are replaced; and the head weighs a centroid's own key 0 when it has members. So patching ``C`` and ``N``
    of every centroid before an update block (every cluster non-empty) leaves the block's output as in the corrupted
    run, up to the one rounding of ``C + (s - C)`` — while the same patch before an assign block restores that block's
    assignments (see the first test): the control."""
    exp = experiment("move-centroid")
    layout = exp.layout
    for U in exp.circuit.centroid_layers[1:]:
        corrupted = exp.state("corrupted", U)
        got = patched(exp, exp.site("resid_pre", U, "centroids", ["C", "N"]), read=U)
        np.testing.assert_allclose(got.unit_centroids, corrupted.unit_centroids, rtol=0, atol=4 * EPS)
        np.testing.assert_allclose(got.unit_sq_norms, corrupted.unit_sq_norms, rtol=0, atol=8 * EPS)
        np.testing.assert_array_equal(got.assignments, corrupted.assignments)
        A = U + 1
        restored = patched(exp, exp.site("resid_pre", A, "centroids", ["C", "N"]), read=A)
        assert not np.array_equal(restored.labels, exp.state("corrupted", A).labels)
    mlp = exp.circuit.blocks[exp.circuit.centroid_layers[1]].mlp
    assert read_subspaces(mlp.W_out, layout, axis=0) == {"C", "C_stage", "N"}


def test_Y_entering_an_assign_block_is_erased():
    """Assign MLP: ``Y += IS_POINT * relu(Y_stage) - relu(Y)``: the old one-hot is subtracted and the new one added,
    exactly in float (0/1 values). Patching ``Y`` of every point before an assign block therefore changes nothing at
    all: the block's output equals the corrupted run's bit for bit, even where the old ``Y`` differed. Control:
    the same patch before the update block that precedes it moves that update's centroids to the clean ones."""
    exp = experiment("move-centroid")
    for A in exp.circuit.assignment_layers[1:]:
        name = hook_names.resid_pre(A)
        before_clean, before_corrupted = exp.cache("clean", [name])[name], exp.cache("corrupted", [name])[name]
        ys = exp.layout["Y"]
        assert not np.array_equal(before_clean[..., ys].numpy(), before_corrupted[..., ys].numpy())
        got = exp.run([Patch.of(exp.site("resid_pre", A, "points", "Y"))], A)
        corrupted_after = exp.cache("corrupted", [hook_names.resid_post(A)])[hook_names.resid_post(A)]
        np.testing.assert_array_equal(got.numpy(), corrupted_after.numpy())
        U = A - 1
        control = patched(exp, exp.site("resid_pre", U, "points", "Y"), read=U).unit_centroids
        corrupted_c, clean_c = exp.state("corrupted", U).unit_centroids, exp.state("clean", U).unit_centroids
        assert np.abs(corrupted_c - clean_c).max() > 1e-3
        np.testing.assert_allclose(control, clean_c, rtol=0, atol=4 * EPS)


def test_layer_position_sweep_alternates_between_centroid_and_point_tokens():
    """Where the algorithm's state lives, layer by layer: entering an assign block it is the centroids (``C``, ``N``
    of the centroid tokens: the first test), entering an update block the assignment (``Y`` of the point tokens),
    and before the first assignment only the moved centroid's token differs (its ``C_stage`` entering U0, its ``C``
    entering A0). So in the layer x position sweep of the moved-centroid pair, read at the end: the ``centroids``
    column restores exactly 1 before every assign block and exactly 0 before every later update block; the
    ``points`` column the other way round; the ``c0`` column restores 1 before U0 and A0 while every single point
    and BOS restore exactly 0 there (the tokens are bit-identical in both runs); ``all`` restores 1 everywhere."""
    exp = experiment("move-centroid")
    sweep = sweep_layer_position(exp)
    v = sweep["restored"].numpy()
    row = {label: r for r, label in enumerate(sweep.row_labels)}
    col = {label: c for c, label in enumerate(sweep.col_labels)}
    assert sweep.col_labels[: exp.sequence.n_tokens] == exp.sequence.token_labels
    assert (v[:, col["all"]] == 1.0).all()
    for t, A in enumerate(exp.circuit.assignment_layers):
        r = row[f"pre L{A} A{t}"]
        assert v[r, col["centroids"]] == 1.0 and v[r, col["points"]] == 0.0
    for t, U in enumerate(exp.circuit.centroid_layers[1:], start=1):
        r = row[f"pre L{U} U{t}"]
        assert v[r, col["points"]] == 1.0 and v[r, col["centroids"]] == 0.0
    for label in ("pre L0 U0", "pre L1 A0"):
        assert v[row[label], col["c0"]] == 1.0
        singles = [c for name, c in col.items() if name.startswith("x") or name in ("BOS", "c1", "c2")]
        assert (v[row[label], singles] == 0.0).all()
        assert (sweep["label_flips"].numpy()[row[label], singles] == 0).all()
    assert sweep.restoring_rows()[:2] == ["pre L0 U0", "pre L1 A0"]


def test_swapped_initial_centroids_are_restored_through_C_stage_before_the_first_update_only():
    """The encoder writes initial centroids into ``C_stage``; U0's head (no point assigned yet) has every centroid
    attend to itself and its MLP commits ``C_stage`` into ``C`` and empties the slot. So the swap lives in
    ``C_stage`` of the two swapped tokens before U0 — patching it there restores the whole clean run (labels and
    centroids) — and in ``C``/``N`` after: the same ``C_stage`` patch before A0 finds an empty slot in both runs and
    does nothing, while ``C`` and ``N`` there restore everything."""
    exp = experiment("swap-centroids")
    tokens = ["c0", "c2"]
    A0 = exp.circuit.assignment_layers[0]
    m = exp.measure([Patch.of(exp.site("resid_pre", 0, tokens, "C_stage")),
                     Patch.of(exp.site("resid_pre", A0, tokens, "C_stage")),
                     Patch.of(exp.site("resid_pre", A0, tokens, ["C", "N"]))])
    assert exp.summary()["labels_differing"] > 0
    assert m.restored.tolist() == [1.0, 0.0, 1.0]
    assert m.label_mismatch.tolist()[0] == 0 and m.label_flips.tolist()[1] == 0


@pytest.mark.parametrize("component", ["attn_out", "z"])
def test_assign_head_output_restores_its_block_but_its_MLP_output_does_not(component):
    """A head writes only into a staging slot, which is empty in both runs when it writes: the assign head's output
    at the points *is* the new assignment, so patching it (``attn_out``, or ``z`` of its only head: ``b_O = 0``)
    restores the block's ``Y`` exactly. The MLP's output is a change — ``Y_new - Y_old`` on ``Y`` and ``-Y_stage`` on
    ``Y_stage`` — so patched alone into the corrupted run it gives ``Y = Y_old(corrupted) + Y_new(clean) -
    Y_old(clean)`` and leaves ``Y_stage = Y_new(corrupted) - Y_new(clean)`` behind, exactly (0/1 arithmetic): the
    control, which equals the clean state only where both runs agreed on the point's old and new labels."""
    exp = experiment("move-centroid")
    for A in exp.circuit.assignment_layers:
        clean, corrupted = exp.state("clean", A), exp.state("corrupted", A)
        old_clean, old_corrupted = exp.state("clean", A - 1).assignments, exp.state("corrupted", A - 1).assignments
        head = patched(exp, exp.site(component, A, "points"), read=A)
        np.testing.assert_array_equal(head.assignments, clean.assignments)
        np.testing.assert_array_equal(head.staged_assignments, 0.0)
        mlp = patched(exp, exp.site("mlp_out", A, "points"), read=A)
        np.testing.assert_array_equal(mlp.assignments, old_corrupted + clean.assignments - old_clean)
        np.testing.assert_array_equal(mlp.staged_assignments, corrupted.assignments - clean.assignments)
        assert not np.array_equal(mlp.assignments, clean.assignments) or A == exp.circuit.assignment_layers[0]
        assert np.abs(mlp.staged_assignments).max() == 1.0
