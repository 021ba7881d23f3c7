"""How good is a trained model? Its k-means objective against Lloyd's, step by step, from the same initial centroids.

On held-out random tasks (the test stream of :mod:`circuits.training.tasks`, never seen in training or validation)
the trained model is applied for ``1..T`` steps and Lloyd's algorithm (:mod:`circuits.reference`, numpy) is run
for as many iterations from the same initial centroids. Per step we report both mean objectives, the mean and
median per-task ratio model / Lloyd's, how often the model is better or worse, and ARI / NMI of both clusterings
(each point to its nearest centroid) against the components that generated the points (scikit-learn metrics).

On real data (:func:`evaluate_dataset`) the same comparison runs from several random initialisations, with
ARI / NMI against the true classes. A dataset with more dimensions than the model is reduced by PCA; one with
fewer is padded with zero coordinates, which changes no distance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from jaxtyping import Float, Int

from analysis.swap import SwapModel
from circuits import reference
from circuits.training.loss import kmeans_objective
from circuits.training.model import RecurrentKMeans, unit_to_task
from circuits.training.tasks import TaskBatch

#: What the evaluation runs: a trained model, or a construction standing in for one.
Model = RecurrentKMeans | SwapModel


@dataclass
class Trajectories:
    """Centroids of the model and of Lloyd's after every step ``0..T``, per task, in the task's units."""

    model: Float[np.ndarray, "T_plus_1 batch k d"]
    lloyd: Float[np.ndarray, "T_plus_1 batch k d"]
    readout_agreement: Float[np.ndarray, " T_plus_1"]


def chunk_trajectory(model: RecurrentKMeans, x: np.ndarray, c0: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """One forward pass over a few tasks: the model's centroids after steps ``0..steps`` and, per step, the
    fraction of points whose ``Y`` readout (argmax) equals their nearest centroid."""
    per_step, per_agree = [], []

    def observe(t: int, resid: torch.Tensor) -> None:
        C = unit_to_task(resid[:, enc.sequence.centroids, model.layout["C"]], enc).double().cpu().numpy()
        per_step.append(C)
        # Y is the capacity's K wide; a general model's k tokens use its first k columns.
        Y = resid[:, enc.sequence.points, model.layout["Y"]][..., : c0.shape[1]].double().cpu().numpy()
        nearest = np.stack([reference.sq_distances(xi, ci).argmin(1) for xi, ci in zip(x, C)])
        per_agree.append(float((Y.argmax(-1) == nearest).mean()))

    with torch.no_grad():
        enc = model.encode(x, c0)
        model.run(enc.resid, steps, x.shape[1], observe=observe)
    return np.stack(per_step), np.array(per_agree)


def join_chunks(chunks: list[tuple[np.ndarray, np.ndarray]], sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' centroids side by side, and their agreements weighted by chunk size."""
    cents = np.concatenate([c for c, _ in chunks], axis=1)
    return cents, np.sum([a * size for (_, a), size in zip(chunks, sizes)], axis=0) / sum(sizes)


