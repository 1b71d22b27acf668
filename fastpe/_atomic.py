"""Atomic file writes: readers see the old file or the complete new one, never a partial one.

:func:`atomic_write` writes into a temporary file in the target's own directory (so the final
``os.replace`` is a rename within one file system, which POSIX and Windows make atomic),
flushes and fsyncs it, then renames it onto the target.  On any exception -- including
``KeyboardInterrupt`` and a full disk -- the temporary file is removed, nothing appears at
the target and a file already there is left untouched.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from typing import BinaryIO

__all__ = ["atomic_write", "TEMP_PREFIX"]

#: temporary files are named ``.<target name>.<random>.tmp``: hidden, and easy to spot
#: (and delete) should a process be killed outright before it could clean up
TEMP_PREFIX = "."
_TEMP_SUFFIX = ".tmp"


def _open_temp(directory: str, name: str) -> tuple[int, str]:
    """Create and open a new, empty file next to the target; return ``(fd, path)``.

    Opened with mode ``0o666`` so the process umask applies, as it would to a file created
    by ``open()`` (``tempfile.mkstemp`` would make it ``0o600``, which would stick to the
    target after the rename).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        path = os.path.join(directory, f"{TEMP_PREFIX}{name}.{secrets.token_hex(6)}{_TEMP_SUFFIX}")
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:  # pragma: no cover - 48 random bits colliding
            continue
    raise FileExistsError(f"could not create a temporary file in {directory!r}")  # pragma: no cover


def _fsync_directory(directory: str) -> None:
    """Make the rename itself durable; best effort (not possible on every platform)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Context manager yielding a binary file whose contents replace ``path`` on success.

    ::

        with atomic_write("pe.npy") as f:
            np.save(f, table)

    When the block exits normally the data are flushed and fsynced and the file is renamed
    onto ``path`` in one step.  When it raises anything (``BaseException`` included) the
    temporary file is deleted, ``path`` is left as it was, and the exception propagates.

    An existing regular file at ``path`` keeps its permission bits; a new file gets the
    usual ``0o666 & ~umask``.  A symbolic link at ``path`` is replaced by the new file (as
    ``mv`` would do), not written through.
    """
    target = os.fspath(path)
    directory = os.path.dirname(target) or os.curdir  # (abspath would need a live cwd)
    fd, tmp = _open_temp(directory, os.path.basename(target))
    try:
        try:
            st = os.stat(target)
        except OSError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode) and hasattr(os, "fchmod"):
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
        with open(fd, "wb", closefd=True) as f:
            fd = -1  # owned by f from here on
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        tmp = None
    except BaseException:
        if fd >= 0:  # open() itself failed
            with contextlib.suppress(OSError):
                os.close(fd)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    _fsync_directory(directory)
