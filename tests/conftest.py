"""Shared fixtures.  Hard inputs live in ``tests/inputs.py``; backends come from the registry."""

from __future__ import annotations

import os

import pytest

import fastpe
from fastpe._backends.registry import BACKENDS

#: backends that load here (the ``python`` reference always does)
AVAILABLE = fastpe.available_backends()
#: the compiled backends among them
FAST = [b for b in AVAILABLE if b != "python"]

#: ``FASTPE_TEST_BACKENDS=default`` (``make test``'s runs after the first): the ``backend``
#: fixture takes only ``$FASTPE_BACKEND``.  The first run crosses every backend already;
#: the later ones are there for the paths that use the default backend.
_DEFAULT_ONLY = os.environ.get("FASTPE_TEST_BACKENDS", "") == "default"
BACKEND_PARAMS = (
    [os.environ["FASTPE_BACKEND"]]
    if _DEFAULT_ONLY and os.environ.get("FASTPE_BACKEND") in AVAILABLE
    else AVAILABLE
)


def pytest_report_header(config):
    return [
        f"fastpe {fastpe.__version__}: backends available {AVAILABLE} of {list(BACKENDS)}; "
        f"FASTPE_BACKEND={os.environ.get('FASTPE_BACKEND', '')!r}; "
        f"FASTPE_REQUIRE_EXT={os.environ.get('FASTPE_REQUIRE_EXT', '')!r}; "
        f"backend fixture {BACKEND_PARAMS}"
    ]


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


def fastpe_env(**extra: str) -> dict[str, str]:
    """Environment for a child interpreter that imports the same fastpe as this process.

    ``FASTPE_BACKEND`` is dropped (children choose explicitly); ``PYTHONPATH`` points at the
    fastpe under test, so an uninstalled source tree works as well as an installed one.
    """
    env = dict(os.environ)
    env.pop("FASTPE_BACKEND", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(fastpe.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env
