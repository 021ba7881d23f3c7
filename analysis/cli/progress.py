"""The one progress display of every command: a bar on a terminal, one line per stage otherwise (logs, CI, pipes).

A command lists its stages up front and announces each as it starts::

    with Stages("drift", ["weights", "behaviour", "ablations"]) as stages:
        stages.start("weights")
        ...

On a terminal (stderr is a TTY) this is a ``tqdm`` bar over the stages whose label names the current one; else
each stage prints one line, ``kmeans-circuits drift: [2/3] behaviour``, flushed at once so a log shows where a run
is. A stage made of many small steps (the layers of a circuit, see :meth:`Stages.steps`) shows them in the bar's
label on a terminal and prints no line per step elsewhere, so that a log of a 200-layer run stays short. Work
made of cells that finish in any order is :class:`Cells`. Nothing goes to stdout, which carries the command's
result (``--json``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from io import TextIOBase


class Stages:
    """The stages of one command run (see the module docstring)."""

    unit = "stage"

    def __init__(self, command: str, names: list[str], stream: TextIOBase | None = None):
        self.command, self.names = command, list(names)
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.current: str | None = None
        self.bar = None
        self.started = time.perf_counter()

    def __enter__(self) -> "Stages":
        isatty = getattr(self.stream, "isatty", None)
        if isatty is not None and isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(self.names), desc=self.command, unit=self.unit, file=self.stream, leave=False,
                            dynamic_ncols=True)
        return self

    def start(self, name: str) -> None:
        """Stage ``name`` begins (the previous one, if any, is done)."""
        if self.current is not None:
            self._finish()
        self.current = name
        if self.bar is not None:
            self.bar.set_postfix_str(name, refresh=True)
        else:
            position = f"[{self.done + 1}/{len(self.names)}]" if name in self.names else "[-]"
            print(f"kmeans-circuits {self.command}: {position} {name}", file=self.stream, flush=True)

    def steps(self, name: str, total: int, unit: str) -> Callable[[int], None]:
        """A callback ``step(i)`` for the ``total`` steps of stage ``name``, called as step ``i`` (from 0) finishes,
        e.g. ``on_layer`` of :func:`analysis.capture.capture`. The stage begins with its first finished step, not
        before: a run refused before any step (a problem too large for the path) is bad input, and its error stays
        the only line on stderr. On a terminal the bar's label names the step (``circuit 5/22 layers``; a run that
        starts again, as the ``auto`` path falling back to the dense one, counts from 1 again); elsewhere the
        stage's one line is all."""

        def step(i: int) -> None:
            if self.current != name:
                self.start(name)
            if self.bar is not None:
                self.bar.set_postfix_str(f"{name} {i + 1}/{total} {unit}s", refresh=True)

        return step

    def _finish(self) -> None:
        self.done += 1
        self.current = None
        if self.bar is not None:
            self.bar.update(1)

    def __exit__(self, kind, value, traceback) -> None:
        if self.current is not None and kind is None:
            self._finish()
        if self.bar is not None:
            self.bar.close()
        elif kind is None:
            print(f"kmeans-circuits {self.command}: done in {time.perf_counter() - self.started:.1f} s",
                  file=self.stream, flush=True)


class Cells(Stages):
    """Progress over cells that finish in any order (:func:`analysis.engine.map_cells`): ``update(1)`` after each.
    On a terminal the same bar; else one line per finished cell, ``kmeans-circuits sweep: [3/39] cells done``."""

    unit = "cell"

    def __init__(self, command: str, total: int, stream: TextIOBase | None = None):
        super().__init__(command, [f"cell {i + 1}" for i in range(total)], stream)

    def update(self, n: int = 1) -> None:
        for _ in range(n):
            self._finish()
            if self.bar is None:
                print(f"kmeans-circuits {self.command}: [{self.done}/{len(self.names)}] cells done", file=self.stream,
                      flush=True)
