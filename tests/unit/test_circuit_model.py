"""The circuit's model takes residual input in plain TransformerLens calls and in ``transformer_lens.patching``'s
helpers, whose results must equal the project's own patching.

Every test runs on the circuit's model for the installed TransformerLens (a ``HookedTransformer`` on 3.x, the
``HookedRootModule`` :class:`circuits.hooked.model.HookedCircuit` on 4.x) and, on 3.x, on a ``HookedCircuit`` holding
the same weights as well, so the 4.x model is held to the same tests in the 3.x suite."""

import sys

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

from analysis.patching import Patch, PatchingExperiment, move_centroid
from circuits.devices import torch_threads
from circuits import hook_names
from circuits import tl
from circuits.build import KMeansCircuit, build_lloyd_circuit
from circuits.encoding import encode
from circuits.initialisation import initial_centroids
from circuits.hooked.model import HookedCircuit
from circuits.model import CircuitTransformer, ResidualInput
from circuits.tl import patching

#: The model classes under test: the installed major's CircuitTransformer, and on 3.x the 4.x class as well.
MODEL_CLASSES = ["CircuitTransformer"] + (["HookedCircuit"] if tl.TL_MAJOR < 4 else [])


def as_hooked_circuit(circuit: KMeansCircuit) -> KMeansCircuit:
    """The same circuit (weights, permanent hooks, layout) around a :class:`HookedCircuit`."""
    return KMeansCircuit.from_model(circuit.weights.transformer(HookedCircuit), circuit.layout, circuit.schedule,
                                    circuit.sharpness, circuit.iterations, variant=circuit.variant,
                                    spec=circuit.spec, hooks=circuit.hooks, score_hooks=circuit.score_hooks)


@pytest.fixture(scope="module", params=MODEL_CLASSES)
def experiment(request):
    # Moving initial centroid 0 here swaps the two final clusters: the corruption reaches the logits.
    X, _ = make_blobs(n_samples=8, centers=2, cluster_std=1.5, random_state=18)
    C0 = initial_centroids(X, 2, "random", seed=18)
    circuit = build_lloyd_circuit(d=2, k=2, iterations=2)
    if request.param == "HookedCircuit":
        circuit = as_hooked_circuit(circuit)
    return PatchingExperiment(circuit, move_centroid(X, C0, centroid=0))


def test_plain_calls_run_every_block_and_token_input_is_refused(experiment):
    model, resid = experiment.model, experiment.clean_input.resid
    # The class itself: a HookedTransformer on 3.x; on 4.x (which has none) our HookedRootModule.
    assert isinstance(model, tl.HookedRootModule)
    if tl.TL_MAJOR >= 4:
        assert CircuitTransformer is HookedCircuit and isinstance(model, HookedCircuit)
    else:
        assert isinstance(model, (CircuitTransformer, HookedCircuit))
        assert isinstance(model, tl.HookedTransformer) == (type(model) is CircuitTransformer)
    before = resid.clone()
    with torch.no_grad():
        plain = model(resid)
        explicit = model(resid, start_at_layer=0)
        logits, cache = model.run_with_cache(ResidualInput(resid))
        hooked = model.run_with_hooks(resid, fwd_hooks=[])
    assert torch.equal(plain, explicit) and torch.equal(plain, logits) and torch.equal(plain, hooked)
    # The cache starts at block 0 (no embedding hooks) and reaches the last block.
    assert hook_names.resid_pre(0) in cache and hook_names.resid_post(experiment.n_layers - 1) in cache
    assert torch.equal(cache[hook_names.resid_pre(0)], before)
    # A later start still takes the residual stream before that layer, as in TransformerLens.
    with torch.no_grad():
        late = model(cache[hook_names.resid_pre(2)], start_at_layer=2)
    assert torch.equal(late, plain)
    tokens = torch.zeros(1, resid.shape[1], dtype=torch.long)
    for bad in (tokens, "the quick brown fox", ["a", "b"]):
        with pytest.raises(TypeError, match="no token vocabulary"):
            model(bad)
    with pytest.raises(TypeError, match="no token vocabulary"):
        model.run_with_cache(tokens)
    with pytest.raises(ValueError, match=r"shape \(batch, pos, 17\)"):
        model(resid[..., :3])
    with pytest.raises(TypeError):
        model.embed(tokens)
    assert model.cfg.d_vocab == 0 and model.cfg.n_ctx == sys.maxsize
    assert model.cfg.d_vocab_out == experiment.layout.k
    assert not any(name.startswith(("embed.", "pos_embed.")) for name in model.state_dict())


