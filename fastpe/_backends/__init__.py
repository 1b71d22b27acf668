"""Loading and choosing backends: every backend keeps the contract of
:class:`fastpe._backends.registry.Backend`, and callers reach its operations only through
:func:`resolve` (or :func:`load`), calling them with keyword arguments.

``backend=None`` means: the ``FASTPE_BACKEND`` environment variable if set, else the first
backend of :data:`fastpe._backends.registry.BACKENDS` that loads here.  An unknown or unavailable
name is a :class:`ValueError` that says why.
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType

from .registry import BACKEND_MODULES, BACKENDS, Backend

__all__ = ["load", "available_backends", "resolve", "unavailable_reason", "ENV_VAR"]

ENV_VAR = "FASTPE_BACKEND"

_modules: dict[str, ModuleType] = {}
_failures: dict[str, str] = {}
_lock = threading.Lock()


def _try_load(name: str) -> ModuleType | None:
    with _lock:
        if name in _modules:
            return _modules[name]
        if name in _failures:
            return None
        try:
            module = importlib.import_module(BACKEND_MODULES[name])
        except ImportError as exc:
            _failures[name] = f"{type(exc).__name__}: {exc}"
            return None
        _modules[name] = module
        return module


def unavailable_reason(name: str) -> str | None:
    """``None`` when ``name`` loads here, else why not."""
    return None if _try_load(name) is not None else _failures.get(name, "not loaded")


def available_backends() -> list[str]:
    """Names of the backends that load in this process, fastest first."""
    return [name for name in BACKENDS if _try_load(name) is not None]


def _check_name(name, origin: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"backend must be a string or None, got {type(name).__name__}")
    key = name.strip().lower()
    if key not in BACKEND_MODULES:
        raise ValueError(
            f"{origin} {name!r} is not a fastpe backend; choose one of {', '.join(BACKENDS)}"
        )
    return key


def load(name: str, origin: str = "backend") -> Backend:
    key = _check_name(name, origin)
    module = _try_load(key)
    if module is None:
        raise ValueError(f"{origin} {key!r} is not available here: {_failures[key]}")
    return module


def resolve(backend: str | None) -> tuple[str, Backend]:
    """Return ``(name, module)`` for an explicit name, the environment, or the auto choice."""
    if type(backend) is str:  # a loaded backend by its own name: no lock (a dict read is atomic)
        module = _modules.get(backend)
        if module is not None:
            return backend, module
    if backend is not None:
        key = _check_name(backend, "backend")
        return key, load(key)
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        key = _check_name(env, ENV_VAR)
        return key, load(key, ENV_VAR)
    for name in BACKENDS:
        module = _modules.get(name) or _try_load(name)
        if module is not None:
            return name, module
    raise ValueError("no fastpe backend is available")  # unreachable: python always loads
