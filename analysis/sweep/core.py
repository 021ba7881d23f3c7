"""The sweep's grid, runners, rows and finding; :mod:`analysis.sweep` says what the sweep is and names its API."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, field, replace
from collections.abc import Callable, Iterator

import numpy as np
from jaxtyping import Float

from analysis.errors import ProblemError
from analysis.sweep.limits import range_problem

#: Relative gaps below this are rounding: the soft circuit has become Lloyd's to float64 precision.
GAP_FLOOR = 1e-12
#: A comparison goes "the wrong way" only if the gap moves by more than this factor against the trend (and
#: either side is above the floor): differences smaller than that are within the scatter of a few seeds.
TREND_SLACK = 1.05

AXES = ("d", "k", "n", "scale")
#: The four heatmaps: (y axis, x axis).
PAIRS: tuple[tuple[str, str], ...] = (("k", "scale"), ("d", "k"), ("n", "k"), ("n", "d"))

Runner = Callable[[Float[np.ndarray, "batch n d"], Float[np.ndarray, "batch k d"], float, int],
                  Float[np.ndarray, "batch k d"]]


@dataclass(frozen=True)
class SweepGrid:
    """Stiffnesses, the values of each axis, the base value of each axis, seeds per cell and iterations."""

    betas: tuple[float, ...] = (1.0, 10.0, 100.0)
    d: tuple[int, ...] = (2, 4, 8)
    k: tuple[int, ...] = (2, 4, 8)
    n: tuple[int, ...] = (64, 128, 256)
    scale: tuple[float, ...] = (0.3, 1.0, 3.0, 10.0)
    base: dict = field(default_factory=lambda: {"d": 2, "k": 4, "n": 128, "scale": 1.0})
    seeds: int = 3
    iterations: int = 10

    def cells(self) -> Iterator[tuple[tuple[str, str], dict]]:
        """Every (pair, parameters) of the four grids; a cell shared by two grids is listed in both."""
        for y, x in PAIRS:
            for vy in getattr(self, y):
                for vx in getattr(self, x):
                    params = dict(self.base)
                    params[y], params[x] = vy, vx
                    yield (y, x), params

    def validate(self) -> None:
        if not self.betas or any(not (b > 0 and math.isfinite(b)) for b in self.betas):
            raise ValueError(f"betas must be positive, got {self.betas}")
        for axis in AXES:
            values = getattr(self, axis)
            if not values:
                raise ProblemError("needs at least one value", axis)
            if axis == "scale":
                if any(not (v > 0 and math.isfinite(v)) for v in values):
                    raise ValueError(f"scales must be positive, got {values}")
            elif any(int(v) != v or v < 1 for v in values):
                raise ProblemError(f"values must be positive integers, got {values}", axis)
        self.check_range()
        for ks, ns in ((self.k, self.n), ((self.base["k"],), self.n), (self.k, (self.base["n"],))):
            if max(ks) > min(ns):
                raise ValueError(f"k = {max(ks)} exceeds n = {min(ns)}: every cell needs k <= n")
        if self.seeds < 1 or self.iterations < 1:
            raise ValueError(f"need seeds >= 1 and iterations >= 1, got {self.seeds} and {self.iterations}")

    def check_range(self) -> None:
        """Refuse scales and stiffnesses whose arithmetic float64 cannot carry (see :func:`range_problem`)."""
        reason = range_problem(max(self.betas), max(self.scale + (self.base["scale"],)),
                               min(self.scale + (self.base["scale"],)), max(self.d + (self.base["d"],)),
                               max(self.n + (self.base["n"],)))
        if reason:
            raise ValueError(reason)

    @property
    def n_problems(self) -> int:
        return sum(1 for _ in self.cells()) * len(self.betas) * self.seeds


GRIDS: dict[str, SweepGrid] = {
    "tiny": SweepGrid(betas=(1.0, 100.0), d=(1, 2), k=(2, 3), n=(12, 24), scale=(0.5, 5.0),
                      base={"d": 2, "k": 2, "n": 16, "scale": 1.0}, seeds=1, iterations=10),
    "default": SweepGrid(),
    # The paper's full parameter ranges, up to a million points: run it on the structured path (``--full``).
    "full": SweepGrid(d=(2, 8, 32), k=(2, 5, 10, 20), n=(1_000, 10_000, 100_000, 1_000_000), scale=(0.1, 1.0, 10.0),
                      base={"d": 2, "k": 5, "n": 10_000, "scale": 1.0}, seeds=1),
    "large": SweepGrid(d=(2, 4, 8, 16), k=(2, 4, 8, 16), n=(128, 256, 512, 1024), scale=(0.1, 0.3, 1.0, 3.0, 10.0),
                       base={"d": 2, "k": 4, "n": 256, "scale": 1.0}, seeds=5),
}


def mixture_problem(d: int, k: int, n: int, scale: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The paper's Gaussian mixture (:class:`circuits.problems.PaperMixture`) in ``[0, scale]^d``, drawn from the
    stream of ``(seed, d, k, n)``, and ``k`` distinct data points as initial centroids (``random``, seed ``seed``)."""
    from circuits.initialisation import initial_centroids
    from circuits.problems import PaperMixture

    X = PaperMixture(n, d, k, scale=scale).sample(np.random.default_rng([seed, d, k, n]), 1)[0][0]
    return X, initial_centroids(X, k, "random", seed)


