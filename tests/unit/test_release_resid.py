"""A lean structured capture holds the residual stream once (issue 31): the encoding's copy is let go once the
forward holds its own feature-major copy (``EncodedBatch.release_resid``, ``circuits.structured.OwnedStreams``),
and is made again, bit for bit, if anything reads it later.

The tests: a released encoding read again gives the very tensor (bits, dtype, strides) for float64 and float32 and
a batch of two; an encoding changed in place, a ``replace`` copy or a pickled copy is never released (it could not
be made again); during a lean capture's forward no reference to the encoding's tensor is left (it is freed), while
a full capture keeps it; and the lean capture's verification (which reads the released stream again for the
sharpness bound's inputs) equals the full one's.
"""

from __future__ import annotations

import dataclasses
import gc
import pickle
import weakref

import numpy as np
import pytest
import torch

from analysis.capture import capture
from analysis.pipeline import lloyd_scaling
from analysis.verify import verify_problem
from circuits.build import build_lloyd_circuit
from circuits.encoding import encode
from circuits.layout import ResidualLayout
from circuits.structured import OwnedStreams, feature_major_copies, structured_forward


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().numpy().tobytes()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("batch", [1, 2])
def test_released_resid_is_made_again_bit_for_bit(dtype, batch):
    rng = np.random.default_rng(batch)
    # Values that do not survive float32 rounding, and a huge offset: the re-encoding must repeat the scaling.
    X, C0 = rng.normal(size=(batch, 40, 3)) * 1e3 + 7e5, rng.normal(size=(batch, 4, 3))
    enc = encode(ResidualLayout(3, 4), X, C0, dtype=dtype)
    before = enc.resid.clone()
    strides = enc.resid.stride()
    held = weakref.ref(enc.resid)
    assert enc.release_resid()
    gc.collect()
    assert held() is None, "the released tensor is still referenced by the encoding"
    again = enc.resid
    assert again.dtype == dtype and again.stride() == strides and again.shape == before.shape
    assert _bits(again) == _bits(before)
    assert enc.release_resid(), "a made-again stream is as releasable as the first"


def test_changed_or_copied_encodings_are_not_released():
    rng = np.random.default_rng(0)
    lay = ResidualLayout(2, 3)
    enc = encode(lay, rng.normal(size=(30, 2)), rng.normal(size=(3, 2)))
    enc.resid[0, 1, 0] += 1.0  # in place: the stream is no longer a function of X and C0
    assert not enc.release_resid() and "resid" in enc.__dict__
    fresh = encode(lay, rng.normal(size=(30, 2)), rng.normal(size=(3, 2)))
    assert not dataclasses.replace(fresh, resid=fresh.resid.clone()).release_resid()
    assert not pickle.loads(pickle.dumps(fresh)).release_resid()
    # A released encoding pickles and is read again on the other side.
    ref = fresh.resid.clone()
    assert fresh.release_resid()
    assert _bits(pickle.loads(pickle.dumps(fresh)).resid) == _bits(ref)


def test_owned_streams_run_as_the_copied_input():
    rng = np.random.default_rng(3)
    X, C0 = rng.normal(size=(50, 2)), rng.normal(size=(3, 2))
    circuit = build_lloyd_circuit(d=2, k=3, iterations=2)
    enc = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0))
    copied, records = structured_forward(circuit.runnable, enc.resid, circuit.score_hooks)
    owned = OwnedStreams(feature_major_copies(enc.resid))
    logits, owned_records = structured_forward(circuit.runnable, owned, circuit.score_hooks)
    assert owned.take() == [], "the holder keeps the streams after the forward took them"
    assert _bits(logits) == _bits(copied)
    for a, b in zip(records, owned_records, strict=True):
        assert _bits(a.resid_post) == _bits(b.resid_post) and _bits(a.resid_pre) == _bits(b.resid_pre)


@pytest.mark.parametrize("lean", [True, False])
def test_lean_capture_frees_the_encodings_stream_during_the_forward(lean):
    rng = np.random.default_rng(5)
    X, C0 = rng.normal(size=(60, 2)), rng.normal(size=(3, 2))
    circuit = build_lloyd_circuit(d=2, k=3, iterations=2)
    enc = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0))
    ref = enc.resid.clone()
    held = weakref.ref(enc.resid)
    alive = []

    def on_layer(layer: int) -> None:
        gc.collect()
        alive.append(held() is not None)

    cap = capture(circuit, enc, path="structured", lean=lean, on_layer=on_layer)
    assert alive == [not lean] * circuit.n_layers
    report = verify_problem(cap, 0)  # reads the stream again (the sharpness bound's inputs) when it was released
    assert _bits(enc.resid) == _bits(ref)
    full = verify_problem(capture(circuit, encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0)),
                                  path="structured"), 0)
    assert report.verified and report.to_dict() == full.to_dict()
