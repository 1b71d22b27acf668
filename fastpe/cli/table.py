"""``fastpe table``: stream the sinusoidal table into a ``.npy``, ``.npz`` or ``.safetensors``
file, in memory-bounded chunks (:func:`fastpe.save_table`), or re-run a recorded spec.

Every file records its spec (``PATH.json`` next to a ``.npy``, an entry inside the others);
``--from-spec`` reads one back.  Options given on the command line together with
``--from-spec`` override the spec's values, as ``fastpe rope``'s options override its
``--scaling`` file: the new file records what was actually written.
"""

from __future__ import annotations

import os
import sys

import click
from click.core import ParameterSource

from . import options
from ._write import default_path, dtype_text, output_opt

__all__ = ["table"]

#: the table's parameters (save_table's keywords that a spec records), as options
_PARAMS = ("d_model", "max_len", "base", "layout", "denominator", "min_timescale", "max_timescale", "dtype")
#: library argument name -> option, to name the option a library error is about
_FLAGS = {name: "--" + name.replace("_", "-") for name in _PARAMS} | {"chunk_bytes": "--chunk-mb"}
_FLAGS |= {"start": "--start", "step": "--step"}


def _chunk_handler(ctx, param, value):
    if value is None:
        return None
    if not value > 0 or value != value or value == float("inf"):
        raise click.BadParameter(f"must be a finite number of MiB > 0, got {value!r}")
    return value


def _spec_handler(ctx, param, value):
    """``--from-spec``: a spec file, a ``.npy`` (its sidecar), ``.npz`` or ``.safetensors``."""
    if value is None:
        return None
    from .._io.save import load_spec
    from .._io.writers import WRITERS

    try:
        # what load_spec will read (a .npy's spec is its sidecar) must be a regular file: a
        # pipe would block the command forever
        writer = next((w for suffix, w in WRITERS.items() if value.lower().endswith(suffix)), None)
        source = (writer.sidecar_path(value) if writer is not None else None) or value
        if os.path.lexists(source):
            options.check_regular_file(source)
        return load_spec(value)
    except OSError as exc:  # the message without its "[Errno 2]" prefix
        raise click.BadParameter(exc.strerror if exc.strerror else str(exc)) from None
    except (ValueError, TypeError, ImportError) as exc:
        raise click.BadParameter(str(exc)) from None


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)


def _param_error(exc: Exception, names=_FLAGS) -> click.ClickException:
    """A library error about one of ``names``, as click reports a bad option; any other
    library error as one line (exit status 2 either way)."""
    message = str(exc)
    for name in names:
        if message.startswith(f"{name} must "):
            return click.BadParameter(message[len(name) + 1 :], param_hint=f"'{_FLAGS[name]}'")
    return options.InputError(message)


def _wants_bar(ctx: click.Context) -> bool:
    """A progress bar only for a person watching: not with -q, not into a pipe or a file."""
    if (ctx.obj or {}).get("verbosity", 0) < 0:
        return False
    return sys.stdout.isatty() and sys.stderr.isatty()


