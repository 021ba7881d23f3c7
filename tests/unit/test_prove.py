"""The prover on built circuits: every obligation holds for several shapes, the CLI reports it, the docs say it."""

import json
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from analysis.proof.theorem.examples import run_examples
from analysis.proof.theorem.exact_lloyd import exact_lloyd
from analysis.proof.explain import SECTION_D, SECTION_K, exactness_section
from analysis.proof.theorem.hard_forward import hard_forward
from analysis.proof.obligation import Status
from analysis.proof.prover import prove_circuit
from circuits import reference
from circuits.build import KMeansCircuit, build_lloyd_circuit, build_model
from circuits.blocks import assign_block, lloyd_schedule, unembed_matrix, update_block
from circuits.layout import ResidualLayout
from circuits.sharpness import Sharpness

from conftest import lloyd_circuit
from command_server import run_command

#: The obligations the issue asks for, by name (QK, OV and MLP of each block, unembedding, architecture).
EXPECTED = [
    "model.architecture", "model.semantics", "model.schedule",
    "assign.QK.distance", "assign.QK.tie_break", "assign.QK.mask", "assign.QK.zero_elsewhere",
    "assign.OV.id_to_y_stage", "assign.OV.zero_elsewhere",
    "assign.MLP.support", "assign.MLP.commit", "assign.MLP.clear_stage",
    "update.QK.membership", "update.QK.self", "update.QK.sink", "update.QK.zero_elsewhere",
    "update.OV.coordinates_to_c_stage", "update.OV.zero_elsewhere",
    "update.MLP.support", "update.MLP.commit_centroid", "update.MLP.clear_stage", "update.MLP.square_norm",
    "unembed.reads_y",
]


@pytest.mark.parametrize("d,k,T", [(1, 1, 1), (2, 3, 2), (4, 3, 1), (3, 7, 0)])
def test_every_obligation_is_proved(d, k, T):
    report = prove_circuit(lloyd_circuit(d, k, T), examples=1)
    assert [o.name for o in report.obligations] == EXPECTED
    assert report.ok, report.render()
    assert all(o.status == Status.PROVED for o in report.obligations if o.name != "model.semantics")
    # Block obligations cover every layer of their kind.
    schedule = lloyd_schedule(T)
    assert report.get("assign.QK.distance").layers == [i for i, s in enumerate(schedule) if s == "assign"]
    assert report.get("update.MLP.square_norm").layers == [i for i, s in enumerate(schedule) if s == "update"]
    assert report.get("theorem.examples").status == Status.CHECKED
    assert {o.status for o in report.theorem} <= {Status.PROVED, Status.CHECKED}


def test_sixty_four_dimensions_sixteen_centroids():
    report = prove_circuit(build_lloyd_circuit(64, 16, 1), examples=0)
    assert report.ok, report.render()
    assert len(report.get("update.OV.coordinates_to_c_stage").layers) == 2


def test_tie_break_zero_is_proved_with_the_weaker_tie_statement():
    report = prove_circuit(build_lloyd_circuit(2, 3, 1, sharpness=Sharpness(tie_break=0.0)), examples=0)
    assert report.ok, report.render()
    assert "split evenly" in report.get("theorem.assign.tie_rule").statement


def test_a_changed_architecture_fails_the_architecture_and_semantics_obligations():
    layout, sharp = ResidualLayout(2, 2), Sharpness()
    schedule = lloyd_schedule(1)
    kinds = {"assign": assign_block(layout, sharp), "update": update_block(layout, sharp)}
    model = build_model([kinds[s] for s in schedule], unembed_matrix(layout), layout, use_attn_scale=True)
    circuit = KMeansCircuit.from_model(model, layout, schedule, sharp, 1, "lloyd", [kinds[s] for s in schedule])
    report = prove_circuit(circuit, examples=0)
    assert not report.ok
    assert report.get("model.architecture").status == Status.FAILED and "use_attn_scale" in report.get("model.architecture").detail
    assert report.get("model.semantics").status == Status.FAILED


