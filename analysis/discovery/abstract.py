"""An abstract interpretation of a circuit's forward pass: what can differ, and where, over a whole family of inputs.

The ground truth of circuit discovery (:mod:`analysis.discovery.truth`) needs, for an edge ``u -> v.port``, a
proof that ablating it changes the readout on *no* input of a family. This module computes, from the model's own
state dict and configuration, two things at every residual coordinate of every token position:

* a :class:`Val`: an interval that holds the coordinate on every input of the family, and whether it is the same
  on every input (``const``) or exactly 0 on every input (``zero``); the input's intervals come from the encoder
  (constants where it writes constants, ``[-1, 1]`` where it writes data: every encoder here scales the problem
  into the unit ball);
* a *taint*: whether the coordinate may differ between two runs that the caller compares (the clean and the
  corrupted run of a pair; or a run with some edges ablated and the clean run).

Through a linear map a taint passes along the nonzero weights. Through attention it passes when a query's
scores may differ on keys it may attend to (then every coordinate its values may write), or when a value it may
attend to differs. *May attend to* is decided from the score intervals: in float64 ``exp`` is exactly 0 below
-745, and softmax subtracts the row's maximum, so a key whose largest score lies more than
:data:`UNDERFLOW` below the row's largest lower bound gets exactly zero weight (an attention sink is one more
key with value 0; the normalised-linear score hook weights ``relu(s)``; any other score hook may weight every
key). Through a gated ReLU MLP a unit whose gate is at most 0 on every input writes exactly its bias; units
with the same input weights and bias are one unit whose output row is the sum of theirs (a pair that writes
``+w`` and ``-w`` writes nothing). The residual stream adds.

Everything is an over-approximation: a coordinate called constant, zero or untainted is so on every input the
intervals hold; one called tainted may still not differ. Interval products and sums are widened by a relative
:data:`PAD` against float64 rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from jaxtyping import Bool, Float

#: A key whose score is below the row's best by more than this gets weight exactly 0 (float64 ``exp`` underflows
#: below -745.13; softmax subtracts the row's maximum first).
UNDERFLOW = 750.0
#: Relative widening of every computed interval (float64 rounding of the sums the model does).
PAD = 1e-9


@dataclass
class Val:
    """Intervals ``[lo, hi]`` over ``(positions, width)``, and which entries are family constants or exact zeros."""

    lo: Float[np.ndarray, "P W"]
    hi: Float[np.ndarray, "P W"]
    const: Bool[np.ndarray, "P W"]
    zero: Bool[np.ndarray, "P W"]

    @classmethod
    def exact(cls, x: np.ndarray) -> Val:
        x = np.asarray(x, dtype=np.float64)
        return cls(x.copy(), x.copy(), np.ones(x.shape, bool), x == 0)

    @classmethod
    def zeros(cls, shape) -> Val:
        return cls.exact(np.zeros(shape))

    def linear(self, W: np.ndarray, b: np.ndarray | None = None) -> Val:
        """``x @ W + b`` for every ``x`` in the intervals."""
        nz = W != 0
        c, r = (self.lo + self.hi) / 2, (self.hi - self.lo) / 2
        mid = c @ W
        rad = r @ np.abs(W) + PAD * (np.abs(c) @ np.abs(W))
        const = ~((~self.const).astype(np.float64) @ nz > 0)
        zero = ~((~self.zero).astype(np.float64) @ nz > 0)
        if b is not None:
            mid = mid + b
            rad = rad + PAD * np.abs(b)
            zero &= b == 0
        return Val(mid - rad, mid + rad, const, zero)

    def __add__(self, other: Val) -> Val:
        lo, hi = self.lo + other.lo, self.hi + other.hi
        pad = PAD * np.maximum(np.abs(lo), np.abs(hi))
        return Val(lo - pad, hi + pad, self.const & other.const, self.zero & other.zero)

    def __sub__(self, other: Val) -> Val:
        return self + Val(-other.hi, -other.lo, other.const, other.zero)

    def hull(self, other: Val) -> Val:
        """Either of the two (not a family constant unless both are the same constant)."""
        same = self.const & other.const & (self.lo == other.lo) & (self.hi == other.hi)
        return Val(np.minimum(self.lo, other.lo), np.maximum(self.hi, other.hi), same, self.zero & other.zero)

    def where(self, mask: np.ndarray, other: Val) -> Val:
        """``other`` where ``mask``, this elsewhere."""
        return Val(np.where(mask, other.lo, self.lo), np.where(mask, other.hi, self.hi),
                   np.where(mask, other.const, self.const), np.where(mask, other.zero, self.zero))


def _product(alo, ahi, blo, bhi):
    """Interval product, elementwise with broadcasting."""
    p = np.stack(np.broadcast_arrays(alo * blo, alo * bhi, ahi * blo, ahi * bhi))
    p = np.nan_to_num(p, nan=0.0)  # 0 * inf: an exact zero times anything is 0
    lo, hi = p.min(axis=0), p.max(axis=0)
    pad = PAD * np.maximum(np.abs(lo), np.abs(hi))
    return lo - pad, hi + pad


def _rms_normed(v: Val, w: np.ndarray, eps: float) -> Val:
    """RMSNorm over the last axis, times ``w``: ``v / sqrt(mean(v^2) + eps) * w``. Each entry is at most
    ``sqrt(width) |w|`` in size whatever ``v`` is; tighter where the norm's interval allows."""
    width = v.lo.shape[-1]
    sq_lo = np.where((v.lo <= 0) & (v.hi >= 0), 0.0, np.minimum(v.lo**2, v.hi**2))
    sq_hi = np.maximum(v.lo**2, v.hi**2)
    r_lo = np.sqrt(sq_lo.mean(axis=-1, keepdims=True) + eps) * (1 - PAD)
    r_hi = np.sqrt(sq_hi.mean(axis=-1, keepdims=True) + eps) * (1 + PAD)
    cands = np.stack([v.lo / r_lo, v.lo / r_hi, v.hi / r_lo, v.hi / r_hi])
    bound = np.sqrt(width) * (1 + PAD)
    lo, hi = np.maximum(cands.min(axis=0), -bound), np.minimum(cands.max(axis=0), bound)
    lo, hi = _product(lo, hi, w, w)
    const = np.broadcast_to(v.const.all(axis=-1, keepdims=True), v.const.shape) | (w == 0)
    return Val(lo, hi, const, v.zero | (w == 0))


