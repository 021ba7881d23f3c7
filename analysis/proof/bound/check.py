"""The sharpness bound of a captured run, and the run checked against it layer by layer.

:func:`bound_for_capture` reads a captured circuit's knobs and encoded problem and bounds it
(:func:`analysis.proof.bound.sharpness.sharpness_bound`); :func:`bound_violations` compares what the run did,
against the hard trajectory, with that bound (what ``tests/unit/test_prove_bound.py`` holds every layer to).
"""

from __future__ import annotations

import math

import numpy as np

from analysis.proof.bound.records import HardTrajectory, SharpnessBound
from analysis.proof.bound.sharpness import sharpness_bound
from circuits.blocks import ASSIGN, UPDATE


def _sink_logits(circ, kind: str) -> float | None:
    """The sink logit of the ``kind`` layers (``None`` without sinks), read from the weights the structured path runs."""
    if not getattr(circ.runnable.cfg, "use_attention_sinks", False):
        return None
    values = {float(circ.runnable.blocks[layer].attn.sinks.detach().reshape(-1)[0]) for layer in circ.layers_of(kind)}
    # Tied weights share one value; if they did not, the largest logit is the worst case for the update heads.
    return max(values) if kind == UPDATE or len(values) == 1 else None


def bound_inputs(cap, b: int = 0) -> tuple[tuple, dict] | None:
    """The arguments of :func:`~analysis.proof.bound.sharpness.sharpness_bound` for problem ``b`` of a captured
    run of Lloyd's circuit or the damped or trimmed variant (float64 only; ``None`` otherwise, and for a damped
    ``eta`` whose ``1 - eta`` is not a float64): ``(args, kwargs)``, read now (the points and initial centroids
    as the circuit received them, copies), so the bound can be evaluated later."""
    from fractions import Fraction

    import torch

    from circuits.encoding import read

    circ, enc = cap.circuit, cap.encoded
    if not circ.spec.bounded or circ.dtype != torch.float64:
        return None
    eta = float(circ.params.get("eta", 1.0))  # the damping factor (damped's parameter); 1: an undamped update
    if Fraction(1) - Fraction(eta) != Fraction(1.0 - eta):
        return None  # the norm units then do not hold |c|^2 exactly (update.MLP.damped_square_norm fails)
    sink = update_sink = None
    if circ.spec.sink_logit is not None:  # scores may go to the sink (trimmed's): its logits enter the bound
        sink, update_sink = _sink_logits(circ, ASSIGN), _sink_logits(circ, UPDATE)
        if sink is None:
            return None
    if enc.resid is None:
        # What encode writes into those slots (float64: no cast), from the encoding's own inputs: an encoding of a
        # run at scale holds no stream, and making one to read two slots costs 0.47 GB at a million points.
        X, C0 = enc.scaling.to_unit(enc.X)[b], enc.scaling.to_unit(enc.C0)[b]
    else:
        seq = enc.sequence
        X = read(circ.layout, enc.resid, "X", seq.points)[b]
        C0 = read(circ.layout, enc.resid, "C_stage", seq.centroids)[b]
    s = circ.sharpness
    return ((X, C0, circ.iterations, s.beta, s.beta_update, s.mask, s.tie_break, float(enc.scaling.scale[b])),
            {"eta": eta, "sink": sink, "update_sink": update_sink})


def bound_for_capture(cap, b: int = 0) -> tuple[SharpnessBound, HardTrajectory] | None:
    """The bound for problem ``b`` of a captured run of Lloyd's circuit or the damped or trimmed variant (float64
    only; ``None`` otherwise, and for a damped ``eta`` whose ``1 - eta`` is not a float64)."""
    inputs = bound_inputs(cap, b)
    if inputs is None:
        return None
    args, kwargs = inputs
    return sharpness_bound(*args, **kwargs)


