"""Per-variant obligation sets: exact variants are proven (or the defect is named), approximate ones say why not."""

from fractions import Fraction

import pytest
import torch

from analysis.proof.obligation import Status
from analysis.proof.prover import OBLIGATION_SETS, NoObligations, prove_circuit
from circuits import hook_names
from circuits.variants import VARIANTS, get_variant


def test_every_registered_variant_has_an_obligation_set_or_a_reason():
    for name in VARIANTS:
        entry = OBLIGATION_SETS.get(name)
        assert entry is not None, f"variant {name!r} has neither obligations nor a stated reason"
        if isinstance(entry, NoObligations):
            assert entry.reason


@pytest.mark.parametrize("spec", ["damped", "damped:eta=1.2", "damped:eta=0.75"])
def test_damped_is_proved(spec):
    report = prove_circuit(get_variant(spec).build(2, 3, 2), examples=2)
    assert report.ok, report.render()
    assert report.get("update.MLP.damped_commit").layers == [2, 4]
    assert report.get("update.MLP.commit_centroid").layers == [0]  # the first update commits C0 undamped


def test_over_relaxed_damping_fails_the_masking_argument():
    """eta = 1.5: every weight obligation holds, but centroids c + 1.5 (m - c) can reach norm 3 (= eta / (2 - eta)),
    and at distance 4 a centroid no longer provably beats the masked keys (mask = 16)."""
    report = prove_circuit(get_variant("damped:eta=1.5").build(2, 3, 2), examples=0)
    assert all(o.ok for o in report.obligations)
    assert [o.name for o in report.failed] == ["theorem.assign.argmax"]
    assert "r_c = 3" in report.get("theorem.assign.argmax").detail


@pytest.mark.parametrize("eta", [0.1, 0.3, 0.5, 0.9])
def test_damped_norm_is_exact_iff_one_minus_eta_is_a_float(eta):
    """The squaring units read (1 - eta) C + eta C_stage with 1 - eta rounded to float64: N = |c_new|^2 holds
    exactly, for every input, only when that rounding is exact; the prover names the obligation otherwise."""
    report = prove_circuit(get_variant(f"damped:eta={eta}").build(2, 2, 1), examples=0)
    exact_weight = Fraction(1 - eta) == 1 - Fraction(eta)
    failed = {o.name for o in report.obligations if o.status == Status.FAILED}
    assert failed == (set() if exact_weight else {"update.MLP.damped_square_norm"})


@pytest.mark.parametrize("radius", [0.3, 0.5, 3.0])
def test_trimmed_is_proved_with_outliers_in_the_examples(radius):
    report = prove_circuit(get_variant(f"trimmed:radius={radius}").build(2, 3, 2), examples=3)
    assert report.ok, report.render()
    assert report.get("assign.sink.threshold").status == "PROVED"
    assert report.get("model.architecture").status == "PROVED"  # use_attention_sinks is this variant's lever


def test_trimmed_sink_mutation_is_named():
    circuit = get_variant("trimmed").build(2, 2, 1)
    param = dict(circuit.model.named_parameters())[hook_names.param(1, "attn", "sinks")]
    with torch.no_grad():
        param[0] = param[0] * 2
    report = prove_circuit(circuit, examples=0)
    assert {o.name for o in report.obligations if o.status == Status.FAILED} == {"assign.sink.threshold"}


@pytest.mark.parametrize("name,status,ok", [("soft", Status.NOT_APPLICABLE, True), ("annealed", Status.NOT_APPLICABLE, True),
                                            ("sparse", Status.NOT_PROVEN, False), ("spherical", Status.NOT_PROVEN, False),
                                            ("gumbel", Status.NOT_PROVEN, False)])
def test_variants_without_obligations_say_why(name, status, ok, capsys):
    from analysis import cli

    assert cli.main(["prove", "--d", "2", "--k", "2", "--variant", name]) == (0 if ok else 1)
    out = capsys.readouterr().out
    assert ("NOT APPLICABLE" if ok else "NOT PROVEN") in out
    entry = OBLIGATION_SETS[name]
    assert isinstance(entry, NoObligations) and (status == Status.NOT_PROVEN) == entry.exact
