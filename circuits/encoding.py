"""Problems in, residual streams in; residual streams out, answers out — always in the user's units.

The encoder centres each problem on the mean of its points (Lloyd's pipeline: the median, see
:func:`fit_unit_scaling`) and divides by the largest distance of a point (or
initial centroid) from that mean, so all tokens live in the unit ball whatever the user's units (offsets of 1e8,
scales of 1e-8 included) and the sharpness knobs of :mod:`circuits.sharpness` mean the same thing for every
problem. The decoder undoes this on the way out.

Token order is given by :class:`~circuits.layout.SequenceLayout`: ``[BOS, points..., centroids...]``. Initial
centroids are written into ``C_stage`` (``C`` starts empty), so the first block, an ordinary update block,
commits them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float, Int

from circuits.layout import ResidualLayout, SequenceLayout
from circuits.onehot import OneHotStack

#: A point counts as assigned when its largest assignment bit exceeds this.
ASSIGNED_THRESHOLD = 0.5


def as_batch(a: np.ndarray, name: str) -> Float[np.ndarray, "batch m d"]:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise ValueError(f"{name} must have shape (m, d) or (batch, m, d), got {a.shape}")
    return a


@dataclass(frozen=True)
class UnitScaling:
    """``unit = (user - offset) / scale`` per problem of a batch."""

    offset: Float[np.ndarray, "batch d"]
    scale: Float[np.ndarray, " batch"]

    def to_unit(self, x: Float[np.ndarray, "*batch m d"]) -> Float[np.ndarray, "batch m d"]:
        return (as_batch(x, "x") - self.offset[:, None, :]) / self.scale[:, None, None]

    def from_unit(self, u: Float[np.ndarray, "*batch m d"]) -> Float[np.ndarray, "batch m d"]:
        return as_batch(u, "u") * self.scale[:, None, None] + self.offset[:, None, :]

    def sq_norm_from_unit(self, unit_sq_norm: Float[np.ndarray, "batch k"],
                          unit_points: Float[np.ndarray, "batch k d"]) -> Float[np.ndarray, "batch k"]:
        """|s u + mu|^2 from a stored |u|^2 (the ``N`` slot) and u itself."""
        square, twice, offset_sq_norm = self._norm_terms
        # np.einsum directly: the call einops' ``einsum(..., "batch centroid dim, batch dim -> batch centroid")`` makes.
        cross = np.einsum("bcd,bd->bc", unit_points, self.offset)
        return square * unit_sq_norm + twice * cross + offset_sq_norm

    @functools.cached_property
    def _norm_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``s**2``, ``2 * s`` and ``|mu|^2`` of :meth:`sq_norm_from_unit`, computed once (the same expressions, so
        the same bits): every decoded layer reads them."""
        s, mu = self.scale[:, None], self.offset
        return s**2, 2 * s, np.sum(mu**2, axis=-1)[:, None]

    def to_dict(self) -> dict[str, list]:
        return {"offset": self.offset.tolist(), "scale": self.scale.tolist()}


def fit_unit_scaling(X: Float[np.ndarray, "*batch n d"], C0: Float[np.ndarray, "*batch k d"] | None = None,
                     centre: str = "mean") -> UnitScaling:
    """Centre on the mean (or the coordinate-wise ``"median"``) of the points; scale so that every point and
    initial centroid is in the unit ball.

    The median keeps the bulk of the data near 0 when a few points are far away, which is what float64
    resolves best (:mod:`circuits.sharpness`); Lloyd's circuit is translation-invariant, so it may use either.
    """
    X = as_batch(X, "X")
    if centre not in ("mean", "median"):
        raise ValueError(f"centre must be 'mean' or 'median', got {centre!r}")
    offset = X.mean(axis=1) if centre == "mean" else np.median(X, axis=1)
    # Coinciding points: their rounded mean may sit an ulp away, and scaling that ulp up to the unit ball would
    # turn rounding noise into geometry. Centre on the point itself.
    same = (X == X[:, :1]).all(axis=(1, 2))
    offset[same] = X[same, 0]
    radius = np.linalg.norm(X - offset[:, None, :], axis=-1).max(axis=1)
    if C0 is not None:
        radius = np.maximum(radius, np.linalg.norm(as_batch(C0, "C0") - offset[:, None, :], axis=-1).max(axis=1))
    # All points equal (then k must be 1): any positive scale works; keep the user's units.
    scale = np.where(radius > 0, radius, 1.0)
    return UnitScaling(offset, scale)


