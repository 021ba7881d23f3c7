"""A scikit-learn estimator backed by the k-means circuit: use it wherever you use ``sklearn.cluster.KMeans``.

``fit`` builds the circuit, runs it and verifies it layer by layer; the fitted estimator exposes scikit-learn's
attributes (``labels_``, ``cluster_centers_``, ``inertia_``, ``n_iter_``) next to the ``HookedTransformer``
(``model_``), the built circuit (``circuit_``), the captured run (``capture_``) and the verification report
(``report_``). ``predict`` runs a circuit too: one update block commits the fitted centroids, one assign block
assigns the new points.

It lives in ``analysis/`` rather than ``circuits/`` because it verifies, and models do not know who looks at them.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from analysis.capture import PATHS
from analysis.data import check_iterations, check_magnitude, check_spread
from analysis.pipeline import DTYPES, choose_sharpness, run_problem
from circuits import reference
from circuits.encoding import fit_unit_scaling
from circuits.initialisation import initial_centroids
from circuits.variants import check_variant, get_variant


#: Points whose distances from the centroids differ by more than this factor are predicted in separate runs.
GROUP_FACTOR = 256.0


def _magnitude_groups(X: np.ndarray, centres: np.ndarray) -> list[np.ndarray]:
    """Indices of ``X`` grouped by distance from the centroids' median, each group within ``GROUP_FACTOR``."""
    centre = np.median(centres, axis=0)
    spread = float(np.linalg.norm(centres - centre, axis=1).max())
    r = np.linalg.norm(X - centre, axis=1)
    floor = spread if spread > 0 else max(float(r.max()), 1.0)
    level = np.ceil(np.log(np.maximum(r / floor, 1.0)) / np.log(GROUP_FACTOR)).astype(int)
    return [np.flatnonzero(level == g) for g in np.unique(level)]


class CircuitMismatchWarning(UserWarning):
    """The circuit disagreed with its reference algorithm (see ``report_``)."""


