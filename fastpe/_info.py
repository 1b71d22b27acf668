"""What this installation can do: what ``fastpe info`` prints."""

from __future__ import annotations

import os

from . import _backends
from ._registry import BACKENDS

__all__ = ["info"]


def info() -> dict:
    """Version, backends (available or why not), the default choice and numba's threading.

    A ``$FASTPE_BACKEND`` that names no usable backend is reported under ``env_error``
    (and ``default`` is then the automatic choice) instead of raising.

    Loads every backend to find out, so it imports numba when numba is installed.
    """
    from . import __version__

    backends = {name: _backends.unavailable_reason(name) for name in BACKENDS}
    env_error = None
    try:
        default, _ = _backends.resolve(None)
    except (TypeError, ValueError) as exc:  # a bad $FASTPE_BACKEND: report it, don't fail
        env_error = str(exc)
        default = next(name for name, why in backends.items() if why is None)
    result = {
        "version": __version__,
        "backends": {name: ("available" if why is None else why) for name, why in backends.items()},
        "available": [name for name, why in backends.items() if why is None],
        "default": default,
        "env_backend": os.environ.get(_backends.ENV_VAR) or None,
        "env_error": env_error,
        "threading_layer": None,
        "threading_note": None,
        "threads": None,
        "cython_threads": None,
        "cython_build": None,
    }
    if backends.get("cython") is None:
        cython_backend = _backends.load("cython")
        result["cython_threads"] = cython_backend.threads()
        result["cython_build"] = cython_backend.build_info()
    if backends.get("numba") is None:
        numba_backend = _backends.load("numba")
        result["threading_layer"] = numba_backend.threading_layer()
        result["threading_note"] = numba_backend.THREADING.note
        result["threads"] = numba_backend.num_threads()
    else:
        result["threads"] = os.cpu_count()
    return result
