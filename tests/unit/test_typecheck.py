"""The test run's type checker (tests/typecheck.py) is on where it says and off only in the kernels it names."""

import importlib
import sys

import numpy as np
import pytest
import torch
from jaxtyping import TypeCheckError
from test_architecture import modules
from typecheck import UNCHECKED, unchecked


@pytest.fixture
def hook_on(request):
    if not request.config.getoption("jaxtyping_packages", None):
        pytest.skip("this run has no --jaxtyping-packages (pyproject's addopts were replaced)")


def project_modules() -> list[str]:
    """Every module of circuits/ and analysis/ (test_architecture's list), imported: those whose optional extra is
    missing left out, and the command line's ``__main__``, which runs it."""
    names = []
    for name in modules():
        if name.endswith(".__main__"):
            continue
        try:
            importlib.import_module(name)
        except ImportError:  # an optional extra (Ray) that this environment does not have
            continue
        names.append(name)
    return names


def test_every_module_is_checked_but_the_named_kernels(hook_on):
    by_loader = {name: type(sys.modules[name].__spec__.loader).__name__ for name in project_modules()}
    checked = {name for name, loader in by_loader.items() if loader == "_JaxtypingLoader"}
    assert {name for name in by_loader if not unchecked(name)} == checked
    assert {name for name in UNCHECKED if name in by_loader} == set(UNCHECKED)  # each names a module that exists
    assert any(unchecked(name) for name in by_loader) and len(checked) > 100


def wrapped_by_the_checker(f) -> bool:
    """Whether ``f`` is jaxtyping's wrapper (which runs the checks, then the function) rather than the function."""
    return "jaxtyping" in getattr(getattr(f, "__code__", None), "co_filename", "")


def wrapped_by_beartype_alone(f) -> bool:
    """Whether ``f`` is beartype's own wrapper (the checks it writes for one function), not jaxtyping's."""
    return hasattr(f, "__wrapped__") and not wrapped_by_the_checker(f) and "<@beartype(" in f.__code__.co_filename


def test_a_checked_function_refuses_a_wrong_shape_and_an_unchecked_one_is_not_wrapped(hook_on):
    from circuits import reference
    from circuits.structured import plans

    X, C = np.zeros((4, 2)), np.zeros((3, 2))
    assert reference.sq_distances(X, C).shape == (4, 3)
    with pytest.raises(TypeCheckError, match="sq_distances"):
        reference.sq_distances(X, np.zeros((3, 5)))  # d differs: the shared dimension of the annotations
    assert wrapped_by_the_checker(reference.sq_distances) and wrapped_by_the_checker(reference.Reference.assign)
    kernels = [plans.per_token, plans.add_rows, plans.cached_plan, plans.RestrictedMap.apply, plans.MLPPlan.apply]
    assert not any(wrapped_by_the_checker(f) for f in kernels)
    assert plans.per_token(torch.nn.Identity(), "text") == "text"  # unchecked: a str goes through as a tensor


def test_a_function_without_array_hints_is_checked_by_beartype_alone(hook_on):
    """Where no hint names an array, jaxtyping's shape memo has nothing to relate: beartype's checks alone, the same
    checks (tests/typecheck.py, check_arrays_only_where_hinted), at a microsecond a call instead of about 90."""
    from circuits.layout import ResidualLayout
    from circuits.variants import check_variant

    assert wrapped_by_beartype_alone(check_variant) and wrapped_by_beartype_alone(ResidualLayout.width)
    assert check_variant("lloyd", 3) == "lloyd"
    with pytest.raises(Exception, match="check_variant"):
        check_variant("lloyd", "3")  # iterations: an int
    with pytest.raises(Exception, match="check_variant"):
        check_variant(b"lloyd", 3)  # spec: a str


def test_a_method_whose_hints_name_its_own_class_is_checked_by_beartype_alone(hook_on):
    """``Lin.scale(...) -> "Lin"`` cannot be resolved while ``Lin``'s body runs: the wrapper is chosen at the first
    call, and it is beartype's alone (no array hint), not jaxtyping's."""
    from fractions import Fraction

    from analysis.proof.algebra import Lin

    lin = Lin.of({"x": Fraction(1)})
    assert lin.scale(Fraction(2)).coeffs == {"x": Fraction(2)}
    [chosen] = Lin.scale.chosen
    assert wrapped_by_beartype_alone(chosen)
    with pytest.raises(Exception, match="scale"):
        lin.scale("2")


def test_a_function_defined_inside_another_is_left_to_its_enclosing_function(hook_on):
    """The hook would decorate a nested function on every run of the one around it (a new beartype wrapper compiled
    each time); it is left as it is, and the function around it is checked."""
    import jaxtyping

    from analysis.proof import algebra
    from typecheck import checked

    def enclosing():
        def inner(x: int) -> int:
            return x

        return inner

    inner = enclosing()
    assert jaxtyping.jaxtyped(typechecker=checked)(inner) is inner
    assert wrapped_by_the_checker(algebra.strictly_feasible) or wrapped_by_beartype_alone(algebra.strictly_feasible)
