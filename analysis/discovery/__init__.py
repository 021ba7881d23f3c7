"""Circuit discovery on the k-means circuit, scored against a ground truth derived from its weights.

* :mod:`~analysis.discovery.graph` — candidate edges (input, heads' q/k/v, MLPs, readout) and the circuit among
  them, derived from the construction's weights in the named residual basis.
* :mod:`~analysis.discovery.edges` — edge patching with TransformerLens hooks and the metric.
* :mod:`~analysis.discovery.acdc`, :mod:`~analysis.discovery.eap` — ACDC (threshold sweep), EAP and EAP-IG.
* :mod:`~analysis.discovery.scoring` — ROC curves, AUROC, precision/recall, found/missed/spurious edges.
* :mod:`~analysis.discovery.run` — :func:`discover`, the Python entry point; :mod:`~analysis.discovery.table`
  the results table; :mod:`~analysis.discovery.report` the HTML page.

Names are imported lazily (torch and TransformerLens load only when a method runs).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CircuitGraph": "graph", "Edge": "graph", "circuit_graph": "graph", "graph_from_blocks": "graph",
    "EdgePatcher": "edges", "acdc": "acdc", "eap": "eap", "eap_ig": "eap",
    "discover": "run", "DiscoveryResult": "run", "blobs_problem": "run", "run_table": "table",
    "discovery_report": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