@dataclass
class Head:
    """One attention head's weights (numpy float64), and how its pattern is made."""

    W_Q: np.ndarray
    b_Q: np.ndarray
    W_K: np.ndarray
    b_K: np.ndarray
    W_V: np.ndarray
    b_V: np.ndarray
    W_O: np.ndarray
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    sink: float | None = None
    #: ``None``: softmax; ``"linear"``: weights ``relu(s) / sum``; ``"other"``: a score hook we cannot read.
    hook: str | None = None


@dataclass
class Mlp:
    """A gated ReLU MLP, units with the same input weights and bias merged (output rows summed)."""

    W_gate: np.ndarray
    W_in: np.ndarray
    b_in: np.ndarray
    W_out: np.ndarray
    b_out: np.ndarray

    @classmethod
    def merged(cls, W_gate, W_in, b_in, W_out, b_out) -> Mlp:
        keys: dict[bytes, int] = {}
        rows: list[np.ndarray] = []
        cols: list[int] = []
        for u in range(W_gate.shape[1]):
            key = np.concatenate([W_gate[:, u], W_in[:, u], [b_in[u]]]).tobytes()
            if key in keys:
                rows[keys[key]] = rows[keys[key]] + W_out[u]
            else:
                keys[key] = len(rows)
                rows.append(W_out[u].copy())
                cols.append(u)
        return cls(W_gate[:, cols], W_in[:, cols], b_in[cols], np.stack(rows), b_out)


