"""What the commands reading a ``.npy`` of timestamps share (``fourier``, ``calendar``): the
option's reader, the units, the dtype option's reader, and how a spec records the ticks."""

from __future__ import annotations

import hashlib

import click

from . import options

__all__ = ["UNITS", "timestamps_handler", "dtype_handler", "ticks_spec"]

#: the units of integer timestamps (fastpe.time's, coarsest first)
UNITS = ("W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as")


def timestamps_handler(ctx, param, value):
    """``--timestamps``: a ``.npy`` of datetime64 or integers, memory-mapped (read once the
    output's size is checked)."""
    try:
        arr = options.open_npy(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if arr.dtype.kind not in "Miu":
        raise click.BadParameter(f"{value!r} holds {arr.dtype}; give datetime64 values, or integers with --unit")
    return arr


def dtype_handler(ctx, param, value):
    """``--dtype``: a name in any case; ``bfloat16`` as every command reads it."""
    if value is None:
        return None
    if value.lower() == "bfloat16":
        return options.dtype_handler(ctx, param, value)
    return value.lower()


def ticks_spec(ticks, limit: int):
    """The ticks as a spec records them: their list, or past ``limit`` of them
    ``{"shape": [...], "sha256": HEX}``, the SHA-256 of the little-endian int64 ticks."""
    import numpy as np

    if ticks.size <= limit:
        return np.asarray(ticks, dtype=np.int64).tolist()
    return {"shape": list(ticks.shape), "sha256": hashlib.sha256(np.asarray(ticks, dtype="<i8").tobytes()).hexdigest()}
