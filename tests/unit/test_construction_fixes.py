"""The constructions' verification contract (issues 30 and 33): per-column tolerances in each column's spread and
magnitude, the learned construction's mask and tie-break chosen from what its run reaches before it runs, one
Lloyd's reference (exact nearest centroids) beside both, and the choice gap's meaning.

Each case is checked against an independent reference: exact rational means and distances (``fractions``), the
numpy references of :mod:`circuits.swap.reference` and :mod:`circuits.learned.reference`."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

from analysis.constructions import learned, swap
from analysis.constructions.learned import LEARNED
from analysis.constructions.swap import SWAP
from analysis.constructions.common import choice_gap, exact_lloyd, tied_with
from analysis.verify.swap import CENTROID_TOLERANCE, column_tolerances, differences, spread
from circuits import reference
from circuits.learned.build import mask_for, reach_needed
from circuits.learned.reference import learned_swap, reach

MARGIN = 1e-10

#: Six points at a large common offset, two initial centroids (issue 33): the spread is 0.013, one ulp of the data
#: 1.5e-8, so a tolerance of 1e-9 of the spread is below what float64 can say about these centroids.
OFFSET_X = (1e8 + np.array([0.0, 0.001, 0.003, 0.010, 0.011, 0.013]))[:, None]
OFFSET_C0 = (1e8 + np.array([0.0, 0.010]))[:, None]


def exact_mean(rows: np.ndarray) -> np.ndarray:
    return np.array([float(sum(Fraction(v) for v in col) / len(col)) for col in np.asarray(rows).T])


@pytest.mark.parametrize("run", [SWAP.cluster, LEARNED.cluster])
def test_data_at_a_large_offset_verifies_and_its_centroids_are_the_exact_means(run):
    doc = run(OFFSET_X, OFFSET_C0, 2)
    assert doc["verified"] and doc["problems"] == [], doc["problems"]
    # Each final centroid is the exactly rounded mean of its members, to a few ulps, and the members are Lloyd's.
    labels = np.array(doc["labels"])
    C = np.array(doc["centroids"])
    for j in range(2):
        assert np.abs(C[j] - exact_mean(OFFSET_X[labels == j])).max() <= 4 * np.spacing(1e8)
    # The spread-only tolerance of before is below one ulp here: it could not have verified a correct run.
    assert CENTROID_TOLERANCE * spread(OFFSET_X) < np.spacing(1e8)


def test_each_column_is_held_to_its_own_tolerance():
    """One column at 1e8 and one at 1e-8: an error of 0.16% in the small column is caught (and named), though it is
    far inside one number set by the wide column (the contract before)."""
    rng = np.random.default_rng(0)
    X = np.c_[rng.random(30) * 1e8, rng.random(30) * 1e-8]
    C0 = X[:3].copy()
    ref = reference.lloyd(X, C0, 2)
    tol = column_tolerances(X, C0)
    good = SimpleNamespace(centroids=ref.centroids.copy(), choices=["lloyd", "lloyd"])
    assert differences(good, SimpleNamespace(centroids=ref.centroids, choices=["lloyd", "lloyd"]), tol) == []
    bad = ref.centroids.copy()
    bad[2, :, 1] *= 1.0016
    error = np.abs(bad - ref.centroids)[2, :, 1].max()
    assert error < CENTROID_TOLERANCE * spread(X)  # what one number for all columns let through
    found = differences(SimpleNamespace(centroids=bad, choices=["lloyd", "lloyd"]),
                        SimpleNamespace(centroids=ref.centroids, choices=["lloyd", "lloyd"]), tol)
    assert len(found) == 1 and found[0].startswith("step 2: centroids") and "in column 1" in found[0]
    # The tolerance is each column's: a fraction of its spread plus a few ulps of its magnitude.
    eps = np.finfo(np.float64).eps
    for m in range(2):
        col = X[:, m]
        assert tol[m] == pytest.approx(1e-9 * np.abs(col - col.mean()).max() + 64 * eps * np.abs(col).max())


#: Five points in d = 8, k = 4 (issue 33): the learned candidate, kept at step 1 with an empty cluster, leaves the
#: unit ball, and step 2's extrapolation reaches beyond what the factors' default mask keeps exact.
def far_reaching() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(390)
    return rng.normal(size=(5, 8)), rng.normal(size=(4, 8))


def test_the_learned_construction_chooses_its_mask_before_it_runs():
    X, C0 = far_reaching()
    alphas = learned.load_alphas()
    ref = learned_swap(X, C0, 2, alphas, MARGIN)
    need = reach_needed(X, C0, ref.centroids[:-1], alphas)
    assert ref.choices[0] == "learned" and need.max() > mask_for(alphas)  # the default would not do
    circ = learned.circuit_for([(X, C0)], 2)
    assert circ.knobs.sharpness.mask >= need.max()
    doc = LEARNED.cluster(X, C0, 2)
    assert doc["verified"] and doc["problems"] == []
    assert [r["choice"] for r in doc["per_iteration"]] == ref.choices
    np.testing.assert_allclose(doc["centroids"], ref.centroids[-1], rtol=0, atol=1e-12 * spread(X))
    assert SWAP.cluster(X, C0, 2)["verified"]  # the swap verifies the same input


@pytest.mark.parametrize("which", [("--construction", "learned"), ("--checkpoint", "checkpoints/learned")])
def test_the_far_reaching_input_runs_on_the_command_line(which, tmp_path, capsys):
    """`cluster` on the same input, by construction and by checkpoint: exit 0 and VERIFIED (it was exit 3, a
    RuntimeError raised after the whole circuit had run)."""
    import json
    from pathlib import Path

    from analysis.cli import main

    X, C0 = far_reaching()
    np.savetxt(tmp_path / "x.csv", X, delimiter=",")
    np.savetxt(tmp_path / "c.csv", C0, delimiter=",")
    root = Path(__file__).resolve().parents[2]
    argv = ["cluster", "--data", tmp_path / "x.csv", "--init", tmp_path / "c.csv", "--k", 4, "--iterations", 2,
            which[0], root / which[1] if which[0] == "--checkpoint" else which[1], "--json"]
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["verified"], err


def test_a_problem_beyond_what_float64_can_mask_is_refused_in_one_line(monkeypatch):
    from analysis.errors import ProblemError

    X, C0 = far_reaching()
    monkeypatch.setattr(learned, "extent", lambda problems, steps, alphas: (1e300, 1.0))
    with pytest.raises(ProblemError, match="cannot keep this problem exact"):
        learned.circuit_for([(X, C0)], 2)


def test_the_learned_tie_break_follows_what_its_centroids_reach():
    """The learned tie-break was the swap's times the factors' worst case, reach(alphas)^2 = 121; it is now the swap's
    times the reach of this problem's own current and extrapolated centroids (plus the wider model's rounding)."""
    rng = np.random.default_rng(3)
    X = rng.integers(0, 6, size=(40, 2)).astype(float)
    C0 = X[rng.choice(40, 4, replace=False)]
    mask, far = learned.extent([(X, C0)], 4, learned.load_alphas())
    assert 1.0 <= far < reach(learned.load_alphas()) == 11.0
    ratio = learned.circuit_for([(X, C0)], 4).user_tie_break(X, C0) / swap.circuit_for([(X, C0)], 4).user_tie_break(X, C0)
    assert ratio < 4.0
    assert LEARNED.cluster(X, C0, 4)["verified"]


def iris_start():
    from analysis.data import load_dataset, resolve_init

    X = load_dataset("iris").X
    return X, resolve_init("random", X, 3, 0)[0]


def test_lloyds_beside_the_constructions_is_lloyds_at_the_datas_precision_on_iris():
    """Iris from `cluster --dataset iris --k 3`'s start has four ties at the data's precision (float64 gaps 0 to
    1.2e-15): Lloyd's beside the constructions is the reference Lloyd's circuit is held to (circuits/precision.py),
    which sends them to the lower index, and gives 186.35382 after one step. The constructions' own numpy
    references order two of them by float64's comparison the other way (185.29516) in their Lloyd's candidate,
    which neither keeps: the page and JSON say so."""
    from circuits.precision import lloyd_at_data_precision

    X, C0 = iris_start()
    textbook = lloyd_at_data_precision(X, C0, 1)
    C1 = textbook.float_centroids()[1]
    want = reference.objective(X, C1)
    assert want == pytest.approx(186.35382, abs=1e-5)
    cents, objs, _ = exact_lloyd(X, C0, 1)
    np.testing.assert_array_equal(cents[1], C1)
    for doc in (SWAP.cluster(X, C0, 1), LEARNED.cluster(X, C0, 1)):
        rec = doc["per_iteration"][0]
        assert rec["objective_lloyd"] == want == doc["lloyd_inertia"]
        assert rec["candidate_objectives"]["reference"] == pytest.approx(186.35382, abs=1e-5)
        assert rec["reference_candidate_objectives"]["reference"] == pytest.approx(185.29516, abs=1e-5)
        assert any("Lloyd's chain candidate (not kept" in note for note in doc["notes"])
        differ = [note for note in doc["notes"] if note.startswith("Lloyd's: ")]
        assert differ == ["Lloyd's: 2 assignment(s) differ from float64's argmin (what the construction's own Lloyd's"
                          " chain uses): 2 tied at the data's precision and sent to the lower index"]


def test_a_comparison_the_data_decides_against_float64_is_counted_as_decided_not_as_a_tie():
    """Point (1 + 8 ulps, 403.1) is 8 ulps nearer centroid (2, 0) than (0, 0), more than half an ulp of any input
    can move it, but float64's squared distances (162,500 each) round the gap away and its argmin says 0."""
    X = np.array([[0.0, 0.0], [2.0, 0.0], [1.0000000000000018, 403.11298644712923]])
    C0 = np.array([[0.0, 0.0], [2.0, 0.0]])
    assert reference.assign(X, C0)[2] == 0
    assert exact_lloyd(X, C0, 1)[2] == (0, 1)
    notes = SWAP.cluster(X, C0, 1)["notes"]
    assert [n for n in notes if n.startswith("Lloyd's: ")] == [
        "Lloyd's: 1 assignment(s) differ from float64's argmin (what the construction's own Lloyd's chain uses): 1"
        " decided otherwise by exact arithmetic"]


