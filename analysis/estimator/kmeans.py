"""A scikit-learn estimator backed by the k-means circuit: use it wherever you use ``sklearn.cluster.KMeans``.

``fit`` builds the circuit, runs it and verifies it layer by layer; the fitted estimator exposes scikit-learn's
attributes (``labels_``, ``cluster_centers_``, ``inertia_``, ``n_iter_``) next to the ``HookedTransformer``
(``model_``), the built circuit (``circuit_``), the captured run (``capture_``) and the verification report
(``report_``). ``predict`` runs a circuit too: one update block commits the fitted centroids, one assign block
assigns the new points.

"""

from __future__ import annotations

import warnings
from numbers import Integral, Real
from typing import no_type_check

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from analysis.capture import PATHS
from analysis.data import check_iterations, check_magnitude, check_spread
from analysis.estimator.cache import built_circuit
from analysis.estimator.initial import initial_runs
from analysis.estimator.stopping import run_to_stop
from analysis.pipeline import DTYPES, RunOptions, choose_sharpness, run_problem
from analysis.verify.nearest import exact_nearest, misassigned
from analysis.verify.verdict import tie_text
from circuits import devices, reference
from circuits.encoding import fit_unit_scaling
from circuits.sharpness import Sharpness
from circuits.variants import check_variant


#: Points whose distances from the centroids differ by more than this factor are predicted in separate runs.
GROUP_FACTOR = 256.0
#: ``sklearn.utils.estimator_checks.check_estimator`` checks that fail by design, with the reason (pass as
#: ``expected_failed_checks``; docs/python.md explains each).
EXPECTED_FAILED_CHECKS = {
    "check_sample_weights_not_overwritten": "non-uniform sample_weight is refused: the circuit's update head "
                                            "averages a cluster's members with equal weight",
    "check_sample_weight_equivalence_on_dense_data": "non-uniform sample_weight is refused (see above), so weights "
                                                     "cannot stand for repeated points",
}


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


class DataPrecisionTieWarning(UserWarning):
    """Some comparisons of the kept run were ties at the data's precision: no float64 input can decide them, and
    they went to the lower index, as Lloyd's rule sends a tie (see ``report_.ties``, docs/exactness.md)."""


