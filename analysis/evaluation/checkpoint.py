"""``cluster --checkpoint``: a trained model run as a real ``HookedTransformer`` on one problem, next to Lloyd's.

Two separate questions, answered separately: does the exported model reproduce the training-time forward pass
(:mod:`analysis.verify.export`, the document's ``"verified"``), and how does its clustering compare with Lloyd's
from the same initial centroids, iteration by iteration (which a trained model is meant to beat, not match)?
"""

from __future__ import annotations

import numpy as np

from analysis.verify.export import check_export
from circuits import reference
from circuits.training.encoding import unit_to_task

NOTE = ("trained model: 'verified' means the exported HookedTransformer reproduces the training-time forward pass;"
        " per_iteration compares with Lloyd's from the same initial centroids (the reference), which the model is not"
        " meant to match; min_margin is the smallest gap between a point's two largest assignment weights (1: one-hot)")


def iteration_records(X: np.ndarray, cents: np.ndarray, Y: list[np.ndarray], trace: reference.Trace) -> list[dict]:
    """Per iteration ``1..T``: the model's labels and centroids against Lloyd's, both objectives, and the smallest
    margin of the ``Y`` readout (``Y[t]``: the points' assignment weights after step ``t``)."""
    out = []
    for t in range(1, len(cents)):
        top2 = np.sort(Y[t], axis=1)[:, -2:] if Y[t].shape[1] > 1 else np.c_[np.zeros(len(X)), Y[t]]
        out.append({
            "iteration": t,
            "label_agreement": float((reference.assign(X, cents[t]) == trace.assignments[t]).mean()),
            "max_centroid_error": float(np.abs(cents[t] - trace.centroids[t]).max()),
            "objective_circuit": reference.objective(X, cents[t]),
            "objective_reference": reference.objective(X, trace.centroids[t]),
            "min_margin": float((top2[:, 1] - top2[:, 0]).min()),
        })
    return out


def cluster_with_checkpoint(checkpoint: str, X: np.ndarray, C0: np.ndarray, iterations: int) -> dict:
    """Run a trained model as a real ``HookedTransformer`` on one problem and compare it with Lloyd's.

    ``verified`` says that the exported ``HookedTransformer`` reproduces the model's training-time forward pass
    (:class:`analysis.verify.export.ExportParity`); the per-iteration records compare with Lloyd's from the same
    initial centroids, which a trained model is meant to beat, not match. The exported model runs on the masked
    path where its point x point block provably weighs 0 (:func:`analysis.verify.export.run_export`).
    """
    from circuits.devices import torch_threads
    from circuits.training.checkpoint import load_model

    model, config = load_model(checkpoint)
    enc = model.encode(X, C0)
    n = X.shape[0]
    ht = model.hooked_transformer()
    # One problem's products are small: torch's intra-op threads only wait on each other (on the loaded 2-core
    # machine, 400 points: 14 s of wall for the export's forward with two threads, under 1 s with one).
    with torch_threads(1):
        run = check_export(ht, model, enc, iterations, n)
    seq = enc.sequence
    # Decoded in float64: the model computes in unit coordinates, always within its dtype's range; float32's
    # decode overflowed on data beyond 3.4e38 (NaN centroids) and rounded to |offset| eps on far-offset data.
    cents = np.stack([unit_to_task(r[:, seq.centroids, model.layout["C"]].double(), enc)[0].numpy() for r in run.hooked])
    Y = [r[0, seq.points, model.layout["Y"]][:, : C0.shape[0]].double().numpy() for r in run.hooked]
    trace = reference.lloyd(X, C0, iterations)
    final, parity = cents[-1], run.parity
    inertia, lloyd_inertia = reference.objective(X, final), float(trace.objectives[-1])
    return {
        "variant": f"trained:{checkpoint}", "k": int(C0.shape[0]), "iterations": iterations,
        "labels": [int(v) for v in reference.assign(X, final)], "centroids": final.tolist(),
        "verified": parity.verified,
        "per_iteration": iteration_records(X, cents, Y, trace), "n": n, "d": int(X.shape[1]),
        "inertia": inertia, "lloyd_inertia": lloyd_inertia,
        "ratio_to_lloyd": reference.objective_ratio(inertia, lloyd_inertia),
        "dtype": str(model.dtype).replace("torch.", ""),
        "export_error": parity.error, "export_tolerance": parity.tolerance, "export_path": parity.path,
        "notes": [NOTE],
        "trained": {key: config["training"][key] for key in ("d", "k", "n", "steps", "init")},
    }
