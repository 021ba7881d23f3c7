"""A report of a run someone altered with hooks states what that run did: its header facts and its views are
computed from the user's ``ActivationCache``, checked here against values read from that cache directly.

Two ablations of wine (T = 5, k-means++ seed 0), as a user makes them with TransformerLens: zeroing
``blocks.5.hook_mlp_out`` (the MLP of the assign block of t = 2 does not commit its staged assignment) and zeroing
``blocks.5.attn.hook_pattern`` (that block's head attends nowhere). And the same run unaltered, read back from its
cache, which must read as the verified run it is.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_wine

from analysis import views
from analysis.pipeline import RunOptions, as_run, run_problem
from analysis.report import build_report
from analysis.verify.verdict import bound_text
from circuits import hook_names
from circuits.initialisation import initial_centroids

T = 5
LAYER = 5  # the assign block of t = 2


@pytest.fixture(scope="module")
def clean():
    X = load_wine().data
    return run_problem(X, initial_centroids(X, 3, "k-means++", seed=0), iterations=T)


def cached(run, hooks=()):
    with run.circuit.model.hooks(fwd_hooks=list(hooks)):
        _, cache = run.circuit.model.run_with_cache(run.encoded.resid)
    return cache


def zero(value, hook):
    return torch.zeros_like(value)


@pytest.fixture(scope="module")
def mlp_zeroed(clean):
    cache = cached(clean, [(hook_names.mlp_out(LAYER), zero)])
    return as_run((cache, clean.encoded)), cache


@pytest.fixture(scope="module")
def pattern_zeroed(clean):
    cache = cached(clean, [(hook_names.pattern(LAYER), zero)])
    return as_run((cache, clean.encoded)), cache


def facts(report) -> dict[str, str]:
    return {f.label: f.value for group in report.header.groups.values() for f in group}


def cache_states(run, cache) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Centroids (unit-scaled) and Y at every t, read off the cache's residual streams through the layout."""
    circ, seq, layout = run.circuit, run.encoded.sequence, run.circuit.layout
    post = [cache[hook_names.resid_post(layer)][0].numpy() for layer in range(circ.n_layers)]
    centroids = [post[layer][seq.centroids][:, layout["C"]] for layer in circ.centroid_layers]
    labels = [post[layer][seq.points][:, layout["Y"]] for layer in circ.assignment_layers]
    return centroids, labels


def settled_directly(centroids, labels) -> bool:
    """Whether the cached run holds one state from some t on: the same Y and the same C at every later t (the C at
    the first such t may differ from its predecessor by the commit's rounding)."""
    return any(((t >= 2 and np.array_equal(labels[t - 1], labels[t - 2])) or np.array_equal(centroids[t],
                                                                                          centroids[t - 1]))
               and all(np.array_equal(labels[u], labels[t - 1]) for u in range(t, T + 1))
               and all(np.array_equal(centroids[u], centroids[t]) for u in range(t + 1, T + 1))
               for t in range(1, T + 1))


def test_convergence_of_an_ablated_run_is_what_its_cache_shows(mlp_zeroed):
    run, cache = mlp_zeroed
    centroids, labels = cache_states(run, cache)
    # The cache: Y repeats from t = 1 to t = 2 (the MLP did not commit), while C keeps moving after t = 3.
    assert np.array_equal(labels[2], labels[1]) and not np.array_equal(centroids[4], centroids[3])
    assert settled_directly(centroids, labels) is False
    assert run.report.converged is False and run.report.n_iter == T
    text = facts(build_report(run))["iterations"]
    assert "not converged" in text and "nothing changed" not in text


def test_an_unaltered_cache_converges_as_its_run(clean):
    run = as_run((cached(clean), clean.encoded))
    centroids, labels = cache_states(run, cached(clean))
    assert run.report.converged == clean.report.converged == settled_directly(centroids, labels)
    assert run.report.n_iter == clean.report.n_iter
    assert run.report.verified and run.capture.hooked_patterns == {} and run.report.hard_attention


def test_hard_attention_and_leak_bound_of_a_zeroed_pattern_come_from_the_pattern(pattern_zeroed):
    run, cache = pattern_zeroed
    circ, seq = run.circuit, run.encoded.sequence
    # Directly from the cache: each assign layer's point rows against the one-hot row on the top-scoring key.
    distances = []
    for layer in circ.assignment_layers:
        pattern = cache[hook_names.pattern(layer)][0, 0, seq.points].numpy()
        scores = cache[hook_names.attn_scores(layer)][0, 0, seq.points].numpy()
        hard = np.zeros_like(pattern)
        hard[np.arange(len(hard)), scores.argmax(axis=1)] = 1.0
        distances.append(np.abs(pattern - hard).sum(axis=1).max())
    assert distances[circ.assignment_layers.index(LAYER)] == 1.0 and max(distances) == 1.0
    assert run.capture.hooked_patterns == {LAYER: seq.n}
    assert run.report.hard_attention is False
    header = facts(build_report(run))
    assert header["hard attention everywhere"] == "False"
    assert header["largest assignment leak bound"] == bound_text(max(distances)) == bound_text(1.0)


