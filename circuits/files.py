"""Files and folders that appear all at once: written under a temporary name beside the target, then renamed.

A rename within one folder is atomic, so a reader (or a run interrupted half-way) sees the previous file or the
complete new one, never a truncated one. Every writer of the project (checkpoints, reports, output folders) goes
through here, so they agree on temporary names and on permissions.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from collections.abc import Callable


def umask_mode(base: int) -> int:
    """``base`` (0o666 for files, 0o777 for folders) less the process umask: what ``open``/``mkdir`` would give.

    ``mkstemp``/``mkdtemp`` create private (0600/0700) entries; results are meant to be shared like any file.
    """
    umask = os.umask(0)
    os.umask(umask)
    return base & ~umask


def write_file_atomic(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp)`` to fill a temporary sibling of ``path``, then rename it onto ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, umask_mode(0o666))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """``text`` (UTF-8) into ``path`` all at once; creates missing parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_file_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
