"""Named bases for the k-means transformer: where everything lives.

Two small objects are the single source of truth for positions:

* :class:`ResidualLayout` names the subspaces of the residual stream (``X``, ``C``, ``Y`` ...) and gives a
  readable label for every dimension, in the spirit of tracr's residual labels. Builder, encoder, decoder,
  analyses and plots all ask it for slices; no other module does index arithmetic on ``d_model``.
* :class:`SequenceLayout` names the token positions: one BOS sink, ``n`` point tokens, ``k`` centroid tokens.

A variant that needs more room declares extra subspaces (appended after the standard ones), so the standard
subspaces keep their meaning in every variant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable

import numpy as np

#: What each standard subspace holds; used for labels, docs and reports.
SUBSPACE_DOCS: dict[str, str] = {
    "X": "point coordinates (0 on other tokens)",
    "C": "centroid coordinates (0 on other tokens)",
    "C_stage": "staging slot for the new centroid",
    "N": "squared norm |c|^2 of the centroid (centroid tokens)",
    "ID": "one-hot identity of a centroid token",
    "Y": "one-hot assignment of a point token",
    "Y_stage": "staging slot for the new assignment",
    "ONE": "constant 1 on every token",
    "IS_POINT": "token-type flag: point",
    "IS_CENTROID": "token-type flag: centroid",
    "IS_BOS": "token-type flag: BOS sink",
}

#: Token types in sequence order.
TOKEN_TYPES: tuple[str, ...] = ("bos", "point", "centroid")


def standard_subspaces(d: int, k: int) -> tuple[tuple[str, int], ...]:
    """The subspaces of the exact Lloyd circuit, in residual order, with their widths."""
    return (
        ("X", d),
        ("C", d),
        ("C_stage", d),
        ("N", 1),
        ("ID", k),
        ("Y", k),
        ("Y_stage", k),
        ("ONE", 1),
        ("IS_POINT", 1),
        ("IS_CENTROID", 1),
        ("IS_BOS", 1),
    )


@dataclass(frozen=True)
class ResidualLayout:
    """Named subspaces of the residual stream.

    ``layout["X"]`` is the slice holding the point coordinates, ``layout.index("ID", j)`` the dimension of the
    j-th identity bit and ``layout.labels`` a label such as ``"C[2]"`` for every dimension.
    """

    d: int
    k: int
    extra: tuple[tuple[str, int], ...] = ()
    _slices: dict[str, slice] = field(init=False, repr=False, compare=False)
    _d_model: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.d < 1 or self.k < 1:
            raise ValueError(f"layout needs d >= 1 and k >= 1, got d={self.d}, k={self.k}")
        slices: dict[str, slice] = {}
        start = 0
        for name, width in (*standard_subspaces(self.d, self.k), *self.extra):
            if name in slices:
                raise ValueError(f"subspace {name!r} declared twice")
            if width < 1:
                raise ValueError(f"subspace {name!r} needs a positive width, got {width}")
            slices[name] = slice(start, start + width)
            start += width
        object.__setattr__(self, "_slices", slices)
        # Read for every weight vector placed: computed once (the subspaces are contiguous from 0).
        object.__setattr__(self, "_d_model", start)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._slices)

    @property
    def d_model(self) -> int:
        return self._d_model

    def __getitem__(self, name: str) -> slice:
        try:
            return self._slices[name]
        except KeyError:
            raise KeyError(f"no subspace {name!r}; the layout has {', '.join(self.names)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._slices

    def width(self, name: str) -> int:
        s = self[name]
        return s.stop - s.start

    def index(self, name: str, i: int = 0) -> int:
        """The residual dimension of component ``i`` of subspace ``name``."""
        width = self.width(name)
        if not 0 <= i < width:
            raise IndexError(f"{name} has width {width}; component {i} does not exist")
        return self[name].start + i

    @property
    def labels(self) -> list[str]:
        """One readable label per residual dimension, e.g. ``X[0]``, ``N``, ``IS_BOS``."""
        out: list[str] = []
        for name in self.names:
            width = self.width(name)
            out.extend([name] if width == 1 else [f"{name}[{i}]" for i in range(width)])
        return out

    def subspace_of(self, dim: int | np.integer) -> tuple[str, int]:
        """Inverse of :meth:`index`: which subspace (and component) dimension ``dim`` belongs to."""
        for name, s in self._slices.items():
            if s.start <= dim < s.stop:
                return name, int(dim - s.start)
        raise IndexError(f"dimension {dim} is outside d_model={self.d_model}")

    def mask(self, names: Iterable[str]) -> np.ndarray:
        """Boolean vector over ``d_model`` selecting the named subspaces."""
        m = np.zeros(self.d_model, dtype=bool)
        for name in names:
            m[self[name]] = True
        return m

    def describe(self) -> list[dict[str, object]]:
        """Rows (name, start, stop, width, holds) for tables in docs and reports."""
        return [
            {
                "name": name,
                "start": s.start,
                "stop": s.stop,
                "width": s.stop - s.start,
                "holds": SUBSPACE_DOCS.get(name, "variant-specific"),
            }
            for name, s in self._slices.items()
        ]


@dataclass(frozen=True)
class SequenceLayout:
    """Token positions: ``[BOS, point_0 .. point_{n-1}, centroid_0 .. centroid_{k-1}]``."""

    n: int
    k: int

    @property
    def bos(self) -> int:
        return 0

    @property
    def points(self) -> slice:
        return slice(1, 1 + self.n)

    @property
    def centroids(self) -> slice:
        return slice(1 + self.n, 1 + self.n + self.k)

    @property
    def small(self) -> list[int]:
        """BOS and the centroid tokens: the positions other than the points (``k + 1`` of them)."""
        return [self.bos, *range(self.n_tokens)[self.centroids]]

    @property
    def n_tokens(self) -> int:
        return 1 + self.n + self.k

    def point(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise IndexError(f"point {i} out of range for n={self.n}")
        return 1 + i

    def centroid(self, j: int) -> int:
        if not 0 <= j < self.k:
            raise IndexError(f"centroid {j} out of range for k={self.k}")
        return 1 + self.n + j

    def token_type(self, position: int) -> str:
        if position == 0:
            return "bos"
        if 1 <= position <= self.n:
            return "point"
        if self.n < position < self.n_tokens:
            return "centroid"
        raise IndexError(f"position {position} outside a sequence of {self.n_tokens} tokens")

    def positions(self, token_type: str) -> slice:
        """Positions of one token type: ``"bos"``, ``"point"`` or ``"centroid"``."""
        if token_type == "bos":
            return slice(0, 1)
        if token_type == "point":
            return self.points
        if token_type == "centroid":
            return self.centroids
        raise ValueError(f"unknown token type {token_type!r}; expected one of {TOKEN_TYPES}")

    @property
    def token_labels(self) -> list[str]:
        return ["BOS", *(f"x{i}" for i in range(self.n)), *(f"c{j}" for j in range(self.k))]

    def label(self, position: int) -> str:
        """``token_labels[position]``, made alone (a million points' labels take a second to make)."""
        kind = self.token_type(position)
        return "BOS" if kind == "bos" else f"x{position - 1}" if kind == "point" else f"c{position - 1 - self.n}"
