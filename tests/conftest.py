"""Shared fixtures: built circuits are cached per (d, k, iterations, dtype), since tests reuse a few shapes."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from analysis.pipeline import RunResult, run_problem
from circuits.build import build_lloyd_circuit


@functools.lru_cache(maxsize=64)
def lloyd_circuit(d: int, k: int, iterations: int, dtype: torch.dtype = torch.float64):
    return build_lloyd_circuit(d, k, iterations, dtype=dtype)


def run_circuit(X, C0, iterations: int, dtype: torch.dtype = torch.float64) -> RunResult:
    """Lloyd's circuit as users run it: tie-break and beta chosen from this problem's data (a circuit with fixed
    knobs is not Lloyd's on every input, which is what these tests check), built per problem."""
    X, C0 = np.asarray(X, dtype=np.float64), np.asarray(C0, dtype=np.float64)
    return run_problem(X, C0, iterations, dtype=dtype)


@pytest.fixture
def run():
    return run_circuit
