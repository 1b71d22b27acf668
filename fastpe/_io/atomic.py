"""Atomic file writes: readers see the old file or the complete new one, never a partial one.

:func:`atomic_write` writes into a temporary file in the target's own directory (so the final
``os.replace`` is a rename within one file system, which POSIX and Windows make atomic),
flushes and fsyncs it, then renames it onto the target.  On any exception -- including
``KeyboardInterrupt`` and a full disk -- the temporary file is removed, nothing appears at
the target and a file already there is left untouched.

Signals.  ``SIGINT`` already arrives as ``KeyboardInterrupt``.  ``SIGTERM`` (what ``kill``,
``timeout`` and batch schedulers send) and ``SIGHUP`` (a closed terminal) end a Python
process on the spot by default, skipping every ``except`` and ``finally`` block, and with them
the removal of the temporary file.  :func:`signals_raise` turns them into a
:class:`Terminated` exception for the duration of a block, so the usual cleanups run; the
command line holds it for its whole run.  :func:`end_cleanly_on_signals` is the library's
version for one call (:func:`fastpe.save_table`): it takes over only signals left at their
default (never one the program handles or ignores, and only in the main thread, the one
Python lets set handlers), puts the default back when the call returns, and after the
cleanup ends the process by the same signal, so the program sees exactly what it would have
seen without fastpe -- less the temporary file.

A file and its sidecar.  :func:`atomic_write_with_sidecar` writes a data file and a small
file beside it (a ``.npy`` file's spec, ``PATH.json``): the data are written and synced
first, then the sidecar is renamed into place, then the data, so the new data never sit at
their name without their complete sidecar.  Should the data's rename fail after the
sidecar's, the sidecar is taken back (the previous one restored, if there was one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
from collections.abc import Iterator
from typing import BinaryIO

__all__ = [
    "atomic_write",
    "atomic_write_with_sidecar",
    "TEMP_PREFIX",
    "TERMINATING_SIGNALS",
    "Terminated",
    "signals_raise",
    "end_cleanly_on_signals",
]

#: temporary files are named ``.<target name>.<random>.tmp``: hidden, and easy to spot
#: (and delete) should a process be killed outright before it could clean up
TEMP_PREFIX = "."
_TEMP_SUFFIX = ".tmp"


def _random_tag() -> str:
    """12 random hex digits for a temporary file's name (48 bits from the OS's generator, as
    ``secrets.token_hex(6)`` gives, without importing it: ``secrets`` pulls in ``random``,
    ``hashlib`` and ``hmac``, a few milliseconds of a command's start for one name)."""
    return os.urandom(6).hex()


def _open_temp(directory: str, name: str) -> tuple[int, str]:
    """Create and open a new, empty file next to the target; return ``(fd, path)``.

    Opened with mode ``0o666`` so the process umask applies, as it would to a file created
    by ``open()`` (``tempfile.mkstemp`` would make it ``0o600``, which would stick to the
    target after the rename).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        path = os.path.join(directory, f"{TEMP_PREFIX}{name}.{_random_tag()}{_TEMP_SUFFIX}")
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:  # pragma: no cover - 48 random bits colliding
            continue
        except BaseException:
            # Python runs a signal's handler as soon as a call returns, so a SIGINT or
            # SIGTERM can raise here after the file was made, before the caller holds it:
            # the file is ours (only FileExistsError means another's), so remove it
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
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
def atomic_write(path: str | os.PathLike, *, synced: bool = False) -> Iterator[BinaryIO]:
    """Context manager yielding a binary file whose contents replace ``path`` on success.

    ::

        with atomic_write("pe.npy") as f:
            np.save(f, table)

    When the block exits normally the data are flushed and fsynced and the file is renamed
    onto ``path`` in one step.  When it raises anything (``BaseException`` included) the
    temporary file is deleted, ``path`` is left as it was, and the exception propagates.
    ``synced=True`` says the block has flushed and fsynced everything it wrote itself (as
    :func:`atomic_write_with_sidecar` does before its sidecar): the file is not synced again.

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
            if not synced:
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


def _identity(fileobj) -> tuple[int, int]:
    st = os.fstat(fileobj.fileno())
    return st.st_dev, st.st_ino


def _is(path: str | None, identity: tuple[int, int] | None) -> bool:
    """Whether ``path`` is (still) the file ``identity`` names."""
    if path is None or identity is None:
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == identity


