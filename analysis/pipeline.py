"""One call from a problem to a verified answer: build, encode, run with capture, verify.

Shared by the command line, the scikit-learn-style estimator and the notebooks so that they all run the circuit
the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Callable

import numpy as np
import torch

from analysis.capture import EVERYTHING, Capture, Keep, capture, decoded_capture, reencode, summarise_head
from analysis.capture.keep import prior_sample
from analysis.capture.hooked import certify_hooked_patterns
from analysis.verify import VerificationReport, reads, verify_problem
from analysis.verify.altered import find_alterations
from analysis.scheduler import Scheduler
from analysis.verify.checks import trace_of
from analysis.verify.prefetch import prefetch
from circuits import devices, hook_names, reference
from circuits.build import KMeansCircuit
from circuits.encoding import EncodedBatch, UnitScaling, encode, fit_unit_scaling
from circuits.layout import ResidualLayout
from circuits.sharpness import FLOAT32_UNDERFLOW, FLOAT64_UNDERFLOW, Resolution, Sharpness, for_problem
from circuits.variants import get_variant
from circuits.variants.base import NX

DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass
class RunResult:
    circuit: KMeansCircuit
    encoded: EncodedBatch
    capture: Capture
    report: VerificationReport
    #: How the sharpness was chosen from the data (``None`` when it was given whole, or for variants).
    resolution: Resolution | None = None
    #: The reference's iterates the verification compared with, ``(centroids [T + 1, k, d], objectives [T + 1])``,
    #: where it ran beside the circuit (at scale): a report draws them instead of running the reference again.
    reference_iterates: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def labels(self) -> np.ndarray:
        """Each point's cluster under the final centroids."""
        return self.capture.final.labels[0]

    @property
    def centroids(self) -> np.ndarray:
        """Final centroids in the input's units."""
        return self.capture.centroids(self.circuit.iterations)[0]

    @property
    def inertia(self) -> float:
        """k-means objective of the final labels and centroids, on the points as the circuit saw them.

        That is ``capture.encoded.X`` (a variant may map its input, e.g. spherical k-means projects the points onto
        the unit sphere); points with label -1 (trimmed k-means outliers) are left out.
        """
        X, labels = self.capture.encoded.X[0], self.labels
        kept = labels >= 0
        return reference.objective(X[kept], self.centroids, labels[kept])

    def _resolution_json(self, rep: dict) -> dict | None:
        """What the run resolves, in squared user units (the exactness contract's numbers)."""
        if self.resolution is None:
            return None
        return {**self.resolution.to_dict(), **self.resolution.in_user_units(rep["scale"]),
                "widest_tie_window_user_sq_distance": rep["tolerances"]["tie_window"]}

    def to_json(self) -> dict:
        """The command line's ``--json`` object (docs/cli.md, ``cluster``) plus a few self-describing extras."""
        rep = self.report.to_dict()
        keys = ["iteration", "label_agreement", "max_centroid_error", "objective_circuit", "objective_reference",
                "min_margin", "leak_bound", "ties", "proven_bound"]
        if not self.circuit.spec.unaltered:
            keys += ["max_assignment_error", "update_weight_error", "outliers"]
        per_iteration = [{key: rec[key] for key in keys} for rec in rep["per_iteration"]]
        verdict = self.report.verdict_record.to_dict()
        return {
            "variant": self.circuit.variant,
            "path": self.capture.path,
            "device": str(self.encoded.device),
            "k": self.encoded.k,
            "iterations": self.circuit.iterations,
            "labels": [int(v) for v in self.labels],
            "centroids": self.centroids.tolist(),
            "verified": bool(self.report.verified),
            "per_iteration": per_iteration,
            "n": self.encoded.n,
            "d": self.encoded.d,
            "dtype": rep["dtype"],
            "exact": rep["exact"],
            "hard_attention": rep["hard_attention"],
            "inertia": self.inertia,
            "n_iter": rep["n_iter"],
            "final": {
                "label_agreement": rep["final_label_agreement"],
                "min_margin": rep["final_min_margin"],
                "leak_bound": rep["final_leak_bound"],
            },
            "n_ties": rep["n_ties"],
            # Every tie of the report: at the data's precision for a distance reference, each with its exact gaps
            # above the nearest centroid and the bounds they are within (docs/exactness.md).
            "ties": [{key: tie[key] for key in ("point", "iteration", "candidates", "chosen", "nearest", "gaps",
                                                 "bounds")} for tie in rep["ties"]],
            "n_errors": rep["n_errors"],
            "variant_params": rep["variant_params"],
            "reference": rep["reference"],
            "sharpness": self.circuit.sharpness.to_dict(),
            "sharpness_chosen_from_data": self.resolution is not None,
            "resolution": self._resolution_json(rep),
            "scale": rep["scale"],
            # proven_bound is real arithmetic; the float64 rounding the verifier allows for comes on top of it.
            "tolerances": {"centroid": rep["tolerances"]["centroid"], "tie_window": rep["tolerances"]["tie_window"],
                           "tie_break": rep["tolerances"]["tie_break"]},
            "converged": rep["converged"],
            "failures": rep["failures"],
            "notes": rep["notes"] + ([f"dense path: {self.capture.path_note}"] if self.capture.path_note else []),
            # The verdict in words (analysis/verify/verdict.py) and the record of t = 0 (per_iteration is t = 1..T).
            **{key: value for key, value in verdict.items() if key != "verified"},
            "initial": {key: rep["initial"][key] for key in keys} if rep["initial"] is not None else None,
            "alterations": rep["alterations"],
            # Only where the weights that ran are not those built, or hooks were added to the model (never on the
            # command line, which builds its circuit).
            **{key: rep[key] for key in ("weight_edits", "added_hooks") if rep.get(key)},
        }


