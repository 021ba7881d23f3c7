"""The views' data against hand-computed and independent references; their figures against the layout's labels.

The hand-worked problem: points 0, 1, 4, 5, 10 on a line, initial centroids 0 and 5. The encoder centres on the
mean (4) and divides by the largest distance from it (6), so unit coordinates are (x - 4) / 6. Lloyd's: the
first assignment is {0, 1} -> c0, {4, 5, 10} -> c1; the centroids move to 0.5 and 19/3; the assignment stays.
"""

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from sklearn.datasets import make_blobs
from sklearn.decomposition import PCA

from analysis import views
from analysis.capture import capture
from analysis.pipeline import RunOptions, run_problem
from circuits import hook_names
from circuits import reference as lloyd_reference
from circuits.build import build_lloyd_circuit
from circuits.encoding import encode
from circuits.sharpness import Sharpness
from conftest import lloyd_circuit, run_circuit

X_LINE = np.array([[0.0], [1.0], [4.0], [5.0], [10.0]])
C0_LINE = np.array([[0.0], [5.0]])
MEAN, SCALE = 4.0, 6.0
FIRST = np.array([0, 0, 1, 1, 1])  # nearest initial centroid, by hand
C1 = np.array([[0.5], [19 / 3]])  # means of the two clusters, by hand


def unit(x):
    return (np.asarray(x, dtype=float) - MEAN) / SCALE


@pytest.fixture(scope="module")
def line_run():
    return run_circuit(X_LINE, C0_LINE, 2)


def visible_traces(fig: go.Figure, mask: list[bool]) -> list:
    return [t for t, v in zip(fig.data, mask) if v]


def heat_rows(heat) -> list[str]:
    """Row labels of an assign-view heatmap, top to bottom: rows sit at integer positions, each named on hover."""
    assert list(heat.y) == list(range(len(heat.y)))
    return [row[0] for row in heat.hovertext]


# ------------------------------------------------------------------------------------------- assignment heads


def test_assign_view_pattern_margins_and_order_by_hand(line_run):
    view = views.assign_attention(line_run)
    beta, tau = line_run.circuit.sharpness.beta, line_run.circuit.sharpness.tie_break
    # Layer of the first assignment: one-hot on the nearest initial centroid.
    np.testing.assert_array_equal(view.data["pattern"][0], np.eye(2)[FIRST])
    # Margin = beta * (|x - c_other|^2 - |x - c_top|^2) + beta * tau * (j_other - j_top), unit-scaled.
    u, c = unit(X_LINE[:, 0]), unit(C0_LINE[:, 0])
    d2 = (u[:, None] - c[None, :]) ** 2
    other = 1 - FIRST
    expected = beta * (d2[np.arange(5), other] - d2[np.arange(5), FIRST]) + beta * tau * (other - FIRST)
    np.testing.assert_allclose(view.data["margin"][0], expected, rtol=1e-9)
    # Ordered by attended centroid, then increasing margin: x1 is the closer call in cluster 0.
    assert view.data["order"][0].tolist() == [1, 0, 2, 3, 4]
    heat = view.figure.data[0]
    assert heat_rows(heat) == ["x1", "x0", "x2", "x3", "x4"] and list(heat.x) == ["c0", "c1"]
    np.testing.assert_array_equal(np.asarray(heat.z), np.eye(2)[FIRST[[1, 0, 2, 3, 4]]])
    # The margin panel draws the same margins against the same labels.
    np.testing.assert_allclose(np.asarray(view.figure.data[1].x), expected[[1, 0, 2, 3, 4]], rtol=1e-9)
    assert list(view.figure.data[1].y) == list(heat.y) and list(view.figure.data[1].hovertext) == heat_rows(heat)


def test_assign_view_has_one_slider_step_per_assign_layer(line_run):
    view = views.assign_attention(line_run)
    circ = line_run.circuit
    steps = view.figure.layout.sliders[0].steps
    assert len(steps) == len(circ.assignment_layers) == 3
    assert view.data["layers"] == circ.assignment_layers
    for a, step in enumerate(steps):
        shown = visible_traces(view.figure, step.args[0]["visible"])
        assert [t.name for t in shown][0] == f"L{circ.assignment_layers[a]} assign"
        assert len(shown) == 3  # heatmap, margins, the underflow line
    # After one update the assignment is unchanged (the hand-computed fixed point).
    np.testing.assert_array_equal(view.data["attended"][1], FIRST)


