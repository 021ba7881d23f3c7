"""Where the cells of a sweep or an evaluation run: one after another here, or as Ray tasks on a cluster.

:func:`map_cells` applies ``fn(shared, cell)`` to every cell and returns the results *in cell order*, whichever
engine ran them and in whatever order they finished, so a result file is the same bit for bit: every cell
carries its own seeds, none depends on the worker that runs it. ``shared`` (a model, a grid) is sent to the
workers once (``ray.put``), not once per cell.

A cell that raises is tried again once (Ray's own ``retry_exceptions``; a loop in the serial engine); if it fails
again it is returned as a :class:`CellFailure` named by its parameters, and the other cells' results are kept.

The ``ray`` engine without an ``address`` starts a local Ray instance with one worker per core and stops it
afterwards; with an ``address`` it joins an existing cluster (``ray start --head`` on one machine,
``ray start --address HEAD:6379`` on the others). Ray is the optional extra ``distributed``, imported only here
and only when chosen, so validation stays fast. An unusable engine or address is a
:class:`~analysis.errors.ProblemError` naming the parameter (``engine`` or ``address``); the command line's options
for them are in :mod:`analysis.cli.options`.
"""

from __future__ import annotations

import os
import re
import socket
import traceback
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from typing import Any

from analysis.errors import ProblemError

ENGINES = ("serial", "ray")
INSTALL = 'pip install -e ".[distributed]"'
#: Attempts per cell beyond the first.
RETRIES = 1
#: How long to wait for a TCP answer from ``--address`` before calling it unreachable (Ray itself would retry
#: for minutes, printing warnings).
PROBE_TIMEOUT_S = 5.0
_ADDRESS = re.compile(r"^(?P<client>ray://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})$")


def check(engine: str, address: str | None) -> None:
    """Reject an unusable engine or address before any work: Ray missing, a malformed or unreachable address."""
    if engine not in ENGINES:
        raise ProblemError(f"must be one of {', '.join(ENGINES)}, got {engine!r}", "engine")
    if engine == "serial":
        if address is not None:
            raise ProblemError("needs the ray engine", "address")
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ProblemError(f"ray needs Ray, which is not installed: {INSTALL}", "engine") from None
    if address is None or address == "auto":
        return  # a local instance, or the one `ray start` recorded here (checked when joining)
    match = _ADDRESS.match(address)
    if not match or not 0 < int(match["port"]) < 65536:
        raise ProblemError(f"must be HOST:PORT, ray://HOST:PORT or auto, got {address!r}", "address")
    if match["client"]:
        try:
            import grpc  # noqa: F401 -- what Ray Client needs beyond Ray itself
        except ImportError:
            raise ProblemError(f"{address}: Ray Client (ray://) needs Ray's client extra, which is not"
                               " installed: pip install 'ray[client]' (or give the head's HOST:PORT without ray://)",
                               "address") from None
    host, port = match["host"].strip("[]"), int(match["port"])
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as conn:
            speaks_grpc = answers_http2(conn)
    except OSError as exc:
        raise ProblemError(f"{address}: no Ray cluster answers at {host}:{port}"
                           f" ({exc.strerror or exc or 'timed out'}); start one with `ray start --head`",
                           "address") from None
    if not speaks_grpc:
        # Ray would retry for minutes ("Failed to connect to GCS"), printing warnings.
        raise ProblemError(f"{address}: something listens at {host}:{port}, but not a Ray cluster (it does"
                           f" not answer as a gRPC server within {PROBE_TIMEOUT_S:g} s); check the port of"
                           " `ray start --head`", "address")


#: The HTTP/2 connection preface and an empty SETTINGS frame: what a gRPC client (Ray's) sends first.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def answers_http2(conn: socket.socket) -> bool:
    """Whether the server on ``conn`` answers the HTTP/2 preface with a SETTINGS frame, as every gRPC server (a Ray
    head's GCS, a Ray Client server) does first; an HTTP/1 server, or one sending anything else, does not."""
    try:
        conn.sendall(_HTTP2_PREFACE)
        header = b""
        while len(header) < 9:
            chunk = conn.recv(9 - len(header))
            if not chunk:
                return False
            header += chunk
    except OSError:  # a timeout or a reset: no gRPC answer
        return False
    frame_type, stream = header[3], int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
    return frame_type == 4 and stream == 0


@dataclass
class CellFailure:
    """A cell that raised on every attempt: its parameters, the last error and its traceback text."""

    cell: str
    error: BaseException
    details: str
    attempts: int

    def line(self) -> str:
        message = str(self.error).strip().splitlines()
        return (f"cell failed after {self.attempts} attempts: {self.cell}: {type(self.error).__name__}"
                + (f": {message[-1]}" if message else ""))


