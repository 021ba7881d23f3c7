"""The verdict vocabulary (analysis/verify/verdict.py): one wording per kind of promise, exact only for Lloyd's."""

import json
import math

import pytest

from analysis.verify import verdict as v


def test_only_exact_lloyd_says_exact():
    exact = v.exact_lloyd("float64")
    assert exact.verified and exact.exact and "exact Lloyd's" in exact.text and exact.text.startswith("VERIFIED")
    others = [v.approximate_lloyd("float32", 1e-5), v.matches_variant("soft k-means", 5.2e-12, {"beta": 30.0}),
              v.matches_construction("the safeguarded swap", 1e-9), v.trained_export(3e-13),
              v.failure("labels differ", reference="Lloyd's k-means")]
    for other in others:
        assert not other.exact and "exact" not in other.text, other.text


def test_variant_names_its_reference_and_tolerance():
    soft = v.matches_variant("soft k-means", 5.2e-12, {"beta": 30.0})
    assert soft.text == "VERIFIED (matches soft k-means, beta = 30, to 5.2e-12, float64; not Lloyd's)"
    assert soft.to_dict()["verdict_tolerance"] == 5.2e-12 and soft.to_dict()["verdict_kind"] == "variant"


def test_trained_and_construction_disclaim_lloyd():
    assert "not Lloyd's" in v.trained_export(1e-12).text and "training forward" in v.trained_export(1e-12).text
    assert "numpy reference" in v.matches_construction("the safeguarded swap", 1e-9).text


def test_failure_names_layer_hook_and_cause():
    f = v.failure("3 labels differ from Lloyd's", reference="Lloyd's k-means", layer=5, role="assign, t = 2",
                  altered_by=["hook blocks.5.attn.hook_pattern (zero ablation)"])
    assert not f.verified and f.text.startswith("NOT VERIFIED")
    for part in ("layer 5", "assign, t = 2", "blocks.5.attn.hook_pattern", "zero ablation", "3 labels differ"):
        assert part in f.text
    d = f.to_dict()
    assert d["first_failing_layer"] == 5 and d["altered_by"] == ["hook blocks.5.attn.hook_pattern (zero ablation)"]
    # A failure not localised to a layer leaves the field out rather than writing a placeholder.
    assert "first_failing_layer" not in v.failure("cause").to_dict()


@pytest.mark.parametrize("x, text", [(0.0, "0.0e+00"), (3.2e-7, "3.2e-07"), (0.999, "1.0e+00"), (1.0, "no bound"),
                                     (1.044, "no bound"), (math.inf, "no bound"), (math.nan, "no bound"),
                                     (None, "no bound")])
def test_leak_bound_of_one_or_more_reads_no_bound(x, text):
    assert v.bound_text(x) == text


def test_convergence_words():
    assert v.convergence_text(True, 1, 10) == "converged: nothing changed after 1 iteration"
    assert v.convergence_text(False, 10, 10).startswith("not converged")
    assert not v.convergence_text(False, 10, 10).startswith("converged")


def test_no_nan_in_any_verdict_and_json_is_strict():
    for verdict in v.EXAMPLES:
        assert "nan" not in verdict.text.lower()
        json.dumps(verdict.to_dict(), allow_nan=False)
    assert [e.kind for e in v.EXAMPLES] == list(v.KINDS)
    assert all(f"`{e.text}`" in v.section() for e in v.EXAMPLES)
