"""Built circuits kept for reuse by the estimator: one circuit per set of weights, and Lloyd's circuits with new
assign knobs or a new depth derived from a cached one of the same structure instead of built afresh.

A grid search fits hundreds of estimators whose circuits differ only in ``beta``, ``tie_break`` and the number of
iterations; rebuilding each would cost more than running it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from analysis.pipeline import DTYPES
from circuits import hook_names
from circuits.blocks import ASSIGN, assign_block, lloyd_schedule
from circuits.sharpness import Sharpness
from circuits.spec import LLOYD as LLOYD_SPEC
from circuits.variants import get_variant

#: Built circuits kept for reuse (:func:`built_circuit`): at most this many, holding at most this many bytes of
#: weights together (an iris circuit of 10 iterations holds ~0.3 MiB, a digits one ~40 MiB).
CACHE_SIZE = 64
CACHE_BYTES = 256 * 2**20

_BUILT: OrderedDict = OrderedDict()

def built_circuit(variant: str, d: int, k: int, iterations: int, sharpness, dtype: str, device="cpu", **options):
    """The circuit ``get_variant(variant).build(...)`` makes, built once per set of weights and then reused.

    The key is everything the weights depend on (variant and its parameters, ``d``, ``k``, iterations, the
    sharpness knobs, dtype, build options such as trimmed k-means' radius), so a refit or a ``predict`` with the
    same weights runs the circuit already built. Fitted estimators share it, so a kept circuit is handed out again
    only as it was built (:func:`_as_built`): a circuit whose weights a caller edited, or whose ``HookedTransformer``
    a caller asked for (the model one hooks and edits: ``model_``, a report), is dropped and built (or derived)
    anew. The most recently used circuits are kept, within :data:`CACHE_SIZE` and :data:`CACHE_BYTES`.

    Lloyd's circuit with knobs not built yet is derived from a cached one of the same structure (same key but for
    ``beta``, ``tie_break``, ``mask`` and the iterations): only its assign heads are rebuilt and its tied blocks
    repeated to the depth asked for (:func:`with_assign_knobs`), which is what a new fold, a new data set of the same
    shape or a run stopped early (:mod:`analysis.estimator.stopping`) needs. A first Lloyd circuit of a structure is
    derived from its two-block circuit (0 iterations, built and kept), so that its tied layers share tensors.
    """
    key = (variant, d, k, iterations, sharpness, dtype, device, tuple(sorted(options.items())))
    entry = _BUILT.pop(key, None)
    if entry is not None and not _as_built(entry):
        entry = None
    if entry is None:
        structure = None if sharpness is None else _structure(key)
        template = None if options else _same_structure(structure)
        if template is None and not options and get_variant(variant).unaltered and sharpness is not None and iterations > 0:
            # Lloyd's deeper circuits derive from its two-block one: tied layers share their parameter tensors.
            template = built_circuit(variant, d, k, 0, sharpness, dtype, device)
        circuit = with_assign_knobs(template, sharpness, iterations) if template is not None else \
            get_variant(variant).build(d, k, iterations, sharpness=sharpness, dtype=DTYPES[dtype], device=device,
                                       **options)
        entry = (circuit, sum(p.numel() * p.element_size() for p in circuit.weights.parameters.values()), structure)
    _BUILT[key] = entry
    while len(_BUILT) > 1 and (len(_BUILT) > CACHE_SIZE or sum(e[1] for e in _BUILT.values()) > CACHE_BYTES):
        _BUILT.popitem(last=False)
    return entry[0]


#: The knobs that only Lloyd's assign head reads (:func:`circuits.blocks.assign_head`); ``beta_update`` is the
#: update head's.
ASSIGN_KNOBS = ("beta", "tie_break", "mask")


def _structure(key: tuple) -> tuple:
    """``key`` without the assign head's knobs and the iterations: circuits equal under it differ in their assign
    heads and depth alone (Lloyd's weights are tied: a shallower circuit is a prefix of a deeper one)."""
    variant, d, k, _, sharpness, dtype, device, options = key
    knobs = None if sharpness is None else {**sharpness.to_dict(), **dict.fromkeys(ASSIGN_KNOBS)}
    return (variant, d, k, None if knobs is None else tuple(sorted(knobs.items())), dtype, device, options)


def _same_structure(structure: tuple | None):
    """The most recently used cached Lloyd circuit (built from :data:`circuits.spec.LLOYD`) of ``structure``
    (:func:`_structure`, stored with each entry so that a lookup compares tuples only), or ``None``."""
    if structure is None:
        return None
    for entry in reversed(_BUILT.values()):
        circuit, _, other = entry
        if other == structure and circuit.spec is LLOYD_SPEC and not circuit.hooks and circuit.weights is not None \
                and _as_built(entry):
            return circuit
    return None


def _as_built(entry: tuple) -> bool:
    """Whether a kept circuit is still the one built: none of its weights changed since (an edit through ``.data``
    included: ``KMeansCircuit.weight_edits``), and nobody asked for its ``HookedTransformer``, which holds copies of
    the weights and any hooks a caller added. The estimator's own runs build it only on the dense path
    (``path="dense"``), whose fits then derive a circuit each."""
    circuit = entry[0]
    return not circuit.model_built and not circuit.weight_edits()


def with_assign_knobs(template, sharpness: Sharpness, iterations: int | None = None):
    """Lloyd's circuit ``template`` with the assign heads of ``sharpness`` (its ``beta``, ``tie_break``, ``mask``),
    of ``iterations`` iterations (``None``: ``template``'s).

    In Lloyd's circuit (:func:`circuits.build.build_lloyd_circuit`) only the assign head reads these knobs, and the
    weights are tied: the schedule is ``U A U A ... U A`` (``2 iterations + 2`` blocks) and every ``U`` (every
    ``A``) block has the same weights. So the result is the circuit a fresh build with ``sharpness`` and
    ``iterations`` makes (tests/unit/test_estimator_reuse.py compares every parameter): the assign layers' ``W_Q``,
    ``W_K``, ``W_V``, ``W_O`` are rebuilt once, every other parameter tensor is ``template``'s first ``U`` or ``A``
    block's, shared by every layer of that kind (read only: no path writes a circuit's weights). ``template`` keeps
    its own weights; the derived circuit builds its ``HookedTransformer`` only if asked for it, like any other.
    """
    import torch

    if {**template.sharpness.to_dict(), **dict.fromkeys(ASSIGN_KNOBS)} != \
            {**sharpness.to_dict(), **dict.fromkeys(ASSIGN_KNOBS)}:
        raise ValueError("with_assign_knobs: the circuits differ in more than the assign head's knobs")
    iterations = template.iterations if iterations is None else int(iterations)
    schedule = lloyd_schedule(iterations)
    if iterations < 0 or template.schedule != lloyd_schedule(template.iterations):
        raise ValueError("with_assign_knobs: not a Lloyd schedule (U A U A ... U A)")
    dtype, old, n_layers = template.dtype, template.weights, len(schedule)
    # Only the head reads the knobs: the MLP is the template's (the same weights: assign_mlp reads the layout alone).
    assign = assign_block(template.layout, sharpness, mlp=template.blocks[1].mlp)
    head = assign.head.padded(old.config.d_head)
    matrices = {name: torch.as_tensor(getattr(head, name)[None], dtype=dtype) for name in head.MATRICES}
    if not all(bool(torch.isfinite(w).all()) for w in matrices.values()):
        # A knob too large for the dtype: the fresh build says so (WeightRangeError).
        return get_variant(template.variant).build(template.layout.d, template.layout.k, iterations,
                                                   sharpness=sharpness, dtype=dtype, device=old.config.device)
    # Layer 0 is the template's U block, layer 1 its A block (with the new assign matrices); the others repeat them.
    tied = {layer: _block_parameters(old.parameters, layer) for layer in (0, 1)}
    tied[1].update({("attn", name): value.to(old.config.device) for name, value in matrices.items()})
    parameters = {hook_names.param(layer, component, name): value
                  for layer in range(n_layers) for (component, name), value in tied[layer % 2].items()}
    parameters[hook_names.UNEMBED_W] = old.parameters[hook_names.UNEMBED_W]
    parameters[hook_names.UNEMBED_B] = old.parameters[hook_names.UNEMBED_B]
    blocks = [assign if kind == ASSIGN else template.blocks[0] for kind in schedule]
    weights = replace(old, config=replace(old.config, n_layers=n_layers), parameters=parameters)
    # The template's plain modules serve every layer whose tensors are its own (all but the new assign head).
    return replace(template, weights=weights, sharpness=sharpness, blocks=blocks, schedule=schedule,
                   iterations=iterations, plain_from=template)


def _block_parameters(parameters: dict, layer: int | None) -> dict:
    """``{(component, name): tensor}`` of block ``layer``'s parameters (any block's for ``None``), named as the
    hook_names module's ``param`` spells them."""
    out = {}
    for full, value in parameters.items():
        parts = full.split(".", 3)
        if len(parts) == 4 and parts[1].isdigit() and (layer is None or int(parts[1]) == layer) \
                and hook_names.param(int(parts[1]), parts[2], parts[3]) == full:
            out[(parts[2], parts[3])] = value
    return out


def clear_circuit_cache() -> None:
    """Forget every built circuit (:func:`built_circuit`)."""
    _BUILT.clear()