@dataclass
class Outcome:
    """``results[i]`` is cell ``i``'s result, ``None`` where it failed; ``failures`` in cell order."""

    results: list
    failures: list[CellFailure]

    def finished(self) -> list:
        return [r for r in self.results if r is not None]

    def raise_first(self) -> None:
        """For callers in Python: the first failed cell's error, as the serial loop would have raised it."""
        if self.failures:
            raise self.failures[0].error


def map_cells(fn: Callable[[Any, Any], Any], cells: Sequence, engine: str = "serial", address: str | None = None,
              progress: Callable[[int], Any] | None = None, shared: Any = None,
              describe: Callable[[Any], str] = str) -> Outcome:
    """``fn(shared, cell)`` for every cell, on ``engine``; ``progress(1)`` after each finished (or failed) cell."""
    check(engine, address)
    if engine == "serial":
        return _serial(fn, list(cells), shared, progress, describe)
    return _ray(fn, list(cells), shared, address, progress, describe)


def _serial(fn, cells, shared, progress, describe) -> Outcome:
    results, failures = [None] * len(cells), []
    for i, cell in enumerate(cells):
        for attempt in range(1, RETRIES + 2):
            try:
                results[i] = fn(shared, cell)
                break
            except Exception as exc:  # noqa: BLE001 -- any error of one cell; the others go on
                if attempt == RETRIES + 1:
                    failures.append(CellFailure(describe(cell), exc, traceback.format_exc(), attempt))
        if progress is not None:
            progress(1)
    return Outcome(results, failures)


def _call(fn, shared, cell):
    """The body of every Ray task (Ray resolves ``shared``'s object reference before the call)."""
    return fn(shared, cell)


def local_cpus() -> int:
    """The cores this process may use (its affinity mask where the system has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


#: Ray's start-up waits, raised for a loaded machine (set in the environment Ray's processes inherit; a value
#: already there wins). The raylet gives its agents ``agent_register_timeout_ms`` to report their ports (15 s by
#: default; a loaded machine with a cold page cache takes longer, and the raylet then aborts).
STARTUP_ENV = {"RAY_agent_register_timeout_ms": "120000", "RAY_raylet_start_wait_time_s": "120"}
#: Attempts at starting a local instance: the second finds Ray's modules in the page cache.
START_ATTEMPTS = 2


def start_local(num_cpus: int | None = None) -> None:
    """Start a local Ray instance (no dashboard), patient with a loaded machine, trying twice; an instance that
    will not start is a :class:`~analysis.errors.ProblemError` naming the environment (bad input), not a bug."""
    import logging

    import ray

    for name, value in STARTUP_ENV.items():
        os.environ.setdefault(name, value)
    problem = ""
    for _ in range(START_ATTEMPTS):
        try:
            # "local" even when RAY_ADDRESS is set: no --address means a fresh instance on this machine.
            ray.init(address="local", num_cpus=num_cpus or local_cpus(), include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
            return
        except Exception as exc:  # noqa: BLE001 -- Ray raises a bare Exception ("node timed out during startup")
            problem = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            ray.shutdown()
    raise ProblemError(f"ray: a local Ray instance did not start after {START_ATTEMPTS} attempts ({problem});"
                       " this machine may be overloaded or Ray's temporary folder unwritable (see"
                       " /tmp/ray/session_latest/logs); try again, or use the serial engine", "engine")


def _join(address: str | None) -> bool:
    """Start or join Ray; True if this call started it (and so must stop it). An instance already running in this
    process (a notebook, the tests) is used as it is."""
    import logging

    import ray

    if ray.is_initialized():
        return False
    if address is None:
        start_local()
        return True
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise ProblemError(f"{address}: {str(exc).splitlines()[0]}", "address") from None
    return True


def _ray(fn, cells, shared, address, progress, describe) -> Outcome:
    import ray

    started = _join(address)
    try:
        task = ray.remote(_call).options(max_retries=RETRIES, retry_exceptions=True)
        shared_ref = ray.put(shared)
        index = {task.remote(fn, shared_ref, cell): i for i, cell in enumerate(cells)}
        results, failed = [None] * len(cells), {}
        pending = list(index)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    i = index[ref]
                    try:
                        results[i] = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 -- a task error, a crashed worker, a lost node
                        cause = getattr(exc, "cause", None) or exc
                        failed[i] = CellFailure(describe(cells[i]), cause, str(exc), RETRIES + 1)
                    if progress is not None:
                        progress(1)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        return Outcome(results, [failed[i] for i in sorted(failed)])
    finally:
        if started:
            ray.shutdown()

