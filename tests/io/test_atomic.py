"""fastpe._io.atomic.atomic_write: all or nothing, whatever goes wrong."""

from __future__ import annotations

import errno
import os
import pathlib
import signal
import stat
import subprocess
import sys
import textwrap
import threading

import pytest

import fastpe
from fastpe._io import atomic as _atomic
from fastpe._io.atomic import atomic_write
from support.cli import listing

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend


def test_writes_the_data_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.bin"
    with atomic_write(target) as f:
        f.write(b"hello ")
        f.write(b"world")
    assert target.read_bytes() == b"hello world"
    assert listing(tmp_path) == ["out.bin"]


def test_accepts_str_and_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with atomic_write("rel.bin") as f:
        f.write(b"x")
    assert (tmp_path / "rel.bin").read_bytes() == b"x"
    assert listing(tmp_path) == ["rel.bin"]


def test_temp_file_lives_next_to_the_target(tmp_path):
    target = tmp_path / "out.bin"
    with atomic_write(target) as f:
        f.write(b"partial")
        (temp,) = [p for p in listing(tmp_path)]
        assert temp.startswith(".out.bin.") and temp.endswith(".tmp")
        assert not target.exists()  # nothing at the target until the very end
    assert listing(tmp_path) == ["out.bin"]


@pytest.mark.parametrize("exc_type", [OSError, RuntimeError, KeyboardInterrupt])
def test_failure_mid_write_leaves_nothing(tmp_path, exc_type):
    target = tmp_path / "out.bin"
    with pytest.raises(exc_type):
        with atomic_write(target) as f:
            f.write(b"x" * 10_000)
            f.flush()
            raise exc_type("boom")
    assert listing(tmp_path) == []


@pytest.mark.parametrize("exc_type", [OSError, KeyboardInterrupt])
def test_failure_keeps_an_existing_target(tmp_path, exc_type):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old contents")
    target.chmod(0o640)
    with pytest.raises(exc_type):
        with atomic_write(target) as f:
            f.write(b"new contents, half written")
            raise exc_type("boom")
    assert target.read_bytes() == b"old contents"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert listing(tmp_path) == ["out.bin"]


