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