def test_the_choice_gap_is_to_the_next_different_candidate():
    assert choice_gap(np.array([2.0, 1.0, 1.0, 3.0])) == pytest.approx(1.0)
    assert choice_gap(np.array([1.0, 1.0, 1.0])) is None  # a tie: every candidate equal
    assert choice_gap(np.array([1.0, np.nan, 1.5])) == pytest.approx(0.5)  # a candidate left out
    assert tied_with(np.array([2.0, 1.0, 1.0]), ["lloyd", "swap", "reference"], "swap") == ["reference"]


def test_a_different_name_for_the_same_state_is_no_difference():
    """Four integer clusters 3e4 apart: at step 2 Lloyd's step and Lloyd's chain are the same centroids (the run
    has followed Lloyd's), so equal objectives in exact arithmetic; the learned circuit's objectives round apart by
    more than the select margin and it names the chain. The state is the reference's: verified, and the note says
    which names differ. (Before, NOT VERIFIED with no cause; with the candidates' centroids apart it still fails.)"""
    from circuits.learned.reference import safety_chains, step_candidates

    base = np.array([[0, 0], [1, 0], [0, 1], [1, 1], [2, 1], [1, 2]], dtype=float)
    X = np.vstack([base, base + [3e4, 0], base + [0, 3e4], base + [3e4, 3e4]])
    C0 = X[[0, 1, 6, 12]]
    doc = LEARNED.cluster(X, C0, 3)
    assert doc["verified"], doc["problems"]
    alphas = learned.load_alphas()
    ref = learned_swap(X, C0, 3, alphas, MARGIN)
    chains = safety_chains(X, C0, 3, MARGIN)
    renamed = [r for r in doc["per_iteration"] if r["choice"] != r["reference_choice"]]
    for r in renamed:
        t = r["iteration"]
        cands = step_candidates(X, ref.centroids[t - 1], chains.lloyd_centroids[t], chains.centroids[t],
                                alphas[min(t - 1, len(alphas) - 1)])
        np.testing.assert_array_equal(cands[r["choice"]], ref.centroids[t])
        assert any(n.startswith(f"step {t}: the circuit kept") and "the same centroids" in n for n in doc["notes"])


