"""Shared fixtures.  Hard inputs live in ``tests/inputs.py``; backends come from the registry."""

from __future__ import annotations

import os

import pytest

import fastpe
from fastpe._registry import BACKENDS

#: backends that load here (the ``python`` reference always does)
AVAILABLE = fastpe.available_backends()
#: the compiled backends among them
FAST = [b for b in AVAILABLE if b != "python"]


def pytest_report_header(config):
    return [
        f"fastpe {fastpe.__version__}: backends available {AVAILABLE} of {list(BACKENDS)}; "
        f"FASTPE_BACKEND={os.environ.get('FASTPE_BACKEND', '')!r}; "
        f"FASTPE_REQUIRE_EXT={os.environ.get('FASTPE_REQUIRE_EXT', '')!r}"
    ]


@pytest.fixture(params=AVAILABLE)
def backend(request):
    """Every backend that loads here, in turn."""
    return request.param


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