def observed_softmax_l1(cap, traj: HardTrajectory, b: int = 0) -> dict[int, float]:
    """Observed ``max sum_keys |softmax - hardmax|`` per layer against the hard trajectory (for checking the bound)."""
    circ = cap.circuit
    seq = cap.encoded.sequence
    out: dict[int, float] = {}
    for lc in cap.layers:
        att = lc.attention
        if lc.kind == ASSIGN:
            it = circ.assignment_layers.index(lc.layer)
            if it >= len(traj.labels):
                continue
            p = att.pattern[b]  # points x centroids
            k = p.shape[1]
            hard = np.eye(k + 1)[traj.labels[it]]  # label -1: the sink (column k)
            sink = att.sink_mass[b] if att.sink_mass is not None else np.zeros(len(p))
            masked = np.abs(1 - p.sum(axis=1) - sink)  # point and BOS keys (hard weight 0)
            out[lc.layer] = float((np.abs(p - hard[:, :k]).sum(axis=1) + masked + np.abs(sink - hard[:, k])).max()) \
                if len(p) else 0.0
        elif lc.kind == UPDATE:
            it = circ.centroid_layers.index(lc.layer)
            if it > len(traj.labels):
                continue
            p = att.pattern[b]  # centroids x positions
            hard = np.zeros_like(p)
            for j in range(p.shape[0]):
                members = np.flatnonzero(traj.labels[it - 1] == j) + seq.points.start if it > 0 else np.array([], int)
                if len(members):
                    hard[j, members] = 1 / len(members)
                else:
                    hard[j, seq.centroid(j)] = 1.0
            sink = np.abs(1 - p.sum(axis=1)) if getattr(circ.runnable.cfg, "use_attention_sinks", False) else 0.0
            out[lc.layer] = float((np.abs(p - hard).sum(axis=1) + sink).max())
    return out


def bound_violations(cap, b: int = 0, proven: tuple[SharpnessBound, HardTrajectory] | None = None,
                     slack: float = 1e-13) -> list[str]:
    """Where a captured run exceeds its proven bound (empty when the bound holds), checked layer by layer.

    Compared, against the hard trajectory: each layer's ``sum |softmax - hardmax|``; each assign layer's
    ``|Y - one-hot|`` and its labels (only points the bound leaves uncertified may differ); each update layer's
    centroids (unit-scaled). ``slack`` (absolute) and the verifier's centroid tolerance stand for the float64
    rounding of the forward pass, which the bound does not cover.
    """
    proven = proven if proven is not None else bound_for_capture(cap, b)
    if proven is None:
        return []
    bound, traj = proven
    circ = cap.circuit
    scale = float(cap.encoded.scaling.scale[b])
    eps = float(np.finfo(np.float64).eps)
    c_slack = 1e3 * eps + 64 * eps * float(np.abs(np.concatenate([cap.encoded.X[b], cap.encoded.C0[b]])).max()) / scale
    observed = observed_softmax_l1(cap, traj, b)
    out = []
    for lb in bound.layers:
        if lb.layer not in observed or not math.isfinite(lb.softmax_l1):
            continue
        if observed[lb.layer] > lb.softmax_l1 + slack:
            out.append(f"layer {lb.layer} ({lb.kind}): |softmax - hardmax|_1 = {observed[lb.layer]:.3g} > bound {lb.softmax_l1:.3g}")
        lc = cap.layers[lb.layer]
        if lb.kind == ASSIGN and lb.assignment_l1 is not None and math.isfinite(lb.assignment_l1):
            it = circ.assignment_layers.index(lb.layer)
            Y = lc.post.assignments[b]
            hard_Y = np.eye(Y.shape[1] + 1)[traj.labels[it]][:, :-1]  # outliers (label -1): 0
            dev = float(np.abs(Y - hard_Y).sum(axis=1).max()) if len(Y) else 0.0
            if dev > lb.assignment_l1 + slack:
                out.append(f"layer {lb.layer}: |Y - one-hot|_1 = {dev:.3g} > bound {lb.assignment_l1:.3g}")
            wrong = int((lc.post.labels[b] != traj.labels[it]).sum())
            if wrong > lb.uncertified_labels:
                out.append(f"layer {lb.layer}: {wrong} labels differ from the hard trajectory, only"
                           f" {lb.uncertified_labels} uncertified")
        if lb.kind == UPDATE and lb.centroid is not None and math.isfinite(lb.centroid):
            it = circ.centroid_layers.index(lb.layer)
            err = float(np.sqrt(((lc.post.unit_centroids[b] - traj.centroids[it]) ** 2).sum(axis=1)).max())
            if err > lb.centroid + c_slack:
                out.append(f"layer {lb.layer}: centroids {err:.3g} from the hard trajectory > bound {lb.centroid:.3g}")
    return out
