"""The TransformerLens 4.x model (circuits.hooked.model.HookedCircuit, a HookedRootModule) against the real
HookedTransformer, on TransformerLens 3.x where both exist: the same hook names, state-dict keys, cache and numbers,
bit for bit (the float64 bit patterns, so even the sign of a zero), for the circuits and for random weights."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from circuits import tl
from circuits.build import build_lloyd_circuit
from circuits.encoding import encode
from circuits.hooked.config import HookedCircuitConfig
from circuits.hooked.model import HookedCircuit
from circuits.plain import CircuitConfig
from circuits.variants.gumbel import build_gumbel_circuit
from circuits.variants.spherical import build_spherical_circuit
from circuits.variants.trimmed import build_trimmed_circuit

pytestmark = pytest.mark.skipif(tl.TL_MAJOR >= 4, reason="TransformerLens 4 has no HookedTransformer to compare with")


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bit pattern (``torch.equal`` would take -0.0 for 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    as_int = {torch.float64: torch.int64, torch.float32: torch.int32}[a.dtype]
    return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))


def twins(circuit):
    """The circuit's HookedTransformer and a HookedCircuit built from the same weights (strict load, checked)."""
    return circuit.model, circuit.weights.transformer(HookedCircuit)


def assert_same_run(ht, hc, resid: torch.Tensor) -> None:
    with torch.no_grad():
        out_t, cache_t = ht.run_with_cache(resid)
        out_c, cache_c = hc.run_with_cache(resid)
    assert same_bits(out_t, out_c)
    assert sorted(cache_t.keys()) == sorted(cache_c.keys())
    different = [name for name in cache_t.keys() if not same_bits(cache_t[name], cache_c[name])]
    assert not different, different
    # ActivationCache's own decompositions, which read the model's config and blocks.
    last = ht.cfg.n_layers - 1
    for method, kwargs in [("decompose_resid", {}), ("decompose_resid", {"layer": last, "mlp_input": True}),
                           ("accumulated_resid", {}), ("stack_head_results", {"incl_remainder": True})]:
        stack_t, labels_t = getattr(cache_t, method)(return_labels=True, **kwargs)
        stack_c, labels_c = getattr(cache_c, method)(return_labels=True, **kwargs)
        assert labels_t == labels_c and same_bits(stack_t, stack_c), method


def problem(circuit, seed: int, n: int = 9):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, circuit.layout.d))
    return encode(circuit.layout, X, X[:circuit.layout.k]).resid


def test_the_same_hooks_state_dict_and_weights_as_a_hooked_transformer():
    circuit = build_lloyd_circuit(d=2, k=3, iterations=2)
    ht, hc = twins(circuit)
    assert set(ht.hook_dict) == set(hc.hook_dict)
    assert [(k, v.shape, v.dtype) for k, v in ht.state_dict().items()] == \
           [(k, v.shape, v.dtype) for k, v in hc.state_dict().items()]
    assert all(same_bits(ht.state_dict()[k], v) for k, v in hc.state_dict().items())
    for name in ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_gate", "W_out", "b_Q", "b_K", "b_V", "b_O", "b_in", "b_out",
                 "W_U", "b_U"):
        assert same_bits(getattr(ht, name), getattr(hc, name)), name
    for name in ("QK", "OV"):
        assert same_bits(getattr(ht, name).AB, getattr(hc, name).AB)
        assert same_bits(getattr(ht.blocks[1].attn, name)[0].AB, getattr(hc.blocks[1].attn, name)[0].AB)
    for layer in range(ht.cfg.n_layers):
        assert same_bits(ht.accumulated_bias(layer, mlp_input=True), hc.accumulated_bias(layer, mlp_input=True))
    assert ht.all_head_labels() == hc.all_head_labels()
    # And back: a HookedTransformer's state dict loads strictly into a fresh HookedCircuit, and the reverse.
    HookedCircuit(circuit.weights.config).load_state_dict(ht.state_dict(), strict=True)
    ht.load_state_dict(hc.state_dict(), strict=True)


