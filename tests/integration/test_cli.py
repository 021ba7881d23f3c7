"""The command line as a user meets it: a subprocess per exit code, JSON schema, output files, bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_iris

from circuits.initialisation import initial_centroids
from command_server import CLI
from command_server import run_command as cli


def test_help_is_fast_and_lists_cluster():
    out = cli("--help")
    assert out.returncode == 0 and "cluster" in out.stdout
    out = cli("cluster", "--help")
    assert out.returncode == 0 and "--init" in out.stdout and "--json" in out.stdout


def test_exit_code_json_schema_and_files(tmp_path):
    out_dir = tmp_path / "run"
    res = cli("cluster", "--dataset", "iris", "--k", 3, "--json", "--out", out_dir)
    # Exit 0: iris's decimal ties are ties at the data's precision (docs/exactness.md), each listed with its exact
    # gap within its bound, and counted in the verdict.
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["variant"] == "lloyd" and doc["k"] == 3 and doc["iterations"] == 10 and doc["verified"] is True
    assert doc["verdict_kind"] == "exact" and doc["exact"] is True and "cause" not in doc
    ties = doc["ties"]
    assert ties and all(max(t["gaps"]) <= max(t["bounds"]) and t["chosen"] == t["candidates"][0] for t in ties)
    assert doc["verdict"].startswith("VERIFIED (exact Lloyd's k-means, float64); "
                                     f"{sum(len(t['candidates']) - 1 for t in ties)} comparison(s) tied")
    assert doc["initial"]["iteration"] == 0 and doc["converged"] is True
    X = load_iris().data
    assert len(doc["labels"]) == len(X) and all(isinstance(v, int) for v in doc["labels"])
    assert np.array(doc["centroids"]).shape == (3, 4)
    assert [r["iteration"] for r in doc["per_iteration"]] == list(range(1, 11))
    for rec in doc["per_iteration"]:
        for key, kind in [("label_agreement", float), ("max_centroid_error", float), ("objective_circuit", float),
                          ("objective_reference", float), ("min_margin", float)]:
            assert isinstance(rec[key], kind), key
    # Same answer as scikit-learn from the same initial centroids.
    C0 = initial_centroids(X, 3, "random", 0)
    km = KMeans(3, init=C0, n_init=1, algorithm="lloyd", tol=0, max_iter=10).fit(X)
    np.testing.assert_allclose(doc["centroids"], km.cluster_centers_, atol=1e-12)
    assert doc["labels"] == km.labels_.tolist()
    # The output folder holds the same answer.
    assert sorted(p.name for p in out_dir.iterdir()) == ["centroids.csv", "labels.csv", "report.html",
                                                         "verification.json"]
    labels = np.loadtxt(out_dir / "labels.csv", skiprows=1, dtype=int)
    assert labels.tolist() == doc["labels"]
    np.testing.assert_array_equal(np.loadtxt(out_dir / "centroids.csv", delimiter=",", skiprows=1), doc["centroids"])
    ver = json.loads((out_dir / "verification.json").read_text())
    assert ver["verified"] is True and ver["problem"]["source"] == "iris" and ver["verdict"] == doc["verdict"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary folder left behind"
    # The folder gets mkdir's permissions, not the private ones of the temporary folder it was written in.
    umask = os.umask(0)
    os.umask(umask)
    assert out_dir.stat().st_mode & 0o777 == 0o777 & ~umask


def test_exit_0_table_on_a_csv_with_header_and_init_file(tmp_path):
    data = tmp_path / "points.csv"
    data.write_text("a,b\n0,0\n0,1\n10,10\n10,11\n")
    init = tmp_path / "init.npy"
    np.save(init, np.array([[0.0, 0.0], [10.0, 10.0]]))
    res = cli("cluster", "--data", data, "--k", 2, "--init", init, "--iterations", 3)
    assert res.returncode == 0, res.stderr
    assert "VERIFIED" in res.stdout and "iter" in res.stdout


def test_a_crash_is_exit_3_never_the_verdict_codes(monkeypatch, capsys):
    """Exit 1 means "the circuit disagrees with its reference"; a bug must not be read as that verdict."""
    from analysis import cli as cli_module
    from analysis.cli import cluster

    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cluster, "run", broken)
    assert cli_module.main(["cluster", "--dataset", "iris", "--k", "3"]) == 3
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and err.strip().splitlines()[-1].endswith("please report the traceback above)")


@pytest.mark.parametrize("text", ["\ufeff1,2\n3,4\n5,6\n", "\ufeffx,y\n1,2\n3,4\n5,6\n", "1,2\n3,4\n5,6\n"])
def test_csv_rows_are_never_mistaken_for_a_header(tmp_path, text):
    """A first row is a header only when none of its cells is a number; a byte-order mark is not a cell's text."""
    from analysis.data import load_points

    data = tmp_path / "points.csv"
    data.write_text(text, encoding="utf-8")
    np.testing.assert_array_equal(load_points(data), [[1, 2], [3, 4], [5, 6]])


def test_exit_1_when_the_circuit_disagrees(tmp_path):
    res = cli("cluster", "--dataset", "blobs", "--n", 300, "--centers", 4, "--k", 4, "--beta", 10, "--json",
              "--out", tmp_path / "soft")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verified"] is False and doc["failures"]
    assert (tmp_path / "soft" / "verification.json").exists()


def write(path: Path, content):
    if isinstance(content, np.ndarray):
        np.save(path, content, allow_pickle=content.dtype == object)
    else:
        path.write_text(content)
    return path


