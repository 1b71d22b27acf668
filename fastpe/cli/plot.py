"""``fastpe plot``: draw a table, a RoPE cache, an ALiBi bias or a saved array (.npy, .npz, .safetensors) as a heatmap.

The numbers and the drawing live in :mod:`fastpe._plot`; this module parses, checks that the
options fit the chosen kind, and writes the picture atomically.  matplotlib is imported only
when the command runs, so ``fastpe --help`` stays light.
"""

from __future__ import annotations

import os
import time

import click
from click.core import ParameterSource

from . import options

__all__ = ["plot", "check_picture_path"]

KINDS = ("table", "rope", "alibi")
ALIBI_FORMS = ("symmetric", "causal", "bloom", "mpt")
#: rows drawn when --max-len is not given: a readable picture, not the full default table
PLOT_MAX_LEN = 256

#: the options each kind of picture reads; any other kind-specific option given is an error
_APPLIES = {
    "table": {"d_model", "max_len", "base", "backend"},
    "rope": {"head_dim", "max_len", "base", "part", "backend"},
    "alibi": {"heads", "head", "max_len", "form", "max_bias", "backend"},
    "file": {"index", "entry"},
}
_SPECIFIC = set().union(*_APPLIES.values()) | {"kind"}


def check_picture_path(path: str) -> str:
    """:func:`options.check_output_path` for a ``.png``, ``.svg`` or ``.pdf`` file."""
    # (splitext takes a bare ".png" for a name without extension; the name check is below)
    ext = next((e for e in (".png", ".svg", ".pdf") if path and path.lower().endswith(e)), "")
    if not ext:
        raise click.BadParameter(f"{path!r} does not end in .png, .svg or .pdf (fastpe plot writes pictures)")
    return options.check_output_path(path, suffix=ext, writer="fastpe plot")


def _output_handler(ctx, param, value):
    return None if value is None else check_picture_path(value)


def _input_handler(ctx, param, value):
    if value is None:
        return None
    from .._io.writers import FORMATS, formats_text

    if not value.lower().endswith(FORMATS):
        raise click.BadParameter(f"{value!r} is not a {formats_text()} file")
    if not os.path.isfile(value):
        raise click.BadParameter(f"{value!r} does not exist" if not os.path.exists(value) else f"{value!r} is not a file")
    return value


def _non_negative(ctx, param, value):
    if value is not None and value < 0:
        raise click.BadParameter(f"must be >= 0, got {value}")
    return value


def _positive(ctx, param, value):
    if value is not None and value < 1:
        raise click.BadParameter(f"must be >= 1, got {value}")
    return value


def _check_applicable(ctx: click.Context, kind: str, label: str) -> None:
    for name in sorted(_SPECIFIC - _APPLIES[kind] - {"kind"}):
        if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None):
            flag = "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} does not apply to {label}")


def _recorded_dtype(path: str, writer) -> str | None:
    """The ``dtype`` the spec fastpe recorded with ``path`` names (any command's spec), or
    ``None``: no spec, or one that cannot be read (the file is then drawn as it is)."""
    import json

    try:
        spec = json.loads(writer.read_spec(path))
    except (OSError, ValueError, ImportError):
        return None
    params = spec.get("params") if isinstance(spec, dict) else None
    dtype = params.get("dtype") if isinstance(params, dict) else None
    return dtype if isinstance(dtype, str) else None


#: how the title tells bfloat16 drawn from the uint16 bits a .npy or .npz holds
_FROM_BITS = " (stored as uint16 bits)"


