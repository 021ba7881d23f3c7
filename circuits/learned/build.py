"""Build the learned safeguarded swap as transformer weights and run it on a problem, in the user's units.

``build_learned_circuit(d, k, steps, alphas)`` builds the step's blocks (:mod:`circuits.learned.stages`: the swap
step with an extrapolated centroid group and the trained candidate, and the untrained swap's own chain, 31 blocks)
with the swap circuit's config, and
:class:`LearnedCircuit` runs them as :class:`circuits.swap.build.SwapCircuit` runs its own: the step model once
per step on the structured path (:func:`circuits.structured.structured_forward`), or the ``steps`` steps stacked in
one ``HookedTransformer`` (built on first use) on the dense path.

Per-step factors: the trained ``alpha_t`` of step ``t`` is part of that step's *weights* (the ``extrapolate``
block's ``W_O`` and MLP), not an input feature. So the stacked model is what the drift report reads: step ``t``'s
``extrapolate`` layer holds ``alpha_t`` in the named basis, and every other layer is the untrained construction's.
The structured path runs, for step ``t``, the step model of ``alpha_t``: the first step's parameters with the one
``extrapolate`` layer's replaced (a cheap derived state dict; every other tensor is shared, read only), one per
distinct factor.

:meth:`LearnedCircuit.run` returns a :class:`LearnedRun`, the numpy reference's trajectory type
(:class:`circuits.learned.reference.LearnedTrajectory`) read from the residual stream, all five candidates built:
it equals ``learned_swap`` with the same factors, margin and tie-break (:meth:`LearnedCircuit.reference`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from jaxtyping import Float

from circuits import hook_names
from circuits.build import CircuitWeights, check_finite
from circuits.encoding import fit_unit_scaling
from circuits.learned import checkpoint
from circuits.learned.reference import CANDIDATES, LearnedTrajectory, alpha_at, learned_swap
from circuits.learned.stages import (ALPHA_BLOCK, CIRCUIT_CANDIDATES, LEARNED_GROUPS, STEP_BLOCKS, extrapolate_block,
                                     learned_layout, step_blocks)
from circuits.plain import PlainTransformer
from circuits.sharpness import MAX_UNIT_SQ_DISTANCE, Sharpness
from circuits.swap.build import CENTRE, Alterations, SwapCircuit
from circuits.swap.knobs import SwapKnobs
from circuits.weights import dense


@dataclass
class LearnedRun(LearnedTrajectory):
    """One problem run through the circuit, as :class:`~circuits.learned.reference.LearnedTrajectory` (every number
    read from the residual stream), with the path that ran it."""

    path: str = "dense"
    path_note: str = ""
    #: Where the run may have left what its mask keeps exact (:meth:`LearnedCircuit._check_reach`); empty if nowhere.
    problems: list[str] = field(default_factory=list)
    #: What of the circuit that ran was not the construction as built (as :attr:`SwapRun.alterations`).
    alterations: Alterations = field(default_factory=Alterations)


def reach_needed(X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], centroids: Float[np.ndarray, "t k d"],
                 alphas: Float[np.ndarray, " p"]) -> np.ndarray:
    """Per step ``t`` started from ``centroids[t]`` (user units), the mask that keeps its assignments exact:
    ``(1 + e)^2 + 4`` with ``e = max(r, |1 - alpha_t| r + alpha_t max(1, r))`` a bound on the extrapolated
    centroids' unit norm when the current ones lie within ``r`` of 0 (their Lloyd's step within ``max(1, r)``),
    so that a masked key (scored ``-mask``) loses to every centroid a point may be nearest to."""
    unit = fit_unit_scaling(X, C0, CENTRE).to_unit(np.asarray(centroids, dtype=np.float64))
    out = []
    for t, C in enumerate(unit):
        r, a = float(np.linalg.norm(C, axis=-1).max()), alpha_at(alphas, t)
        out.append((1.0 + max(r, abs(1.0 - a) * r + a * max(1.0, r))) ** 2 + MAX_UNIT_SQ_DISTANCE)
    return np.array(out)


def mask_for(alphas: Float[np.ndarray, " p"]) -> float:
    """The big-M that keeps every assignment exact with these factors when the current centroids lie in the unit
    ball (as means of points, points and the start do): the extrapolated centroids then lie within
    :func:`~circuits.learned.reference.reach` (``max(1, 2 alpha - 1)``) of 0, a point within ``2 max(1, alpha)`` of them, and masked keys must lose by more than
    that squared distance. ``16`` (swap's default) for ``alpha <= 1``."""
    top = max(1.0, float(np.max(alphas)))
    return 4 * top**2 + 12.0


@dataclass
class LearnedCircuit(SwapCircuit):
    STEP: ClassVar[tuple[str, ...]] = STEP_BLOCKS
    SPEC = LEARNED_GROUPS

    #: The trained factors: ``alphas[t]`` for step ``t``, the last one for every later step.
    alphas: np.ndarray = field(default_factory=lambda: np.ones(1))
    #: The first step's weights, from which every step's are derived.
    weights: CircuitWeights | None = field(default=None, repr=False)
    _step_models: dict = field(default_factory=dict, repr=False)

    def alpha(self, step: int) -> float:
        return alpha_at(self.alphas, step)

    def blocks_at(self, step: int) -> list:
        """Step ``step``'s blocks: the shared ones and the ``extrapolate`` block of its factor."""
        at = STEP_BLOCKS.index(ALPHA_BLOCK)
        own = extrapolate_block(self.layout, self.knobs, self.alpha(step))
        return [*self.blocks[:at], own, *self.blocks[at + 1:]]

    def stacked_blocks(self) -> list:
        return [b for t in range(self.steps) for b in self.blocks_at(t)]

    def factors_in(self, state: dict[str, torch.Tensor]) -> np.ndarray:
        """Each step's factor as a model's weights hold it, read in the named basis: the ``extrapolate`` layer's
        ``W_O`` from its value channels (``X + C`` of the keys) into ``C_stage``, averaged over the ``d`` channels
        (:func:`circuits.learned.stages.extrapolate_block`). ``state``: a state dict of the stacked model
        (``circuit.model.state_dict()``, or a trained copy of it) — what a drift report compares with
        :attr:`alphas`."""
        lay, out = self.layout, []
        for t in range(self.steps):
            W_O = state[hook_names.param(self.layer(t, ALPHA_BLOCK), "attn", "W_O")][0].detach().cpu().numpy()
            # The head's value channel m (its m-th row of W_O) carries X_m + C_m (HeadBuilder numbers them from 0).
            out.append(np.mean([W_O[m, lay.index("C_stage", m)] for m in range(lay.d)]))
        return np.array(out)

    def step_model_at(self, step: int) -> PlainTransformer:
        """The plain model of step ``step``: the first step's parameters with the ``extrapolate`` layer's rebuilt for
        ``alpha_t`` (one model per distinct factor, cached)."""
        alpha = self.alpha(step)
        if alpha == self.alpha(0):
            return self.step_model
        if alpha not in self._step_models:
            cfg, layer = self.weights.config, STEP_BLOCKS.index(ALPHA_BLOCK)
            own = extrapolate_block(self.layout, self.knobs, alpha)
            head, mlp = own.head.padded(cfg.d_head), own.mlp.padded(cfg.d_mlp)
            parameters = dict(self.weights.parameters)
            as_tensor = lambda a: torch.as_tensor(a, dtype=cfg.dtype, device=cfg.device)  # noqa: E731
            for name in ("W_Q", "W_K", "W_V", "W_O"):
                parameters[hook_names.param(layer, "attn", name)] = as_tensor(getattr(head, name)[None])
            for name in ("W_gate", "W_in", "W_out"):
                parameters[hook_names.param(layer, "mlp", name)] = as_tensor(getattr(mlp, name))
            check_finite(parameters)
            self._step_models[alpha] = PlainTransformer(cfg, parameters)
        return self._step_models[alpha]

    def reference(self, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"]) -> LearnedTrajectory:
        """The numpy reference this circuit builds: the same factors, margin, candidates and tie-break."""
        return learned_swap(X, C0, self.steps, self.alphas, self.knobs.select_margin, self.user_tie_break(X, C0),
                            candidates=CIRCUIT_CANDIDATES)

    def run(self, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], path: str = "auto") -> LearnedRun:
        """The circuit on one problem, on ``path`` (``auto``, ``structured`` or ``dense``, as the swap circuit's)."""
        r = super().run(X, C0, path)
        beyond = self._check_reach(X, C0, r.centroids)
        per = np.full((self.steps, len(CANDIDATES)), np.nan)
        for slot, (cand, _) in enumerate(self.SPEC.candidates):
            per[:, CANDIDATES.index(cand)] = r.candidate_objectives[:, slot]
        # The untrained swap's objectives are its chain's candidate's (step 0: the start, shared by all).
        chain = [*r.objectives[:1], *per[:, CANDIDATES.index("swap_reference")]]
        return LearnedRun(r.centroids, r.choices, r.objectives, r.lloyd_centroids, r.lloyd_objectives,
                          np.array(chain), per, r.path, r.path_note, beyond, r.alterations)

    def _check_reach(self, X, C0, centroids) -> list[str]:
        """Where a step's extrapolated centroids may have been beyond the reach of the mask (:func:`reach_needed`):
        a kept learned candidate with an empty cluster may leave the unit ball, and then the next extrapolation
        reaches farther. :func:`analysis.constructions.learned.circuit_for` chooses the mask from the reference's trajectory
        before the run, so this names a run that left it (it is not verified)."""
        mask = self.knobs.sharpness.mask
        out = []
        for t, need in enumerate(reach_needed(X, C0, centroids[:-1], self.alphas)):
            if need > mask:
                out.append(f"step {t + 1}: extrapolated centroids may lie {need - MAX_UNIT_SQ_DISTANCE:.3g} (unit"
                           f" squared distance) from a point, beyond what mask={mask:g} keeps exact")
        return out


def build_learned_circuit(d: int, k: int, steps: int, alphas: Float[np.ndarray, " p"] | list[float] | None = None,
                          *, beta: float = 1e14, tie_break: float = 1e-11, mask: float | None = None,
                          beta_update: float = 4000.0, beta_select: float = 1e200, select_margin: float = 1e-10,
                          dtype: torch.dtype = torch.float64, device: str = "cpu") -> LearnedCircuit:
    """The learned safeguarded swap for ``d``-dimensional points, ``k >= 2`` centroids and ``steps >= 1`` steps.

    ``alphas``: the per-step factors (``checkpoints/learned/learned.json``'s when ``None``), 1 to 64 finite numbers
    in ``[0, 16]``. ``mask`` defaults to :func:`mask_for` of them; the other knobs are the swap circuit's
    (:mod:`circuits.swap.knobs`, a ``ValueError`` outside their ranges). float64 only."""
    if d < 1 or k < 2 or steps < 1:
        raise ValueError(f"the learned circuit needs d >= 1, k >= 2 and steps >= 1, got d={d}, k={k}, steps={steps}")
    if dtype != torch.float64:
        raise ValueError(f"the learned circuit is exact only in float64, got {dtype}")
    if alphas is None:
        alphas = checkpoint.load().alphas
    alphas = checkpoint.validate({"format": checkpoint.FORMAT, "version": checkpoint.VERSION,
                                  "candidate": checkpoint.CANDIDATE,
                                  "alphas": [float(a) for a in np.asarray(alphas, dtype=np.float64).reshape(-1)]}
                                 ).alphas
    mask = mask_for(alphas) if mask is None else mask
    knobs = SwapKnobs(Sharpness(beta=beta, beta_update=beta_update, mask=mask, tie_break=tie_break),
                      beta_select=beta_select, select_margin=select_margin)
    layout = learned_layout(d, k)
    blocks = step_blocks(layout, knobs, alpha_at(alphas, 0))
    # W_U reads CHOICE: the logits at any token are the kept candidate (in CANDIDATES order).
    W_U = np.stack([dense(layout, {("CHOICE", r): 1.0}) for r in range(len(CIRCUIT_CANDIDATES))], axis=1)
    weights = CircuitWeights.from_blocks(blocks, W_U, layout, dtype=dtype, device=device)
    return LearnedCircuit(weights.plain(), layout, knobs, steps, [b.kind for b in blocks] * steps, blocks, W_U,
                          alphas=alphas, weights=weights)
