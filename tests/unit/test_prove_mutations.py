"""Mutation tests: one weight entry changed in a built model, and the prover must name exactly the broken obligation.

Each mutation is a sign flip, a rescaling (by 2, 1/2, or 1 + 2^-30, far below a float64's visibility in a plot) or a
stray value in an entry that should be zero, sampled with a fixed seed from every parameter of a QK circuit, an OV
circuit, an MLP and the unembedding, in an assign layer and in an update layer.

The expected obligation is worked out here, independently of the prover: for heads, which entries of the
(bias-augmented) product ``W_Q W_K^T`` / ``W_V W_O`` the mutated factor entry touches, and which named block each
lies in, from a table written from the construction's description in docs/circuit.md; for MLPs, whether the unit
is live, whether the entry reads or writes outside the block's subspaces, and which coordinates the unit writes. A
mutation that changes no circuit (a row of an unused head dimension) must leave every obligation proved.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis.proof.obligation import Status
from analysis.proof.prover import prove_circuit
from circuits import hook_names
from circuits.build import build_lloyd_circuit

D, K = 2, 3
ASSIGN_LAYER, UPDATE_LAYER = 1, 2

QK_BLOCKS = {
    "assign": {("X", "C"): "distance", ("IS_POINT", "N"): "distance", ("IS_POINT", "ID"): "tie_break",
               ("IS_POINT", "IS_POINT"): "mask", ("IS_POINT", "IS_BOS"): "mask", ("IS_CENTROID", "IS_BOS"): "mask",
               ("IS_BOS", "IS_BOS"): "mask"},
    "update": {("ID", "Y"): "membership", ("ID", "ID"): "self", ("IS_POINT", "IS_BOS"): "sink",
               ("IS_BOS", "IS_BOS"): "sink"},
}
OV_BLOCKS = {
    "assign": {("ID", "Y_stage"): "id_to_y_stage"},
    "update": {("X", "C_stage"): "coordinates_to_c_stage", ("C", "C_stage"): "coordinates_to_c_stage"},
}
MLP = {
    "assign": {"reads": {"Y", "Y_stage", "IS_POINT", "ONE"}, "groups": {"Y": "commit", "Y_stage": "clear_stage"}},
    "update": {"reads": {"C", "C_stage", "N", "IS_CENTROID", "ONE"},
               "groups": {"C": "commit_centroid", "C_stage": "clear_stage", "N": "square_norm"}},
}
SCALES = (2.0, 0.5, 1 + 2.0**-30)


@pytest.fixture(scope="module")
def circuit():
    return build_lloyd_circuit(D, K, 1)


def subspace(layout, i: int) -> str:
    return "bias" if i == layout.d_model else layout.subspace_of(i)[0]


def arrays(circuit, layer: int) -> dict[str, np.ndarray]:
    state = circuit.model.state_dict()
    get = lambda comp, name: state[hook_names.param(layer, comp, name)].double().numpy()  # noqa: E731
    return {
        "W_Q": get("attn", "W_Q")[0], "b_Q": get("attn", "b_Q")[0], "W_K": get("attn", "W_K")[0],
        "b_K": get("attn", "b_K")[0], "W_V": get("attn", "W_V")[0], "b_V": get("attn", "b_V")[0],
        "W_O": get("attn", "W_O")[0], "b_O": get("attn", "b_O"),
        "W_gate": get("mlp", "W_gate"), "W_in": get("mlp", "W_in"), "b_in": get("mlp", "b_in"),
        "W_out": get("mlp", "W_out"), "b_out": get("mlp", "b_out"),
    }


def expected_head(layout, kind: str, a: dict, param: str, idx: tuple) -> set[str]:
    """Obligations broken by changing ``a[param][idx]``: the named blocks of the product entries it touches."""
    Q = np.vstack([a["W_Q"], a["b_Q"][None]])
    K_ = np.vstack([a["W_K"], a["b_K"][None]])
    V = np.vstack([a["W_V"], a["b_V"][None]])
    bias = layout.d_model
    if param in ("W_Q", "b_Q", "W_K", "b_K"):
        i, c = (idx if param.startswith("W") else (bias, idx[0]))
        if param.endswith("Q"):
            pairs = [(i, j) for j in np.flatnonzero(K_[:, c])]
        else:
            pairs = [(j, i) for j in np.flatnonzero(Q[:, c])]
        names = {QK_BLOCKS[kind].get((subspace(layout, r), subspace(layout, s)), "zero_elsewhere") for r, s in pairs}
        return {f"{kind}.QK.{n}" for n in names}
    if param in ("W_V", "b_V"):
        i, c = idx if param == "W_V" else (bias, idx[0])
        pairs = [(i, o) for o in np.flatnonzero(a["W_O"][c])]
    elif param == "W_O":
        c, o = idx
        pairs = [(i, o) for i in np.flatnonzero(V[:, c])]
    else:  # b_O: a constant written whatever the pattern
        return {f"{kind}.OV.zero_elsewhere"}
    names = {OV_BLOCKS[kind].get((subspace(layout, r), subspace(layout, s)), "zero_elsewhere") for r, s in pairs}
    return {f"{kind}.OV.{n}" for n in names}


def expected_mlp(layout, kind: str, a: dict, param: str, idx: tuple) -> set[str]:
    spec = MLP[kind]
    group = lambda i: spec["groups"].get(subspace(layout, i), "support")  # noqa: E731
    if param == "b_out":
        i = idx[0]
        return {f"{kind}.MLP.support", f"{kind}.MLP.{group(i)}"}
    u = idx[1] if param in ("W_gate", "W_in") else idx[0]
    live = a["W_gate"][:, u].any() and a["W_in"][:, u].any() and a["W_out"][u].any()
    if not live:
        return set()
    outputs = np.flatnonzero(a["W_out"][u])
    out = set()
    if param in ("W_gate", "W_in"):
        if subspace(layout, idx[0]) not in spec["reads"]:
            out.add("support")
        out |= {group(o) for o in outputs}
    elif param == "b_in":
        out |= {"support"} | {group(o) for o in outputs}
    else:  # W_out
        out.add(group(idx[1]))
    return {f"{kind}.MLP.{n}" for n in out}


def mutations(a: np.ndarray, rng, n_each: int = 1):
    """(index, how, new value): sign flips and rescalings of non-zero entries, stray values in zero entries."""
    nonzero = np.argwhere(a != 0)
    zero = np.argwhere(a == 0)
    out = []
    for how in ("sign", "scale", "stray"):
        pool = zero if how == "stray" else nonzero
        for row in pool[rng.choice(len(pool), size=min(n_each, len(pool)), replace=False)] if len(pool) else []:
            idx = tuple(int(v) for v in row)
            old = a[idx]
            new = {"sign": -old, "scale": old * SCALES[rng.integers(len(SCALES))], "stray": 0.375}[how]
            out.append((idx, how, new))
    return out


def mutate_and_prove(circuit, key: str, full_idx: tuple, value: float):
    param = dict(circuit.model.named_parameters())[key]
    with torch.no_grad():
        old = param[full_idx].clone()
        param[full_idx] = value
    try:
        return prove_circuit(circuit, examples=0)
    finally:
        with torch.no_grad():
            param[full_idx] = old


def failed_obligations(report) -> set[str]:
    return {o.name for o in report.obligations if o.status == Status.FAILED}


HEAD_PARAMS = ("W_Q", "W_K", "b_Q", "b_K", "W_V", "W_O", "b_V", "b_O")
MLP_PARAMS = ("W_gate", "W_in", "W_out", "b_in", "b_out")


@pytest.mark.parametrize("kind,layer", [("assign", ASSIGN_LAYER), ("update", UPDATE_LAYER)])
@pytest.mark.parametrize("component,params", [("head", HEAD_PARAMS), ("mlp", MLP_PARAMS)])
def test_single_entry_mutations_are_caught_and_named(circuit, kind, layer, component, params):
    layout = circuit.layout
    rng = np.random.default_rng(layer * 10 + len(component))
    a = arrays(circuit, layer)
    caught = 0
    for param in params:
        for idx, how, new in mutations(a[param], rng):
            expected = (expected_head if component == "head" else expected_mlp)(layout, kind, a, param, idx)
            comp = "attn" if component == "head" else "mlp"
            key = hook_names.param(layer, comp, param)
            # Head weights carry a leading head axis (one head); b_O and MLP parameters do not.
            full_idx = (0, *idx) if comp == "attn" and param != "b_O" else idx
            report = mutate_and_prove(circuit, key, full_idx, new)
            got = failed_obligations(report)
            assert got == expected, f"{key}{list(idx)} {how}: prover failed {sorted(got)}, expected {sorted(expected)}"
            if expected:
                caught += 1
                assert not report.ok
                for name in expected:
                    assert report.get(name).detail.startswith(f"layer {layer}"), report.get(name).detail
            else:
                assert report.ok, report.render()
    # Most sampled mutations change the circuit; the test is void if none did.
    assert caught >= len(params)


def test_unembedding_mutations(circuit):
    rng = np.random.default_rng(7)
    state = circuit.model.state_dict()
    for key in (hook_names.UNEMBED_W, hook_names.UNEMBED_B):
        a = state[key].double().numpy()
        for idx, how, new in mutations(a, rng, n_each=2):
            report = mutate_and_prove(circuit, key, idx, new)
            assert failed_obligations(report) == {"unembed.reads_y"}, (key, idx, how)
            assert report.get("theorem.unembed").status == Status.FAILED


def test_unmutated_model_proves(circuit):
    assert prove_circuit(circuit, examples=0).ok


def _col(a: np.ndarray, row: int, partner: np.ndarray | None = None) -> int:
    """A head dimension where ``a[row]`` is non-zero (and, if given, the partner factor's column is used)."""
    for c in np.flatnonzero(a[row]):
        if partner is None or partner[:, c].any():
            return int(c)
    raise AssertionError(f"row {row} is all zero")


def targeted(layout, kind: str, a: dict) -> list[tuple[str, tuple, str]]:
    """(param, index, how) aimed at each named obligation of a block kind, found through the layout."""
    i = layout.index
    unit_writing = lambda label_index: int(np.flatnonzero(a["W_out"][:, label_index])[0])  # noqa: E731
    if kind == "assign":
        point_col = _col(a["W_Q"], i("IS_POINT"))
        x_col = _col(a["W_Q"], i("X", 0))
        return [
            ("W_Q", (i("X", 0), x_col), "scale"),
            ("W_K", (i("ID", layout.k - 1), point_col), "sign"),
            ("W_K", (i("IS_BOS"), point_col), "scale"),
            ("W_K", (i("Y", 0), x_col), "stray"),
            ("W_O", (_col(a["W_V"], i("ID", 1)), i("Y_stage", 1)), "scale"),
            ("W_O", (_col(a["W_V"], i("ID", 1)), i("X", 0)), "stray"),
            ("W_out", (unit_writing(i("Y", 0)), i("Y", 0)), "sign"),
            ("W_out", (unit_writing(i("Y_stage", 0)), i("Y_stage", 0)), "sign"),
            ("W_gate", (i("X", 0), unit_writing(i("Y", 0))), "stray"),
        ]
    id_col = _col(a["W_Q"], i("ID", 1))
    sink_col = _col(a["W_Q"], i("IS_BOS"))
    n_unit = [u for u in np.flatnonzero(a["W_out"][:, i("N")]) if a["W_gate"][i("N"), u]][0]
    return [
        ("W_K", (i("Y", 1), id_col), "sign"),
        ("W_K", (i("ID", 1), id_col), "scale"),
        ("W_Q", (i("IS_BOS"), sink_col), "sign"),
        ("b_K", (id_col,), "stray"),
        ("W_V", (i("X", 1), _col(a["W_V"], i("X", 1))), "scale"),
        ("b_O", (i("Y", 0),), "stray"),
        ("W_out", (unit_writing(i("C", 0)), i("C", 0)), "sign"),
        ("W_out", (unit_writing(i("C_stage", 1)), i("C_stage", 1)), "sign"),
        ("W_out", (int(n_unit), i("N")), "scale"),
        ("W_in", (i("Y", 0), unit_writing(i("C", 0))), "stray"),
    ]


def test_every_named_obligation_can_be_broken_by_one_entry(circuit):
    """Targeted single-entry mutations break each block obligation in turn, and the prover names exactly it."""
    layout = circuit.layout
    broken: set[str] = set()
    for kind, layer in (("assign", ASSIGN_LAYER), ("update", UPDATE_LAYER)):
        a = arrays(circuit, layer)
        for param, idx, how in targeted(layout, kind, a):
            old = a[param][idx]
            new = {"sign": -old, "scale": 2 * old if how == "scale" else old, "stray": 0.375}[how]
            assert new != old
            component = "head" if param in HEAD_PARAMS else "mlp"
            expected = (expected_head if component == "head" else expected_mlp)(layout, kind, a, param, idx)
            comp = "attn" if component == "head" else "mlp"
            full_idx = (0, *idx) if comp == "attn" and param != "b_O" else idx
            report = mutate_and_prove(circuit, hook_names.param(layer, comp, param), full_idx, new)
            assert failed_obligations(report) == expected, (kind, param, idx, how)
            broken |= expected
    every = {o.name for o in prove_circuit(circuit, examples=0).obligations
             if o.name.split(".")[0] in ("assign", "update")}
    assert broken == every
