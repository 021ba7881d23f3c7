"""Discovery methods as plug-ins (analysis/discovery/methods.py), scored like the built-ins: an oracle that removes
every edge on the family's problems scores exactly 1, a random one its baseline within the baseline's spread,
a malformed one is refused; EAP-IG's interpolation points are the reference implementation's."""

import numpy as np
import pytest
import torch

from analysis.discovery.methods import MethodError, MethodOutput, Task, load_method, run_method
from analysis.discovery.run import build_construction, discover, make_patcher
from analysis.discovery.table import dataset_pairs
from analysis.discovery.truth import derive_truth, search_pairs

SHAPE = (2, 2, 8)


@pytest.fixture(scope="module")
def case():
    d, k, n = SHAPE
    circuit = build_construction("lloyd", d, k, 1)
    pairs = dataset_pairs("move-centroid", d, k, n, 0, 4)
    patcher = make_patcher(circuit, pairs, ablation="resample", metric="l2", drop_invisible=True)
    truth = derive_truth(circuit, patcher.graph, "move-centroid", "resample", d, k, n)
    return circuit, patcher, truth


def test_an_oracle_plug_in_scores_one(case):
    """The oracle removes each edge alone on every problem the family's search draws (the methods' patcher, not
    the truth's evaluator) and scores an edge by the largest readout change: it ranks every member above every
    other edge, so every area is 1, at edge and node level. Against the weights' data-flow graph (the truth
    before this issue) it would not be: edges such as in->A0.v carry data and change nothing."""
    circuit, patcher, truth = case
    searched = [p for p, _ in search_pairs(truth)]

    def oracle(task: Task) -> np.ndarray:
        every = make_patcher(circuit, searched, task.graph, "resample", "l2", drop_invisible=True)
        return every.readout_changes(range(every.E)).max(axis=1)

    result = discover(circuit, patcher.pairs, oracle, patcher=patcher, truth=truth)
    assert all(result.scored.edges[m] == 1.0 for m in ("step_auc", "auroc", "auprc"))
    assert result.scored.nodes["step_auc"] == 1.0 or np.isnan(result.scored.nodes["step_auc"])
    data_flow = truth.graph.truth
    assert not np.array_equal(data_flow, truth.members)
    from analysis.discovery import scoring

    assert scoring.curve_metrics(result.family, data_flow)["step_auc"] < 1.0


def test_a_random_plug_in_scores_its_baseline(case):
    circuit, patcher, truth = case
    rng = np.random.default_rng(7)

    def random_method(task: Task) -> MethodOutput:
        return MethodOutput(rng.random(task.patcher.E), details={"what": "uniform scores"})

    result = discover(circuit, patcher.pairs, random_method, patcher=patcher, truth=truth)
    mean, std = result.baselines["random"]["edges"]["step_auc"]
    assert abs(result.step_auc - mean) <= 3 * std
    assert result.to_dict()["details"] == {"what": "uniform scores"}


@pytest.mark.parametrize("bad, words", [
    (lambda task: np.ones(3), "must return"),
    (lambda task: np.full(task.patcher.E, np.nan), "non-finite"),
    (lambda task: MethodOutput(np.ones(task.patcher.E), subgraphs=np.ones((2, task.patcher.E))), "boolean"),
    (lambda task: ["a"] * task.patcher.E, "not numbers"),
])
def test_malformed_plug_ins_are_refused(case, bad, words):
    _, patcher, _ = case
    with pytest.raises(MethodError, match=words):
        run_method(bad, Task(patcher), "bad")


@pytest.mark.parametrize("name, words", [("nope", "unknown method"), ("no_such_module_xyz:f", "cannot import"),
                                         ("json:no_such_function", "no function"), ("json:", "unknown method")])
def test_unloadable_plug_ins_are_refused(name, words):
    with pytest.raises(MethodError, match=words):
        load_method(name)


def test_eap_ig_steps_are_the_reference_implementations(case):
    """``a = j / m`` for ``j = 0 .. m - 1``: with one step EAP-IG is EAP's formula with the gradient taken at the
    ablated (corrupted) input, not at the clean one (which is EAP itself)."""
    from analysis.discovery.eap import _scores, eap, eap_ig, interpolation_points

    _, patcher, _ = case
    assert interpolation_points(4).tolist() == [0.0, 0.25, 0.5, 0.75]
    _, grads = patcher.run(torch.zeros(1, patcher.E, dtype=patcher.dtype), x=patcher.corrupted, probe=True)
    at_corrupted = _scores(patcher, grads)
    assert np.array_equal(eap_ig(patcher, 1), at_corrupted)
    assert not np.array_equal(eap_ig(patcher, 1), eap(patcher))
