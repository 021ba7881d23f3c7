"""One call from a problem to a verified answer: build, encode, run with capture, verify.

Shared by the command line, the scikit-learn-style estimator and the notebooks so that they all run the circuit
the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from analysis.capture import Capture, capture
from analysis.verify import VerificationReport, verify_problem
from circuits import reference
from circuits.build import KMeansCircuit
from circuits.encoding import EncodedBatch, encode
from circuits.sharpness import Sharpness
from circuits.variants import get_variant

DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass
class RunResult:
    circuit: KMeansCircuit
    encoded: EncodedBatch
    capture: Capture
    report: VerificationReport

    @property
    def labels(self) -> np.ndarray:
        """Each point's cluster under the final centroids."""
        return self.capture.final.labels[0]

    @property
    def centroids(self) -> np.ndarray:
        """Final centroids in the input's units."""
        return self.capture.centroids(self.circuit.iterations)[0]

    @property
    def inertia(self) -> float:
        """k-means objective of the final labels and centroids, on the points as the circuit saw them.

        That is ``capture.encoded.X`` (a variant may map its input, e.g. spherical k-means projects the points onto
        the unit sphere); points with label -1 (trimmed k-means outliers) are left out.
        """
        X, labels = self.capture.encoded.X[0], self.labels
        kept = labels >= 0
        return reference.objective(X[kept], self.centroids, labels[kept])

    def to_json(self) -> dict:
        """The command line's ``--json`` object (DESIGN.md section 4) plus a few self-describing extras."""
        rep = self.report.to_dict()
        keys = ["iteration", "label_agreement", "max_centroid_error", "objective_circuit", "objective_reference",
                "min_margin", "leak_bound", "ties", "proven_bound"]
        if self.circuit.spec is not None:
            keys += ["max_assignment_error", "update_weight_error", "outliers"]
        per_iteration = [{key: rec[key] for key in keys} for rec in rep["per_iteration"]]
        return {
            "variant": self.circuit.variant,
            "path": self.capture.path,
            "k": self.encoded.k,
            "iterations": self.circuit.iterations,
            "labels": [int(v) for v in self.labels],
            "centroids": self.centroids.tolist(),
            "verified": bool(self.report.verified),
            "per_iteration": per_iteration,
            "n": self.encoded.n,
            "d": self.encoded.d,
            "dtype": rep["dtype"],
            "exact": rep["exact"],
            "hard_attention": rep["hard_attention"],
            "inertia": self.inertia,
            "n_iter": rep["n_iter"],
            "final": {
                "label_agreement": rep["final_label_agreement"],
                "min_margin": rep["final_min_margin"],
                "leak_bound": rep["final_leak_bound"],
            },
            "n_ties": rep["n_ties"],
            "n_errors": rep["n_errors"],
            "variant_params": rep["variant_params"],
            "reference": rep["reference"],
            "sharpness": self.circuit.sharpness.to_dict(),
            "scale": rep["scale"],
            # proven_bound is real arithmetic; the float64 rounding the verifier allows for comes on top of it.
            "tolerances": {"centroid": rep["tolerances"]["centroid"], "tie_window": rep["tolerances"]["tie_window"]},
            "failures": rep["failures"],
            "notes": rep["notes"] + ([f"dense path: {self.capture.path_note}"] if self.capture.path_note else []),
        }


def run_problem(X: np.ndarray, C0: np.ndarray, iterations: int = 10, variant: str = "lloyd",
                dtype: torch.dtype = torch.float64, sharpness: Sharpness | None = None,
                on_layer: Callable[[int], None] | None = None, keep_cache: bool = False,
                circuit: KMeansCircuit | None = None, path: str = "dense") -> RunResult:
    """Build the ``variant`` circuit for ``X`` (n, d) and ``C0`` (k, d), run it, and verify every layer.

    Pass ``circuit`` to reuse a built model (it must match d, k and iterations). ``path`` chooses the execution
    path (``"dense"``, ``"structured"`` or ``"auto"``, see :func:`analysis.capture.capture`).
    """
    X, C0 = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64)
    if circuit is None:
        circuit = get_variant(variant).build(X.shape[1], C0.shape[0], iterations, sharpness=sharpness, dtype=dtype)
    encoded = encode(circuit.layout, X, C0, dtype=circuit.dtype)
    cap = capture(circuit, encoded, keep_cache=keep_cache, on_layer=on_layer, path=path)
    return RunResult(circuit, encoded, cap, verify_problem(cap, 0))
