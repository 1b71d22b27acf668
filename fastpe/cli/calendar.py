"""``fastpe calendar``: write GluonTS' calendar features of the timestamps in a ``.npy`` to a
``.npy``, ``.npz`` or ``.safetensors`` file.

The timestamps are a ``.npy`` of ``datetime64`` (any unit) or of integers with ``--unit``;
the numbers come from :func:`fastpe.time.calendar_features`.  The spec records the
timestamps as the list of their integer ticks beside their ``unit`` (what
``calendar_features(ticks, unit=U)`` reads back), past :data:`SPEC_VALUES` of them as
``{"shape": [...], "sha256": HEX}``, the SHA-256 of the little-endian int64 ticks.
"""

from __future__ import annotations

import click

from . import options
from ._timestamps import UNITS, dtype_handler, ticks_spec, timestamps_handler
from ._write import check_size, default_path, entry, output_opt, summary, write_arrays

__all__ = ["calendar", "timestamps_spec", "ENTRY", "SPEC_VALUES", "DTYPE_CHOICES"]

#: the name of the array in the file
ENTRY = "features"
#: timestamps a spec lists at most; more are recorded by their shape and digest
SPEC_VALUES = 1 << 16
#: the output dtypes: GluonTS' float32 first; the integer ones hold the --index features only
DTYPE_CHOICES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")


def _freq(value):
    from ..time._calendar import features_for_freq

    features_for_freq(value)
    return value


def timestamps_spec(ticks):
    """The timestamps' ticks as a spec records them (see the module's docstring)."""
    return ticks_spec(ticks, SPEC_VALUES)


@click.command("calendar", short_help="Write GluonTS calendar features of timestamps to .npy, .npz or .safetensors.")
@click.option("--timestamps", "timestamps", required=True, callback=timestamps_handler, metavar="NPY",
              help="A .npy of datetime64 values (any unit), or of integers counted in --unit since 1970-01-01.")
@click.option("--freq", "freq", required=True, callback=options.library_check("freq", _freq), metavar="FREQ",
              help="pandas frequency string: its GluonTS features (H: hour of day, day of week, day of month, "
                   "day of year).")
@click.option("--index", "index", is_flag=True, help="The *Index features: the 0-based raw values.")
@click.option("--unit", "unit", type=click.Choice(UNITS), default=None,
              help="The unit of integer timestamps (refused with datetime64 ones, which bring their own).")
@click.option("--dtype", type=click.Choice(DTYPE_CHOICES, case_sensitive=False), default="float32",
              show_default=True, callback=dtype_handler,
              help="Output dtype; each value rounded once; int32/int64 with --index only.")
@options.backend_opt
@output_opt("fastpe calendar", "calendar_<FREQ>.npy")
@click.pass_context
def calendar(ctx: click.Context, timestamps, freq: str, index: bool, unit, dtype: str, backend, output) -> None:
    """Write GluonTS' time features of every timestamp: an array of the timestamps' shape
    plus one axis of features.

    Exactly fastpe.time.calendar_features(timestamps, FREQ, index=--index, dtype=...):
    GluonTS' time_features_from_frequency_str(FREQ), each value (2a - b) / (2b) rounded once.
    Prints one summary line (-q: nothing).  The file records its spec (PATH.json beside a
    .npy, inside a .npz or .safetensors).  It is written atomically; on any error (or
    Ctrl-C) no file is left and an existing one is kept.

    \b
    Examples:
      fastpe calendar --timestamps stamps.npy --freq H -o features.npy
      fastpe calendar --timestamps seconds.npy --unit s --freq 15min --index --dtype int32
    """
    import numpy as np

    from .. import _backends
    from .._io.writers import make_spec
    from ..time._calendar import features_for_freq
    from ..time._timestamps import check_timestamps

    if timestamps.dtype.kind == "M" and unit is not None:
        raise options.InputError("--unit is for integer timestamps; datetime64 values bring their own unit")
    if timestamps.dtype.kind != "M" and unit is None:
        raise options.InputError(f"--timestamps holds {timestamps.dtype} counts, not dates: give --unit "
                                 f"(the length of one tick, e.g. s or ns)")
    safe = "".join(c if c.isalnum() else "_" for c in freq)
    path = output or default_path(f"calendar_{safe}.npy", "fastpe calendar")
    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
        n_features = len(features_for_freq(freq))
        if dtype in ("int32", "int64") and not index:
            raise ValueError("dtype int32/int64 holds the --index features only")
    shape = tuple(timestamps.shape) + (n_features,)
    entries = [entry(ENTRY, shape, dtype)]
    check_size(path, entries, {}, advice="give fewer timestamps", transient=timestamps.size * 8 * (n_features + 1),
               space=False)
    with options.library_errors():
        ticks, u = check_timestamps(np.asarray(timestamps), "--timestamps", unit)
    params = dict(timestamps=timestamps_spec(ticks), freq=freq, index=index, unit=u, dtype=dtype)
    spec = make_spec("time.calendar_features", params)
    check_size(path, entries, spec, advice="give fewer timestamps")

    def compute():
        from ..time import calendar_features

        return {ENTRY: calendar_features(ticks, freq, index=index, unit=u, dtype=dtype, backend=name)}

    arrays, compute_s, write_s = write_arrays(path, entries, compute, spec)
    array = arrays[ENTRY]
    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        what = f"GluonTS {'index ' if index else ''}features of freq {freq} ({n_features}), unit {u}"
        click.echo(summary(path, array, what, name, compute_s, write_s))
