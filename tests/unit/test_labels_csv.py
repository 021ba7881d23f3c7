"""labels.csv's writer (:func:`analysis.cli.cluster.labels_csv`): one join instead of a row at a time, so it is
held to the row-by-row writer (:func:`~analysis.cli.cluster.csv_text`) it replaced, byte for byte, and to what a
CSV reader reads back."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from analysis.cli.cluster import csv_text, labels_csv

INTEGER_ARRAYS = hnp.arrays(st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint32]),
                            hnp.array_shapes(max_dims=1, min_side=0, max_side=300))


@settings(max_examples=200, deadline=None)
@given(INTEGER_ARRAYS)
def test_labels_csv_is_the_row_by_row_writer_and_reads_back(labels):
    text = labels_csv(labels)
    assert text == csv_text(([int(v)] for v in labels), ["label"])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["label"] and [int(r[0]) for r in rows[1:]] == [int(v) for v in labels]


@given(st.lists(st.integers(-1, 10**6), max_size=50))
def test_a_json_documents_labels_are_written_alike(labels):
    """``write_model_files`` passes the document's list of Python integers (a trimmed run's outliers are -1)."""
    assert labels_csv(labels) == csv_text(([v] for v in labels), ["label"])


NOT_INT64 = {"float array": lambda: np.array([0.0, 1.5]), "a float in a list": lambda: [0, 1.0],
             "beyond int64": lambda: np.array([2**63], dtype=np.uint64)}


@pytest.mark.parametrize("name", NOT_INT64)
def test_a_label_that_is_not_an_int64_is_refused_not_truncated(name):
    with pytest.raises(TypeError):
        labels_csv(NOT_INT64[name]())