@dataclass
class Layer:
    heads: list[Head]
    b_O: np.ndarray
    mlp: Mlp


@dataclass
class AbstractModel:
    """The weights and configuration the interpretation reads, taken from a model's state dict."""

    layers: list[Layer]
    attn_scale: float
    causal: bool
    eps: float

    @property
    def n_layers(self) -> int:
        return len(self.layers)


def abstract_model(model, score_hooks: dict[int, object] | None = None) -> AbstractModel:
    """The :class:`AbstractModel` of a TransformerLens model (or the project's hooked circuit). ``score_hooks``:
    ``{layer: function}`` of the permanent score hooks the circuit declares; a layer whose ``hook_attn_scores``
    holds a hook not declared there is treated as an unreadable hook."""
    from circuits import hook_names
    from circuits.variants import attention

    cfg = model.cfg
    if cfg.normalization_type is not None or not cfg.gated_mlp or cfg.act_fn != "relu":
        raise ValueError("the abstract interpretation reads residual models without normalisation and with gated"
                         f" ReLU MLPs (got normalization {cfg.normalization_type}, act_fn {cfg.act_fn})")
    state = {k: v.detach().cpu().double().numpy() for k, v in model.state_dict().items()}
    score_hooks = score_hooks or {}
    layers = []
    for layer in range(cfg.n_layers):
        def p(component, name, default=None):
            return state.get(hook_names.param(layer, component, name), default)

        hooked = bool(model.blocks[layer].attn.hook_attn_scores._forward_hooks)
        declared = score_hooks.get(layer)
        kind = None if not hooked else "linear" if declared is attention.linear else "other"
        heads = []
        for h in range(cfg.n_heads):
            sinks = p("attn", "sinks")
            qn, kn = p("attn", "q_norm.w"), p("attn", "k_norm.w")
            heads.append(Head(p("attn", "W_Q")[h], p("attn", "b_Q")[h], p("attn", "W_K")[h], p("attn", "b_K")[h],
                              p("attn", "W_V")[h], p("attn", "b_V")[h], p("attn", "W_O")[h],
                              qn if getattr(cfg, "use_qk_norm", False) else None,
                              kn if getattr(cfg, "use_qk_norm", False) else None,
                              float(sinks[h]) if getattr(cfg, "use_attention_sinks", False) else None, kind))
        mlp = Mlp.merged(p("mlp", "W_gate"), p("mlp", "W_in"), p("mlp", "b_in"), p("mlp", "W_out"), p("mlp", "b_out"))
        layers.append(Layer(heads, p("attn", "b_O"), mlp))
    scale = float(cfg.attn_scale) if cfg.use_attn_scale else 1.0
    return AbstractModel(layers, scale, cfg.attention_dir == "causal", float(getattr(cfg, "eps", 1e-5)))


