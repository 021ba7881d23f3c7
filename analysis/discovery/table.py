"""The results table: every method on every construction, over corruptions and seeds, AUROC with its spread.

``kmeans-circuits discover --table`` prints it (docs/discovery.md shows it with the command). One circuit per
construction (d = 2, k = 3, two Lloyd iterations: 6 blocks, 163 candidate edges), one blobs problem per seed,
one pair per corruption; the three methods share each pair's patcher. A pair whose corruption leaves the
readout unchanged is skipped and counted. Each method is scored on every pair alone (spread over pairs) and once
on the dataset of all of a construction's pairs together, as discovery is run on language models.

The two swap circuits (:data:`~analysis.discovery.run.SWAP_CONSTRUCTIONS`, 14 and 31 blocks a step) run at their
tiniest shape, ``swap_shape`` (d = 1, k = 2, n = 8, one step). Every construction runs ACDC edge by edge and
measures the exercised edges on every candidate; ``grouped`` names constructions whose ACDC would test its edges
grouped per source and destination node instead (and measure the exercised edges on the circuit's edges only),
none by default: ACDC's look-ahead (:func:`~analysis.discovery.acdc.acdc`) made the learned swap's 3938 candidate
edges fit the budget one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.discovery.run import METHODS, SWAP_CONSTRUCTIONS, blobs_problem, build_construction, discover, make_patcher

CONSTRUCTIONS: tuple[str, ...] = ("lloyd", "soft", "trimmed", "spherical")
TABLE_CORRUPTIONS: tuple[str, ...] = ("move-centroid", "move-point", "swap-centroids")
#: ``(d, k, n, steps)`` of the swap circuits' rows: the tiniest problem they run.
SWAP_SHAPE: tuple[int, int, int, int] = (1, 2, 8, 1)
#: The constructions whose ACDC tests edges grouped per source and destination node (and whose exercised edges
#: are measured on the circuit's edges only): none (``run_table(grouped=...)`` can name some).
GROUPED_ACDC: tuple[str, ...] = ()


@dataclass
class TableResult:
    rows: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def cell(self, construction: str, method: str, key: str = "auroc", setting: str = "pair") -> np.ndarray:
        return np.array([r[key] for r in self.rows if r["construction"] == construction and r["method"] == method
                         and r["setting"] == setting], dtype=float)

    def markdown(self, constructions=None, methods=METHODS, key: str = "auroc") -> str:
        """Per construction (default: those in the rows, in order): mean ± std (min-max, runs) over single pairs,
        then the one run over all of them."""
        if constructions is None:
            constructions = list(dict.fromkeys(r["construction"] for r in self.rows))
        head = ("| construction | " + " | ".join(f"{m}: pairs" for m in methods) + " | circuit edges exercised |"
                + " | ".join(f"{m}: dataset" for m in methods) + " | exercised by the dataset |")
        lines = [head, "|" + "---|" * (2 * len(methods) + 3)]
        for c in constructions:
            cells = []
            for m in methods:
                a = self.cell(c, m, key)
                a = a[~np.isnan(a)]
                cells.append(f"{a.mean():.3f} ± {a.std():.3f} ({a.min():.2f}-{a.max():.2f}, {len(a)})" if len(a) else "-")
            ex = self.cell(c, methods[0], "exercised_fraction")
            cells.append(f"{ex.mean():.2f}" if len(ex) else "-")
            for m in methods:
                a = self.cell(c, m, key, "dataset")
                cells.append(f"{a[0]:.3f}" if len(a) and not np.isnan(a[0]) else "-")
            ex = self.cell(c, methods[0], "exercised_fraction", "dataset")
            cells.append(f"{ex[0]:.2f}" if len(ex) else "-")
            lines.append(f"| {c} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def run_table(constructions=CONSTRUCTIONS, corruptions=TABLE_CORRUPTIONS, seeds=(0, 1, 2), methods=METHODS,
              d: int = 2, k: int = 3, n: int = 12, iterations: int = 2, progress=None, swap_shape=SWAP_SHAPE,
              grouped=GROUPED_ACDC) -> TableResult:
    from analysis.discovery.edges import CorruptionInvisible
    from analysis.discovery.graph import circuit_graph
    from analysis.patching.pairs import make_pair

    out = TableResult()
    shape = (d, k, n, iterations)
    for construction in constructions:
        d, k, n, iterations = swap_shape if construction in SWAP_CONSTRUCTIONS else shape
        circuit = build_construction(construction, d, k, iterations)
        graph = circuit_graph(circuit)
        group = construction in grouped
        visible = []
        for seed in seeds:
            X, C0 = blobs_problem(d, k, n, seed)
            for corruption in corruptions:
                label = f"{construction} seed {seed} {corruption}"
                try:
                    pair = make_pair(corruption, X, C0)
                    patcher = make_patcher(circuit, [pair], graph)
                except (CorruptionInvisible, ValueError) as err:
                    out.skipped.append(f"{label}: {err}")
                    continue
                visible.append(pair)
                _score(out, circuit, patcher, methods, {"construction": construction, "seed": seed,
                                                        "corruption": corruption, "setting": "pair"}, group)
                if progress:
                    progress(label)
        if visible:
            # The way ACDC and EAP are run on language models: one run over a dataset of pairs, the metric's change
            # averaged over them.
            _score(out, circuit, make_patcher(circuit, visible, graph), methods,
                   {"construction": construction, "seed": -1, "corruption": f"all {len(visible)} pairs",
                    "setting": "dataset"}, group)
            if progress:
                progress(f"{construction} dataset of {len(visible)} pairs")
    return out


def _score(out: TableResult, circuit, patcher, methods, row: dict, group: bool = False) -> None:
    for method in methods:
        res = discover(circuit, None, method, patcher=patcher, group=group, circuit_only_exercised=group)
        pr = res.pr
        truth = res.truth
        out.rows.append({**row,
                         "method": method, "auroc": res.auroc, "precision": pr.precision, "recall": pr.recall,
                         "auroc_exercised": res.auroc_exercised, "nan_scores": res.details.get("nan_scores", 0),
                         "exercised_fraction": float(res.exercised[truth].mean()),
                         "grouped": bool(group and method == "acdc")})
