"""Shared fixtures (built circuits are cached per (d, k, iterations, dtype), since tests reuse a few shapes), and the
suite's layers: each test's marker (fast, slow, subprocess, browser, ray, notebooks), assigned at collection."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import settings

#: tests/ (browser.py, command_server.py, typecheck.py) and each suite folder are importable by bare name from any
#: test, whichever file or folder pytest is given: a test imports a helper of another folder's file (from
#: test_cli_bad_input import usage_error).
TESTS = Path(__file__).resolve().parent
#: The suite's folders (docs/contributing.md): tests/unit, in-process tests of circuits/ and analysis/;
#: tests/integration, the command line, mostly run as a user does in a subprocess; tests/acceptance, what a reader
#: meets (notebooks, the report in a browser, the docs, the README, the committed checkpoints, the code's shape).
#: Each folder is a marker too (`-m unit`). A test file outside them fails collection: a new file is placed when it
#: is added. Test files are imported by their bare name (from test_training_cli import assert_usage_error), so a
#: name is used once.
FOLDERS = ("unit", "integration", "acceptance")
for _path in (TESTS, *(TESTS / folder for folder in FOLDERS)):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

# The suite (what CI runs) draws the same Hypothesis examples on every run, so a red run means a change broke
# something, not that a new random draw found an old problem; exploring new examples is a separate, deliberate
# run: KMC_HYPOTHESIS=explore python -m pytest -q (see docs/contributing.md). A problem exploration finds is
# pinned with @example or a file in tests/data, as tests/data/tie_break_cascade.npz was.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("KMC_HYPOTHESIS", "repeatable"))

# Before the first import of circuits or analysis: the kernels of tests/typecheck.py's UNCHECKED are imported
# without the run-time type checker that pyproject's addopts puts on every other module of the two, and jaxtyping's
# shape-memo wrapper goes only on functions with an array hint (beartype alone checks the rest).
from typecheck import check_arrays_only_where_hinted, leave_kernels_unchecked

leave_kernels_unchecked()
check_arrays_only_where_hinted()

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
    tie_divergence = any("exact tie" in f for f in rep.failures)
    # "near-tie": two distances float64 cannot order, decided exactly unlike the circuit's tie-break or rounding.
    assert (rep.errors or tie_divergence) and causes <= {"tie-break", "resolution", "near-tie"}, rep.summary()
    window = rep.tolerances.tie_break * (rep.k - 1)
    assert all(m.gap <= window + m.window or m.cause == "resolution" for m in own), rep.summary()


@pytest.fixture
def run():
    return run_circuit


def assert_forward_is_the_hooked_transformers(model, tasks, steps: int = 3) -> None:
    """A trainable model with every weight moved (into masked dimensions too): its training-time forward pass, which
    skips the masked point x point block, equals the exported HookedTransformer's at every step."""
    import torch

    from circuits.training.hooked import run_hooked

    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype))
    enc = model.encode(tasks.X, tasks.C0)
    with torch.no_grad():
        fast = model.run(enc.resid, steps, tasks.X.shape[1], keep=True)
    hooked = run_hooked(model.hooked_transformer(), model.layout, enc.resid, steps, True, keep=True)
    for a, b in zip(fast, hooked):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------------------------ the suite's layers
# Every test is in exactly one layer, a marker registered in pyproject.toml: `python -m pytest -q -m fast` runs the
# unit tests alone (minutes); `python -m pytest -q`, the CI command, runs every layer. Where a new test goes and how
# it is classified: docs/contributing.md.

#: What starts other processes, by how much it costs, most first: a test that does several is in the first.
OUT_OF_PROCESS = ("notebooks", "browser", "ray", "subprocess")
#: The in-process layers: unit tests of circuits/ and analysis/ (fast), and the long ones kept out of `-m fast`.
IN_PROCESS = ("fast", "slow")
LAYERS = (*IN_PROCESS, *OUT_OF_PROCESS)

