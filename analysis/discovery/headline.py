"""The trained headline checkpoint under discovery, scored against the construction it started from.

The checkpoint (``checkpoints/headline``, docs/training.md) is a recurrent model: one update and one assign block,
tied, applied step after step with the constant subspaces re-embedded and the staging slots emptied in between.
One step — the pair ``[U, A]`` — is a plain two-layer ``HookedTransformer``
(:meth:`~circuits.training.model.RecurrentKMeans.hooked_transformer`), so discovery runs on one step: the clean
and corrupted inputs are the residual streams entering step ``step`` of the clean and the corrupted problem
(both encoded with one unit scaling), the readout is ``Y`` and ``C`` after that step.

Three graphs of that step, all from :func:`~analysis.discovery.graph.graph_from_blocks`:

* the **construction's** (the untrained model of the same config, exact zeros): the ground truth;
* the **trained weights'**, where a block counts when an entry exceeds ``atol`` (training moves every weight a
  little; ``atol`` says how much is "something"); its circuit edges outside the construction's are the edges
  **training added** (``A0 -> A1.q/k`` through ``XB`` are docs/training.md's ``X -> XB`` and ``XB x XB``);
* the **discovered** one, per method, scored against the construction's graph (a truth given, not derived:
  :meth:`~analysis.discovery.truth.GroundTruth.given`), with each added edge marked found or missed; the metric is
  ``l2`` and the ablation ``resample``.

The input's data subspaces are those that differ between the problems' step inputs (``X`` and the carried state
``C``, ``N``, ``Y``, ``BETA``, ``XB``); ``ID``, ``ONE`` and the flags are the re-embedded constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from analysis.discovery.graph import CircuitGraph, graph_from_blocks

HEADLINE = "checkpoints/headline"


@dataclass
class HeadlineResult:
    construction: CircuitGraph
    trained: CircuitGraph
    added: list[str]
    dropped: list[str]
    methods: dict[str, dict] = field(default_factory=dict)
    pairs: list[str] = field(default_factory=list)
    results: dict = field(default_factory=dict, repr=False)
    atol: float = 0.0
    step: int = 0

    def to_dict(self) -> dict:
        return {"step": self.step, "atol": self.atol, "pairs": self.pairs, "added_by_training": self.added,
                "dropped_by_training": self.dropped, "construction": self.construction.to_dict(),
                "trained": self.trained.to_dict(), "methods": self.methods}

    def summary(self) -> str:
        lines = [f"step {self.step} of the trained model ([U, A]), {len(self.pairs)} pairs;"
                 f" {len(self.construction.circuit)} construction edges of {len(self.construction.edges)} candidates",
                 f"edges training added (a weight block above {self.atol:g}): {', '.join(self.added) or 'none'};"
                 f" dropped: {', '.join(self.dropped) or 'none'}"]
        for method, m in self.methods.items():
            lines.append(f"{method}: AUROC {m['auroc']:.3f} against the construction, precision {m['precision']:.3f}"
                         f" recall {m['recall']:.3f}; added edges found: {', '.join(m['added_found']) or 'none'};"
                         f" missed: {', '.join(m['added_missed']) or 'none'}; spurious: {', '.join(m['spurious_edges']) or 'none'};"
                         f" construction edges missed: {', '.join(m['missed_edges']) or 'none'}")
        return "\n".join(lines)


def _step_inputs(model, hooked, layout, pair, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    from analysis.patching.experiment import shared_scaling
    from circuits.encoding import encode
    from circuits.training.construction import CONSTANT_SUBSPACES, STAGING_SUBSPACES, prepare_input
    from circuits.training.hooked import run_hooked

    scaling = shared_scaling(pair)
    out = []
    for X, C0 in ((pair.X_clean, pair.C0_clean), (pair.X_corrupted, pair.C0_corrupted)):
        enc = encode(layout, X, C0, dtype=torch.float64, scaling=scaling)
        resid0 = torch.as_tensor(prepare_input(layout, enc.resid.numpy(), len(X)), dtype=torch.float64)
        resid = run_hooked(hooked, layout, resid0, step - 1, model.config.reembed)[-1]
        const = torch.as_tensor(layout.mask(CONSTANT_SUBSPACES), dtype=torch.float64)
        staging = torch.as_tensor(layout.mask(STAGING_SUBSPACES), dtype=torch.float64)
        out.append(resid * (1 - const - staging) + resid0 * const)
    return out[0], out[1]


def step_graphs(model, untrained, input_io: tuple[set[str], set[str]], atol: float) -> tuple[CircuitGraph, CircuitGraph]:
    """``(construction, trained)``: the graphs of one step ``[U, A]`` of the untrained and the trained recurrent
    model (same candidate edges), the trained one counting a weight block above ``atol``."""
    from circuits.blocks import unembed_matrix

    W_U = unembed_matrix(model.layout)
    return (graph_from_blocks(untrained.to_blocks(), model.layout, W_U, 0.0, "headline construction", input_io),
            graph_from_blocks(model.to_blocks(), model.layout, W_U, atol, "headline trained", input_io))


def headline_discovery(path: str = HEADLINE, step: int = 2, n: int = 30, seeds=(0, 1, 2),
                       corruptions=("move-centroid", "move-point", "swap-centroids"), atol: float = 0.05,
                       methods=("acdc", "eap", "eap-ig")) -> HeadlineResult:
    """Discovery on one step of the trained checkpoint at ``path`` (see the module docstring); pairs whose
    corruption does not change the step's readout are left out."""
    from analysis.discovery.edges import EdgePatcher
    from circuits.layout import SequenceLayout
    from analysis.discovery.run import blobs_problem, discover
    from analysis.discovery.truth import GroundTruth
    from analysis.patching.pairs import make_pair
    from circuits.training.checkpoint import build_from_config, load_model

    if step < 1:
        raise ValueError(f"step must be >= 1 (step 0 is the assign block alone), got {step}")
    model, config = load_model(path)
    untrained = build_from_config(config)
    layout = model.layout
    n = max(n, 3 * layout.k)  # blobs of k clusters need k distinct points for the random initial centroids
    hooked = model.hooked_transformer(dtype=torch.float64)
    pairs, clean, corrupted = [], [], []
    for seed in seeds:
        X, C0 = blobs_problem(layout.d, layout.k, n, seed)
        for kind in corruptions:
            pair = make_pair(kind, X, C0)
            c, k = _step_inputs(model, hooked, layout, pair, step)
            after = [hooked(x) for x in (c, k)]  # logits: the points' Y after the step
            if torch.equal(*after) and _centroids_equal(hooked, c, k, layout, n):
                continue
            pairs.append(f"seed {seed}: {pair.description}")
            clean.append(c)
            corrupted.append(k)
    if not pairs:
        raise ValueError("no corruption changed the step's readout; try other seeds or corruptions")
    clean, corrupted = torch.cat(clean), torch.cat(corrupted)
    # Which subspaces hold data at the step's input: those that differ between two unrelated problems' step inputs
    # (or between any of the pairs' runs); the rest are the re-embedded constants.
    X1, C1 = blobs_problem(layout.d, layout.k, n, 10_000)
    X2, C2 = blobs_problem(layout.d, layout.k, n, 10_001)
    other = _step_inputs(model, hooked, layout, make_pair("move-point", X1, C1), step)[0]
    other2 = _step_inputs(model, hooked, layout, make_pair("move-point", X2, C2), step)[0]
    inputs = torch.cat([clean, corrupted, other, other2])
    diff = (inputs[:1] - inputs[1:]).abs().amax(dim=(0, 1))
    data = {s for s in layout.names if float(diff[layout[s]].max()) > 0}
    written = {s for s in layout.names if float(inputs[:, :, layout[s]].abs().max()) > 0}
    construction, trained = step_graphs(model, untrained, (written, data), atol)
    c_edges = {e.label for e in construction.circuit}
    t_edges = {e.label for e in trained.circuit}
    result = HeadlineResult(construction, trained, sorted(t_edges - c_edges), sorted(c_edges - t_edges), pairs=pairs,
                            atol=atol, step=step)
    seq = SequenceLayout(n, layout.k)
    # The candidate edges of the two graphs are the same (same blocks, same layout); the patcher scores against
    # the construction's circuit.
    patcher = EdgePatcher(hooked, construction, layout, seq, clean, corrupted)
    index = construction.index()
    truth = GroundTruth.given(construction, construction.truth, "headline construction")
    for method in methods:
        res = discover(None, None, method, patcher=patcher, truth=truth)
        result.results[method] = res
        kept = res.kept
        result.methods[method] = {
            "auroc": res.auroc, "step_auc": res.step_auc, "precision": res.pr.precision,
            "recall": res.pr.recall, "found": res.pr.found, "missed": res.pr.missed, "spurious": res.pr.spurious,
            "added_found": [e for e in result.added if kept[index[_key(e, construction)]]],
            "added_missed": [e for e in result.added if not kept[index[_key(e, construction)]]],
            "added_scores": {e: float(res.scores[index[_key(e, construction)]]) for e in result.added},
            "spurious_edges": [construction.edges[i].label for i in np.flatnonzero(kept & ~construction.truth)],
            "missed_edges": [construction.edges[i].label for i in np.flatnonzero(~kept & construction.truth)],
            "threshold": res.threshold,
        }
    return result


def _centroids_equal(hooked, c, k, layout, n) -> bool:
    from circuits import hook_names

    last = hook_names.resid_post(hooked.cfg.n_layers - 1)
    outs = [hooked.run_with_cache(x, names_filter=hook_names.names_filter([last]))[1][last] for x in (c, k)]
    return torch.equal(*(o[:, 1 + n:, layout["C"]] for o in outs))


def _key(label: str, graph: CircuitGraph) -> tuple[str, str, str]:
    return next(e.key for e in graph.edges if e.label == label)
