"""The training loss: the paper's soft-min upper bound of the k-means objective.

For points ``x_i`` and centroids ``c_j`` (the task's own units, i.e. min-max scaled to [0, 1]) with squared
distances ``D_ij = |x_i - c_j|^2``::

    L_gamma = sum_i sum_j softmax_j(-gamma D_ij) D_ij  >=  sum_i min_j D_ij  (the k-means objective)

because each point's term is a convex combination of its distances, hence at least their minimum; the gap
vanishes as ``gamma -> inf`` (at most ``log(k) / gamma`` per point). Unlike the objective it is smooth in the
centroids. We report it per point (divided by ``n``) so that its size does not depend on the number of points.
"""

from __future__ import annotations

import torch
from jaxtyping import Float

#: The paper's temperature.
GAMMA_L = 10.0


def sq_distances(X: Float[torch.Tensor, "batch n d"], C: Float[torch.Tensor, "batch k d"]) -> Float[torch.Tensor, "batch n k"]:
    """``|x - c|^2`` from the difference (not the expanded form, which cancels badly near 0)."""
    return ((X[:, :, None, :] - C[:, None, :, :]) ** 2).sum(-1)


def soft_min_objective(X: Float[torch.Tensor, "batch n d"], C: Float[torch.Tensor, "batch k d"],
                       gamma: float = GAMMA_L) -> Float[torch.Tensor, " batch"]:
    """Per task: ``(1/n) sum_i sum_j softmax_j(-gamma D_ij) D_ij``."""
    D = sq_distances(X, C)
    return (torch.softmax(-gamma * D, dim=-1) * D).sum(-1).mean(-1)


def kmeans_objective(X: Float[torch.Tensor, "batch n d"], C: Float[torch.Tensor, "batch k d"]) -> Float[torch.Tensor, " batch"]:
    """Per task: ``sum_i min_j D_ij`` (not divided by n: the usual inertia)."""
    return sq_distances(X, C).amin(-1).sum(-1)


#: Weight of the hinge ``relu(ratio - 1)`` (a step worse than Lloyd's) and of a rise from one step to the next in
#: the anytime loss.
HINGE, RISE = 1.0, 1.0


def anytime_loss(X: Float[torch.Tensor, "batch n d"], C: list[Float[torch.Tensor, "batch k d"]],
                 lloyd: Float[torch.Tensor, "T_plus_1 batch"], gamma: float, hinge: float = HINGE,
                 rise: float = RISE) -> tuple[torch.Tensor, torch.Tensor]:
    """A loss that values every step: per task and step ``t = 1..T``, the soft-min objective ``S_t`` of the
    centroids ``C[t]`` divided by Lloyd's objective ``L_t`` after ``t`` iterations from the same start (so
    every task weighs the same, whatever its units), plus ``hinge * relu(S_t / L_t - 1)`` and
    ``rise * relu(S_t - S_{t-1}) / L_t``; averaged over steps and tasks.

    ``gamma`` is relative: the soft-min temperature of a task is ``gamma / (L_T / n)``, Lloyd's mean squared
    distance at the last step, so it means the same at every scale. ``S_t`` bounds the k-means objective from
    above, so ``S_t / L_t <= 1`` implies the model is at or below Lloyd's. Returns the loss and the ratios
    ``S_t / L_t`` (``[T, batch]``, detached).
    """
    n = X.shape[1]
    temp = gamma * n / lloyd[-1].clamp_min(1e-30)  # [batch]
    S = []
    for Ct in C:
        D = sq_distances(X, Ct)
        S.append((torch.softmax(-temp[:, None, None] * D, dim=-1) * D).sum(-1).sum(-1))
    S = torch.stack(S)  # [T+1, batch]
    L = lloyd.clamp_min(1e-30)
    ratio = S[1:] / L[1:]
    loss = ratio + hinge * torch.relu(ratio - 1.0) + rise * torch.relu(S[1:] - S[:-1]) / L[1:]
    return loss.mean(), ratio.detach()
