"""The theorem, run: the whole circuit in exact arithmetic with hardmax attention against exact Lloyd's.

Small random problems on a dyadic grid inside the unit ball (exact in float64, many exact ties, which exercise the
tie rule) are encoded by the circuit's own encoder (:func:`circuits.encoding.encode`, with the identity scaling:
the grid is already in unit coordinates), run through :func:`~analysis.proof.theorem.hard_forward.hard_forward`, and
compared at every layer with :func:`~analysis.proof.theorem.exact_lloyd.exact_lloyd`. Evidence (``CHECKED``), not proof.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from analysis.proof.exact import ModelParams
from analysis.proof.theorem.exact_lloyd import Vector, exact_lloyd
from analysis.proof.theorem.hard_forward import hard_forward
from analysis.proof.obligation import Obligation, Status, verdict
from circuits.blocks import ASSIGN, UPDATE
from circuits.layout import ResidualLayout, SequenceLayout


def exact_encoding(layout: ResidualLayout, X: list[Vector], C0: list[Vector]) -> tuple[list[list[Fraction]], SequenceLayout]:
    """The encoder's residual (tokens x d_model) for a problem already in unit coordinates, as exact Fractions."""
    from circuits.encoding import UnitScaling, encode  # torch: loaded only when examples run

    if any(Fraction(float(v)) != v for row in X + C0 for v in row):
        raise ValueError("coordinates must be exact in float64 to go through the encoder unchanged")
    identity = UnitScaling(np.zeros((1, layout.d)), np.ones(1))
    enc = encode(layout, np.array(X, dtype=np.float64), np.array(C0, dtype=np.float64), scaling=identity)
    return [[Fraction(v) for v in row] for row in enc.resid[0].tolist()], enc.sequence


def grid_problem(rng: np.random.Generator, d: int, k: int) -> tuple[list[Vector], list[Vector]]:
    """``n = k + 3`` points on a dyadic grid inside the unit ball; the initial centroids are ``k`` of them."""
    denom = 2 ** int(np.ceil(np.log2(4 * np.sqrt(d) + 1)))
    n = k + 3
    X = [[Fraction(int(v), denom) for v in row] for row in rng.integers(-4, 5, size=(n, d))]
    rows = rng.choice(n, size=k, replace=False)
    return X, [list(X[r]) for r in rows]


def compare_layers(circuit, states, seq: SequenceLayout, cents, labs) -> list[str]:
    """Where the hardmax circuit's layers differ from the exact reference (update: C, N, C_stage; assign: Y)."""
    L, d, k = circuit.layout, circuit.layout.d, circuit.layout.k
    problems = []
    it_u = it_a = 0
    for layer, state in enumerate(states):
        kind = circuit.schedule[layer]
        if kind == UPDATE:
            for j in range(k):
                row = state[seq.centroid(j)]
                c = [row[L.index("C", m)] for m in range(d)]
                if c != cents[it_u][j] or row[L.index("N")] != sum((v * v for v in c), Fraction(0)):
                    problems.append(f"layer {layer}: centroid {j} (C or N) differs from the exact reference")
                if any(row[L.index("C_stage", m)] for m in range(d)):
                    problems.append(f"layer {layer}: C_stage not emptied")
            it_u += 1
        elif kind == ASSIGN:
            for i in range(seq.n):
                row = state[seq.point(i)]
                y = [row[L.index("Y", j)] for j in range(k)]
                if y != [Fraction(int(j == labs[it_a][i])) for j in range(k)]:
                    problems.append(f"layer {layer}: point {i} is not assigned like the exact reference")
            it_a += 1
    return problems


def run_examples(circuit, params: ModelParams, examples: int, seed: int = 0, eta: Fraction = Fraction(1)) -> Obligation:
    """Run the exact hardmax circuit on small random problems; compare every layer with exact Lloyd."""
    sharp, k = circuit.sharpness, circuit.layout.k
    t = [Fraction(float(sharp.tie_break * j)) for j in range(k)]
    # Trimmed circuits: the threshold is what the assign head's sink logit says (its obligation ties it to radius).
    sinks = [lp.head.sinks for lp in params.layers if circuit.schedule[lp.layer] == ASSIGN]
    theta = None if sinks[0] is None else -Fraction(sinks[0]) / Fraction(sharp.beta)
    rng = np.random.default_rng(seed)
    problems, ran = [], 0
    for _ in range(examples):
        X, C0 = grid_problem(rng, circuit.layout.d, k)
        ref = exact_lloyd(X, C0, circuit.iterations, t, eta, theta)
        if ref is None:
            continue  # a point with two minimisers: outside the theorem
        ran += 1
        resid, seq = exact_encoding(circuit.layout, X, C0)
        problems = compare_layers(circuit, hard_forward(params, resid), seq, *ref)
        if problems:
            break
    return Obligation(
        "theorem.examples", "theorem",
        f"Executed: the whole circuit in exact rational arithmetic with hardmax attention, on {ran} random grid"
        f" problem(s) (n = k + 3, exact ties included), equals exact Lloyd at every layer. Evidence, not proof.",
        verdict(problems, Status.CHECKED), "exact forward pass (Fractions) vs exact Lloyd", [],
        "; ".join(problems[:3]),
    )
