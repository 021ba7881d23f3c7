"""Circuit discovery on the k-means circuits, scored against a ground truth proven for each task.

* :mod:`~analysis.discovery.graph` — candidate edges (input, heads' q/k/v, MLPs, readout) and the weights' data
  flow among them, in the named residual basis.
* :mod:`~analysis.discovery.family`, :mod:`~analysis.discovery.abstract`, :mod:`~analysis.discovery.truth`,
  :mod:`~analysis.discovery.witness` — corruption families; the abstract interpretation of the weights over a
  family; the ground truth of a task (members with witnesses, inert edges with proofs); the split-input check.
* :mod:`~analysis.discovery.ablation` — ablation kinds (resample, zero, mean) and metrics (KL, L2).
* :mod:`~analysis.discovery.edges` — edge patching with TransformerLens hooks, the forward every method runs.
* :mod:`~analysis.discovery.methods` — the method protocol, plug-ins; :mod:`~analysis.discovery.acdc`,
  :mod:`~analysis.discovery.eap` — ACDC (threshold sweep), EAP and EAP-IG.
* :mod:`~analysis.discovery.scoring` — monotone ROC envelope, step and trapezoid AUC, AUPRC, nodes, baselines.
* :mod:`~analysis.discovery.run` — :func:`discover`, the Python entry point; :mod:`~analysis.discovery.table`
  the results table; :mod:`~analysis.discovery.report` and :mod:`~analysis.discovery.figures` the pages.

Names are imported lazily (torch and TransformerLens load only when a method runs).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CircuitGraph": "graph", "Edge": "graph", "circuit_graph": "graph", "graph_from_blocks": "graph",
    "EdgePatcher": "edges", "acdc": "acdc", "eap": "eap", "eap_ig": "eap",
    "discover": "run", "DiscoveryResult": "run", "blobs_problem": "run", "run_table": "table",
    "discovery_report": "report", "GroundTruth": "truth", "derive_truth": "truth",
    "DiscoveryMethod": "methods", "MethodOutput": "methods", "Task": "methods",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
