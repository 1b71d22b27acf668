"""``fastpe table``: write the sinusoidal table to a ``.npy`` file."""

from __future__ import annotations

import time

import click

from . import options


@click.command(short_help="Write the (MAX_LEN, D_MODEL) float32 table to a .npy file.")
@options.d_model_opt
@options.max_len_opt
@options.base_opt
@options.backend_opt
@options.output_opt
@click.pass_context
def table(ctx: click.Context, d_model: int, max_len: int, base: float, backend, output) -> None:
    """Write the sinusoidal table for positions 0 .. MAX_LEN-1 to a .npy file.

    The array is float32 of shape (MAX_LEN, D_MODEL), exactly fastpe.table(D_MODEL,
    MAX_LEN, base=B); load it with numpy.load.  Prints one summary line: path, shape,
    dtype, size, backend and timings (-q: nothing).

    The file is written atomically: to a temporary file in the same directory, then
    renamed.  An existing file at the path is replaced, like numpy.save does; should
    anything fail (or Ctrl-C), no partial file is left and an existing one is kept.

    \b
    Example:
      fastpe table --d-model 512 --max-len 2048 -o pe.npy
    """
    import numpy as np

    import fastpe

    from .. import _backends
    from .._atomic import atomic_write

    path = output
    if path is None:
        try:
            path = options.check_output_path(f"pe_{max_len}x{d_model}.npy")
        except click.BadParameter as exc:
            raise options.InputError(f"default output path: {exc.message}; use -o") from None
    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
    # the temporary file is created first, so an unwritable place fails before the work
    try:
        with atomic_write(path) as f:
            start = time.perf_counter()
            with options.library_errors():
                array = fastpe.table(d_model, max_len, base=base, backend=name)
            computed = time.perf_counter()
            np.save(f, array, allow_pickle=False)
    except OSError as exc:  # e.g. a full disk; nothing is left behind (exit status 1)
        raise click.ClickException(f"could not write {path}: {exc}") from exc
    written = time.perf_counter()

    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        click.echo(
            f"wrote {path}: {array.dtype} {array.shape}, {options.human_size(array.nbytes)}, backend {name}, "
            f"{options.milliseconds(computed - start)} compute + {options.milliseconds(written - computed)} write"
        )