@pytest.mark.parametrize("stage", ["fsync", "replace"])
def test_failure_while_committing_leaves_nothing(tmp_path, monkeypatch, stage):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def fail(*args, **kwargs):
        raise OSError(errno.EIO, f"simulated {stage} failure")

    monkeypatch.setattr(_atomic.os, stage, fail)
    with pytest.raises(OSError, match=f"simulated {stage}"):
        with atomic_write(target) as f:
            f.write(b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert listing(tmp_path) == ["out.bin"]


def test_replaces_an_existing_file_and_keeps_its_mode(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old contents, longer than the new ones")
    target.chmod(0o604)
    with atomic_write(target) as f:
        f.write(b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o604
    assert listing(tmp_path) == ["out.bin"]


def test_new_file_gets_the_umask_mode_not_0600(tmp_path):
    umask = os.umask(0o022)
    try:
        with atomic_write(tmp_path / "out.bin") as f:
            f.write(b"x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == 0o644


def test_a_symlink_is_replaced_not_written_through(tmp_path):
    real = tmp_path / "real.bin"
    real.write_bytes(b"real")
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    with atomic_write(link) as f:
        f.write(b"new")
    assert not link.is_symlink() and link.read_bytes() == b"new"
    assert real.read_bytes() == b"real"


def test_missing_directory_raises_and_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        with atomic_write(tmp_path / "no" / "such" / "out.bin") as f:
            f.write(b"x")  # pragma: no cover - never reached
    assert listing(tmp_path) == []


def test_exception_propagates_unchanged(tmp_path):
    err = ValueError("the caller's own error")
    with pytest.raises(ValueError) as info:
        with atomic_write(tmp_path / "out.bin"):
            raise err
    assert info.value is err


@pytest.mark.skipif(sys.platform == "win32", reason="needs RLIMIT_FSIZE")
def test_real_write_error_from_a_size_limit_leaves_nothing(tmp_path):
    """A genuine write failure, not a simulated one: the file-size limit (Python ignores
    SIGXFSZ, so exceeding it is an ``EFBIG`` OSError, much like a full disk)."""
    (tmp_path / "keep.bin").write_bytes(b"old")
    root = pathlib.Path(fastpe.__file__).resolve().parent.parent
    code = textwrap.dedent(
        f"""
        import errno, resource, sys
        sys.path.insert(0, {str(root)!r})
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        from fastpe._io.atomic import atomic_write
        for name in ("new.bin", "keep.bin"):
            try:
                with atomic_write(name) as f:
                    for _ in range(64):
                        f.write(b"x" * 4096)
            except OSError as exc:
                assert exc.errno == errno.EFBIG, exc
            else:
                sys.exit("the write should have failed")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert listing(tmp_path) == ["keep.bin"]
    assert (tmp_path / "keep.bin").read_bytes() == b"old"


# --------------------------------------------------------------------------- signals

posix_signals = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="SIGTERM and SIGHUP are POSIX signals")


@pytest.fixture
def default_signals():
    """SIGTERM and SIGHUP at their defaults for the test (as a shell starts a program),
    whatever this test run inherited; put back afterwards."""
    saved = {s: signal.signal(s, signal.SIG_DFL) for s in _atomic.TERMINATING_SIGNALS}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@posix_signals
def test_signals_raise_takes_the_default_ones_and_puts_them_back(default_signals):
    with _atomic.signals_raise() as taken:
        assert taken == {signal.SIGTERM, signal.SIGHUP}
        handler = signal.getsignal(signal.SIGTERM)
        with pytest.raises(_atomic.Terminated) as info:
            handler(signal.SIGTERM, None)  # what Python does when the signal arrives
        assert info.value.signum == signal.SIGTERM
        assert info.value.exit_status == 128 + 15 and info.value.signal_name == "SIGTERM"
        assert str(info.value) == "terminated by SIGTERM"
        # a second signal while the first one unwinds is ignored: the cleanup runs to its end
        assert signal.getsignal(signal.SIGHUP)(signal.SIGHUP, None) is None
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL


@posix_signals
def test_signals_raise_leaves_ignored_and_handled_signals_alone(default_signals):
    def own(signum, frame):  # pragma: no cover - never called
        pass

    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a program
    signal.signal(signal.SIGTERM, own)
    with _atomic.signals_raise() as taken:
        assert taken == set()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is own
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is own


@posix_signals
def test_signals_raise_nested_the_inner_takes_nothing(default_signals):
    with _atomic.signals_raise() as outer:
        handler = signal.getsignal(signal.SIGTERM)
        with _atomic.signals_raise() as inner:
            assert inner == set() and signal.getsignal(signal.SIGTERM) is handler
        assert signal.getsignal(signal.SIGTERM) is handler  # the outer one still holds it
    assert outer and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


@posix_signals
def test_signals_raise_outside_the_main_thread_takes_nothing(default_signals):
    seen = []

    def worker():
        with _atomic.signals_raise() as taken:
            seen.append((taken, signal.getsignal(signal.SIGTERM)))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [(frozenset(), signal.SIG_DFL)]


@posix_signals
def test_terminated_unwinds_atomic_write_leaving_nothing(tmp_path, default_signals):
    (tmp_path / "out.bin").write_bytes(b"old")
    with pytest.raises(_atomic.Terminated):
        with _atomic.signals_raise():
            with atomic_write(tmp_path / "out.bin") as f:
                f.write(b"half of the new contents")
                signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    assert listing(tmp_path) == ["out.bin"] and (tmp_path / "out.bin").read_bytes() == b"old"


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, _atomic.Terminated])
def test_a_signal_right_after_the_temporary_file_is_made_leaves_nothing(tmp_path, monkeypatch, exc_type):
    """Python runs a signal's handler as soon as a call returns: the exception can come after
    the temporary file exists and before atomic_write holds its name (seen once under load,
    SIGTERM to ``fastpe table`` left ``.big.npy.<hex>.tmp``)."""
    real_open = os.open

    def open_then_signal(path, flags, mode=0o777):
        real_open(path, flags, mode)
        raise exc_type(signal.SIGTERM) if exc_type is _atomic.Terminated else exc_type()

    monkeypatch.setattr(_atomic.os, "open", open_then_signal)
    with pytest.raises(exc_type):
        with atomic_write(tmp_path / "out.npy"):
            pass  # pragma: no cover - never entered
    assert os.listdir(tmp_path) == []


def test_a_signal_right_after_the_kept_copy_is_linked_leaves_nothing(tmp_path, monkeypatch):
    from fastpe._io import atomic as _atomic

    (tmp_path / "pe.npy.json").write_text("{}")
    real_link = os.link

    def link_then_signal(src, dst):
        real_link(src, dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(_atomic.os, "link", link_then_signal)
    with pytest.raises(KeyboardInterrupt):
        _atomic._keep_copy(str(tmp_path / "pe.npy.json"))
    assert os.listdir(tmp_path) == ["pe.npy.json"]
