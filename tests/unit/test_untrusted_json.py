"""circuits.untrusted_json (issue 33): within the limits it reads what json reads; beyond them it names the field.

Documents are drawn by Hypothesis, with keys and strings full of brackets, quotes and backslashes so that the
bracket scan that measures nesting must skip strings exactly as the parser does; a refused value is put at a drawn
place and the error must name that place.
"""

import json

import pytest
from hypothesis import given, settings, strategies as st

from circuits.untrusted_json import MAX_DEPTH, UntrustedJSONError, field_name, loads

TEXT = st.text(alphabet='ab"\\[]{}:,é ', max_size=6)
SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TEXT
           | st.floats(allow_nan=False, allow_infinity=False))
DOCUMENTS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(TEXT, inner, max_size=3), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(DOCUMENTS)
def test_within_the_limits_it_reads_what_json_reads(doc):
    text = json.dumps(doc)
    assert loads(text, "x") == json.loads(text)


def places(doc, path=()):
    """Every path at which a value can be replaced: each member of each container."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield path + (key,)
        yield from places(value, path + (key,))


REFUSED = {"1" + "0" * 101: "out of range", "-" + "9" * 5000: "out of range", "1e400": "out of range",
           "-1e309": "out of range", "0." + "3" * 200: "out of range", "NaN": "not a finite number",
           "Infinity": "not a finite number", "-Infinity": "not a finite number",
           "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1): "nested too deeply"}
SENTINEL = "\u0000refused\u0000"


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(TEXT, DOCUMENTS, min_size=1, max_size=3), st.data())
def test_a_refused_value_is_named_where_it_is(doc, data):
    path = data.draw(st.sampled_from(list(places(doc))), label="place")
    literal = data.draw(st.sampled_from(sorted(REFUSED)), label="literal")
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = SENTINEL
    text = json.dumps(doc).replace(json.dumps(SENTINEL), literal)
    with pytest.raises(UntrustedJSONError) as caught:
        loads(text, "where.json")
    err = caught.value
    assert REFUSED[literal] in err.detail and str(err).startswith("where.json: ")
    if literal.startswith("["):
        # The container past the limit is reached through ``path`` and then the first member of each list.
        full = list(path) + [0] * (MAX_DEPTH - len(path))
        assert err.field == field_name(full[:6]) + ("..." if len(full) > 6 else "")
    else:
        assert err.field == field_name(list(path))


def test_python_s_own_failures_are_refused_too():
    """What json.loads does with these (for the record): a crash, a silent inf, a NaN, an integer of 401 digits."""
    with pytest.raises(RecursionError):
        json.loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="4300"):
        json.loads("1" * 5000)
    assert json.loads("1e400") == float("inf")
    for text in ("[" * 100_000 + "]" * 100_000, "1" * 5000, "1e400", "NaN", "1" + "0" * 400):
        with pytest.raises(UntrustedJSONError):
            loads(text, "x")


def test_nonfinite_constants_are_read_when_asked():
    value = loads('{"loss": NaN, "ratio": Infinity}', "log", nonfinite=True)
    assert value["loss"] != value["loss"] and value["ratio"] == float("inf")
    with pytest.raises(UntrustedJSONError, match="ratio: 1e400 is out of range"):
        loads('{"ratio": 1e400}', "log", nonfinite=True)  # a literal beyond float64 is never a number
    with pytest.raises(UntrustedJSONError, match="not valid JSON"):
        loads('{"a": [1,', "x")
