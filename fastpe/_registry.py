"""The one table of operations and backends.

Every backend module implements every operation listed in :data:`OPERATIONS`, under the
same name and signature.  Dispatch, the agreement tests and the benchmarks all read this
table; ``tests/test_registry.py`` fails when a backend lacks an operation.

Backend operation signatures (inputs already validated and converted):

``sinusoid_forward(positions, d_model, base, out)``
    ``positions``: C-contiguous ``uint32`` array ``(n,)``; ``out``: C-contiguous, writable
    ``float32`` array ``(n, d_model)``, filled in place.
``sinusoid_range(start, d_model, base, out)``
    as above with positions ``start, start + 1, ..., start + len(out) - 1`` (all ``< 2**32``);
    the table path, which needs no positions array.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Operation", "OPERATIONS", "BACKENDS", "BACKEND_MODULES"]


@dataclass(frozen=True)
class Operation:
    name: str
    summary: str


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("sinusoid_forward", "sinusoidal encoding of arbitrary u32 positions"),
        Operation("sinusoid_range", "sinusoidal encoding of a run of consecutive positions"),
    )
}

#: backend name -> module implementing the operations, in the automatic order.
#: cython first: it writes the same bits as numba at the same speed (faster on ``forward``)
#: and loads in ~20 ms, where importing numba and loading its cached kernels costs ~0.5 s,
#: which dominates a one-shot CLI run.
BACKEND_MODULES: dict[str, str] = {
    "cython": "fastpe._cython",
    "numba": "fastpe._numba",
    "python": "fastpe._python",
}

BACKENDS: tuple[str, ...] = tuple(BACKEND_MODULES)