BAD = {
    "unknown dataset": (["--dataset", "nope", "--k", 3], {}),
    "unknown variant": (["--dataset", "iris", "--k", 3, "--variant", "nope"], {}),
    "k below 1": (["--dataset", "iris", "--k", 0], {}),
    "negative iterations": (["--dataset", "iris", "--k", 3, "--iterations", -1], {}),
    "missing file": (["--data", "{tmp}/absent.csv", "--k", 2], {}),
    "non-numeric csv": (["--data", "{data}", "--k", 2], {"data.csv": "1,2\n3,abc\n"}),
    "ragged csv": (["--data", "{data}", "--k", 2], {"data.csv": "1,2\n3\n4,5\n"}),
    "nan in csv": (["--data", "{data}", "--k", 2], {"data.csv": "1,2\nnan,3\n4,4\n"}),
    "inf in npy": (["--data", "{data}", "--k", 1], {"data.npy": np.array([[1.0, np.inf]])}),
    "empty csv": (["--data", "{data}", "--k", 1], {"data.csv": ""}),
    "header only": (["--data", "{data}", "--k", 1], {"data.csv": "x,y\n"}),
    "empty npy": (["--data", "{data}", "--k", 1], {"data.npy": np.zeros((0, 2))}),
    "pickled npy": (["--data", "{data}", "--k", 1], {"data.npy": np.array([{"a": 1}], dtype=object)}),
    "3-d npy": (["--data", "{data}", "--k", 1], {"data.npy": np.zeros((2, 2, 2))}),
    "unsupported type": (["--data", "{data}", "--k", 1], {"data.txt": "1 2\n"}),
    "k above distinct points": (["--data", "{data}", "--k", 2], {"data.csv": "1,1\n1,1\n1,1\n"}),
    "init of the wrong shape": (["--dataset", "iris", "--k", 3, "--init", "{init}"], {"init.csv": "1,2,3,4\n5,6,7,8\n"}),
    "init with nan": (["--dataset", "iris", "--k", 1, "--init", "{init}"], {"init.csv": "1,2,nan,4\n"}),
    "missing --k": (["--dataset", "iris"], {}),
    "both sources": (["--dataset", "iris", "--data", "x.csv", "--k", 3], {}),
    "bad beta": (["--dataset", "iris", "--k", 3, "--beta", -1], {}),
    "out is a file": (["--dataset", "iris", "--k", 3, "--out", "{tmp}/afile"], {"afile": "x"}),
    "out below a file": (["--dataset", "iris", "--k", 3, "--out", "{tmp}/afile/sub"], {"afile": "x"}),
    "out on a pseudo file system": (["--dataset", "iris", "--k", 3, "--out", "/proc/kmeans-circuits-test"], {}),
    "numbers and text in the first row": (["--data", "{data}", "--k", 2], {"data.csv": "1,2x\n3,4\n5,6\n"}),
    "negative seed": (["--dataset", "blobs", "--k", 2, "--seed", -1], {}),
    "seed beyond 2**32": (["--dataset", "iris", "--k", 2, "--init", "k-means++", "--seed", 2**32], {}),
    "blobs beyond memory": (["--dataset", "blobs", "--k", 2, "--n", 10**13], {}),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_exit_2_one_line_no_traceback_no_output(tmp_path, case):
    args, files = BAD[case]
    paths = {name.split(".")[0]: write(tmp_path / name, content) for name, content in files.items()}
    out_dir = tmp_path / "out"
    argv = [str(a).format(tmp=tmp_path, **paths) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(out_dir)]
    res = cli("cluster", *argv)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert not out_dir.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_a_reader_that_leaves_early_is_no_crash():
    """``cluster --json | head -c 50``: stdout's reader has gone when the result is printed. That was exit 3 with a
    BrokenPipeError traceback; it is the shell's status for SIGPIPE, 141, with nothing on stderr but progress."""
    run = subprocess.Popen([*CLI, "cluster", "--dataset", "iris", "--k", "3", "--iterations", "1", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run.stdout.close()
    err = run.stderr.read()
    assert run.wait(timeout=300) == 141, err
    assert "Traceback" not in err and "error" not in err, err


def test_console_script_is_installed():
    exe = Path(sys.executable).with_name("kmeans-circuits")
    assert exe.exists() and os.access(exe, os.X_OK)
    res = subprocess.run([str(exe), "cluster", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0


def test_report_takes_path_and_refuses_a_dense_run_too_large_for_it(tmp_path):
    """report runs on the structured path when asked (it always ran dense, exit 3 above 12,000 tokens)."""
    X = np.random.default_rng(0).normal(size=(12_100, 1))
    np.save(tmp_path / "x.npy", X)
    res = cli("report", "--data", tmp_path / "x.npy", "--k", 2, "--iterations", 1, "--path", "dense",
              "--out", tmp_path / "dense.html")
    assert res.returncode == 2, res.stderr
    assert "too many for the dense path" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "dense.html").exists()
    res = cli("report", "--data", tmp_path / "x.npy", "--k", 2, "--iterations", 1, "--path", "structured",
              "--max-points", 50, "--out", tmp_path / "structured.html")
    assert res.returncode == 0, res.stderr
    assert "VERIFIED (exact Lloyd's k-means, float64)" in res.stdout and (tmp_path / "structured.html").exists()


def test_no_command_imports_another_and_the_library_imports_no_command_line():
    """Commands share only analysis.cli's shared modules; the library below knows nothing of argparse or the CLI."""
    import ast
    from pathlib import Path

    from analysis.cli import command_modules

    commands = {module.__name__ for module in command_modules()}
    assert len(commands) == 9
    for name in commands:
        tree = ast.parse(Path(sys.modules[name].__file__).read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not imported & (commands - {name}), name
    root = Path(__file__).resolve().parents[1] / "analysis"
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] in ("cli", "commands"):
            continue
        tree = ast.parse(path.read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "argparse" not in names and not any(m and m.startswith("analysis.cli") for m in modules), path
