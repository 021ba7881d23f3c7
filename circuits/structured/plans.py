"""The linear maps of a block, planned once, and how they act on a feature-major residual stream.

The weight matrices of the constructed circuits are almost all zeros. A plan keeps each map restricted to the
output features it writes and the input features it reads (:class:`RestrictedMap`), per attention head
(:class:`AttentionPlan`) and gated MLP (:class:`MLPPlan`), and is kept on the module, made again whenever one of its
parameters changes (:func:`cached_plan`). The stream is feature-major (``d_model x pos``) throughout the structured
path: :func:`per_token` applies a per-token module (a norm) to it and :func:`add_rows` adds a map's output to the
rows it writes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from circuits.fingerprint import fingerprint


#: Positions a linear map or an MLP works on at once. A longer residual stream is streamed through them in chunks of
#: this many positions, so that their temporaries (the MLP's hidden units, the gathered input rows) take memory in
#: proportion to the chunk, not to n; a shorter one is one chunk, computed as before.
CHUNK = 1 << 15


def per_token(module, xT: Float[Tensor, "d_model pos"]) -> Float[Tensor, "d_model pos"]:
    """A per-token module (LayerNorm, RMSNorm) applied to a feature-major tensor; identity is free."""
    if isinstance(module, torch.nn.Identity):
        return xT
    return module(xT.T[None])[0].T


def add_rows(xT: Float[Tensor, "d_model pos"], rows: Int[Tensor, " c"] | slice, update: Float[Tensor, "c pos"]) -> None:
    """``xT[rows] += update`` in place; a slice of rows is a view, added to directly (no write-back copy)."""
    if isinstance(rows, slice):
        xT[rows].add_(update)
    else:
        xT[rows] += update


def _nonzero(t: Tensor) -> np.ndarray:
    """``t != 0`` as a numpy mask. Plans are built from these scans: numpy runs each in about a microsecond, torch in
    several (a derived circuit's fresh head is planned on its first run). NaN counts as nonzero, as in torch."""
    if t.device.type == "cpu" and t.dtype in (torch.float64, torch.float32, torch.float16):
        return t.numpy() != 0
    return (t != 0).cpu().numpy()


def _as_slice(index: np.ndarray) -> slice | None:
    """``index`` (increasing) as a slice when it is a contiguous run (a view instead of a gather), else ``None``."""
    if index.size and int(index[-1]) - int(index[0]) + 1 == index.size:
        return slice(int(index[0]), int(index[-1]) + 1)
    return None


def _index(index: np.ndarray, like: Tensor) -> Tensor:
    """``index`` as a long tensor on ``like``'s device (what ``torch.nonzero`` would have given)."""
    index = torch.from_numpy(index)
    return index if like.is_cpu else index.to(like.device)


@dataclass
class RestrictedMap:
    """A linear map ``x @ W + b`` acting on feature-major input, ``out^T = W^T x^T + b``, restricted to the output
    features where ``W`` or ``b`` is nonzero (``rows``): the dense map is exactly zero on the others, so the caller
    updates only these rows of the residual. The product reads only ``inputs``, the input features the map uses
    (a contiguous span when that is not much wider, so that the input is a view, not a copy).

    The constructed circuits' restricted matrices are still mostly zeros (an assign block's MLP: 60 nonzeros in a
    60 x 22 matrix; a query/key/value map: 49 in 33 x 38), so a sparse map (:data:`SPARSE_DENSITY`) is applied as
    its *terms*: each output row is the sum of its nonzero weights times their input rows, added in increasing
    input order (:class:`SparseTerms`). That skips the exactly-zero products of the dense form, which change no sum
    (inputs are finite); a row with one term is the dense product bit for bit, a row with several may differ from
    the BLAS kernel's (fused) summation in the last bit. torch's sparse (CSR) product is not used: it copies and
    fills its operands, which costs more than multiplying the zeros.
    """

    rows: Int[Tensor, " c"] | slice
    inputs: Int[Tensor, " m"] | slice
    W_T: Float[Tensor, "c m"]
    b: Float[Tensor, "c 1"] | None
    #: The nonzero terms of ``W_T`` when the map is sparse enough to be applied term by term, else ``None``.
    terms: "SparseTerms | None" = None

    @classmethod
    def of(cls, W: Float[Tensor, "d_in d_out"], b: Float[Tensor, " d_out"] | None = None,
           all_outputs: bool = False) -> "RestrictedMap":
        W = W.detach()
        W_nonzero = _nonzero(W)
        b_nonzero = np.zeros(W.shape[1], dtype=bool) if b is None else _nonzero(b.detach())
        rows = np.arange(W.shape[1]) if all_outputs else np.flatnonzero(W_nonzero.any(axis=0) | b_nonzero)
        rows_t = _index(rows, W)
        bias = b.detach()[rows_t][:, None] if bool(b_nonzero[rows].any()) else None
        read = np.flatnonzero(W_nonzero[:, rows].any(axis=1))
        if read.size == 0:
            read = np.zeros(1, dtype=np.int64)  # a map of biases only still needs a (zero) product's shape
        span = int(read[-1]) - int(read[0]) + 1
        # A gather copies the rows it reads; a span is a view but multiplies its zero columns: take the span when
        # it is at most half again as wide.
        inputs = slice(int(read[0]), int(read[-1]) + 1) if span <= 1.5 * read.size else _index(read, W)
        W_T = W[inputs][:, rows_t].T.contiguous()
        return cls(_as_slice(rows) or rows_t, inputs, W_T, bias, SparseTerms.of(W_T, inputs))

    def apply(self, xT: Float[Tensor, "d_in pos"]) -> Float[Tensor, "c pos"]:
        pos = xT.shape[1]
        if pos <= CHUNK:
            return self._apply(xT)
        # Streamed over the positions: the gathered input rows exist one chunk at a time.
        out = xT.new_empty(self.W_T.shape[0], pos)
        for start in range(0, pos, CHUNK):
            cols = slice(start, min(pos, start + CHUNK))
            self._apply(xT[:, cols], out[:, cols])
        return out

    def _apply(self, xT: Float[Tensor, "d_in pos"], out: Float[Tensor, "c pos"] | None = None) -> Float[Tensor, "c pos"]:
        """The map on ``xT``, written into ``out`` when given (a view of a larger result), else into a new tensor."""
        if self.terms is not None:
            out = self.terms.apply(xT, out)
        else:
            # index_select: the same rows as xT[inputs], without advanced indexing's dispatch (a few us a call).
            inputs = self.inputs
            read = xT[inputs] if isinstance(inputs, slice) else xT.index_select(0, inputs)
            out = self.W_T @ read if out is None else out.copy_(self.W_T @ read)
        if self.b is not None:
            out.add_(self.b)
        return out


#: A restricted map is applied term by term (:class:`SparseTerms`) when at most this share of its matrix is nonzero:
#: each term costs a gathered row, a scaled copy and an add, about three times a dense product's work per entry.
SPARSE_DENSITY = 0.25


@dataclass
class SparseTerms:
    """The nonzero entries of a restricted map's ``W_T``, in the order they are added: by output row, then by input.

    ``first`` terms open a row (written, not added: no zero-filled output first); ``rest`` terms are added into
    their rows in increasing input order by ``index_add_`` (sequential on the CPU), so the sums are deterministic.
    A row with no term (an output written only by the bias) is zero-filled.
    """

    first_sources: Int[Tensor, " a"]  # absolute input feature of each row's first term
    first_weights: Float[Tensor, "a 1"]
    first_rows: Int[Tensor, " a"] | slice  # the rows opened (a slice when they are every row)
    rest_sources: Int[Tensor, " r"]
    rest_weights: Float[Tensor, "r 1"]
    rest_rows: Int[Tensor, " r"]
    rows: int
    empty_rows: Int[Tensor, " e"] | None  # the rows with no term (zero-filled), if any
    ones: bool  # every first weight is exactly 1 (a copy, no multiplication)

    @classmethod
    def of(cls, W_T: Float[Tensor, "c m"], inputs: Int[Tensor, " m"] | slice) -> "SparseTerms | None":
        nonzero = _nonzero(W_T)
        if nonzero.sum() > SPARSE_DENSITY * nonzero.size or nonzero.size == 0:
            return None
        columns = (np.arange(inputs.start, inputs.stop) if isinstance(inputs, slice)
                   else inputs.cpu().numpy())
        rows, cols = np.nonzero(nonzero)  # row-major: by row, then by input (increasing, as ``inputs`` is)
        opens = np.ones(rows.size, dtype=bool)
        opens[1:] = rows[1:] != rows[:-1]
        values = W_T.detach()[torch.from_numpy(rows).to(W_T.device), torch.from_numpy(cols).to(W_T.device)][:, None]
        first = torch.from_numpy(np.flatnonzero(opens)).to(W_T.device)
        rest = torch.from_numpy(np.flatnonzero(~opens)).to(W_T.device)
        first_rows = rows[opens]
        return cls(_index(columns[cols[opens]], W_T), values[first].contiguous(),
                   _as_slice(first_rows) if first_rows.size == W_T.shape[0] else _index(first_rows, W_T),
                   _index(columns[cols[~opens]], W_T), values[rest].contiguous(), _index(rows[~opens], W_T),
                   int(W_T.shape[0]), _index(np.setdiff1d(np.arange(W_T.shape[0]), first_rows), W_T)
                   if first_rows.size < W_T.shape[0] else None, bool((values[first] == 1).all()))

    def apply(self, xT: Float[Tensor, "d_in pos"], out: Float[Tensor, "c pos"] | None = None) -> Float[Tensor, "c pos"]:
        first = xT.index_select(0, self.first_sources)
        if not self.ones:
            first.mul_(self.first_weights)
        if isinstance(self.first_rows, slice):  # every row opened, in order
            # A fresh output is the gathered first terms themselves, not a copy of them (1.3 s of a million-point
            # forward's 13 s of CPU).
            out = first if out is None else out.copy_(first)
        else:
            out = xT.new_empty(self.rows, xT.shape[1]) if out is None else out
            if self.empty_rows is not None:
                out.index_fill_(0, self.empty_rows, 0.0)
            out.index_copy_(0, self.first_rows, first)
        if self.rest_sources.numel():
            rest = xT.index_select(0, self.rest_sources).mul_(self.rest_weights)
            out.index_add_(0, self.rest_rows, rest)
        return out


@dataclass
class AttentionPlan:
    """A head's projections as restricted maps: the three side by side (``qkv``, one pass over the residual) and
    each alone (``q``, ``k``, ``v``: the chunked block of :mod:`circuits.structured.attention` reads them in different passes)."""

    qkv: RestrictedMap
    d_head: int
    out: RestrictedMap
    q: RestrictedMap
    k: RestrictedMap
    v: RestrictedMap

    @classmethod
    def of(cls, attn) -> "AttentionPlan":
        W = (attn.W_Q[0], attn.W_K[0], attn.W_V[0])
        b = (attn.b_Q[0], attn.b_K[0], attn.b_V[0])
        q, k, v = (RestrictedMap.of(W_, b_, all_outputs=True) for W_, b_ in zip(W, b))
        return cls(RestrictedMap.of(torch.cat(W, dim=1), torch.cat(b), all_outputs=True), attn.W_Q.shape[-1],
                   RestrictedMap.of(attn.W_O[0], attn.b_O), q, k, v)


@dataclass
class MLPPlan:
    """A gated MLP, ``out = (relu(x W_gate) * (x W_in) + b_in) W_out + b_out``, as restricted maps (gate and linear
    side by side: one pass over the residual), on the units that write something."""

    gate_linear: RestrictedMap
    d_mlp: int
    bias: Float[Tensor, "d_mlp 1"] | None  # None when b_in is zero
    out: RestrictedMap

    @classmethod
    def of(cls, mlp) -> "MLPPlan":
        # Only the units whose W_out row is nonzero: any other unit adds exactly 0 (its hidden value is finite), and
        # a block padded to the model's widest MLP has many of them.
        W_out = mlp.W_out.detach()
        units_np = np.flatnonzero(_nonzero(W_out).any(axis=1))
        units = _index(units_np, W_out)
        W = torch.cat([mlp.W_gate.detach()[:, units], mlp.W_in.detach()[:, units]], dim=1)
        b_in = mlp.b_in.detach()
        bias = b_in[units][:, None] if bool(_nonzero(b_in)[units_np].any()) else None
        return cls(RestrictedMap.of(W, all_outputs=True), int(units_np.size), bias,
                   RestrictedMap.of(W_out[units], mlp.b_out))

    def apply(self, xT: Float[Tensor, "d_model pos"]) -> Float[Tensor, "c pos"]:
        both = self.gate_linear.apply(xT)
        gate, linear = both[: self.d_mlp], both[self.d_mlp :]  # views (slicing: Tensor.split is Python)
        # relu(gate) * linear, in place in the fresh product (its leading rows: laid out as a new tensor would be).
        hidden = torch.relu_(gate).mul_(linear)
        return self.out.apply(hidden if self.bias is None else hidden + self.bias)


def cached_plan(module, plan_type):
    """The plan of ``module``, kept on the module with the bits of the parameters it was made from, and made again
    when one of them holds other bits, however it changed (:mod:`circuits.fingerprint`). A plan reads nothing but
    the parameters, so equal bits give the same plan. A module shared by several layers (tied layers, a derived
    circuit's iterations: :mod:`circuits.plain`) is compared once per forward. The comparison costs about 0.17 ms a
    block of the d = 8, k = 10 circuit (90 KB of parameters), against 9 ms to plan it."""
    bits = fingerprint(module.parameters())
    planned = module.__dict__.get("_structured_plan")
    if planned is None or not isinstance(planned[1], plan_type) or planned[0] != bits:
        planned = (bits, plan_type.of(module))
        module.__dict__["_structured_plan"] = planned
    return planned[1]
