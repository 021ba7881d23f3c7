"""The run-time type checker the test run applies to ``circuits`` and ``analysis`` (pyproject's
``--jaxtyping-packages``): beartype on every annotated function and dataclass, jaxtyping shapes included, except in
the kernels named in :data:`UNCHECKED` and in functions defined inside other functions (whose enclosing function is
checked). jaxtyping's own wrapper, which relates the sizes of several array arguments through a shape memo, goes
only where a hint names an array (:func:`check_arrays_only_where_hinted`).

Two readings of the annotations, because that is what they mean in numerical code: PEP 484's numeric tower (an
``int`` is a valid ``float``), and a numpy integer (``np.int64`` from an argmax) is a valid ``int``.
"""

import functools
import importlib.abc
import importlib.machinery
import inspect
import sys
import typing

import jaxtyping
import numpy as np
from beartype import BeartypeConf, FrozenDict, beartype

checked = beartype(conf=BeartypeConf(is_pep484_tower=True, hint_overrides=FrozenDict({int: int | np.integer})))

#: Modules (and the packages' modules) the test run imports unchecked: the kernels of the fast paths, called per
#: block and per group of tokens, 10^4 to 10^5 times in one test. A checked call costs about 90 us there (binding
#: the arguments, jaxtyping's shape memo, an isinstance per array): tests/unit/test_learned_circuit.py took 88 s
#: checked throughout, 27 s with these two unchecked and 17 s with no checker (pytest's times, one process, quiet
#: machine). Each is tested bit for bit against the textbook form it speeds up (tests/unit/test_structured.py,
#: tests/unit/test_verify_fast.py), and the checked functions that call them check what goes in and comes out.
#: docs/performance.md, "The test suite".
UNCHECKED = ("circuits.structured", "analysis.verify.fast")


def unchecked(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in UNCHECKED)


class _FromSource(importlib.machinery.SourceFileLoader):
    """A module compiled from its source, without the bytecode cache: jaxtyping's loader points the cache at its
    own file name while a checked module runs, so a plain import made from one (``circuits.build`` imports
    ``circuits.structured``) would read or write the checked module's cache file."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


class _ImportUnchecked(importlib.abc.MetaPathFinder):
    """Finds the modules of UNCHECKED as a plain import would, ahead of jaxtyping's finder (which then never sees
    them); every other module goes on to the finders behind it."""

    def find_spec(self, fullname, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target) if unchecked(fullname) else None
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _FromSource(spec.loader.name, spec.loader.path)
        return spec


def leave_kernels_unchecked() -> None:
    """Import UNCHECKED's modules unchecked from now on: called before anything imports them (tests/conftest.py)."""
    early = sorted(name for name in sys.modules if unchecked(name))
    if early:
        raise RuntimeError(f"already imported, and checked if the hook was on: {early}")
    if not any(isinstance(finder, _ImportUnchecked) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ImportUnchecked())


def _holds_an_array_hint(hint) -> bool:
    """Whether a hint names a jaxtyping array type anywhere (``Float[Tensor, "n d"]``, ``list[Int[...]] | None``)."""
    if isinstance(hint, type) and issubclass(hint, jaxtyping.AbstractArray):
        return True
    return any(_holds_an_array_hint(arg) for arg in typing.get_args(hint))


def _lean(jaxtyped):
    """jaxtyping's ``jaxtyped`` where a function has an array hint (its shape memo relates the sizes of several
    arguments), and the type checker alone where none has: the same checks, without binding the arguments twice
    and a shape memo per call, which cost about 90 us a call."""

    def choose(fn, options: dict, typechecker):
        """The wrapper ``fn`` gets, or None while a hint names what is not defined yet."""
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception:  # noqa: BLE001 -- any failure to resolve means "not yet"
            return None
        return jaxtyped(fn, **options) if any(_holds_an_array_hint(h) for h in hints.values()) else typechecker(fn)

    def decorate(fn, options: dict):
        typechecker = options.get("typechecker")
        if not callable(typechecker) or inspect.isclass(fn):
            return jaxtyped(fn, **options)
        if "<locals>" in getattr(fn, "__qualname__", ""):
            # Defined inside another function: the hook decorates it each time the enclosing function runs, and
            # beartype writes and compiles a new wrapper each time (about 0.5 ms). test_prove_mutations.py
            # decorated 18,700 (the prover's union-find and cost helpers), most of its time. The enclosing
            # function, decorated once, is checked: what goes in and what comes out.
            return fn
        chosen = choose(fn, options, typechecker)
        if chosen is not None:
            return chosen
        if not inspect.isfunction(fn):
            return jaxtyped(fn, **options)
        # A method whose hints name its own class (``-> "Lin"``), not defined while the class body runs: chosen at
        # its first call, when it is. Deciding at once gave every such method jaxtyping's wrapper: 73,000 of the
        # 100,000 calls through it in test_prove_mutations.py's longest test were the prover's exact arithmetic.
        later: list = []

        @functools.wraps(fn)
        def first_call_decides(*args, **kwargs):
            if not later:
                later.append(choose(fn, options, typechecker) or jaxtyped(fn, **options))
            return later[0](*args, **kwargs)

        first_call_decides.chosen = later
        return first_call_decides

    def lean(*args, **options):
        if not args:  # the hook's form: @jaxtyped(typechecker=...)
            return lambda fn: decorate(fn, options)
        if isinstance(args[0], str):  # jaxtyped("context")
            return jaxtyped(*args, **options)
        return decorate(args[0], options)

    lean.lean = True
    return lean


def check_arrays_only_where_hinted() -> None:
    """Give the import hook's decorator (``@jaxtyping.jaxtyped(typechecker=...)``, looked up on the module as each
    checked module runs) the lean form: called before anything checked is imported (tests/conftest.py).

    tests/unit/test_prove_mutations.py's longest test made 385,985 checked calls, most of them the prover's small
    exact-arithmetic helpers: 43.5 s under jaxtyping's wrapper throughout, about 15 s with it (docs/performance.md,
    "The suite's commands from a warm process")."""
    if not getattr(jaxtyping.jaxtyped, "lean", False):
        jaxtyping.jaxtyped = _lean(jaxtyping.jaxtyped)
