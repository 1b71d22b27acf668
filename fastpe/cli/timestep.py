"""``fastpe timestep``: write the sinusoidal embedding of real timesteps to a ``.npy``, ``.npz``
or ``.safetensors`` file.

The timesteps are ``0 .. N-1`` (``--steps``), a comma-separated list (``--t``) or a 1-D
``.npy`` file (``--from``); the numbers come from :func:`fastpe.timestep`.  Writing (and
bfloat16's storage as ``uint16`` bits in ``.npy`` and ``.npz``) is shared with ``fastpe grid``.

The spec records the timesteps as ``{"arange": N}`` for ``--steps N``, else as the list of
their float64 values; past :data:`SPEC_VALUES` of them, as ``{"count": N, "sha256": HEX}``,
the SHA-256 of their little-endian float64 bytes.
"""

from __future__ import annotations

import hashlib
import math

import click

from .._validate import POSITION_LIMIT
from .._plans.frequencies import DEFAULT_BASE
from . import options
from ._write import check_size, default_path, dtype_opt, entry, output_opt, summary, write_arrays

__all__ = ["timestep", "parse_values", "read_values", "timesteps_spec", "ENTRY", "SPEC_VALUES"]

#: the name of the array in the file
ENTRY = "embedding"
#: timesteps a spec lists at most; more are recorded by their count and digest
SPEC_VALUES = 1 << 16

#: the three ways to give timesteps, as their options are spelled
_SOURCES = ("--steps", "--t", "--from")


def parse_values(text: str) -> list[float]:
    """``"0,0.5,999"`` as floats (each the nearest float64, as Python reads it); one error
    line naming the offending item otherwise."""
    items = text.split(",")
    values = []
    for item in items:
        item = item.strip()
        if not item:
            raise click.BadParameter(f"empty item in {text!r}; give comma-separated numbers like 0,0.5,999")
        try:
            value = float(item)
        except ValueError:
            raise click.BadParameter(f"{item!r} is not a number") from None
        if not math.isfinite(value):
            raise click.BadParameter(f"{item!r} is not finite")
        values.append(value)
    return values


def read_values(path: str):
    """The 1-D array of real numbers stored in the ``.npy`` file ``path``."""
    try:
        # memory-mapped: the shape and dtype are checked, and the output's size, before the
        # values are read
        arr = options.open_npy(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if arr.ndim != 1 or arr.dtype.kind not in "iuf":
        raise click.BadParameter(f"{path!r} holds {arr.dtype} of shape {arr.shape}; give a 1-D array of real numbers")
    if arr.size == 0:
        raise click.BadParameter(f"{path!r} holds no timesteps")
    return arr


def _steps(ctx, param, value):
    if value is not None and not 1 <= value <= POSITION_LIMIT:
        raise click.BadParameter(f"must be between 1 and 2**32, got {value}")
    return value


def _d_model(ctx, param, value):
    """``--d-model``: the library's range for it."""
    from .._validate import MAX_D_MODEL, check_int

    try:
        return check_int("d_model", value, low=2, high=MAX_D_MODEL)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc).removeprefix("d_model ")) from None


def _values(ctx, param, value):
    return None if value is None else parse_values(value)


def _from(ctx, param, value):
    if value is None:
        return None
    ctx.meta["fastpe.timestep.from"] = value  # to name the file if its values are refused
    return read_values(value)


def timesteps_spec(steps, t):
    """The timesteps as a spec records them (see the module's docstring); ``t`` may be a
    memory-mapped file, read a block at a time."""
    import numpy as np

    if steps is not None:
        return {"arange": steps}
    if len(t) <= SPEC_VALUES:
        return np.asarray(t, dtype=np.float64).tolist()
    digest = hashlib.sha256()
    for start in range(0, len(t), SPEC_VALUES):
        digest.update(np.asarray(t[start:start + SPEC_VALUES], dtype="<f8").tobytes())
    return {"count": len(t), "sha256": digest.hexdigest()}


def _smaller(steps, d_model: int, base: float, flip_sin_to_cos: bool, shift: float, scale: float,
             dtype: str) -> str:
    """What to ask for instead of an embedding too large for memory: fewer timesteps or
    columns; for --steps with an even D, shift 0 or 1 and scale 1, the same values are a
    halves table, which ``fastpe table`` writes a chunk at a time whatever its size."""
    advice = "ask for fewer timesteps or a smaller --d-model"
    if steps is None or flip_sin_to_cos or scale != 1.0 or shift not in (0.0, 1.0) or d_model % 2 or not base > 1:
        return advice
    table = (f"fastpe table --d-model {d_model} --max-len {steps} --layout halves "
             f"--denominator {'half-1' if shift == 1.0 else 'd'}"
             + (f" --base {base!r}" if base != DEFAULT_BASE else "")
             + (f" --dtype {dtype}" if dtype != "float32" else ""))
    return f"{advice}; {table} writes the same values a chunk at a time"