def test_the_residual_views_read_the_ablated_cache(mlp_zeroed):
    run, cache = mlp_zeroed
    seq, layout = run.encoded.sequence, run.circuit.layout
    streams = views.residual_streams(run)
    assert streams.caveats == [] and streams.notes == []
    for p, hook in enumerate(streams.hooks):
        resid = cache[hook][0].numpy()
        for t, kind in enumerate(("bos", "point", "centroid")):
            tokens = resid[seq.positions(kind)]
            for s, name in enumerate(layout.names):
                expected = np.linalg.norm(tokens[:, layout[name]], axis=-1).mean()
                assert streams.mean_norm[p, t, s] == pytest.approx(expected, rel=1e-12, abs=1e-15), (hook, name)
    # What the issue saw: Y_stage still full after L5's MLP (a clean re-run shows it emptied).
    p = streams.hooks.index(hook_names.resid_post(LAYER))
    assert streams.mean_norm[p, 1, list(layout.names).index("Y_stage")] == pytest.approx(1.0)
    norms = views.residual_norms(run, streams=streams)
    assert any("Y_stage at L5 assign, after MLP" in note for note in norms.notes)


def test_a_cache_without_resid_mid_leaves_those_rows_out_and_says_so(clean):
    names = [hook_names.resid_pre(0)] + [name(layer) for layer in range(clean.circuit.n_layers) for name in
                                         (hook_names.resid_post, hook_names.attn_scores, hook_names.pattern,
                                          hook_names.mlp_out)]
    with clean.circuit.model.hooks(fwd_hooks=[(hook_names.mlp_out(LAYER), zero)]):
        _, cache = clean.circuit.model.run_with_cache(clean.encoded.resid, names_filter=lambda n: n in names)
    run = as_run((cache, clean.encoded))
    assert run.report.alterations
    streams = views.residual_streams(run)
    assert not any(hook == hook_names.resid_mid(0) for hook in streams.hooks)
    assert len(streams.hooks) == 1 + clean.circuit.n_layers
    assert streams.caveats and "resid_mid" in streams.caveats[0]
    assert views.residual_norms(run, streams=streams).caveats == streams.caveats


def test_views_of_a_zeroed_pattern_say_what_they_show(pattern_zeroed):
    run, cache = pattern_zeroed
    assign = views.assign_attention(run)
    assert assign.caveats and "L5 assign" in assign.caveats[0]
    layer = run.circuit.assignment_layers.index(LAYER)
    assert np.all(assign.data["pattern"][layer] == 0)
    full = views.attention_pattern(run, max_points=10)
    assert np.array_equal(full.data["pattern"][LAYER], cache[hook_names.pattern(LAYER)][0, 0].numpy())
    assert "a hook of this run replaced rows of L5 assign" in full.notes[1]
    assert views.qk_circuit(run).caveats and views.update_attention(run).caveats == []


def test_the_trajectory_scatter_rings_the_points_that_differ_from_lloyds(mlp_zeroed, clean):
    """At each t the scatter rings exactly the points whose label in the cache differs from scikit-learn's Lloyd's
    after t iterations from the same initial centroids (wine has no ties: the reference is unambiguous)."""
    from sklearn.cluster import KMeans

    run, cache = mlp_zeroed
    X, C0 = run.encoded.X[0], run.encoded.C0[0]
    _, labels = cache_states(run, cache)
    view = views.centroid_trajectories(run)
    slider = view.figure.layout.sliders[0]
    for t in range(1, T + 1):
        lloyd = KMeans(3, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=t).fit(X).labels_
        differ = set(np.flatnonzero(labels[t].argmax(axis=1) != lloyd).tolist())
        assert {m.point for m in view.data["mismatches"].get(t, [])} == differ, t
        visible = slider.steps[t].args[0]["visible"]
        rings = [tr for tr, shown in zip(view.figure.data, visible) if shown and tr.name == "differs from the reference"]
        assert len(rings) == (1 if differ else 0) and (not differ or len(rings[0].x) == len(differ)), t
    assert {2, 3} <= set(view.data["mismatches"])


@pytest.mark.parametrize("variant", ["soft", "sparse", "trimmed"])
def test_an_unaltered_variant_cache_keeps_its_certificate(variant):
    """A variant's own normalisation (a permanent hook) is the block's own pattern, not a replaced one: read back
    from its cache, the run's certificate is the captured run's, leak bound by leak bound."""
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(60, n_features=2, centers=3, random_state=1)
    run = run_problem(X, X[[0, 20, 40]], iterations=3, variant=variant, options=RunOptions(path="dense"))
    again = as_run((cached(run), run.encoded))
    assert again.capture.hooked_patterns == {} and again.report.verified == run.report.verified
    for mine, theirs in zip(again.capture.layers, run.capture.layers):
        if mine.attention is not None and mine.attention.leak_bound is not None:
            np.testing.assert_array_equal(mine.attention.leak_bound, theirs.attention.leak_bound)