def _keep_copy(path: str) -> str | None:
    """A hard link to an existing regular file at ``path``, to restore it should the new one
    have to be taken back; ``None`` if there is none or linking is not supported."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    directory, name = os.path.split(path)
    copy = os.path.join(directory, f"{TEMP_PREFIX}{name}.{_random_tag()}.old.tmp")
    try:
        os.link(path, copy)
    except OSError:
        return None
    except BaseException:  # a signal's exception right after the link was made (see _open_temp)
        with contextlib.suppress(OSError):
            os.unlink(copy)
        raise
    return copy


@contextlib.contextmanager
def atomic_write_with_sidecar(path: str | os.PathLike, sidecar: str | os.PathLike | None,
                              sidecar_bytes: bytes) -> Iterator[BinaryIO]:
    """:func:`atomic_write` of ``path`` that also puts ``sidecar_bytes`` at ``sidecar`` (none
    if ``sidecar`` is ``None``): the data are synced, the sidecar renamed into place, then
    the data; on any failure both targets are left as they were."""
    target = os.fspath(path)
    side = None if sidecar is None else os.fspath(sidecar)
    data_id = side_id = None
    old_sidecar = None
    try:
        with atomic_write(target, synced=True) as f:
            data_id = _identity(f)
            yield f
            f.flush()
            os.fsync(f.fileno())  # the slow part before the sidecar appears, not after (and once)
            if side is not None:
                old_sidecar = _keep_copy(side)
                with atomic_write(side) as s:
                    side_id = _identity(s)
                    s.write(sidecar_bytes)
    except BaseException:
        if _is(side, side_id) and not _is(target, data_id):
            # the sidecar reached its name, the data did not: take the sidecar back
            with contextlib.suppress(OSError):
                if old_sidecar is not None:
                    os.replace(old_sidecar, side)
                    old_sidecar = None
                else:
                    os.unlink(side)
        raise
    finally:
        if old_sidecar is not None:
            with contextlib.suppress(OSError):
                os.unlink(old_sidecar)


# --------------------------------------------------------------------------- signals

#: the signals whose default action ends the process without unwinding it (SIGHUP does not
#: exist on Windows)
TERMINATING_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Terminated(BaseException):
    """One of :data:`TERMINATING_SIGNALS` arrived while :func:`signals_raise` held it.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that ``except Exception`` blocks let
    it through while ``finally`` blocks and :func:`atomic_write`'s cleanup still run.
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:  # pragma: no cover - only the signals above are ever taken
            return f"signal {self.signum}"

    @property
    def exit_status(self) -> int:
        """What a shell reports for a process that this signal ended: 128 + its number."""
        return 128 + self.signum

    def __str__(self) -> str:
        return f"terminated by {self.signal_name}"


@contextlib.contextmanager
def signals_raise() -> Iterator[frozenset[int]]:
    """While the block runs, :data:`TERMINATING_SIGNALS` raise :class:`Terminated` in the
    main thread instead of ending the process; yields the signals taken over.

    Only a signal at its default disposition is taken: one the program ignores (``nohup``
    ignores SIGHUP) or handles itself is left as it is, and outside the main thread, where
    Python cannot set handlers, nothing is taken.  On exit the default is put back.  After
    one ``Terminated`` has been raised, further signals are ignored until the block exits, so
    a second SIGTERM cannot interrupt the cleanup the first one started; a signal arriving
    while the handlers are being put back is sent again once the default is in place, so it
    is never lost.
    """
    state = {"raised": False, "closing": False, "pending": None}

    def handler(signum, frame):
        if state["raised"]:
            return
        if state["closing"]:
            state["pending"] = signum
            return
        state["raised"] = True
        raise Terminated(signum)

    taken = []
    if threading.current_thread() is threading.main_thread():
        for signum in TERMINATING_SIGNALS:
            try:
                if signal.getsignal(signum) == signal.SIG_DFL:
                    signal.signal(signum, handler)
                    taken.append(signum)
            except (OSError, ValueError):  # pragma: no cover - e.g. an embedded interpreter
                pass
    try:
        yield frozenset(taken)
    finally:
        state["closing"] = True
        for signum in taken:
            with contextlib.suppress(OSError, ValueError):
                if signal.getsignal(signum) is handler:  # unless the block installed its own
                    signal.signal(signum, signal.SIG_DFL)
        if state["pending"] is not None and not state["raised"]:
            os.kill(os.getpid(), state["pending"])


@contextlib.contextmanager
def end_cleanly_on_signals() -> Iterator[None]:
    """For a library call that writes files: a SIGTERM or SIGHUP arriving during the block
    unwinds it (its cleanups remove the temporary files), then ends the process by that same
    signal, as it would have ended without the block.

    Signals the program handles or ignores are left to it (see :func:`signals_raise`); so is
    a :class:`Terminated` raised by an enclosing :func:`signals_raise` (the command line's),
    which propagates.  The process ends when the main thread next runs Python code: after
    the write or computation under way (for :func:`fastpe.save_table`, one chunk).
    """
    with signals_raise() as taken:
        try:
            yield
        except Terminated as exc:
            if exc.signum not in taken:
                raise
            ending = exc
        else:
            return
    # the default disposition is back: this ends the process ...
    os.kill(os.getpid(), ending.signum)
    raise ending  # ... unless the signal is blocked in this thread; then it stays pending
