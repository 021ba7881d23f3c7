"""Activation patching on the k-means circuit, checked against what its construction predicts.

The circuit is the rare model whose causal structure is known before any experiment: which subspace of which
token each block reads and writes is written in its weights. Patching it is therefore a calibration for patching
methods themselves — the heatmaps must light up where the construction says, and nowhere else.

* :mod:`~analysis.patching.pairs` — clean/corrupted problem pairs (move a centroid, move a point across a
  decision boundary, swap two centroids, add an outlier), sharing token positions and unit scaling.
* :mod:`~analysis.patching.experiment` — :class:`PatchingExperiment`: caches both runs and runs the corrupted one
  with clean activations patched in, by layer, token position or type, head output, and named subspace.
* :mod:`~analysis.patching.unpatched` — :func:`verify_unpatched`: the clean and corrupted runs verified layer by
  layer, and the placeholder key checked inert, before any patch is read.
* :mod:`~analysis.patching.metrics` — label flips, centroid displacement, objective change and the fraction of
  clean behaviour restored (defined there, 0/0 included).
* :mod:`~analysis.patching.sweeps` — layer x position, layer x subspace and per-component sweeps as tensors,
  with plotly heatmaps labelled by the layouts.

Names are imported lazily so that ``analysis.patching.pairs`` (numpy only) stays cheap for the command line.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "PatchingPair": "pairs", "CORRUPTIONS": "pairs", "make_pair": "pairs", "move_centroid": "pairs",
    "move_point": "pairs", "swap_centroids": "pairs", "add_outlier": "pairs",
    "PatchingExperiment": "experiment", "Patch": "experiment", "PatchSite": "experiment",
    "positions_of": "experiment", "encode_pair": "experiment",
    "UnpatchedCheck": "unpatched", "verify_unpatched": "unpatched",
    "PatchMetrics": "metrics", "Outcome": "metrics", "fraction_restored": "metrics",
    "SweepResult": "sweeps", "sweep_layer_position": "sweeps", "sweep_layer_subspace": "sweeps",
    "sweep_components": "sweeps", "run_sweeps": "sweeps", "heatmap": "sweeps",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
