"""The command line as a user runs it, started from a warm copy: a process that has imported the command line
(torch, TransformerLens, scikit-learn, plotly, every command module) and forks a child per command.

Each child is a new process as far as a command can tell: its own process id, working directory, environment,
standard streams (files, not the server's pipes), ``sys.argv`` and ``sys.path[0]`` as the interpreter sets them, and
its exit status, returned as ``subprocess.run`` returns them. What the child does not do is import: a new
`python -m analysis.cli` spends 2 s of CPU importing torch and the command line before a command starts, and a
further 6 s importing TransformerLens for any page with a circuit on it (docs/performance.md, "The suite's
commands from a warm process").

A test about the process itself keeps a new one: what a command imports (``test_plain.py``), a signal sent to a
running command, a reader that leaves early. ``run_command`` and ``run_python`` give a new process by themselves
where the environment differs from the server's in what is read as an interpreter starts (``STARTUP_PREFIXES``:
PYTHONPATH, OMP_NUM_THREADS, ...), where the test gives input on stdin, and everywhere under KMC_FRESH_COMMANDS=1
(to compare the two).

Run as a script, this file is the server: it reads one request per line on stdin (JSON: the code or the command
line's arguments, cwd, environment, the two output files), forks, and answers ``{"pid": ...}`` at once and
``{"status": ..., "cpu": ...}`` when the child ends.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: ``python -m analysis.cli``: what every command of the suite starts as.
CLI = [sys.executable, "-m", "analysis.cli"]
#: Variables read as an interpreter or its numerical libraries start (the module path, the hash seed, the thread
#: counts of OpenMP, MKL and OpenBLAS, the loader, the allocator): a caller whose values differ from those the server
#: started with gets a new process. Every other variable is read as a command runs, and the child is given the
#: caller's environment as it is at the call.
STARTUP_PREFIXES = ("PYTHON", "OMP_", "MKL_", "OPENBLAS_", "LD_", "MALLOC_")
#: Variables of those prefixes that Python reads as they are used, not as it starts, so a child given the caller's
#: value is what a new process would be: ``breakpoint()`` reads PYTHONBREAKPOINT at each call. Ray sets it in a
#: process that starts Ray (tests/integration/test_engine.py does, in-process); counted as start-up, it sent every
#: later command of that test process to a new process.
READ_WHEN_USED = frozenset({"PYTHONBREAKPOINT"})


def _startup(env) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) and k not in READ_WHEN_USED}


#: This test process's start-up variables, read once (:func:`process_startup`).
_PROCESS_STARTUP: list[dict[str, str]] = []


def process_startup() -> dict[str, str]:
    """This test process's start-up variables, read at the first call: the server's. tests/conftest.py calls it as
    the session starts, after its own settings (an xdist worker's thread counts) and before any test could set one,
    so a first command asked for inside a test that set one (``monkeypatch.setenv("OMP_NUM_THREADS", ...)``) gets a
    new process instead of a server made in that test's environment, which every later command would differ from.
    Not read as this module is imported: a plug-in (benchmarks/suite_cpu.py) imports it before conftest runs."""
    if not _PROCESS_STARTUP:
        _PROCESS_STARTUP.append(_startup(os.environ))
    return _PROCESS_STARTUP[0]


class CommandServer:
    """The warm server of one test process, started in the process's environment with :func:`process_startup`'s
    start-up variables: it runs what is asked for with those."""

    def __init__(self) -> None:
        now = _startup(os.environ)  # the process's own, which a test may have set: replaced by the session's
        started_in = {**{k: v for k, v in os.environ.items() if k not in now}, **process_startup()}
        self.child_cpu = 0.0  # seconds of CPU its children took, for benchmarks/suite_cpu.py
        self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=started_in)
        #: What the server's imports set in its environment (TransformerLens's set TORCHINDUCTOR_CACHE_DIR, for
        #: one): a new process's imports would set it too, so each child is given it where the caller has not.
        imported = self._answer()["ready"]
        self.set_by_imports = {k: v for k, v in imported.items() if started_in.get(k) != v}

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the command server ended (exit status {self.proc.poll()}; its stderr is above)")
        return json.loads(line)

    def run(self, argv: list[str], code: str | None, cwd, timeout: float,
            env: dict[str, str]) -> subprocess.CompletedProcess:
        """Run ``python -c CODE ARGV`` (``code`` given) or ``python -m analysis.cli ARGV`` in a child."""
        shown = [sys.executable, "-c", code, *argv] if code is not None else [*CLI, *argv]
        with tempfile.TemporaryDirectory(prefix="kmc-command-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"code": code, "argv": argv, "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
                       "env": {**self.set_by_imports, **env}, "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = self._answer()["pid"]
            timed_out = threading.Event()

            def kill() -> None:
                timed_out.set()
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

            killer = threading.Timer(timeout, kill)
            killer.start()
            try:
                answer = self._answer()
            finally:
                killer.cancel()
            self.child_cpu += answer["cpu"]
            if timed_out.is_set():
                raise subprocess.TimeoutExpired(shown, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(shown, answer["status"], out.read_text(), err.read_text())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


#: This test process's server, made at its first command and closed as the process ends.
_SERVER: list[CommandServer] = []


def served_cpu() -> float:
    """Seconds of CPU the commands this test process ran through its server took (0 before the first)."""
    return sum(server.child_cpu for server in _SERVER)


def run_command(*args, cwd=None, timeout: float = 600, env: dict | None = None,
                input: str | None = None) -> subprocess.CompletedProcess:
    """``python -m analysis.cli ARGS``, as ``subprocess.run(..., capture_output=True, text=True)`` returns it."""
    return _run([str(a) for a in args], None, cwd, timeout, env, input)


def run_python(code: str, *args, cwd=None, timeout: float = 600, env: dict | None = None,
               input: str | None = None) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS``, as ``subprocess.run(..., capture_output=True, text=True)`` returns it."""
    return _run([str(a) for a in args], code, cwd, timeout, env, input)


def _run(argv: list[str], code: str | None, cwd, timeout: float, env, input) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env)
    fresh = input is not None or os.environ.get("KMC_FRESH_COMMANDS") == "1"
    fresh = fresh or _startup(env) != process_startup()
    if not fresh and not _SERVER:
        _SERVER.append(CommandServer())
        atexit.register(_SERVER[0].close)
    if fresh:
        start = [sys.executable, "-c", code] if code is not None else CLI
        return subprocess.run([*start, *argv], capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env,
                              input=input)
    return _SERVER[0].run(argv, code, cwd, timeout, env)


# ------------------------------------------------------------------------------------------------------ the server
def _serve() -> None:
    from analysis.cli import command_modules

    import circuits.model  # noqa: F401  TransformerLens, for the pages with a circuit on them
    command_modules()
    requests, answers = sys.stdin, sys.stdout
    answers.write(json.dumps({"ready": dict(os.environ)}) + "\n")
    answers.flush()
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status, usage = os.wait4(pid, 0)
        answers.write(json.dumps({"status": os.waitstatus_to_exitcode(status),
                                  "cpu": usage.ru_utime + usage.ru_stime}) + "\n")
        answers.flush()


def _child(request: dict) -> None:
    """Run one request as a new interpreter would, and end the process with its exit status."""
    import runpy
    import traceback

    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, key in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(request[key], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        try:
            if request["code"] is not None:
                # `python -c`: argv[0] is "-c", the working directory ("") first on the path.
                sys.argv, sys.path[0] = ["-c", *request["argv"]], ""
                exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
            else:
                # `python -m`: argv[0] is the module's file, the working directory's full path first on the path.
                sys.argv, sys.path[0] = ["-m", *request["argv"]], request["cwd"]
                runpy.run_module("analysis.cli", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve()
