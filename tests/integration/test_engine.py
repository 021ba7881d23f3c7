"""Sweeps and evaluations on Ray give the serial run's files, bit for bit; failed cells are retried, then named.

One local Ray instance (2 CPUs, no dashboard) serves the whole module: starting Ray takes seconds. The commands
run in this process, so they find that instance already running and use it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from analysis import engine, sweep
from analysis.cli import main

ROOT = Path(__file__).resolve().parents[2]

#: A small grid of the sweep command: 9 cells, two stiffnesses, the circuit runner.
SMALL = ["--grid", "tiny", "--d", "2", "--k", "2,3", "--n", "12", "--scale", "0.5,5", "--iterations", "4"]


#: The only reason a Ray test may skip: the optional extra is not installed.
NO_RAY = 'Ray is not installed (the optional extra: pip install -e ".[distributed]")'


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason=NO_RAY)
    # As the commands start it: patient with a loaded machine, tried twice (a failure is an error, not a skip).
    engine.start_local(num_cpus=2)
    yield ray
    ray.shutdown()


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, *argv) -> str:
    code, _, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    return lines[0]


# ------------------------------------------------------------------------------------------------ the engine
def test_ray_runs_cells_in_workers_and_returns_them_in_cell_order(local_ray):
    def slow_square(offset, cell):
        time.sleep(0.05 * (8 - cell))  # later cells finish first
        return cell * cell + offset, os.getpid()

    ticks = []
    outcome = engine.map_cells(slow_square, range(8), "ray", progress=ticks.append, shared=100)
    assert [r[0] for r in outcome.results] == [c * c + 100 for c in range(8)]
    assert os.getpid() not in {r[1] for r in outcome.results}  # Ray workers ran them, not this process
    assert ticks == [1] * 8 and outcome.failures == []


@pytest.mark.parametrize("where", ["serial", "ray"])
def test_a_failing_cell_is_retried_once_then_named_and_the_others_kept(where, tmp_path, request):
    if where == "ray":
        request.getfixturevalue("local_ray")

    def cell_fn(folder, cell):
        attempts = folder / f"{cell['name']}.attempts"
        with open(attempts, "a") as f:
            f.write("x")
        if cell["name"] == "broken" or (cell["name"] == "flaky" and attempts.read_text() == "x"):
            raise ValueError(f"cell {cell['name']} went wrong")
        return cell["value"] * 2

    cells = [{"name": "a", "value": 1}, {"name": "broken", "value": 2}, {"name": "flaky", "value": 3},
             {"name": "b", "value": 4}]
    outcome = engine.map_cells(cell_fn, cells, where, shared=tmp_path, describe=lambda c: f"name={c['name']}")
    assert outcome.results == [2, None, 6, 8]
    attempts = {c["name"]: (tmp_path / f"{c['name']}.attempts").read_text() for c in cells}
    assert attempts == {"a": "x", "broken": "xx", "flaky": "xx", "b": "x"}
    [failure] = outcome.failures
    assert failure.cell == "name=broken" and failure.attempts == 2 and isinstance(failure.error, ValueError)
    assert failure.line() == "cell failed after 2 attempts: name=broken: ValueError: cell broken went wrong"
    with pytest.raises(ValueError, match="cell broken went wrong"):
        outcome.raise_first()


# ------------------------------------------------------------------------------------------------ the commands
def test_sweep_on_ray_writes_the_serial_csv_byte_for_byte(local_ray, tmp_path, capsys):
    assert run(capsys, "sweep", *SMALL, "--out", tmp_path / "serial")[0] == 0
    code, out, _ = run(capsys, "sweep", *SMALL, "--out", tmp_path / "ray", "--engine", "ray")
    assert code == 0 and "ray engine" in out
    serial, on_ray = ((tmp_path / name / "sweep.csv").read_bytes() for name in ("serial", "ray"))
    assert serial == on_ray
    assert serial.count(b"\n") == 1 + 9 * 2  # header, 9 cells x 2 stiffnesses x 1 seed
    assert [r.gap for r in sweep.run_sweep(sweep.grid_from("tiny", d=(2,), k=(2, 3), n=(12,), scale=(0.5, 5.0),
                                                          iterations=4))] == \
        [float(line.split(b",")[9]) for line in serial.splitlines()[1:]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ck") / "tiny"
    code = main(["train", "--d", "2", "--k", "3", "--n", "16", "--steps", "2", "--batch", "2", "--iterations", "2",
                 "--eval-iterations", "2", "--val-tasks", "2", "--val-every", "2", "--out", str(out)])
    assert code == 0
    return out


def test_evaluate_on_ray_prints_the_serial_json(local_ray, checkpoint, capsys):
    argv = ["evaluate", "--checkpoint", checkpoint, "--tasks", 10, "--chunk", 4, "--steps", 3, "--datasets",
            "blobs,iris", "--dataset-inits", 2, "--json"]
    code, serial, _ = run(capsys, *argv)
    assert code == 0
    code, on_ray, _ = run(capsys, *argv, "--engine", "ray")
    assert code == 0 and on_ray == serial
    doc = json.loads(serial)
    assert doc["tasks"]["count"] == 10 and [d["name"] for d in doc["datasets"]] == ["blobs", "iris"]


@pytest.mark.parametrize("where", ["serial", "ray"])
def test_sweep_keeps_the_cells_that_finished_and_names_the_one_that_failed(where, tmp_path, capsys, monkeypatch,
                                                                         request):
    if where == "ray":
        request.getfixturevalue("local_ray")
    grid = ["--grid", "tiny", "--runner", "reference", "--iterations", "3"]
    assert run(capsys, "sweep", *grid, "--out", tmp_path / "all")[0] == 0
    reference_runner, attempts = sweep.reference_runner, tmp_path / "attempts"

    def fails_on_one_cell(X, C0, beta, iterations):
        if X.shape[1:] == (24, 1):  # the n-d grid's cell n=24, d=1
            with open(attempts, "a") as f:
                f.write("x")
            raise RuntimeError("this cell is broken")
        return reference_runner(X, C0, beta, iterations)

    monkeypatch.setitem(sweep.RUNNERS, "reference", fails_on_one_cell)
    code, out, err = run(capsys, "sweep", *grid, "--out", tmp_path / "some", "--engine", where)
    assert code == 3 and attempts.read_text() == "xx"
    assert "cell failed after 2 attempts: grid=n-d d=1 k=2 n=24 scale=1: RuntimeError: this cell is broken" in err
    everything = (tmp_path / "all" / "sweep.csv").read_text().splitlines()
    kept = (tmp_path / "some" / "sweep.csv").read_text().splitlines()
    assert kept == [line for line in everything if not line.startswith("n-d,1,2,24,")]
    assert len(everything) - len(kept) == 2  # the failed cell's two stiffnesses, nothing else
    assert "MISSING (failed) grid=n-d d=1 k=2 n=24 scale=1" in (tmp_path / "some" / "sweep.html").read_text()


def test_evaluate_keeps_the_cells_that_finished_and_names_the_one_that_failed(checkpoint, capsys, monkeypatch):
    from analysis import evaluation
    from circuits.training.checkpoint import load_model
    from circuits.training.tasks import TEST, TaskBatch, task_stream

    real = evaluation.evaluation_cell

    def fails_on_chunk_4_and_iris(model, cell):
        if getattr(cell, "start", None) == 4 or getattr(cell, "name", None) == "iris":
            raise RuntimeError(f"{cell} is broken")
        return real(model, cell)

    monkeypatch.setattr(evaluation, "evaluation_cell", fails_on_chunk_4_and_iris)
    code, out, err = run(capsys, "evaluate", "--checkpoint", checkpoint, "--tasks", 10, "--chunk", 4, "--steps", 3,
                         "--datasets", "blobs,iris", "--dataset-inits", 2, "--json")
    assert code == 3
    assert "cell failed after 2 attempts: held-out tasks 4-7: RuntimeError" in err
    assert "cell failed after 2 attempts: dataset iris (2 random inits from seed 0): RuntimeError" in err
    doc = json.loads(out)
    assert doc["failed"] == ["held-out tasks 4-7", "dataset iris (2 random inits from seed 0)"]
    assert [d["name"] for d in doc["datasets"]] == ["blobs"]
    # The tasks that finished, 0-3 and 8-9, evaluated as if they had been the only ones (in the same chunks).
    monkeypatch.undo()
    model, _ = load_model(checkpoint)
    tasks = task_stream(64, 16, 2, 3, 10, 0, TEST)
    kept = TaskBatch(*(np.concatenate([a[:4], a[8:]]) for a in (tasks.X, tasks.C0, tasks.components)),
                              tasks.family, tasks.init)
    alone = evaluation.evaluate_tasks(model, kept, steps=3, chunk=4).to_dict()
    assert doc["tasks"]["count"] == 6
    assert doc["tasks"]["per_step"] == alone["per_step"]


GENERAL = ["evaluate", "--checkpoint", "checkpoints/general", "--tasks", 3, "--n", 16, "--steps", 3, "--shapes",
           "2x3,5x2", "--datasets", "iris", "--dataset-inits", 2, "--json"]


def test_a_general_checkpoints_evaluation_on_ray_prints_the_serial_json(local_ray, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, serial, _ = run(capsys, *GENERAL)
    assert code == 0
    code, on_ray, _ = run(capsys, *GENERAL, "--engine", "ray")
    assert code == 0 and on_ray == serial
    doc = json.loads(serial)
    assert doc["shapes"]["shapes"] == [[2, 3], [5, 2]] and doc["shapes"]["overall"]["tasks"] == 6
    assert [d["name"] for d in doc["datasets"]] == ["iris"]


def test_a_general_evaluation_keeps_the_shapes_that_finished_and_names_the_one_that_failed(capsys, monkeypatch):
    from analysis import evaluation
    from circuits.training.checkpoint import load_model

    monkeypatch.chdir(ROOT)
    real = evaluation.general_cell

    def fails_on_the_first_shape(model, cell):
        if getattr(cell, "shape", None) == (2, 3):
            raise RuntimeError("this shape is broken")
        return real(model, cell)

    monkeypatch.setattr(evaluation, "general_cell", fails_on_the_first_shape)
    code, out, err = run(capsys, *GENERAL)
    assert code == 3
    assert "cell failed after 2 attempts: shape d=2, k=3 (3 random-init tasks): RuntimeError" in err
    doc = json.loads(out)
    assert doc["failed"] == ["shape d=2, k=3 (3 random-init tasks)"] and doc["shapes"]["shapes"] == [[5, 2]]
    # The shape that finished is evaluated as if it had been the only one (its own batch of the test stream).
    monkeypatch.undo()
    model, _ = load_model(ROOT / "checkpoints" / "general")
    cell = evaluation.ShapeCell(1, (5, 2), 3, 16, 3, "random", 0, 16, True)
    alone = evaluation.shapes_evaluation([cell], [real(model, cell)])
    assert doc["shapes"]["overall"] == json.loads(json.dumps(alone["overall"]))


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("command", ["sweep", "evaluate"])
def test_engine_ray_without_ray_is_exit_2_with_the_install_command(command, tmp_path, capsys, monkeypatch, checkpoint):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    argv = (["sweep", "--grid", "tiny", "--out", tmp_path / "out"] if command == "sweep"
            else ["evaluate", "--checkpoint", checkpoint, "--tasks", 2])
    line = one_line_error(capsys, *argv, "--engine", "ray")
    assert 'pip install -e ".[distributed]"' in line
    assert not (tmp_path / "out").exists()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address, needle", [
    ("not-an-address", "--address must be HOST:PORT"),
    ("127.0.0.1:99999", "--address must be HOST:PORT"),
    ("ray://", "--address must be HOST:PORT"),
    ("127.0.0.1:{port}", "no Ray cluster answers at 127.0.0.1:{port}"),
])
def test_bad_address_is_exit_2_in_one_line(address, needle, tmp_path, capsys, local_ray):
    port = closed_port()
    line = one_line_error(capsys, "sweep", "--grid", "tiny", "--out", tmp_path / "out", "--engine", "ray",
                          "--address", address.format(port=port))
    assert needle.format(port=port) in line
    assert not (tmp_path / "out").exists()


def test_address_without_ray_engine_is_exit_2(tmp_path, capsys):
    assert "--address needs the ray engine" in one_line_error(capsys, "sweep", "--grid", "tiny", "--out", tmp_path / "o",
                                                             "--address", "127.0.0.1:6379")


def test_ray_cells_see_their_own_seeds_not_the_workers(local_ray):
    """The same cells in a different order give each cell the same result (seeding per cell, never per worker)."""
    cells = list(sweep.GRIDS["tiny"].cells())
    job = (sweep.GRIDS["tiny"], sweep.reference_runner)
    forward = engine.map_cells(sweep.sweep_cell, cells, "ray", shared=job).results
    backward = engine.map_cells(sweep.sweep_cell, cells[::-1], "ray", shared=job).results[::-1]
    assert all(np.array_equal([r.objective_soft for r in a], [r.objective_soft for r in b])
               for a, b in zip(forward, backward))
    assert forward == [sweep.sweep_cell(job, cell) for cell in cells]


# ------------------------------------------------------------------------------------------------ start-up and addresses
class FakeRay:
    """``ray`` for :func:`engine.start_local`: ``init`` fails ``failures`` times, then starts."""

    def __init__(self, failures: int):
        self.failures, self.inits, self.shutdowns = failures, [], 0

    def init(self, **kwargs):
        self.inits.append(kwargs)
        if len(self.inits) <= self.failures:
            raise Exception("The current node timed out during startup. This could happen because ...")

    def shutdown(self):
        self.shutdowns += 1


@pytest.mark.parametrize("failures", [0, 1])
def test_a_local_start_that_times_out_once_is_tried_again_with_longer_waits(failures, monkeypatch):
    fake = FakeRay(failures)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_agent_register_timeout_ms", raising=False)
    monkeypatch.setenv("RAY_raylet_start_wait_time_s", "7")  # the user's own setting wins
    engine.start_local(num_cpus=2)
    assert len(fake.inits) == failures + 1 and fake.shutdowns == failures
    assert fake.inits[-1]["address"] == "local" and fake.inits[-1]["num_cpus"] == 2
    assert os.environ["RAY_agent_register_timeout_ms"] == "120000"  # Ray's own default is 15 s
    assert os.environ["RAY_raylet_start_wait_time_s"] == "7"


def test_a_local_ray_that_never_starts_is_an_environment_error_in_one_line(tmp_path, capsys, monkeypatch):
    fake = FakeRay(failures=2)
    monkeypatch.setitem(sys.modules, "ray", fake)
    fake.is_initialized = lambda: False
    line = one_line_error(capsys, "sweep", "--grid", "tiny", "--runner", "reference", "--out", tmp_path / "out",
                          "--engine", "ray")
    assert "did not start after 2 attempts" in line and "node timed out during startup" in line
    assert "use the serial engine" in line and len(fake.inits) == 2
    assert not (tmp_path / "out").exists()


class Server:
    """A TCP server on 127.0.0.1 that answers each connection with ``reply`` (HTTP/1, junk, an HTTP/2 SETTINGS
    frame) and then closes it, on a thread."""

    def __init__(self, reply: bytes):
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(64)
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


HTTP1 = b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
JUNK = bytes(range(256)) * 4
#: What a gRPC server sends first: a SETTINGS frame (type 4) on stream 0, here empty.
SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("reply, grpc", [(HTTP1, False), (JUNK, False), (b"", False), (SETTINGS, True),
                                         (bytes([0, 0, 0, 4, 0, 0, 0, 0, 1]), False)])
def test_only_a_server_that_answers_as_grpc_is_taken_for_a_ray_head(reply, grpc):
    server = Server(reply)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
            assert engine.answers_http2(conn) is grpc
    finally:
        server.close()


@pytest.mark.parametrize("reply", [HTTP1, JUNK])
def test_an_address_where_something_else_listens_is_refused_at_once(reply, tmp_path, capsys):
    pytest.importorskip("ray", reason=NO_RAY)
    server = Server(reply)
    try:
        line = one_line_error(capsys, "sweep", "--grid", "tiny", "--out", tmp_path / "out", "--engine", "ray",
                              "--address", f"127.0.0.1:{server.port}")
    finally:
        server.close()
    assert f"something listens at 127.0.0.1:{server.port}, but not a Ray cluster" in line
    assert not (tmp_path / "out").exists()


def test_ray_client_without_its_extra_is_exit_2_with_the_install_command(tmp_path, capsys, monkeypatch):
    pytest.importorskip("ray", reason=NO_RAY)
    monkeypatch.setitem(sys.modules, "grpc", None)  # `import grpc` now raises ImportError
    line = one_line_error(capsys, "sweep", "--grid", "tiny", "--out", tmp_path / "out", "--engine", "ray",
                          "--address", f"ray://127.0.0.1:{closed_port()}")
    assert "pip install 'ray[client]'" in line
    assert not (tmp_path / "out").exists()
