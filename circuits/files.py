"""Files and folders that appear all at once: written under a temporary name beside the target, then renamed.

A rename within one folder is atomic, so a reader (or a run interrupted half-way) sees the previous file or the
complete new one, never a truncated one. A folder of several files (an output folder, a checkpoint) is written
whole into a temporary sibling, the previous folder's other entries linked in, and swapped with the previous
folder in one ``renameat2(RENAME_EXCHANGE)``: at every instant the folder is the complete previous one or the
complete new one, whatever kills the writer. Every writer of the project (checkpoints, reports, output folders)
goes through here, so they agree on temporary names and on permissions.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import shutil
import stat
import tempfile
from pathlib import Path
from collections.abc import Callable, Mapping

#: What a folder's file is made from: its text (UTF-8), its bytes, or a function that writes it at the path given.
Content = str | bytes | Callable[[str], None]


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


def write_folder_atomic(path: str | os.PathLike, files: Mapping[str, Content]) -> Path:
    """Make the folder ``path`` hold ``files`` (name -> :data:`Content`) in one step, creating it if needed.

    The files are written into a temporary sibling; the previous folder's other entries are hard-linked (copied
    where links fail) beside them; then the sibling is swapped with the previous folder by :func:`exchange`, and
    the previous folder, now under the temporary name, is removed. A failure (or a kill) before the swap leaves
    the previous folder as it was. A new folder is the sibling renamed into place. Where the system cannot swap,
    two renames do it: the previous folder is moved aside, the new one takes its name, and the previous one comes
    back if that fails (a kill between the two leaves it at ``.NAME.previous-*`` beside ``path``).
    """
    path = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.is_dir()
    for name in files:
        # Replacing a folder by a file would remove the folder with the previous output.
        if existed and (path / name).is_dir() and not (path / name).is_symlink():
            raise IsADirectoryError(errno.EISDIR, "a folder where a file is to be written", str(path / name))
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode) if existed else umask_mode(0o777))
        if existed:
            _link_entries(path, tmp, skip=set(files))
        for name, content in files.items():
            _write(tmp / name, content)
        if not existed:
            os.rename(tmp, path)
        elif not exchange(tmp, path):
            _swap_by_renames(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _write(target: Path, content: Content) -> None:
    if isinstance(content, bytes):
        target.write_bytes(content)
    elif isinstance(content, str):
        target.write_text(content, encoding="utf-8")
    else:
        content(str(target))
    os.chmod(target, umask_mode(0o666))


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:  # a file system without hard links
        shutil.copy2(source, target, follow_symlinks=False)


def _link_entries(source: Path, target: Path, skip: set[str]) -> None:
    """Every entry of ``source`` not in ``skip``, into ``target``: files hard-linked, folders rebuilt of links,
    symbolic links as links."""
    for entry in os.scandir(source):
        if entry.name in skip:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.copytree(entry.path, target / entry.name, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry.path, str(target / entry.name))


#: ``renameat2``'s flag that swaps two existing paths (Linux 3.15; ext4, xfs, btrfs, tmpfs, overlayfs ...).
RENAME_EXCHANGE = 2
#: ``renameat2``'s "relative to the current folder" descriptor.
AT_FDCWD = -100


@functools.cache
def _renameat2():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return getattr(libc, "renameat2", None)


def exchange(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Swap the entries at ``a`` and ``b`` in one atomic step. ``False`` (nothing moved) where the system cannot:
    no ``renameat2`` (not Linux, an old C library), or a file system or kernel without ``RENAME_EXCHANGE``."""
    try:
        call = _renameat2()
    except OSError:
        return False
    if call is None:
        return False
    if call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(a), None, os.fspath(b))


def _swap_by_renames(new: Path, path: Path) -> None:
    """Put the folder ``new`` at ``path`` by two renames, the previous folder moved aside first and removed last
    (put back if the second rename fails)."""
    aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.previous-", dir=path.parent))
    try:
        os.rename(path, aside)  # onto the empty folder mkdtemp made
    except OSError:
        os.rmdir(aside)
        raise
    try:
        os.rename(new, path)
    except OSError:
        os.rename(aside, path)
        raise
    shutil.rmtree(aside, ignore_errors=True)
