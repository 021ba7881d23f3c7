"""The model's actual weights, read from the ``HookedTransformer`` state dict, as exact rational circuits.

Nothing here looks at :mod:`circuits.blocks`: the prover reads what TransformerLens will compute with (the loaded
state dict, float64 or float32 values converted to ``Fraction`` without rounding) and forms, exactly,

* the QK circuit of each head as a bilinear form on the residual stream *augmented by a constant 1* (the
  ``bias`` coordinate), so that ``b_Q`` and ``b_K`` are checked like every other entry:
  ``score(a, b) = [a, 1] (W_Q; b_Q) (W_K; b_K)^T [b, 1]^T``;
* the OV circuit the same way, ``out = [resid, 1] (W_V; b_V) W_O`` per attended key, plus ``b_O``;
* each MLP as its units ``W_out[u] * (relu(x . W_gate[:, u]) * (x . W_in[:, u]) + b_in[u])`` plus ``b_out``
  (TransformerLens' gated MLP has no gate bias; ``b_in`` is added after the product);
* the unembedding ``x W_U + b_U``.

Products are formed only over non-zero entries, so a sparse construction costs far less than ``d_model^2 d_head``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from jaxtyping import Float

from analysis.proof.algebra import Lin, exact
from circuits import hook_names
from circuits.layout import ResidualLayout
from circuits.weights import HeadWeights, MLPWeights

#: Name of the augmented constant coordinate (biases live there).
BIAS = "bias"


@dataclass
class HeadParams(HeadWeights):
    """A head as TransformerLens computes with it: the weights and their biases."""

    b_Q: Float[np.ndarray, " d_head"]
    b_K: Float[np.ndarray, " d_head"]
    b_V: Float[np.ndarray, " d_head"]
    b_O: Float[np.ndarray, " d_model"]
    #: Attention-sink logit (``use_attention_sinks``): a virtual key with value 0; ``None`` without sinks.
    sinks: float | None = None


@dataclass
class MLPParams(MLPWeights):
    """A gated MLP with its biases (``b_in`` after the gate's product, as in TransformerLens)."""

    b_in: Float[np.ndarray, " d_mlp"]
    b_out: Float[np.ndarray, " d_model"]


@dataclass
class LayerParams:
    layer: int
    head: HeadParams
    mlp: MLPParams

    def fingerprint(self) -> str:
        """Identical fingerprints mean bit-identical parameters, so one proof covers both layers."""
        h = hashlib.sha256()
        for part in (self.head, self.mlp):
            for name, value in part.__dict__.items():
                h.update(name.encode())
                h.update(b"none" if value is None else np.ascontiguousarray(value, dtype=np.float64).tobytes())
        return h.hexdigest()


@dataclass
class ModelParams:
    layers: list[LayerParams]
    W_U: Float[np.ndarray, "d_model d_vocab_out"]
    b_U: Float[np.ndarray, " d_vocab_out"]
    n_heads: int


def read_params(model, head: int = 0) -> ModelParams:
    """Every parameter the forward pass uses, as float64 numpy (exact: float32 widens without rounding)."""
    state = model.state_dict()

    def get(key: str) -> np.ndarray:
        return state[key].detach().cpu().double().numpy().copy()

    layers = []
    for layer in range(model.cfg.n_layers):
        p = lambda comp, name: get(hook_names.param(layer, comp, name))  # noqa: E731
        hp = HeadParams(
            W_Q=p("attn", "W_Q")[head], b_Q=p("attn", "b_Q")[head], W_K=p("attn", "W_K")[head], b_K=p("attn", "b_K")[head],
            W_V=p("attn", "W_V")[head], b_V=p("attn", "b_V")[head], W_O=p("attn", "W_O")[head], b_O=p("attn", "b_O"),
            sinks=float(p("attn", "sinks")[head]) if hook_names.param(layer, "attn", "sinks") in state else None,
        )
        mp = MLPParams(W_gate=p("mlp", "W_gate"), W_in=p("mlp", "W_in"), b_in=p("mlp", "b_in"), W_out=p("mlp", "W_out"),
                       b_out=p("mlp", "b_out"))
        layers.append(LayerParams(layer, hp, mp))
    return ModelParams(layers, get(hook_names.UNEMBED_W), get(hook_names.UNEMBED_B), int(model.cfg.n_heads))


# ---------------------------------------------------------------------------------------------------------------
# Exact sparse matrices over named coordinates.

#: Sparse exact matrix: (row index, column index) -> non-zero Fraction.
Sparse = dict[tuple[int, int], Fraction]


def sparse_product(A: np.ndarray, B: np.ndarray) -> Sparse:
    """Exact ``A @ B.T`` for ``A`` (m, h) and ``B`` (n, h), summed over the shared (head) axis, non-zeros only."""
    out: dict[tuple[int, int], Fraction] = {}
    cache: dict[float, Fraction] = {}

    def fr(x: float) -> Fraction:
        f = cache.get(x)
        if f is None:
            f = cache[x] = exact(x)
        return f

    for c in range(A.shape[1]):
        rows = np.flatnonzero(A[:, c])
        cols = np.flatnonzero(B[:, c])
        if not len(rows) or not len(cols):
            continue
        for i in rows:
            a = fr(float(A[i, c]))
            for j in cols:
                key = (int(i), int(j))
                out[key] = out.get(key, Fraction(0)) + a * fr(float(B[j, c]))
    return {key: v for key, v in out.items() if v != 0}


def qk_form(head: HeadParams) -> Sparse:
    """Augmented QK form: rows are query coordinates, columns key coordinates; index ``d_model`` is ``bias``."""
    Q = np.vstack([head.W_Q, head.b_Q[None]])
    K = np.vstack([head.W_K, head.b_K[None]])
    return sparse_product(Q, K)


def ov_form(head: HeadParams) -> tuple[Sparse, dict[int, Fraction]]:
    """Augmented OV map (row = key coordinate or ``bias``, column = output coordinate) and the constant ``b_O``."""
    V = np.vstack([head.W_V, head.b_V[None]])
    ov = sparse_product(V, head.W_O.T)
    b_O = {int(i): exact(float(head.b_O[i])) for i in np.flatnonzero(head.b_O)}
    return ov, b_O


def unembed_form(W_U: np.ndarray, b_U: np.ndarray) -> Sparse:
    """Augmented unembedding: row ``d_model`` is ``b_U``."""
    U = np.vstack([W_U, b_U[None]])
    return {(int(i), int(j)): exact(float(U[i, j])) for i, j in zip(*np.nonzero(U))}


def coordinate_label(layout: ResidualLayout, index: int) -> str:
    """``X[0]``, ``N``, ... or ``bias`` for the augmented coordinate."""
    if index == layout.d_model:
        return BIAS
    return layout.labels[index]


# ---------------------------------------------------------------------------------------------------------------
# MLP units as exact affine forms of a token's residual.


@dataclass(frozen=True)
class Unit:
    index: int
    gate: dict[int, Fraction]     # residual index -> coefficient
    linear: dict[int, Fraction]
    bias: Fraction                 # b_in[u], added after the product
    output: dict[int, Fraction]    # residual index -> W_out[u, index]


def mlp_units(mlp: MLPParams) -> list[Unit]:
    units = []
    for u in range(mlp.W_gate.shape[1]):
        col = lambda W: {int(i): exact(float(W[i, u])) for i in np.flatnonzero(W[:, u])}  # noqa: E731
        out = {int(i): exact(float(mlp.W_out[u, i])) for i in np.flatnonzero(mlp.W_out[u])}
        units.append(Unit(u, col(mlp.W_gate), col(mlp.W_in), exact(float(mlp.b_in[u])), out))
    return units


def affine(coeffs: dict[int, Fraction], token: dict[int, Lin]) -> Lin:
    """``coeffs . x`` for a token whose residual coordinates are the affine forms ``token`` (absent = 0)."""
    acc: dict[str, Fraction] = {}
    const = Fraction(0)
    for i, c in coeffs.items():
        form = token.get(i)
        if form is None:
            continue
        const += c * form.const
        for v, a in form.coeffs.items():
            acc[v] = acc.get(v, Fraction(0)) + c * a
    return Lin.of(acc, const)