def test_assign_view_groups_rows_by_the_centroid_attended_in_each_layer():
    # Blobs whose assignment changes between iterations, so one row order cannot serve every layer.
    X, _ = make_blobs(60, centers=4, n_features=2, random_state=3, cluster_std=2.5)
    C0 = X[np.random.default_rng(1).choice(60, 4, replace=False)]
    run = run_circuit(X, C0, 4)
    view = views.assign_attention(run)
    fig, circ = view.figure, run.circuit
    # Independent reference: numpy Lloyd's, the nearest centroid of iteration t for each point.
    C = C0.copy()
    nearest = []
    for _ in circ.assignment_layers:
        labels = lloyd_reference.assign(X, C)
        nearest.append(labels)
        C = lloyd_reference.update(X, labels, C)
    assert any((nearest[0] != n).any() for n in nearest[1:]), "the problem must change its assignment"
    name_to_point = {name: i for i, name in enumerate(views._common.point_labels(run))}
    steps = fig.layout.sliders[0].steps
    orders = []
    for a, step in enumerate(steps):
        heat = visible_traces(fig, step.args[0]["visible"])[0]
        rows = [name_to_point[name] for name in heat_rows(heat)]
        orders.append(rows)
        attended = nearest[a][rows]
        assert (np.diff(attended) >= 0).all(), f"step {a}: rows not grouped by attended centroid: {attended}"
        # The heatmap's rows are the points it names (one-hot on the attended centroid).
        np.testing.assert_array_equal(np.asarray(heat.z).argmax(axis=1), attended)
        # The axis labels this step writes are this layer's rows, at the positions the ticks name.
        layout = step.args[1]
        ticks = list(fig.layout.yaxis.tickvals)
        assert list(layout["yaxis.ticktext"]) == [heat_rows(heat)[i] for i in ticks]
        # The rules between blocks sit between rows of different attended centroids.
        cuts = sorted(sh["y0"] for sh in layout["shapes"])
        assert cuts == [i + 0.5 for i in np.flatnonzero(np.diff(attended))]
    assert any(o != orders[0] for o in orders[1:])
    # The figure opens on the first step's labels.
    assert list(fig.layout.yaxis.ticktext) == list(steps[0].args[1]["yaxis.ticktext"])
    assert fig.layout.yaxis.type == "linear"


def test_assign_view_shows_an_attention_sink_as_a_column():
    # A variant with an attention sink (trimmed k-means) lets a point attend to nothing; fake one on x4.
    run = run_circuit(X_LINE, C0_LINE, 1)
    for layer in run.circuit.assignment_layers:
        att = run.capture.layers[layer].attention
        att.pattern = att.pattern.copy()
        att.pattern[0, 4] = 0.0
        att.sink_mass = np.zeros((1, 5))
        att.sink_mass[0, 4] = 1.0
    view = views.assign_attention(run)
    assert view.data["attended"][0].tolist() == [0, 0, 1, 1, 2]  # 2 = k: the sink
    assert view.data["order"][0].tolist() == [1, 0, 2, 3, 4]
    heat = view.figure.data[0]
    assert list(heat.x) == ["c0", "c1", "sink"] and heat_rows(heat)[-1] == "x4"
    np.testing.assert_array_equal(np.asarray(heat.z)[-1], [0, 0, 1])
    assert view.figure.data[1].text[-1] == "sink"


# ----------------------------------------------------------------------------------------------- update heads