#: The layer of a file's in-process tests (those it does not move out, below): fast, unless the whole file is in
#: an out-of-process layer, named here.
FILE_LAYERS = {
    "test_notebooks.py": "notebooks",  # runs them in a Jupyter kernel; checks the committed files
    "test_report_browser.py": "browser",  # every test here opens a page in Chromium
}
#: In-process tests too long for `-m fast` (file name::function, every parametrization, in whichever folder): each
#: took 10 s or more in a run of `-m fast --durations=0` on the shared, loaded 2-core machine, or 2.5 s or more in a
#: second run on a lighter load (docs/performance.md, "Notebooks and the test suite").
SLOW = frozenset({
    "test_learned_cli.py::test_drift_construction_learned_reads_the_factors_back",
    "test_adversarial_inputs.py::test_checkpoint_weight_that_overflows_with_its_scale_is_exit_2",
    "test_certificate.py::test_leak_bound_bounds_the_pattern_and_the_assignment",
    "test_drift.py::test_analysis_of_an_untrained_model",
    "test_drift.py::test_drift_report_is_self_contained",
    "test_estimator.py::test_paths_agree_and_large_data_takes_the_structured_path",
    "test_estimator_parity.py::test_check_estimator_fails_only_where_documented",
    "test_estimator_parity.py::test_n_init_auto_follows_kmeans",
    "test_estimator_parity.py::test_tol_stops_where_kmeans_stops_and_the_circuit_runs_until_then",
    "test_exactness_contract.py::test_did_not_converge_is_said",
    "test_exactness_contract.py::test_verdict_and_labels_agree",
    "test_general_checkpoint.py::test_at_or_below_lloyds_after_the_last_step_on_average",
    "test_general_checkpoint.py::test_mean_objective_does_not_rise_beyond_the_evaluations_tie_tolerance",
    "test_lloyd_hard_inputs.py::test_five_thousand_points",
    "test_lloyd_layers.py::test_circuit_equals_reference_at_every_layer",
    "test_lloyd_layers.py::test_units_do_not_matter",
    "test_progress.py::test_evaluate_and_drift_report_each_stage",
    "test_prove.py::test_every_obligation_is_proved",
    "test_prove.py::test_sixty_four_dimensions_sixteen_centroids",
    "test_prove_algebra.py::test_fourier_motzkin_agrees_with_linear_programming",
    "test_prove_algebra.py::test_piecewise_prover_agrees_with_exact_evaluation",
    "test_prove_bound.py::test_bound_holds_on_datasets",
    "test_prove_bound.py::test_bound_holds_on_hard_inputs",
    "test_prove_bound.py::test_bound_holds_on_hypothesis_problems",
    "test_prove_bound.py::test_variant_bound_holds_on_hypothesis_problems",
    "test_prove_bound.py::test_variant_bound_holds_on_iris",
    "test_prove_bound.py::test_variant_bound_is_far_from_zero_where_the_softmax_is_soft",
    "test_prove_mutations.py::test_every_named_obligation_can_be_broken_by_one_entry",
    "test_prove_mutations.py::test_single_entry_mutations_are_caught_and_named",
    "test_prove_mutations.py::test_unembedding_mutations",
    "test_prove_variants.py::test_damped_is_proved",
    "test_prove_variants.py::test_damped_norm_is_exact_iff_one_minus_eta_is_a_float",
    "test_prove_variants.py::test_trimmed_is_proved_with_outliers_in_the_examples",
    "test_readme.py::test_python_examples_run",
    "test_report.py::test_sections_can_be_added_placed_and_registered",
    "test_report_inputs.py::test_every_input_gives_the_report_of_the_run",
    "test_sklearn_oracle.py::test_blobs_many_iterations_match_sklearn",
    "test_sklearn_oracle.py::test_bundled_dataset_matches_sklearn",
    "test_structured.py::test_every_variant_equals_the_dense_forward",
    "test_swap.py::test_transformer_equals_reference_on_general_tasks",
    "test_swap_cli.py::test_evaluate_construction_measures_it_like_a_general_checkpoint",
    "test_sweep.py::test_circuit_runner_equals_the_soft_reference",
    "test_training.py::test_resuming_continues_exactly",
    "test_training.py::test_training_on_a_fixed_seed_is_reproducible",
    "test_training_general.py::test_construction_support_trains_only_the_weights_the_construction_sets",
    "test_training_general.py::test_general_training_writes_a_v2_checkpoint_that_loads_and_runs_smaller_shapes",
    "test_variants.py::test_annealed_equals_reference_at_every_layer",
    "test_variants.py::test_damped_equals_reference_at_every_layer",
    "test_variants.py::test_gumbel_equals_reference_draw_for_draw",
    "test_variants.py::test_sparse_equals_reference_at_every_layer",
    "test_variants.py::test_trimmed_equals_reference_at_every_layer",
    "test_variants_references.py::test_gumbel_picks_members_with_softmax_frequencies",
})

#: What moves a test out of process, found in its code: these names, reached from the test function through the
#: module's own functions and fixtures (code only: a docstring that mentions a subprocess moves nothing).
BROWSER_NAMES = frozenset({"check_page", "Chromium"})
SUBPROCESS_NAMES = frozenset({"subprocess", "Popen", "run_command", "run_python"})  # the last two: command_server.py
#: The module fixture that starts a local Ray instance (tests/integration/test_engine.py); a test that takes it, or is
#: parametrized with "ray" (and takes it through request.getfixturevalue), is in the ray layer.
RAY_FIXTURE = "local_ray"


