"""``fastpe grid``: write a 2-D (image) or 3-D (video) sin-cos position grid to a ``.npy``,
``.npz`` or ``.safetensors`` file.

The numbers come from :mod:`fastpe.grid`; this module parses, names the file and writes it
(through :mod:`fastpe.cli._write` and the format's writer).
"""

from __future__ import annotations

import math

import click

from .._validate import POSITION_LIMIT
from . import options
from ._write import check_size, default_path, dtype_opt, entry, output_opt, summary, write_arrays

__all__ = ["grid", "ENTRY"]

#: the name of the array in the file
ENTRY = "grid"


def _size(ctx, param, value):
    """A grid side: 1 .. 2**32 (the positions are 0 .. size-1)."""
    if value is not None and not 1 <= value <= POSITION_LIMIT:
        raise click.BadParameter(f"must be between 1 and 2**32, got {value}")
    return value


def _d_model(ctx, param, value):
    """``--d-model``: the library's range for it (the divisibility is checked with the grid)."""
    from .._validate import MAX_D_MODEL, check_int

    try:
        return check_int("d_model", value, low=1, high=MAX_D_MODEL)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc).removeprefix("d_model ")) from None


@click.command(short_help="Write a 2-D/3-D sin-cos grid (ViT, MAE, video) to .npy, .npz or .safetensors.")
@click.option("--height", type=int, required=True, callback=_size, metavar="H", help="Rows of the grid.")
@click.option("--width", type=int, required=True, callback=_size, metavar="W", help="Columns of the grid.")
@click.option("--d-model", "d_model", type=int, required=True, callback=_d_model, metavar="D",
              help="Channels per token; divisible by 4 (2-D) or 6 (3-D).")
@click.option("--frames", type=int, default=None, callback=_size, metavar="T",
              help="Frames: makes a 3-D (video) grid of T x H x W tokens.")
@click.option("--order", type=click.Choice(["mae", "timm"], case_sensitive=False), default="mae",
              show_default=True, help="Channel order: MAE's [sin x|cos x|sin y|cos y] or timm's "
              "[sin y|sin x|cos y|cos x].")
@click.option("--cls-token", is_flag=True, help="Prepend an all-zero row for the class token, as MAE does.")
@options.base_opt
@dtype_opt
@options.backend_opt
@output_opt("fastpe grid", "grid_<H>x<W>x<D>.npy (3-D: grid_<T>x<H>x<W>x<D>.npy)")
@click.pass_context
def grid(ctx: click.Context, height: int, width: int, d_model: int, frames, order: str, cls_token: bool,
         base: float, dtype: str, backend, output) -> None:
    """Write the sin-cos position embedding of an H x W grid (or T x H x W with --frames).

    The array has one row per token in row-major order (frame, then row, then column),
    plus a leading zero row with --cls-token, and D columns: exactly
    fastpe.grid.sincos_2d(H, W, D, ...) or fastpe.grid.sincos_3d(T, H, W, D, ...).  Prints
    one summary line (-q: nothing).

    The file records its spec (PATH.json beside a .npy, inside a .npz or .safetensors).  It
    is written atomically; on any error (or Ctrl-C) no file is left and an existing one is
    kept.  In .npy and .npz bfloat16 is stored as its raw bits, dtype uint16: read it back
    with numpy.load(PATH).view(ml_dtypes.bfloat16).

    \b
    Examples:
      fastpe grid --height 14 --width 14 --d-model 768 --cls-token -o vit_b16.npy
      fastpe grid --frames 8 --height 16 --width 16 --d-model 384 --order timm
    """
    from .. import _backends
    from .. import grid as fg
    from .._io.writers import make_spec

    order, dtype = order.lower(), dtype.lower()
    sizes = (height, width) if frames is None else (frames, height, width)
    path = output or default_path(f"grid_{'x'.join(map(str, sizes))}x{d_model}.npy", "fastpe grid")
    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
    build, function = (fg.sincos_2d, "grid.sincos_2d") if frames is None else (fg.sincos_3d, "grid.sincos_3d")
    params = dict(zip(("height", "width") if frames is None else ("frames", "height", "width"), sizes),
                  d_model=d_model, base=base, order=order, cls_token=cls_token, dtype=dtype)
    spec = make_spec(function, params)
    tokens = math.prod(sizes)
    entries = [entry(ENTRY, (tokens + cls_token, d_model), dtype)]
    # past MAX_TOKENS the library refuses the grid itself, before allocating anything (and
    # before the free space is of interest)
    check_size(path, entries, spec, advice="ask for a smaller grid or --d-model", space=tokens <= fg.MAX_TOKENS)
    arrays, compute_s, write_s = write_arrays(path, entries, lambda: {ENTRY: build(**params, backend=name)},
                                              spec)
    array = arrays[ENTRY]
    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        what = f"{len(sizes)}-D grid {'x'.join(map(str, sizes))}, order {order}" + (", cls token" if cls_token else "")
        click.echo(summary(path, array, what, name, compute_s, write_s))