@click.command(short_help="Write a timestep embedding (diffusion) to .npy, .npz or .safetensors.")
@click.option("--d-model", "d_model", type=int, required=True, callback=_d_model, metavar="D",
              help="Columns, >= 2; an odd D ends with a zero column.")
@click.option("--steps", type=int, default=None, callback=_steps, metavar="N", help="Timesteps 0, 1, ..., N-1.")
@click.option("--t", "values", default=None, callback=_values, metavar="VALUES",
              help="Comma-separated real timesteps, e.g. 0,0.5,999 (--t=-1,1 for a negative first one).")
@click.option("--from", "from_file", type=click.Path(exists=True, dir_okay=False), default=None, callback=_from,
              metavar="FILE.npy", help="A .npy file holding a 1-D array of real timesteps.")
@click.option("--base", type=float, default=DEFAULT_BASE, show_default=True, metavar="B",
              help="Frequency base (diffusers' max_period): w_k = B ** (-k / (D/2 - shift)); finite, >= 1.")
@click.option("--flip-sin-to-cos", is_flag=True, help="Columns [cos | sin] instead of [sin | cos].")
@click.option("--shift", type=float, default=1.0, show_default=True, metavar="S",
              help="diffusers' downscale_freq_shift: 1 the fairseq form, 0 the halves form.")
@click.option("--scale", type=float, default=1.0, show_default=True, metavar="C",
              help="Multiplies every timestep before the sinusoid; finite, > 0.")
@dtype_opt
@options.backend_opt
@output_opt("fastpe timestep", "timestep_<N>x<D>.npy, N the number of timesteps,")
@click.pass_context
def timestep(ctx: click.Context, d_model: int, steps, values, from_file, base: float, flip_sin_to_cos: bool,
             shift: float, scale: float, dtype: str, backend, output) -> None:
    """Write the sinusoidal embedding of timesteps (diffusers' get_timestep_embedding).

    Give the timesteps with exactly one of --steps, --t or --from.  The array is (N, D):
    exactly fastpe.timestep(t, D, base=B, flip_sin_to_cos=..., shift=S, scale=C),
    every timestep taken at its exact float64 value (|t| < 2**32).  Prints one summary
    line (-q: nothing).

    The file records its spec (PATH.json beside a .npy, inside a .npz or .safetensors).  It
    is written atomically; on any error (or Ctrl-C) no file is left and an existing one is
    kept.  In .npy and .npz bfloat16 is stored as its raw bits, dtype uint16: read it back
    with numpy.load(PATH).view(ml_dtypes.bfloat16).

    \b
    Examples:
      fastpe timestep --d-model 320 --steps 1000 --flip-sin-to-cos --shift 0 -o sd_time.npy
      fastpe timestep --d-model 256 --t 0,0.5,999.25 --dtype float64
      fastpe timestep --d-model 128 --from sigmas.npy --scale 1000
    """
    import numpy as np

    import fastpe

    from .. import _backends
    from .._io.writers import make_spec

    given = [opt for opt, v in zip(_SOURCES, (steps, values, from_file)) if v is not None]
    if len(given) != 1:
        got = f" (got {', '.join(given[:-1])} and {given[-1]})" if given else ""
        raise click.UsageError(f"give exactly one of --steps, --t or --from{got}")
    n = steps if steps is not None else len(values) if values is not None else from_file.shape[0]
    dtype = dtype.lower()
    path = output or default_path(f"timestep_{n}x{d_model}.npy", "fastpe timestep")
    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
    params = dict(t=timesteps_spec(steps, values if values is not None else from_file), d_model=d_model, base=base,
                  flip_sin_to_cos=flip_sin_to_cos, shift=shift, scale=scale, dtype=dtype)
    spec = make_spec("timestep", params)
    entries = [entry(ENTRY, (n, d_model), dtype)]
    # the sizes before anything is allocated, --steps' own float64 timesteps included
    check_size(path, entries, spec, transient=8 * n if steps is not None else 0,
               advice=_smaller(steps, d_model, base, flip_sin_to_cos, shift, scale, dtype))
    if steps is not None:
        t = np.arange(steps, dtype=np.float64)
    else:
        t = np.asarray(values if values is not None else from_file)
    if from_file is not None:  # the file's values, checked as the library will, named by the option
        from .._validate import check_real_positions

        try:
            check_real_positions(t, "t")
        except (TypeError, ValueError) as exc:
            where = ctx.meta["fastpe.timestep.from"]
            raise click.BadParameter(f"{where!r}: {exc}", param_hint="'--from'") from None
    arrays, compute_s, write_s = write_arrays(
        path, entries, lambda: {ENTRY: fastpe.timestep(**{**params, "t": t}, backend=name)}, spec)
    array = arrays[ENTRY]
    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        what = f"t {t.min():g} .. {t.max():g}, {'cos|sin' if flip_sin_to_cos else 'sin|cos'}"
        click.echo(summary(path, array, what, name, compute_s, write_s))

