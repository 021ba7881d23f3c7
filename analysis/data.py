"""Input of a clustering problem: bundled datasets, user files, initial centroids — validated before any work.

Every problem with the input raises :class:`~analysis.errors.ProblemError` (a ``ValueError``) with a one-line
message; where one parameter is at fault it names it (``field``: ``k``, ``iterations``, ...), and a front end
names it its own way (the command line: ``--k``, exit code 2). Nothing here imports torch or TransformerLens, so
bad input is rejected in well under a second.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.errors import ProblemError

DATASETS = ("iris", "wine", "breast_cancer", "digits", "blobs")

#: Points of the synthetic blobs that ``evaluate`` runs a model on (:mod:`analysis.evaluation.real`).
EVALUATION_BLOBS_N = 1000

#: The name this error had when it lived here (kept for one release: docs/extending.md and other packages use it).
InputError = ProblemError


@dataclass
class Dataset:
    """Points ``X`` (n, d) in the data's own units, and the true labels where the dataset has them."""

    name: str
    X: np.ndarray
    y: np.ndarray | None = None


#: The bundled datasets' files in scikit-learn's ``datasets/data`` folder: (file, its first row holds the shape).
_BUNDLED = {"iris": ("iris.csv", True), "wine": ("wine_data.csv", True), "breast_cancer": ("breast_cancer.csv", True),
            "digits": ("digits.csv.gz", False)}


def load_dataset(name: str, n: int = 500, d: int = 2, centers: int = 3, seed: int = 0) -> Dataset:
    """A dataset bundled with scikit-learn (no download), or synthetic blobs of ``n`` points in ``d`` dimensions."""
    if name not in DATASETS:
        raise ProblemError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if name in _BUNDLED:
        bundled = _read_bundled(name)
        if bundled is not None:
            return bundled
    from sklearn import datasets

    if name == "blobs":
        if n < 1 or d < 1 or centers < 1:
            raise ProblemError(f"blobs needs n, d and centers >= 1, got n={n}, d={d}, centers={centers}")
        if centers > n:  # a blob without a point; and a billion centres would be drawn for nothing
            raise ProblemError(f"blobs needs centers <= n (a blob per point at most), got centers={centers}, n={n}")
        # The points and the blob centres, float64: beyond memory, numpy fails with a ValueError, not a message.
        need, have = (n + centers) * d * 8, physical_memory() or 2**63
        if need > have:
            raise ProblemError(f"blobs of n={n} points and {centers} centres in d={d} dimensions need"
                               f" {need / 2**30:.3g} GiB, more than this machine's {have / 2**30:.3g} GiB of memory")
        X, y = datasets.make_blobs(n_samples=n, n_features=d, centers=centers, random_state=seed)
        return Dataset("blobs", np.asarray(X, dtype=np.float64), y)
    bunch = getattr(datasets, f"load_{name}")()
    return Dataset(name, np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target))


