"""Corruption families: the problems a discovery task ranges over, their pairs, and what the encoder fixes.

A *family* is a corruption kind (:data:`analysis.patching.pairs.CORRUPTIONS`) applied to every problem of one shape
``(n, d, k)``: ``n`` points in ``d`` dimensions and ``k`` distinct initial centroids, anywhere. Its invariants are
what the corruption leaves alone (``move-point`` never touches an initial centroid, ``move-centroid`` and
``swap-centroids`` never touch a point) and what the encoder writes whatever the problem (flags, identities, the
constant ``ONE``, empty slots). The ground truth of a family (:mod:`analysis.discovery.truth`) is derived from
those invariants; its witnesses, and the datasets the methods run on, are drawn by :func:`family_problem`:

* ``blobs``: scikit-learn's ``make_blobs`` (``k`` centres, standard deviation 1.5) and ``k`` random data points as
  the initial centroids, the project's default initialisation;
* ``wide``: the same points, and initial centroids drawn uniformly from their bounding box widened by half on
  each side: not data points, so a cluster may start or become empty (the update's keep-the-old-centroid rule);
* ``far``: ``k`` random data points as initial centroids, one of them (drawn) then moved three half-widths of
  the box from its centre, so that its cluster starts empty;
* with ``base`` (``discover --dataset/--data``): the user's points instead of blobs, initialised either way.

:func:`encode_pairs` encodes pairs as the circuit reads them (each pair in one shared unit scaling, or projected
onto the unit sphere for a variant that clusters directions); :func:`input_abstraction` turns encoded inputs into
the abstract input of :mod:`analysis.discovery.abstract`: each coordinate the encoder writes the same on every
sampled input is that constant, every other lies in ``[-1, 1]`` (every encoder scales its problem into the unit
ball; the function checks it on the samples it is given).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from analysis.discovery.abstract import Val

#: How a family's problems are drawn (module docstring).
SAMPLERS: tuple[str, ...] = ("blobs", "wide", "far")


def family_problem(d: int, k: int, n: int, seed: int, kind: str = "blobs",
                   base: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(X, C0)`` of one problem of the family (module docstring)."""
    from sklearn.datasets import make_blobs

    from circuits.initialisation import initial_centroids

    if kind not in SAMPLERS:
        raise ValueError(f"unknown sampler {kind!r}; choose one of {', '.join(SAMPLERS)}")
    if base is None:
        X, _ = make_blobs(n_samples=n, n_features=d, centers=k, cluster_std=1.5, random_state=seed)
    else:
        X = np.asarray(base, dtype=np.float64)
    if kind == "blobs":
        return X, initial_centroids(X, k, "random", seed=seed)
    rng = np.random.default_rng(seed)
    lo, hi = X.min(axis=0), X.max(axis=0)
    mid, half = (lo + hi) / 2, np.maximum((hi - lo) / 2, 1e-6)
    if kind == "wide":
        return X, mid + rng.uniform(-1.0, 1.0, size=(k, X.shape[1])) * half * 1.5
    C0 = initial_centroids(X, k, "random", seed=seed).copy()
    direction = rng.normal(size=X.shape[1])
    C0[rng.integers(k)] = mid + 3 * half * direction / np.linalg.norm(direction)
    return X, C0


@dataclass
class Encoded:
    """Clean and corrupted residual inputs ``(B, P, D)`` of ``B`` pairs, their token layout, and what the readout
    reads: ``reads`` is ``[(positions, subspace)]``, the first entry the assignment (the metric's labels)."""

    clean: torch.Tensor
    corrupted: torch.Tensor
    sequence: object
    reads: list


def _encode_sphere(circuit, pair):
    """Both runs of ``pair`` as a circuit on the unit sphere receives them (:meth:`VariantSpec.prepare`)."""
    from circuits.encoding import encode

    spec = circuit.spec
    runs = []
    for X, C0 in ((pair.X_clean, pair.C0_clean), (pair.X_corrupted, pair.C0_corrupted)):
        Xp, Cp, scaling = spec.prepare(np.asarray(X)[None], np.asarray(C0)[None])
        runs.append(encode(circuit.layout, Xp[0], Cp[0], dtype=circuit.dtype, scaling=scaling, device=circuit.device))
    return runs


