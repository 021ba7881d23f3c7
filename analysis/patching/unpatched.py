"""The two unpatched runs of a patching experiment, checked before any patch is read: the clean and the corrupted
problem each verified layer by layer against the numpy Lloyd reference (:func:`analysis.verify.verify_problem`),
and the clean run's placeholder (an inert sink in the slot of a point that only the corrupted problem has, so that
both runs have the same tokens: :mod:`analysis.patching.pairs`) checked to change nothing.
A patching result says what it restores only of runs that are themselves the algorithm; the page and the JSON give
each run's verdict (:mod:`analysis.patching.report`).
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.patching.experiment import PatchingExperiment
from circuits import hook_names
from circuits.devices import torch_threads
from circuits.encoding import encode


@dataclass
class UnpatchedCheck:
    """Both unpatched runs checked against the numpy Lloyd reference, and the placeholder checked inert."""

    clean: object  # analysis.verify.VerificationReport
    corrupted: object
    placeholder_deviation: float | None = None

    @property
    def verified(self) -> bool:
        inert = self.placeholder_deviation is None or self.placeholder_deviation <= PLACEHOLDER_TOLERANCE
        return bool(self.clean.verified and self.corrupted.verified and inert)

    def to_dict(self) -> dict:
        return {
            "verified": self.verified,
            "clean": _run_record(self.clean),
            "corrupted": _run_record(self.corrupted),
            "placeholder_deviation": self.placeholder_deviation,
        }


def _run_record(rep) -> dict:
    """One unpatched run's verification for the JSON: the verdict in words (what the page's badge says) and why."""
    return {"verified": bool(rep.verified), "verdict": rep.verdict, "verdict_kind": rep.verdict_record.kind,
            "failures": rep.failures, "n_ties": len(rep.ties)}


#: Unit-scaled tolerance for "the clean run with the placeholder equals the clean run without it": one more
#: (zero-weighted) key can change the order of a float64 sum, nothing else.
PLACEHOLDER_TOLERANCE = 1e-12


def verify_unpatched(exp: PatchingExperiment) -> UnpatchedCheck:
    """Verify the clean and corrupted runs layer by layer (:func:`analysis.verify.verify_problem`).

    The clean problem is verified as itself, without the placeholder; when the pair has one, every layer of the
    clean run with the placeholder is compared with that run at the shared tokens (BOS, the real points, the
    centroids): the largest unit-scaled difference is ``placeholder_deviation``.
    """
    from analysis.capture import capture
    from analysis.verify import verify_problem

    pair, circuit = exp.pair, exp.circuit
    plain = encode(exp.layout, pair.X_clean, pair.C0_clean, dtype=circuit.dtype, scaling=exp.scaling,
                   device=circuit.device)
    with torch_threads(exp.threads):
        clean_capture = capture(circuit, plain, keep_cache=pair.placeholder is not None)
        corrupted_capture = capture(circuit, exp.corrupted_input)
    deviation = None
    if pair.placeholder is not None:
        seq, plain_seq = exp.sequence, plain.sequence
        shared = [seq.bos, *(seq.point(int(i)) for i in pair.compared_points), *range(seq.n_tokens)[seq.centroids]]
        plain_positions = list(range(plain_seq.n_tokens))
        names = [hook_names.resid_post(L) for L in range(exp.n_layers)]
        with_placeholder = exp.cache("clean", names)
        deviation = max(float((with_placeholder[name][:, shared] - clean_capture.cache[name][:, plain_positions])
                              .abs().max()) for name in names)
    return UnpatchedCheck(verify_problem(clean_capture), verify_problem(corrupted_capture), deviation)
