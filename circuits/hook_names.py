"""Every TransformerLens hook-name string the project uses, in one place.

TransformerLens 4 renames and restructures hooks; keeping the strings here makes that move a one-file change.
Nothing else in the project spells a hook name.
"""

from __future__ import annotations

from collections.abc import Callable

#: Where the residual stream can be read around block ``layer``.
RESID_POSITIONS: tuple[str, ...] = ("resid_pre", "resid_mid", "resid_post")


def resid_pre(layer: int) -> str:
    return f"blocks.{layer}.hook_resid_pre"


def resid_mid(layer: int) -> str:
    return f"blocks.{layer}.hook_resid_mid"


def resid_post(layer: int) -> str:
    return f"blocks.{layer}.hook_resid_post"


def resid(position: str, layer: int) -> str:
    """``resid(position, layer)`` for ``position`` in :data:`RESID_POSITIONS`."""
    if position not in RESID_POSITIONS:
        raise ValueError(f"unknown residual position {position!r}; expected one of {RESID_POSITIONS}")
    return f"blocks.{layer}.hook_{position}"


def attn_scores(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_attn_scores"


def pattern(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_pattern"


def q(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_q"


def k(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_k"


def v(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_v"


def z(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_z"


def head_result(layer: int) -> str:
    """Per-head output; only populated when ``cfg.use_attn_result`` is on."""
    return f"blocks.{layer}.attn.hook_result"


def qkv_input(layer: int, port: str) -> str:
    """The residual copy a head's query, key or value reads (``port`` q, k or v); only with
    ``cfg.use_split_qkv_input`` on."""
    return f"blocks.{layer}.hook_{port}_input"


def mlp_in(layer: int) -> str:
    """The residual copy the MLP reads; only with ``cfg.use_hook_mlp_in`` on."""
    return f"blocks.{layer}.hook_mlp_in"


def attn_out(layer: int) -> str:
    return f"blocks.{layer}.hook_attn_out"


def mlp_pre(layer: int) -> str:
    """Gate pre-activation of the gated MLP."""
    return f"blocks.{layer}.mlp.hook_pre"


def mlp_pre_linear(layer: int) -> str:
    """Linear (ungated) input of the gated MLP."""
    return f"blocks.{layer}.mlp.hook_pre_linear"


def mlp_post(layer: int) -> str:
    return f"blocks.{layer}.mlp.hook_post"


def mlp_out(layer: int) -> str:
    return f"blocks.{layer}.hook_mlp_out"


def unembed_in() -> str:
    return "unembed.hook_in"


def logits() -> str:
    return "unembed.hook_out"


def names_filter(names: set[str] | list[str] | tuple[str, ...]) -> Callable[[str], bool]:
    """A ``names_filter`` for ``run_with_cache`` keeping exactly ``names``."""
    wanted = frozenset(names)
    return wanted.__contains__


#: Per-block activations that patching can address by a short name, and the hook each one lives at.
BLOCK_COMPONENTS: dict[str, Callable[[int], str]] = {
    "resid_pre": resid_pre,
    "resid_mid": resid_mid,
    "resid_post": resid_post,
    "attn_out": attn_out,
    "mlp_out": mlp_out,
    "z": z,
    "result": head_result,
}


def component(name: str, layer: int) -> str:
    """The hook of block component ``name`` (a key of :data:`BLOCK_COMPONENTS`) at ``layer``."""
    try:
        return BLOCK_COMPONENTS[name](layer)
    except KeyError:
        raise ValueError(f"unknown block component {name!r}; expected one of {tuple(BLOCK_COMPONENTS)}") from None


# State-dict keys of the parameters the builder writes, for the same reason the hook names live here.
def param(layer: int, component: str, name: str) -> str:
    """``param(3, "attn", "W_Q")`` -> ``"blocks.3.attn.W_Q"``."""
    return f"blocks.{layer}.{component}.{name}"


#: The TransformerLens module that defines ``HookPoint`` (both majors), for :mod:`circuits.tl`.
HOOK_POINT_MODULE = "transformer_lens.hook_points"

UNEMBED_W = "unembed.W_U"
UNEMBED_B = "unembed.b_U"
