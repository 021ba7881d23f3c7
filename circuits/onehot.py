"""One-hot responsibilities: a hard assignment's ``n x k`` matrix from its labels, and a stack of them held as
labels (:class:`OneHotStack`): at a million points and ten clusters each matrix is 80 MB, and a reference run or a
lean capture (:mod:`analysis.capture`) would keep one per iterate."""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Int


def one_hot(labels: Int[np.ndarray, " n"], k: int) -> Float[np.ndarray, "n k"]:
    """Rows ``e_label``; a label of -1 gives a row of zeros."""
    R = np.zeros((len(labels), k))
    inside = labels >= 0
    R[np.flatnonzero(inside), labels[inside]] = 1.0
    return R


class OneHotStack:
    """The responsibilities of a hard run, ``(T + 1, n, k)`` one-hot rows (zero rows for label -1), held as their
    labels: at a million points and ten clusters the matrices are 80 MB an iterate. Indexing an iterate (or
    ``np.asarray``) gives the very float64 matrices :func:`one_hot` makes."""

    def __init__(self, labels: Int[np.ndarray, "T_plus_1 n"], k: int):
        self.labels = labels.view()  # a read-only view: the caller's array keeps its own flags
        self.labels.flags.writeable = False
        self.k = k

    @property
    def shape(self) -> tuple[int, int, int]:
        return (*self.labels.shape, self.k)

    ndim = 3
    dtype = np.dtype(np.float64)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return one_hot(self.labels[index], self.k)
        return np.asarray(self)[index]

    def __iter__(self):
        return (one_hot(labels, self.k) for labels in self.labels)

    def __array__(self, dtype=None, copy=None):
        full = np.stack([one_hot(labels, self.k) for labels in self.labels]) if len(self.labels) else \
            np.zeros(self.shape)
        return full if dtype is None else full.astype(dtype)


def stack_rows(rows: list[np.ndarray | None]) -> np.ndarray:
    """``np.stack(rows)``, each row let go of (set to ``None`` in ``rows``) once copied: the rows and the stack are
    not held whole at once (a run's labels, the rows of a :class:`OneHotStack`, are 88 MB at a million points and
    T = 10)."""
    out = np.empty((len(rows), *rows[0].shape), dtype=np.result_type(*rows))
    for i in range(len(rows)):
        out[i], rows[i] = rows[i], None
    return out
