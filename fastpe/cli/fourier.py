"""``fastpe fourier``: write Prophet's Fourier seasonality features of the timestamps in a
``.npy`` to a ``.npy``, ``.npz`` or ``.safetensors`` file.

The timestamps are a ``.npy`` of ``datetime64`` (any unit) or of integers counted in
``--unit`` (or ``--timestamp-unit``); the numbers come from
:func:`fastpe.time.fourier_features`.  The spec records the timestamps as their integer
ticks beside ``timestamp_unit`` (what ``fourier_features(ticks, ..., timestamp_unit=U)``
reads back), past :data:`SPEC_VALUES` of them as ``{"shape": [...], "sha256": HEX}``, the
SHA-256 of the little-endian int64 ticks.
"""

from __future__ import annotations

import click

from . import options
from ._timestamps import UNITS, dtype_handler, ticks_spec, timestamps_handler
from ._write import check_size, default_path, entry, output_opt, summary, write_arrays

__all__ = ["fourier", "ENTRY", "SPEC_VALUES", "DTYPE_CHOICES"]

#: the name of the array in the file
ENTRY = "features"
#: timestamps a spec lists at most; more are recorded by their shape and digest
SPEC_VALUES = 1 << 16
#: the output dtypes: Prophet's float64 first
DTYPE_CHOICES = ("float64", "float32", "float16", "bfloat16")


def _period(value):
    from .._validate import check_positive

    return check_positive("period", value)


def _order(value):
    from .._validate import check_int
    from .._plans.time import MAX_ORDER

    return check_int("order", value, low=1, high=MAX_ORDER)


@click.command("fourier", short_help="Write Prophet's Fourier seasonality features of timestamps to .npy, .npz "
                                     "or .safetensors.")
@click.option("--timestamps", "timestamps", required=True, callback=timestamps_handler, metavar="NPY",
              help="A .npy of datetime64 values (any unit), or of integers counted since 1970-01-01 in "
                   "--timestamp-unit (default: --unit).")
@click.option("--period", "period", type=float, required=True, callback=options.library_check("period", _period),
              metavar="P", help="The period in --unit (365.25, 7, 30.5, 1 ...), taken exactly as its double.")
@click.option("--order", "order", type=int, required=True, callback=options.library_check("order", _order),
              metavar="N", help="Harmonics k = 1 .. N: 2N columns, sin then cos of each.")
@click.option("--unit", "unit", type=click.Choice(UNITS), default="D", show_default=True,
              help="The unit of --period (and of integer timestamps).")
@click.option("--timestamp-unit", "timestamp_unit", type=click.Choice(UNITS), default=None,
              help="The unit of integer timestamps when it is not --unit (refused with datetime64 ones).")
@click.option("--dtype", type=click.Choice(DTYPE_CHOICES, case_sensitive=False), default="float64",
              show_default=True, callback=dtype_handler, help="Output dtype; each value rounded once.")
@options.backend_opt
@output_opt("fastpe fourier", "fourier_<P>_<N>.npy")
@click.pass_context
def fourier(ctx: click.Context, timestamps, period: float, order: int, unit: str, timestamp_unit, dtype: str,
            backend, output) -> None:
    """Write Prophet's Fourier seasonality features of every timestamp: an array of the
    timestamps' shape plus 2N columns.

    Exactly fastpe.time.fourier_features(timestamps, P, N, unit=U, dtype=...): column
    2(k-1) sin(2 pi k t / P), column 2(k-1)+1 its cosine, t the exact time since 1970 in U.
    Prints one summary line (-q: nothing).  The file records its spec (PATH.json beside a
    .npy, inside a .npz or .safetensors).  It is written atomically; on any error (or
    Ctrl-C) no file is left and an existing one is kept.

    \b
    Examples:
      fastpe fourier --timestamps stamps.npy --period 365.25 --order 10 -o yearly.npy
      fastpe fourier --timestamps ns.npy --timestamp-unit ns --period 7 --order 3 --dtype float32
    """
    import numpy as np

    from .. import _backends
    from .._io.writers import make_spec
    from ..time._timestamps import check_timestamps

    if timestamps.dtype.kind == "M" and timestamp_unit is not None:
        raise options.InputError("--timestamp-unit is for integer timestamps; datetime64 values bring their own unit")
    safe = f"{period:g}".replace(".", "_").replace("-", "m").replace("+", "")
    path = output or default_path(f"fourier_{safe}_{order}.npy", "fastpe fourier")
    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
    shape = tuple(timestamps.shape) + (2 * order,)
    entries = [entry(ENTRY, shape, dtype)]
    check_size(path, entries, {}, advice="give fewer timestamps or a lower --order",
               transient=timestamps.size * 8, space=False)
    with options.library_errors():
        ticks, u = check_timestamps(np.asarray(timestamps), "--timestamps", timestamp_unit or unit)
    params = dict(timestamps=ticks_spec(ticks, SPEC_VALUES), period=period, order=order, unit=unit, timestamp_unit=u,
                  dtype=dtype)
    spec = make_spec("time.fourier_features", params)
    check_size(path, entries, spec, advice="give fewer timestamps or a lower --order")

    def compute():
        from ..time import fourier_features

        return {ENTRY: fourier_features(ticks, period, order, unit=unit, timestamp_unit=u, dtype=dtype,
                                        backend=name)}

    arrays, compute_s, write_s = write_arrays(path, entries, compute, spec)
    array = arrays[ENTRY]
    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        what = f"Prophet Fourier features, period {period:g} {unit}, order {order}, timestamps in {u}"
        click.echo(summary(path, array, what, name, compute_s, write_s))