def _spread(taint: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Taint of ``x @ W`` from the taint of ``x``: along nonzero weights."""
    return (taint.astype(np.float64) @ (W != 0)) > 0


def _support(lo: np.ndarray, hi: np.ndarray, head: Head) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(keys, sink, empty)``: which keys (and the sink) may get nonzero weight from each query, and whether a row
    may weight nothing at all (the normalised-linear hook with no positive score writes 0)."""
    P = lo.shape[0]
    if head.hook == "other":
        return np.ones((P, P), bool), np.zeros(P, bool) if head.sink is None else np.ones(P, bool), np.ones(P, bool)
    if head.hook == "linear":
        keys = hi > 0
        return keys, np.zeros(P, bool), ~(lo > 0).any(axis=1)
    best = lo.max(axis=1)
    if head.sink is not None:
        best = np.maximum(best, head.sink)
    keys = hi >= best[:, None] - UNDERFLOW
    sink = np.zeros(P, bool) if head.sink is None else head.sink >= best - UNDERFLOW
    return keys, sink, np.zeros(P, bool)


def head_forward(model: AbstractModel, head: Head, xq: Val, xk: Val, xv: Val, tq, tk, tv) -> tuple[Val, np.ndarray]:
    """One head's output (before ``b_O``) and its taint, from the (possibly different) inputs of its three ports."""
    q, k, v = xq.linear(head.W_Q, head.b_Q), xk.linear(head.W_K, head.b_K), xv.linear(head.W_V, head.b_V)
    tqh, tkh, tvh = _spread(tq, head.W_Q), _spread(tk, head.W_K), _spread(tv, head.W_V)
    if head.q_norm is not None:
        q, k = _rms_normed(q, head.q_norm, model.eps), _rms_normed(k, head.k_norm, model.eps)
        tqh = np.broadcast_to(tqh.any(axis=1, keepdims=True), tqh.shape)
        tkh = np.broadcast_to(tkh.any(axis=1, keepdims=True), tkh.shape)
    plo, phi = _product(q.lo[:, None, :], q.hi[:, None, :], k.lo[None, :, :], k.hi[None, :, :])
    s_lo, s_hi = plo.sum(-1) / model.attn_scale, phi.sum(-1) / model.attn_scale
    s_lo, s_hi = s_lo - PAD * np.abs(s_lo), s_hi + PAD * np.abs(s_hi)
    s_const = ((q.const | q.zero)[:, None, :] & (k.const | k.zero)[None, :, :]
               | q.zero[:, None, :] | k.zero[None, :, :]).all(-1)
    P = q.lo.shape[0]
    if model.causal:
        later = np.triu(np.ones((P, P), bool), 1)
        s_lo, s_hi = np.where(later, -np.inf, s_lo), np.where(later, -np.inf, s_hi)
    keys, sink, empty = _support(s_lo, s_hi, head)
    z = v.linear(head.W_O)
    tz = _spread(tvh, head.W_O)
    # A score may differ where a tainted query channel meets a key channel that is not exactly 0, or back.
    s_taint = ((tqh[:, None, :] & ~k.zero[None, :, :]) | (tkh[None, :, :] & ~q.zero[:, None, :])).any(-1)
    row_taint = (s_taint & keys).any(axis=1)
    W = z.lo.shape[1]
    lo, hi = np.empty((P, W)), np.empty((P, W))
    const, zero, taint = np.empty((P, W), bool), np.empty((P, W), bool), np.empty((P, W), bool)
    for p in range(P):
        sup = keys[p]
        zl, zh, zc, zz = z.lo[sup], z.hi[sup], z.const[sup], z.zero[sup]
        with_zero = bool(sink[p] or empty[p])
        lo[p] = np.minimum(zl.min(axis=0, initial=np.inf), 0.0 if with_zero else np.inf)
        hi[p] = np.maximum(zh.max(axis=0, initial=-np.inf), 0.0 if with_zero else -np.inf)
        zero[p] = zz.all(axis=0)
        # A convex combination of one family constant is that constant, whatever the weights.
        same = zc.all(axis=0) & (zl == zl[:1]).all(axis=0) & (zh == zh[:1]).all(axis=0) if sup.any() else zero[p]
        if with_zero:
            same = same & zero[p]
        const[p] = (zc.all(axis=0) & s_const[p][sup].all()) | same | zero[p]
        taint[p] = (~(same | zero[p])) if row_taint[p] else tz[sup].any(axis=0)
    bad = ~np.isfinite(lo) | ~np.isfinite(hi)
    lo, hi = np.where(bad & zero, 0.0, lo), np.where(bad & zero, 0.0, hi)
    return Val(lo, hi, const, zero), taint


def mlp_forward(mlp: Mlp, x: Val, t: np.ndarray) -> tuple[Val, np.ndarray]:
    g, l = x.linear(mlp.W_gate), x.linear(mlp.W_in)
    dead = g.hi <= 0
    rlo, rhi = np.maximum(g.lo, 0.0), np.maximum(g.hi, 0.0)
    hlo, hhi = _product(rlo, rhi, l.lo, l.hi)
    h = Val(hlo + mlp.b_in, hhi + mlp.b_in, dead | (g.const & l.const), (dead | l.zero) & (mlp.b_in == 0))
    th = ~dead & (_spread(t, mlp.W_gate) | _spread(t, mlp.W_in))
    return h.linear(mlp.W_out, mlp.b_out), _spread(th, mlp.W_out)


#: A port of a destination: ``(layer, "q" | "k" | "v" | "mlp")``.
Port = tuple[int, str]


@dataclass
class Injection:
    """An ablation seen at a port: the port's input becomes ``resid - current(src) + ablated``, which may differ from
    the clean input where ``delta`` says; ``ablated`` holds the ablated source output, ``src`` names the source
    (``"in"`` or ``(layer, "attn" | "mlp")``)."""

    src: object
    delta: np.ndarray
    ablated: Val


@dataclass
class Trace:
    """The outputs of every source (``"in"``, ``(layer, "attn")``, ``(layer, "mlp")``) and the final residual
    stream, each a :class:`Val` with its taint."""

    outputs: dict[object, tuple[Val, np.ndarray]] = field(default_factory=dict)
    final: tuple[Val, np.ndarray] | None = None
    #: The residual stream entering each layer.
    resid_pre: list[tuple[Val, np.ndarray]] = field(default_factory=list)


def forward(model: AbstractModel, x: Val, taint: np.ndarray, injections: dict[Port, list[Injection]] | None = None,
            readout_injections: list[Injection] | None = None, start: int = 0, prefix: Trace | None = None) -> Trace:
    """Run the interpretation from the input (``x``, its ``taint``) to the last residual stream, with ablations
    injected at ports. An injected port reads the hull of its clean and its ablated input (so the result holds
    whether or not each ablation happens: any subset of the injected edges). ``start``, ``prefix``: begin at layer
    ``start`` from an earlier trace of the same input (nothing injected before ``start``)."""
    injections = injections or {}
    trace = Trace()
    trace.outputs["in"] = (x, taint)
    resid, rt = x, taint
    if start:
        trace.outputs = {key: value for key, value in prefix.outputs.items()
                         if key == "in" or key[0] < start}
        trace.resid_pre = list(prefix.resid_pre[:start])
        resid, rt = prefix.resid_pre[start]

    def port_input(items: list[Injection]):
        val, t = resid, rt
        for inj in items:
            cur, cur_t = trace.outputs[inj.src]
            # The input without the source: the other sources' outputs summed (tighter than resid - current, which
            # interval arithmetic cannot cancel), plus the ablated output.
            rest = [out for key, (out, _) in trace.outputs.items() if key != inj.src]
            swapped = inj.ablated
            for out in rest:
                swapped = swapped + out
            # The ablation replaces the source's current output: it moves the input where the ablated output
            # differs from the clean one, or the current one does.
            mask = inj.delta | cur_t
            val = val.where(mask, val.hull(swapped))
            t = t | inj.delta  # where the current output differs from the clean one, rt says so already
        return val, t

    for layer in range(start, model.n_layers):
        spec = model.layers[layer]
        trace.resid_pre.append((resid, rt))
        ports = {name: port_input(injections.get((layer, name), [])) for name in ("q", "k", "v")}
        out, ot = Val.zeros(resid.lo.shape), np.zeros(rt.shape, bool)
        for head in spec.heads:
            hv, ht = head_forward(model, head, *(ports[n][0] for n in "qkv"), *(ports[n][1] for n in "qkv"))
            out, ot = out + hv, ot | ht
        out = out + Val.exact(np.broadcast_to(spec.b_O, out.lo.shape))
        trace.outputs[(layer, "attn")] = (out, ot)
        resid, rt = resid + out, rt | ot
        mx, mt = port_input(injections.get((layer, "mlp"), []))
        mo, mot = mlp_forward(spec.mlp, mx, mt)
        trace.outputs[(layer, "mlp")] = (mo, mot)
        resid, rt = resid + mo, rt | mot
    trace.final = port_input(readout_injections or [])
    return trace
