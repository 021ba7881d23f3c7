"""What training changed in the learned safeguarded swap (:mod:`circuits.learned`), against the construction it
started from, as numbers: the drift report's learned counterpart (:func:`learned_drift`).

The trained part is one factor per step, and it lives in the weights of one layer per step (the ``extrapolate``
block's head ``W_O`` and MLP, :func:`circuits.learned.stages.extrapolate_block`). So:

* **Weights.** The stacked model of the trained factors is compared, layer by layer, with the same circuit of the
  untrained factor (``alpha = 1``: two Lloyd's steps, where the search started) and of ``alpha = 0`` (Lloyd's step
  itself): per step, the factor read back from the weights in the named basis
  (:meth:`~circuits.learned.build.LearnedCircuit.factors_in`), the Frobenius norm of the ``extrapolate`` layer's
  ``W_O`` and MLP difference, and the named subspaces the ``W_O`` difference writes to; and the largest difference
  in every *other* layer (0: training changed nothing else).
* **Behaviour.** On held-out general tasks (the ``TEST`` stream), :func:`circuits.learned.reference.learned_swap`
  with the trained factors, with the untrained candidate (all factors 1), and without the learned candidate (the
  untrained safeguarded swap): the mean objective over Lloyd's per step, and how often each candidate was kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

#: The shape the weights are read at: the factors' weights do not depend on it, the layer sizes do.
WEIGHTS_SHAPE = (2, 3)


@dataclass
class StepWeights:
    """One step's ``extrapolate`` layer: the checkpoint's factor, the one read back from the weights, and how the
    layer differs from the untrained (``alpha = 1``) and Lloyd's (``alpha = 0``) circuits'."""

    step: int
    alpha: float
    alpha_read: float
    w_o_change_vs_untrained: float
    mlp_change_vs_untrained: float
    w_o_change_vs_lloyd: float
    writes_to: list[str]


@dataclass
class LearnedDrift:
    """:func:`learned_drift`'s numbers (module docstring); ``summary`` says them in plain words."""

    alphas: list[float]
    steps: list[StepWeights]
    other_layers_max_change: float
    ratio_per_step: dict[str, list[float]] = field(default_factory=dict)
    kept: dict[str, float] = field(default_factory=dict)
    tasks: dict = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)
    #: Standard deviation over the tasks of each variant's ratio, per step (beside every mean it is compared by).
    ratio_spread: dict[str, list[float]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


#: The parameters of one layer of the stacked model (:func:`circuits.hook_names.param`'s components and names).
LAYER_PARAMS = (*(("attn", n) for n in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")),
                *(("mlp", n) for n in ("W_in", "W_gate", "W_out", "b_in", "b_out")))


def _layer_params(state: dict, layer: int) -> dict:
    from circuits import hook_names

    names = (hook_names.param(layer, c, n) for c, n in LAYER_PARAMS)
    return {name: state[name].detach().cpu().numpy() for name in names if name in state}


def weight_drift(alphas: np.ndarray, steps: int) -> tuple[list[StepWeights], float]:
    """The weights part (module docstring) for ``steps`` steps at :data:`WEIGHTS_SHAPE`."""
    from circuits import hook_names
    from circuits.learned.build import build_learned_circuit
    from circuits.learned.stages import ALPHA_BLOCK

    d, k = WEIGHTS_SHAPE
    trained = build_learned_circuit(d, k, steps, alphas)
    # The same mask as the trained circuit, so that only the factor differs between the three.
    mask = trained.knobs.sharpness.mask
    state = trained.model.state_dict()
    untrained = build_learned_circuit(d, k, steps, [1.0], mask=mask).model.state_dict()
    lloyd = build_learned_circuit(d, k, steps, [0.0], mask=mask).model.state_dict()
    read = trained.factors_in(state)
    lay, out = trained.layout, []
    alpha_layers = {trained.layer(t, ALPHA_BLOCK) for t in range(steps)}
    for t in range(steps):
        layer = trained.layer(t, ALPHA_BLOCK)
        mine, base, zero = (_layer_params(s, layer) for s in (state, untrained, lloyd))
        w_o = hook_names.param(layer, "attn", "W_O")
        diff = mine[w_o] - base[w_o]
        cols = np.flatnonzero(np.abs(diff).reshape(-1, diff.shape[-1]).max(axis=0) > 0)
        mlp_names = [hook_names.param(layer, c, n) for c, n in LAYER_PARAMS if c == "mlp"]
        mlp = sum(float(np.linalg.norm(mine[n] - base[n]) ** 2) for n in mlp_names if n in mine) ** 0.5
        out.append(StepWeights(t + 1, trained.alpha(t), float(read[t]), float(np.linalg.norm(diff)), mlp,
                               float(np.linalg.norm(mine[w_o] - zero[w_o])),
                               sorted({lay.subspace_of(c)[0] for c in cols})))
    trained_keys = {name for layer in alpha_layers for name in _layer_params(state, layer)}
    other = 0.0
    for name, tensor in state.items():
        if name in trained_keys:
            continue
        other = max(other, float((tensor - untrained[name]).abs().max()) if tensor.numel() else 0.0)
    return out, other


def behaviour(alphas: np.ndarray, tasks: int, n: int, steps: int, seed: int) -> tuple[dict, dict, dict]:
    """Mean objective over Lloyd's per step of the trained model, the untrained candidate and the untrained swap,
    its standard deviation over the tasks, and the share of steps each candidate was kept (trained model), on
    ``tasks`` held-out general tasks."""
    from circuits.learned.reference import CANDIDATES, learned_swap, safety_chains
    from circuits.learned.train import SELECT_MARGIN, ratio
    from circuits.training.general_tasks import general_tasks
    from circuits.training.tasks import TEST

    problems = []
    for i in range(tasks):
        tb = general_tasks(1, n, 32, 12, seed, TEST, i)
        problems.append((tb.X[0], tb.C0[0]))
    variants = {"trained": (alphas, None), "alphas 1": (np.ones(1), None),
                "no learned (swap)": (alphas, tuple(c for c in CANDIDATES if c != "learned"))}
    ratios: dict[str, list] = {name: [] for name in variants}
    kept = dict.fromkeys(CANDIDATES, 0)
    for X, C0 in problems:
        chains = safety_chains(X, C0, steps, SELECT_MARGIN)
        for name, (a, cands) in variants.items():
            run = learned_swap(X, C0, steps, a, SELECT_MARGIN, chains=chains,
                               **({"candidates": cands} if cands else {}))
            ratios[name].append(ratio(run.objectives, run.lloyd_objectives))
            if name == "trained":
                for c in run.choices:
                    kept[c] += 1
    total = max(1, sum(kept.values()))
    return ({name: np.mean(r, axis=0).tolist() for name, r in ratios.items()},
            {name: np.std(r, axis=0).tolist() for name, r in ratios.items()},
            {c: v / total for c, v in kept.items()})


def learned_drift(alphas, steps: int = 20, tasks: int = 16, n: int = 128, seed: int = 0,
                  with_behaviour: bool = True, weight_steps: int | None = None) -> LearnedDrift:
    """Weights and behaviour of the learned construction with ``alphas`` against the untrained one (module
    docstring). ``weight_steps``: the steps whose weights are read (default: one past the last distinct factor)."""
    alphas = np.asarray(alphas, dtype=np.float64).reshape(-1)
    ws = weight_steps if weight_steps is not None else min(steps, len(alphas) + 1)
    per_step, other = weight_drift(alphas, ws)
    out = LearnedDrift([float(a) for a in alphas], per_step, other)
    exact = max(abs(s.alpha - s.alpha_read) for s in per_step)
    agree = "exactly" if exact == 0 else f"to within {exact:.2g}"
    out.summary.append(f"the factors read back from the weights equal the checkpoint's {agree}: "
                       + ", ".join(f"step {s.step} {s.alpha_read:g}" for s in per_step)
                       + " (untrained construction: 1; Lloyd's step: 0)")
    out.summary.append(f"training changed one layer per step (extrapolate: W_O writes to "
                       f"{', '.join(per_step[0].writes_to) or 'nothing'}); every other layer "
                       + ("is identical to the untrained construction's" if other == 0 else
                          f"differs from the untrained construction's by at most {other:.2g}"))
    if with_behaviour:
        out.ratio_per_step, out.ratio_spread, out.kept = behaviour(alphas, tasks, n, steps, seed)
        out.tasks = {"count": tasks, "n": n, "steps": steps, "seed": seed, "family": "general (TEST stream)"}
        r, sd = out.ratio_per_step, out.ratio_spread
        at = (1, min(3, steps), steps)
        out.summary.append("objective over Lloyd's at step 1 / 3 / last, mean (std over the tasks): " + "; ".join(
            f"{name} " + " / ".join(f"{v[t]:.4f} ({sd[name][t]:.2g})" for t in at) for name, v in r.items()))
        out.summary.append("kept: " + ", ".join(f"{c} {v:.0%}" for c, v in out.kept.items()))
    return out
