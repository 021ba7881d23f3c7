"""The data with the centroids moving across iterations, read off the residual stream.

2-D data is drawn as is; higher-dimensional data through a PCA fitted on the points' standardised coordinates
(each centred and scaled to unit variance; the axes say so and how much of that variance each component keeps). A slider walks through the iterations: at step ``t`` the points are coloured by
the assignment the circuit wrote into ``Y`` for the centroids of iteration ``t`` (faded by their weight when the
assignment is soft), the circuit's centroids of iteration ``t`` (read from ``C``) are crosses, and the reference
algorithm's centroids, computed independently, are open circles around them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from analysis.pipeline import RunResult
from analysis.views._common import View, as_capture, centroid_labels, display_clusters, point_labels, report_of
from analysis.views.figure_parts import cluster_colour, slider, visibility
from analysis.views.sampling import DEFAULT_MAX_POINTS, PointSample, point_sample, sample_notes


class Projection:
    """Identity for d <= 2, else a PCA (scikit-learn) fitted on the points' standardised coordinates: each
    coordinate centred and divided by its standard deviation first, so that a feature in large units (wine's
    proline, hundreds to a thousand) does not make the first component all its own."""

    def __init__(self, X: np.ndarray):
        self.d = X.shape[1]
        self.pca = None
        if self.d > 2:
            from sklearn.decomposition import PCA
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            self.pipeline = make_pipeline(StandardScaler(), PCA(n_components=2)).fit(X)
            self.pca = self.pipeline[-1]

    def __call__(self, A: np.ndarray) -> np.ndarray:
        A = np.asarray(A, dtype=np.float64)
        if self.pca is not None:
            return self.pipeline.transform(A)
        if self.d == 1:
            return np.concatenate([A, np.zeros_like(A)], axis=-1)
        return A

    @property
    def axis_titles(self) -> tuple[str, str]:
        if self.pca is not None:
            r = self.pca.explained_variance_ratio_
            return (f"PC1 of the standardised data ({r[0]:.0%} of its variance)",
                    f"PC2 of the standardised data ({r[1]:.0%} of its variance)")
        if self.d == 1:
            return "x[0]", ""
        return "x[0]", "x[1]"


@dataclass
class ReferenceRun:
    """The reference algorithm's iterates for a captured problem: ``centroids[t]`` after ``t`` iterations and
    ``objectives[t]`` of the assignment to them."""

    name: str
    centroids: np.ndarray
    objectives: np.ndarray


def reference_run(obj, b: int = 0) -> ReferenceRun:
    """The circuit's own reference, run independently in numpy from the same initial centroids: the trajectory
    the verifier compares with (:func:`analysis.verify.reference_trace`), on the points the circuit received."""
    from analysis.verify import reference_trace

    cap = as_capture(obj)
    ran = obj.reference_iterates if isinstance(obj, RunResult) and b == 0 else None
    if ran is not None:  # run beside the circuit, and compared with it: the same iterates
        return ReferenceRun(cap.circuit.spec.name, *ran)
    trace = reference_trace(cap, b)
    return ReferenceRun(cap.circuit.spec.name, np.asarray(trace.centroids), np.asarray(trace.objectives))


def circuit_iterates(obj, b: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Centroids ``[T + 1, k, d]`` (user units) and soft assignments ``[T + 1, n, k]`` read off the residual."""
    cap = as_capture(obj)
    circ = cap.circuit
    cents = np.stack([cap.layers[layer].post.centroids[b] for layer in circ.centroid_layers])
    assigns = np.stack([cap.layers[layer].post.assignments[b] for layer in circ.assignment_layers])
    return cents, assigns


