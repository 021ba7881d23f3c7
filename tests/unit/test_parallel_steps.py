"""The step-wise checks on the run's threads (analysis.verify.steps.check_blocks with a scheduler of several threads,
as at scale): the same findings in the same order as the checks writing one after another into one record."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from sklearn.datasets import load_iris

from analysis.capture import capture
from analysis.pipeline import lloyd_scaling
from analysis.scheduler import Scheduler
from analysis.verify import steps, verify_problem
from analysis.verify.problem import Findings, CheckedProblem
from circuits.blocks import ASSIGN, UPDATE
from circuits.build import build_lloyd_circuit
from circuits.encoding import encode
from circuits.initialisation import initial_centroids

pytestmark = pytest.mark.fast


def _capture(dtype, faulty_updates: bool):
    """Iris from random centroids (seed 0); ``faulty_updates``: every update block after the first writes its
    centroids scaled a little (a different factor each), so each fails on its own."""
    X = load_iris().data
    C0 = initial_centroids(X, 3, "random", 0)
    circuit = build_lloyd_circuit(4, 3, 4, dtype=dtype)
    if faulty_updates:
        with torch.no_grad():
            for layer in circuit.centroid_layers[1:]:
                circuit.model.blocks[layer].attn.W_O.mul_(1 + 1e-3 * layer)
    return capture(circuit, encode(circuit.layout, X, C0, dtype=dtype, scaling=lloyd_scaling(X, C0)),
                   path="structured")


def _one_after_another(p: CheckedProblem) -> Findings:
    """The oracle: every block's check writing into one record, in layer order (check_blocks before threads)."""
    found = Findings()
    for lc in p.cap.layers:
        if lc.kind == ASSIGN:
            steps._check_assign(p, lc, found)
        elif lc.kind == UPDATE:
            steps._check_update(p, lc, found)
    return found


@pytest.mark.parametrize("dtype, faulty", [(torch.float64, True), (torch.float32, False), (torch.float32, True)])
def test_blocks_checked_two_at_a_time_find_the_same_in_the_same_order(monkeypatch, dtype, faulty):
    """float32: step-wise errors and unresolved decisions; faulty updates: a failure at each update layer. The
    threads' findings, merged, are the oracle's, list order included; the reports agree too."""
    cap = _capture(dtype, faulty)
    p = CheckedProblem.of(cap, 0)
    oracle = _one_after_another(p)
    names = []
    real = steps._check_block
    monkeypatch.setattr(steps, "_check_block", lambda *a: names.append(threading.current_thread().name) or real(*a))
    found = Findings()
    scheduler = Scheduler(threads=3)
    steps.check_blocks(p, found, scheduler)
    scheduler.close()
    assert len(names) == len(cap.circuit.assignment_layers) + len(cap.circuit.centroid_layers)
    assert any(name.startswith("kmc-worker") for name in names)  # the workers took some
    assert oracle.failures or oracle.mismatches  # something whose order can differ
    for name in ("mismatches", "ties", "unresolved", "failing_layers", "step_centroid_error", "step_counts",
                 "objective_circuit", "step_weight_error"):
        assert getattr(found, name) == getattr(oracle, name), name
    n_steps = sum(m.kind.name == "ERROR" for m in oracle.mismatches)
    assert found.failures[: len(oracle.failures)] == oracle.failures
    assert len(found.failures) == len(oracle.failures) + (1 if n_steps else 0) + (1 if oracle.unresolved else 0)
    if faulty:
        assert len([f for f in oracle.failures if "update" in f]) == len(cap.circuit.centroid_layers) - 1
    monkeypatch.undo()
    one_by_one = json.dumps(verify_problem(cap, 0).to_dict(), sort_keys=True, default=str)
    scheduler = Scheduler(threads=3)
    assert json.dumps(verify_problem(cap, 0, scheduler).to_dict(), sort_keys=True, default=str) == one_by_one
    scheduler.close()
