"""fastpe: exact positional encodings, fast.

``import fastpe`` is cheap: numba and the compiled extension load on first use.
"""

from __future__ import annotations

from ._backends import available_backends
from ._diagnostics import info
from ._io.save import load_spec, save_table
from .sinusoid import (
    DEFAULT_BASE,
    DEFAULT_MAX_LEN,
    PosEncConfig,
    add_,
    fairseq_embedding,
    fairseq_positions,
    forward,
    table,
    timestep,
)

from ._version import __version__


def __getattr__(name: str):
    # submodules with their own namespace load on first use, keeping `import fastpe` cheap
    if name in ("alibi", "relative", "rope", "grid", "dask"):
        import importlib

        return importlib.import_module(f"fastpe.{name}")
    raise AttributeError(f"module 'fastpe' has no attribute {name!r}")


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
    "available_backends",
    "info",
    "__version__",
]