def _read_bundled(name: str) -> Dataset | None:
    """scikit-learn's own file of a bundled dataset, read without importing scikit-learn (which takes a second and
    more: it loads scipy and pandas); ``None`` (use scikit-learn's loader) if the file is not where, or not what,
    it was. The file holds one row per sample, the target last; tests/unit/test_data.py checks that this equals
    ``sklearn.datasets.load_<name>()``."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        return None
    file, shape_row = _BUNDLED[name]
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / file
    try:
        rows = np.loadtxt(path, delimiter=",", skiprows=1 if shape_row else 0, dtype=np.float64, ndmin=2)
        if shape_row:
            with path.open() as head:
                n_samples, n_features = (int(v) for v in head.readline().split(",")[:2])
            if rows.shape != (n_samples, n_features + 1):
                return None
    except (OSError, ValueError):
        return None
    target = rows[:, -1]
    if not np.array_equal(target, np.round(target)):
        return None
    return Dataset(name, np.ascontiguousarray(rows[:, :-1]), target.astype(int))


def _parse_float(cell: str) -> float:
    return float(cell.strip())


def load_points(path: str | Path, what: str = "data") -> np.ndarray:
    """A numeric 2-D array from ``.csv`` (header optional) or ``.npy``; one row per point."""
    if not str(path):
        # Path("") is ".", which would be reported as a folder.
        raise ProblemError(f"{what} file name is empty; give a .csv or .npy file")
    path = Path(path)
    if not path.exists():
        raise ProblemError(f"{what} file {str(path)!r} does not exist")
    if path.is_dir():
        raise ProblemError(f"{what} file {str(path)!r} is a folder; give a .csv or .npy file")
    if not path.is_file():
        # A FIFO or a device would block or never end; only a regular file has rows to count.
        raise ProblemError(f"{what} file {str(path)!r} is not a regular file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise ProblemError(f"{what} file {path.name}: not a plain numeric .npy array ({exc})") from None
        except Exception as exc:  # corrupt header, truncated file, ...
            raise ProblemError(f"{what} file {path.name}: cannot be read as .npy ({type(exc).__name__})") from None
        if arr.dtype.kind not in "biuf":
            raise ProblemError(f"{what} file {path.name}: array of dtype {arr.dtype} is not numeric")
        with np.errstate(over="ignore", invalid="ignore"):
            # A longdouble or a huge integer beyond float64 becomes inf, which the finiteness check names in one
            # line; numpy's RuntimeWarning would come first.
            arr = np.asarray(arr, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2:
            raise ProblemError(f"{what} file {path.name}: expected a 2-D array (one row per point), got shape {arr.shape}")
    elif suffix == ".csv":
        arr = _load_csv(path, what)
    else:
        raise ProblemError(f"{what} file {path.name}: unsupported type {suffix or '(none)'}; use .csv or .npy")
    return _check_finite_nonempty(arr, f"{what} file {path.name}")


def _load_csv(path: Path, what: str) -> np.ndarray:
    try:
        text = path.read_text(encoding="utf-8-sig")  # spreadsheet exports start with a byte-order mark
    except UnicodeDecodeError:
        raise ProblemError(f"{what} file {path.name}: not a text file") from None
    except OSError as exc:
        raise ProblemError(f"{what} file {path.name}: cannot be read ({exc.strerror or exc})") from None
    rows = [row for row in csv.reader(text.splitlines()) if any(cell.strip() for cell in row)]
    if not rows:
        raise ProblemError(f"{what} file {path.name}: no rows")
    parsed: list[list[float]] = []
    for line, row in enumerate(rows, start=1):
        try:
            parsed.append([_parse_float(cell) for cell in row])
        except ValueError:
            bad = [cell for cell in row if not _is_number(cell)]
            if line == 1 and len(bad) == len(row):
                continue  # a header row: no cell of it is a number
            raise ProblemError(f"{what} file {path.name}: non-numeric value {bad[0].strip()!r} in row {line}") from None
    if not parsed:
        raise ProblemError(f"{what} file {path.name}: no numeric rows")
    width = len(parsed[0])
    for i, row in enumerate(parsed):
        if len(row) != width:
            raise ProblemError(f"{what} file {path.name}: ragged rows ({len(row)} values in a data row, {width} in the first)")
    return np.asarray(parsed, dtype=np.float64)


def _is_number(cell: str) -> bool:
    try:
        _parse_float(cell)
        return True
    except ValueError:
        return False


def _check_finite_nonempty(arr: np.ndarray, where: str) -> np.ndarray:
    if arr.size == 0 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ProblemError(f"{where}: empty data")
    if not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ProblemError(f"{where}: NaN or inf at row {bad[0] + 1}, column {bad[1] + 1}")
    return arr


def check_magnitude(arr: np.ndarray, n: int, where: str) -> None:
    """Reject coordinates so large that squared distances, or their sum over ``n`` points, overflow float64.

    Two rows whose coordinates are at most ``M`` in absolute value are at squared distance at most ``4 d M^2``, and
    the objective sums ``n`` of those; the expansion ``|x|^2 - 2 x.c + |c|^2`` stays within the same bound. A factor
    of 4 more leaves room for partial sums. Beyond that, NaN and inf would reach the results instead of numbers.
    """
    d = arr.shape[1]
    limit = float(np.sqrt(np.finfo(np.float64).max / (16.0 * max(n, 1) * d)))
    peak = float(np.abs(arr).max())
    if peak > limit:
        row, col = np.unravel_index(int(np.abs(arr).argmax()), arr.shape)
        raise ProblemError(f"{where}: magnitude {peak:.3g} at row {row + 1}, column {col + 1} is too large: squared"
                           f" distances summed over {n} points in {d} dimensions overflow float64 (at most"
                           f" {limit:.3g} here; rescale the data)")


#: Squared distances below this are subnormal in float64 (fewer than 53 significant bits): too coarse to compare.
_SMALLEST_RESOLVED_SQ = float(np.finfo(np.float64).tiny) * 2.0**53


def check_spread(X: np.ndarray, where: str) -> None:
    """Reject data whose spread is so small that squared distances between its points underflow float64.

    The reference computes ``|x - c|^2`` in the user's units; below ``tiny * 2**53`` those values lose precision
    (subnormal) or vanish, and every point would look tied. Identical points (no spread) are fine.
    """
    spread = float(np.abs(X - np.median(X, axis=0)).max()) if len(X) else 0.0
    if 0.0 < spread and spread**2 < _SMALLEST_RESOLVED_SQ:
        raise ProblemError(f"{where}: the points spread over only {spread:.3g}: squared distances underflow float64"
                           f" (below {np.sqrt(_SMALLEST_RESOLVED_SQ):.3g} they cannot be compared); rescale the data")


def physical_memory() -> int | None:
    """Bytes of physical memory, or ``None`` where the system does not say."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def check_iterations(iterations: int, d: int, k: int, what: str = "iterations") -> None:
    """Reject an iteration count whose circuit cannot be held in memory, before anything is built.

    The circuit has ``2 T + 2`` blocks, each with query, key, value and output weights of at least ``d_model^2``
    float64 numbers in all: a lower bound on what building it takes. Beyond physical memory (or beyond what an
    index can count, where the system does not say) the build could only run for hours and then fail. ``what``
    is the parameter's name in the caller's terms (the :class:`~analysis.errors.ProblemError`'s ``field``).
    """
    from circuits.layout import ResidualLayout

    if iterations < 0:
        raise ProblemError(f"must be >= 0, got {iterations}", what)
    d_model = ResidualLayout(d, k).d_model
    need = (2 * iterations + 2) * d_model**2 * 8
    have = physical_memory() or 2**63
    if need > have:
        raise ProblemError(f"{iterations} with d={d}, k={k} is too large: the circuit's {2 * iterations + 2}"
                           f" blocks need at least {need / 2**30:.3g} GiB for their weights alone, more than this"
                           f" machine's {have / 2**30:.3g} GiB of memory", what)