def model_trajectory(model: Model, X: np.ndarray, C0: np.ndarray, steps: int,
                     chunk: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """:func:`chunk_trajectory` over all tasks, in chunks of ``chunk`` tasks to bound memory; a construction that
    stands in for a checkpoint (:class:`analysis.swap.SwapModel`) gives its own trajectory."""
    if not isinstance(model, RecurrentKMeans):
        return model.trajectory(X, C0, steps)
    starts = range(0, X.shape[0], chunk)
    parts = [chunk_trajectory(model, X[s : s + chunk], C0[s : s + chunk], steps) for s in starts]
    return join_chunks(parts, [len(X[s : s + chunk]) for s in starts])


def lloyd_trajectory(X: np.ndarray, C0: np.ndarray, steps: int) -> np.ndarray:
    return np.stack([reference.lloyd(x, c, steps).centroids for x, c in zip(X, C0)], axis=1)


def trajectories(model: Model, X: np.ndarray, C0: np.ndarray, steps: int, chunk: int = 16) -> Trajectories:
    cm, agree = model_trajectory(model, X, C0, steps, chunk)
    return Trajectories(cm, lloyd_trajectory(X, C0, steps), agree)


def objectives(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``C``: (..., batch, k, d) -> objective (..., batch), each point to its nearest centroid."""
    flat = C.reshape(-1, *C.shape[-3:])
    out = [kmeans_objective(torch.as_tensor(X), torch.as_tensor(c)).numpy() for c in flat]
    return np.stack(out).reshape(C.shape[:-2])


def nearest_labels(X: np.ndarray, C: np.ndarray) -> Int[np.ndarray, "batch n"]:
    return np.stack([reference.sq_distances(x, c).argmin(1) for x, c in zip(X, C)])


def merged_pairs(X: np.ndarray, C: np.ndarray, fraction: float = 0.01) -> float:
    """Mean over tasks of the number of centroid pairs closer than ``fraction`` of the data radius."""
    out = []
    for x, c in zip(X, C):
        radius = np.linalg.norm(x - x.mean(0), axis=1).max()
        dist = np.sqrt(reference.sq_distances(c, c))
        out.append(int(np.triu(dist < fraction * radius, k=1).sum()))
    return float(np.mean(out))


def contingency(truth: Int[np.ndarray, " n"], labels: Int[np.ndarray, " n"]) -> Int[np.ndarray, "classes clusters"]:
    """Points per (true class, cluster), over the classes and clusters present."""
    _, t = np.unique(truth, return_inverse=True)
    _, c = np.unique(labels, return_inverse=True)
    rows, cols = int(t.max()) + 1, int(c.max()) + 1
    return np.bincount(t.ravel() * cols + c.ravel(), minlength=rows * cols).reshape(rows, cols)


def adjusted_rand(table: Int[np.ndarray, "classes clusters"]) -> float:
    """Hubert and Arabie's adjusted Rand index from the contingency table, by pair counts (integers, exact): 1.0
    when the two partitions are the same, as scikit-learn's ``adjusted_rand_score``."""
    n = int(table.sum())
    same_both = int((table**2).sum()) - n  # ordered pairs of distinct points together in both
    same_class = int((table.sum(axis=1) ** 2).sum()) - n
    same_cluster = int((table.sum(axis=0) ** 2).sum()) - n
    only_class, only_cluster = same_class - same_both, same_cluster - same_both
    neither = n * n - n - same_both - only_class - only_cluster
    if only_class == 0 and only_cluster == 0:
        return 1.0
    return 2.0 * (same_both * neither - only_class * only_cluster) / (
        same_class * (only_class + neither) + same_cluster * (only_cluster + neither))


def normalized_mutual_info(table: Int[np.ndarray, "classes clusters"]) -> float:
    """Mutual information over the arithmetic mean of the two entropies (natural log), as scikit-learn's
    ``normalized_mutual_info_score``: 1.0 when both are one block, 0.0 when the information is 0."""
    if table.shape == (1, 1):
        return 1.0
    p = table / table.sum()
    pi, pj = p.sum(axis=1), p.sum(axis=0)
    nz = table > 0
    mi = float((p[nz] * (np.log(p[nz]) - np.log(np.outer(pi, pj)[nz]))).sum())
    if len(pi) == 1 or len(pj) == 1 or mi <= 0:
        return 0.0
    entropy = lambda q: float(-(q * np.log(q)).sum())  # noqa: E731  (every class and cluster present: q > 0)
    return mi / ((entropy(pi) + entropy(pj)) / 2)


def agreement_scores(labels: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """Mean ARI and NMI over tasks. Computed here from each task's contingency table: scikit-learn's functions
    check and convert their inputs on every call, which was most of a general evaluation's time (tested equal)."""
    tables = [contingency(t, l) for t, l in zip(truth, labels)]
    return float(np.mean([adjusted_rand(c) for c in tables])), float(np.mean([normalized_mutual_info(c) for c in tables]))


@dataclass
class StepRecord:
    step: int
    model_objective: float
    lloyd_objective: float
    ratio_mean: float
    ratio_median: float
    ratio_p95: float
    frac_model_better: float
    frac_model_worse: float
    frac_model_rises: float
    model_ari: float
    lloyd_ari: float
    model_nmi: float
    lloyd_nmi: float
    readout_agreement: float
    #: Mean number of centroid pairs closer than 1% of the data radius (centroids that have merged).
    model_merged_pairs: float = 0.0
    lloyd_merged_pairs: float = 0.0


@dataclass
class TaskEvaluation:
    """The comparison on a batch of held-out tasks; ``per_step[t - 1]`` is step ``t``."""

    description: dict
    per_step: list[StepRecord] = field(default_factory=list)

    @property
    def final(self) -> StepRecord:
        return self.per_step[-1]

    def to_dict(self) -> dict:
        return {**self.description, "per_step": [asdict(r) for r in self.per_step], "final": asdict(self.final)}


#: Relative differences below this count as ties (and an objective "rises" only by more): well above the float32
#: resolution of a trained model's centroids (~1e-7 relative), well below any difference that matters.
REL_TOL = 1e-5


def compare(X: np.ndarray, truth: np.ndarray, traj: Trajectories, description: dict, rel_tol: float = REL_TOL) -> TaskEvaluation:
    """Per-step statistics from both trajectories. Ratios within ``rel_tol`` of 1 count as ties, not wins."""
    obj_model = objectives(X, traj.model)  # [T+1, batch]
    obj_lloyd = objectives(X, traj.lloyd)
    ratio = obj_model / obj_lloyd
    result = TaskEvaluation({**description, "tie_tolerance": rel_tol})
    for t in range(1, obj_model.shape[0]):
        m_lab, l_lab = nearest_labels(X, traj.model[t]), nearest_labels(X, traj.lloyd[t])
        m_ari, m_nmi = agreement_scores(m_lab, truth)
        l_ari, l_nmi = agreement_scores(l_lab, truth)
        r = ratio[t]
        result.per_step.append(StepRecord(
            step=t,
            model_objective=float(obj_model[t].mean()),
            lloyd_objective=float(obj_lloyd[t].mean()),
            ratio_mean=float(r.mean()),
            ratio_median=float(np.median(r)),
            ratio_p95=float(np.quantile(r, 0.95)),
            frac_model_better=float((r < 1 - rel_tol).mean()),
            frac_model_worse=float((r > 1 + rel_tol).mean()),
            frac_model_rises=float((obj_model[t] > obj_model[t - 1] * (1 + rel_tol)).mean()),
            model_ari=m_ari, lloyd_ari=l_ari, model_nmi=m_nmi, lloyd_nmi=l_nmi,
            readout_agreement=float(traj.readout_agreement[t]),
            model_merged_pairs=merged_pairs(X, traj.model[t]), lloyd_merged_pairs=merged_pairs(X, traj.lloyd[t]),
        ))
    return result


def evaluate_tasks(model: RecurrentKMeans, tasks: TaskBatch, steps: int = 20, chunk: int = 16) -> TaskEvaluation:
    cells = task_chunks(tasks, steps, chunk)
    return tasks_evaluation(tasks, steps, cells, [evaluation_cell(model, cell) for cell in cells])


# ----------------------------------------------------------------------------------------------- cells (analysis.engine)
@dataclass(frozen=True)
class TaskChunk:
    """One evaluation cell: held-out tasks ``start..start+len(X)-1``, both trajectories."""

    start: int
    X: np.ndarray
    C0: np.ndarray
    steps: int

    def __str__(self) -> str:
        return f"held-out tasks {self.start}-{self.start + len(self.X) - 1}"


@dataclass(frozen=True)
class DatasetRun:
    """One evaluation cell: :func:`evaluate_dataset` on one dataset."""

    name: str
    steps: int
    inits: int
    init: str
    seed: int
    chunk: int

    def __str__(self) -> str:
        return f"dataset {self.name} ({self.inits} {self.init} inits from seed {self.seed})"


def task_chunks(tasks: TaskBatch, steps: int, chunk: int) -> list[TaskChunk]:
    return [TaskChunk(s, tasks.X[s : s + chunk], tasks.C0[s : s + chunk], steps) for s in range(0, tasks.batch, chunk)]


def evaluation_cell(model: RecurrentKMeans, cell: TaskChunk | DatasetRun):
    """A cell's result: (model centroids, readout agreement, Lloyd's centroids) of a chunk, or a dataset's dict."""
    if isinstance(cell, DatasetRun):
        return evaluate_dataset(model, cell.name, cell.steps, cell.inits, cell.init, cell.seed, cell.chunk)
    cents, agree = chunk_trajectory(model, cell.X, cell.C0, cell.steps)
    return cents, agree, lloyd_trajectory(cell.X, cell.C0, cell.steps)


def tasks_evaluation(tasks: TaskBatch, steps: int, cells: list[TaskChunk], results: list) -> TaskEvaluation:
    """The comparison over the chunks that finished (``None`` in ``results``: a chunk that failed, left out)."""
    done = [(cell, r) for cell, r in zip(cells, results) if r is not None]
    index = np.concatenate([np.arange(c.start, c.start + len(c.X)) for c, _ in done])
    cm, agree = join_chunks([(r[0], r[1]) for _, r in done], [len(c.X) for c, _ in done])
    traj = Trajectories(cm, np.concatenate([r[2] for _, r in done], axis=1), agree)
    desc = {"kind": "tasks", "count": len(index), "n": tasks.n, "d": tasks.d, "k": tasks.k, "family": tasks.family,
            "init": tasks.init, "steps": steps}
    return compare(tasks.X[index], tasks.components[index], traj, desc)


# ----------------------------------------------------------------------------------------------- real data
#: Datasets used by default: digits has 10 classes; blobs is scikit-learn's make_blobs with k centres.
DEFAULT_DATASETS = ("digits", "blobs")


def dataset_points(name: str, d: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """Points with ``d`` coordinates, true classes, and how they were prepared.

    Every feature is first min-max scaled to [0, 1], as the training tasks are (features in different units —
    wine's proline in the hundreds beside ratios near 1 — would otherwise leave one or two that matter); then PCA
    down to ``d`` or zero padding up to it. Model and Lloyd's see the same prepared points.
    """
    from sklearn.decomposition import PCA

    from analysis.data import load_dataset

    if name == "blobs":
        ds = load_dataset("blobs", n=1000, d=d, centers=k, seed=seed)
    else:
        ds = load_dataset(name)
    X, y = ds.X, ds.y
    d_data = X.shape[1]
    lo, hi = X.min(axis=0), X.max(axis=0)
    X = (X - lo) / np.where(hi > lo, hi - lo, 1.0)
    how = "features min-max scaled to [0, 1]"
    if X.shape[1] > d:
        X = PCA(n_components=d, random_state=seed).fit_transform(X)
        how += f", PCA {d_data} -> {d} dimensions"
    elif X.shape[1] < d:
        X = np.pad(X, ((0, 0), (0, d - X.shape[1])))
        how += f", {ds.d} dimensions padded with zeros to {d} (distances unchanged)"
    if name == "blobs":
        how = f"make_blobs(n_samples=1000, n_features={d}, centers={k}, random_state={seed}), " + how
    return np.asarray(X, dtype=np.float64), np.asarray(y), how


def evaluate_dataset(model: RecurrentKMeans, name: str, steps: int = 20, inits: int = 10, init: str = "random",
                     seed: int = 0, chunk: int = 4) -> dict:
    """Model vs Lloyd's on dataset ``name`` from ``inits`` initialisations (seeds ``seed..seed+inits-1``)."""
    from circuits.initialisation import initial_centroids

    d, k = model.config.d, model.config.k
    X, y, how = dataset_points(name, d, k, seed)
    C0 = np.stack([initial_centroids(X, k, init, seed + i) for i in range(inits)])
    Xb = np.broadcast_to(X, (inits, *X.shape)).copy()
    traj = trajectories(model, Xb, C0, steps, chunk)
    ev = compare(Xb, np.broadcast_to(y, (inits, len(y))), traj,
                 {"kind": "dataset", "name": name, "n": X.shape[0], "d": d, "k": k, "classes": int(len(np.unique(y))),
                  "prepared": how, "init": init, "inits": inits, "steps": steps})
    return ev.to_dict()


# ----------------------------------------------------------------------------------------------- cluster --checkpoint
def export_tolerance(dtype: torch.dtype, n_tokens: int, d_model: int, steps: int, magnitude: float) -> float:
    """Largest centroid difference, in unit coordinates (relative to the data scale), allowed between the exported
    ``HookedTransformer`` and the training-time forward pass: both evaluate the same weights in ``dtype``, in a
    different order of operations.

    Derivation (first order, ``u = eps / 2`` the dtype's unit roundoff, ``M`` = ``magnitude`` the largest
    ``|entry|`` of any residual of the run, ~1 in unit coordinates). A step writes each centroid coordinate from an
    attention average over ``n_tokens`` values (weights summing to 1), each value a ``d_model``-term dot product
    of the residual with the weights; Higham's bound for such sums gives one evaluation within
    ``(n_tokens + d_model) u M`` of the exact step, so two evaluations differ by at most
    ``(n_tokens + d_model) eps M``; over ``steps`` steps these add up. The bound assumes a step passes an input
    difference on without amplifying it (an average is non-expansive in its values; the softmax's sensitivity
    to the scores' rounding is not included): a run that amplifies more is reported as not reproduced, with the
    measured difference. The comparison is made in unit coordinates and the centroids are decoded to the data's
    units in float64, so the data's offset and scale (``|offset| / scale`` of 5e3 multiplied float32's decode
    rounding to 1.1e-4 before) add nothing to it.
    """
    eps = float(torch.finfo(dtype).eps)
    return eps * (n_tokens + d_model) * max(steps, 1) * max(magnitude, 1.0)


def run_export(ht, model: RecurrentKMeans, enc, iterations: int, n: int) -> tuple[list[torch.Tensor], str]:
    """The exported ``HookedTransformer`` on one encoded problem, every step: on the masked path
    (:mod:`circuits.training.masked`: the same weights, the point x point block proved to weigh exactly 0 and
    skipped, ``O(n k)``), or densely where that proof fails; and which path ran."""
    from circuits.structured import StructuredPathUnavailable
    from circuits.training.model import run_hooked

    try:
        return run_hooked(ht, model.layout, enc.resid, iterations, model.config.reembed, keep=True, n=n), "masked"
    except StructuredPathUnavailable as exc:
        from analysis.capture import DENSE_MAX_TOKENS

        if enc.resid.shape[1] > DENSE_MAX_TOKENS:
            from circuits.training.schema import CheckpointError

            raise CheckpointError(f"{exc}; and {enc.resid.shape[1]} tokens is above the dense forward's limit of"
                                  f" {DENSE_MAX_TOKENS}") from None
        return run_hooked(ht, model.layout, enc.resid, iterations, model.config.reembed, keep=True), "dense"


def cluster_with_checkpoint(checkpoint: str, X: np.ndarray, C0: np.ndarray, iterations: int) -> dict:
    """Run a trained model as a real ``HookedTransformer`` on one problem and compare it with Lloyd's.

    ``verified`` says that the exported ``HookedTransformer`` reproduces the model's training-time forward pass
    (largest centroid difference relative to the data scale within :func:`export_tolerance`); the per-iteration
    records compare with Lloyd's from the same initial centroids, which a trained model is meant to beat, not match.
    The exported model runs on the masked path where its point x point block provably weighs 0 (:func:`run_export`).
    """
    from analysis.patching.experiment import torch_threads
    from circuits.training.checkpoint import load_model

    model, config = load_model(checkpoint)
    enc = model.encode(X, C0)
    n = X.shape[0]
    ht = model.hooked_transformer()
    # One problem's products are small: torch's intra-op threads only wait on each other (on the loaded 2-core
    # machine, 400 points: 14 s of wall for the export's forward with two threads, under 1 s with one).
    with torch_threads(1), torch.no_grad():
        hooked, export_path = run_export(ht, model, enc, iterations, n)
        fast = model.run(enc.resid, iterations, n, keep=True)
    C = model.layout["C"]
    seq = enc.sequence
    # Decoded in float64: the model computes in unit coordinates, always within its dtype's range; float32's
    # decode overflowed on data beyond 3.4e38 (NaN centroids) and rounded to |offset| eps on far-offset data.
    cents = np.stack([unit_to_task(r[:, seq.centroids, C].double(), enc)[0].numpy() for r in hooked])
    export_error = float(max(float((h[:, seq.centroids, C] - f[:, seq.centroids, C]).abs().max())
                             for h, f in zip(hooked, fast)))
    tolerance = export_tolerance(model.dtype, seq.n_tokens, model.layout.d_model, iterations,
                                 max(float(r.abs().max()) for r in fast))
    trace = reference.lloyd(X, C0, iterations)
    per_iteration = []
    for t in range(1, iterations + 1):
        labels = reference.sq_distances(X, cents[t]).argmin(1)
        Y = hooked[t][0, seq.points, model.layout["Y"]][:, : C0.shape[0]].double().numpy()
        top2 = np.sort(Y, axis=1)[:, -2:] if Y.shape[1] > 1 else np.c_[np.zeros(n), Y]
        per_iteration.append({
            "iteration": t,
            "label_agreement": float((labels == trace.assignments[t]).mean()),
            "max_centroid_error": float(np.abs(cents[t] - trace.centroids[t]).max()),
            "objective_circuit": reference.objective(X, cents[t]),
            "objective_reference": reference.objective(X, trace.centroids[t]),
            "min_margin": float((top2[:, 1] - top2[:, 0]).min()),
        })
    final = cents[-1]
    labels = reference.sq_distances(X, final).argmin(1)
    return {
        "variant": f"trained:{checkpoint}", "k": int(C0.shape[0]), "iterations": iterations,
        "labels": [int(v) for v in labels], "centroids": final.tolist(),
        "verified": bool(export_error <= tolerance),
        "per_iteration": per_iteration, "n": n, "d": int(X.shape[1]),
        "inertia": reference.objective(X, final), "lloyd_inertia": float(trace.objectives[-1]),
        "ratio_to_lloyd": reference.objective_ratio(reference.objective(X, final), float(trace.objectives[-1])),
        "dtype": str(model.dtype).replace("torch.", ""),
        "export_error": export_error, "export_tolerance": tolerance, "export_path": export_path,
        "notes": ["trained model: 'verified' means the exported HookedTransformer reproduces the training-time forward"
                  " pass; per_iteration compares with Lloyd's from the same initial centroids (the reference),"
                  " which the model is not meant to match; min_margin is the smallest gap between a point's two"
                  " largest assignment weights (1: one-hot)"],
        "trained": {key: config["training"][key] for key in ("d", "k", "n", "steps", "init")},
    }