@functools.lru_cache(maxsize=None)
def _module_functions(path: str) -> dict[str, tuple[frozenset[str], tuple[str, ...]]]:
    """Each module-level function of a test file: the names its code uses, and the names of its arguments."""
    out = {}
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            used |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            used |= {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                     and n.value.isidentifier()}  # request.getfixturevalue("local_ray")
            out[node.name] = (frozenset(used), tuple(a.arg for a in node.args.args))
    return out


@functools.lru_cache(maxsize=None)
def _imported_helpers(path: str) -> dict[str, str]:
    """Names a test file imports from another test file (``from test_training_cli import assert_usage_error``):
    name -> that file."""
    files = _test_files()
    return {alias.asname or alias.name: str(files[f"{node.module}.py"])
            for node in ast.parse(Path(path).read_text()).body
            if isinstance(node, ast.ImportFrom) and node.module and f"{node.module}.py" in files
            for alias in node.names}


@functools.lru_cache(maxsize=None)
def _helper_aliases(path: str) -> dict[str, str]:
    """Names a test file imports under another name from a helper module of tests/ (``from command_server import
    run_command as cli``): the name it uses -> the helper's own name, which is what the layers look for."""
    return {alias.asname: alias.name
            for node in ast.parse(Path(path).read_text()).body
            if isinstance(node, ast.ImportFrom) and node.module and (TESTS / f"{node.module}.py").is_file()
            for alias in node.names if alias.asname}


def _reached_names(path: str, function: str) -> frozenset[str]:
    """The names used by ``function`` and by every function or fixture it reaches (calls or takes), in its module
    or imported from another test file."""
    seen, todo, names = set(), [(path, function)], set()
    while todo:
        where, name = todo.pop()
        if (where, name) in seen:
            continue
        seen.add((where, name))
        if name in _imported_helpers(where):
            todo.append((_imported_helpers(where)[name], name))
            continue
        if name not in _module_functions(where):
            continue
        used, args = _module_functions(where)[name]
        names |= used | {_helper_aliases(where)[n] for n in used if n in _helper_aliases(where)}
        todo.extend((where, n) for n in (*used, *args))
    return frozenset(names)


def _layer(item) -> str:
    """The layer of one test, from its file and its code (see FILE_LAYERS, SLOW and the names above)."""
    path = Path(str(item.fspath))
    file_layer = FILE_LAYERS.get(path.name, "fast")
    if file_layer in OUT_OF_PROCESS:
        return file_layer
    reached = _reached_names(str(path), item.originalname)
    params = getattr(item, "callspec", None)
    if reached & BROWSER_NAMES:
        return "browser"
    if RAY_FIXTURE in item.fixturenames or (params is not None and "ray" in params.params.values()):
        return "ray"
    if reached & SUBPROCESS_NAMES:
        return "subprocess"
    return "slow" if f"{path.name}::{item.originalname}" in SLOW else file_layer


@functools.lru_cache(maxsize=None)
def _test_files() -> dict[str, Path]:
    """Every test file of the suite's folders, by name; a name used twice fails (files import each other by name)."""
    files: dict[str, Path] = {}
    for folder in FOLDERS:
        for path in sorted((TESTS / folder).rglob("test_*.py")):
            if path.name in files:
                raise pytest.UsageError(f"{path} and {files[path.name]} have one name: test files import each "
                                        "other by bare name, so each name is used once")
            files[path.name] = path
    return files


def _folder(path: Path) -> str:
    """The suite folder a test file is in (tests/unit, tests/integration, tests/acceptance)."""
    parts = path.resolve().relative_to(TESTS).parts if path.resolve().is_relative_to(TESTS) else ()
    if len(parts) < 2 or parts[0] not in FOLDERS:
        raise pytest.UsageError(f"{path} is in none of the suite's folders: move it into tests/unit, "
                                "tests/integration or tests/acceptance (docs/contributing.md says which)")
    return parts[0]


LAYER = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)  # before -m selects by the markers this adds
def pytest_collection_modifyitems(config, items):
    files = _test_files()
    stale = [entry for entry in SLOW if entry.partition("::")[0] not in files
             or entry.partition("::")[2] not in _module_functions(str(files[entry.partition("::")[0]]))]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py: SLOW names tests that do not exist: {sorted(stale)}")
    for item in items:
        folder = _folder(Path(str(item.fspath)))
        if not item.get_closest_marker(folder):
            item.add_marker(getattr(pytest.mark, folder))
        given = {m.name for m in item.iter_markers() if m.name in LAYERS}
        if len(given) > 1:
            raise pytest.UsageError(f"{item.nodeid} is marked with several test layers {sorted(given)}: one only")
        layer = given.pop() if given else _layer(item)
        if not item.get_closest_marker(layer):
            item.add_marker(getattr(pytest.mark, layer))
        item.stash[LAYER] = layer


