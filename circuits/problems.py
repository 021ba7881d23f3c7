"""Random clustering problems: the one home of the mixture generators, each with its parameters as a record.

* :class:`PaperMixture` — the paper's mixture: ``k`` component means drawn from U[0, 1]^d, ``n`` points, each
  from a component chosen uniformly at random plus per-dimension noise of scale ``sigma`` (0.1) from a noise
  family, every problem min-max scaled to [0, 1] per dimension (then multiplied by ``scale``). The paper-family
  training tasks (:mod:`circuits.training.tasks`) and the sweep's problems (:mod:`analysis.sweep`) draw from it.
* :class:`GeneralMixture` — one problem of the general family (:mod:`circuits.training.general_tasks`, whose
  docstring states the distribution): unequal cluster sizes, anisotropic and heavy-tailed noise, the problem's
  own units. Its fields are the ranges the per-problem parameters are drawn from.

Noise families (:func:`noise`), all scaled so that ``sigma`` is the per-dimension standard deviation where one
exists:

* ``gaussian`` — N(0, 1) (the training distribution);
* ``laplace`` — Laplace with scale 1/sqrt(2);
* ``gumbel`` — Gumbel, centred, scale sqrt(6)/pi (skewed);
* ``lognormal`` — ``exp(Z)`` centred and divided by its standard deviation (strongly skewed);
* ``cauchy`` — standard Cauchy (no variance: ``sigma`` is its scale; heavy tails, so after min-max scaling most
  points crowd into a small part of [0, 1]^d).

Streams: every generator takes a :class:`numpy.random.Generator` and draws from it in a fixed order (stated in
its docstring), so the caller's seeding decides the problem and the same seed gives the same arrays bit for bit.
Callers seed differently on purpose (the tasks by ``(seed, stream, index)``, the sweep by ``(seed, d, k, n)``);
the committed checkpoints' evaluation numbers depend on those streams. Initial centroids for these problems
are :mod:`circuits.initialisation`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float, Int

FAMILIES = ("gaussian", "cauchy", "gumbel", "laplace", "lognormal")

#: The paper's per-dimension noise scale (before min-max scaling).
SIGMA = 0.1


def check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; choose one of {', '.join(FAMILIES)}")


def noise(rng: np.random.Generator, family: str, shape: tuple[int, ...]) -> np.ndarray:
    """Unit-scale noise of ``family`` (unit variance except Cauchy, whose scale is 1): one draw of ``shape``."""
    check_family(family)
    if family == "gaussian":
        return rng.standard_normal(shape)
    if family == "laplace":
        return rng.laplace(0.0, 1.0 / math.sqrt(2.0), shape)
    if family == "gumbel":
        scale = math.sqrt(6.0) / math.pi
        return rng.gumbel(0.0, scale, shape) - scale * np.euler_gamma
    if family == "lognormal":
        mean, std = math.exp(0.5), math.sqrt((math.e - 1.0) * math.e)
        return (rng.lognormal(0.0, 1.0, shape) - mean) / std
    return rng.standard_cauchy(shape)


def min_max_scale(X: Float[np.ndarray, "... n d"]) -> Float[np.ndarray, "... n d"]:
    """Each problem mapped onto [0, 1] per dimension (a dimension where all points agree maps to 0)."""
    lo, hi = X.min(axis=-2, keepdims=True), X.max(axis=-2, keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (X - lo) / span


@dataclass(frozen=True)
class PaperMixture:
    """The paper's mixture (module docstring): ``n`` points in ``d`` dimensions from ``k`` components."""

    n: int
    d: int
    k: int
    sigma: float = SIGMA
    family: str = "gaussian"
    #: The problems lie in [0, scale]^d.
    scale: float = 1.0

    def sample(self, rng: np.random.Generator, batch: int
               ) -> tuple[Float[np.ndarray, "batch n d"], Int[np.ndarray, "batch n"]]:
        """``batch`` problems and their generating components. Draws, in order: the means ``(batch, k, d)``, the
        components ``(batch, n)``, the noise ``(batch, n, d)``."""
        check_family(self.family)
        means = rng.uniform(0.0, 1.0, (batch, self.k, self.d))
        components = rng.integers(0, self.k, (batch, self.n))
        X = np.take_along_axis(means, components[..., None], axis=1) + self.sigma * noise(
            rng, self.family, (batch, self.n, self.d))
        return min_max_scale(X) * self.scale, components


@dataclass(frozen=True)
class GeneralMixture:
    """The ranges one general-family problem's parameters are drawn from (log-uniform unless stated)."""

    #: Dirichlet concentration of the mixture weights.
    alpha: tuple[float, float] = (0.3, 5.0)
    #: Standard deviation of the component means (the noise has unit scale per direction).
    separation: tuple[float, float] = (0.15, 3.0)
    #: Per-direction noise scale of each component (log-uniform in [low, 1]).
    spread: float = 0.2
    #: Probability that the noise is Student-t instead of Gaussian, and its degrees of freedom (uniform).
    heavy_tail: float = 0.25
    dof: tuple[int, int] = (3, 10)
    #: The problem is multiplied by ``10^u``, ``u`` uniform in this range, after an offset uniform in
    #: ``[-offset, offset]`` per dimension.
    log10_units: tuple[float, float] = (-3.0, 3.0)
    offset: float = 100.0

    def sample(self, rng: np.random.Generator, n: int, d: int, m: int
               ) -> tuple[Float[np.ndarray, "n d"], Int[np.ndarray, " n"]]:
        """One problem's points ``(n, d)`` from ``m`` components, and its components ``(n,)``. Draws, in order:
        alpha, the weights, the components, the separation, the means, the rotations, the spreads, the tail
        choice (and the degrees of freedom), the noise, the units, the offset."""
        alpha = np.exp(rng.uniform(np.log(self.alpha[0]), np.log(self.alpha[1])))
        weights = rng.dirichlet(np.full(m, alpha))
        components = rng.choice(m, size=n, p=weights)
        sep = np.exp(rng.uniform(np.log(self.separation[0]), np.log(self.separation[1])))
        means = sep * rng.standard_normal((m, d))
        Q = np.linalg.qr(rng.standard_normal((m, d, d)))[0]
        sigma = np.exp(rng.uniform(np.log(self.spread), 0.0, (m, d)))
        A = Q * sigma[:, None, :]
        z = self._noise(rng, n, d)
        X = means[components] + np.einsum("nij,nj->ni", A[components], z)
        scale = 10.0 ** rng.uniform(*self.log10_units)
        offset = rng.uniform(-self.offset, self.offset, d)
        return (X + offset) * scale, components

    def _noise(self, rng: np.random.Generator, n: int, d: int) -> Float[np.ndarray, "n d"]:
        """Unit-variance noise: Gaussian, or with probability ``heavy_tail`` Student-t."""
        if rng.random() < self.heavy_tail:
            dof = rng.integers(self.dof[0], self.dof[1] + 1)
            return rng.standard_t(dof, (n, d)) / np.sqrt(dof / (dof - 2))
        return rng.standard_normal((n, d))
