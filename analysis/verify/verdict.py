"""The verdict vocabulary: the one place that words what a run was checked against, for the report's badge, the
CLI's verdict line and ``--json``.

Every verdict is a :class:`Verdict`: ``verified`` (the one bit), ``kind`` (which promise was checked) and
``text`` (the words). The kinds, each made by one function:

* ``exact``: :func:`exact_lloyd`, Lloyd's circuit in float64 with hard attention everywhere. The only run
  called exact.
* ``approximate``: :func:`approximate_lloyd`, Lloyd's circuit where attention was not exactly hard, or in a dtype
  that cannot hold it (float32): its labels are Lloyd's, its centroids within a stated tolerance.
* ``variant``: :func:`matches_variant`, a variant circuit that matches its own reference (which one, with which
  parameters, to what tolerance). Not Lloyd's, not exact.
* ``construction``: :func:`matches_construction`, a hand-built construction that matches its numpy reference.
* ``trained``: :func:`trained_export`, a trained model whose exported ``HookedTransformer`` matches its training
  forward. Not Lloyd's.
* ``failure``: :func:`failure`, anything NOT VERIFIED: the first failing layer, the hook or alteration that changed
  the run, and the cause.

Fields that do not apply to a run are absent or say why (:func:`not_applicable`), never ``nan``; a leak bound of 1
or more bounds nothing and reads "no bound" (:func:`bound_text`); "converged" is only said when the last step
changed no centroid (:func:`convergence_text`).

``python -m analysis.verify.verdict`` prints the "Verdicts" section of docs/exactness.md (:func:`section`);
a test checks that the page holds exactly that text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from circuits import hook_names

#: The JSON key and CLI word of each kind, in the order the docs list them.
KINDS = ("exact", "approximate", "variant", "construction", "trained", "failure")


@dataclass(frozen=True)
class Verdict:
    """What one run was checked against, in words. ``str(verdict)`` is the badge / CLI line."""

    verified: bool
    kind: str
    text: str
    #: What the run was compared with (``"Lloyd's k-means"``, ``"soft k-means, beta = 30"``, ...).
    reference: str = ""
    #: The tolerance the comparison was held to, in the units ``tolerance_units`` names; ``None``: bit-for-bit
    #: labels and no stated centroid tolerance applies.
    tolerance: float | None = None
    tolerance_units: str = ""
    #: Failure only: the first failing layer (``None``: not localised to a layer), what changed it, the cause.
    layer: int | None = None
    altered_by: list[str] = field(default_factory=list)
    cause: str = ""

    def __str__(self) -> str:
        return self.text

    @property
    def exact(self) -> bool:
        return self.kind == "exact"

    def to_dict(self) -> dict:
        """The verdict's ``--json`` fields; keys that do not apply are left out."""
        out = {"verdict": self.text, "verdict_kind": self.kind, "verified": self.verified}
        if self.reference:
            out["verdict_reference"] = self.reference
        if self.tolerance is not None:
            out["verdict_tolerance"] = self.tolerance
            if self.tolerance_units:
                out["verdict_tolerance_units"] = self.tolerance_units
        if self.kind == "failure":
            if self.layer is not None:
                out["first_failing_layer"] = self.layer
            if self.altered_by:
                out["altered_by"] = list(self.altered_by)
            if self.cause:
                out["cause"] = self.cause
        return out


def tolerance_text(x: float) -> str:
    """A tolerance as the verdicts write it: two significant digits (``5.2e-12``)."""
    return f"{x:.2g}"


def exact_lloyd(dtype: str = "float64", ties: str = "") -> Verdict:
    """Lloyd's circuit, float64, hard attention at every layer: every label Lloyd's in exact arithmetic at the
    data's precision, every centroid Lloyd's within float64 rounding. ``ties``: the ties at the data's precision,
    in words (``analysis.verify.decisions.tie_text``), said after the verdict."""
    return Verdict(True, "exact", f"VERIFIED (exact Lloyd's k-means, {dtype})" + _then(ties),
                   reference="Lloyd's k-means")