#: The most Lloyd iterations a constructed circuit runs: 2 T + 2 layers, each a transformer block run in Python
#: (about 0.06 s each on 30 points, 2 cores), so the limit's circuit runs for minutes; Lloyd's usually converges
#: in tens of iterations.
MAX_ITERATIONS = 1000


def check_work(iterations: int, d: int, k: int, what: str = "iterations") -> None:
    """:func:`check_iterations`, and at most :data:`MAX_ITERATIONS`: beyond it a run would take hours, not fail."""
    check_iterations(iterations, d, k, what)
    if iterations > MAX_ITERATIONS:
        raise ProblemError(f"{iterations} is more than this tool runs: at most {MAX_ITERATIONS} iterations"
                           f" ({2 * MAX_ITERATIONS + 2} layers, minutes of work; Lloyd's usually converges in tens)",
                           what)


def validate_problem(X: np.ndarray, k: int) -> None:
    """Reject problems the circuit cannot pose: empty data, k < 1, k above the number of distinct points."""
    _check_finite_nonempty(X, "data")
    check_magnitude(X, X.shape[0], "data")
    check_spread(X, "data")
    if k < 1:
        raise ProblemError(f"must be at least 1, got {k}", "k")
    if k > _distinct_rows_at_least(X, k):
        raise ProblemError(f"{k} exceeds the number of distinct points ({len(np.unique(X, axis=0))})", "k")


#: Rows whose distinct count :func:`_distinct_rows_at_least` reads first: ``np.unique(X, axis=0)`` sorts every row
#: (0.7 s at a million points), where the first rows nearly always hold k distinct ones already.
_DISTINCT_PREFIX = 4096


def _distinct_rows_at_least(X: np.ndarray, k: int) -> int:
    """The number of distinct rows of ``X`` where that is below ``k``; otherwise some count of at least ``k``
    (the distinct rows of a prefix, if those reach ``k``): what the check against ``k`` needs, without sorting
    every row of a large ``X``."""
    if len(X) > _DISTINCT_PREFIX:
        in_prefix = len(np.unique(X[:_DISTINCT_PREFIX], axis=0))
        if in_prefix >= k:
            return in_prefix
    return len(np.unique(X, axis=0))


def resolve_init(init: str, X: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, str]:
    """Initial centroids for ``init`` (``random``, ``k-means++`` or a file of k rows) and a description."""
    from circuits.initialisation import INIT_METHODS, initial_centroids

    if init in INIT_METHODS:
        return initial_centroids(X, k, init, seed), f"{init} (seed {seed})"
    C0 = load_points(init, what="init")
    if C0.shape != (k, X.shape[1]):
        raise ProblemError(f"init file {Path(init).name}: expected {k} rows of {X.shape[1]} values, got shape {C0.shape}")
    check_magnitude(C0, X.shape[0], f"init file {Path(init).name}")
    return C0, f"file {Path(init).name}"

