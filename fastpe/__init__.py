"""fastpe: exact positional encodings, fast.

``import fastpe`` is cheap: numba and the compiled extension load on first use, and so do
the parts a program may never call -- :func:`save_table` (the file writers and their
atomic writes) and :func:`info` -- and the submodules with a namespace of their own.
"""

from __future__ import annotations

from ._backends import available_backends
from .sinusoid import (
    DEFAULT_BASE,
    DEFAULT_MAX_LEN,
    PosEncConfig,
    add_,
    conformer_embedding,
    fairseq_embedding,
    fairseq_positions,
    forward,
    table,
    timestep,
    transformer_xl_embedding,
)

from ._version import __version__

#: functions of the package loaded on first use: name -> the module defining it
_LAZY_FUNCTIONS = {"save_table": "._io.save", "load_spec": "._io.save", "info": "._diagnostics",
                   "sandwich_bias": "._sandwich"}
#: submodules with their own namespace, loaded on first use
_LAZY_SUBMODULES = ("alibi", "relative", "rope", "grid", "dask", "time")


def __getattr__(name: str):
    import importlib

    if name in _LAZY_FUNCTIONS:
        value = getattr(importlib.import_module(_LAZY_FUNCTIONS[name], __name__), name)
        globals()[name] = value  # looked up once: later uses are plain attribute reads
        return value
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'fastpe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_FUNCTIONS) | set(_LAZY_SUBMODULES))


__all__ = [
    "PosEncConfig",
    "DEFAULT_MAX_LEN",
    "DEFAULT_BASE",
    "forward",
    "table",
    "save_table",
    "load_spec",
    "add_",
    "timestep",
    "fairseq_positions",
    "fairseq_embedding",
    "transformer_xl_embedding",
    "conformer_embedding",
    "sandwich_bias",
    "available_backends",
    "info",
    "__version__",
]