def capture_from_cache(circuit: KMeansCircuit, encoded: EncodedBatch, cache) -> Capture:
    """The :class:`Capture` of a run someone already made: ``cache`` is the ``ActivationCache`` (or dict) of
    ``circuit.model.run_with_cache(encoded.resid)``, hooks and all, so an ablated run is read as it ran.

    It must hold every block's ``resid_pre``/``resid_post``, ``hook_attn_scores`` and ``hook_pattern`` (the
    default ``run_with_cache`` keeps them all); the logits are the unembedding of the last ``resid_post``.
    """
    if circuit.spec.input_map is not None:
        encoded = reencode(circuit, encoded)
    needed = [hook_names.resid_pre(0)]
    for layer in range(circuit.n_layers):
        needed += [hook_names.resid_post(layer), hook_names.attn_scores(layer), hook_names.pattern(layer)]
    present = set(cache.keys())
    missing = [name for name in needed if name not in present]
    if missing:
        raise ValueError(f"the cache lacks {len(missing)} activation(s) the capture reads, e.g. {missing[0]!r}:"
                         " run run_with_cache without a names_filter")
    first = cache[hook_names.resid_pre(0)]
    if tuple(first.shape[:2]) != (encoded.resid.shape[0], encoded.sequence.n_tokens):
        raise ValueError(f"the cache is of a run of shape {tuple(first.shape)}, the encoding has"
                         f" {tuple(encoded.resid.shape)}: pass the encoding the cache was run on")
    with_sink = bool(getattr(circuit.model.cfg, "use_attention_sinks", False))
    summaries = {layer: summarise_head(kind, cache[hook_names.attn_scores(layer)], cache[hook_names.pattern(layer)],
                                        encoded, with_sink) for layer, kind in enumerate(circuit.schedule)}
    last = cache[hook_names.resid_post(circuit.n_layers - 1)]
    with torch.no_grad():
        logits = circuit.model.unembed(last)
    summaries = {layer: summary for layer, summary in summaries.items() if summary is not None}
    cap = decoded_capture(circuit, encoded, cache, summaries, logits, cache)
    cap.from_user_cache = True
    # The certificates were computed from the scores: where a hook replaced a pattern, from what that pattern was.
    cap.hooked_patterns = certify_hooked_patterns(cap, cache)
    return cap


def as_run(obj) -> RunResult:
    """What a user has in hand, as the verified run that reports and views read.

    Accepts a :class:`RunResult`; a :class:`~analysis.capture.Capture` (verified here); a fitted
    :class:`~analysis.estimator.CircuitKMeans` (its ``capture_`` and ``report_``); or a pair
    ``(ActivationCache, EncodedBatch)``: the cache of ``circuit.model.run_with_cache(encoded.resid)`` (hooks
    included) and the encoding it ran on, read with :func:`capture_from_cache`.
    """
    if isinstance(obj, RunResult):
        return obj
    if isinstance(obj, Capture):
        return RunResult(obj.circuit, obj.encoded, obj, verify_problem(obj, 0))
    fitted = getattr(obj, "capture_", None)
    if isinstance(fitted, Capture) and hasattr(obj, "report_"):
        return RunResult(fitted.circuit, fitted.encoded, fitted, obj.report_, getattr(obj, "resolution_", None))
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], EncodedBatch):
        cache, encoded = obj
        circuit = getattr(getattr(cache, "model", None), "kmeans_circuit", None)
        if not isinstance(circuit, KMeansCircuit):
            raise TypeError("the ActivationCache must come from a circuit's model (KMeansCircuit.model.run_with_cache)")
        cap = capture_from_cache(circuit, encoded, cache)
        report = verify_problem(cap, 0)
        # The cache does not say which hooks ran: the blocks whose activations it holds differ from their own.
        report.alterations = find_alterations(circuit, cache)
        return RunResult(circuit, cap.encoded, cap, report)
    if hasattr(obj, "get_params") and hasattr(obj, "fit"):
        raise TypeError(f"this {type(obj).__name__} is not fitted: call fit first")
    raise TypeError(f"expected a RunResult, a Capture, a fitted CircuitKMeans or (ActivationCache, EncodedBatch),"
                    f" got {type(obj).__name__}")


