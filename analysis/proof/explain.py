"""The "Why it is exact" section of docs/exactness.md, generated from the prover's own output so that it cannot drift.

``python -m analysis.proof.explain`` prints the section; ``tests/unit/test_prove.py`` checks that docs/exactness.md
contains exactly this text.
"""

from __future__ import annotations

from analysis.proof.prover import prove_circuit
from analysis.proof.registry import OBLIGATION_SETS, NoObligations
from analysis.proof.report import ProofReport
from circuits.variants import VARIANTS

#: The circuit the section proves (``kmeans-circuits prove --d 4 --k 3``).
SECTION_D, SECTION_K = 4, 3

INTRO = """\
Tests on data can only show that the circuit agrees with Lloyd's algorithm on the inputs tried. `kmeans-circuits
prove --d D --k K` shows it for every input: it reads the `HookedTransformer`'s state dict, converts every float64
weight to an exact rational, and checks a list of *obligations* in the named basis, on every layer (layers with
bit-identical weights share one check). QK and OV circuits are formed exactly (biases included, as an extra
constant coordinate) and compared entry by entry with the intended blocks; every entry outside them must be exactly
0. MLPs are checked as functions: on each token type (exactly one flag set, `ONE = 1`) and for every residual in the
valid domain (`N, ID, Y, Y_stage >= 0`; `X, C, C_stage` any reals; every state the circuit reaches lies there, even
at finite sharpness), the change of each coordinate must equal the intended polynomial. The domain is split into
the regions where each ReLU is on or off (which regions exist is decided exactly, by Fourier-Motzkin elimination);
in each region both sides are polynomials and are compared coefficient by coefficient, one coordinate group at a
time, so the cost stays linear in `d` (`--d 64 --k 16` takes seconds). The command prints each obligation with its
status, names the first offending entry or region when one fails, and exits 1."""

THEOREM_INTRO = """\
On top of the obligations the hard-attention theorem is executed: with every softmax replaced by hardmax (uniform
over the keys of maximal score), each step below is computed symbolically (sympy, exact rationals from the weights)
for generic tokens of each type, and the conditions on the knobs are checked exactly. Composed over the schedule
`U A (U A)^T`, they show that the circuit maps the encoded problem to Lloyd's iterates: points to the centroid
minimising `|x - c_j|^2 + t_j` (`t_j = tie_break * j`, so exact ties go to the lowest index; a point with two
minimisers of that sum would be split evenly and is outside the theorem), centroids to member means, empty
clusters keep their centroid."""

BOUND_TEXT = """\
**Finite sharpness.** The model runs softmax, not hardmax. `analysis/proof/bound/` derives, from the margins of
a concrete problem, a proven bound (real arithmetic, evaluated with outward rounding) on how far each layer's
softmax is from hardmax (`sum |softmax - hardmax|` per query) and propagates it: assign layers bound
`|Y - one-hot|` and certify the labels, update layers bound how far each centroid is from the hard trajectory,
and that error feeds the next assignment's margins. The verification report carries it per iteration
(`proven_bound`, column `proven |dc|` of the table) next to the observed centroid error (the bound is no part
of the verdict: verification reads its inputs, and the report evaluates it the first time it is read, once, so a
model search that only asks `verified` does not pay for it); the observed error minus
the verifier's float64 rounding tolerance never exceeds it (`tests/unit/test_prove_bound.py` checks every layer on
hypothesis problems, the bundled datasets and small `beta`, `beta_update` where the bound is far from 0). The bound
is derived for Lloyd's circuit and for two variants. `damped`: the heads are Lloyd's, but the commit keeps a
fraction `1 - eta` of the old centroid, so a centroid's error becomes `|1 - eta|` times its old error plus `eta` times
the head's (Lloyd's discards the old error; with damping it decays over iterations instead, and the test shows
that Lloyd's propagation would be too small); no bound is claimed where `1 - eta` is not a float64. `trimmed`: the
sink is one more candidate in each point's margin (an outlier's runner-up is its nearest centroid, a member's may be
the sink), an outlier's `Y` is at most its leak, so every update treats it as a non-member. The other variants
report none."""


def variants_text() -> str:
    """One paragraph per kind of variant, from the registry of obligation sets."""
    proved = [name for name in VARIANTS if callable(OBLIGATION_SETS.get(name))]
    soft = [name for name in VARIANTS if isinstance(OBLIGATION_SETS.get(name), NoObligations)
            and not OBLIGATION_SETS[name].exact]
    unproven = [name for name in VARIANTS if isinstance(OBLIGATION_SETS.get(name), NoObligations)
                and OBLIGATION_SETS[name].exact]
    lines = [
        "**Variants** (`--variant NAME`). Obligation sets exist for " + ", ".join(f"`{n}`" for n in proved)
        + ": `damped` replaces the update MLP's commit by `C += eta (C_stage - C)` and its norm by `|C + eta (C_stage -"
        " C)|^2` (the first update still commits fully); `trimmed` adds an exact-distance channel (`NX = |x|^2`), the"
        " assign head's attention sink at `-beta (radius^2 + tie_break k)` (outliers attend to it and stay"
        " unassigned) and `use_attention_sinks` in the configuration. The prover finds that damped's `N` equals the"
        " new centroid's squared norm exactly only when `1 - eta` is a float64 (`eta = 0.5` yes, `eta = 0.1` no: it"
        " names `update.MLP.damped_square_norm`); over-relaxed damping (`eta = 1.5`) passes every obligation but not"
        " `theorem.assign.argmax`, since its centroids can reach norm `eta / (2 - eta) = 3`, where `mask = 16` no"
        " longer guarantees that a centroid beats the masked keys. Soft by design, with no hardmax theorem to prove (`N/A`,"
        " exit 0; the verifier holds them to their references within float64 rounding): "
        + ", ".join(f"`{n}`" for n in soft) + ". Claimed exact but not covered (`NOT PROVEN`, exit 1):",
        "",  # Markdown needs the blank line to start the list
    ]
    for name in unproven:
        lines.append(f"- `{name}`: {OBLIGATION_SETS[name].reason}.")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("*", "\\*")


def exactness_section(report: ProofReport) -> str:
    """The section for ``report`` (the proof of the ``SECTION_D``, ``SECTION_K`` circuit)."""
    lines = ["## Why it is exact", "", INTRO, "", "The obligations, as the prover states them:", ""]
    lines += [f"- `{o.name}` ({o.status.lower()}): {_md(o.statement)}" for o in report.obligations]
    lines += ["", THEOREM_INTRO, ""]
    lines += [f"- `{o.name}` ({o.status.lower()}): {_md(o.statement)}" for o in report.theorem]
    verdict = report.render().splitlines()[-1]
    lines += ["", "```", f"$ kmeans-circuits prove --d {report.d} --k {report.k}", "...", verdict, "```", "",
              variants_text(), "", BOUND_TEXT, ""]
    return "\n".join(lines)


def current_section() -> str:
    from circuits.build import build_lloyd_circuit  # torch and TransformerLens: loaded only to build

    return exactness_section(prove_circuit(build_lloyd_circuit(SECTION_D, SECTION_K, 1)))


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    print(current_section())
