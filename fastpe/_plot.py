"""Heatmaps of positional encodings, drawn with matplotlib's Agg renderer (no display).

Two steps, kept apart so the numbers can be tested without looking at pixels:

* the ``*_heatmap`` functions compute (or take) the 2-D array and return a :class:`Heatmap`:
  the panels exactly as they will be drawn (non-finite values masked), the symmetric colour
  limits and the labels;
* :func:`render` draws a :class:`Heatmap` into a file object (PNG, SVG or PDF).

Positions run down the y axis (position 0 at the top, as the table's rows), dimensions along
x, both with integer ticks (they are indices).  The colormap is diverging and centred on zero
(``vmin = -vmax``), so sines and cosines read as signed values; the colorbar spans the
finite data only (an ALiBi bias, all ``<= 0``, shows its blue half); masked entries
(ALiBi's causal ``-inf``, any NaN) are grey.

matplotlib is imported without pyplot: no global figure state, no backend selection, safe
from threads.  ``pip install 'fastpe[plot]'`` provides it; ``import fastpe`` never loads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

try:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
except ImportError as exc:  # pragma: no cover - exercised by a test that hides matplotlib
    raise ImportError(
        f"fastpe's plots need matplotlib: pip install 'fastpe[plot]' (or pip install matplotlib) ({exc})"
    ) from exc

from ._plans.frequencies import DEFAULT_BASE
from ._validate import check_int

__all__ = [
    "Heatmap",
    "FORMATS",
    "FIGSIZE",
    "MAX_VALUES",
    "DEFAULT_CMAP",
    "MASKED_COLOR",
    "prepare",
    "limits",
    "data_range",
    "bfloat16_values",
    "table_heatmap",
    "rope_heatmap",
    "alibi_heatmap",
    "array_heatmap",
    "check_cmap",
    "format_of_path",
    "pixel_size",
    "figure",
    "render",
]

#: file extension -> matplotlib format
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
#: figure size in inches; a PNG is ``FIGSIZE * dpi`` pixels
FIGSIZE = (8.0, 6.0)
#: the most values one picture takes (a 8192 x 8192 array); more is a dataset, not a plot
MAX_VALUES = 1 << 26
DEFAULT_CMAP = "RdBu_r"
#: colour of masked (non-finite) entries; distinct from the colormap's near-white zero
MASKED_COLOR = "0.55"
ROPE_PARTS = ("cos", "sin", "both")


@dataclass(frozen=True)
class Heatmap:
    """What :func:`render` draws: one or more panels side by side, sharing the y axis and
    one colorbar.  ``panels`` are 2-D masked float64 arrays (rows = y); ``vmin``/``vmax``
    the colour limits (symmetric about zero), ``span`` the colorbar's extent (the finite
    data's range, or the colour limits when there is no range)."""

    panels: tuple[np.ma.MaskedArray, ...]
    vmin: float
    vmax: float
    title: str
    xlabel: str = "dimension"
    ylabel: str = "position"
    panel_titles: tuple[str, ...] = ()
    span: tuple[float, float] | None = None

    @property
    def data(self) -> np.ma.MaskedArray:
        """The single panel (the common case)."""
        if len(self.panels) != 1:
            raise ValueError(f"this heatmap has {len(self.panels)} panels")
        return self.panels[0]


def limits(panels) -> tuple[float, float]:
    """Symmetric colour limits ``(-m, m)``, ``m`` the largest finite magnitude (1 when there
    is none, or it is 0, so the colorbar always has a range)."""
    m = 0.0
    for p in panels:
        values = np.ma.compressed(p)
        if values.size:
            m = max(m, float(np.max(np.abs(values))))
    if not m > 0.0:
        m = 1.0
    return -m, m


def data_range(panels) -> tuple[float, float] | None:
    """``(lowest, highest)`` finite value of the panels; ``None`` when they are all masked
    or all equal (the colorbar then shows the colour limits)."""
    lo, hi = np.inf, -np.inf
    for p in panels:
        values = np.ma.compressed(p)
        if values.size:
            lo, hi = min(lo, float(values.min())), max(hi, float(values.max()))
    return (lo, hi) if lo < hi else None