def encode_pairs(circuit, pairs) -> Encoded:
    """The pairs' inputs, one sequence layout (a :class:`ValueError` otherwise)."""
    from analysis.discovery.swap import is_swap, readout_positions, stack_swap_pairs

    if is_swap(circuit):
        clean, corrupted, sequence = stack_swap_pairs(circuit, pairs)
        return Encoded(clean, corrupted, sequence, readout_positions(sequence))
    spec = getattr(circuit, "spec", None)
    if spec is not None and spec.input_map is not None:
        if any(p.placeholder is not None for p in pairs):
            raise ValueError(f"the {circuit.variant} circuit clusters directions: add-outlier's placeholder token"
                             " has none; use the other corruptions")
        encoded = [_encode_sphere(circuit, p) for p in pairs]
    else:
        from analysis.patching.experiment import encode_pair

        encoded = [encode_pair(circuit, p) for p in pairs]
    sequences = {e[0].sequence for e in encoded}
    if len(sequences) != 1:
        raise ValueError("the pairs of one discovery run must have one sequence layout (the same n and k)")
    sequence = sequences.pop()
    return Encoded(torch.cat([c.resid for c, _ in encoded]), torch.cat([k.resid for _, k in encoded]), sequence,
                   [(sequence.points, "Y"), (sequence.centroids, "C")])


def family_pairs(corruption: str, d: int, k: int, n: int, seeds, kinds=SAMPLERS, base=None):
    """``[(pair, (kind, seed))]`` for each seed, the samplers taken in turn; problems the corruption cannot apply
    to are left out (a ``ValueError`` of :func:`~analysis.patching.pairs.make_pair`)."""
    from analysis.patching.pairs import make_pair

    out = []
    for i, seed in enumerate(seeds):
        kind = kinds[i % len(kinds)]
        X, C0 = family_problem(d, k, n, seed, kind, base)
        try:
            out.append((make_pair(corruption, X, C0), (kind, int(seed))))
        except ValueError:
            continue
    return out


def readout_mask(reads, layout, shape) -> np.ndarray:
    """``(P, D)``: the coordinates the readout reads."""
    mask = np.zeros(shape, dtype=bool)
    for positions, name in reads:
        mask[positions, layout[name]] = True
    return mask


@dataclass
class InputAbstraction:
    """The abstract input of a family, and which coordinates may differ between a pair's two runs."""

    val: Val
    pair_taint: np.ndarray

    def covers(self, inputs: np.ndarray) -> bool:
        """Whether every input ``(B, P, D)`` agrees with the constants and lies in the intervals."""
        x = np.asarray(inputs, dtype=np.float64)
        v = self.val
        return bool(((x >= v.lo) & (x <= v.hi)).all() and (x[:, v.const] == v.lo[v.const]).all())


def input_abstraction(clean: np.ndarray, corrupted: np.ndarray, layout) -> InputAbstraction:
    """From encoded samples ``(B, P, D)`` of both runs: constants where every sample agrees, ``[-1, 1]`` elsewhere;
    a subspace differs within a pair wherever it holds data if it differs in some sampled pair."""
    every = np.concatenate([clean, corrupted]).astype(np.float64)
    first = every[0]
    const = (every == first).all(axis=0)
    data = every[:, ~const]
    if data.size and not (np.abs(data) <= 1.0).all():
        raise ValueError(f"an encoded input holds data outside [-1, 1] (largest {np.abs(data).max():.3g}): the"
                         " abstraction assumes the encoder's unit ball")
    lo, hi = np.where(const, first, -1.0), np.where(const, first, 1.0)
    val = Val(lo, hi, const, const & (first == 0))
    differs = (clean != corrupted).any(axis=0)
    taint = np.zeros(const.shape, dtype=bool)
    for name in layout.names:
        if differs[:, layout[name]].any():
            taint[:, layout[name]] = ~const[:, layout[name]]
    return InputAbstraction(val, taint)
