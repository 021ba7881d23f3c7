"""tests/command_server.py, which most command-line tests run through: a served command gives what a new process
gives (exit status, stdout, stderr, files where its working directory says), a time-out kills it, and what needs
a process of its own gets one."""

import os
import re
import subprocess
import sys

import pytest

import command_server
from command_server import CLI, run_command, run_python, served_cpu


def _without_timings(text: str) -> str:
    return re.sub(r"done in [0-9.]+ s", "done in ... s", text)


@pytest.mark.parametrize("args", [
    ("cluster", "--dataset", "iris", "--k", "3", "--iterations", "2", "--json"),
    ("cluster", "--dataset", "iris", "--k", "3", "--iterations", "2", "--variant", "bogus"),
    ("cluster", "--dataset", "iris"),
], ids=["json", "bad-variant", "argparse"])
def test_a_served_command_gives_what_a_new_process_gives(tmp_path, args):
    before = served_cpu()
    served = run_command(*args, cwd=tmp_path)
    assert served_cpu() > before, "the command did not run in a child of the server"
    fresh = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert (served.returncode, served.stdout) == (fresh.returncode, fresh.stdout)
    assert _without_timings(served.stderr) == _without_timings(fresh.stderr)


def test_relative_paths_are_the_working_directorys(tmp_path):
    res = run_command("cluster", "--dataset", "iris", "--k", "3", "--iterations", "1", "--out", "run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "run" / "labels.csv").is_file()


def test_a_command_past_its_time_is_killed_and_the_server_goes_on(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        run_command("cluster", "--dataset", "blobs", "--n", "400000", "--k", "8", "--iterations", "50", timeout=1,
                    cwd=tmp_path)
    assert run_command("--help").returncode == 0


def test_python_code_sees_what_python_c_gives_it(tmp_path):
    """argv, the path's first entry, the working directory and a variable of the caller's, as `python -c` has them,
    and its exit status."""
    code = ("import json, os, sys; print(json.dumps([sys.argv, sys.path[0], os.getcwd(),"
            " os.environ.get('KMC_SEEN_BY_THE_CHILD')])); sys.exit(3)")
    env = {**os.environ, "KMC_SEEN_BY_THE_CHILD": "yes"}
    before = served_cpu()
    served = run_python(code, "a", 1, cwd=tmp_path, env=env)
    assert served_cpu() > before
    fresh = subprocess.run([sys.executable, "-c", code, "a", "1"], capture_output=True, text=True, cwd=tmp_path,
                           env=env)
    assert (served.returncode, served.stdout, served.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr) == (
        3, f'[["-c", "a", "1"], "", "{tmp_path}", "yes"]\n', "")


def test_a_variable_read_when_used_is_served_with_the_callers_value(tmp_path, monkeypatch):
    """PYTHONBREAKPOINT, as Ray leaves it in a process that started Ray: read by ``breakpoint()`` at each call, so
    the command is still served, and sees the value."""
    monkeypatch.setenv("PYTHONBREAKPOINT", "ray.util.rpdb._driver_set_trace")
    code = "import os; print(os.environ['PYTHONBREAKPOINT'])"
    before = served_cpu()
    res = run_python(code, cwd=tmp_path)
    assert served_cpu() > before, "the command did not run in a child of the server"
    assert (res.returncode, res.stdout) == (0, "ray.util.rpdb._driver_set_trace\n")


def test_a_first_command_inside_a_test_that_set_a_start_up_variable_leaves_the_server_to_the_process(
        tmp_path, monkeypatch):
    """As in a test process with no server yet, whose start-up variables were read as its session started: a
    command asked for while ``OMP_NUM_THREADS`` is set as a test sets it gets a new process and makes no server in
    that environment; with the variable gone, the process's variables are the server's again."""
    monkeypatch.setattr(command_server, "_SERVER", [])
    monkeypatch.setattr(command_server, "_PROCESS_STARTUP", [])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    command_server.process_startup()  # as tests/conftest.py does when the session starts
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    first = run_python("import os; print(os.environ['OMP_NUM_THREADS'])", cwd=tmp_path)
    assert (first.returncode, first.stdout) == (0, "3\n")
    assert command_server._SERVER == [], "a server was made in the test's environment"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert command_server._startup(os.environ) == command_server.process_startup()


def test_what_an_interpreter_reads_as_it_starts_gets_a_new_process(tmp_path):
    before = served_cpu()
    res = run_python("import sys; print(sys.flags.hash_randomization)", cwd=tmp_path,
                     env={**os.environ, "PYTHONHASHSEED": "0"})
    assert (res.returncode, res.stdout) == (0, "0\n") and served_cpu() == before