def bfloat16_values(bits: np.ndarray) -> np.ndarray:
    """The values of bfloat16 numbers given as their ``uint16`` bit patterns (as fastpe stores
    bfloat16 in ``.npy`` and ``.npz``), as float32: exact, a bfloat16 being the top half of
    a float32, and without ml_dtypes."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _as_real_2d(array, name: str) -> np.ndarray:
    arr = np.asarray(array)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got an array of shape {arr.shape}")
    if arr.dtype.kind not in "iuf" and arr.dtype.name != "bfloat16":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); nothing to draw")
    if arr.size > MAX_VALUES:
        raise ValueError(f"{name} has {arr.size} values; plots take at most {MAX_VALUES} (e.g. 8192 x 8192)")
    return arr


def prepare(
    arrays,
    *,
    title: str,
    xlabel: str = "dimension",
    ylabel: str = "position",
    panel_titles: tuple[str, ...] = (),
    name: str = "array",
) -> Heatmap:
    """A :class:`Heatmap` of one 2-D array or a sequence of them (drawn side by side, which
    needs equal row counts).  Values become float64 with NaN and ±inf masked."""
    if isinstance(arrays, np.ndarray):
        arrays = (arrays,)
    panels = []
    for a in arrays:
        arr = _as_real_2d(a, name)
        panels.append(np.ma.masked_invalid(arr.astype(np.float64)))
    if len({p.shape[0] for p in panels}) > 1:
        raise ValueError(f"{name} panels must have the same number of rows")
    vmin, vmax = limits(panels)
    return Heatmap(tuple(panels), vmin, vmax, title, xlabel, ylabel, tuple(panel_titles), data_range(panels))


# --------------------------------------------------------------------------- the families


def _check_total(name: str, rows: int, cols: int) -> None:
    # before computing anything: the plot limit, with the arguments the user gave
    if rows * cols > MAX_VALUES:
        raise ValueError(
            f"{name} would be {rows} x {cols} = {rows * cols} values; plots take at most {MAX_VALUES}"
        )


def table_heatmap(d_model: int, max_len: int, *, base: float = DEFAULT_BASE, backend: str | None = None) -> Heatmap:
    """The sinusoidal table, ``fastpe.table(d_model, max_len, base=base)``."""
    from .sinusoid import table
    from .sinusoid import PosEncConfig

    cfg = PosEncConfig(d_model, max_len, base)
    _check_total("the table", cfg.max_len, cfg.d_model)
    values = table(cfg.d_model, cfg.max_len, base=cfg.base, backend=backend)
    return prepare(values, title=f"sinusoidal table: d_model={cfg.d_model}, max_len={cfg.max_len}, base={cfg.base:g}")


def rope_heatmap(
    head_dim: int, max_len: int, *, base: float = DEFAULT_BASE, part: str = "cos", backend: str | None = None
) -> Heatmap:
    """The RoPE cache of ``fastpe.rope.cos_sin(arange(max_len), head_dim, base=base)``: its
    cos, its sin, or both side by side (``part``)."""
    from . import rope
    from ._validate import check_choice, check_max_len

    part = check_choice("part", part, ROPE_PARTS)
    max_len = check_max_len(max_len)
    head_dim = check_int("head_dim", head_dim, low=2)
    _check_total("the RoPE cache", max_len, head_dim * (2 if part == "both" else 1))
    cos, sin = rope.cos_sin(np.arange(max_len, dtype=np.uint32), head_dim, base=base, backend=backend)
    title = f"RoPE {'cos | sin' if part == 'both' else part}: head_dim={head_dim}, max_len={max_len}, base={base:g}"
    if part == "both":
        return prepare((cos, sin), title=title, panel_titles=("cos", "sin"))
    return prepare(cos if part == "cos" else sin, title=title)


def alibi_heatmap(
    n_heads: int,
    length: int,
    *,
    head: int = 0,
    form: str = "symmetric",
    max_bias: float = 8.0,
    backend: str | None = None,
) -> Heatmap:
    """One head of ``fastpe.alibi.bias(n_heads, length, form=form, max_bias=max_bias)``:
    queries down, keys across; masked (``-inf``) entries drawn grey."""
    from . import alibi

    n_heads = check_int("n_heads", n_heads, low=1)
    head = check_int("head", head, low=0)
    if head >= n_heads:
        raise ValueError(f"head must be < n_heads = {n_heads}, got {head}")
    length = check_int("length", length, low=1)
    _check_total("the ALiBi bias", n_heads * length, length)
    bias = alibi.bias(n_heads, length, form=form, max_bias=max_bias, backend=backend)
    return prepare(
        bias[head],
        title=f"ALiBi bias: head index {head} (0-based) of {n_heads}, form={form}, length={length}, "
        f"max_bias={max_bias:g}",
        xlabel="key position",
        ylabel="query position",
    )


def array_heatmap(array, *, name: str = "array", index: int | None = None, bfloat16_bits: bool = False,
                  stored: str = "") -> Heatmap:
    """Any saved 2-D array (``index`` picks ``array[index]`` from a 3-D one, e.g. one head
    of a bias).  ``bfloat16_bits``: ``array`` holds bfloat16 numbers as their ``uint16``
    bit patterns, and their values are drawn, the title saying bfloat16 and then
    ``stored`` (how the file keeps them, e.g. ``" (stored as uint16 bits)"``)."""
    arr = array if isinstance(array, np.ndarray) else np.asarray(array)
    if bfloat16_bits and arr.dtype != np.uint16:
        raise TypeError(f"bfloat16 bits are uint16, got dtype {arr.dtype}")
    label = os.path.basename(name)
    if index is not None:
        if arr.ndim != 3:
            raise ValueError(f"index applies to 3-D arrays; {label} has shape {arr.shape}")
        index = check_int("index", index, low=0)
        if index >= arr.shape[0]:
            raise ValueError(f"index must be < {arr.shape[0]} (the first dimension of {label}), got {index}")
        arr = arr[index]
        label = f"{label}[{index}]"
    elif arr.ndim == 3:
        raise ValueError(f"{label} is 3-D {arr.shape}; pick one 2-D slice with --index")
    elif arr.ndim != 2:
        raise ValueError(f"{label} must be a 2-D array, got shape {arr.shape}")
    _as_real_2d(arr, label)  # type and size, before reading a memory-mapped file
    if bfloat16_bits:
        title = f"{label}: {arr.shape[0]} x {arr.shape[1]} bfloat16{stored}"
        return prepare(bfloat16_values(arr), title=title, name=label)
    return prepare(np.asarray(arr), title=f"{label}: {arr.shape[0]} x {arr.shape[1]} {arr.dtype}", name=label)


# --------------------------------------------------------------------------- drawing


def check_cmap(cmap: str):
    """The matplotlib colormap called ``cmap``, with masked values in :data:`MASKED_COLOR`."""
    if not isinstance(cmap, str):
        raise TypeError(f"cmap must be a colormap name, got {type(cmap).__name__}")
    try:
        colormap = matplotlib.colormaps[cmap]
    except KeyError:
        raise ValueError(f"cmap {cmap!r} is not a matplotlib colormap (e.g. RdBu_r, coolwarm, viridis)") from None
    return colormap.with_extremes(bad=MASKED_COLOR)


def format_of_path(path: str) -> str:
    """The matplotlib format for ``path``'s extension (``.png``, ``.svg``, ``.pdf``)."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise ValueError(f"{path!r} does not end in .png, .svg or .pdf")
    return FORMATS[ext]