def _load_input(path: str, entry: str | None):
    """``(array, label, bfloat16)`` of the array to draw from ``path``: a ``.npy``, or an
    entry of a ``.npz`` or ``.safetensors`` (``entry``, by default the first array), its
    size checked from its header before its data are read (memory-mapped but in an
    ``.npz``).  ``bfloat16`` is ``None`` unless the array holds bfloat16 numbers as
    ``uint16`` bits -- a ``.safetensors`` BF16 tensor (then ``""``), or a ``uint16`` array
    whose spec fastpe recorded says bfloat16 (then how it was stored, for the title)."""
    from .. import _plot
    from .._io.writers import writer_for

    writer = writer_for(path)
    try:
        if writer.one_array:
            if entry is not None:
                raise click.UsageError("--entry applies to .npz and .safetensors files (a .npy holds one array)")
            # memory-mapped: the shape and dtype are checked before the data are read
            array = options.open_npy(path)
            return array, path, _bits_note(path, writer, array.dtype.name)
        names = writer.entries(path)
        if not names:
            raise ValueError(f"{path!r} holds no array")
        if entry is None:
            entry = names[0]
        elif entry not in names:
            raise ValueError(f"{path!r} holds no entry {entry!r}; it holds {', '.join(names)}")
        dtype, shape = writer.stored(path, entry)
        values = 1
        for side in shape:
            values *= side
        if values > _plot.MAX_VALUES:
            raise ValueError(f"{entry!r} in {path!r} has {values} values; plots take at most {_plot.MAX_VALUES}")
        array = writer.open(path, entry)
    except ValueError as exc:
        raise options.InputError(str(exc)) from None
    label = f"{path}:{entry}" if len(names) > 1 else path
    return array, label, "" if dtype == "bfloat16" else _bits_note(path, writer, dtype)


def _bits_note(path: str, writer, dtype: str) -> str | None:
    """:data:`_FROM_BITS` for a ``uint16`` array of a file whose spec says bfloat16, else ``None``."""
    if dtype == "uint16" and writer.bfloat16_as_uint16 and _recorded_dtype(path, writer) == "bfloat16":
        return _FROM_BITS
    return None


@click.command(short_help="Draw a table, RoPE cache, ALiBi bias or saved array as a heatmap (PNG/SVG/PDF).")
@click.argument("input_path", metavar="[INPUT]", required=False, callback=_input_handler)
@click.option("--kind", type=click.Choice(KINDS, case_sensitive=False), default="table", show_default=True,
              help="What to draw when no INPUT is given.")
@click.option("--d-model", "d_model", type=int, default=None, callback=options.d_model_handler, metavar="N",
              help="table: number of columns (required for --kind table).")
@click.option("--max-len", "max_len", type=int, default=PLOT_MAX_LEN, show_default=True,
              callback=options.max_len_handler, metavar="N",
              help="Rows: positions 0 to N-1 (alibi: query and key length).")
@click.option("--base", type=float, default=None, callback=options.base_handler, metavar="B",
              help="table, rope: frequency base (theta), finite and > 1. Default: 10000.")
@click.option("--head-dim", type=int, default=None, callback=_positive, metavar="N",
              help="rope: size of one attention head (required for --kind rope).")
@click.option("--part", type=click.Choice(("cos", "sin", "both"), case_sensitive=False), default="cos",
              show_default=True, help="rope: which cache to draw; both: side by side.")
@click.option("--heads", type=int, default=8, show_default=True, callback=_positive, metavar="N",
              help="alibi: number of heads (the slopes depend on it).")
@click.option("--head", type=int, default=0, show_default=True, callback=_non_negative, metavar="H",
              help="alibi: which head to draw, by its 0-based index: 0 to N-1.")
@click.option("--form", type=click.Choice(ALIBI_FORMS, case_sensitive=False), default="symmetric",
              show_default=True, help="alibi: the bias form (causal masks the future with -inf, drawn grey).")
@click.option("--max-bias", type=float, default=8.0, show_default=True, metavar="B",
              help="alibi: the slope schedule's maximum bias.")
@click.option("--index", type=int, default=None, callback=_non_negative, metavar="I",
              help="INPUT: draw INPUT[I] of a 3-D array (e.g. one head of a saved bias), I 0-based.")
@click.option("--entry", default=None, metavar="NAME",
              help="INPUT .npz or .safetensors: the array to draw (e.g. cos). Default: the first.")
@click.option("--cmap", default="RdBu_r", show_default=True, metavar="NAME",
              help="matplotlib colormap; diverging ones suit the zero-centred scale.")
@click.option("--dpi", type=click.IntRange(10, 1200), default=100, show_default=True, metavar="DPI",
              help="Resolution; a PNG is 8 x 6 inches, so 800 x 600 pixels at 100 dpi.")
@options.backend_opt
@click.option("-o", "--output", type=click.Path(), default=None, callback=_output_handler,
              help="Output .png, .svg or .pdf; its directory must exist. An existing file is replaced "
              "atomically. Default: named after what is drawn, in the current directory.")