@dataclass
class EncodedBatch:
    """A batch of equal-sized problems as residual-stream input, with what is needed to decode it.

    A plain record. ``resid`` is the stream :func:`encode` made, or ``None`` where it was asked not to hold one: a
    run at scale, whose structured forward makes its own feature-major stream from the fields (:meth:`stream`), so
    the stream is never held twice (0.47 GB at a million points). ``stream_dtype``/``stream_device``: the stream's,
    for an encoding that holds none."""

    resid: Float[torch.Tensor, "batch pos d_model"] | None
    layout: ResidualLayout
    sequence: SequenceLayout
    scaling: UnitScaling
    X: Float[np.ndarray, "batch n d"]
    C0: Float[np.ndarray, "batch k d"]
    stream_dtype: torch.dtype | None = None
    stream_device: torch.device | None = None

    def stream(self, feature_major: bool = False) -> Float[torch.Tensor, "batch pos d_model"]:
        """``resid``; or, where it holds none, the stream :func:`encode` makes of the fields (bit for bit), laid out
        feature-major if asked (each problem's ``[b].T`` contiguous: what a structured forward runs on)."""
        if self.resid is not None:
            return self.resid
        return make_stream(self.layout, self.sequence, self.scaling, self.X, self.C0, self.dtype, self.device,
                           feature_major)

    @property
    def dtype(self) -> torch.dtype:
        return self.resid.dtype if self.resid is not None else self.stream_dtype

    @property
    def device(self) -> torch.device:
        """Where the stream lives (or, held by no one, will be made)."""
        return self.resid.device if self.resid is not None else self.stream_device

    @property
    def batch(self) -> int:
        return self.X.shape[0]

    @property
    def n(self) -> int:
        return self.sequence.n

    @property
    def k(self) -> int:
        return self.sequence.k

    @property
    def d(self) -> int:
        return self.layout.d


def encode(layout: ResidualLayout, X: np.ndarray, C0: np.ndarray, dtype: torch.dtype = torch.float64,
           scaling: UnitScaling | None = None, device: str | torch.device = "cpu",
           hold_stream: bool = True) -> EncodedBatch:
    """Residual input for points ``X`` (n, d) or (batch, n, d) and initial centroids ``C0`` (k, d) or (batch, k, d).
    ``hold_stream=False``: the record holds no stream (:class:`EncodedBatch`), its reader makes one."""
    X, C0 = as_batch(X, "X"), as_batch(C0, "C0")
    if X.shape[0] != C0.shape[0]:
        raise ValueError(f"X has {X.shape[0]} problems but C0 has {C0.shape[0]}")
    if X.shape[2] != layout.d or C0.shape[2] != layout.d:
        raise ValueError(f"layout is for d={layout.d}, got points of d={X.shape[2]} and centroids of d={C0.shape[2]}")
    if C0.shape[1] != layout.k:
        raise ValueError(f"layout is for k={layout.k}, got {C0.shape[1]} initial centroids")
    seq = SequenceLayout(X.shape[1], layout.k)
    scaling = scaling if scaling is not None else fit_unit_scaling(X, C0)
    device = torch.device(device)
    resid = make_stream(layout, seq, scaling, X, C0, dtype, device) if hold_stream else None
    return EncodedBatch(resid, layout, seq, scaling, X, C0, dtype, device)


def make_stream(layout: ResidualLayout, seq: SequenceLayout, scaling: UnitScaling, X: np.ndarray, C0: np.ndarray,
                dtype: torch.dtype, device: torch.device, feature_major: bool = False
                ) -> Float[torch.Tensor, "batch pos d_model"]:
    """The residual stream of an encoding: flags, the points' and initial centroids' unit coordinates, identities;
    feature-major, the same ``(batch, pos, d_model)`` values as a view of ``(batch, d_model, pos)`` memory."""
    batch = X.shape[0]
    resid = (np.zeros((batch, layout.d_model, seq.n_tokens)).transpose(0, 2, 1) if feature_major
             else np.zeros((batch, seq.n_tokens, layout.d_model)))
    resid[:, :, layout["ONE"]] = 1.0
    resid[:, seq.bos, layout["IS_BOS"]] = 1.0
    resid[:, seq.points, layout["IS_POINT"]] = 1.0
    resid[:, seq.points, layout["X"]] = scaling.to_unit(X)
    resid[:, seq.centroids, layout["IS_CENTROID"]] = 1.0
    resid[:, seq.centroids, layout["ID"]] = np.eye(layout.k)
    resid[:, seq.centroids, layout["C_stage"]] = scaling.to_unit(C0)
    return torch.as_tensor(resid, dtype=dtype, device=device)