# -- runners --------------------------------------------------------------------------------------------------
def reference_runner(X, C0, beta: float, iterations: int):
    """The numpy soft k-means reference, problem by problem."""
    from circuits.variants.soft import SoftKMeans

    ref = SoftKMeans(beta=beta, prior=_prior())
    return np.stack([ref.run(x, c, iterations).final_centroids for x, c in zip(X, C0)])


def _prior() -> float:
    from circuits.variants.soft import DEFAULT_PRIOR

    return DEFAULT_PRIOR


def circuit_runner(X, C0, beta: float, iterations: int, device: str = "cpu"):
    """The soft k-means ``HookedTransformer`` on the whole batch (one model per batch and stiffness), on ``device``.

    The batch shares one encoder radius ``S`` (the largest of its problems), so one unit-frame stiffness
    ``beta * S^2`` serves every problem of it."""
    import torch

    from circuits import hook_names
    from circuits.encoding import UnitScaling, decode, encode, fit_unit_scaling
    from circuits.variants.soft import build_soft_circuit

    X, C0 = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64)
    fitted = fit_unit_scaling(X, C0)
    S = float(fitted.scale.max())
    scaling = UnitScaling(fitted.offset, np.full(X.shape[0], S))
    circuit = build_soft_circuit(X.shape[2], C0.shape[1], iterations, beta=beta * S**2, device=device)
    enc = encode(circuit.layout, X, C0, scaling=scaling, device=device)
    last = hook_names.resid_post(circuit.centroid_layers[-1])
    with torch.no_grad():
        _, cache = circuit.model.run_with_cache(enc.resid, start_at_layer=0, stop_at_layer=circuit.centroid_layers[-1] + 1,
                                                names_filter=hook_names.names_filter({last}))
    return decode(circuit.layout, cache[last], enc.sequence, enc.scaling).centroids


def structured_runner(X, C0, beta: float, iterations: int, device: str = "cpu"):
    """The soft k-means circuit's weights on the structured execution path (:mod:`circuits.structured`), one
    problem at a time: the same residual stream as :func:`circuit_runner` in O(n k d) per layer, so the sweep
    reaches a million points. Same shared encoder radius as :func:`circuit_runner`."""
    from circuits.encoding import UnitScaling, decode, encode, fit_unit_scaling
    from circuits.structured import Recording, structured_forward
    from circuits.variants.soft import build_soft_circuit

    X, C0 = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64)
    fitted = fit_unit_scaling(X, C0)
    S = float(fitted.scale.max())
    circuit = build_soft_circuit(X.shape[2], C0.shape[1], iterations, beta=beta * S**2, device=device)
    last = circuit.centroid_layers[-1]
    out = []
    for b in range(X.shape[0]):
        scaling = UnitScaling(fitted.offset[b : b + 1], np.array([S]))
        enc = encode(circuit.layout, X[b], C0[b], scaling=scaling, device=device)
        seen = {}

        def keep_last(layer: int, record) -> None:
            if layer == last:
                seen["resid"] = record.resid_post

        structured_forward(circuit.model, enc.resid, circuit.score_hooks, Recording(keep_last))
        out.append(decode(circuit.layout, seen["resid"], enc.sequence, enc.scaling).centroids[0])
    return np.stack(out)


RUNNERS: dict[str, Runner] = {"circuit": circuit_runner, "structured": structured_runner, "reference": reference_runner}


# -- the sweep ------------------------------------------------------------------------------------------------
@dataclass
class SweepRow:
    grid: str  # "k-scale", ...
    d: int
    k: int
    n: int
    scale: float
    beta: float
    seed: int
    objective_soft: float
    objective_lloyd: float
    gap: float  # (J_soft - J_lloyd) / J_lloyd
    deviation_from_reference: float  # max |c_runner - c_soft_reference|, in the data's units

    @property
    def cell(self) -> tuple:
        return (self.grid, self.d, self.k, self.n, self.scale)