def approximate_lloyd(dtype: str, tolerance: float, why: str = "", ties: str = "") -> Verdict:
    """Lloyd's circuit that is not exact (``why``: attention not exactly hard, or a dtype that cannot hold
    ``beta * score``): its labels are Lloyd's, its centroids within ``tolerance`` (user units)."""
    because = f"; {why}" if why else ""
    return Verdict(True, "approximate",
                   f"VERIFIED (approximates Lloyd's k-means, {dtype}: Lloyd's labels, centroids to"
                   f" {tolerance_text(tolerance)}{because})" + _then(ties),
                   reference="Lloyd's k-means", tolerance=tolerance, tolerance_units="user units")


def matches_variant(reference: str, tolerance: float, params: dict | None = None, units: str = "user units",
                    dtype: str = "float64", ties: str = "") -> Verdict:
    """A variant circuit that matches its own reference: ``VERIFIED (matches soft k-means, beta = 30, to
    5.2e-12)``. ``reference``: the algorithm's name; ``params``: the parameters that make it that algorithm."""
    named = reference + "".join(f", {key} = {_number(value)}" for key, value in (params or {}).items())
    return Verdict(True, "variant",
                   f"VERIFIED (matches {named}, to {tolerance_text(tolerance)}, {dtype}; not Lloyd's)" + _then(ties),
                   reference=named, tolerance=tolerance, tolerance_units=units)


def matches_construction(name: str, tolerance: float, units: str = "of the data's spread") -> Verdict:
    """A hand-built construction that matches its numpy reference at every step (same choice kept, centroids
    within ``tolerance``)."""
    return Verdict(True, "construction",
                   f"VERIFIED ({name} matches its numpy reference at every step, centroids to"
                   f" {tolerance_text(tolerance)} {units}; not Lloyd's)",
                   reference=f"{name} (numpy reference)", tolerance=tolerance, tolerance_units=units)


def trained_export(tolerance: float, units: str = "unit coordinates") -> Verdict:
    """A trained model: its exported ``HookedTransformer`` matches its training forward within ``tolerance``.
    Says nothing about Lloyd's, which a trained model is not."""
    return Verdict(True, "trained",
                   f"VERIFIED (export matches its training forward, to {tolerance_text(tolerance)} {units};"
                   f" a trained model, not Lloyd's)",
                   reference="the model's training forward", tolerance=tolerance, tolerance_units=units)


def alterations_named(hooks: list[str] | tuple[str, ...] = (), weight_edits: list[str] | tuple[str, ...] = (),
                      added_hooks: list[str] | tuple[str, ...] = ()) -> list[str]:
    """What changed a run, as a failure's ``altered_by`` names it: the hooks that changed its activations, the
    parameters changed since the build, the modules carrying hooks added to the model."""
    return ([f"hook {a}" for a in hooks] + [f"weight {w} (changed since the build)" for w in weight_edits]
            + [f"hook on {h} (added to the model)" for h in added_hooks])


def failure(cause: str, reference: str = "", layer: int | None = None, role: str = "",
            altered_by: list[str] | tuple[str, ...] = ()) -> Verdict:
    """NOT VERIFIED: the first failing ``layer`` (``role`` says what it does, e.g. ``"assign, t = 0"``), the hooks
    or alteration that changed the run (``altered_by``), the ``cause``, and what it was held to (``reference``)."""
    parts = []
    if layer is not None:
        parts.append(f"first failing layer {layer}" + (f" ({role})" if role else ""))
    if altered_by:
        parts.append("altered by " + ", ".join(altered_by))
    parts.append(cause)
    held = f" against {reference}" if reference else ""
    return Verdict(False, "failure", f"NOT VERIFIED{held}: " + "; ".join(parts), reference=reference,
                   layer=layer, altered_by=list(altered_by), cause=cause)