@click.pass_context
def plot(ctx: click.Context, input_path, kind, d_model, max_len, base, head_dim, part, heads, head, form,
         max_bias, index, entry, cmap, dpi, backend, output) -> None:
    """Draw a heatmap: positions down the y axis, dimensions across, a diverging colormap
    centred on zero with a colorbar, and the parameters in the title.

    Without INPUT it draws --kind: the sinusoidal table (fastpe.table), a RoPE cos/sin
    cache (fastpe.rope.cos_sin) or one head of an ALiBi bias (fastpe.alibi.bias).  With
    INPUT (a .npy, or an array of a .npz or .safetensors: --entry) it draws that 2-D array
    (--index picks a slice of a 3-D one); a bfloat16 array fastpe wrote as uint16 bits
    (its spec says bfloat16) is drawn as its values.  The format follows the output's
    extension (.png, .svg, .pdf).  Prints one summary line (-q: nothing); on any error
    nothing is written.

    \b
    Examples:
      fastpe plot --d-model 128 --max-len 100 -o pe.png
      fastpe plot --kind rope --head-dim 64 --part both -o rope.png
      fastpe plot --kind alibi --heads 8 --head 3 --form causal -o alibi.png
      fastpe plot pe_2048x512.npy -o pe.svg
      fastpe plot caches.npz --entry sin -o sin.png
    """
    try:
        from .. import _plot
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None

    from .. import _backends
    from .._io.atomic import atomic_write

    kind = kind.lower()
    label = "an INPUT file" if input_path is not None else f"--kind {kind}"
    if input_path is not None:
        if ctx.get_parameter_source("kind") not in (ParameterSource.DEFAULT, None):
            raise click.UsageError("--kind does not apply to an INPUT file (it draws the file)")
        _check_applicable(ctx, "file", label)
    else:
        _check_applicable(ctx, kind, label)
    if base is None:
        from .._plans.frequencies import DEFAULT_BASE

        base = DEFAULT_BASE

    with options.library_errors():
        _plot.check_cmap(cmap)  # before any work
        name = _backends.resolve(backend)[0] if input_path is None else None

    start = time.perf_counter()
    if input_path is not None:
        array, name_of, bits = _load_input(input_path, entry)
        with options.library_errors():
            heatmap = _plot.array_heatmap(array, name=name_of, index=index, bfloat16_bits=bits is not None,
                                          stored=bits or "")
        default = os.path.splitext(os.path.basename(input_path))[0] + ".png"
    elif kind == "table":
        if d_model is None:
            raise click.UsageError("Missing option '--d-model' (for --kind table)")
        with options.library_errors():
            heatmap = _plot.table_heatmap(d_model, max_len, base=base, backend=name)
        default = f"pe_{max_len}x{d_model}.png"
    elif kind == "rope":
        if head_dim is None:
            raise click.UsageError("Missing option '--head-dim' (for --kind rope)")
        with options.library_errors():
            heatmap = _plot.rope_heatmap(head_dim, max_len, base=base, part=part.lower(), backend=name)
        default = f"rope_{part.lower()}_{max_len}x{head_dim}.png"
    else:
        with options.library_errors():
            heatmap = _plot.alibi_heatmap(heads, max_len, head=head, form=form.lower(), max_bias=max_bias,
                                          backend=name)
        default = f"alibi_{form.lower()}_h{head}_{max_len}.png"
    computed = time.perf_counter()

    path = output
    if path is None:
        try:
            path = check_picture_path(default)
        except click.BadParameter as exc:
            raise options.InputError(f"default output path: {exc.message}; use -o") from None
    fmt = _plot.format_of_path(path)
    try:
        with atomic_write(path) as f:
            _plot.render(heatmap, f, fmt=fmt, dpi=dpi, cmap=cmap)
            size = f.tell()
    except OSError as exc:
        raise click.ClickException(f"could not write {path}: {exc}") from exc
    drawn = time.perf_counter()

    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        if fmt == "png":
            width, height = _plot.pixel_size(dpi)
            extent = f"{width}x{height} px"
        else:
            extent = f"{_plot.FIGSIZE[0]:g}x{_plot.FIGSIZE[1]:g} in {fmt.upper()}"
        click.echo(
            f"wrote {path}: {heatmap.title}; {extent}, {options.human_size(size)}, "
            f"{options.milliseconds(computed - start)} compute + {options.milliseconds(drawn - computed)} draw"
        )
