"""``fastpe rope-axial``: write the axial (N-axis) RoPE cos/sin caches of a token grid -- the
caches of vision encoders and diffusion transformers (FLUX, Wan, HunyuanVideo, Qwen-Image)
-- to one ``.npz``, ``.safetensors`` or ``.npy`` file (the last holds cos and sin stacked
along a new first axis).

The tokens are the integer meshgrid of ``--grid`` in row-major order (the first axis
slowest), as those models lay out their image or video ids; ``--centered`` centres the
height and width axes as Qwen-Image's ``scale_rope`` does, ``--cls-token`` puts a token of
zero rotation first.  The numbers come from :func:`fastpe.rope.axial_cos_sin` of
:func:`~fastpe.rope.index_grid`'s coordinates; this module parses, names the file and
writes it (through :mod:`fastpe.cli._write` and the format's writer).

The spec records the coordinates as ``{"index_grid": {"sizes": [...], "centered": [...]}}``
(plus ``"prepend_cls": 1`` with ``--cls-token``): ``axial_cos_sin(prepend_cls(index_grid(
**coords["index_grid"]), coords["prepend_cls"]), **the other params)`` gives the file's bits.
"""

from __future__ import annotations

import math

import click

from .._validate import POSITION_LIMIT
from . import options
from ._write import check_size, default_path, dtype_opt, dtype_text, entry, output_opt, write_arrays

__all__ = ["rope_axial", "parse_ints", "centered_axes", "ENTRIES", "LAYOUTS", "FUNCTION"]

#: the arrays a file holds, in order; a .npy holds them stacked (cos, sin on axis 0)
ENTRIES = ("cos", "sin")
#: the column orders of :data:`fastpe.rope.AXIAL_LAYOUTS` (kept here: ``--help`` must
#: not import the library)
LAYOUTS = ("gptj", "neox", "neox_head")
#: the library function the spec names
FUNCTION = "rope.axial_cos_sin"


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    """``"16,56,56"`` as ints; one error line naming the offending item otherwise."""
    values = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise click.BadParameter(f"empty item in {text!r}; give comma-separated {what} like 16,56,56")
        try:
            values.append(int(item, 10))
        except ValueError:
            raise click.BadParameter(f"{item[:40]!r} is not an integer") from None
    return tuple(values)


def _axes_dim(ctx, param, value):
    """``--axes-dim``: the library's own check of ``axes_dim`` (even widths >= 0, summing to
    2 .. 65536)."""
    if value is None:
        return None
    dims = parse_ints(value, "even widths")
    from ..rope._axial import axial_frequencies

    try:
        axial_frequencies(dims)  # the library's checks of axes_dim; nothing the size of a cache
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc)) from None
    return dims


def _grid(ctx, param, value):
    """``--grid``: one size per axis, each 1 .. 2**32 (how many axes is checked against
    ``--axes-dim``, the tokens against the library's limit)."""
    if value is None:
        return None
    sizes = parse_ints(value, "sizes")
    for a, size in enumerate(sizes):
        if not 1 <= size <= POSITION_LIMIT:
            shown = str(size) if len(str(size)) <= 20 else f"{str(size)[:20]}..."
            raise click.BadParameter(f"each size must be between 1 and 2**32, got {shown} (axis {a})")
    return sizes


def _real(ctx, param, value):
    """A finite number (click's FLOAT takes ``nan`` and ``inf``); how it relates to the other
    parameters the library checks with them."""
    if value is None:
        return None
    from .._validate import check_finite_real

    try:
        return check_finite_real(param.name, value)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc).removeprefix(param.name + " ")) from None


def centered_axes(n_axes: int, centered: bool) -> list[bool]:
    """Which axes ``--centered`` centres: height and width, the last two (Qwen-Image's
    ``scale_rope`` centres them and starts the frame axis at 0); a 1-axis grid's only axis."""
    return [centered and a >= n_axes - 2 for a in range(n_axes)]


#: the library's argument -> the option that sets it, for the errors of the parameters'
#: joint check
_OPTION_OF = {"base": "--base", "ntk_factor": "--ntk-factor", "linear_factor": "--linear-factor"}