class CircuitKMeans(ClusterMixin, TransformerMixin, BaseEstimator):
    """k-means clustering computed by the k-means transformer.

    Parameters
    ----------
    n_clusters : number of clusters ``k``.
    max_iter : Lloyd iterations (the circuit has ``2 * max_iter + 2`` blocks).
    init : ``"random"`` (distinct data points), ``"k-means++"`` or an array of shape (n_clusters, n_features).
    n_init : number of initialisations (seeds ``seed, seed + 1, ...``); every run is verified and the one with the
        lowest inertia is kept, as ``KMeans`` does. 1 for an explicit ``init`` array.
    random_state : seed of the initialisation: an int, a ``numpy.random.RandomState`` (one seed is drawn from it),
        or ``None``, which means 0 so that results are reproducible.
    variant : registered circuit variant (see :mod:`circuits.variants`).
    sharpness : a :class:`circuits.sharpness.Sharpness` used as it is; ``None`` (Lloyd's: tie-break and beta
        chosen from the data, see :func:`circuits.sharpness.for_problem`), or a ``dict`` of knobs to keep.
    dtype : ``"float64"`` (exact) or ``"float32"`` (an approximation).
    path : execution path, ``"auto"`` (the structured path for constructed circuits: a million points fit),
        ``"dense"`` (the plain ``HookedTransformer`` forward, up to ~12,000 tokens) or ``"structured"``.

    ``KMeans``'s ``tol``, ``algorithm`` and ``copy_x`` have no counterpart: the circuit always runs ``max_iter``
    Lloyd iterations (an iteration after convergence changes nothing, so this is ``tol=0``), ``X`` is never
    modified, and ``sample_weight`` is refused unless uniform — the update head averages members with equal weight.
    """

    def __init__(self, n_clusters: int = 8, *, max_iter: int = 10, init="random", n_init: int = 1,
                 random_state=0, variant: str = "lloyd", sharpness=None, dtype: str = "float64",
                 path: str = "auto"):
        self.n_clusters = n_clusters
        self.max_iter = max_iter
        self.init = init
        self.n_init = n_init
        self.random_state = random_state
        self.variant = variant
        self.sharpness = sharpness
        self.dtype = dtype
        self.path = path

    def _check_params(self) -> None:
        if not isinstance(self.n_clusters, (int, np.integer)) or self.n_clusters < 1:
            raise ValueError(f"n_clusters must be a positive integer, got {self.n_clusters!r}")
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 0:
            raise ValueError(f"max_iter must be a non-negative integer, got {self.max_iter!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        if not isinstance(self.n_init, (int, np.integer)) or self.n_init < 1:
            raise ValueError(f"n_init must be a positive integer, got {self.n_init!r}")
        if self.path not in PATHS:
            raise ValueError(f"path must be 'auto', 'dense' or 'structured', got {self.path!r}")
        if not isinstance(self.variant, str):
            raise ValueError(f"variant must be a spec such as 'soft:beta=30', got {self.variant!r}")
        check_variant(self.variant, int(self.max_iter))  # VariantError is a ValueError, as scikit-learn expects

    def _seed(self) -> int:
        if self.random_state is None:
            return 0
        if isinstance(self.random_state, (int, np.integer)):
            return int(self.random_state)
        return int(check_random_state(self.random_state).randint(0, 2**31 - 1))

    def fit(self, X, y=None, sample_weight=None):
        self._check_params()
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=1)
        if sample_weight is not None:
            w = np.asarray(sample_weight, dtype=np.float64)
            if w.shape != (X.shape[0],) or not np.all(w == w[0]) or not w[0] > 0:
                raise ValueError("sample_weight is not supported: the circuit's update head averages a cluster's "
                                 "members with equal weight (uniform positive weights are accepted)")
        check_magnitude(X, X.shape[0], "X")
        check_spread(X, "X")
        check_iterations(int(self.max_iter), X.shape[1], int(self.n_clusters), "max_iter")
        given = not isinstance(self.init, str)
        if given:
            init = np.asarray(self.init, dtype=np.float64)
            if init.ndim == 2 and init.shape[1] == X.shape[1] and np.isfinite(init).all():
                check_magnitude(init, X.shape[0], "init")
        n_init = int(self.n_init)
        if given and n_init > 1:
            warnings.warn(f"an explicit init array runs once; n_init={n_init} is ignored", RuntimeWarning, stacklevel=2)
            n_init = 1
        seed = self._seed()
        inits = [initial_centroids(X, int(self.n_clusters), np.asarray(self.init) if given else self.init,
                                   (seed + run) % 2**32) for run in range(n_init)]
        # Every initialisation runs the same circuit: build it once, sharp enough for all of them.
        sharpness, resolution = choose_sharpness(X, inits, self.variant, self.sharpness, DTYPES[self.dtype])
        best, circuit = None, None
        for C0 in inits:
            if circuit is None:
                circuit = get_variant(self.variant).build(X.shape[1], C0.shape[0], int(self.max_iter),
                                                          sharpness=sharpness, dtype=DTYPES[self.dtype])
            result = run_problem(X, C0, int(self.max_iter), self.variant, circuit=circuit, path=self.path,
                                 resolution=resolution)
            if best is None or result.inertia < best[1].inertia:
                best = (C0, result)
        C0, result = best
        self.circuit_ = result.circuit
        self.model_ = result.circuit.model
        self.capture_ = result.capture
        self.report_ = result.report
        self.init_centroids_ = C0
        self.labels_ = result.labels.astype(np.int32)  # KMeans's dtype
        self.cluster_centers_ = result.centroids
        self.inertia_ = result.inertia
        self.n_iter_ = result.report.n_iter
        # A threshold given in data radii (trimmed k-means' radius) is fixed in the user's units by the fit:
        # predict holds it there, whatever the radius of the points it is given.
        theta = result.circuit.params.get("theta")
        self.threshold_ = None if theta is None else float(theta) * float(result.encoded.scaling.scale[0]) ** 2
        if not result.report.verified:
            warnings.warn(
                "the circuit disagrees with its reference: " + "; ".join(result.report.failures),
                CircuitMismatchWarning, stacklevel=2,
            )
        return self

    def fit_predict(self, X, y=None, sample_weight=None):
        return self.fit(X, sample_weight=sample_weight).labels_

    def predict(self, X):
        """Nearest fitted centroid of each point, computed by a two-block circuit (commit, then assign) and verified.

        Each point's label depends on the centroids alone, so points are run in groups of similar distance from
        the centroids (within a factor of 256): a far point then cannot coarsen what float64 resolves for the
        others. Every group is verified against the nearest-centroid reference; a group the circuit cannot
        resolve raises ``ValueError`` rather than returning a wrong label.
        """
        X = self._checked(X)
        centres = self.cluster_centers_
        labels = np.empty(len(X), dtype=np.int32)
        for group in _magnitude_groups(X, centres):
            result = self._run_group(X[group], centres)
            if not result.report.verified:
                raise ValueError(f"predict: the circuit could not resolve {len(group)} point(s) exactly: "
                                 + "; ".join(result.report.failures))
            labels[group] = result.labels
        return labels

    def _checked(self, X) -> np.ndarray:
        """``X`` validated against the fit, and small enough that its squared distances to the centroids (and
        their sum) are finite: beyond that every distance is inf and the nearest centroid cannot be told."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        check_magnitude(X, X.shape[0], "X")
        return X

    def _run_group(self, X: np.ndarray, centres: np.ndarray):
        """One verified assign-only run of ``X`` against the fitted centroids (see :meth:`predict`)."""
        threshold = getattr(self, "threshold_", None)
        if threshold is None:
            return run_problem(X, centres, 0, self.variant, DTYPES[self.dtype], self.sharpness, path=self.path)
        # The variant's radius is relative to this run's data radius: choose it so the threshold is the fitted one
        # (a radius of 2 data radii or more keeps every point, so 4, the largest allowed, is the same as any more).
        scale = float(fit_unit_scaling(X, centres).scale[0])
        radius = min(float(np.sqrt(threshold)) / scale, 4.0)
        dtype = DTYPES[self.dtype]
        sharpness, resolution = choose_sharpness(X, [centres], self.variant, self.sharpness, dtype)
        circuit = get_variant(self.variant).build(X.shape[1], centres.shape[0], 0, sharpness=sharpness, dtype=dtype,
                                                  radius=radius)
        return run_problem(X, centres, 0, self.variant, circuit=circuit, path=self.path, resolution=resolution)

    def transform(self, X):
        """Euclidean distance of each point to each fitted centroid (as ``KMeans.transform``)."""
        X = self._checked(X)
        return np.sqrt(reference.sq_distances(X, self.cluster_centers_))

    def score(self, X, y=None):
        """Negative k-means objective of ``X`` under the fitted centroids (as ``KMeans.score``)."""
        X = self._checked(X)
        return -reference.objective(X, self.cluster_centers_)
