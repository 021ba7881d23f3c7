"""A scikit-learn estimator backed by the k-means circuit: :class:`CircuitKMeans`, used wherever
``sklearn.cluster.KMeans`` is.

:mod:`~analysis.estimator.kmeans` is the estimator; :mod:`~analysis.estimator.initial` its initial centroids as
``KMeans`` defines them; :mod:`~analysis.estimator.stopping` runs one initialisation up to ``KMeans``'s stopping
point; :mod:`~analysis.estimator.cache` keeps the built circuits that fits and predictions reuse. It lives in
``analysis/`` rather than ``circuits/`` because it verifies, and models do not know who looks at them.
"""

from analysis.estimator.cache import built_circuit, clear_circuit_cache, with_assign_knobs
from analysis.estimator.initial import AUTO_N_INIT_RANDOM
from analysis.estimator.kmeans import (
    EXPECTED_FAILED_CHECKS, CircuitKMeans, CircuitMismatchWarning, DataPrecisionTieWarning,
)
from analysis.estimator.stopping import stopping_point
from analysis.verify.nearest import misassigned

__all__ = [
    "AUTO_N_INIT_RANDOM", "EXPECTED_FAILED_CHECKS", "CircuitKMeans", "CircuitMismatchWarning", "DataPrecisionTieWarning",
    "built_circuit",
    "clear_circuit_cache", "misassigned", "stopping_point", "with_assign_knobs",
]
