"""What training changed in the weights: a trained recurrent model's head circuits and MLPs next to the
construction it started from, in the named basis.

:func:`compare_circuit` compares one head circuit (QK or OV, as TransformerLens ``FactoredMatrix`` objects): cosine,
relative Frobenius distance, singular values, the change of every (row subspace, column subspace) block.
:func:`compare_mlp` compares the MLP coefficients unit role by unit role (:func:`unit_roles`). :data:`KNOB_DOCS`
says where each of the construction's knobs (:meth:`~circuits.training.model.RecurrentKMeans.knobs`) is read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuits.blocks import ASSIGN, UPDATE
from circuits.layout import ResidualLayout
from circuits.training.model import RecurrentKMeans

BLOCK_NAMES = {UPDATE: "update (U)", ASSIGN: "assign (A)"}
KNOB_DOCS = {
    "assign_stiffness": ("assign head: XB.C weight / 2", "stiffness a of the assignment (times BETA)"),
    "assign_norm_weight": ("assign head: -(BETA.N weight)", "weight of |c|^2 in the score; equals a for a distance"),
    "assign_offdiag": ("assign head: off-diagonal / diagonal of XB.C", "0: Euclidean distance; >0: a learned metric"),
    "update_member_score": ("update head: ID_j.Y_j weight", "b: score of a member (times its responsibility)"),
    "update_member_offdiag": ("update head: off-diagonal / diagonal of ID.Y", "centroids scoring other clusters' points"),
    "update_self_score": ("update head: ID_j.ID_j weight", "b*rho: a centroid's score on itself (inertia)"),
    "update_distance_score": ("update head: C.X diagonal", "0: membership only; >0: centroids also attend near points"),
    "update_value_X": ("update head: X -> C_stage diagonal", "1: the new centroid is a mean of points"),
    "update_value_C": ("update head: C -> C_stage diagonal", "1: the own key contributes the old centroid"),
    "schedule_growth": ("update MLP: BETA <- g BETA + 1", "g = 0: constant stiffness; g > 0: a schedule"),
}


@dataclass
class CircuitComparison:
    """One circuit (QK or OV) of one block, trained next to the construction."""

    block: str
    which: str
    trained: np.ndarray
    construction: np.ndarray
    cosine: float
    rel_frobenius: float
    sv_trained: np.ndarray
    sv_construction: np.ndarray
    #: (row subspace, column subspace, |trained|, |construction|, |change|), largest change first.
    blocks: list[tuple[str, str, float, float, float]]


def factored(model: RecurrentKMeans, kind: str, which: str):
    """A head circuit as a TransformerLens ``FactoredMatrix`` (learned part, no structural channel)."""
    from circuits.tl import FactoredMatrix

    w = {name: t.detach().double() for name, t in model.head_weights(kind).items()}
    if which == "QK":
        return FactoredMatrix(w["W_Q"], w["W_K"].T)
    return FactoredMatrix(w["W_V"], w["W_O"])


def subspace_blocks(W: np.ndarray, layout: ResidualLayout) -> tuple[list[str], np.ndarray]:
    names = list(layout.names)
    out = np.array([[np.linalg.norm(W[layout[a], layout[b]]) for b in names] for a in names])
    return names, out


def compare_circuit(trained: RecurrentKMeans, construction: RecurrentKMeans, kind: str, which: str) -> CircuitComparison:
    ft, fc = factored(trained, kind, which), factored(construction, kind, which)
    T, C = ft.AB.numpy(), fc.AB.numpy()
    norm_t, norm_c = np.linalg.norm(T), np.linalg.norm(C)
    names, bt = subspace_blocks(T, trained.layout)
    _, bc = subspace_blocks(C, trained.layout)
    _, bd = subspace_blocks(T - C, trained.layout)
    rows = [(names[i], names[j], float(bt[i, j]), float(bc[i, j]), float(bd[i, j]))
            for i in range(len(names)) for j in range(len(names))]
    rows.sort(key=lambda r: -r[4])
    return CircuitComparison(
        block=kind, which=which, trained=T, construction=C,
        cosine=float((T * C).sum() / max(norm_t * norm_c, 1e-300)),
        rel_frobenius=float(np.linalg.norm(T - C) / max(norm_c, 1e-300)),
        sv_trained=ft.S.numpy(), sv_construction=fc.S.numpy(), blocks=rows,
    )


@dataclass
class MLPRole:
    """Units of one MLP that share a role: what their gate and linear input read and what they write."""

    block: str
    role: str
    units: int
    construction: float
    trained: float
    max_rel_change: float


def unit_roles(model: RecurrentKMeans, kind: str) -> tuple[list[str], np.ndarray]:
    """Per unit its role (``gate x linear -> output`` in subspace names) and its effective coefficient
    ``out * gate * linear`` (the unit's output for unit inputs; single-entry gates and inputs)."""
    L = model.layout
    idx = {name: getattr(model, f"{kind}_mlp_{name}_idx").cpu().numpy() for name in ("gate", "linear", "out")}
    act = {name: getattr(model, f"{kind}_mlp_{name}_active").cpu().numpy() for name in ("gate", "linear")}
    coeff = {name: model.weight(kind, f"mlp_{name}").detach().double().cpu().numpy() for name in ("gate", "linear", "out")}
    roles, eff = [], []
    for u in range(len(idx["out"])):
        def reads(name: str) -> str:
            dims = [int(idx[name][i, u]) for i in range(idx[name].shape[0]) if act[name][i, u]]
            return "+".join(sorted({L.subspace_of(dim)[0] for dim in dims}))
        roles.append(f"{reads('gate')} x {reads('linear')} -> {L.subspace_of(int(idx['out'][u]))[0]}")
        eff.append(coeff["out"][u] * coeff["gate"][0, u] * coeff["linear"][0, u])
    return roles, np.array(eff)


def compare_mlp(trained: RecurrentKMeans, construction: RecurrentKMeans, kind: str) -> list[MLPRole]:
    roles, eff_t = unit_roles(trained, kind)
    _, eff_c = unit_roles(construction, kind)
    out = []
    for role in dict.fromkeys(roles):
        sel = np.array([r == role for r in roles])
        c, t = eff_c[sel], eff_t[sel]
        rel = np.abs(t - c) / np.maximum(np.abs(c), 1e-12)
        out.append(MLPRole(kind, role, int(sel.sum()), float(c.mean()), float(t.mean()),
                           float(np.where(np.abs(c) > 1e-12, rel, np.abs(t - c)).max())))
    out.sort(key=lambda r: -r.max_rel_change)
    return out