def lloyd_scaling(X: np.ndarray, C0: np.ndarray) -> UnitScaling:
    """Lloyd's circuit centres on the median: the bulk of the data then sits near 0, where float64 resolves best."""
    return fit_unit_scaling(X, np.asarray(C0), centre="median")


def encoder_scaling(spec, X: np.ndarray, C0: np.ndarray) -> UnitScaling:
    """The unit scaling a run of the variant ``spec`` encodes ``X`` and ``C0`` with: Lloyd's median scaling
    (:func:`lloyd_scaling`) for the exact construction, the mean one (what :func:`circuits.encoding.encode` fits
    by default) for a variant."""
    return lloyd_scaling(X, C0) if spec.unaltered else fit_unit_scaling(X, C0)


def choose_sharpness(X: np.ndarray, inits: list[np.ndarray], variant: str = "lloyd",
                     sharpness: Sharpness | dict | None = None, dtype: torch.dtype = torch.float64,
                     scalings: list[UnitScaling] | None = None) -> tuple[Sharpness | None, Resolution | None]:
    """The knobs a run uses: a :class:`Sharpness` as given; else, for Lloyd's assign head, tie-break and beta
    chosen from the data (:func:`circuits.sharpness.for_problem`) with the knobs of a ``dict`` kept as given.

    ``inits`` are the initial centroids of every run that will share the circuit; ``scalings``, where the caller
    has them already, their unit scalings (:func:`encoder_scaling`), so that none is computed twice. Other variants
    keep their defaults, so a ``dict`` for them is just the given knobs.
    """
    if isinstance(sharpness, Sharpness):
        return sharpness, None
    given = dict(sharpness or {})
    declared = get_variant(variant)
    # Only Lloyd's distance head (VariantSpec.distance_head) has knobs chosen from the data.
    if not declared.distance_head:
        return (Sharpness(**given) if given else None), None
    X = np.asarray(X, dtype=np.float64)
    d, k = X.shape[1], np.asarray(inits[0]).shape[0]
    if scalings is None:
        scalings = [encoder_scaling(declared, X, C0) for C0 in inits]
    problems = [(scaling.to_unit(X)[0], scaling.to_unit(C0)[0]) for scaling, C0 in zip(scalings, inits, strict=True)]
    u = float(torch.finfo(dtype).eps) / 2
    underflow = FLOAT64_UNDERFLOW if dtype == torch.float64 else FLOAT32_UNDERFLOW
    # The widest layout of these variants (one extra column), so gamma bounds every one of them.
    d_model = ResidualLayout(d, k, extra=(NX,)).d_model
    return for_problem(problems, d, d_model, given, u, underflow)


def run_device(circuit: KMeansCircuit | None, device: str | torch.device | None) -> torch.device:
    """The device a run uses: ``device`` (``"auto"``: cuda where present), by default the given circuit's, else
    the CPU; a circuit built on another device than the one asked for is an error (its weights live there)."""
    if device is None:
        return circuit.device if circuit is not None else torch.device("cpu")
    chosen = devices.resolve(device)
    if circuit is not None and not _same_device(circuit.device, chosen):
        raise ValueError(f"the circuit was built on {circuit.device}, the run asks for {chosen}: build it there")
    return chosen