@dataclass
class DecodedState:
    """What a residual stream says, per problem of the batch, in the user's units."""

    labels: Int[np.ndarray, "batch n"]
    #: A lean capture (analysis.capture) holds an exactly one-hot ``Y`` (and ``Y_stage``) as its labels: a
    #: :class:`circuits.onehot.OneHotStack`, whose ``[b]`` is problem ``b``'s matrix.
    assignments: Float[np.ndarray, "batch n k"] | object
    staged_assignments: Float[np.ndarray, "batch n k"] | object
    centroids: Float[np.ndarray, "batch k d"]
    staged_centroids: Float[np.ndarray, "batch k d"]
    centroid_sq_norms: Float[np.ndarray, "batch k"]
    unit_centroids: Float[np.ndarray, "batch k d"]
    unit_sq_norms: Float[np.ndarray, "batch k"]

    def problem(self, b: int) -> "DecodedState":
        """The state of problem ``b`` alone (batch axis kept, of size 1)."""
        return DecodedState(**{name: value[b : b + 1] for name, value in self.__dict__.items()})


def read(layout: ResidualLayout, resid: torch.Tensor | np.ndarray, name: str,
         positions: slice | int | None = None) -> np.ndarray:
    """Subspace ``name`` of a residual ``(batch, pos, d_model)`` at ``positions``, as float64 numpy."""
    r = resid.detach().cpu().numpy() if isinstance(resid, torch.Tensor) else np.asarray(resid)
    r = r if positions is None else r[:, positions]
    return np.array(r[..., layout[name]], dtype=np.float64, copy=True)


def decode(layout: ResidualLayout, resid: Float[torch.Tensor, "batch pos d_model"], sequence: SequenceLayout,
           scaling: UnitScaling) -> DecodedState:
    """Assignments (hard and soft), centroids and |c|^2 held by a residual stream at any hook point.

    ``labels`` is the argmax of ``Y``, or -1 where no bit exceeds 1/2 (before the first assignment).
    ``staged_*`` read the staging slots, which hold a value only between a head and the MLP that commits it.
    """
    return StreamDecoder(layout, sequence, scaling)(resid)


class _Kept:
    """An array the decoder keeps, handed out as copies with its very strides, those of its length-1 axes included
    (``copy(order="K")`` renumbers those; the path a later product takes, and so the order of its sum, may depend on
    strides). The buffer size is worked out once."""

    __slots__ = ("array", "extent")

    def __init__(self, array: np.ndarray):
        self.array = array
        dense = all(s >= 0 for s in array.strides)  # ufunc results are; anything else is copied with copy(order="K")
        self.extent = (array.itemsize + sum((n - 1) * s for n, s in zip(array.shape, array.strides) if n > 1)
                       if dense and array.size else None)

    def copy(self) -> np.ndarray:
        a = self.array
        if self.extent is None:
            return a.copy(order="K")
        out = np.ndarray(a.shape, a.dtype, np.empty(self.extent, dtype=np.uint8), strides=a.strides)
        np.copyto(out, a)
        return out


