"""Shared fixtures: built circuits are cached per (d, k, iterations, dtype), since tests reuse a few shapes."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch
from hypothesis import settings

# The suite (what CI runs) draws the same Hypothesis examples on every run, so a red run means a change broke
# something, not that a new random draw found an old problem; exploring new examples is a separate, deliberate
# run: KMC_HYPOTHESIS=explore python -m pytest -q (see docs/contributing.md). A problem exploration finds is
# pinned with @example or a file in tests/data, as tests/data/tie_break_cascade.npz was.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("KMC_HYPOTHESIS", "repeatable"))

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


def assert_lloyd_or_honest(rep) -> None:
    """The exactness contract: VERIFIED, or NOT VERIFIED for a reason it states and that lies within the stated
    resolution: labels that differ only inside the circuit's tie-break or rounding (each error names that cause),
    or a float64 tie resolved unlike the reference. Any other failure is a bug."""
    if rep.verified:
        return
    from analysis.verify import Check

    # Once an error with a stated cause has moved the circuit off the reference's trajectory, later trajectory
    # mismatches are its consequences; every step error (each block against the reference on its own input) and
    # every trajectory error up to then must have a cause of its own.
    first = min((m.iteration for m in rep.errors if m.cause), default=None)
    own = [m for m in rep.errors
           if not (m.check == Check.TRAJECTORY and first is not None and m.iteration > first)]
    causes = {m.cause for m in own}
    tie_divergence = any("float64 tie" in f for f in rep.failures)
    assert (rep.errors or tie_divergence) and causes <= {"tie-break", "resolution"}, rep.summary()
    window = rep.tolerances.tie_break * (rep.k - 1)
    assert all(m.gap <= window + m.window or m.cause == "resolution" for m in own), rep.summary()


@pytest.fixture
def run():
    return run_circuit


def assert_forward_is_the_hooked_transformers(model, tasks, steps: int = 3) -> None:
    """A trainable model with every weight moved (into masked dimensions too): its training-time forward pass, which
    skips the masked point x point block, equals the exported HookedTransformer's at every step."""
    import torch

    from circuits.training.model import run_hooked

    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype))
    enc = model.encode(tasks.X, tasks.C0)
    with torch.no_grad():
        fast = model.run(enc.resid, steps, tasks.X.shape[1], keep=True)
    hooked = run_hooked(model.hooked_transformer(), model.layout, enc.resid, steps, True, keep=True)
    for a, b in zip(fast, hooked):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
