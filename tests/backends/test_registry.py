"""Choosing a backend: the automatic order, the environment, clear errors.  (Every
operation on every backend: ``test_contract.py``.)"""

from __future__ import annotations

import os

import pytest

import fastpe
from fastpe import _backends


@pytest.mark.any_backend
def test_python_backend_always_loads():
    assert "python" in fastpe.available_backends()


@pytest.mark.any_backend
def test_required_extension_is_present():
    """CI sets FASTPE_REQUIRE_EXT=1: then a missing compiled backend is a failure."""
    if os.environ.get("FASTPE_REQUIRE_EXT") != "1":
        pytest.skip("FASTPE_REQUIRE_EXT is not set")
    assert "cython" in fastpe.available_backends(), _backends.unavailable_reason("cython")
    assert "numba" in fastpe.available_backends(), _backends.unavailable_reason("numba")


@pytest.mark.any_backend
def test_auto_choice_is_the_first_available(monkeypatch):
    monkeypatch.delenv(_backends.ENV_VAR, raising=False)
    name, _ = _backends.resolve(None)
    assert name == fastpe.available_backends()[0]


@pytest.mark.any_backend
def test_environment_variable_overrides(monkeypatch):
    monkeypatch.setenv(_backends.ENV_VAR, "python")
    assert _backends.resolve(None)[0] == "python"
    monkeypatch.setenv(_backends.ENV_VAR, "  NUMBA ")
    assert _backends.resolve(None)[0] == "numba" or "numba" not in fastpe.available_backends()


@pytest.mark.any_backend
def test_environment_variable_unknown_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(_backends.ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="FASTPE_BACKEND 'cuda' is not a fastpe backend"):
        fastpe.table(4, 2)


@pytest.mark.any_backend
def test_unavailable_backend_says_why(monkeypatch):
    monkeypatch.setitem(_backends._failures, "cython", "ImportError: no compiled extension")
    monkeypatch.delitem(_backends._modules, "cython", raising=False)
    with pytest.raises(ValueError, match="backend 'cython' is not available here: ImportError"):
        fastpe.table(4, 2, backend="cython")


def test_info_reports_backends_and_threading():
    data = fastpe.info()
    assert data["version"] == fastpe.__version__
    assert data["available"] == fastpe.available_backends()
    assert data["default"] in data["available"]
    if "numba" in data["available"]:
        assert data["threading_layer"] in ("tbb", "omp", "workqueue")
        assert data["threads"] >= 1
