"""Every TransformerLens import of the project, in one place, for both supported majors (3.x and 4.x).

TransformerLens 4.0 removed ``HookedTransformer``, ``HookedTransformerConfig`` and ``utils`` (now ``utilities``);
``HookedRootModule``, ``HookPoint``, ``ActivationCache``, ``FactoredMatrix`` and ``patching`` stayed. Code that
needs one of them imports it from here (``from circuits.tl import ActivationCache``), so the next major touches this
module only. Hook-name strings live next door, in circuits/hook_names.py.

Importing this module does not import TransformerLens (it takes seconds, and the structured path needs none of it):
each name is imported on first access. :data:`TL_VERSION` and :data:`TL_MAJOR` come from the installed package's
metadata, also without importing it.
"""

from __future__ import annotations

import gc
import importlib
from importlib import metadata

from circuits.hook_names import HOOK_POINT_MODULE

#: The installed TransformerLens version string, e.g. ``"3.9.0"`` or ``"4.3.0"``.
TL_VERSION: str = metadata.version("transformer-lens")
#: Its major version: 3 builds the circuit as a ``HookedTransformer``, 4 as
#: :class:`circuits.hooked.model.HookedCircuit`.
TL_MAJOR: int = int(TL_VERSION.split(".", 1)[0])

#: Names this module hands out, and where TransformerLens keeps each (module, attribute); ``None``: the module.
_WHERE: dict[str, tuple[str, str | None]] = {
    "HookedRootModule": ("transformer_lens", "HookedRootModule"),
    "HookPoint": (HOOK_POINT_MODULE, "HookPoint"),
    "ActivationCache": ("transformer_lens", "ActivationCache"),
    "FactoredMatrix": ("transformer_lens", "FactoredMatrix"),
    "patching": ("transformer_lens.patching", None),
    # 3.x has both spellings; 4.x only `utilities`.
    "utilities": ("transformer_lens.utilities", None),
    # 3.x only: the model class and its config.
    "HookedTransformer": ("transformer_lens", "HookedTransformer"),
    "HookedTransformerConfig": ("transformer_lens", "HookedTransformerConfig"),
}
_ONLY_3X = ("HookedTransformer", "HookedTransformerConfig")

__all__ = ["TL_MAJOR", "TL_VERSION", *_WHERE]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _ONLY_3X and TL_MAJOR >= 4:
        raise ImportError(f"TransformerLens {TL_VERSION} has no {name} (removed in 4.0); the circuit is a"
                          " circuits.hooked.model.HookedCircuit there (docs/python.md)", name=name)
    module_name, attribute = _WHERE[name]
    module = _import_uncollected(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # later accesses skip this function
    return value


def _import_uncollected(module_name: str):
    """``importlib.import_module(module_name)`` with the cyclic garbage collector paused, then as it was.

    Importing TransformerLens (and the transformers package it imports) makes several hundred thousand objects, none
    of them garbage, and set off 1,130 collections, each walking every object made so far: paused, the import took
    3.7-3.9 s of CPU instead of 4.6-4.7 s (``python -c "import gc; gc.disable(); import torch, transformer_lens"``
    against the same without ``gc.disable()``). Later collections still walk its objects, until something freezes
    them: the command line does, for its report (:func:`analysis.cli.main.settled_for_the_report`; docs/performance.md,
    "The eighth round"). Only the collector's timing changes: what it would have found it finds at its next pass.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module_name)
    finally:
        if was_enabled:
            gc.enable()
