"""The results table: every method on every construction, per corruption family, ablation and metric, with the
random and weights-only baselines beside every number.

``kmeans-circuits discover --table`` prints it (docs/discovery.md shows it with the command). Per construction
(d = 2, k = 3, n = 12, two Lloyd iterations: 6 blocks, 163 candidate edges) and corruption family, the ground
truth is derived once per ablation (:mod:`~analysis.discovery.truth`); per seed, a *dataset* of :data:`PAIRS`
pairs is drawn from the family's samplers (:func:`dataset_pairs`), and each method runs once on it per metric, as
discovery runs on a dataset of prompts; the spread is over seeds. A pair whose corruption leaves the readout
unchanged is skipped and counted. ``covered`` is the share of the truth the dataset exercises
(:func:`dataset_coverage`): what any method could find on it. The baselines depend on the truth only (the random one is a mean over
:data:`~analysis.discovery.scoring.RANDOM_DRAWS` draws, with its spread).

The constructions of :data:`analysis.constructions.CONSTRUCTIONS` (the swap circuits, 14 and 31 blocks a step) run at their
tiniest shape, ``swap_shape`` (d = 1, k = 2, n = 8, one step), when named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis import constructions as construction_registry
from analysis.discovery.ablation import ABLATIONS, METRICS
from analysis.discovery.edges import CorruptionInvisible
from analysis.discovery.methods import METHODS
from analysis.discovery.run import build_construction, discover, make_patcher, truth_baselines
from analysis.discovery.scoring import CURVE_METRICS

#: The variants the table runs by default (any construction of :mod:`analysis.constructions` can be named too).
CONSTRUCTIONS: tuple[str, ...] = ("lloyd", "soft", "trimmed", "spherical", "distractor")
TABLE_CORRUPTIONS: tuple[str, ...] = ("move-centroid", "move-point", "swap-centroids")
#: Pairs in one seed's dataset.
PAIRS = 6
#: ``(d, k, n, iterations)`` of the variants' rows.
TABLE_SHAPE: tuple[int, int, int, int] = (2, 3, 12, 2)
#: ``(d, k, n, steps)`` of the swap circuits' rows: the tiniest problem they run.
SWAP_SHAPE: tuple[int, int, int, int] = (1, 2, 8, 1)
BASELINES: tuple[str, ...] = ("random", "weights-only")


def dataset_seed(seed: int, i: int) -> int:
    """The seed of problem ``i`` of dataset ``seed`` (any seed below 2**32 maps into numpy's range)."""
    return int(np.random.SeedSequence([seed, i]).generate_state(1)[0])


def dataset_pairs(corruption: str, d: int, k: int, n: int, seed: int, count: int = PAIRS, base=None) -> list:
    """``count`` pairs of the family, the samplers in turn (problems the corruption cannot apply to skipped)."""
    from analysis.discovery.family import family_pairs

    return [p for p, _ in family_pairs(corruption, d, k, n, [dataset_seed(seed, i) for i in range(count)],
                                       base=base)]


@dataclass
class TableResult:
    rows: list[dict] = field(default_factory=list)
    truths: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def cell(self, task: dict, method: str, key: str, level: str | None = "edges") -> np.ndarray:
        """``key`` of the rows of ``task`` and ``method`` (``level``: ``edges`` or ``nodes``; ``None``: the row's own
        field), one per seed."""
        return np.array([(r if level is None else r[level])[key] for r in self.rows if r["method"] == method
                         and all(r[name] == value for name, value in task.items())], dtype=float)

    def tasks(self, metric: str) -> list[dict]:
        seen = []
        for r in self.rows:
            task = {"construction": r["construction"], "corruption": r["corruption"], "ablation": r["ablation"],
                    "metric": r["metric"]}
            if r["metric"] == metric and task not in seen:
                seen.append(task)
        return seen

    def truth_of(self, task: dict) -> dict:
        return next(t for t in self.truths if all(t[n] == task[n] for n in ("construction", "corruption", "ablation")))

    def markdown(self, metric: str, key: str = "step_auc", level: str = "edges", methods=None) -> str:
        """Per task: each method's ``key`` mean ± std over seeds (min-max, runs), then the baselines."""
        methods = methods or list(dict.fromkeys(r["method"] for r in self.rows))
        head = ("| construction | corruption | ablation | truth | covered | " + " | ".join(methods)
                + " | random | weights-only |")
        lines = [head, "|" + "---|" * (len(methods) + 7)]
        for task in self.tasks(metric):
            truth = self.truth_of(task)
            cells = []
            for m in methods:
                a = self.cell(task, m, key, level)
                a = a[~np.isnan(a)]
                cells.append(f"{a.mean():.3f} ± {a.std():.3f} ({a.min():.2f}-{a.max():.2f}, {len(a)})" if len(a) else "-")
            mean, std = truth["baselines"]["random"][level][key]
            weights = truth["baselines"]["weights-only"][level][key]
            cells.append("-" if mean != mean else f"{mean:.3f} ± {std:.3f}")
            cells.append("-" if weights != weights else f"{weights:.3f}")
            label = (f"{truth['members']}/{truth['decided']} ({truth['undecided']} undecided)"
                     if truth["undecided"] else f"{truth['members']}/{truth['decided']}")
            covered = self.cell(task, methods[0], "covered", None)
            lines.append(f"| {task['construction']} | {task['corruption']} | {task['ablation']} | {label} |"
                         f" {covered.mean():.2f} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def _truth_row(construction: str, corruption: str, ablation: str, truth, base: dict) -> dict:
    return {"construction": construction, "corruption": corruption, "ablation": ablation,
            "members": int(truth.members.sum()), "decided": int(truth.decided.sum()),
            "undecided": int((~truth.decided).sum()), "candidates": len(truth.verdicts),
            "coverage": truth.coverage, "counts": truth.counts(), "jointly_inert": truth.jointly_inert,
            "baselines": {"random": base["random"],
                          "weights-only": {"edges": base["weights-only"].edges, "nodes": base["weights-only"].nodes,
                                           "roc": {"fpr": base["weights-only"].fpr.tolist(),
                                                   "tpr": base["weights-only"].tpr.tolist()}}},
            "undecided_edges": [e.label for e, v in zip(truth.graph.edges, truth.verdicts) if v.status == "undecided"]}


#: The corruption column of the zero and mean rows: those ablations read the clean inputs only.
CLEAN_ONLY = "(clean inputs)"


def table_tasks(corruptions, ablations) -> list[tuple[str, str]]:
    """``(corruption, ablation)`` rows of one construction: ``resample`` per corruption family; ``zero`` and
    ``mean`` once (their ablated values do not depend on the corruption, nor then their truth)."""
    tasks = [(c, "resample") for c in corruptions if "resample" in ablations]
    return tasks + [(CLEAN_ONLY, a) for a in ablations if a != "resample"]


def dataset_coverage(patcher, truth) -> float:
    """The share of the truth's members that the dataset exercises: removing the edge alone moves the readout of
    some pair by more than the witness tolerance (a property of the data, not of any method)."""
    from analysis.discovery.truth import WITNESS_TOL

    members = np.flatnonzero(truth.members)
    changes = patcher.readout_changes(members.tolist()).max(axis=1)
    return float((changes > WITNESS_TOL).mean()) if len(members) else float("nan")


def run_construction(construction: str, corruptions, seeds, methods, ablations, metrics, shape,
                     pairs: int) -> TableResult:
    """The rows of one construction (:func:`run_table`)."""
    from analysis.discovery.graph import circuit_graph
    from analysis.discovery.truth import derive_truth

    d, k, n, iterations = shape
    out = TableResult()
    circuit = build_construction(construction, d, k, iterations)
    graph = circuit_graph(circuit)
    for corruption, ablation in table_tasks(corruptions, ablations):
        family = corruptions[0] if corruption == CLEAN_ONLY else corruption
        truth = derive_truth(circuit, graph, family, ablation, d, k, n)
        base = truth_baselines(truth)
        out.truths.append(_truth_row(construction, corruption, ablation, truth, base))
        for seed in seeds:
            data = dataset_pairs(family, d, k, n, seed, pairs)
            covered = None
            for metric in metrics:
                label = f"{construction} {corruption} {ablation} {metric} seed {seed}"
                try:
                    patcher = make_patcher(circuit, data, graph, ablation, metric, drop_invisible=True)
                except (CorruptionInvisible, ValueError) as err:
                    out.skipped.append(f"{label}: {err}")
                    continue
                if len(patcher.pairs) < len(data):
                    out.skipped.append(f"{label}: {len(data) - len(patcher.pairs)} of {len(data)} pairs left out"
                                       " (no ablation changes their readout)")
                if covered is None:
                    covered = dataset_coverage(patcher, truth)
                for method in methods:
                    res = discover(circuit, patcher.pairs, method, patcher=patcher, truth=truth, baselines=base)
                    out.rows.append({"construction": construction, "corruption": corruption, "ablation": ablation,
                                     "metric": metric, "seed": seed, "method": method, "pairs": len(patcher.pairs),
                                     "covered": covered,
                                     "edges": res.scored.edges, "nodes": res.scored.nodes,
                                     "roc": {"fpr": res.fpr.tolist(), "tpr": res.tpr.tolist()},
                                     **res.pr.to_dict()})
    return out


def run_table(constructions=CONSTRUCTIONS, corruptions=TABLE_CORRUPTIONS, seeds=(0, 1, 2), methods=tuple(METHODS),
              ablations=tuple(ABLATIONS), metrics=tuple(METRICS), shape=TABLE_SHAPE, pairs: int = PAIRS,
              progress=None, swap_shape=SWAP_SHAPE, jobs: int = 1) -> TableResult:
    """Every construction's rows (:func:`run_construction`) at ``shape`` (``(d, k, n, iterations)``; the swap
    circuits at ``swap_shape``), ``jobs`` constructions at a time (processes); ``progress(i)`` after the ``i``-th
    construction (from 0) is done."""
    def shape_of(c):
        return swap_shape if c in construction_registry.CONSTRUCTIONS else shape

    args = [(c, tuple(corruptions), tuple(seeds), tuple(methods), tuple(ablations), tuple(metrics), shape_of(c), pairs)
            for c in constructions]
    parts = []
    if jobs <= 1 or len(args) == 1:
        for i, a in enumerate(args):
            parts.append(run_construction(*a))
            if progress:
                progress(i)
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(run_construction, *a) for a in args]
            for i, future in enumerate(futures):
                parts.append(future.result())
                if progress:
                    progress(i)
    out = TableResult()
    for part in parts:
        out.rows += part.rows
        out.truths += part.truths
        out.skipped += part.skipped
    return out


__all__ = ["BASELINES", "CLEAN_ONLY", "CONSTRUCTIONS", "CURVE_METRICS", "PAIRS", "TABLE_CORRUPTIONS", "TABLE_SHAPE", "TableResult",
           "dataset_pairs", "run_table", "table_tasks"]