@click.command(short_help="Write the (MAX_LEN, D_MODEL) table to .npy, .npz or .safetensors.")
@click.option(
    "--d-model", "d_model", type=int, default=None, metavar="N",  # checked by save_table, once
    help="Number of columns (model width), 1 to 65536; odd is allowed. Required unless --from-spec.",
)
@options.max_len_opt
@options.base_opt
@options.layout_opt
@options.denominator_opt
@options.min_timescale_opt
@options.max_timescale_opt
@options.dtype_opt
@options.backend_opt
@output_opt("fastpe table", "pe_<MAX_LEN>x<D_MODEL>.npy")
@click.option(
    "--chunk-mb", "chunk_mb", type=float, default=256, show_default=True, callback=_chunk_handler, metavar="MB",
    help="Memory budget in MiB: the table is computed and written this much at a time.",
)
@click.option(
    "--start", "start", type=int, default=0, show_default=True, metavar="P",
    help="First position, in (-2**32, 2**32): negative positions are the relative sinusoids' "
    "(a row of -p is the row of p with its sines negated).",
)
@click.option(
    "--step", "step", type=int, default=1, show_default=True, metavar="S",
    help="Position step, a non-zero integer: -1 runs backwards (Transformer-XL: --start KLEN-1 "
    "--step -1; a Conformer: --max-len 2L-1 --start L-1 --step -1).",
)
@click.option(
    "--from-spec", "spec", type=click.Path(exists=True, dir_okay=False), default=None, callback=_spec_handler,
    metavar="SPEC",
    help="Re-run a recorded spec: a PATH.json sidecar, or a .npy, .npz or .safetensors written by fastpe "
    "(its table's shape and dtype must still be the spec's). Table options given as well override the spec's values.",
)
@click.pass_context
def table(ctx: click.Context, output, backend, chunk_mb: float, spec, start: int, step: int, **given) -> None:
    """Write the sinusoidal table for positions 0 .. MAX_LEN-1 (or START, START+STEP, ...).

    The array has shape (MAX_LEN, D_MODEL) and the chosen dtype; its values are exactly
    fastpe.table(D_MODEL, MAX_LEN, base=B, ...).  It is computed and written a chunk at a
    time (--chunk-mb), so tables far larger than memory can be written; the free disk space
    is checked first.  The format follows the extension of -o.  Prints one summary line:
    path, dtype, shape, size, backend and timings (-q: nothing; a progress bar on a
    terminal).

    Every file records the spec that made it: PATH.json next to a .npy, an entry inside a
    .npz or .safetensors; --from-spec re-runs one.

    The file is written atomically: to a temporary file in the same directory, then
    renamed.  An existing file at the path is replaced, like numpy.save does; should
    anything fail (or Ctrl-C), no partial file is left and an existing one is kept.

    \b
    Examples:
      fastpe table --d-model 512 --max-len 2048 -o pe.npy
      fastpe table --d-model 4096 --max-len 16777216 --dtype bfloat16 -o big.safetensors
      fastpe table --from-spec pe.npy.json --dtype float16 -o pe16.npz
    """
    import fastpe

    params = dict(spec["params"]) if spec is not None else {}
    for name in _PARAMS:
        if spec is None or _given(ctx, name):
            params[name] = given[name]
    if params["d_model"] is None:
        param = next(p for p in ctx.command.params if p.name == "d_model")
        raise click.MissingParameter(ctx=ctx, param=param)
    path = output or default_path(f"pe_{params['max_len']}x{params['d_model']}.npy", "fastpe table")

    chunk_bytes = max(1, int(chunk_mb * (1 << 20)))
    for name, value, default in (("start", start, 0), ("step", step, 1)):
        if spec is None or _given(ctx, name):
            params[name] = value
        params.setdefault(name, default)
        if params[name] == default:
            del params[name]
    try:
        if _wants_bar(ctx):
            with click.progressbar(length=params["max_len"], label=f"writing {path}", file=sys.stderr) as bar:
                saved = _save(fastpe, path, params, chunk_bytes, backend, lambda done, total: bar.update(done - bar.pos))
        else:
            saved = _save(fastpe, path, params, chunk_bytes, backend, None)
    except OSError as exc:  # a full disk, or too little free space to start; nothing is left behind
        raise click.ClickException(f"could not write {path}: {exc}") from exc

    verbosity = (ctx.obj or {}).get("verbosity", 0)
    if verbosity >= 0:
        # a run that is not 0, 1, 2, ... says which positions it holds
        run = "start" in params or "step" in params
        where = f"positions {params.get('start', 0)}, step {params.get('step', 1)}, " if run else ""
        click.echo(
            f"wrote {saved.path}: {dtype_text(saved.dtype, saved.path)} {saved.shape}, {where}"
            f"{options.human_size(saved.nbytes)}, "
            f"backend {saved.backend}, {options.milliseconds(saved.compute_seconds)} compute + "
            f"{options.milliseconds(saved.write_seconds)} write"
        )
    if verbosity > 0 and saved.sidecar is not None:
        click.echo(f"spec in {saved.sidecar}")


def _save(fastpe, path, params, chunk_bytes, backend, progress):
    try:
        return fastpe.save_table(path, **params, chunk_bytes=chunk_bytes, backend=backend, progress=progress)
    except (TypeError, ValueError) as exc:  # save_table checks every parameter, once
        raise _param_error(exc) from exc