class CircuitKMeans(ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin, BaseEstimator):
    """k-means clustering computed by the k-means transformer.

    Parameters
    ----------
    n_clusters : number of clusters ``k``.
    max_iter : at most this many Lloyd iterations (a circuit of ``t`` iterations has ``2 t + 2`` blocks).
    init : ``"random"`` (distinct data points), ``"k-means++"``, an array of shape (n_clusters, n_features), or a
        callable ``init(X, n_clusters, random_state)`` returning such an array, as ``KMeans`` defines it
        (``random_state`` is a ``numpy.random.RandomState`` from this estimator's; each run calls it once).
    n_init : number of initialisations (seeds ``seed, seed + 1, ...``), or ``"auto"`` (``KMeans``'s rule: 10 for
        ``init="random"`` and a callable, 1 for ``"k-means++"`` and an array); every run is verified and the one with
        the lowest inertia is kept, as ``KMeans`` does. 1 for an explicit ``init`` array (with a warning if more
        were asked for, as ``KMeans``).
    tol : ``KMeans``'s convergence tolerance, relative to the data's mean per-feature variance. ``n_iter_`` is the
        first iteration after which the centroids moved by at most ``tol`` (or the assignment repeated), and
        ``cluster_centers_``, ``labels_`` and ``inertia_`` are read there, as ``KMeans`` stops there. Lloyd's
        circuit is run up to that iteration and no further (:mod:`analysis.estimator.stopping`: the result is exactly
        that of running all ``max_iter``; ``circuit_``, ``capture_`` and ``report_`` are of the iterations run);
        the variants run all ``max_iter``. The default 0 stops only when nothing changes (then later iterations
        would repeat the same state).
    random_state : seed of the initialisation: an int, a ``numpy.random.RandomState`` (one seed is drawn from it),
        or ``None``, which means 0 so that results are reproducible.
    variant : registered circuit variant (see :mod:`circuits.variants`).
    sharpness : a :class:`circuits.sharpness.Sharpness` used as it is; ``None`` (Lloyd's: tie-break and beta
        chosen from the data, see :func:`circuits.sharpness.for_problem`), or a ``dict`` of knobs to keep.
    dtype : ``"float64"`` (exact) or ``"float32"`` (an approximation).
    path : execution path, ``"auto"`` (the structured path for constructed circuits: a million points fit),
        ``"dense"`` (the plain ``HookedTransformer`` forward, up to ~12,000 tokens) or ``"structured"``.
    device : ``"cpu"`` (the default), ``"cuda"`` or ``"auto"`` (cuda where present); verified the same on either.
    n_threads : threads each run may use, the caller's included (:class:`analysis.scheduler.Scheduler`; ``None``:
        two at scale, from 50,000 points, where there are two CPUs, else one), as ``KMeans`` takes OpenMP's.
        The results do not depend on it.

    ``KMeans``'s ``algorithm`` and ``copy_x`` have no counterpart (it is Lloyd's; ``X`` is never modified), and
    ``fit``'s ``sample_weight`` is refused unless uniform: the update head averages members with equal weight
    (``score`` takes any weights). float32 data gives float32 ``cluster_centers_`` and ``transform``; the circuit
    itself runs in ``dtype``. Built circuits are reused across fits and predictions with the same weights, and
    Lloyd's circuits for new data of the same shape are derived from them (:func:`built_circuit`).
    """

    # scikit-learn's convention: __init__ stores its arguments and fit validates them (check_estimator sets wrong
    # types through it on purpose), so the test run's type checker leaves it alone.
    @no_type_check
    def __init__(self, n_clusters: int = 8, *, max_iter: int = 10, init="random", n_init=1,
                 tol: float = 0.0, random_state=0, variant: str = "lloyd", sharpness=None, dtype: str = "float64",
                 path: str = "auto", device: str = "cpu", n_threads: int | None = None):
        self.n_clusters = n_clusters
        self.max_iter = max_iter
        self.init = init
        self.n_init = n_init
        self.tol = tol
        self.random_state = random_state
        self.variant = variant
        self.sharpness = sharpness
        self.dtype = dtype
        self.path, self.device = path, device
        self.n_threads = n_threads

    #: KMeans's own constraints, checked by scikit-learn's machinery (``_fit_context``) before ``fit`` runs, so the
    #: estimator refuses what ``KMeans`` refuses, in its words (``tol=inf``, ``random_state=-1`` or ``2**32``,
    #: ``n_clusters=2.0``). ``max_iter=0`` is allowed (the initial assignment alone), and the circuit's own options
    #: are constrained alike.
    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "init": [StrOptions({"k-means++", "random"}), callable, "array-like"],
        "n_init": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "variant": [str],
        "sharpness": [None, dict, Sharpness],
        "dtype": [StrOptions(set(DTYPES))],
        "path": [StrOptions(set(PATHS))],
        "device": [str],
        "n_threads": [None, Interval(Integral, 1, None, closed="left")],
    }

    def _check_params(self) -> None:
        """What the constraints cannot say: a bool is an ``Integral`` to them, but ``KMeans(n_clusters=True)``
        fails (a ``TypeError``); the variant's spec and the device are checked too, before any work."""
        if isinstance(self.n_clusters, (bool, np.bool_)):
            raise InvalidParameterError(f"The 'n_clusters' parameter of {type(self).__name__} must be an int, not a"
                                        f" bool. Got {self.n_clusters!r} instead.")
        check_variant(self.variant, int(self.max_iter))  # VariantError is a ValueError, as scikit-learn expects
        devices.resolve(self.device)  # ValueError: unknown or absent device, or one the circuits do not run on

    def _inits(self, X: np.ndarray) -> list[np.ndarray]:
        """Initial centroids of every run (:func:`analysis.estimator.initial.initial_runs`)."""
        return initial_runs(X, int(self.n_clusters), self.init, self.n_init, self.random_state)

    def _best_run(self, X: np.ndarray, inits: list[np.ndarray]) -> tuple:
        """``(C0, result, n_iter, labels, centroids, inertia)`` of the verified run of lowest inertia among ``inits``
        (the first of equal ones)."""
        # Every initialisation runs the same circuit: built once (or reused), sharp enough for all of them.
        sharpness, resolution = choose_sharpness(X, inits, self.variant, self.sharpness, DTYPES[self.dtype])
        T, device = int(self.max_iter), str(devices.resolve(self.device))  # ValueError: unknown or absent device

        def circuit_for(iterations: int):
            return built_circuit(self.variant, X.shape[1], inits[0].shape[0], iterations, sharpness, self.dtype, device)

        tol = float(np.mean(np.var(X, axis=0)) * self.tol) if self.tol else 0.0
        best = None
        for C0 in inits:
            # Up to the stopping point, not beyond: the same result as running all max_iter (analysis.estimator.stopping).
            result, t = run_to_stop(X, C0, T, tol, self.variant, circuit_for, self.path, resolution, self.n_threads)
            final = t == result.circuit.iterations
            labels = result.labels if final else result.capture.assignments(t)[0]
            centres = result.centroids if final else result.capture.centroids(t)[0]
            kept = labels >= 0  # trimmed k-means' outliers (-1) are in no cluster
            inertia = reference.objective(result.capture.encoded.X[0][kept], centres, labels[kept])
            if best is None or inertia < best[-1]:
                best = (C0, result, t, labels, centres, inertia)
        return best

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, sample_weight=None):
        self._check_params()
        X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=1)
        out_dtype = X.dtype
        X = X.astype(np.float64)
        if sample_weight is not None:
            w = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
            if not np.all(w == w[0]):
                raise ValueError("sample_weight is not supported: the circuit's update head averages a cluster's "
                                 "members with equal weight (uniform positive weights are accepted)")
        check_magnitude(X, X.shape[0], "X")
        check_spread(X, "X")
        if X.shape[0] < int(self.n_clusters):  # KMeans's rule and words
            raise ValueError(f"n_samples={X.shape[0]} should be >= n_clusters={self.n_clusters}.")
        check_iterations(int(self.max_iter), X.shape[1], int(self.n_clusters), "max_iter")
        inits = self._inits(X)
        C0, result, t, labels, centres, inertia = self._best_run(X, inits)
        self.circuit_ = result.circuit
        self.capture_ = result.capture
        self.report_ = result.report
        self.resolution_ = result.resolution
        self.init_centroids_ = C0
        self.labels_ = labels.astype(np.int32)  # KMeans's dtype
        self.cluster_centers_ = centres.astype(out_dtype)
        self.inertia_ = inertia
        self.n_iter_ = t
        # A threshold given in data radii (trimmed k-means' radius) is fixed in the user's units by the fit:
        # predict holds it there, whatever the radius of the points it is given.
        theta = result.circuit.params.get("theta")
        self.threshold_ = None if theta is None else float(theta) * float(result.encoded.scaling.scale[0]) ** 2
        if not result.report.verified:
            warnings.warn(
                "the circuit disagrees with its reference: " + "; ".join(result.report.failures),
                CircuitMismatchWarning, stacklevel=2,
            )
        elif ties := tie_text([tie for tie in result.report.ties if tie.bounds]):
            warnings.warn(ties, DataPrecisionTieWarning, stacklevel=2)
        distinct = len(set(self.labels_[self.labels_ >= 0].tolist()))
        if distinct < int(self.n_clusters):
            warnings.warn(f"Number of distinct clusters ({distinct}) found smaller than n_clusters"
                          f" ({self.n_clusters}). Possibly due to duplicate points in X.", ConvergenceWarning,
                          stacklevel=2)
        return self

    #: The run a fit keeps for inspection; pickling leaves it out (its circuit holds hooks and variant functions that
    #: do not pickle). An unpickled estimator predicts, transforms and scores; refit it to look inside again.
    _RUN_ATTRIBUTES = ("circuit_", "capture_", "report_")

    @property
    def model_(self):
        """The fitted circuit's ``HookedTransformer``, built on first access (the fit itself runs the circuit's
        weights on the structured path without it)."""
        return self.circuit_.model

    def __getstate__(self):
        state = super().__getstate__()
        return {key: value for key, value in state.items() if key not in self._RUN_ATTRIBUTES}

    @property
    def _n_features_out(self) -> int:
        """Number of transformed output features (``get_feature_names_out``: ``circuitkmeans0``, ...)."""
        return self.cluster_centers_.shape[0]

    def fit_predict(self, X, y=None, sample_weight=None):
        return self.fit(X, sample_weight=sample_weight).labels_

    def predict(self, X):
        """Nearest fitted centroid of each point, computed by a two-block circuit (commit, then assign) and verified.

        Each point's label depends on the centroids alone, so points are run in groups of similar distance from
        the centroids (within a factor of 256): a far point then cannot coarsen what float64 resolves for the
        others. Every group is verified against the nearest-centroid reference, and every label is then checked to
        be the exact nearest fitted centroid at the point's precision, the lowest index among those the point's
        float64 values cannot tell apart (:func:`misassigned`; the fitted centroids are fixed, the verification's
        reference also lets their own precision tie). A group the circuit cannot resolve raises ``ValueError``
        rather than returning a wrong label.
        """
        X = self._checked(X)
        centres = self.cluster_centers_.astype(np.float64)
        labels = np.empty(len(X), dtype=np.int32)
        for group in _magnitude_groups(X, centres):
            result = self._run_group(X[group], centres)
            if not result.report.verified:
                raise ValueError(f"predict: the circuit cannot resolve {len(group)} point(s) exactly: "
                                 + "; ".join(result.report.failures))
            # The verifier excuses a label that float64 cannot tell from the nearest in the circuit's (unit)
            # coordinates; predict promises the exact nearest centroid of the user's values, so it checks that.
            # Only a distance head promises the nearest centroid (Lloyd's and the variants that keep it; trimmed
            # k-means' outliers, labelled -1, are the threshold's, which the verifier checks).
            kept = np.flatnonzero(result.labels >= 0) if result.circuit.spec.distance_head else np.zeros(0, int)
            wrong = kept[misassigned(X[group[kept]], centres, result.labels[kept])]
            if wrong.size:
                row = int(group[wrong[0]])
                raise ValueError(
                    f"predict: the circuit cannot resolve {wrong.size} point(s) (first: row {row}, "
                    f"labelled {int(result.labels[wrong[0]])}, nearest centroid at its precision "
                    f"{exact_nearest(X[row], centres)}): float64 in the circuit's coordinates cannot separate "
                    "their nearest centroids (points very far from the centroids, or very near a bisector)")
            labels[group] = result.labels
        return labels

    def _checked(self, X, dtype=np.float64) -> np.ndarray:
        """``X`` validated against the fit, and small enough that its squared distances to the centroids (and
        their sum) are finite: beyond that every distance is inf and the nearest centroid cannot be told."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=dtype, reset=False)
        check_magnitude(X, X.shape[0], "X")
        return X

    def _run_group(self, X: np.ndarray, centres: np.ndarray):
        """One verified assign-only run of ``X`` against the fitted centroids (see :meth:`predict`)."""
        threshold = getattr(self, "threshold_", None)
        options = {"device": str(devices.resolve(self.device))}  # ValueError: an unknown or absent device
        if threshold is not None:
            # The variant's radius is relative to this run's data radius: choose it so the threshold is the fitted
            # one (a radius of 2 data radii or more keeps every point, so 4, the largest allowed, is any more).
            scale = float(fit_unit_scaling(X, centres).scale[0])
            options["radius"] = min(float(np.sqrt(threshold)) / scale, 4.0)
        sharpness, resolution = choose_sharpness(X, [centres], self.variant, self.sharpness, DTYPES[self.dtype])
        circuit = built_circuit(self.variant, X.shape[1], centres.shape[0], 0, sharpness, self.dtype, **options)
        return run_problem(X, centres, 0, self.variant, circuit=circuit, resolution=resolution,
                           options=RunOptions(path=self.path, threads=self.n_threads))

    def transform(self, X):
        """Euclidean distance of each point to each fitted centroid (as ``KMeans.transform``; float32 stays float32)."""
        X = self._checked(X, dtype=[np.float64, np.float32])
        D = np.sqrt(reference.sq_distances(X.astype(np.float64), self.cluster_centers_.astype(np.float64)))
        return D.astype(X.dtype)

    def score(self, X, y=None, sample_weight=None):
        """Negative k-means objective of ``X`` under the fitted centroids, weighted by ``sample_weight`` (as
        ``KMeans.score``)."""
        X = self._checked(X)
        w = _check_sample_weight(sample_weight, X, dtype=np.float64)
        D = reference.sq_distances(X, self.cluster_centers_.astype(np.float64))
        return -float(np.dot(w, D.min(axis=1)))
