"""The recurrent trainable k-means transformer: one update block and one assign block, tied across steps.

Parameters are exactly the weights of a two-layer ``HookedTransformer`` in the trainable layout
(:func:`circuits.training.construction.trainable_layout`):

* each head's ``W_Q, W_K, W_V`` (``d_model x d_head``) and ``W_O`` (``d_head x d_model``), dense and trainable over
  the whole residual stream — except that no head writes into the constant subspaces (``X``, ``ID``, ``ONE`` and the
  token-type flags: inputs, re-embedded every step, which the structural channel reads with a gain of 1e4, so a
  write of 1e-3 into ``IS_POINT`` would move scores by 10) — plus the fixed structural channel (point x point pairs
  masked, never trained);
* each gated MLP's units, trainable on the construction's wiring: unit ``u`` keeps the residual dimensions its
  gate and linear input read and the one it writes, with free coefficients (the sparsity pattern is part of the
  architecture, like the head count). Biases are zero and not trained.

A *general* model (``ModelConfig.general``) reads ``d`` and ``k`` as a capacity: it runs any ``d' <= d`` (points in
the first ``d'`` coordinates, the rest 0) and any ``k' <= k`` (``k'`` centroid tokens with the first ``k'``
identities); the sequence has ``1 + n + k'`` tokens and nothing else changes (:func:`circuits.training.encoding.encode_for`).

Step 0 is the assign block alone (the input already holds the initial centroids, see
:func:`circuits.training.construction.prepare_input`); every later step applies the pair ``(U, A)``. After step
``t`` the residual's ``C`` holds the centroids after ``t`` iterations and ``Y`` the assignment to them. With
``reembed`` (the paper's choice, default on) the constant subspaces (``X``, ``ID``,
``ONE``, flags) are reset to their encoded values and the staging slots emptied between steps.

The forward pass used for training never builds the ``(n + k + 1)^2`` attention matrix: point queries attend
only the ``k + 1`` non-point keys (the structural channel makes every point key weigh exactly 0 for them), so
their scores are ``R_points @ (W_QK @ R_small^T)`` and their output ``pattern @ (R_small @ W_OV)``; the ``k + 1``
centroid and BOS queries attend every key. That is the ``HookedTransformer``'s computation in another order
(:meth:`RecurrentKMeans.hooked_transformer` builds the real model; tests compare the two). MLPs are evaluated on
their wiring (two gathers per unit) instead of as dense matrices.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from collections.abc import Callable

import numpy as np
import torch
from jaxtyping import Float
from torch import nn

from circuits.blocks import ASSIGN, UPDATE, unembed_matrix
from circuits.encoding import EncodedBatch
from circuits.layout import ResidualLayout
from circuits.training.construction import (
    CONSTANT_SUBSPACES, STAGING_SUBSPACES, InitSharpness, construction_blocks, structural_channel, trainable_layout,
)
from circuits.training.encoding import encode_for, sequence_of
from circuits.weights import BlockWeights, HeadWeights, MLPWeights

INITS = ("exact", "random")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
HEAD_MATRICES = ("W_Q", "W_K", "W_V", "W_O")
MLP_VECTORS = ("gate", "linear", "out")
#: At most this many residual dimensions feed a unit's gate or linear input in the construction's wiring.
MAX_FAN_IN = 2
#: Standard deviation of every weight of a random init (GPT-2's 0.02): small enough that twenty recurrent steps of a
#: random model stay near the identity map instead of overflowing.
RANDOM_INIT_STD = 0.02


@dataclass
class ModelConfig:
    """Everything needed to rebuild a model's architecture (not its weights)."""

    d: int
    k: int
    init: str = "exact"
    sharpness: dict[str, float] = field(default_factory=lambda: InitSharpness().to_dict())
    d_head: int | None = None
    reembed: bool = True
    seed: int = 0
    #: ``d`` and ``k`` are a capacity: the model runs any ``d' <= d`` (points in the first ``d'`` coordinates) and
    #: any ``k' <= k`` (``k'`` centroid tokens, identities the first ``k'`` of the ``ID`` subspace).
    general: bool = False

    def __post_init__(self) -> None:
        if self.d < 1 or self.k < 1:
            raise ValueError(f"d and k must be >= 1, got d={self.d}, k={self.k}")
        if self.init not in INITS:
            raise ValueError(f"unknown init {self.init!r}; choose one of {', '.join(INITS)}")
        InitSharpness(**self.sharpness)

    @property
    def init_sharpness(self) -> InitSharpness:
        return InitSharpness(**self.sharpness)

    def to_dict(self) -> dict:
        return asdict(self)


