"""``--out`` of every command: checked before any work, written all or nothing.

An output folder is written whole into a temporary sibling and swapped with the previous one in one step
(:func:`circuits.files.write_folder_atomic`): a run killed at any moment leaves the complete previous output or
the complete new one. Single files (HTML reports) go through :func:`circuits.files.write_text_atomic`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from analysis.errors import ProblemError
from circuits.files import write_folder_atomic, write_text_atomic


#: What a temporary sibling adds to ``--out``'s last component (``.NAME.tmp-`` and eight random characters).
TEMP_NAME_EXTRA = len("..tmp-") + 8
#: Room left under the path-length limit for the files written inside ``--out`` and its temporary sibling.
OUT_PATH_SPARE = 128


def _system_limit(name: str, default: int) -> int:
    try:
        return int(os.pathconf(".", name))
    except (OSError, ValueError, AttributeError):
        return default


def check_path_length(text: str, flag: str, out: bool = False) -> None:
    """Reject a path with a component or a total longer than the file system takes (``ENAMETOOLONG``).

    ``out``: the path is written, through a temporary sibling of its last component and files inside it, so it
    must leave room for those too.
    """
    raw = os.fsencode(text)
    name_max = _system_limit("PC_NAME_MAX", 255)
    path_max = _system_limit("PC_PATH_MAX", 4096)
    spare = OUT_PATH_SPARE if out else 0
    if len(raw) + spare >= path_max:
        raise ProblemError(f"{flag}: the path is {len(raw)} bytes long; the file system takes at most"
                           f" {path_max - 1 - spare} here")
    parts = raw.rstrip(b"/").split(b"/")
    for i, part in enumerate(parts):
        limit = name_max - (TEMP_NAME_EXTRA if out and i == len(parts) - 1 else 0)
        if len(part) > limit:
            shown = os.fsdecode(part)
            raise ProblemError(f"{flag}: the name {shown[:24]!r}... is {len(part)} bytes long; the file system takes"
                               f" at most {limit} bytes per name here")


def _nonempty(out: str) -> Path:
    # Path("") is ".": an empty --out would silently write into the current folder.
    if not str(out):
        raise ProblemError("--out is empty; give a path")
    return Path(out)


def _probe(out: str, where: Path, folder: bool) -> None:
    """Create and remove a temporary entry in ``where``: ``os.access`` says yes to root everywhere, and to
    read-only or pseudo file systems such as /proc."""
    try:
        if folder:
            os.rmdir(tempfile.mkdtemp(prefix=".kmeans-circuits-probe-", dir=where))
        else:
            fd, tmp = tempfile.mkstemp(prefix=".kmeans-circuits-probe-", dir=where)
            os.close(fd)
            os.unlink(tmp)
    except OSError as exc:
        what = "a folder" if folder else "a file"
        raise ProblemError(f"--out {out!r}: cannot create {what} in {str(where)!r} ({exc.strerror or exc})") from None


def _nearest_existing(path: Path) -> Path:
    return next((p for p in [path, *path.parents] if os.path.lexists(p)), Path("."))


def _foreign_entry(path: Path, owned: tuple[str, ...], marker: str | None) -> str | None:
    """The first entry of the existing folder ``path`` that a previous output of the command would not hold."""
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise ProblemError(f"--out {str(path)!r}: the folder cannot be read ({exc.strerror or exc})") from None
    if not entries or (marker is not None and marker in entries):
        return None
    return next((name for name in entries if name not in owned), None)


def check_out_dir(out: str | None, names: tuple[str, ...] = (), previous: tuple[str, ...] = (),
                  marker: str | None = None) -> Path | None:
    """Reject an ``--out`` folder that can never be written, or is not this command's to write, before any work.

    ``names`` are the files the command will write: in an existing folder none of them may be a folder, which a
    file cannot replace. An existing folder must be empty or a previous output of the command: every entry one
    of ``names`` or ``previous`` (what other modes of the command write), or, with ``marker``, holding that file
    (a checkpoint's ``config.json``). Anything else (``/``, a home folder, a project) is refused, so a command
    never mixes its files into a folder it did not make (docs/cli.md, "Output folders").
    """
    if out is None:
        return None
    path = _nonempty(out)
    if path.exists() and not path.is_dir():
        raise ProblemError(f"--out {out!r} exists and is not a folder")
    if path.is_dir():
        foreign = _foreign_entry(path, names + previous, marker)
        if foreign is not None:
            raise ProblemError(f"--out {out!r} is an existing folder that is not an output of this command (it holds"
                               f" {foreign!r}); give a new or empty folder")
    anchor = _nearest_existing(path)
    if not anchor.is_dir():
        raise ProblemError(f"--out {out!r}: {str(anchor)!r} is not a folder")
    if path.exists():
        for name in names:
            if (path / name).is_dir() and not (path / name).is_symlink():
                raise ProblemError(f"--out {out!r}: {str(path / name)!r} is a folder; the output file {name} cannot"
                                   " replace it")
    # An existing folder is filled from a temporary sibling, so its parent must take a folder too.
    for where in dict.fromkeys([anchor, path.parent] if path.exists() else [anchor]):
        _probe(out, where, folder=True)
    return path


def check_out_file(out: str, suffixes: tuple[str, ...] = (".html", ".htm"), example: str = "report.html") -> Path:
    """Reject an ``--out`` file (an HTML report) that can never be written, before any work is done.

    The name must end in one of ``suffixes`` (every command's single file is an HTML page), so an existing file
    of another kind (data, a script) is never replaced, by any command.
    """
    path = _nonempty(out)
    if path.is_dir():
        raise ProblemError(f"--out {out!r} is a folder; give a file name such as {str(path / example)!r}")
    if path.suffix.lower() not in suffixes:
        raise ProblemError(f"--out {out!r}: the report is an HTML file; give a name ending in {suffixes[0]}")
    anchor = _nearest_existing(path.parent)
    if not anchor.is_dir():
        raise ProblemError(f"--out {out!r}: {str(anchor)!r} is not a writable folder")
    # The file itself is replaced by renaming a temporary sibling onto it, so only its folder needs to be writable.
    _probe(out, anchor, folder=anchor != path.parent)
    return path


def write_output_file(path: Path, text: str) -> None:
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise ProblemError(f"cannot write --out {str(path)!r}: {exc.strerror or exc}") from None


def write_output_dir(path: Path, files: dict[str, str | bytes]) -> None:
    """Write ``files`` (name -> content) into ``path`` so that at every instant the folder is the complete previous
    output or the complete new one (:func:`circuits.files.write_folder_atomic`); other files in it are kept."""
    try:
        write_folder_atomic(path, files)
    except OSError as exc:
        raise ProblemError(f"cannot write --out {str(path)!r}: {exc.strerror or exc}") from None
