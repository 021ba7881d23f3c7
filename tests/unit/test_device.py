"""Devices: every tensor follows the device of its inputs, and VERIFIED means the same on the CPU and on cuda.

Two kinds of test. The device-parametrised ones run on ``cpu`` and on ``cuda`` where torch sees one (skipped with
the reason where it does not): the run on the device is held to the float64 numpy reference
(:func:`circuits.reference.lloyd`) with the report's own tolerances, and to the CPU run of the same problem (same
labels, centroids within the stated centroid tolerance). The leak test runs on any machine: with torch's default
device set to ``meta``, every tensor a code path creates without taking a device from its inputs lands on ``meta``,
and the first operation that mixes it with the run's CPU tensors (or reads it as numpy) fails. A cuda run would
fail the same way ("mat2 is on cuda:0, different from other tensors on cpu"), so the CPU machine catches it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis.capture import capture
from analysis.pipeline import RunOptions, choose_sharpness, lloyd_scaling, run_problem
from analysis.verify import verify_problem
from circuits import reference
from circuits.build import build_lloyd_circuit
from circuits.devices import resolve
from circuits.encoding import encode
from circuits.structured import groups

CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                     reason="no CUDA device on this machine (torch sees none)"))
DEVICES = ["cpu", CUDA]


def _problem(n: int = 120, d: int = 3, k: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    X = centres[rng.integers(0, k, n)] + rng.normal(size=(n, d))
    return X, X[rng.choice(n, k, replace=False)].copy()


def _fresh_caches() -> None:
    """Forget what earlier runs cached on the CPU, so that the run under test creates its own tensors."""
    groups._identity_groups.cache_clear()
    groups.hash_direction.cache_clear()


@pytest.mark.parametrize("path", ["structured", "dense"])
def test_no_tensor_is_created_off_the_inputs_device(path):
    """Under ``torch.device("meta")`` as the default device, a run whose inputs are on the CPU gives the same
    verified result as without it: nothing it computes came from a tensor made on the default device."""
    X, C0 = _problem()
    sharpness, _ = choose_sharpness(X, [C0])
    circuit = build_lloyd_circuit(3, 4, 3, sharpness=sharpness)
    if path == "dense":
        circuit.model  # noqa: B018 (built outside: TransformerLens' own construction is not under test)
    encoded = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0))
    expected = verify_problem(capture(circuit, encoded, path=path))
    _fresh_caches()
    with torch.device("meta"):
        cap = capture(circuit, encoded, path=path)
        report = verify_problem(cap)
    assert expected.verified and report.verified, report.summary()
    assert cap.final.labels.tobytes() == capture(circuit, encoded, path=path).final.labels.tobytes()
    np.testing.assert_array_equal(cap.centroids(3), capture(circuit, encoded, path=path).centroids(3))


class _TorchWhoseFullIgnoresItsDevice:
    """``torch`` as one module sees it, with ``full`` making its tensor on the default device (the grouping as it
    was before the fix). Only that module's name is replaced, not ``torch.full`` itself: ``with torch.device(...)``
    recognises factory functions by identity, from a set torch builds once per process on first use, so a
    replaced ``torch.full`` would make the outcome depend on whether an earlier test had built that set."""

    def __getattr__(self, name: str):
        return getattr(torch, name)

    @staticmethod
    def full(*args, device=None, **kwargs):
        return torch.full(*args, **kwargs)


def test_the_leak_test_can_fail(monkeypatch):
    """The meta-device check sees a tensor made without a device: a grouping made as before the fix
    (``torch.full`` on the default device) fails under it."""
    X, C0 = _problem(n=40)
    circuit = build_lloyd_circuit(3, 4, 1)
    encoded = encode(circuit.layout, X, C0)
    monkeypatch.setattr(groups, "torch", _TorchWhoseFullIgnoresItsDevice())
    _fresh_caches()
    with torch.device("meta"), pytest.raises((RuntimeError, NotImplementedError)):
        capture(circuit, encoded, path="structured")
    _fresh_caches()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", ["structured", "dense"])
def test_a_run_on_the_device_is_the_reference_and_the_cpu_run(device, path):
    X, C0 = _problem(n=300, d=4, k=5, seed=1)
    T = 6
    run = run_problem(X, C0, T, options=RunOptions(path=path, device=device))
    assert run.encoded.resid.device.type == device
    assert run.circuit.device.type == device
    assert run.to_json()["device"].startswith(device)
    assert run.report.verified, run.report.summary()
    trace = reference.lloyd(X, C0, T)
    np.testing.assert_array_equal(run.labels, trace.assignments[T])
    tol = run.report.tolerances.centroid
    assert np.abs(run.centroids - trace.centroids[T]).max() <= tol
    on_cpu = run_problem(X, C0, T, options=RunOptions(path=path, device="cpu"))
    np.testing.assert_array_equal(run.labels, on_cpu.labels)
    assert np.abs(run.centroids - on_cpu.centroids).max() <= tol
    assert run.report.tolerances == on_cpu.report.tolerances  # the same contract on either device


@pytest.mark.parametrize("device", DEVICES)
def test_circuit_kmeans_on_the_device_fits_as_kmeans(device):
    from sklearn.cluster import KMeans

    from analysis.estimator import CircuitKMeans

    X, C0 = _problem(n=200, d=2, k=3, seed=2)
    fit = CircuitKMeans(3, init=C0, max_iter=8, device=device).fit(X)
    assert fit.circuit_.device.type == device
    assert fit.report_.verified
    km = KMeans(3, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=8).fit(X)
    np.testing.assert_array_equal(fit.labels_, km.labels_)
    assert np.abs(fit.cluster_centers_ - km.cluster_centers_).max() <= fit.report_.tolerances.centroid + 1e-12
    np.testing.assert_array_equal(fit.predict(X), km.predict(X))


def test_devices_resolve_auto_and_refuse_what_is_not_there():
    assert resolve("cpu") == torch.device("cpu")
    assert resolve("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve(None) == resolve("auto")
    with pytest.raises(ValueError, match="unknown device"):
        resolve("abacus")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve("cuda")


def test_a_circuit_runs_only_where_it_was_built(monkeypatch):
    X, C0 = _problem(n=30)
    circuit = build_lloyd_circuit(3, 4, 1)
    # A device torch knows but no circuit runs on is refused by resolve itself (issue 42: 'meta' crashed a fit) ...
    with pytest.raises(ValueError, match="run on cpu or cuda"):
        run_problem(X, C0, 1, circuit=circuit, options=RunOptions(device="meta"))
    # ... and a device the run may use, other than the circuit's, by the run (one stands in for a GPU here).
    import circuits.devices

    monkeypatch.setattr(circuits.devices, "resolve", lambda device: torch.device("meta"))
    with pytest.raises(ValueError, match="built on cpu"):
        run_problem(X, C0, 1, circuit=circuit, options=RunOptions(device="meta"))


def test_estimator_refuses_an_unknown_device():
    from analysis.estimator import CircuitKMeans

    X, _ = _problem(n=20)
    with pytest.raises(ValueError, match="device"):
        CircuitKMeans(2, device="abacus").fit(X)


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from analysis.cli.main import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("device", DEVICES)
def test_cluster_says_which_device_ran(capsys, device):
    import json

    code, out, _ = _cli(capsys, "cluster", "--dataset", "wine", "--k", 3, "--iterations", 3, "--device", device, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["verified"] and doc["device"].startswith(device)
    code, out, _ = _cli(capsys, "cluster", "--dataset", "wine", "--k", 3, "--iterations", 3, "--device", device)
    assert code == 0 and f"device {device}" in out.splitlines()[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: --device cuda is not bad input here")
@pytest.mark.parametrize("command", [["cluster"], ["report", "--out", "r.html"], ["patch", "--corruption", "move-point"]])
def test_device_cuda_without_one_is_a_one_line_error(capsys, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli(capsys, command[0], "--dataset", "iris", "--k", 3, *command[1:], "--device", "cuda")
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].endswith("--device cuda: no CUDA device is available (use --device cpu)"), err
    assert "Traceback" not in err and not any(tmp_path.iterdir())