def _mlp_wiring(mlp: MLPWeights, probe: MLPWeights) -> dict[str, np.ndarray]:
    """Per unit, the rows its gate / linear input read and the row it writes (from a probe with no zero knobs)."""
    units = probe.d_mlp
    out: dict[str, np.ndarray] = {}
    for name, W_probe, W in (("gate", probe.W_gate, mlp.W_gate), ("linear", probe.W_in, mlp.W_in)):
        idx = np.zeros((MAX_FAN_IN, units), dtype=np.int64)
        val = np.zeros((MAX_FAN_IN, units))
        for u in range(units):
            rows = np.flatnonzero(W_probe[:, u])
            if len(rows) > MAX_FAN_IN or len(rows) == 0:
                raise ValueError(f"MLP unit {u} reads {len(rows)} dimensions; the wiring allows 1..{MAX_FAN_IN}")
            idx[: len(rows), u] = rows
            idx[len(rows):, u] = rows[0]
            val[: len(rows), u] = W[rows, u]
        out[f"{name}_idx"], out[name] = idx, val
    out_idx = np.zeros(units, dtype=np.int64)
    for u in range(units):
        cols = np.flatnonzero(probe.W_out[u])
        if len(cols) != 1:
            raise ValueError(f"MLP unit {u} writes {len(cols)} dimensions; the wiring allows exactly 1")
        out_idx[u] = cols[0]
    out["out_idx"], out["out"] = out_idx, mlp.W_out[np.arange(units), out_idx]
    return out


