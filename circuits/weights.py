"""Weight blocks written in the named residual basis, as plain numpy.

A head is assembled from *channels*: a QK channel is one head dimension whose query reads one vector of the
residual and whose key reads another, so the head's bilinear form is the sum of the channels' outer products;
an OV channel is one head dimension whose value reads a vector and whose output writes one. An MLP is a list of
gated units ``out * relu(gate . x) * (linear . x)``. Vectors are given as ``{(subspace, component): coefficient}``
and placed by the :class:`~circuits.layout.ResidualLayout`, so no weight is ever addressed by a bare index.

These are pure data: they can be inspected and tested without torch, and :mod:`circuits.build` turns a list of
them into a TransformerLens state dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping

import numpy as np
from jaxtyping import Float

from circuits.layout import ResidualLayout

#: A residual coordinate: (subspace name, component index).
Coord = tuple[str, int]
#: A sparse residual vector in the named basis.
Vec = Mapping[Coord, float]


def dense(layout: ResidualLayout, vec: Vec) -> Float[np.ndarray, " d_model"]:
    out = np.zeros(layout.d_model)
    for (name, i), coeff in vec.items():
        out[layout.index(name, i)] += coeff
    return out


class Sublayer:
    """What a head and an MLP share: an inner width (``d_head``, ``d_mlp``) between the input matrices that read
    the residual, ``(d_model, width)``, and the output matrix that writes it, ``(width, d_model)``. A subclass names
    them in ``MATRICES``, the output matrix last."""

    MATRICES: tuple[str, ...] = ()

    @property
    def width(self) -> int:
        """The inner width: rows of the output matrix (columns of every input matrix)."""
        return getattr(self, self.MATRICES[-1]).shape[0]

    def _widened(self, width: int) -> list[np.ndarray]:
        """The matrices with inner width ``width``, the extra units zero: a zero column of the input matrices
        computes a zero unit, which a zero row of the output matrix writes nowhere (nor into any attention score)."""
        if width < self.width:
            raise ValueError(f"cannot pad {type(self).__name__} of width {self.width} down to {width}")
        *inputs, output = (getattr(self, name) for name in self.MATRICES)
        return [_zero_padded(W, W.shape[0], width) for W in inputs] + [_zero_padded(output, width, output.shape[1])]


def _zero_padded(W: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """A copy of ``W`` in the top-left corner of a zero ``(rows, cols)`` array (``np.pad`` with zeros, without its
    per-call overhead: circuits are derived once per fit)."""
    out = np.zeros((rows, cols), dtype=W.dtype)
    out[: W.shape[0], : W.shape[1]] = W
    return out


@dataclass
class HeadWeights(Sublayer):
    """One attention head, right-multiplying as in TransformerLens: ``q = resid @ W_Q + b_Q`` etc."""

    W_Q: Float[np.ndarray, "d_model d_head"]
    W_K: Float[np.ndarray, "d_model d_head"]
    W_V: Float[np.ndarray, "d_model d_head"]
    W_O: Float[np.ndarray, "d_head d_model"]

    MATRICES = ("W_Q", "W_K", "W_V", "W_O")
    #: The inner width under TransformerLens's name.
    d_head = Sublayer.width

    @property
    def W_QK(self) -> Float[np.ndarray, "d_model d_model"]:
        """Bilinear form: score(query resid a, key resid b) = a @ W_QK @ b."""
        return self.W_Q @ self.W_K.T

    @property
    def W_OV(self) -> Float[np.ndarray, "d_model d_model"]:
        """What a key's residual writes into the query's residual: out = resid @ W_OV."""
        return self.W_V @ self.W_O

    def padded(self, d_head: int) -> "HeadWeights":
        """The same head with ``d_head`` columns (the extra ones zero: they add nothing to any score or output)."""
        return HeadWeights(*self._widened(d_head))


@dataclass
class MLPWeights(Sublayer):
    """A gated MLP: ``out = (relu(x @ W_gate) * (x @ W_in) + b_in) @ W_out``; biases are zero in our circuits."""

    W_gate: Float[np.ndarray, "d_model d_mlp"]
    W_in: Float[np.ndarray, "d_model d_mlp"]
    W_out: Float[np.ndarray, "d_mlp d_model"]

    MATRICES = ("W_gate", "W_in", "W_out")
    #: The inner width under TransformerLens's name.
    d_mlp = Sublayer.width

    def padded(self, d_mlp: int) -> "MLPWeights":
        """The same MLP with ``d_mlp`` units (the extra ones zero)."""
        return MLPWeights(*self._widened(d_mlp))


@dataclass
class BlockWeights:
    """One transformer block: its role in the algorithm, one head and one gated MLP.

    ``params`` holds the block's parameters beyond the head and the MLP that a configuration lever brings in,
    keyed ``"component.name"`` as in the TransformerLens state dict (``"attn.q_norm.w"`` and ``"attn.k_norm.w"``
    with ``use_qk_norm``, ``"attn.sinks"`` with ``use_attention_sinks``). A vector over ``d_head`` is padded with
    zeros like the head itself.
    """

    kind: str
    head: HeadWeights
    mlp: MLPWeights
    notes: dict[str, float] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)


class HeadBuilder:
    """Accumulates QK and OV channels of one head in the named basis."""

    def __init__(self, layout: ResidualLayout):
        self.layout = layout
        self._qk: list[tuple[np.ndarray, np.ndarray]] = []
        self._ov: list[tuple[np.ndarray, np.ndarray]] = []

    def qk(self, query: Vec, key: Vec) -> None:
        """Add ``(query . q_resid) * (key . k_resid)`` to every attention score."""
        self._qk.append((dense(self.layout, query), dense(self.layout, key)))

    def ov(self, value: Vec, output: Vec) -> None:
        """Each attended key contributes ``(value . k_resid) * output`` to the query's residual."""
        self._ov.append((dense(self.layout, value), dense(self.layout, output)))

    def build(self) -> HeadWeights:
        d_model = self.layout.d_model
        d_head = max(len(self._qk), len(self._ov), 1)
        W_Q, W_K, W_V = (np.zeros((d_model, d_head)) for _ in range(3))
        W_O = np.zeros((d_head, d_model))
        for c, (q, k) in enumerate(self._qk):
            W_Q[:, c], W_K[:, c] = q, k
        for c, (v, o) in enumerate(self._ov):
            W_V[:, c], W_O[c, :] = v, o
        return HeadWeights(W_Q, W_K, W_V, W_O)


class MLPBuilder:
    """Accumulates gated units ``output * relu(gate . x) * (linear . x)``."""

    def __init__(self, layout: ResidualLayout):
        self.layout = layout
        self._units: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def unit(self, gate: Vec, linear: Vec, output: Vec) -> None:
        self._units.append((dense(self.layout, gate), dense(self.layout, linear), dense(self.layout, output)))

    def build(self) -> MLPWeights:
        d_model = self.layout.d_model
        d_mlp = max(len(self._units), 1)
        W_gate, W_in = np.zeros((d_model, d_mlp)), np.zeros((d_model, d_mlp))
        W_out = np.zeros((d_mlp, d_model))
        for u, (g, lin, out) in enumerate(self._units):
            W_gate[:, u], W_in[:, u], W_out[u, :] = g, lin, out
        return MLPWeights(W_gate, W_in, W_out)