def sweep_cell(job: tuple[SweepGrid, Runner], cell: tuple[tuple[str, str], dict]) -> list[SweepRow]:
    """One cell of one grid at every stiffness, ``grid.seeds`` problems, one runner call per stiffness. Its
    problems are seeded by the cell's parameters alone, so any engine, any worker, gives the same rows."""
    from circuits import reference

    (grid, runner), ((y, x), params) = job, cell
    d, k, n, scale = int(params["d"]), int(params["k"]), int(params["n"]), float(params["scale"])
    problems = [mixture_problem(d, k, n, scale, seed) for seed in range(grid.seeds)]
    X = np.stack([p[0] for p in problems])
    C0 = np.stack([p[1] for p in problems])
    lloyd = [reference.lloyd(X[s], C0[s], grid.iterations).final_centroids for s in range(grid.seeds)]
    rows = []
    for beta in grid.betas:
        soft = runner(X, C0, beta, grid.iterations)
        soft_ref = soft if runner is reference_runner else reference_runner(X, C0, beta, grid.iterations)
        for s in range(grid.seeds):
            j_soft = reference.objective(X[s], soft[s])
            j_lloyd = reference.objective(X[s], lloyd[s])
            rows.append(SweepRow(f"{y}-{x}", d, k, n, scale, float(beta), s, j_soft, j_lloyd,
                                 (j_soft - j_lloyd) / j_lloyd if j_lloyd > 0 else 0.0,
                                 float(np.abs(soft[s] - soft_ref[s]).max())))
    return rows


def describe_cell(cell: tuple[tuple[str, str], dict]) -> str:
    (y, x), params = cell
    return f"grid={y}-{x} " + " ".join(f"{axis}={params[axis]:g}" for axis in AXES)


def sweep_cells(grid: SweepGrid, runner: Runner = circuit_runner, progress: Callable[[int], None] | None = None,
                engine: str = "serial", address: str | None = None):
    """Every cell of ``grid`` on ``engine`` (:func:`analysis.engine.map_cells`): an ``Outcome`` whose results
    are each cell's rows, in the order of :meth:`SweepGrid.cells`."""
    from analysis.engine import map_cells

    grid.validate()
    return map_cells(sweep_cell, list(grid.cells()), engine, address, progress, shared=(grid, runner),
                     describe=describe_cell)


def run_sweep(grid: SweepGrid, runner: Runner = circuit_runner, progress: Callable[[int], None] | None = None,
              engine: str = "serial", address: str | None = None) -> list[SweepRow]:
    """Every cell of ``grid`` at every stiffness, ``grid.seeds`` problems each; a cell that fails twice raises."""
    outcome = sweep_cells(grid, runner, progress, engine, address)
    outcome.raise_first()
    return [row for rows in outcome.results for row in rows]


def cell_gap(rows: list[SweepRow]) -> float:
    """A cell's gap: the mean over seeds of ``|gap|`` (soft can also land *below* Lloyd's, a negative gap)."""
    return float(np.mean([abs(r.gap) for r in rows]))


def aggregate(rows: list[SweepRow]) -> dict[tuple, float]:
    """``{(grid, d, k, n, scale, beta): cell gap}``."""
    groups: dict[tuple, list[SweepRow]] = {}
    for r in rows:
        groups.setdefault((*r.cell, r.beta), []).append(r)
    return {key: cell_gap(group) for key, group in groups.items()}


def log_gap(gap: float) -> float:
    return math.log10(max(gap, GAP_FLOOR))


# -- the paper's qualitative finding --------------------------------------------------------------------------
@dataclass
class TrendCheck:
    """One claim ("the gap shrinks as beta grows") checked on every pair of neighbouring grid cells."""

    claim: str
    comparisons: int
    violations: list[str]

    @property
    def holds(self) -> bool:
        return not self.violations


def _wrong_way(smaller_expected: float, larger_expected: float) -> bool:
    """True if ``smaller_expected`` exceeds ``larger_expected`` beyond the slack (both at the floor: fine)."""
    if max(smaller_expected, larger_expected) < GAP_FLOOR:
        return False
    return smaller_expected > TREND_SLACK * max(larger_expected, GAP_FLOOR)