def test_hooks_that_write_in_place_leave_the_input_alone(experiment):
    model, resid = experiment.model, experiment.corrupted_input.resid
    before = resid.clone()

    def zero(activation, hook):
        activation[:] = 0  # in place, as transformer_lens.patching's setters write

    with torch.no_grad():
        model.run_with_hooks(resid, fwd_hooks=[(hook_names.resid_pre(0), zero)])
    assert torch.equal(resid, before)


def _ours(exp: PatchingExperiment, component: str, metric) -> torch.Tensor:
    """The same grid through analysis.patching: one patch per (layer, position), read after the last block."""
    n_pos = exp.sequence.n_tokens
    cells = [(layer, pos) for layer in range(exp.n_layers) for pos in range(n_pos)]
    resid = exp.run([Patch.of(exp.site(component, layer, [pos])) for layer, pos in cells])
    out = torch.empty(exp.n_layers, n_pos)
    with torch.no_grad():
        for (layer, pos), r in zip(cells, resid):
            out[layer, pos] = metric(exp.model.unembed(r[None]))
    return out


@pytest.mark.parametrize("helper, component", [(patching.get_act_patch_resid_pre, "resid_pre"),
                                               (patching.get_act_patch_mlp_out, "mlp_out")])
def test_transformer_lens_patching_helpers_agree_with_ours(experiment, helper, component):
    model = experiment.model
    with torch.no_grad():
        clean_logits, clean_cache = model.run_with_cache(experiment.clean_input.resid)
    # Distance of the patched run's logits (the points' assignments) from the clean run's: 0 where a patch
    # restores the clean readout.
    metric = lambda logits: (logits - clean_logits).abs().sum()  # noqa: E731
    corrupted = experiment.corrupted_input.resid.clone()
    with torch.no_grad(), torch_threads(1):
        theirs = helper(model, ResidualInput(corrupted), clean_cache, metric)
    ours = _ours(experiment, component, metric)
    assert theirs.shape == (experiment.n_layers, experiment.sequence.n_tokens)
    torch.testing.assert_close(theirs, ours, rtol=0, atol=0)
    # The grid must discriminate: cells differ, and patching the centroid token's input restores the clean run.
    assert len(set(ours.flatten().tolist())) > 1
    if component == "resid_pre":
        assert ours[0, experiment.sequence.centroid(0)] == 0.0
    assert torch.equal(corrupted, experiment.corrupted_input.resid)


def test_a_raw_residual_tensor_is_sized_by_d_model_in_the_helpers(experiment):
    """Why ResidualInput exists: the helpers take the position count from the input's last axis."""
    model = experiment.model
    with torch.no_grad():
        clean_logits, clean_cache = model.run_with_cache(experiment.clean_input.resid)
    raw = experiment.corrupted_input.resid
    assert raw.shape[-1] != raw.shape[1]
    with torch.no_grad(), torch_threads(1), pytest.raises(IndexError):
        patching.get_act_patch_resid_pre(model, raw, clean_cache, lambda logits: logits.sum())


def test_encoded_input_reproduces_the_explicit_start(experiment):
    X = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0], [6.0, 5.0]])
    circuit = build_lloyd_circuit(d=2, k=2, iterations=2)
    encoded = encode(circuit.layout, X, X[[0, 2]])
    with torch.no_grad():
        assert torch.equal(circuit.model(encoded.resid), circuit.model(encoded.resid, start_at_layer=0))
    labels = circuit.model(encoded.resid)[0, encoded.sequence.points].argmax(-1)
    np.testing.assert_array_equal(labels.numpy(), [0, 0, 1, 1])