def test_hardmax_circuit_in_exact_arithmetic_is_lloyd():
    """The theorem, run: exact rational forward pass with hardmax vs exact Lloyd, with many exact ties."""
    circuit = lloyd_circuit(2, 3, 3)
    row = run_examples(circuit, _params(circuit), examples=4, seed=3)
    assert row.status == Status.CHECKED, row.detail
    # And one problem checked against the numpy reference too (an independent implementation).
    X = np.array([[0.25, 0.0], [0.5, 0.25], [-0.5, 0.0], [-0.25, 0.5], [0.0, -0.75], [0.125, 0.125]])
    C0 = X[[0, 2, 4]]
    tie = [Fraction(float(1e-11 * j)) for j in range(3)]
    cents, labels = exact_lloyd([[Fraction(v) for v in x] for x in X], [[Fraction(v) for v in c] for c in C0], 3, tie)
    ref = reference.lloyd(X, C0, 3, tie_break=1e-11)
    np.testing.assert_allclose(np.array(cents[-1], dtype=float), ref.final_centroids, atol=1e-15)
    assert labels[-1] == ref.labels.tolist()
    L = circuit.layout
    resid = []
    for pos in range(1 + 6 + 3):
        r = [Fraction(0)] * L.d_model
        r[L.index("ONE")] = Fraction(1)
        if pos == 0:
            r[L.index("IS_BOS")] = Fraction(1)
        elif pos <= 6:
            r[L.index("IS_POINT")] = Fraction(1)
            r[L.index("X", 0)], r[L.index("X", 1)] = Fraction(X[pos - 1, 0]), Fraction(X[pos - 1, 1])
        else:
            j = pos - 7
            r[L.index("IS_CENTROID")], r[L.index("ID", j)] = Fraction(1), Fraction(1)
            r[L.index("C_stage", 0)], r[L.index("C_stage", 1)] = Fraction(C0[j, 0]), Fraction(C0[j, 1])
        resid.append(r)
    final = hard_forward(_params(circuit), resid)[-1]
    logits = [[final[1 + i][L.index("Y", j)] for j in range(3)] for i in range(6)]
    assert [row.index(1) for row in logits] == ref.labels.tolist()


def _params(circuit):
    from analysis.proof.exact import read_params

    return read_params(circuit.model)


def test_cli_prove_d4_k3_passes_every_obligation():
    out = run_command("prove", "--d", "4", "--k", "3", timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in EXPECTED:
        line = next(line for line in out.stdout.splitlines() if re.search(rf"\s{re.escape(name)}(\s|$)", line))
        assert line.split()[0] in ("PROVED", "CHECKED"), line
    assert out.stdout.strip().splitlines()[-1].startswith("ALL OBLIGATIONS PROVED")


def test_cli_exit_1_names_the_broken_obligation(monkeypatch, capsys):
    from analysis import cli
    import circuits.build

    doubled = lambda layout: 2 * unembed_matrix(layout)  # noqa: E731
    monkeypatch.setattr(circuits.build, "unembed_matrix", doubled)
    assert cli.main(["prove", "--d", "2", "--k", "2", "--json", "--examples", "0"]) == 1
    doc = json.loads(capsys.readouterr().out)
    failed = [o["name"] for o in doc["obligations"] if o["status"] == "FAILED"]
    assert failed == ["unembed.reads_y"]
    assert "W_U[Y[0], logit[0]] = 2" in next(o["detail"] for o in doc["obligations"] if o["name"] == "unembed.reads_y")


@pytest.mark.parametrize("argv", [["--d", "0", "--k", "2"], ["--d", "2", "--k", "2", "--variant", "nope"],
                                  ["--d", "2", "--k", "2", "--beta-update", "-1"]])
def test_cli_bad_input_exit_2(argv, capsys):
    from analysis import cli

    assert cli.main(["prove", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err


def test_exactness_page_section_is_the_provers_output():
    """docs/exactness.md's "Why it is exact" section is exactly what ``python -m analysis.proof.explain`` prints."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "exactness.md").read_text()
    start = page.index("## Why it is exact")
    end = page.index("\n## ", start + 1) + 1
    expected = exactness_section(prove_circuit(lloyd_circuit(SECTION_D, SECTION_K, 1)))
    assert page[start:end] == expected + "\n"


def test_exact_forms_are_transformer_lens_factored_circuits():
    """The prover's exact QK and OV forms, read from the state dict, are TransformerLens' own FactoredMatrix circuits
    (model.QK, model.OV) entry for entry, so the orientation of W_Q, W_K, W_V, W_O is TransformerLens'."""
    from analysis.proof.exact import ov_form, qk_form, read_params

    circuit = lloyd_circuit(2, 3, 1)
    params = read_params(circuit.model)
    d_model = circuit.layout.d_model
    for lp in params.layers:
        for exact, factored in ((qk_form(lp.head), circuit.model.QK[lp.layer, 0]),
                                (ov_form(lp.head)[0], circuit.model.OV[lp.layer, 0])):
            dense = np.zeros((d_model + 1, d_model + 1))
            for (i, j), v in exact.items():
                dense[i, j] = float(v)
            AB = factored.AB.detach().double().numpy()
            np.testing.assert_array_equal(dense[:d_model, : AB.shape[1]], AB)
            assert not dense[d_model].any() and not dense[:, d_model].any()  # no biases in this construction
