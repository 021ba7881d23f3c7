"""The estimator's initial centroids as ``KMeans`` defines them: ``init`` a name, an array or a callable, and
``n_init``'s ``"auto"`` (:class:`analysis.estimator.CircuitKMeans` runs one fit per set of centroids returned here).
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.utils import check_random_state

from analysis.data import check_magnitude
from circuits.initialisation import fewer_distinct_rows, initial_centroids

#: ``n_init="auto"`` runs this many initialisations for ``init="random"`` and a callable (as ``KMeans``), one otherwise.
AUTO_N_INIT_RANDOM = 10


def n_runs(init, n_init) -> int:
    """How many initialisations ``n_init`` (an int or ``"auto"``, already checked) asks for with this ``init``."""
    if isinstance(n_init, str):  # "auto"; init may be an array, which must not be compared with a string
        random = callable(init) or (isinstance(init, str) and init == "random")
        return AUTO_N_INIT_RANDOM if random else 1
    return int(n_init)


def seed_of(random_state) -> int:
    """An int seed from ``random_state``: itself, one draw from a ``RandomState``, or 0 for ``None`` (reproducible)."""
    if random_state is None:
        return 0
    if isinstance(random_state, (int, np.integer)):
        return int(random_state)
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


def from_callable(init, X: np.ndarray, k: int, random_state: np.random.RandomState) -> np.ndarray:
    """The centroids a callable ``init(X, n_clusters, random_state=...)`` returns, checked as ``KMeans`` checks them
    (shape), and finite and within the data's magnitude as an init array is."""
    C0 = init(X.copy(), k, random_state=random_state)
    try:
        C0 = np.asarray(C0, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"the init callable must return a ({k}, {X.shape[1]}) array of numbers, got"
                         f" {type(C0).__name__}") from None
    if C0.shape != (k, X.shape[1]):
        raise ValueError(f"The shape of the initial centers {C0.shape} returned by the init callable does not"
                         f" match ({k}, {X.shape[1]}): n_clusters and the number of features")
    if not np.isfinite(C0).all():
        raise ValueError("the init callable returned centroids with NaN or inf")
    check_magnitude(C0, X.shape[0], "init")
    return C0


def initial_runs(X: np.ndarray, k: int, init, n_init, random_state) -> list[np.ndarray]:
    """Initial centroids of every run. With fewer distinct points than clusters (where ``KMeans`` warns), the
    distinct points are the centroids and the rest repeat them: a repeated centroid loses every tie to its
    lower-index twin, stays empty and keeps its place, so the runs are deterministic and one is enough."""
    if callable(init):
        # KMeans hands the callable one RandomState for all its runs; None here means seed 0 (reproducible).
        state = check_random_state(0 if random_state is None else random_state)
        return [from_callable(init, X, k, state) for _ in range(n_runs(init, n_init))]
    given = not isinstance(init, str)
    if given:
        init = np.asarray(init, dtype=np.float64)
        if init.ndim == 2 and init.shape[1] == X.shape[1] and np.isfinite(init).all():
            check_magnitude(init, X.shape[0], "init")
    runs = n_runs(init, n_init)
    if given and runs > 1:
        warnings.warn(f"an explicit init array runs once; n_init={runs} is ignored", RuntimeWarning, stacklevel=4)
        runs = 1
    distinct = None if given else fewer_distinct_rows(X, k)
    if distinct is not None:
        return [distinct[np.arange(k) % len(distinct)]]
    seed = seed_of(random_state)
    return [initial_centroids(X, k, init, (seed + run) % 2**32) for run in range(runs)]