class StreamDecoder:
    """:func:`decode` of the successive residual streams of one run (a block's output, then the next block's), bit for
    bit, reusing from the previous decoding what comes from slots whose bits did not change: an assign block
    rewrites ``Y`` and leaves ``C`` and ``N`` alone, an update block the reverse, and a derived array (labels,
    centroids in the user's units, their norms) is the same function of the same bits. Small arrays (of the
    centroids) are copied with a fresh decoding's very strides (:class:`_Kept`), so every state owns them. The
    point-sized ones (``assignments``, ``staged_assignments``, ``labels``: n x k per layer, gigabytes over a deep
    run at a million points) are *shared* with the previous state when their bits are the same, and a shared
    array is made read-only (in both states), so no state can change another's through it.

    ``one_hot=True`` (a lean capture): a ``Y`` or ``Y_stage`` that is exactly the one-hot rows of its labels
    (compared as ``np.array_equal(one_hot(labels), Y)``; all zeros included) is returned as those labels
    (:class:`~circuits.onehot.OneHotStack`), read a chunk of rows at a time and never copied whole; any other is
    decoded as without it."""

    def __init__(self, layout: ResidualLayout, sequence: SequenceLayout, scaling: UnitScaling, one_hot: bool = False):
        self.layout, self.sequence, self.scaling = layout, sequence, scaling
        self.one_hot = one_hot
        self._last: DecodedState | None = None  # the point-sized arrays of the last decoding
        self._centroids: tuple[bytes, _Kept, _Kept] | None = None  # C's and N's bits -> centroids, |c|^2
        self._staged: tuple[bytes, _Kept] | None = None  # C_stage's bits -> staged centroids

    def __call__(self, resid: Float[torch.Tensor, "batch pos d_model"]) -> DecodedState:
        layout, sequence, scaling = self.layout, self.sequence, self.scaling
        # One conversion to numpy (a view of the tensor's memory), then every read slices and copies from it. From
        # another device only the slots read are brought over, not the whole residual stream.
        if isinstance(resid, torch.Tensor):
            resid = resid.detach()
            if not resid.is_cpu:
                resid = torch.cat([resid[..., layout[name]] for name in _DECODED], dim=-1).cpu()
                layout = _packed(layout)
            resid = resid.numpy()
        else:
            resid = np.asarray(resid)
        # read()'s copies, each position range sliced once.
        points, centroids = resid[:, sequence.points], resid[:, sequence.centroids]
        last = self._last
        Y, labels = self._points_slot(points[..., layout["Y"]], None if last is None else last.assignments)
        Y_stage, _ = self._points_slot(points[..., layout["Y_stage"]],
                                       None if last is None else last.staged_assignments)
        unit_c = np.array(centroids[..., layout["C"]], dtype=np.float64, copy=True)
        unit_n = np.array(centroids[..., layout["N"]], dtype=np.float64, copy=True)[..., 0]
        unit_staged = np.array(centroids[..., layout["C_stage"]], dtype=np.float64, copy=True)
        if last is not None and Y is last.assignments:
            labels = _read_only(last.labels)
        elif labels is None:
            labels = _labels(Y)
        key = unit_c.tobytes() + unit_n.tobytes()
        if self._centroids is not None and self._centroids[0] == key:
            centroids, sq_norms = self._centroids[1].copy(), self._centroids[2].copy()
        else:
            centroids, sq_norms = scaling.from_unit(unit_c), scaling.sq_norm_from_unit(unit_n, unit_c)
            self._centroids = (key, _Kept(centroids), _Kept(sq_norms))
        key = unit_staged.tobytes()
        if self._staged is not None and self._staged[0] == key:
            staged = self._staged[1].copy()
        else:
            staged = scaling.from_unit(unit_staged)
            self._staged = (key, _Kept(staged))
        state = DecodedState(
            labels=labels,
            assignments=Y,
            staged_assignments=Y_stage,
            centroids=centroids,
            staged_centroids=staged,
            centroid_sq_norms=sq_norms,
            unit_centroids=unit_c,
            unit_sq_norms=unit_n,
        )
        self._last = state
        return state

    def _points_slot(self, slot: np.ndarray, previous) -> tuple[np.ndarray | OneHotStack, np.ndarray | None]:
        """A point-sized slot (``Y``, ``Y_stage``) as decoded, and its labels where they were read on the way:
        ``previous`` (the last decoding's, shared) where it holds the same, else (``one_hot``) the labels' stack where
        the slot is exactly their one-hot rows, else a float64 copy."""
        if self.one_hot:
            labels = _one_hot_labels(slot)
            if labels is not None:
                if isinstance(previous, OneHotStack) and np.array_equal(labels, previous.labels):
                    return previous, None
                return OneHotStack(labels, slot.shape[-1]), labels
        return _same_bits_or(slot, previous if isinstance(previous, np.ndarray) else None), None


def _labels(Y: Float[np.ndarray, "*batch n k"]) -> Int[np.ndarray, "*batch n"]:
    """The argmax of each row of ``Y``, or -1 where no bit exceeds :data:`ASSIGNED_THRESHOLD`."""
    return np.where(Y.max(axis=-1) > ASSIGNED_THRESHOLD, Y.argmax(axis=-1), -1)