# ------------------------------------------------------------------------------------------- the parallel run
# `python -m pytest -q -n 2` (the CI command) runs the suite in two pytest-xdist workers; each collects the whole
# suite and takes work units from the controller as it finishes others: one test, or every test of one file that
# must stay on one worker (below), which that worker runs in order. Serially (no -n, or -n 0) nothing here applies.
# docs/contributing.md#running-in-parallel.
#
# The controller decides from node ids alone (it collects nothing), so the files are found from their code, not
# from markers: pytest-xdist's own grouping (`--dist loadgroup` and xdist_group marks) rewrites node ids on the
# workers, which pytest 9.2 no longer allows, and then silently groups nothing (pytest-xdist issue 1386).

#: Test files whose tests must not be split between two workers, beyond those found by their code, with the reason.
ONE_WORKER: dict[str, str] = {}


@functools.lru_cache(maxsize=None)
def _one_worker(path: str) -> bool:
    """Whether a test file runs on one worker: named in ONE_WORKER, or it defines a fixture shared beyond one test
    (scope module, class, package or session: a trained checkpoint, a Chromium, a local Ray instance is built once,
    on one worker, not on each, and a local Ray instance is never started twice at once)."""
    if Path(path).name in ONE_WORKER:
        return True
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "fixture":
            scope = next((k.value for k in node.keywords if k.arg == "scope"), None)
            if isinstance(scope, ast.Constant) and scope.value != "function":
                return True
    return False


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before pytest-xdist's own; a hook only where it is installed
def pytest_xdist_make_scheduler(config, log):
    """An -n run's scheduler (unless --dist names another than load): xdist's by scope, a scope being a whole file
    for the files of _one_worker and each test for the rest."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesThatShare(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if _one_worker(str(config.rootpath / path)) else nodeid

    return FilesThatShare(config, log)


#: In an -n run each worker, and each command its tests start, computes on one thread: the workers already keep
#: the cores busy, and two torch threads in each of them (torch's default on 2 cores) spent their waits spinning.
#: Measured (docs/performance.md, "The test suite"): `python -m pytest -q -n 2 -m fast` took 236 s (431 s of user
#: CPU) with torch's default and 174 s (312 s) with one thread. A serial run keeps torch's default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def pytest_sessionstart(session):
    """The start-up variables the tests' commands are served with (tests/command_server.py), read now: after the
    settings above and before any test could change one."""
    import command_server

    command_server.process_startup()


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Each test starts with the process's torch thread count: a command run in-process sets it for the process
    (`drift --threads`, default 1), and the next test in that worker (an order -n changes) would inherit it."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


#: Programs an in-process test may still start: ctypes.util.find_library asks these where a library is (the
#: command line's keep_freed_memory looks up libc), and joblib (under scikit-learn's KMeans) counts physical cores
#: with `cat` or `lscpu` once per process; neither starts any layer's machinery.
LIBRARY_LOOKUP = frozenset({"ldconfig", "gcc", "cc", "objdump", "ld", "cat", "lscpu"})


@pytest.fixture(autouse=True)
def _in_process_layers_start_no_process(request, monkeypatch):
    """A test of an in-process layer that starts a process (a subprocess, a kernel, Chromium, Ray) fails, so that
    `-m fast` means what it says however the test was classified."""
    layer = request.node.stash.get(LAYER, None)
    if layer in IN_PROCESS:
        message = (f"{request.node.nodeid} is in the {layer!r} test layer, which runs in this process, but starts "
                   "another process: it belongs in another layer (tests/conftest.py, docs/contributing.md)")

        def refuse(*args, **kwargs):
            raise AssertionError(message)

        execute_child = subprocess.Popen._execute_child

        def execute_lookup_only(popen, args, executable, *rest, **kwargs):
            program = executable or (args.split()[0] if isinstance(args, (str, bytes)) else args[0])
            if os.path.basename(os.fsdecode(program)) not in LIBRARY_LOOKUP:
                raise AssertionError(f"{message} ({program})")
            return execute_child(popen, args, executable, *rest, **kwargs)

        monkeypatch.setattr(subprocess.Popen, "_execute_child", execute_lookup_only)
        for name in ("fork", "forkpty"):  # multiprocessing; subprocess is guarded above
            if hasattr(os, name):
                monkeypatch.setattr(os, name, refuse)
    yield
