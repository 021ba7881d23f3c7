"""The construction in numpy, before any TransformerLens: each block does what its docstring says.

These tests evaluate the weight blocks directly on hand-made residual vectors, independently of the model.
"""

import numpy as np
import pytest

from circuits.blocks import assign_block, update_block
from circuits.layout import ResidualLayout
from circuits.sharpness import Sharpness

SHARP = Sharpness()


def token(layout, kind, **values):
    r = np.zeros(layout.d_model)
    r[layout["ONE"]] = 1
    r[layout[{"point": "IS_POINT", "centroid": "IS_CENTROID", "bos": "IS_BOS"}[kind]]] = 1
    for name, v in values.items():
        r[layout[name]] = v
    return r


def gated_mlp(mlp, r):
    return (np.maximum(r @ mlp.W_gate, 0) * (r @ mlp.W_in)) @ mlp.W_out


@pytest.fixture
def layout():
    return ResidualLayout(3, 4)


def test_assign_score_is_negative_squared_distance_up_to_a_query_constant(layout):
    rng = np.random.default_rng(0)
    head = assign_block(layout, SHARP).head
    in_ball = lambda v: v / max(1.0, np.linalg.norm(v))  # the encoder puts every token in the unit ball  # noqa: E731
    x = in_ball(rng.normal(size=3))
    point = token(layout, "point", X=x)
    scores = []
    for j in range(4):
        c = in_ball(rng.normal(size=3))
        cent = token(layout, "centroid", C=c, N=c @ c, ID=np.eye(4)[j])
        score = point @ head.W_QK @ cent
        expected = SHARP.beta * (x @ x - ((x - c) ** 2).sum() - SHARP.tie_break * j)
        scores.append(score)
        assert score == pytest.approx(expected, rel=1e-12, abs=SHARP.beta * 1e-12)
    # Point and BOS keys are masked below every centroid, by at least beta * (mask - 4).
    for key in (token(layout, "point", X=in_ball(rng.normal(size=3))), token(layout, "bos")):
        assert point @ head.W_QK @ key < min(scores) - SHARP.beta * (SHARP.mask - 4) * 0.99


def test_assign_non_point_queries_attend_to_the_sink(layout):
    head = assign_block(layout, SHARP).head
    bos = token(layout, "bos")
    others = [token(layout, "point", X=[1, 2, 3]), token(layout, "centroid", C=[1, 0, 0], N=1, ID=np.eye(4)[0])]
    for query in [token(layout, "centroid", ID=np.eye(4)[2]), bos]:
        sink = query @ head.W_QK @ bos
        assert all(sink - query @ head.W_QK @ other >= SHARP.beta * SHARP.mask for other in others)


def test_assign_value_writes_the_identity_into_the_staging_slot(layout):
    head = assign_block(layout, SHARP).head
    out = token(layout, "centroid", ID=np.eye(4)[2], C=[5, 5, 5]) @ head.W_OV
    expected = np.zeros(layout.d_model)
    expected[layout.index("Y_stage", 2)] = 1
    np.testing.assert_array_equal(out, expected)


def test_assign_mlp_commits_and_erases(layout):
    mlp = assign_block(layout, SHARP).mlp
    r = token(layout, "point", Y=[0, 1, 0, 0], Y_stage=[0, 0, 0, 1])
    new = r + gated_mlp(mlp, r)
    np.testing.assert_array_equal(new[layout["Y"]], [0, 0, 0, 1])
    np.testing.assert_array_equal(new[layout["Y_stage"]], 0)
    # On a centroid token the slot is emptied but nothing is committed.
    c = token(layout, "centroid", Y_stage=[0.25, 0, 0, 0])
    new = c + gated_mlp(mlp, c)
    np.testing.assert_array_equal(new[layout["Y"]], 0)
    np.testing.assert_array_equal(new[layout["Y_stage"]], 0)


def test_update_scores_members_self_and_others(layout):
    head = update_block(layout, SHARP).head
    b = SHARP.beta_update
    q = token(layout, "centroid", ID=np.eye(4)[1])
    member = token(layout, "point", Y=np.eye(4)[1])
    other = token(layout, "point", Y=np.eye(4)[3])
    assert q @ head.W_QK @ member == b
    assert q @ head.W_QK @ other == 0
    assert q @ head.W_QK @ q == b / 2
    assert q @ head.W_QK @ token(layout, "centroid", ID=np.eye(4)[2]) == 0
    assert q @ head.W_QK @ token(layout, "bos") == 0
    p = token(layout, "point", Y=np.eye(4)[1])
    assert p @ head.W_QK @ token(layout, "bos") == b and p @ head.W_QK @ member == 0


def test_update_value_reads_coordinates(layout):
    head = update_block(layout, SHARP).head
    out_point = token(layout, "point", X=[1, 2, 3]) @ head.W_OV
    out_cent = token(layout, "centroid", C=[4, 5, 6]) @ head.W_OV
    np.testing.assert_array_equal(out_point[layout["C_stage"]], [1, 2, 3])
    np.testing.assert_array_equal(out_cent[layout["C_stage"]], [4, 5, 6])
    assert np.count_nonzero(out_point) == 3 and np.count_nonzero(out_cent) == 3


@pytest.mark.parametrize("seed", range(5))
def test_update_mlp_commits_clears_and_squares(layout, seed):
    rng = np.random.default_rng(seed)
    mlp = update_block(layout, SHARP).mlp
    old, new_c = rng.normal(size=3), rng.normal(size=3)
    r = token(layout, "centroid", C=old, C_stage=new_c, N=old @ old, ID=np.eye(4)[0])
    out = r + gated_mlp(mlp, r)
    np.testing.assert_allclose(out[layout["C"]], new_c, atol=1e-15)
    np.testing.assert_array_equal(out[layout["C_stage"]], 0)
    assert out[layout.index("N")] == pytest.approx(new_c @ new_c, abs=1e-15)
    # Everything outside C, C_stage and N is untouched.
    untouched = ~layout.mask(["C", "C_stage", "N"])
    np.testing.assert_array_equal(out[untouched], r[untouched])


def test_padding_a_head_or_an_mlp_adds_zero_units_and_keeps_the_rest():
    """Sublayer.padded: zero columns on the input matrices, zero rows on the output matrix, nothing else moved."""
    from circuits.weights import HeadWeights, MLPWeights

    rng = np.random.default_rng(0)
    head = HeadWeights(*(rng.normal(size=(5, 2)) for _ in range(3)), rng.normal(size=(2, 5)))
    wide = head.padded(4)
    assert (head.d_head, wide.d_head) == (2, 4) and isinstance(wide, HeadWeights)
    for old, new in ((head.W_Q, wide.W_Q), (head.W_K, wide.W_K), (head.W_V, wide.W_V)):
        assert new.shape == (5, 4) and (new[:, :2] == old).all() and (new[:, 2:] == 0).all()
    assert wide.W_O.shape == (4, 5) and (wide.W_O[:2] == head.W_O).all() and (wide.W_O[2:] == 0).all()
    np.testing.assert_allclose(wide.W_QK, head.W_QK, rtol=1e-15, atol=0)
    mlp = MLPWeights(rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.normal(size=(3, 5)))
    r = rng.normal(size=(7, 5))
    assert (mlp.d_mlp, mlp.padded(6).d_mlp, mlp.padded(3).d_mlp) == (3, 6, 3)
    np.testing.assert_allclose(gated_mlp(mlp.padded(6), r), gated_mlp(mlp, r), rtol=1e-15, atol=1e-15)
    with pytest.raises(ValueError, match="cannot pad HeadWeights of width 2 down to 1"):
        head.padded(1)
