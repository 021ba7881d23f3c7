"""Clean/corrupted pairs for the two swap circuits (safeguarded swap, learned swap) and what their readout is.

The swap circuits (:class:`circuits.swap.build.SwapCircuit` and its subclass, the learned swap) encode a problem
with a unit scaling fitted to that problem alone. Two runs of a patching pair must share one scaling, or the
corrupted run's residual differs from the clean one everywhere (a different unit) and "the information one edge
carries" means nothing. :func:`encode_swap_pair` encodes both runs with the circuit's own encoder (token layout,
identities, flags, point indices) and then writes the data the encoder writes (``X`` on the points; ``C`` and
``N = |c|^2`` on every centroid group it fills) again in the pair's shared scaling
(:meth:`~analysis.patching.pairs.PatchingPair.shared_scale`). With the problem's own scaling this reproduces the
encoder exactly (unit test), so the two differ only in the unit.

The readout (:data:`SWAP_READOUT`): the answer of a swap step is the kept candidate's centroids, which the last
block writes to the ``current`` group's ``C``, and the kept candidate itself, the one-hot ``CHOICE`` that the
unembedding reads (the circuit's logits). The Lloyd circuit's ``Y`` on the points is no output here: a swap step
assigns the points to every candidate group on its way, and the assignment it ends with is not the kept
candidate's.
"""

from __future__ import annotations

import numpy as np
import torch

#: ``(positions, subspace)`` the discovery metric reads on a swap circuit's last residual stream: ``bos`` is the
#: BOS token, any other name a centroid group of :class:`circuits.swap.layout.SwapSequence`.
SWAP_READOUT: tuple[tuple[str, str], ...] = (("bos", "CHOICE"), ("current", "C"))


def is_swap(circuit) -> bool:
    """Whether ``circuit`` is one of the swap circuits (they stack one step's blocks and encode on their own)."""
    return hasattr(circuit, "stacked_blocks") and hasattr(circuit, "SPEC")


def readout_positions(sequence) -> list[tuple[object, str]]:
    """:data:`SWAP_READOUT` resolved on a swap sequence: ``[(int or slice, subspace), ...]``."""
    return [(sequence.bos if where == "bos" else sequence.group(where), name) for where, name in SWAP_READOUT]


def encode_with_scaling(circuit, X: np.ndarray, C0: np.ndarray, offset: np.ndarray, scale: float):
    """The circuit's residual input for ``(X, C0)`` in the unit ``(x - offset) / scale``, and its token layout."""
    resid, seq, _ = circuit.encode(X, C0)
    lay = circuit.layout
    ux, uc = (np.asarray(X, dtype=np.float64) - offset) / scale, (np.asarray(C0, dtype=np.float64) - offset) / scale
    resid = resid.clone()
    resid[0, seq.points, lay["X"]] = torch.as_tensor(ux, dtype=resid.dtype)
    for name, _, _ in circuit.SPEC.groups:
        pos = seq.group(name)
        # The encoder leaves the groups a step writes before it reads them (C and N zero there): keep them so.
        if resid[0, pos, lay["C"]].abs().max() > 0 or resid[0, pos, lay["N"]].abs().max() > 0:
            resid[0, pos, lay["C"]] = torch.as_tensor(uc, dtype=resid.dtype)
            resid[0, pos, lay["N"]] = torch.as_tensor((uc**2).sum(axis=1)[:, None], dtype=resid.dtype)
    return resid, seq


def encode_swap_pair(circuit, pair) -> tuple[torch.Tensor, torch.Tensor, object]:
    """``(clean, corrupted, sequence)``: both runs of ``pair`` in its shared scaling. A pair that adds a point
    token (``add-outlier``) has no clean run of the same length here: a ``ValueError``."""
    if pair.placeholder is not None:
        raise ValueError(f"{pair.kind} adds a point token; the swap circuits are patched on pairs of one length only")
    offset, scale = pair.shared_scale()
    clean, seq = encode_with_scaling(circuit, pair.X_clean, pair.C0_clean, offset, scale)
    corrupted, seq_c = encode_with_scaling(circuit, pair.X_corrupted, pair.C0_corrupted, offset, scale)
    if seq != seq_c:
        raise ValueError("the clean and corrupted runs of a pair must have one token layout")
    return clean, corrupted, seq


def stack_swap_pairs(circuit, pairs) -> tuple[torch.Tensor, torch.Tensor, object]:
    """:func:`analysis.discovery.family.encode_pairs` for a swap circuit."""
    encoded = [encode_swap_pair(circuit, p) for p in pairs]
    sequences = {e[2] for e in encoded}
    if len(sequences) != 1:
        raise ValueError("the pairs of one discovery run must have one sequence layout (the same n and k)")
    return torch.cat([e[0] for e in encoded]), torch.cat([e[1] for e in encoded]), sequences.pop()
