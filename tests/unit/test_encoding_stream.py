"""An encoding is a plain record (issue 41): it holds the stream :func:`~circuits.encoding.encode` made, or none,
and then its reader makes one from the fields (:meth:`~circuits.encoding.EncodedBatch.stream`), bit for bit; a run
at scale holds the stream once, in its forward (``circuits.structured.OwnedStreams``).

The tests: the stream made from the fields is the stored one (bits, dtype, shape) for float64 and float32 and a
batch of two, feature-major too (each problem's transpose contiguous); an encoding holding none pickles and is
read the same on the other side; a capture of it runs on its own stream, which nothing else holds during the
forward; and its verification equals the one of an encoding that holds its stream.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from analysis.capture import capture
from analysis.pipeline import lloyd_scaling
from analysis.verify import reads, verify_problem
from circuits import encoding, structured
from circuits.build import build_lloyd_circuit
from circuits.encoding import encode
from circuits.layout import ResidualLayout
from circuits.structured import OwnedStreams, feature_major_copies, structured_forward


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().numpy().tobytes()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("batch", [1, 2])
def test_a_stream_made_from_the_fields_is_the_stored_one(dtype, batch):
    rng = np.random.default_rng(batch)
    # Values that do not survive float32 rounding, and a huge offset: the stream must repeat the scaling.
    X, C0 = rng.normal(size=(batch, 40, 3)) * 1e3 + 7e5, rng.normal(size=(batch, 4, 3))
    held = encode(ResidualLayout(3, 4), X, C0, dtype=dtype)
    bare = encode(ResidualLayout(3, 4), X, C0, dtype=dtype, hold_stream=False)
    assert bare.resid is None and bare.dtype == dtype and bare.device == held.device
    for feature_major in (False, True):
        made = bare.stream(feature_major=feature_major)
        assert made.dtype == dtype and made.shape == held.resid.shape and _bits(made) == _bits(held.resid)
        if feature_major and dtype == torch.float64:
            assert all(r.T.is_contiguous() for r in made)  # what the forward runs on, without a copy
    assert held.stream() is held.resid  # a held stream is read, not made again
    assert _bits(pickle.loads(pickle.dumps(bare)).stream()) == _bits(held.resid)


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


@pytest.mark.parametrize("hold", [True, False])
def test_a_capture_of_an_encoding_without_a_stream_holds_it_once(hold, monkeypatch):
    """The forward runs on the stream the capture made, in its memory (no copy: the stream is held once, and the
    forward's updates in place are to it); the verification is that of an encoding that holds its stream."""
    rng = np.random.default_rng(5)
    X, C0 = rng.normal(size=(60, 2)), rng.normal(size=(3, 2))
    circuit = build_lloyd_circuit(d=2, k=3, iterations=2)
    enc = encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0), hold_stream=hold)
    made, given = [], []
    real_stream, real_forward = encoding.EncodedBatch.stream, structured.structured_forward
    monkeypatch.setattr(encoding.EncodedBatch, "stream",
                        lambda self, **kw: made.append(out := real_stream(self, **kw)) or out)
    monkeypatch.setattr(structured, "structured_forward",
                        lambda model, resid, *a, **kw: given.append(resid) or real_forward(model, resid, *a, **kw))
    cap = capture(circuit, enc, path="structured", keep=reads(circuit.spec))
    assert len(made) == (0 if hold else 1)
    if not hold:
        assert isinstance(given[0], OwnedStreams)
        owned = given[0]._streams or []  # taken by the forward: none left with the holder
        assert owned == []
        memory = made[0].untyped_storage().data_ptr()
        assert made[0].untyped_storage().nbytes() == made[0].numel() * made[0].element_size()
        assert all(r.T.untyped_storage().data_ptr() == memory for r in made[0])
    report = verify_problem(cap, 0)
    full = verify_problem(capture(circuit, encode(circuit.layout, X, C0, scaling=lloyd_scaling(X, C0)),
                                  path="structured"), 0)
    assert report.verified and report.to_dict() == full.to_dict()