def _within(value: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """``value``, an initial weight, where ``dtype`` holds every entry; else :class:`~circuits.build.WeightRangeError`
    (before the preconditioning divides inf by inf into NaN, with a RuntimeWarning, and training starts from it)."""
    from circuits.build import WeightRangeError

    largest = float(torch.finfo(dtype).max)
    if not (np.isfinite(value).all() and (value.size == 0 or float(np.abs(value).max()) <= largest)):
        peak = float(np.abs(value).max())
        size = f"of magnitude {peak:.3g}" if np.isfinite(peak) else "beyond float64's range"
        raise WeightRangeError(f"an initial weight {size} overflows {str(dtype).replace('torch.', '')} (largest"
                               f" {largest:.3g}): lower beta, growth or beta_update")
    return value


class RecurrentKMeans(nn.Module):
    """Two tied blocks applied recurrently; see the module docstring."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.config = config
        self.layout: ResidualLayout = trainable_layout(config.d, config.k)
        sharp = config.init_sharpness
        blocks = construction_blocks(self.layout, sharp)
        # Wiring comes from a probe whose knobs are all non-zero, so that a zero coefficient (growth = 0) still
        # leaves its unit wired and trainable.
        probe = construction_blocks(self.layout, InitSharpness(growth=2.0, tie_break=1e-3))
        channels = max(b.head.d_head for b in blocks)
        self.d_head = config.d_head if config.d_head is not None else channels
        if self.d_head < 1:
            raise ValueError(f"d_head must be >= 1, got {self.d_head}")
        gen = torch.Generator().manual_seed(config.seed)
        D = self.layout.d_model
        for block, probe_block in zip(blocks, probe):
            kind = block.kind
            if config.init == "exact":
                if self.d_head < channels:
                    raise ValueError(f"the construction needs d_head >= {channels}, got {self.d_head}")
                head = block.head.padded(self.d_head)
                init = {name: getattr(head, name) for name in HEAD_MATRICES}
            else:
                init = {
                    name: RANDOM_INIT_STD * torch.randn(shape, generator=gen, dtype=torch.float64).numpy()
                    for name, shape in (("W_Q", (D, self.d_head)), ("W_K", (D, self.d_head)),
                                        ("W_V", (D, self.d_head)), ("W_O", (self.d_head, D)))
                }
            wiring = _mlp_wiring(block.mlp, probe_block.mlp)
            for name in MLP_VECTORS:
                if config.init == "random":
                    shape = wiring[name].shape
                    wiring[name] = RANDOM_INIT_STD * torch.randn(shape, generator=gen, dtype=torch.float64).numpy()
                init[f"mlp_{name}"] = wiring[name]
                if name != "out":
                    # Padded fan-in slots repeat the first row; a mask keeps their coefficient at 0.
                    self.register_buffer(f"{kind}_mlp_{name}_active",
                                         torch.as_tensor(_active(wiring[f"{name}_idx"], probe_block.mlp, name)))
            for name in ("gate_idx", "linear_idx", "out_idx"):
                self.register_buffer(f"{kind}_mlp_{name}", torch.as_tensor(wiring[name]))
            for name, value in init.items():
                value = _within(np.asarray(value, dtype=np.float64), dtype)
                if name.startswith("mlp_") and name != "mlp_out":
                    value = value * _active(wiring[f"{name[4:]}_idx"], probe_block.mlp, name[4:])
                # Preconditioning: the parameter is W / scale, so Adam moves every weight by about lr * scale per
                # step: a stiffness of 50 moves as fast, relatively, as a coefficient of 1.
                scale = np.maximum(np.abs(value), 1.0) if config.init == "exact" else np.ones_like(value)
                self.register_parameter(f"{kind}_{name}", nn.Parameter(torch.as_tensor(value / scale, dtype=dtype)))
                self.register_buffer(f"{kind}_{name}_scale", torch.as_tensor(scale, dtype=dtype))
        q, k = (_within(np.asarray(v, dtype=np.float64), dtype) for v in structural_channel(self.layout, sharp.beta))
        self.register_buffer("structural_q", torch.as_tensor(q, dtype=dtype))
        self.register_buffer("structural_k", torch.as_tensor(k, dtype=dtype))
        const = torch.as_tensor(self.layout.mask(CONSTANT_SUBSPACES), dtype=dtype)
        staging = torch.as_tensor(self.layout.mask(STAGING_SUBSPACES), dtype=dtype)
        self.register_buffer("reembed_const", const)
        self.register_buffer("write_mask", 1.0 - const)
        self.register_buffer("reembed_keep", 1.0 - const - staging)
        self.to(dtype)

    # ----------------------------------------------------------------------------------------------- weights
    @property
    def dtype(self) -> torch.dtype:
        return self.reembed_const.dtype

    def weight(self, kind: str, name: str) -> torch.Tensor:
        """The actual weight ``name`` of block ``kind`` (parameter times its preconditioning scale)."""
        return getattr(self, f"{kind}_{name}") * getattr(self, f"{kind}_{name}_scale")

    def head_weights(self, kind: str) -> dict[str, torch.Tensor]:
        """``W_Q, W_K, W_V, W_O`` as the model uses them (``W_O`` never writes the constant subspaces)."""
        w = {name: self.weight(kind, name) for name in HEAD_MATRICES}
        w["W_O"] = w["W_O"] * self.write_mask
        return w

    def circuits(self, kind: str) -> tuple[Float[torch.Tensor, "d_model d_model"], Float[torch.Tensor, "d_model d_model"]]:
        """``W_QK = W_Q W_K^T`` (learned part, without the structural channel) and ``W_OV = W_V W_O``."""
        w = self.head_weights(kind)
        return w["W_Q"] @ w["W_K"].T, w["W_V"] @ w["W_O"]

    def knobs(self) -> dict[str, float]:
        """The construction's knobs read back from the weights in the named basis (see the construction)."""
        L = self.layout
        with torch.no_grad():
            qk_a, _ = self.circuits(ASSIGN)
            qk_u, ov_u = self.circuits(UPDATE)

            def block(W, q: str, k: str) -> torch.Tensor:
                return W[L[q], L[k]]

            xc = block(qk_a, "XB", "C")
            ic = block(qk_u, "ID", "Y")
            ii = block(qk_u, "ID", "ID")
            off = lambda M: (M - torch.diag(torch.diagonal(M))).norm() / torch.diagonal(M).norm().clamp_min(1e-30)  # noqa: E731
            out_idx = getattr(self, f"{UPDATE}_mlp_out_idx")
            lin_idx = getattr(self, f"{UPDATE}_mlp_linear_idx")[0]
            beta_dim = L.index("BETA")
            coeff = self.weight(UPDATE, "mlp_out") * self.weight(UPDATE, "mlp_linear")[0]
            growth = coeff[(out_idx == beta_dim) & (lin_idx == beta_dim)].sum() + 1.0
            return {
                "assign_stiffness": float(torch.diagonal(xc).mean() / 2),
                "assign_norm_weight": float(-qk_a[L.index("BETA"), L.index("N")]),
                "assign_offdiag": float(off(xc)),
                "update_member_score": float(torch.diagonal(ic).mean()),
                "update_member_offdiag": float(off(ic)),
                "update_self_score": float(torch.diagonal(ii).mean()),
                "update_distance_score": float(torch.diagonal(block(qk_u, "C", "X")).mean()),
                "update_value_X": float(torch.diagonal(ov_u[L["X"], L["C_stage"]]).mean()),
                "update_value_C": float(torch.diagonal(ov_u[L["C"], L["C_stage"]]).mean()),
                "schedule_growth": float(growth),
            }

    # ----------------------------------------------------------------------------------------------- forward
    def head(self, resid: Float[torch.Tensor, "batch pos d_model"], kind: str, n: int,
             patterns: dict | None = None) -> Float[torch.Tensor, "batch pos d_model"]:
        """The head's output in the ``HookedTransformer``'s arithmetic, skipping the masked point x point block."""
        W_QK, W_OV = self.circuits(kind)
        seq = sequence_of(resid, n)
        small = resid[:, seq.small]  # BOS and centroids: [batch, k+1, d_model]
        points = resid[:, seq.points]
        # The structural channel is one more rank-1 term of the score; it is added wherever scores are computed
        # (trained weights may write a little into the dimensions it reads, on any token).
        sq, sk = self.structural_q, self.structural_k
        small_keys = small @ W_QK.T  # score(query r, key s) = r . (W_QK s)
        point_scores = points @ small_keys.transpose(1, 2) + (points @ sq)[..., None] * (small @ sk)[:, None, :]
        point_pattern = torch.softmax(point_scores, dim=-1)  # [batch, n, k+1]
        point_out = point_pattern @ (small @ W_OV)
        small_queries = small @ W_QK
        small_scores = small_queries @ resid.transpose(1, 2) + (small @ sq)[..., None] * (resid @ sk)[:, None, :]
        small_pattern = torch.softmax(small_scores, dim=-1)  # [batch, k+1, pos]
        small_out = (small_pattern @ resid) @ W_OV
        if patterns is not None:
            patterns[kind] = (point_pattern, small_pattern)
        out = resid.new_zeros(resid.shape[:2] + small_out.shape[2:])
        positions = lambda idx: torch.as_tensor(idx, device=resid.device)  # noqa: E731
        return out.index_copy(1, positions(seq.small), small_out).index_copy(
            1, positions(range(seq.n_tokens)[seq.points]), point_out)

    def mlp(self, resid: Float[torch.Tensor, "batch pos d_model"], kind: str) -> Float[torch.Tensor, "batch pos d_model"]:
        def read(name: str) -> torch.Tensor:
            idx = getattr(self, f"{kind}_mlp_{name}_idx")
            coeff = self.weight(kind, f"mlp_{name}") * getattr(self, f"{kind}_mlp_{name}_active")
            return sum(resid[..., idx[i]] * coeff[i] for i in range(MAX_FAN_IN))

        act = torch.relu(read("gate")) * read("linear")  # [batch, pos, units]
        out = torch.zeros_like(resid)
        return out.index_add(-1, getattr(self, f"{kind}_mlp_out_idx"), act * self.weight(kind, "mlp_out"))

    def block(self, resid, kind: str, n: int, patterns: dict | None = None):
        resid = resid + self.head(resid, kind, n, patterns)
        return resid + self.mlp(resid, kind)

    def step(self, resid, n: int, patterns: dict | None = None, first: bool = False):
        """Step 0 (``first``): the assign block alone; later steps: the tied pair ``(U, A)``."""
        if not first:
            resid = self.block(resid, UPDATE, n, patterns)
        return self.block(resid, ASSIGN, n, patterns)

    def reembed(self, resid, encoded_resid):
        if not self.config.reembed:
            return resid
        return resid * self.reembed_keep + encoded_resid * self.reembed_const

    def run(self, encoded_resid: Float[torch.Tensor, "batch pos d_model"], steps: int, n: int,
            keep: bool = False, observe: Callable[[int, torch.Tensor], None] | None = None) -> list[torch.Tensor]:
        """Residuals after steps ``0..steps`` (``keep``) or only after step ``steps`` (a one-element list);
        ``observe(t, resid)`` sees every step's residual without keeping it."""
        resid, out = encoded_resid, []
        for t in range(steps + 1):
            if t:
                resid = self.reembed(resid, encoded_resid)
            resid = self.step(resid, n, first=t == 0)
            if observe is not None:
                observe(t, resid)
            if keep or t == steps:
                out.append(resid)
        return out

    def centroids_after(self, encoded_resid, steps: int, n: int) -> Float[torch.Tensor, "batch k d"]:
        """Unit-scaled centroids (``C`` at the centroid tokens) after ``steps`` full steps — what evaluation and the
        exported ``HookedTransformer`` read, so the loss sees every write into ``C``, the last assign block's too."""
        resid = self.run(encoded_resid, steps, n)[-1]
        return resid[:, sequence_of(resid, n).centroids, self.layout["C"]]

    def encode(self, X: np.ndarray, C0: np.ndarray) -> EncodedBatch:
        """Problems in, model input out (the exact circuit's encoding, prepared by ``prepare_input``); a general
        model takes any ``d <= layout.d`` and ``k <= layout.k``."""
        d, k = np.shape(X)[-1], np.shape(C0)[-2]
        if not self.config.general and (d != self.layout.d or k != self.layout.k):
            raise ValueError(f"this model is for d={self.layout.d}, k={self.layout.k}; got d={d}, k={k}")
        return encode_for(self.layout, X, C0, self.dtype, device=self.reembed_const.device)

    # ----------------------------------------------------------------------------------------------- export
    def to_blocks(self) -> list[BlockWeights]:
        """The weights as numpy blocks in the trainable layout, the structural channel as the head's last column."""
        q_struct = self.structural_q.detach().cpu().double().numpy()
        k_struct = self.structural_k.detach().cpu().double().numpy()
        blocks = []
        for kind in (UPDATE, ASSIGN):
            w = {name: t.detach().cpu().double().numpy() for name, t in self.head_weights(kind).items()}
            head = HeadWeights(
                np.concatenate([w["W_Q"], q_struct[:, None]], axis=1),
                np.concatenate([w["W_K"], k_struct[:, None]], axis=1),
                np.pad(w["W_V"], ((0, 0), (0, 1))),
                np.pad(w["W_O"], ((0, 1), (0, 0))),
            )
            blocks.append(BlockWeights(kind, head, self.dense_mlp(kind), notes={}))
        return blocks

    def dense_mlp(self, kind: str) -> MLPWeights:
        D = self.layout.d_model
        mats = {}
        for name in ("gate", "linear"):
            idx = getattr(self, f"{kind}_mlp_{name}_idx").cpu().numpy()
            coeff = (self.weight(kind, f"mlp_{name}") * getattr(self, f"{kind}_mlp_{name}_active")).detach().cpu().double().numpy()
            W = np.zeros((D, idx.shape[1]))
            for i in range(MAX_FAN_IN):
                np.add.at(W, (idx[i], np.arange(idx.shape[1])), coeff[i])
            mats[name] = W
        out_idx = getattr(self, f"{kind}_mlp_out_idx").cpu().numpy()
        W_out = np.zeros((len(out_idx), D))
        W_out[np.arange(len(out_idx)), out_idx] = self.weight(kind, "mlp_out").detach().cpu().double().numpy()
        return MLPWeights(mats["gate"], mats["linear"], W_out)

    def hooked_transformer(self, dtype: torch.dtype | None = None):
        """A real two-layer ``HookedTransformer`` ``[update, assign]`` holding these weights."""
        from circuits.build import build_model

        return build_model(self.to_blocks(), unembed_matrix(self.layout), self.layout, dtype=dtype or self.dtype)


def _active(idx: np.ndarray, probe: MLPWeights, name: str) -> np.ndarray:
    """1 for the fan-in slots a unit really uses, 0 for padding slots (which repeat the first row)."""
    W = probe.W_gate if name == "gate" else probe.W_in
    counts = (W != 0).sum(axis=0)
    return (np.arange(idx.shape[0])[:, None] < counts[None, :]).astype(np.float64)
