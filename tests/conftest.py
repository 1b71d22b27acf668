"""Shared fixtures and the one choice of backends.

Backends are chosen here and nowhere else: :data:`AVAILABLE`, :data:`FAST`, :data:`DEFAULT`,
:data:`BACKEND_PARAMS` and the ``backend`` / ``fast_backend`` fixtures.  The helpers the
tests share live in ``tests/support/`` (pytest puts ``tests/`` on ``sys.path``): the mpmath
oracle, the hard inputs, the fuzz strategies, the command-line helpers.

``make test`` runs the suite three times: with ``FASTPE_BACKEND=numba``, every backend
crossed by the fixtures; then with ``FASTPE_BACKEND=cython`` and ``=python`` under
``FASTPE_TEST_BACKENDS=default``, for the paths that use the default backend.  A
default-only run therefore leaves out what it cannot add: every test marked ``any_backend``
-- its outcome does not depend on ``$FASTPE_BACKEND`` (it names every backend it calls, or
calls none, and starts no child that inherits the choice), so the first run decided it --
is deselected (:func:`pytest_collection_modifyitems`), and a module marked as a whole is
not collected at all (:func:`pytest_ignore_collect`).  Mark a test with
``@pytest.mark.any_backend``; mark a whole module (``pytestmark = pytest.mark.any_backend``)
only where every test names its backends by nature (the reference, the contract, the plans),
so that a new test elsewhere runs in every run until it is shown not to need it.
"""

from __future__ import annotations

import os
import re

import pytest

import fastpe
from fastpe import _backends
from fastpe._backends.registry import BACKENDS

#: backends that load here (the ``python`` reference always does)
AVAILABLE = fastpe.available_backends()
#: the compiled backends among them
FAST = [b for b in AVAILABLE if b != "python"]
#: the backend a call with ``backend=None`` uses: ``$FASTPE_BACKEND``, else the fastest
DEFAULT = _backends.resolve(None)[0]

#: ``FASTPE_TEST_BACKENDS=default`` (``make test``'s runs after the first): the ``backend``
#: fixture takes only ``$FASTPE_BACKEND``, and the ``any_backend`` tests are deselected.
#: The first run crosses every backend already; the later ones are there for the paths that
#: use the default backend.
DEFAULT_ONLY = os.environ.get("FASTPE_TEST_BACKENDS", "") == "default"
BACKEND_PARAMS = (
    [os.environ["FASTPE_BACKEND"]]
    if DEFAULT_ONLY and os.environ.get("FASTPE_BACKEND") in AVAILABLE
    else AVAILABLE
)


def pytest_report_header(config):
    return [
        f"fastpe {fastpe.__version__}: backends available {AVAILABLE} of {list(BACKENDS)}; "
        f"FASTPE_BACKEND={os.environ.get('FASTPE_BACKEND', '')!r}; "
        f"FASTPE_REQUIRE_EXT={os.environ.get('FASTPE_REQUIRE_EXT', '')!r}; "
        f"backend fixture {BACKEND_PARAMS}"
        + ("; default-only: any_backend tests deselected" if DEFAULT_ONLY else "")
    ]


#: a module-level ``pytestmark = pytest.mark.any_backend`` (alone or first in a list)
_MODULE_MARK = re.compile(rb"^pytestmark\s*=\s*\[?\s*pytest\.mark\.any_backend\b", re.M)


def pytest_ignore_collect(collection_path, config):
    """In a default-only run, a test module marked ``any_backend`` as a whole is not even
    imported: every test in it would be deselected, and importing it (and what it imports)
    is most of what it would cost."""
    if not DEFAULT_ONLY or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    try:
        head = collection_path.read_bytes()
    except OSError:
        return None
    return True if _MODULE_MARK.search(head) else None


def pytest_collection_modifyitems(config, items):
    """In a default-only run, deselect the ``any_backend`` tests (the first run decided them)."""
    if not DEFAULT_ONLY:
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("any_backend") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request):
    """Every backend that loads here, in turn (only the default one in a default-only run)."""
    return request.param


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """A fresh temporary directory as the working directory (the CLI's default outputs land
    there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(params=FAST or ["python"])
def fast_backend(request):
    """Every compiled backend that loads here (the reference when there is none)."""
    return request.param


def signals_at_default() -> None:
    """``preexec_fn`` for a child that is sent real signals: SIGINT, SIGTERM and SIGHUP at
    their defaults.  A shell that starts the suite in the background (``cmd &``, ``nohup``)
    leaves SIGINT ignored, every child inherits that, and Python then installs no
    KeyboardInterrupt handler, so a test of Ctrl-C would wait for nothing."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def fastpe_env(*, keep_backend: bool = False, **extra: str) -> dict[str, str]:
    """Environment for a child interpreter that imports the same fastpe as this process.

    ``FASTPE_BACKEND`` is dropped (children choose explicitly) unless ``keep_backend``, which
    keeps this run's choice for a child that runs the default backend; ``PYTHONPATH`` points
    at the fastpe under test, so an uninstalled source tree works as well as an installed one.
    """
    env = dict(os.environ)
    env.pop("FASTPE_BACKEND", None)
    if keep_backend and "FASTPE_BACKEND" in os.environ:
        env["FASTPE_BACKEND"] = os.environ["FASTPE_BACKEND"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(fastpe.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env
