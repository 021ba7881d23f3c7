"""The named residual layout and the token layout."""

import numpy as np
import pytest

from circuits.layout import ResidualLayout, SequenceLayout


@pytest.mark.parametrize("d,k", [(1, 1), (2, 3), (64, 16)])
def test_subspaces_tile_the_residual(d, k):
    layout = ResidualLayout(d, k)
    covered = np.zeros(layout.d_model, dtype=int)
    for name in layout.names:
        covered[layout[name]] += 1
    assert (covered == 1).all()
    assert layout.d_model == 3 * d + 3 * k + 5
    assert len(layout.labels) == layout.d_model
    assert len(set(layout.labels)) == layout.d_model


def test_index_and_labels_agree():
    layout = ResidualLayout(3, 4)
    for dim, label in enumerate(layout.labels):
        name, i = layout.subspace_of(dim)
        assert layout.index(name, i) == dim
        assert label == (name if layout.width(name) == 1 else f"{name}[{i}]")
    assert layout.labels[layout.index("C", 2)] == "C[2]"
    assert layout.labels[layout.index("N")] == "N"


def test_errors_name_the_problem():
    layout = ResidualLayout(2, 2)
    with pytest.raises(KeyError, match="no subspace 'Z'"):
        layout["Z"]
    with pytest.raises(IndexError):
        layout.index("X", 2)
    with pytest.raises(ValueError):
        ResidualLayout(0, 2)
    with pytest.raises(ValueError, match="declared twice"):
        ResidualLayout(2, 2, extra=(("X", 1),))


def test_extra_subspaces_come_after_the_standard_ones():
    plain, extended = ResidualLayout(2, 3), ResidualLayout(2, 3, extra=(("W", 1),))
    for name in plain.names:
        assert plain[name] == extended[name]
    assert extended["W"].start == plain.d_model


def test_sequence_layout():
    seq = SequenceLayout(n=4, k=2)
    assert seq.n_tokens == 7
    assert [seq.token_type(p) for p in range(7)] == ["bos"] + ["point"] * 4 + ["centroid"] * 2
    assert seq.point(0) == 1 and seq.centroid(1) == 6
    assert seq.token_labels == ["BOS", "x0", "x1", "x2", "x3", "c0", "c1"]