def _same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` are the same device when the current one is 0."""
    if a.type != b.type:
        return False
    current = torch.cuda.current_device() if a.type == "cuda" and torch.cuda.is_available() else 0
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


@dataclass(frozen=True)
class RunOptions:
    """How :func:`run_problem` executes a run, apart from what it computes: a problem gives the same labels,
    centroids, verification report and JSON under any of these (the verification is the same on every path and
    device: float64 reference, same tolerances)."""

    #: The execution path: ``"dense"``, ``"structured"`` or ``"auto"`` (:func:`analysis.capture.capture`).
    path: str = "dense"
    #: Where the circuit is built and run: ``"cpu"``, ``"cuda"``, ``"auto"`` (cuda where present); ``None``: the
    #: given circuit's device, else the CPU.
    device: str | torch.device | None = None
    #: Keep only what the verification reads (:func:`analysis.capture.capture`: no report or attention view can be
    #: drawn from the capture); ``None``: lean at scale (:data:`analysis.scheduler.AT_SCALE_POINTS` points on).
    lean: bool | None = False
    #: Keep the dense forward's ``ActivationCache`` in the capture.
    keep_cache: bool = False
    #: Called with each layer's index as the forward finishes it (progress).
    on_layer: Callable[[int], None] | None = None
    #: Threads the run may use, the caller's included (:class:`analysis.scheduler.Scheduler`; ``None``: its policy
    #: for this many points).
    threads: int | None = None
    #: A lean run also keeps the per-point parts of this many points, a seeded draw chosen before it runs
    #: (:func:`analysis.capture.keep.prior_sample`), for a report to draw (:mod:`analysis.capture.sampled`).
    sample: int | None = None


#: The options of a run that names none: dense, on the given circuit's device (else the CPU), everything kept.
DEFAULT_OPTIONS = RunOptions()


def run_problem(X: np.ndarray, C0: np.ndarray, iterations: int = 10, variant: str = "lloyd",
                dtype: torch.dtype = torch.float64, sharpness: Sharpness | dict | None = None, *,
                circuit: KMeansCircuit | None = None, resolution: Resolution | None = None,
                options: RunOptions = DEFAULT_OPTIONS) -> RunResult:
    """Build the ``variant`` circuit for ``X`` (n, d) and ``C0`` (k, d), run it, and verify every layer.

    What is computed: ``iterations``, ``variant`` (a spec such as ``"soft:beta=100"``), ``dtype`` and
    ``sharpness`` (a :class:`Sharpness` is used as it is; ``None`` or a ``dict`` of given knobs lets
    :func:`choose_sharpness` pick the rest from the data). ``circuit`` reuses a built model instead (it must match
    d, k and iterations; ``variant``, ``dtype`` and ``sharpness`` are then its own, and ``resolution`` says how its
    knobs were chosen). How it runs: ``options`` (:class:`RunOptions`: path, device, lean, sample, cache,
    progress, threads; the run makes one :class:`analysis.scheduler.Scheduler` from ``threads`` and passes it down). The
    encoder's unit scaling (:func:`encoder_scaling`) is computed once and serves both the choice of the knobs and
    the encoding.
    """
    X, C0 = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64)
    device = run_device(circuit, options.device)
    spec = circuit.spec if circuit is not None else get_variant(variant)
    scaling = encoder_scaling(spec, X, C0)
    if circuit is None:
        sharpness, resolution = choose_sharpness(X, [C0], variant, sharpness, dtype, [scaling])
        circuit = spec.build(X.shape[1], C0.shape[0], iterations, sharpness=sharpness, dtype=dtype,
                             device=str(device))
    scheduler = Scheduler.for_points(X.shape[0], options.threads)
    lean = scheduler.at_scale if options.lean is None else options.lean
    # A lean structured run's encoding holds no stream: its forward makes its own (held once, not twice).
    encoded = encode(circuit.layout, X, C0, dtype=circuit.dtype, scaling=scaling, device=device,
                     hold_stream=not (lean and options.path != "dense"))
    try:
        # At scale the reference (then its bound) runs on a worker while the circuit runs on this thread.
        prefetched = (prefetch(scheduler, circuit, encoded) if scheduler.at_scale and circuit.spec.input_map is None
                      else None)
        cap = capture(circuit, encoded, keep_cache=options.keep_cache, on_layer=options.on_layer, path=options.path,
                      keep=_keep(circuit, X.shape[0], lean, options.sample), forward_threads=scheduler.forward_threads)
        report = verify_problem(cap, 0, scheduler, prefetched)
        return RunResult(circuit, encoded, cap, report, resolution,
                         None if prefetched is None else _iterates(prefetched))
    finally:
        scheduler.close()


def _keep(circuit: KMeansCircuit, n: int, lean: bool, sample: int | None) -> Keep:
    """What a run's capture keeps: everything, or what its verification reads (with a sample's rows, if asked)."""
    if not lean:
        return EVERYTHING
    keep = reads(circuit.spec)
    return keep if sample is None else replace(keep, sample=tuple(int(i) for i in prior_sample(n, sample)))


def _iterates(prefetched) -> tuple[np.ndarray, np.ndarray]:
    """The centroids and objectives of the reference's run that ``prefetched`` made (as
    :func:`analysis.verify.reference_trace` makes it: the certified run's trace where the reference is certified)."""
    trace = trace_of(prefetched.reference.value()[1])
    return np.asarray(trace.centroids), np.asarray(trace.objectives)
