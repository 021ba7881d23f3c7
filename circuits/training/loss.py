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