def _one_hot_labels(slot: Float[np.ndarray, "batch n k"], rows: int = 1 << 14) -> Int[np.ndarray, "batch n"] | None:
    """The labels of ``Y`` (:func:`_labels` of its float64 copy) where ``Y`` is exactly their one-hot rows
    (``np.array_equal(one_hot(labels), Y)``, so a -0.0 passes as 0), else ``None``.

    That holds exactly where every entry is 0 or 1 and no row holds two 1s; a row's label is then where its 1 is
    (-1 for none), read with one small matrix product (count and position of the 1s, exact small integers) rather
    than ``max`` and ``argmax`` along rows of ``k``. ``rows`` rows at a time: the copies and comparisons stay in
    cache, and no ``n x k`` array is made."""
    batch, n, k = slot.shape
    labels = np.empty((batch, n), dtype=np.int64)
    count_and_place = np.stack([np.ones(k), np.arange(1, k + 1, dtype=np.float64)], axis=1)
    for b in range(batch):
        for start in range(0, n, rows):
            part = slot[b, start:start + rows]
            if not part.any():  # rows of zeros (-0.0 included): label -1 (Y_stage between blocks), without a copy
                labels[b, start:start + rows] = -1
                continue
            part = np.array(part, dtype=np.float64)
            ones = part == 1.0
            if not (ones | (part == 0.0)).all():
                return None
            found = ones.astype(np.float64) @ count_and_place
            if (found[:, 0] > 1).any():
                return None
            labels[b, start:start + rows] = found[:, 1] - 1
    return labels


def _read_only(a: np.ndarray) -> np.ndarray:
    """``a``, made read-only (it is about to be shared by two decoded states)."""
    a.flags.writeable = False
    return a


def _same_bits_or(slot: np.ndarray, previous: np.ndarray | None) -> np.ndarray:
    """``previous`` (made read-only) when it holds the very bits (NaNs and signed zeros included) of
    ``np.array(slot, dtype=np.float64, copy=True)`` laid out alike (the order of a later sum over it may depend on
    its strides), else that fresh copy.

    A float64 ``slot`` (a view into the residual stream) is compared with ``previous`` where it lies, a chunk of
    rows at a time, before any copy is made: a block that left the slot alone (an update block's ``Y``) then costs
    no ``n x k`` copy and no ``n x k`` comparison array (80 MB each at a million points, ten clusters)."""
    if previous is None or previous.dtype != np.float64 or previous.shape != slot.shape:
        return np.array(slot, dtype=np.float64, copy=True)
    # Laid out as a copy would be (np.empty_like: untouched memory, freed at once): compared where the slot lies.
    if slot.dtype == np.float64 and previous.strides == np.empty_like(slot).strides:
        return _read_only(previous) if _bits_equal(previous, slot) else np.array(slot, dtype=np.float64, copy=True)
    fresh = np.array(slot, dtype=np.float64, copy=True)
    return _read_only(previous) if previous.strides == fresh.strides and _bits_equal(previous, fresh) else fresh


def _bits_equal(a: np.ndarray, b: np.ndarray, rows: int = 1 << 15) -> bool:
    """Whether two float64 arrays of one shape hold the same bits, compared as 64-bit integers ``rows`` entries
    of the second-to-last axis at a time (the comparison array exists a chunk at a time)."""
    a, b = a.view(np.int64), b.view(np.int64)
    if a.ndim < 2:
        return bool(np.array_equal(a, b))
    for start in range(0, a.shape[-2], rows):
        part = (..., slice(start, start + rows), slice(None))
        if not np.array_equal(a[part], b[part]):
            return False
    return True


#: The slots a decoding reads, in the order they are brought over from another device.
_DECODED = ("Y", "Y_stage", "C", "N", "C_stage")


@functools.lru_cache(maxsize=16)
def _packed(layout: ResidualLayout) -> dict[str, slice]:
    """Where each of :data:`_DECODED` sits once they are packed side by side (what comes over from a device)."""
    packed, start = {}, 0
    for name in _DECODED:
        width = len(range(layout.d_model)[layout[name]])
        packed[name] = slice(start, start + width)
        start += width
    return packed