def _check_parameters(axes_dim, base: float, linear_factor: float, ntk_factor: float) -> None:
    """The library's checks of the frequency parameters together (``base * ntk_factor`` must
    be >= 1, ...), each error naming its option; nothing the size of a cache is computed."""
    from ..rope._axial import axial_frequencies

    try:
        axial_frequencies(axes_dim, base=base, linear_factor=linear_factor, ntk_factor=ntk_factor)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        for name, option in _OPTION_OF.items():
            if message.startswith(name + " "):
                raise click.BadParameter(message.removeprefix(name + " "), param_hint=f"'{option}'") from None
        raise options.InputError(message) from None


@click.command(short_help="Write axial (vision/diffusion) RoPE cos/sin caches of a token grid.")
@click.option("--axes-dim", "axes_dim", required=True, callback=_axes_dim, metavar="D,D,...",
              help="Each axis's block of the head: even widths, comma-separated (FLUX: 16,56,56); "
              "the caches have sum(D) columns.")
@click.option("--grid", "grid", required=True, callback=_grid, metavar="N,N,...",
              help="The token grid, one size per --axes-dim axis (FLUX 1024x1024: 1,64,64; a video: F,H,W); "
              "tokens in row-major order, the first axis slowest.")
@click.option("--base", type=float, default=10000.0, show_default=True, callback=_real, metavar="B",
              help="RoPE theta, >= 1 (FLUX, Wan, Qwen-Image: 10000; HunyuanVideo: 256).")
@click.option("--layout", type=click.Choice(LAYOUTS, case_sensitive=False), default=LAYOUTS[0], show_default=True,
              help="Column order: gptj, each frequency in two adjacent columns (FLUX, Wan, HunyuanVideo); "
              "neox, halves within each axis's block; neox_head, halves over the whole head "
              "(Qwen2-VL's vision tower, Pixtral).")
@click.option("--centered", is_flag=True,
              help="Centre the height and width axes (the last two) at 0, as Qwen-Image's scale_rope: "
              "a side of N runs -(N - N//2) .. N//2 - 1; a frame axis still starts at 0.")
@click.option("--cls-token", "cls_token", is_flag=True,
              help="Put a class token first: a row of zero rotation (cos 1, sin 0).")
@click.option("--linear-factor", "linear_factor", type=float, default=1.0, show_default=True, callback=_real,
              metavar="F", help="Divide every frequency by F (diffusers' linear_factor).")
@click.option("--ntk-factor", "ntk_factor", type=float, default=1.0, show_default=True, callback=_real,
              metavar="F", help="Use base * F as theta (diffusers' ntk_factor).")
@dtype_opt
@options.backend_opt
@output_opt("fastpe rope-axial", "rope_axial_<GRID joined by x>_<sum(D)>.npz",
            holds="A .npz or .safetensors holds cos and sin, each (TOKENS, sum(D)); a .npy holds them stacked: "
            "shape (2, TOKENS, sum(D)), axis 0 = (cos, sin).")