def test_update_view_averages_members_uniformly(line_run):
    view = views.update_attention(line_run)
    seq = line_run.encoded.sequence
    P = view.data["pattern"]  # [update layers, k, pos]
    # Layer 0 commits the initial centroids: each centroid attends only to its own token.
    for j in range(2):
        expected = np.zeros(seq.n_tokens)
        expected[seq.centroid(j)] = 1.0
        np.testing.assert_array_equal(P[0, j], expected)
    # The next update averages the members found by hand: 1/2 on x0, x1 and 1/3 on x2, x3, x4.
    expected = np.zeros((2, seq.n_tokens))
    expected[0, [seq.point(0), seq.point(1)]] = 1 / 2
    expected[1, [seq.point(2), seq.point(3), seq.point(4)]] = 1 / 3
    np.testing.assert_allclose(P[1], expected, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(view.data["cluster_size"][1], [2, 3])
    np.testing.assert_allclose(view.data["weight_on_members"][1], [1, 1], rtol=1e-12)
    # The figure's keys are labelled tokens: BOS, points grouped by cluster, centroids.
    heat = view.figure.data[2]
    assert list(heat.x) == ["BOS", "x0", "x1", "x2", "x3", "x4", "c0", "c1"] and list(heat.y) == ["c0", "c1"]
    # The slider starts on the first update that averages members.
    assert view.figure.layout.sliders[0].active == 1 and heat.visible


# -------------------------------------------------------------------------------------------- residual stream


def test_residual_norms_follow_the_construction(line_run):
    view = views.residual_norms(line_run)
    d = view.data
    pos, types, subs = d["positions"], d["token_types"], d["subspaces"]
    norm = lambda p, t, s: d["mean_norm"][pos.index(p), types.index(t), subs.index(s)]  # noqa: E731
    # The input: points hold their unit coordinates, centroids the initial ones in C_stage, flags are 1.
    assert norm("input", "point", "X") == pytest.approx(np.mean(np.abs(unit(X_LINE[:, 0]))), rel=1e-12)
    assert norm("input", "centroid", "C_stage") == pytest.approx(np.mean(np.abs(unit(C0_LINE[:, 0]))), rel=1e-12)
    for t, flag in [("bos", "IS_BOS"), ("point", "IS_POINT"), ("centroid", "IS_CENTROID")]:
        assert norm("input", t, flag) == 1.0 and norm("input", t, "ONE") == 1.0
    assert norm("input", "point", "Y") == 0 and norm("input", "centroid", "C") == 0
    # After every MLP the staging slots are empty; after an assign head each point's Y_stage is one-hot.
    for p in pos:
        if p.endswith("after MLP"):
            for t in types:
                assert norm(p, t, "Y_stage") == 0 and norm(p, t, "C_stage") == 0, p
        if "assign" in p and p.endswith("after attn"):
            assert norm(p, "point", "Y_stage") == 1.0, p
    # At the end the centroid tokens hold the hand-computed means (unit-scaled) and the points a one-hot Y.
    last = pos[-1]
    assert norm(last, "centroid", "C") == pytest.approx(np.mean(np.abs(unit(C1[:, 0]))), rel=1e-12)
    assert norm(last, "point", "Y") == 1.0 and d["max_norm"][-1, types.index("point"), subs.index("Y")] == 1.0
    # Every axis is labelled by the layout.
    assert [list(t.x) for t in view.figure.data] == [list(line_run.circuit.layout.names)] * 3
    assert list(view.figure.data[0].y) == pos


def test_residual_streams_equal_the_captured_cache_and_read_mid_block():
    circ = lloyd_circuit(1, 2, 2)
    cap = capture(circ, encode(circ.layout, X_LINE, C0_LINE), keep_cache=True)
    streams = views.residual_streams(cap)
    assert streams.token_positions == list(range(cap.encoded.sequence.n_tokens))
    for layer in range(circ.n_layers):
        got = streams.values[streams.hooks.index(hook_names.resid_post(layer))]
        np.testing.assert_array_equal(got, cap.cache[hook_names.resid_post(layer)][0].numpy())
    assert streams.notes == []
    # resid_mid is not in the capture: check it against the block's own attention output.
    with torch.no_grad():
        _, cache = circ.model.run_with_cache(cap.encoded.resid, start_at_layer=0)
    for layer in range(circ.n_layers):
        mid = cache[hook_names.resid_pre(layer)] + cache[hook_names.attn_out(layer)]
        np.testing.assert_array_equal(streams.values[streams.hooks.index(hook_names.resid_mid(layer))],
                                      mid[0].numpy())


def test_a_re_run_that_differs_says_by_how_much_and_why_without_guessing():
    """A soft run on the structured path updates each block in place, chunk by chunk; the residual views' re-run
    keeps each block's input, so it sums in another order (issue 39: the note called a 1e-16 difference "a
    stochastic variant"). The cause the note names is reproduced: a capture that keeps each block's input, as the
    re-run does, equals the re-run bit for bit; a dense run re-runs to the same bits and has no note."""
    from sklearn.datasets import load_iris

    from circuits.initialisation import initial_centroids

    X = load_iris().data
    C0 = initial_centroids(X, 3, "random", seed=0)
    run = run_problem(X, C0, iterations=10, variant="soft", options=RunOptions(path="structured"))
    notes = views.residual_streams(run).notes
    assert len(notes) == 1 and "in place, a chunk of positions at a time" in notes[0]
    assert "stochastic" not in notes[0] and "batching" not in notes[0]
    kept = capture(run.circuit, run.encoded, keep_cache=True, path="structured")
    assert views.residual_streams(kept).notes == []
    # The re-run's final state is not the run's: in the centroids or the assignments, whichever this processor's
    # summation order reaches (the note gives both).
    final, reran = run.capture.final, kept.final
    assert not (np.array_equal(reran.unit_centroids, final.unit_centroids)
                and np.array_equal(np.asarray(reran.assignments), np.asarray(final.assignments)))
    dense = run_problem(X, C0, iterations=10, variant="soft", options=RunOptions(path="dense"))
    assert views.residual_streams(dense).notes == []


def test_residual_tokens_are_labelled_by_the_layout(line_run):
    view = views.residual_tokens(line_run, tokens=["c1", "x4", 0])
    layout, seq = line_run.circuit.layout, line_run.encoded.sequence
    assert view.data["tokens"] == ["c1", "x4", "BOS"]
    assert view.data["token_positions"] == [seq.centroid(1), seq.point(4), seq.bos]
    assert view.data["dims"] == layout.labels
    heat = view.figure.data[-1]
    assert list(heat.x) == layout.labels and list(heat.y) == ["c1", "x4", "BOS"] and heat.visible
    last = view.data["values"][-1]
    np.testing.assert_allclose(last[0, layout["C"]], unit(C1[1]), rtol=1e-12)
    np.testing.assert_array_equal(last[1, layout["Y"]], [0.0, 1.0])
    assert last[2, layout.index("IS_BOS")] == 1.0
    # One slider step per read-out position, starting at the end.
    assert len(view.figure.layout.sliders[0].steps) == 1 + 2 * line_run.circuit.n_layers
    # Default tokens: BOS, each cluster's closest call, the centroids.
    default = views.residual_tokens(line_run).data["tokens"]
    assert default[0] == "BOS" and default[-2:] == ["c0", "c1"] and {"x1", "x2"} <= set(default)


# --------------------------------------------------------------------------------------------- QK and OV


def _nonzero_blocks(group, names):
    peak = group["block_peak"]
    return {(names[i], names[j]): peak[i, j] for i, j in zip(*np.nonzero(peak))}


def test_qk_and_ov_read_as_the_construction_states():
    d, k = 2, 3
    circ = lloyd_circuit(d, k, 2)
    sh = circ.sharpness
    beta, M, tau, bu = sh.beta, sh.mask, sh.tie_break, sh.beta_update
    qk, ov = views.qk_circuit(circ), views.ov_circuit(circ)
    names = list(circ.layout.names)
    assert [g["heads"] for g in qk.data["groups"]] == [[(layer, 0) for layer in circ.centroid_layers],
                                                       [(layer, 0) for layer in circ.assignment_layers]]
    update_qk, assign_qk = qk.data["groups"]
    # Assignment head, from the docstring of circuits.blocks: "x reads c" at 2 beta, and the penalties.
    assert _nonzero_blocks(assign_qk, names) == {
        ("X", "C"): 2 * beta, ("IS_POINT", "N"): -beta, ("IS_POINT", "ID"): -beta * tau * (k - 1),
        ("IS_POINT", "IS_POINT"): -beta * M, ("IS_POINT", "IS_BOS"): -beta * M,
        ("IS_CENTROID", "IS_BOS"): beta * M, ("IS_BOS", "IS_BOS"): beta * M,
    }
    assert _nonzero_blocks(update_qk, names) == {
        ("ID", "Y"): bu, ("ID", "ID"): bu / 2, ("IS_POINT", "IS_BOS"): bu, ("IS_BOS", "IS_BOS"): bu,
    }
    update_ov, assign_ov = ov.data["groups"]
    # "ID writes Y_stage"; the update head moves X and C into C_stage.
    assert _nonzero_blocks(assign_ov, names) == {("ID", "Y_stage"): 1.0}
    assert _nonzero_blocks(update_ov, names) == {("X", "C_stage"): 1.0, ("C", "C_stage"): 1.0}
    L = circ.layout
    np.testing.assert_array_equal(assign_ov["matrix"][L["ID"], L["Y_stage"]], np.eye(k))
    # The matrices are the numpy blocks the builder wrote (an independent source of the weights).
    for group, which in [(assign_qk, "W_QK"), (update_qk, "W_QK"), (assign_ov, "W_OV"), (update_ov, "W_OV")]:
        layer = group["heads"][0][0]
        np.testing.assert_array_equal(group["matrix"], getattr(circ.blocks[layer].head, which))
    # The full panel of the assignment head is labelled by exactly the dimensions it touches.
    full = qk.figure.data[3]
    assert set(full.y) == {"X[0]", "X[1]", "IS_POINT", "IS_CENTROID", "IS_BOS"}
    assert set(full.x) == {"C[0]", "C[1]", "N", "ID[1]", "ID[2]", "IS_POINT", "IS_BOS"}
    assert [b.label for b in qk.figure.layout.updatemenus[0].buttons] == [
        "update head: layers " + ", ".join(map(str, circ.centroid_layers)),
        "assign head: layers " + ", ".join(map(str, circ.assignment_layers))]


def test_a_changed_layer_gets_its_own_group():
    circ = build_lloyd_circuit(2, 2, 2)  # not the cached one: it is modified below
    with torch.no_grad():
        circ.model.blocks[3].attn.W_Q[0, 0, 0] += 1.0
    groups = views.head_matrices(circ, "QK")
    assert [[layer for layer, _ in g.heads] for g in groups] == [[0, 2, 4], [1, 5], [3]]
    assert len(views.qk_circuit(circ).figure.layout.updatemenus[0].buttons) == 3
    assert len(views.head_matrices(circ, "OV")) == 2  # W_Q does not enter the OV circuit


def test_signed_log_colour_scale():
    from analysis.views.figure_parts import signed_log

    np.testing.assert_array_equal(signed_log(np.array([0.0, 1e3, -1e3, 1e14, -2e3]), 1e3),
                                  [0.0, 1.0, -1.0, 12.0, -(1 + np.log10(2))])


def test_signed_log_scale_of_a_subnormal_floor_beside_a_huge_weight_is_finite():
    # A tie-break of 5e-324 beside beta near 1e300 (report --tie-break 5e-324): the ratio top / floor is inf in
    # float64, the scale and its ticks must not be.
    from analysis.views.figure_parts import signed_log, signed_log_ticks

    values = signed_log(np.array([5e-324, -1e300]), 5e-324)
    assert values[0] == 1.0 and -values[1] == pytest.approx(1 + 300 + 323.306, abs=1e-3)
    ticks, text = signed_log_ticks(5e-324, 1e300)
    assert np.isfinite(ticks).all() and 1 < max(ticks) <= 1 + 625 and len(text) == len(ticks)
    assert all(np.isfinite(float(t)) for t in text) and float(text[-1]) <= 1e300


# ------------------------------------------------------------------------------------------- trajectories


def test_trajectories_project_with_pca_and_follow_the_reference():
    X, _ = make_blobs(n_samples=60, n_features=3, centers=3, random_state=2)
    C0 = X[[0, 1, 2]]
    run = run_circuit(X, C0, 3)
    view = views.centroid_trajectories(run)
    # The PCA is of the standardised coordinates (independently: z-scores by hand, then scikit-learn's PCA).
    Z = (X - X.mean(0)) / X.std(0)
    pca = PCA(n_components=2).fit(Z)
    np.testing.assert_allclose(view.data["projected_points"], pca.transform(Z), rtol=1e-10, atol=1e-10)
    from circuits.reference import lloyd

    ref = lloyd(X, C0, 3)
    np.testing.assert_allclose(view.data["centroids"], ref.centroids, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(view.data["clusters"], ref.assignments)
    share = pca.explained_variance_ratio_
    np.testing.assert_allclose(view.data["explained_variance_ratio"], share, rtol=1e-10)
    assert view.figure.layout.xaxis.title.text == f"PC1 of the standardised data ({share[0]:.0%} of its variance)"
    assert view.figure.layout.yaxis.title.text == f"PC2 of the standardised data ({share[1]:.0%} of its variance)"
    steps = view.figure.layout.sliders[0].steps
    assert len(steps) == 4
    # Step t shows the paths, the points coloured at t, the circuit's and the reference's centroids at t.
    for t, step in enumerate(steps):
        shown = visible_traces(view.figure, step.args[0]["visible"])
        assert [tr.name for tr in shown] == ["c0 path", "c1 path", "c2 path", "points (colour: their centroid)",
                                             "circuit centroids (C)", "reference centroids"]
        assert all(tr.showlegend is not False for tr in shown)
        np.testing.assert_allclose(np.stack([shown[4].x, shown[4].y], axis=1),
                                   pca.transform((ref.centroids[t] - X.mean(0)) / X.std(0)), rtol=1e-9, atol=1e-9)


def test_standardised_pca_is_not_ruled_by_one_large_feature():
    """Wine's proline is in the hundreds where the other features are near 1: on raw units PC1 would be proline
    alone (about 100% of the variance); on standardised coordinates no component holds nearly all of it."""
    from sklearn.datasets import load_wine

    X = load_wine().data[::4]
    proj = views.trajectories.Projection(X)
    assert PCA(n_components=1).fit(X).explained_variance_ratio_[0] > 0.99  # what raw units would show
    assert proj.pca.explained_variance_ratio_[0] < 0.6
    assert "standardised" in proj.axis_titles[0]


def test_a_trimmed_runs_outliers_have_a_legend_entry():
    """Every marker class is in the legend: a trimmed run's left-out points are their own (grey) trace."""
    X, _ = make_blobs(n_samples=40, n_features=3, centers=2, random_state=1, cluster_std=0.3)
    X = np.vstack([X, [[40.0, 40.0, 40.0], [-40.0, 40.0, -40.0]]])
    run = run_problem(X, X[[0, 1]], 2, variant="trimmed")
    view = views.centroid_trajectories(run)
    left_out = view.data["clusters"] < 0
    assert left_out[-1].any()
    t = int(np.flatnonzero(left_out.any(axis=1))[0])
    shown = visible_traces(view.figure, view.figure.layout.sliders[0].steps[t].args[0]["visible"])
    outliers = [tr for tr in shown if tr.name == "left out (outliers)"]
    assert len(outliers) == 1 and outliers[0].showlegend is not False
    assert len(outliers[0].x) == int(left_out[t][view.data["drawn"]].sum())
    assert set(outliers[0].marker.color) == {views.figure_parts.cluster_colour(-1)}


def test_two_dimensional_data_is_drawn_as_is(line_run):
    X, _ = make_blobs(n_samples=30, n_features=2, centers=2, random_state=0)
    run = run_circuit(X, X[[0, 1]], 1)
    view = views.centroid_trajectories(run)
    np.testing.assert_array_equal(view.data["projected_points"], X)
    assert view.data["explained_variance_ratio"] is None and view.figure.layout.xaxis.title.text == "x[0]"


# ------------------------------------------------------------------------------------- sampling, soft runs


def test_point_sample_keeps_ties_and_close_calls_and_stratifies():
    # Integer grid data with integer centroids: many points are exactly equidistant (ties).
    rng = np.random.default_rng(3)
    X = rng.integers(0, 12, size=(300, 2)).astype(float)
    C0 = np.array([[2.0, 2.0], [9.0, 9.0], [2.0, 9.0]])
    run = run_circuit(X, C0, 2)
    assert run.report.ties, "the problem was chosen to have ties"
    sample = views.point_sample(run, max_points=60)
    chosen = set(sample.indices.tolist())
    flagged = {t.point for t in run.report.ties} | {m.point for m in run.report.mismatches}
    assert sample.drawn == 60 and len(chosen) == 60 and sample.indices.tolist() == sorted(chosen)
    assert flagged <= chosen and sample.flagged == len(flagged)
    from analysis.views.sampling import min_assign_margin

    margin = min_assign_margin(run.capture)
    rest = [i for i in np.argsort(margin, kind="stable") if i not in flagged][: sample.low_margin]
    assert sample.low_margin == 12 and set(rest) <= chosen
    assert "60 of 300" in sample.note() and "all 300 points" in sample.note()
    # The rest is spread over the final clusters in proportion to what was left of each (largest remainder).
    final = run.labels
    taken = flagged | set(rest)
    left = np.array([sum(1 for i in range(300) if final[i] == c and i not in taken) for c in range(3)])
    drawn = np.array([sum(1 for i in chosen - taken if final[i] == c) for c in range(3)])
    quota = (60 - len(taken)) * left / left.sum()
    assert drawn.sum() == 60 - len(taken) and (np.abs(drawn - quota) < 1).all()
    # The views draw the sample but keep every point in their data.
    view = views.assign_attention(run, sample=sample)
    assert view.data["pattern"].shape == (3, 300, 3) and len(view.figure.data[0].y) == 60
    assert views.point_sample(run, max_points=None).drawn == 300
    assert views.point_sample(run, max_points=60).indices.tolist() == sample.indices.tolist()  # deterministic


def test_views_take_soft_assignments():
    X, _ = make_blobs(n_samples=40, n_features=2, centers=2, cluster_std=3.0, random_state=1)
    C0 = X[[0, 1]]
    run = run_problem(X, C0, 2, sharpness=Sharpness(beta=3.0))
    A = views.assign_attention(run)
    P = A.data["pattern"]
    assert 0 < P.min() and P.max() < 1, "beta = 3 gives soft patterns"
    np.testing.assert_array_equal(P, np.stack([run.capture.layers[layer].attention.pattern[0]
                                               for layer in run.circuit.assignment_layers]))
    T = views.centroid_trajectories(run, reference=False)
    assert (T.data["weights"][1:] < 1).any() and (T.data["clusters"][1:] >= 0).all()
    for view in (views.update_attention(run), views.residual_norms(run), views.objective_plot(run),
                 views.verification_table(run), views.ties_table(run)):
        assert len(view.figure.data) > 0


# ------------------------------------------------------------------------------------------- verification


def test_verification_views_carry_the_report(line_run):
    rep = line_run.report
    table = views.verification_table(line_run)
    cells = table.figure.data[0].cells.values
    # One index: rows t = 0 .. T, each about the centroids after t updates and the assignment to them.
    assert list(cells[0]) == [0, 1, 2]
    assert [float(v) for v in cells[3]] == pytest.approx([r.objective_circuit for r in rep.records], rel=1e-9)
    plot = views.objective_plot(line_run)
    # Objectives by hand: t = 0 with centroids 0 and 5; then the means 0.5 and 19/3.
    by_hand_0 = 0 + 1 + 1 + 0 + 25
    by_hand_1 = 0.25 + 0.25 + (4 - 19 / 3) ** 2 + (5 - 19 / 3) ** 2 + (10 - 19 / 3) ** 2
    np.testing.assert_allclose(plot.data["objective_circuit"], [by_hand_0, by_hand_1, by_hand_1], rtol=1e-12)
    np.testing.assert_allclose(plot.data["objective_reference"], [by_hand_0, by_hand_1, by_hand_1], rtol=1e-12)
    assert (plot.data["max_centroid_error"] <= rep.tolerances.centroid).all()
    assert plot.data["max_centroid_error"][0] == 0.0
    ties = views.ties_table(line_run)
    assert list(ties.figure.data[0].cells.values[0]) == ["none"]


def test_exact_zero_centroid_errors_are_drawn_as_zeros_on_an_axis_of_real_values(line_run):
    plot = views.objective_plot(line_run)
    err = plot.data["max_centroid_error"]
    zero = err == 0
    assert zero.any() and (~zero).any()  # t = 0 agrees exactly (same C0), later iterations to rounding
    fig = plot.figure
    line = next(t for t in fig.data if t.name == "max |c - c_ref| (user units)")
    marked = next(t for t in fig.data if t.name == "exactly 0")
    # The line carries the real values only (a gap at exact zeros); the zeros are their own, labelled trace.
    y = np.array(line.y, dtype=float)
    assert np.isnan(y[zero]).all() and (y[~zero] == err[~zero]).all()
    assert list(marked.x) == np.flatnonzero(zero).tolist() and set(marked.text) == {"exact 0"}
    # The log axis spans the real values and the tolerance, within a decade: not down to 1e-300.
    lo, hi = fig.layout.yaxis3.range
    tol = line_run.report.tolerances.centroid
    assert np.log10(err[~zero].min()) - 1.5 <= lo < np.log10(err[~zero].min())
    assert hi >= np.log10(tol) and 10 ** lo <= min(marked.y)
    # The table prints a proven bound below every normal float64 as such, not as a subnormal number.
    table = views.verification_table(line_run)
    header = table.data["header"]
    proven = [row[header.index("proven |dc|")] for row in table.data["rows"][1:]]  # t = 1 .. T (t = 0: n/a)
    bounds = [r.proven_bound for r in line_run.report.per_iteration]
    assert all(b < np.finfo(float).tiny for b in bounds) and proven == ["<2.2e-308"] * len(bounds)


def test_attention_pattern_is_every_query_and_key_and_agrees_with_the_head_views(line_run):
    view = views.attention_pattern(line_run, max_points=3)
    cap, seq = line_run.capture, line_run.encoded.sequence
    P = view.data["pattern"]
    assert P.shape == (line_run.circuit.n_layers, seq.n_tokens, seq.n_tokens)
    assert view.data["token_labels"][0] == "BOS" and view.data["token_labels"][-1] == f"c{seq.k - 1}"
    np.testing.assert_allclose(P.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    for lc in cap.layers:
        if lc.kind == "assign":
            # Point queries: the assign view's centroid columns, and exactly nothing on BOS or any point key.
            rows = P[lc.layer][seq.points]
            np.testing.assert_array_equal(rows[:, seq.centroids], lc.attention.pattern[0])
            assert (rows[:, seq.points] == 0).all() and (rows[:, seq.bos] == 0).all()
            # Centroid and BOS queries have nothing to do: all on the BOS sink.
            np.testing.assert_array_equal(P[lc.layer][seq.centroids, seq.bos], 1.0)
        else:
            np.testing.assert_array_equal(P[lc.layer][seq.centroids], lc.attention.pattern[0])
    # The figure draws BOS, the sampled points and every centroid, one trace per block.
    heat = view.figure.data[0]
    assert list(heat.x) == list(heat.y) == [view.data["token_labels"][t] for t in view.data["drawn_tokens"]]
    assert len(view.figure.data) == line_run.circuit.n_layers and heat.x[0] == "BOS" and heat.x[-1] == f"c{seq.k - 1}"


def test_attention_pattern_reads_the_captures_own_path(monkeypatch):
    """The view re-runs the circuit along the capture's path (analysis.capture.stream_activations): the dense run is
    TransformerLens's own hook_pattern; the structured run expands its grouped attention to the same pattern."""
    import circuits.structured

    circ = lloyd_circuit(1, 2, 2)
    enc = encode(circ.layout, X_LINE, C0_LINE)
    dense, fast = capture(circ, enc), capture(circ, enc, path="structured")
    assert fast.path == "structured"
    runs = []
    forward = circuits.structured.structured_forward
    monkeypatch.setattr(circuits.structured, "structured_forward", lambda *a, **kw: runs.append(1) or forward(*a, **kw))
    p_dense = views.attention_pattern(dense).data["pattern"]
    assert runs == []
    p_fast = views.attention_pattern(fast).data["pattern"]
    assert runs == [1]
    with torch.no_grad():
        _, cache = circ.model.run_with_cache(enc.resid, start_at_layer=0)
    for layer in range(circ.n_layers):
        np.testing.assert_array_equal(p_dense[layer], cache[hook_names.pattern(layer)][0, 0].numpy())
    # Only the order of floating-point summation differs between the paths.
    np.testing.assert_allclose(p_fast, p_dense, rtol=0, atol=1e-12)
    seq = enc.sequence
    for lc in fast.layers:
        rows = p_fast[lc.layer][seq.points] if lc.kind == "assign" else p_fast[lc.layer][seq.centroids]
        got = rows[:, seq.centroids] if lc.kind == "assign" else rows
        np.testing.assert_array_equal(got, lc.attention.pattern[0])


def test_stream_activations_hands_over_in_run_order_on_both_paths():
    from analysis.capture import stream_activations

    circ = lloyd_circuit(1, 2, 2)
    enc = encode(circ.layout, X_LINE, C0_LINE)
    names = [hook_names.resid_post(1), hook_names.pattern(0), hook_names.resid_pre(0), hook_names.resid_mid(1)]
    got = {}
    for path in ("dense", "structured"):
        got[path] = []
        stream_activations(circ, enc.resid, path, names, lambda name, value: got[path].append((name, value.clone())))
    run_order = [hook_names.resid_pre(0), hook_names.pattern(0), hook_names.resid_mid(1), hook_names.resid_post(1)]
    assert [name for name, _ in got["dense"]] == [name for name, _ in got["structured"]] == run_order
    with torch.no_grad():
        _, cache = circ.model.run_with_cache(enc.resid, start_at_layer=0)
    for (name, dense), (_, fast) in zip(got["dense"], got["structured"]):
        np.testing.assert_array_equal(dense.numpy(), cache[name].numpy())
        assert fast.shape == dense.shape
        np.testing.assert_allclose(fast.numpy(), dense.numpy(), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="cannot hand over"):
        stream_activations(circ, enc.resid, "structured", [hook_names.attn_out(0)], lambda name, value: None)