def tie_text(ties: list) -> str:
    """Ties at the data's precision in words, after a verdict (and in the estimator's warning): how many
    comparisons tied, the first one's point, centroids and gap ("" for none). ``ties``:
    :class:`analysis.verify.report.Tie` records that carry their gaps and bounds."""
    if not ties:
        return ""
    first = min(ties, key=lambda tie: (tie.iteration, tie.point))
    n = sum(tie.comparisons for tie in ties)
    other = next((c for c in first.candidates if c != first.nearest), first.candidates[-1])
    k = first.candidates.index(other)
    gap, bound = (first.gaps[k], first.bounds[k]) if first.gaps else (0.0, 0.0)
    return (f"{n} comparison(s) tied at the data's precision and went to the lower index (first: point"
            f" {first.point} at t = {first.iteration}, centroids {first.nearest} and {other}, squared distances"
            f" {_gap_text(gap)} apart, within the {bound:.2g} the data's precision allows)")


def _gap_text(gap: float) -> str:
    return "0" if gap == 0 else f"{gap:.2g}"


def _then(ties: str) -> str:
    return f"; {ties}" if ties else ""


def bound_text(x: float | None) -> str:
    """A leak bound (attention mass off the chosen key): a number below 1, else ``"no bound"`` (a bound of 1 or
    more bounds nothing; ``None``/nan: none computed)."""
    if x is None or not math.isfinite(x) or x >= 1.0:
        return "no bound"
    return f"{x:.1e}"


def not_applicable(reason: str) -> str:
    """The text of a field that does not apply to a run, in place of a number: ``"n/a (reason)"``."""
    return f"n/a ({reason})"


def convergence_text(converged: bool, n_iter: int, iterations: int) -> str:
    """``converged`` must mean that the last step changed no centroid (two consecutive iterates equal)."""
    if converged:
        return f"converged: nothing changed after {n_iter} {_plural(n_iter, 'iteration')}"
    return f"not converged: centroids still changed at the last of {iterations} {_plural(iterations, 'iteration')}"


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"


def _number(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


#: One example of each kind, for the docs.
EXAMPLES = (
    exact_lloyd(ties="4 comparison(s) tied at the data's precision and went to the lower index (first: point 103"
                     " at t = 0, centroids 0 and 2, squared distances 1.2e-15 apart, within the 4.3e-15 the"
                     " data's precision allows)"),
    approximate_lloyd("float32", 1.2e-5, "float32 cannot hold beta * score exactly"),
    matches_variant("soft k-means", 5.2e-12, {"beta": 30.0}),
    matches_construction("the safeguarded swap", 1e-9),
    trained_export(3.1e-13),
    failure("12 labels differ from the reference's (not a tie)", reference="Lloyd's k-means", layer=3,
            role="assign, t = 1", altered_by=[f"hook {hook_names.resid_post(3)} (zero ablation)"]),
)

RULES = """\
Every verdict, on the report's badge, on the CLI's verdict line and in `--json` (`verdict`, `verdict_kind`), comes
from one module, `analysis/verify/verdict.py`. It says what the run was checked against, and nothing more:

- **exact**: only Lloyd's circuit in float64 with hard attention at every layer. Every label is Lloyd's in exact
  arithmetic at the data's precision (a comparison that moving each input by half an ulp can tie or turn is a tie,
  to the lower index), every centroid Lloyd's within float64 rounding. The verdict says how many comparisons tied
  and names the first.
- **approximate**: Lloyd's circuit where attention was not exactly hard or the dtype cannot hold `beta * score`
  (float32): the labels are Lloyd's, the centroids within the stated tolerance.
- **variant**: a variant circuit matches *its own* reference, named with its parameters, to the stated tolerance.
  It is not Lloyd's.
- **construction**: a hand-built construction (the safeguarded swap, the learned swap) matches its numpy reference
  at every step. It is not Lloyd's.
- **trained**: a trained model's exported `HookedTransformer` matches its training forward. It is not Lloyd's.
- **failure**: NOT VERIFIED, naming the first failing layer, the hook or alteration that changed the run, and the
  cause.

A field that does not apply to a run is absent or says why, never `nan`; a leak bound of 1 or more reads "no
bound"; "converged" means the last step changed no centroid."""


def section() -> str:
    """The "Verdicts" section of docs/exactness.md (the rules, then one example of each kind)."""
    lines = ["## Verdicts", "", RULES, "", "One example of each kind:", ""]
    lines += [f"- {v.kind}: `{v.text}`" for v in EXAMPLES]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(section(), end="")
