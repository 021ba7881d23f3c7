"""Hooks a user added to a circuit's HookedTransformer (permanently, or in a ``hooks()`` context) run wherever the
model runs: the structured path refuses them, the dense path runs them. The run is then described as one with those
hooks: ``KMeansCircuit.added_hooks`` names the hook points, the verification report carries them (its JSON only
when there are some), a failed verdict names them, the header gives them a line, and the views say what they
cannot show. A cached run's permanent hooks act again when its blocks are re-run, so the cache comparison of
``find_alterations`` cannot see them; they are named from the model all the same."""

import pytest
import torch
from sklearn.datasets import make_blobs

from analysis.capture import capture
from analysis.pipeline import as_run
from analysis.report import build_report
from analysis.views import qk_circuit, residual_norms
from circuits import hook_names
from circuits.build import build_lloyd_circuit
from circuits.encoding import encode
from circuits.initialisation import initial_centroids

HOOK = hook_names.mlp_out(2)  # the second update block's MLP output


def zero(value, hook):
    return torch.zeros_like(value)


def setup():
    X, _ = make_blobs(60, n_features=2, centers=3, random_state=0)
    circuit = build_lloyd_circuit(2, 3, 2)  # its own: the hooks must not reach other tests' circuits
    return circuit, encode(circuit.layout, X, initial_centroids(X, 3, "random", 0))


def facts_of(run) -> dict:
    return {f.label: f.value for group in build_report(run).header.groups.values() for f in group}


def test_none_added_none_named_and_no_json_key():
    circuit, enc = setup()
    circuit.model  # built: its own hooks (none for Lloyd's) are not added ones
    run = as_run(capture(circuit, enc, path="auto"))
    assert circuit.added_hooks() == [] and run.report.added_hooks == [] and run.report.verified
    assert "added_hooks" not in run.to_json() and "added_hooks" not in run.report.to_dict()


@pytest.mark.parametrize("how", ["permanent", "hooks() context"])
def test_a_zeroing_hook_is_named_in_the_verdict_json_header_and_weight_views(how):
    circuit, enc = setup()
    model = circuit.model
    if how == "permanent":
        model.add_hook(HOOK, zero, is_permanent=True)
    with model.hooks(fwd_hooks=[(HOOK, zero)] if how != "permanent" else []):
        cap = capture(circuit, enc, path="auto")
        run = as_run(cap)
    assert cap.path == "dense" and cap.added_hooks == [HOOK]
    assert not run.report.verified and run.report.added_hooks == [HOOK]
    assert f"hook on {HOOK} (added to the model)" in run.report.verdict
    assert run.to_json()["added_hooks"] == [HOOK]
    facts = facts_of(run)
    assert facts["hooks added to the model"] == HOOK and facts["alteration, as built"].startswith("none")
    assert any(f"Hooks added to the model ran in this run (on {HOOK})" in c for c in qk_circuit(run).caveats)


def test_a_view_that_re_runs_the_circuit_says_when_the_hooks_it_ran_with_are_gone():
    circuit, enc = setup()
    with circuit.model.hooks(fwd_hooks=[(HOOK, zero)]):
        run = as_run(capture(circuit, enc, path="auto"))
    caveats = residual_norms(run).caveats  # drawn after the context: the hook is gone
    assert any("not the run" in c and HOOK in c for c in caveats)
    circuit.model.add_hook(HOOK, zero, is_permanent=True)
    kept = as_run(capture(circuit, enc, path="auto"))
    assert not any("not the run" in c for c in residual_norms(kept).caveats)  # the same hook, still there


def test_an_identity_hook_is_named_and_the_run_still_verified():
    circuit, enc = setup()
    circuit.model.add_hook(HOOK, lambda value, hook: value, is_permanent=True)
    run = as_run(capture(circuit, enc, path="auto"))
    assert run.report.verified and run.report.added_hooks == [HOOK]
    assert facts_of(run)["hooks added to the model"] == HOOK


def test_a_cached_runs_permanent_hook_is_named_though_a_re_run_of_its_blocks_cannot_see_it():
    circuit, enc = setup()
    circuit.model.add_hook(HOOK, zero, is_permanent=True)
    _, cache = circuit.model.run_with_cache(enc.resid)
    run = as_run((cache, enc))
    assert run.report.alterations == []  # re-run with the permanent hook: no block differs from its cache
    assert run.report.added_hooks == [HOOK] and not run.report.verified
    assert f"hook on {HOOK}" in run.report.verdict