def iterate_clusters(obj, b: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centroids ``[T + 1, k, d]`` (user units) and each point's display cluster and its weight ``[T + 1, n]``
    (:func:`~analysis.views._common.soft_clusters` of :func:`circuit_iterates`' assignments, read off the labels
    where a lean capture holds ``Y`` as them)."""
    cap = as_capture(obj)
    circ = cap.circuit
    read = [display_clusters(cap.layers[layer].post.assignments, b) for layer in circ.assignment_layers]
    weights = [w for _, w in read]
    # Hard labels, none left out (a lean capture's Lloyd run): every weight is 1, one read-only array of them.
    ones = all(isinstance(w, np.ndarray) and w.dtype == np.float64 and w.all() for w in weights)
    stacked = np.broadcast_to(np.float64(1.0), (len(weights), cap.encoded.n)) if ones and cap.lean else np.stack(weights)
    return centroid_iterates(obj, b), np.stack([c for c, _ in read]), stacked


def centroid_iterates(obj, b: int = 0) -> np.ndarray:
    """Centroids ``[T + 1, k, d]`` (user units) read off the residual."""
    cap = as_capture(obj)
    return np.stack([cap.layers[layer].post.centroids[b] for layer in cap.circuit.centroid_layers])


def centroid_trajectories(obj, b: int = 0, sample: PointSample | None = None,
                          max_points: int | None = DEFAULT_MAX_POINTS,
                          reference: np.ndarray | bool | None = None) -> View:
    """Points and centroid paths across iterations, with a slider; ``reference`` gives the reference
    algorithm's centroids ``[T + 1, k, d]`` (default: :func:`reference_run`; ``False``: none)."""
    cap = as_capture(obj)
    sample = sample if sample is not None else point_sample(obj, max_points, b=b)
    notes, caveats = sample_notes(sample)
    if reference is None:
        run = reference_run(obj, b)
        reference = False if run is None else run.centroids
        if run is None:
            notes.append(f"no reference known for variant {cap.circuit.variant!r}: none drawn (pass reference=...)")
    ref = None if reference is False else np.asarray(reference, dtype=np.float64)
    proj = Projection(cap.encoded.X[b])
    data, PR = _trajectory_data(obj, b, sample, proj, ref)
    PC, T1 = data["projected_centroids"], data["centroids"].shape[0]
    labels = (point_labels(obj), centroid_labels(obj))
    fig = go.Figure()
    for j, name in enumerate(labels[1]):
        fig.add_trace(go.Scatter(
            x=PC[:, j, 0], y=PC[:, j, 1], mode="lines+markers", name=f"{name} path",
            line=dict(color=cluster_colour(j), width=1.5), marker=dict(size=4, color=cluster_colour(j)),
            customdata=np.arange(T1), hovertemplate=f"{name} at iteration %{{customdata}}<extra></extra>",
            legendgroup=name,
        ))
    always = list(range(len(labels[1])))
    differing = _mismatches_by_iteration(obj, b, sample)
    data["mismatches"] = differing
    groups = [_add_iteration(fig, data, PR, labels, t) + _add_mismatches(fig, data, labels, differing.get(t, []), t)
              for t in range(T1)]
    masks = visibility(len(fig.data), groups, always=always)
    steps = [dict(label=str(t), args=[{"visible": masks[t]}, {}]) for t in range(T1)]
    xt, yt = proj.axis_titles
    fig.update_layout(
        sliders=[slider(steps, "iteration t = ")],
        height=620, margin=dict(l=60, r=20, t=40, b=40),
        xaxis=dict(title=dict(text=xt)),
        yaxis=dict(title=dict(text=yt), scaleanchor="x", scaleratio=1, visible=proj.d != 1),
        legend=dict(orientation="v", x=1.02, y=1),
    )
    notes.append("At step t: centroids after t iterations (read from C after the update layer) and the points' "
                 "assignment to them (read from Y after the next assign layer); colours match the centroid "
                 "labels in every view.")
    if differing:
        total = sum(len(v) for v in differing.values())
        notes.append(f"Red rings: the {total} assignment(s) the verification found to differ from the reference"
                     f" (at t = {', '.join(str(t) for t in sorted(differing))}); hover for what the reference"
                     " assigns.")
    return View("centroid_trajectories", "Centroid trajectories", fig, data, notes, caveats)


def _mismatches_by_iteration(obj, b: int, sample: PointSample) -> dict[int, list]:
    """``{t: [Mismatch, ...]}``: the verification's mismatches at each t among the drawn points (the sample keeps
    every mismatched point first), one per point and t (the trajectory check's where both checks found it)."""
    rep = report_of(obj)
    if rep is None or b != 0:
        return {}
    drawn = set(int(i) for i in sample.indices)
    out: dict[int, dict[int, object]] = {}
    for m in sorted(rep.mismatches, key=lambda m: str(m.check) != "trajectory"):
        if m.point in drawn:
            out.setdefault(m.iteration, {}).setdefault(m.point, m)
    return {t: list(found.values()) for t, found in out.items()}


def _add_mismatches(fig: go.Figure, data: dict, labels: tuple[Sequence, list], found: list, t: int) -> list[int]:
    """Iteration ``t``'s ring around each point whose assignment differs from the reference's; its index."""
    if not found:
        return []
    plab, clab = labels
    P = data["projected_points"]
    points = [m.point for m in found]
    text = [f"{plab[m.point]}: circuit {clab[m.got] if m.got >= 0 else 'none'}, reference {clab[m.expected]}"
            f" ({m.kind}, {m.check} check)" for m in found]
    fig.add_trace(go.Scatter(
        x=P[points, 0], y=P[points, 1], mode="markers", name="differs from the reference", visible=t == 0,
        marker=dict(symbol="circle-open", size=15, color="#d62728", line=dict(width=2.5)),
        hovertext=text, hovertemplate="%{hovertext}<extra></extra>",
    ))
    return [len(fig.data) - 1]


def _trajectory_data(obj, b: int, sample: PointSample, proj: Projection,
                     ref: np.ndarray | None) -> tuple[dict, np.ndarray | None]:
    """The view's data (circuit iterates, projections, clusters) and the projected reference centroids."""
    X = as_capture(obj).encoded.X[b]
    cents, clusters, weights = iterate_clusters(obj, b)
    T1, k = cents.shape[0], cents.shape[1]
    P, PC = proj(X), proj(cents.reshape(-1, cents.shape[-1])).reshape(T1, k, 2)
    PR = None if ref is None else proj(ref.reshape(-1, ref.shape[-1])).reshape(ref.shape[0], k, 2)
    data = dict(projected_points=P, centroids=cents, projected_centroids=PC, reference_centroids=ref,
                clusters=clusters, weights=weights, drawn=sample.indices,
                explained_variance_ratio=None if proj.pca is None else proj.pca.explained_variance_ratio_)
    if ref is not None:
        data["max_centroid_error"] = np.abs(cents - ref[:T1]).max(axis=(1, 2))
    return data, PR


def _add_iteration(fig: go.Figure, data: dict, PR: np.ndarray | None, labels: tuple[Sequence, list], t: int
                   ) -> list[int]:
    """Iteration ``t``'s traces: the drawn points coloured by cluster, the circuit's and the reference's
    centroids; returns the traces' indices."""
    plab, clab = labels
    P, PC, idx = data["projected_points"], data["projected_centroids"], data["drawn"]
    weights, members, k = data["weights"], data["clusters"][t, data["drawn"]], PC.shape[1]
    start = len(fig.data)
    # Every kind of marker has a legend entry: assigned points, points the variant leaves out (a trimmed run's
    # outliers, grey), the circuit's and the reference's centroids.
    for kept, name in ((members >= 0, "points (colour: their centroid)"), (members < 0, "left out (outliers)")):
        if not kept.any():
            continue
        sel, mem = idx[kept], members[kept]
        fig.add_trace(go.Scatter(
            x=P[sel, 0], y=P[sel, 1], mode="markers", name=name, legendgroup=name,
            marker=dict(size=6, color=[cluster_colour(c) for c in mem],
                        # Fade soft assignments by their weight; a point with none (left out) stays visible.
                        opacity=np.where(mem < 0, 0.6, np.clip(weights[t, sel], 0.15, 1.0)).tolist(),
                        line=dict(width=0)),
            customdata=np.stack([np.array([plab[i] for i in sel]), np.array([clab[c] if c >= 0 else "none" for c in mem]),
                                 weights[t, sel].astype(str)], axis=-1),
            hovertemplate="%{customdata[0]} -> %{customdata[1]} (weight %{customdata[2]})<extra></extra>",
            visible=t == 0,
        ))
    fig.add_trace(go.Scatter(
        x=PC[t, :, 0], y=PC[t, :, 1], mode="markers", name="circuit centroids (C)", visible=t == 0,
        marker=dict(symbol="x", size=14, color=[cluster_colour(j) for j in range(k)],
                    line=dict(width=1.5, color="black")),
        customdata=clab, hovertemplate="%{customdata} (circuit)<br>%{x:.6g}, %{y:.6g}<extra></extra>",
    ))
    if PR is not None:
        fig.add_trace(go.Scatter(
            x=PR[t, :, 0], y=PR[t, :, 1], mode="markers", name="reference centroids", visible=t == 0,
            marker=dict(symbol="circle-open", size=22, color="black", line=dict(width=1.5)),
            customdata=clab, hovertemplate="%{customdata} (reference)<br>%{x:.6g}, %{y:.6g}<extra></extra>",
        ))
    return list(range(start, len(fig.data)))
