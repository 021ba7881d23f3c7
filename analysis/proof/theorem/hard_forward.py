"""The circuit under hard attention, executed exactly: every block on rational residuals with hardmax heads.

Each head attends uniformly to the keys of maximal score (an attention sink, when the head has one, is one more
key with value 0); each MLP is TransformerLens' gated ReLU MLP. Weights are the state dict's float64 values as
exact Fractions, so the result is what the hard-attention theorem talks about, with no rounding at all.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from analysis.proof.exact import HeadParams, MLPParams, ModelParams

ZERO = Fraction(0)


def _sparse_cols(W: np.ndarray) -> list[list[tuple[int, Fraction]]]:
    return [[(int(i), Fraction(float(W[i, c]))) for i in np.flatnonzero(W[:, c])] for c in range(W.shape[1])]


def _fractions(b: np.ndarray) -> list[Fraction]:
    return [Fraction(float(v)) for v in b]


def _project(cols, bias: list[Fraction], r: list[Fraction]) -> list[Fraction]:
    return [sum((r[i] * w for i, w in col), ZERO) + b for col, b in zip(cols, bias)]


def hard_attention(h: HeadParams, resid: list[list[Fraction]]) -> list[list[Fraction]]:
    """``resid + head(resid)`` with every query attending uniformly to its keys of maximal score."""
    Qc, Kc, Vc = _sparse_cols(h.W_Q), _sparse_cols(h.W_K), _sparse_cols(h.W_V)
    Oc = _sparse_cols(h.W_O)  # per output coordinate o: the head dimensions writing it
    bq, bk, bv, bo = _fractions(h.b_Q), _fractions(h.b_K), _fractions(h.b_V), _fractions(h.b_O)
    sink = None if h.sinks is None else Fraction(h.sinks)
    q = [_project(Qc, bq, r) for r in resid]
    kk = [_project(Kc, bk, r) for r in resid]
    v = [_project(Vc, bv, r) for r in resid]
    new = []
    for a, qa in enumerate(q):
        s = [sum((x * y for x, y in zip(qa, kb) if x and y), ZERO) for kb in kk]
        top = max(s) if sink is None else max(max(s), sink)
        chosen = [b for b, sb in enumerate(s) if sb == top]
        # A sink (use_attention_sinks) is one more key with value 0: it counts in the average, adds nothing.
        share = len(chosen) + (1 if sink is not None and sink == top else 0)
        z = [sum((v[b][c] for b in chosen), ZERO) / share for c in range(len(bv))]
        out = [sum((z[c] * w for c, w in col), ZERO) + bo[o] for o, col in enumerate(Oc)]
        new.append([x + y for x, y in zip(resid[a], out)])
    return new


def gated_mlp(m: MLPParams, resid: list[list[Fraction]]) -> list[list[Fraction]]:
    """``resid + W_out (relu(resid W_gate) * (resid W_in) + b_in) + b_out``, exactly, unit by live unit."""
    Gc, Ic = _sparse_cols(m.W_gate), _sparse_cols(m.W_in)
    Wout = [[(int(o), Fraction(float(m.W_out[u, o]))) for o in np.flatnonzero(m.W_out[u])] for u in range(m.W_out.shape[0])]
    b_in, b_out = _fractions(m.b_in), _fractions(m.b_out)
    post = []
    for r in resid:
        acc = list(r)
        for o, b in enumerate(b_out):
            acc[o] += b
        for u in (u for u in range(len(Gc)) if Wout[u]):
            g = sum((r[i] * w for i, w in Gc[u]), ZERO)
            act = (max(g, ZERO) * sum((r[i] * w for i, w in Ic[u]), ZERO)) + b_in[u]
            if act:
                for o, w in Wout[u]:
                    acc[o] += act * w
        post.append(acc)
    return post


def hard_forward(params: ModelParams, resid: list[list[Fraction]]) -> list[list[list[Fraction]]]:
    """Run every block on ``resid`` (tokens x d_model, Fractions) with hardmax attention; return each resid_post."""
    states = []
    for lp in params.layers:
        resid = gated_mlp(lp.mlp, hard_attention(lp.head, resid))
        states.append(resid)
    return states