def pixel_size(dpi: int) -> tuple[int, int]:
    """``(width, height)`` in pixels of a PNG drawn at ``dpi``."""
    return round(FIGSIZE[0] * dpi), round(FIGSIZE[1] * dpi)


#: colours in the colorbar: enough that it reads as continuous
_BAR_STEPS = 256


def figure(heatmap: Heatmap, *, dpi: int = 100, cmap: str = DEFAULT_CMAP) -> Figure:
    """The matplotlib figure :func:`render` saves: one image per panel, integer ticks on
    both axes, one colorbar spanning ``heatmap.span``."""
    dpi = check_int("dpi", dpi, low=1)
    colormap = check_cmap(cmap)
    fig = Figure(figsize=FIGSIZE, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(heatmap.panels), sharey=True, squeeze=False)[0]
    image = None
    for i, (ax, panel) in enumerate(zip(axes, heatmap.panels)):
        image = ax.imshow(
            panel, cmap=colormap, vmin=heatmap.vmin, vmax=heatmap.vmax,
            aspect="auto", interpolation="nearest", origin="upper",
        )
        for axis in (ax.xaxis, ax.yaxis):  # rows and columns are indices: no 0.5 ticks
            axis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(heatmap.xlabel)
        if i == 0:
            ax.set_ylabel(heatmap.ylabel)
        if i < len(heatmap.panel_titles):
            ax.set_title(heatmap.panel_titles[i])
    fig.suptitle(heatmap.title)
    lo, hi = heatmap.span if heatmap.span is not None else (heatmap.vmin, heatmap.vmax)
    # the colours of the (zero-centred) limits, over the data's range only
    bar = fig.colorbar(image, ax=list(axes), label="value", boundaries=np.linspace(lo, hi, _BAR_STEPS + 1))
    ticks = MaxNLocator(nbins=8).tick_values(lo, hi)
    bar.set_ticks(ticks[(ticks >= lo) & (ticks <= hi)])
    return fig


def render(heatmap: Heatmap, file: BinaryIO, *, fmt: str = "png", dpi: int = 100, cmap: str = DEFAULT_CMAP) -> None:
    """Draw ``heatmap`` into the binary file ``file`` as ``fmt`` (png, svg or pdf)."""
    if fmt not in FORMATS.values():
        raise ValueError(f"fmt must be one of {', '.join(FORMATS.values())}, got {fmt!r}")
    dpi = check_int("dpi", dpi, low=1)
    figure(heatmap, dpi=dpi, cmap=cmap).savefig(file, format=fmt, dpi=dpi)
