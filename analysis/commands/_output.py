"""All-or-nothing output folders: files are written to a temporary sibling and moved in only when complete."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from analysis.data import InputError


def check_out_dir(out: str | None) -> Path | None:
    """Reject an ``--out`` that can never be written, before any work is done."""
    if out is None:
        return None
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise InputError(f"--out {out!r} exists and is not a folder")
    anchor = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    if not anchor.is_dir():
        raise InputError(f"--out {out!r}: {str(anchor)!r} is not a folder")
    # os.access says yes to root everywhere (and to read-only or pseudo file systems): try a folder for real.
    # An existing folder is filled from a temporary sibling, so its parent must take a folder too.
    for where in dict.fromkeys([anchor, path.parent] if path.exists() else [anchor]):
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".kmeans-circuits-probe-", dir=where))
        except OSError as exc:
            raise InputError(f"--out {out!r}: cannot create a folder in {str(where)!r} ({exc.strerror or exc})") from None
    return path


def write_output_dir(path: Path, files: dict[str, str | bytes]) -> None:
    """Write ``files`` (name -> content) into ``path`` so that either all of them land or none does."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    except OSError as exc:
        raise InputError(f"cannot write --out {str(path)!r}: {exc.strerror or exc}") from None
    # mkdtemp makes the folder private (0700); the output folder gets the permissions mkdir would give it.
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)
    try:
        for name, content in files.items():
            target = tmp / name
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        if not path.exists():
            os.rename(tmp, path)
            return
        for name in files:
            os.replace(tmp / name, path / name)
    except OSError as exc:
        raise InputError(f"cannot write --out {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