@click.pass_context
def rope_axial(ctx: click.Context, axes_dim, grid, base, layout, centered, cls_token, linear_factor, ntk_factor,
               dtype, backend, output) -> None:
    """Write the axial RoPE caches of a token grid to a .npz, .safetensors or .npy file.

    The tokens are the integer meshgrid of --grid (one size per axis of --axes-dim), in
    row-major order as FLUX, Wan and HunyuanVideo lay out their image and video ids (with
    --centered, Qwen-Image's), after a class token with --cls-token.  Block a of each row
    rotates by the token's coordinate on axis a at the frequencies (1/F_lin) * (B *
    F_ntk) ** (-2k / D_a): cos and sin are each TOKENS x sum(D), exactly
    fastpe.rope.axial_cos_sin of fastpe.rope.index_grid's coordinates and the file's spec.
    A .npy file holds them stacked, shape (2, TOKENS, sum(D)), axis 0 = (cos, sin).  Every
    file records its spec (PATH.json beside a .npy, inside the others).  Prints one summary
    line (-q: nothing).

    The file is written atomically; on any error (or Ctrl-C) nothing is written and an
    existing file is kept.

    \b
    Examples:
      fastpe rope-axial --axes-dim 16,56,56 --grid 1,64,64 -o flux_1024.npz
      fastpe rope-axial --axes-dim 16,56,56 --grid 1,52,52 --centered -o qwen_image.safetensors
      fastpe rope-axial --axes-dim 44,42,42 --grid 21,30,52 --dtype bfloat16
    """
    from .. import _backends
    from .._io.writers import make_spec

    if len(grid) != len(axes_dim):
        raise click.BadParameter(f"has {len(grid)} {'axis' if len(grid) == 1 else 'axes'} but --axes-dim has "
                                 f"{len(axes_dim)}: give one size per axis", param_hint="'--grid'")
    _check_parameters(axes_dim, base, linear_factor, ntk_factor)
    layout, dtype = layout.lower(), dtype.lower()
    with options.library_errors():
        name, _ = _backends.resolve(backend)  # to report which backend ran
    width = sum(axes_dim)
    path = output or default_path(f"rope_axial_{'x'.join(map(str, grid))}_{width}.npz", "fastpe rope-axial")

    coords = {"index_grid": {"sizes": list(grid), "centered": centered_axes(len(grid), centered)}}
    if cls_token:
        coords["prepend_cls"] = 1
    params = dict(coords=coords, axes_dim=list(axes_dim), base=base, layout=layout, linear_factor=linear_factor,
                  ntk_factor=ntk_factor, offset=0.0, dtype=dtype)
    spec = make_spec(FUNCTION, params)
    tokens = math.prod(grid) + cls_token
    shape = (tokens, width)
    entries = [entry(e, shape, dtype) for e in ENTRIES]
    # besides cos and sin, what the library holds at its peak: the float64 coordinates, its
    # copy of them, each axis's index of its distinct values (and that index's making), and
    # the chunks its kernels fill (measured: 8 * (4 * axes) bytes a token and under 1 MiB)
    transient = 8 * tokens * (4 * len(grid) + 1) + (1 << 20)
    # refused before anything is allocated when they cannot be held in memory (exit status
    # 2); past the library's token limit, index_grid refuses them next, before the free space
    # is of interest (exit status 1 for the disk)
    check_size(path, entries, spec, held=((2, *shape), dtype), transient=transient,
               advice="ask for a smaller --grid, narrower --axes-dim or a 16-bit --dtype", space=False)
    from ..rope._axial import axial_cos_sin, index_grid, prepend_cls

    try:
        ids = index_grid(grid, centered=coords["index_grid"]["centered"])
    except (TypeError, ValueError) as exc:  # too many tokens
        raise click.BadParameter(str(exc).removeprefix("sizes "), param_hint="'--grid'") from None
    if cls_token:
        ids = prepend_cls(ids, 1)
    check_size(path, entries, spec, held=((2, *shape), dtype), transient=transient)

    def compute():
        cos, sin = axial_cos_sin(ids, axes_dim, base=base, layout=layout, linear_factor=linear_factor,
                                 ntk_factor=ntk_factor, offset=0.0, dtype=dtype, backend=name)
        return {"cos": cos, "sin": sin}

    arrays, compute_s, write_s = write_arrays(path, entries, compute, spec)
    cos = arrays["cos"]
    if (ctx.obj or {}).get("verbosity", 0) >= 0:
        what = f"{len(grid)}-axis grid {'x'.join(map(str, grid))}" + (" centered" if centered else "")
        what += ", cls token" if cls_token else ""
        factors = "".join(f", {label} {value:g}" for label, value in
                          (("linear_factor", linear_factor), ("ntk_factor", ntk_factor)) if value != 1.0)
        click.echo(
            f"wrote {path}: cos, sin {dtype_text(cos.dtype, path)} {cos.shape} {layout}, "
            f"axes_dim {','.join(map(str, axes_dim))}, {what}, base {base:g}{factors}, "
            f"{options.human_size(2 * cos.nbytes)}, backend {name}, "
            f"{options.milliseconds(compute_s)} compute + {options.milliseconds(write_s)} write"
        )