@pytest.mark.parametrize("build", [
    lambda: build_lloyd_circuit(d=2, k=3, iterations=2),
    lambda: build_spherical_circuit(d=3, k=2, iterations=2),  # use_qk_norm
    lambda: build_trimmed_circuit(d=2, k=2, iterations=2, radius=0.5),  # use_attention_sinks
    lambda: build_gumbel_circuit(d=2, k=2, iterations=2, gamma=0.3, seed=4),  # permanent score hooks
], ids=["lloyd", "spherical", "trimmed", "gumbel"])
def test_every_activation_is_the_hooked_transformers_bit_for_bit(build):
    circuit = build()
    ht, hc = twins(circuit)
    assert_same_run(ht, hc, problem(circuit, seed=0))
    # With the per-head result computed (use_attn_result) and the MLP input hooked, as patching by head does.
    for model in (ht, hc):
        model.set_use_attn_result(True)
        model.set_use_hook_mlp_in(True)
    assert_same_run(ht, hc, problem(circuit, seed=1))


def test_hooks_edit_both_models_alike():
    circuit = build_lloyd_circuit(d=2, k=2, iterations=2)
    ht, hc = twins(circuit)
    resid = problem(circuit, seed=2)
    from circuits import hook_names

    def ablate(pattern, hook):
        pattern[..., 0] = 0.0  # in place: no attention to the BOS sink
        return pattern

    hooks = [(hook_names.pattern(1), ablate), (hook_names.mlp_post(2), lambda post, hook: 2 * post)]
    with torch.no_grad():
        edited = [m.run_with_hooks(resid, fwd_hooks=hooks) for m in (ht, hc)]
        with ht.hooks(fwd_hooks=hooks), hc.hooks(fwd_hooks=hooks):
            in_context = [ht(resid), hc(resid)]
        plain = ht(resid)
    assert same_bits(*edited) and same_bits(*in_context) and same_bits(edited[0], in_context[0])
    assert not torch.equal(edited[0], plain)  # the hooks did change the run


LEVERS = [{}, {"use_qk_norm": True, "eps": 1e-6}, {"use_attention_sinks": True}, {"use_attn_scale": True},
          {"use_attn_scale": True, "scale_attn_by_inverse_layer_idx": True}]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n_layers=st.integers(1, 3), d_head=st.integers(1, 4),
       levers=st.sampled_from(LEVERS), pos=st.integers(1, 7), batch=st.integers(1, 2))
@example(seed=0, n_layers=3, d_head=3, levers=LEVERS[0], pos=5, batch=2)
@example(seed=1, n_layers=3, d_head=3, levers=LEVERS[1], pos=5, batch=2)
@example(seed=2, n_layers=3, d_head=3, levers=LEVERS[2], pos=5, batch=2)
@example(seed=3, n_layers=3, d_head=3, levers=LEVERS[3], pos=5, batch=2)
@example(seed=4, n_layers=3, d_head=3, levers=LEVERS[4], pos=5, batch=2)
def test_random_weights_and_inputs_give_the_same_bits(seed, n_layers, d_head, levers, pos, batch):
    """Not the circuit's weights only: any weights (every parameter random, biases too) and any residual input."""
    from circuits.model import CircuitTransformer

    cfg = CircuitConfig.of(n_layers=n_layers, d_model=6, d_head=d_head, d_mlp=5, d_vocab_out=3, **levers)
    ht = CircuitTransformer(cfg.transformer_lens())
    generator = torch.Generator().manual_seed(seed)
    state = {name: (torch.randn(value.shape, generator=generator, dtype=value.dtype) if value.is_floating_point()
                    and name.rsplit(".", 1)[-1] != "IGNORE" else value.clone())
             for name, value in ht.state_dict().items()}
    ht.load_state_dict(state, strict=True)
    hc = HookedCircuit(cfg)
    hc.load_state_dict(state, strict=True)
    resid = torch.randn(batch, pos, 6, generator=generator, dtype=torch.float64)
    assert_same_run(ht, hc, resid)


def test_settings_the_hooked_components_do_not_implement_are_refused():
    base = dict(n_layers=1, d_model=4, d_head=2, d_mlp=3, d_vocab_out=2)
    for bad in ({"attention_dir": "causal"}, {"normalization_type": "LN"}, {"n_heads": 2}, {"act_fn": "gelu"},
                {"positional_embedding_type": "rotary"}, {"use_local_attn": True}, {"use_split_qkv_input": True}):
        with pytest.raises(ValueError, match="hooked circuit"):
            HookedCircuitConfig.of(**base, **bad)
    with pytest.raises(ValueError, match="no vocabulary"):
        HookedCircuit(HookedCircuitConfig.of(**base, d_vocab=5))
    # attn_scale as TransformerLens derives it.
    reference = tl.HookedTransformerConfig(**base, n_ctx=1, act_fn="relu", use_attn_scale=True).attn_scale
    assert HookedCircuitConfig.of(**base, use_attn_scale=True).attn_scale == reference == np.sqrt(2)