def trend_checks(rows: list[SweepRow]) -> list[TrendCheck]:
    """The three claims of the paper, each on every neighbouring pair of cells along its axis."""
    agg = aggregate(rows)
    fields = ("grid", "d", "k", "n", "scale")
    betas = sorted({r.beta for r in rows})

    def describe(key) -> str:
        return ", ".join(f"{f}={v:g}" if isinstance(v, (int, float)) else f"{f}={v}" for f, v in zip(fields, key))

    checks = []
    # 1. Stiffness: along beta in every cell.
    cells = sorted({key[:5] for key in agg})
    violations, count = [], 0
    for cell in cells:
        for b1, b2 in zip(betas, betas[1:]):
            g1, g2 = agg[(*cell, b1)], agg[(*cell, b2)]
            count += 1
            if _wrong_way(g2, g1):
                violations.append(f"{describe(cell)}: gap {g2:.3g} at beta={b2:g} > {g1:.3g} at beta={b1:g}")
    checks.append(TrendCheck("the gap shrinks as the stiffness (temperature) beta grows", count, violations))
    # 2. and 3. Scale (shrinks) and k (grows), along the axis within each grid that varies it.
    for axis, shrinks in (("scale", True), ("k", False)):
        index = fields.index(axis)
        violations, count = [], 0
        lines: dict[tuple, list[tuple]] = {}
        for key in agg:
            grid_name = key[0]
            if axis not in grid_name.split("-"):
                continue
            line = (*key[:index], *key[index + 1:])
            lines.setdefault(line, []).append(key)
        for line, keys in lines.items():
            keys.sort(key=lambda kk: kk[index])
            for a, b in zip(keys, keys[1:]):
                ga, gb = agg[a], agg[b]
                count += 1
                wrong = _wrong_way(gb, ga) if shrinks else _wrong_way(ga, gb)
                if wrong:
                    trend = "grows" if shrinks else "shrinks"
                    violations.append(f"{describe(a[:5])}, beta={a[5]:g}: gap {trend} from {ga:.3g} to {gb:.3g}"
                                      f" as {axis} goes {a[index]:g} -> {b[index]:g}")
        claim = "the gap shrinks as the data scale grows" if shrinks else "the gap grows with k"
        checks.append(TrendCheck(claim, count, violations))
    return checks


def finding_undetermined(rows: list[SweepRow], missing: int = 0) -> str | None:
    """Why the rows cannot decide the paper's finding, or ``None``: a run whose objectives or gap are not finite
    numbers, or cells that failed (a comparison that was never made cannot agree)."""
    broken = [r for r in rows if not all(math.isfinite(v) for v in (r.objective_soft, r.objective_lloyd, r.gap))]
    why = []
    if broken:
        r = broken[0]
        why.append(f"{len(broken)} run(s) with a non-finite objective or gap (e.g. {r.grid} d={r.d} k={r.k} n={r.n}"
                   f" scale={r.scale:g} beta={r.beta:g}: gap {r.gap})")
    if missing:
        why.append(f"{missing} cell(s) failed and are missing")
    return "; ".join(why) or None


def summary_lines(rows: list[SweepRow], checks: list[TrendCheck], max_listed: int = 20, missing: int = 0) -> list[str]:
    """What the sweep found, for people: one verdict per claim and every comparison that goes the wrong way.
    ``missing``: cells that failed; with any, or with a non-finite run, the finding is UNDETERMINED, never YES."""
    lines = []
    total = sum(c.comparisons for c in checks)
    agree = total - sum(len(c.violations) for c in checks)
    undetermined = finding_undetermined(rows, missing)
    if undetermined:
        lines.append(f"reproduces the paper's qualitative finding: UNDETERMINED ({undetermined})")
    elif all(c.holds for c in checks):
        lines.append(f"reproduces the paper's qualitative finding: YES ({agree}/{total} neighbouring comparisons agree)")
    else:
        seeds = len({r.seed for r in rows})
        lines.append(f"reproduces the paper's qualitative finding: PARTLY ({agree}/{total} neighbouring comparisons"
                     f" agree; each cell averages {seeds} seed(s), more seeds smooth out local-optimum scatter)")
    for c in checks:
        ok = c.comparisons - len(c.violations)
        lines.append(f"  {'holds' if c.holds else 'fails'}: {c.claim} ({ok}/{c.comparisons} neighbouring comparisons)")
        for v in c.violations[:max_listed]:
            lines.append(f"    does not hold at {v}")
        if len(c.violations) > max_listed:
            lines.append(f"    ... and {len(c.violations) - max_listed} more (see the CSV)")
    negative = sum(r.gap < 0 for r in rows)
    if negative:
        lines.append(f"  note: soft k-means ended below Lloyd's objective in {negative}/{len(rows)} runs (|gap| is plotted)")
    deviation = max(r.deviation_from_reference for r in rows)
    lines.append(f"  runner vs the soft numpy reference: max centroid deviation {deviation:.3g} (data units)")
    return lines


# -- outputs --------------------------------------------------------------------------------------------------
def rows_csv(rows: list[SweepRow]) -> str:
    buf = io.StringIO()
    names = list(asdict(rows[0]).keys()) if rows else [f.name for f in SweepRow.__dataclass_fields__.values()]
    writer = csv.DictWriter(buf, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in asdict(r).items()})
    return buf.getvalue()


def grid_from(name: str = "default", **overrides) -> SweepGrid:
    """A named grid with some fields replaced (``None`` leaves a field as it is)."""
    if name not in GRIDS:
        raise ValueError(f"unknown grid {name!r}; choose one of {', '.join(GRIDS)}")
    changes = {key: value for key, value in overrides.items() if value is not None}
    return replace(GRIDS[name], **changes)
