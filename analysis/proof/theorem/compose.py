"""The hard-attention theorem, executed: the proven pieces compose into one Lloyd iteration per (U, A) pair.

Hard attention: every softmax is replaced by *hardmax*, the uniform distribution over the keys of maximal score
(the limit of the softmax as the scores' scale grows). Coordinates are the encoder's unit-scaled ones: every point
and every initial centroid lies in the closed unit ball.

Theorem. Let the obligations of :mod:`analysis.proof.obligations` hold. Write ``t_j`` for the tie-break the assign
head's key ``j`` pays (``tie_break * j`` rounded once to float64) and ``V_ij = |x_i - c_j|^2 + t_j``. Feed the
circuit the encoded problem (points ``x_i``, initial centroids ``c^0_j`` in ``C_stage``). If at every assignment each
point has a unique minimiser ``a(i) = argmin_j V_ij``, then under hard attention

* after layer ``2t`` (an update) ``C`` holds Lloyd's centroids ``c^t``, ``N = |c^t|^2`` and both staging slots are 0;
* after layer ``2t + 1`` (an assign) ``Y`` at point ``i`` is the one-hot of ``a^t(i) = argmin_j V_ij(c^t)``;
* the logits at point ``i`` are that one-hot, for the final centroids;

where ``c^{t+1}_j`` is the mean of the points with ``a^t(i) = j``, or ``c^t_j`` when there are none. With
``t_0 < t_1 < ... < t_{k-1}`` (a positive tie-break) an exact tie in distance goes to the lowest index; a point
whose distances differ by less than the tie-break's spread goes to the lower index as well (the price of the
rule, reported as a tie by the verifier). A point with two minimisers of ``V`` (distances differing by exactly
``t_j - t_l``) is split evenly by hardmax; the theorem excludes it, and the finite-sharpness certificate reports
its margin as 0.

Each step below is executed on the circuit's actual weights: scores and values are computed symbolically (sympy,
exact rationals from the state dict) for generic tokens of each type and compared with the claimed expressions;
conditions on the knobs are checked in exact arithmetic; the MLP steps apply the changes the MLP obligations proved
and check that the state lies in the domain they were proven on. Finally the whole circuit is run on small random
problems in exact rational arithmetic with hardmax attention and compared with Lloyd's algorithm in exact rational
arithmetic (evidence, marked CHECKED, not part of the proof;
:mod:`analysis.proof.theorem.examples`).

Variants with an obligation set run the same steps with their blocks' specs: damped updates move ``C`` a fraction
``eta`` of the way (``BlockSpec.step``; centroids may then leave the unit ball, which the masking step accounts
for), and trimmed assignments add an attention sink, a virtual key with value 0 that takes the points farther
than its threshold (outliers, ``Y = 0``, left out of every update).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from analysis.proof.theorem.examples import run_examples
from analysis.proof.exact import ModelParams
from analysis.proof.obligation import Obligation
from analysis.proof.obligations.circuit import SpecOfLayer
from analysis.proof.theorem.symbolic import check_eq, rational
from analysis.proof.theorem.assign import prove_assign_block
from analysis.proof.theorem.steps import Steps, TheoremContext
from analysis.proof.theorem.update import prove_update_block
from circuits.blocks import ASSIGN, UPDATE


def unembed_step(ctx: TheoremContext) -> None:
    """The logits at a point are its ``Y``."""
    import sympy as sp

    params, T, k = ctx.params, ctx.tokens, ctx.layout.k
    problems: list[str] = []
    U = {(i, j): Fraction(float(params.W_U[i, j])) for i, j in zip(*np.nonzero(params.W_U))}
    point = T.vector("point", X=list(T.x), Y=list(T.y))
    for j in range(min(k, params.W_U.shape[1])):
        logit = sp.expand(sum(rational(v) * point[i] for (i, jj), v in U.items() if jj == j)
                          + rational(Fraction(float(params.b_U[j]))))
        check_eq(logit, T.y[j], f"logit {j} at a point", problems)
    ctx.steps.add("theorem.unembed", "The logits at a point are its Y: after the last assign block, its assignment.",
                  problems, uses=("unembed.reads_y",))


def composition_step(ctx: TheoremContext, assign_layers: list[int]) -> None:
    """Induction over the schedule: the blocks compose into Lloyd's iterations."""
    trimmed = any(ctx.specs(layer).sink is not None for layer in assign_layers)
    ctx.steps.add(
        "theorem.composition",
        "By induction over the schedule U A (U A)^T: the encoder's state (C = 0, N = 0, C_stage = c0, Y = 0)"
        " is mapped by the first U to (C = c0, N = |c0|^2); each following A then U performs one Lloyd iteration"
        " (assignment to the tie-broken nearest centroid" + (", or none (an outlier, Y = 0) when every V exceeds the"
        " sink's threshold" if trimmed else "")
        + ", then " + ("means" if ctx.later_step == 1 else "c + eta*(mean - c)")
        + ", empty clusters kept); the last A leaves the"
        " final assignment in Y, which the unembedding reads. This holds whenever every assignment has a unique"
        " minimiser of V.",
        [], uses=("model.architecture", "model.schedule"),
    )


def lloyd_theorem(circuit, params: ModelParams, obligations: dict[str, Obligation], specs: SpecOfLayer,
                  examples: int = 1, seed: int = 0) -> list[Obligation]:
    """Execute the theorem's steps on the circuit's weights; one row per step.

    ``specs(layer)`` gives each layer's :class:`~analysis.proof.obligations.specs.BlockSpec`; an update spec's ``step``
    (``eta``) makes the commit a damped one, ``C + eta (C_stage - C)``.
    """
    ctx = TheoremContext(circuit, params, specs, Steps(obligations))
    for layer in ctx.first_layers[ASSIGN]:
        prove_assign_block(ctx, layer, ctx.tag(layer))
    for layer in ctx.first_layers[UPDATE]:
        prove_update_block(ctx, layer, ctx.tag(layer))
    unembed_step(ctx)
    composition_step(ctx, ctx.first_layers[ASSIGN])
    if examples:
        ctx.steps.rows.append(run_examples(circuit, params, examples, seed, eta=ctx.later_step))
    return ctx.steps.rows