def test_the_page_holds_the_record_and_says_when_attention_is_not_drawn(monkeypatch):
    """The page's tables carry every candidate's objective of the record; above the page's token limit the heads'
    attention is replaced by a note that says why (never an empty or nan figure)."""
    from analysis.report import construction as page

    X, C0 = iris_start()
    result = SWAP.run(X, C0, 2)
    import html
    import re

    text = re.sub(r"<script.*?</script>", "", page.construction_report(result, "iris").to_html(), flags=re.S)
    assert html.escape(result.doc["verdict"]) in text and not re.search(r"\bnan\b", text, re.I)
    for rec in result.doc["per_iteration"]:
        assert all(f"{v:.10g}" in text for v in rec["candidate_objectives"].values())
    drawn = page.attention(result)
    assert drawn["choose"].shape == (2, 3) and np.allclose(drawn["choose"].sum(axis=1), 1.0)
    kept = [page.CANDIDATE_LABELS[c] for c in result.run.choices]
    assert [["Lloyd step", "swap step", "Lloyd's chain"][i] for i in drawn["choose"].argmax(axis=1)] == kept
    monkeypatch.setattr(page, "PAGE_MAX_TOKENS", 10)
    small = page.construction_report(result, "iris")
    assert len(small.figures()) == 1 and "attention not drawn" in small.to_html()


def test_a_choice_decided_by_the_circuits_rounding_is_named():
    """Two candidates whose objectives differ by 4e-11 relative, the circuit's value of the better one off by 1e-10
    the other way: the cause is the circuit's rounding. Off by 0.5 (another state, not a rounding) or apart by more than
    twice what the circuit is off: no such cause."""
    from analysis.verify.swap import choice_rounding

    X = np.array([[0.0], [1.0], [9.0], [10.0]])
    A, B = np.array([[0.5], [9.4]]), np.array([[0.5], [9.4 - 1e-10]])
    cands = {"lloyd": A, "swap": B, "reference": A}
    a, b = reference.objective(X, A), reference.objective(X, B)
    assert 1e-11 < (b - a) / b < 1e-10
    ref = SimpleNamespace(choices=["lloyd"])

    def run(values):
        return SimpleNamespace(choices=["swap"], candidate_objectives=np.array([values]))

    named = choice_rounding(run([a * (1 + 1e-10), b, a]), ref, X, lambda t: cands, 1)
    assert named is not None and named.startswith("cause choice within rounding: at step 1")
    assert choice_rounding(run([a * 1.5, b, a]), ref, X, lambda t: cands, 1) is None
    far = {"lloyd": A, "swap": np.array([[0.5], [20.0]]), "reference": A}
    assert choice_rounding(run([a * (1 + 1e-10), b, a]), ref, X, lambda t: far, 1) is None
