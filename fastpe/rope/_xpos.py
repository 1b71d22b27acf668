"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE with a per-frequency
decay, queries scaled up and keys down, so that ``q . k`` decays with the distance.

What every value is
-------------------
For frequency ``i`` of ``d = rotary_dim`` (``i < d / 2``), ``zeta_i = (2i + 0.4 d) / (1.4 d)``
(the correctly rounded double of that rational, :func:`fastpe._exact.rope.xpos_zeta`),
scale base ``sb`` and a centred position ``n' = p - center``:

* queries: every pair of position ``p`` is rotated by ``theta = p * inv_freq[i]`` (the
  position itself, as in RoPE) and multiplied by ``s = zeta_i ** (n' / sb)``:
  ``y1 = af s (x1 cos theta - x2 sin theta)``, ``y2 = af s (x2 cos theta + x1 sin theta)``;
* keys (``downscale=True``, torchscale's name): the same with ``1 / s = zeta_i ** (-n' / sb)``.

So ``q_m . k_n`` is ``sum_i zeta_i ** ((m - n) / sb)`` times the RoPE terms of ``m - n``:
it depends on the distance only, whatever the centre (the centre only keeps the powers in
range).  ``s`` is clamped to ``[2**-600, 2**600]`` (see the bound below).

The centre
----------
``center`` (``xpos_center``) says which ``n'`` a position takes, ``T`` being the total length
(``seq_len``, or the largest position of the call plus one, as everywhere in
:mod:`fastpe.rope`):

* ``"torchscale"`` (the default): ``n' = p - ceil(T / 2)``: torchscale's ``XPOS``
  (``torchscale/component/xpos_relative_position.py``: ``min_pos = -(length + offset) // 2``,
  the power of ``arange(min_pos, max_pos)``, the last ``length`` rows kept);
* ``"flash_attn"``: ``n' = p - floor(T / 2)``: flash-attention's ``RotaryEmbedding`` with
  ``scale_base`` (``flash_attn/layers/rotary.py``: ``power = (arange(seqlen) - seqlen // 2) /
  scale_base``) and lucidrains' rotary-embedding-torch (``use_xpos``: ``(t - seq_len // 2) /
  scale_base``);
* an integer ``c`` in ``[0, 2**32]``: ``n' = p - c`` at every length.

Both libraries recompute the powers for the current total length, queries and keys alike (a
decoding step at position ``T - 1`` and the prefill of ``T`` tokens give the keys the same
values): fastpe does the same from ``seq_len`` / the largest position, statelessly.  (A
flash-attention module whose cache once grew longer keeps that longer ``seqlen``: pass it as
``seq_len``.)  Since the centre moves with ``T``, keys cached at an earlier length carry other
powers than a new query expects -- a property of xPos as those libraries compute it, not of
fastpe; a fixed integer centre avoids it.

Error bound
-----------
The compiled kernels take the RoPE doubles ``C, S`` (:mod:`fastpe.rope._core`: within
``2**-45.9 |af|`` of ``af cos theta``, ``af sin theta``) and the power ``s`` in double:

* scale bases ``>= 2`` (every published one): ``n' = a + d``, ``d = n' mod 64``, ``s =
  pow(zeta_i, fl(a / sb)) * pow(zeta_i, fl(d / sb))`` -- an anchor's power (one ``pow`` per
  frequency for a run of 64 positions) times a step's (kept per frequency set and scale
  base, :mod:`fastpe._backends._xpos`); each ``pow`` is the C library's (glibc's: within
  0.52 ULP), each exponent ``fl(m / sb)`` exact when ``sb`` is a power of two (512 is), else
  within ``2**-53`` of itself, which moves a power ``P`` by ``2**-53 |ln P|``, relative.  With
  ``|ln s| <= 416`` (the clamp) and ``|ln pow(zeta, d / sb)| <= 40``, the anchor's
  ``|ln| <= 456``: relative error at most ``496 * 2**-53 + 3 * 2**-52.9 < 2**-43.9`` (for
  ``sb = 512``: ``2**-51.3``);
* smaller scale bases: ``s = pow(zeta_i, fl(n' / sb))``, within ``2**-52 + 417 * 2**-53``.

``s`` is clamped, ``C s`` and ``S s`` rounded once more, and the rotation is the table
rotation's ``float32(x1 Cs - x2 Ss)`` in double.  Summing (``2**-45.9 + 2**-43.9`` and the
roundings),

    ``|out - y| <= ulp(y) / 2 + 2**-43.5 |af| s (|x1| + |x2|)``

and ``out`` is within 1 float32 ULP of ``y`` whenever ``|y| >= 2**-18.5 |af| s (|x1| +
|x2|)`` (``ulp(y) / 2 > 2**-25 |y|``): the pair does not cancel to fewer than ~18 bits.  The
caches (``cos_sin``) are ``float32(C s)``: within 1 ULP of ``af cos(theta) s`` wherever
``|cos theta| >= 2**-18``.  The clamp changes no float32 output for ``|af| >= 2**-64``: above
``2**600`` the output overflows to ``inf`` unless the pair cancels, below ``2**-600`` it
rounds to a zero of the same sign.  The ``python`` backend computes every double of the
tables exactly (:func:`fastpe._exact.rope.xpos_table_f64`) and rounds once.

What is refused
---------------
M-RoPE (no centre is defined for three axes); :meth:`Rotary.rerotate_` (moving scaled keys
by a delta is not a rotation: their power would have to change too); float16 / bfloat16
caches (xPos caches are float32 or float64).  ``inverse=True`` is supported: the transpose of
the scaled rotation (the backward pass), which keeps ``s``.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np

__all__ = ["XposCosSin", "CENTERS", "check_scale_base", "check_center", "center_at", "zeta"]

#: the named centring conventions (see the module docstring)
CENTERS = ("torchscale", "flash_attn")
_LIMIT = 1 << 32


class XposCosSin(NamedTuple):
    """The caches of an xPos :meth:`Rotary.cos_sin`: queries' and keys' cos and sin, each of
    the shape one-axis caches have (``attention_factor * cos(p f) * zeta ** (+-n' / sb)``)."""

    cos_q: np.ndarray
    sin_q: np.ndarray
    cos_k: np.ndarray
    sin_k: np.ndarray


def check_scale_base(value) -> float | None:
    """``None``, or a finite real ``> 0`` as a float."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"xpos_scale_base must be a real number or None, got {type(value).__name__} {value!r}")
    try:
        sb = float(value)
    except OverflowError:
        raise ValueError(f"xpos_scale_base must be finite, got {value!r}") from None
    if not math.isfinite(sb):
        raise ValueError(f"xpos_scale_base must be finite, got {value!r}")
    if not sb > 0:
        raise ValueError(f"xpos_scale_base must be > 0, got {value!r}")
    return sb


def check_center(value):
    """``"torchscale"``, ``"flash_attn"`` or an int in ``[0, 2**32]``."""
    if isinstance(value, str):
        name = value.strip().lower().replace("-", "_")
        if name not in CENTERS:
            raise ValueError(f"xpos_center must be one of {', '.join(map(repr, CENTERS))} or an integer, "
                             f"got {value!r}")
        return name
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"xpos_center must be 'torchscale', 'flash_attn' or an integer, got "
                        f"{type(value).__name__} {value!r}")
    c = int(value)
    if not 0 <= c <= _LIMIT:
        raise ValueError(f"xpos_center must be in [0, 2**32], got {c}")
    return c


def center_at(center, length: int) -> int:
    """The centre of a call of total length ``length`` (see the module docstring)."""
    if center == "torchscale":
        return (length + 1) // 2
    if center == "flash_attn":
        return length // 2
    return center


def zeta(rotary_dim: int) -> tuple[float, ...]:
    from .._exact.rope import xpos_zeta

    return xpos_zeta(rotary_dim)


def tables(module, pos: np.ndarray, freqs, af: float, xpos, center: int, inverse: bool):
    """``(q table, k table)``, ``(len(pos), 2, n_freq)`` doubles of checked uint32 ``pos``
    (the sine negated for the transpose rotation: exact)."""
    sb, _, zetas = xpos
    n = len(freqs)
    # one allocation for both: two large arrays alive at once were each mapped afresh by the
    # C allocator on every call, and their first touch (page faults) cost ~5x the kernels
    pair = np.empty((2, pos.shape[0], 2, n), dtype=np.float64)
    tq, tk = pair[0], pair[1]
    module.rope_xpos_table(positions=pos, inv_freq=freqs, attention_factor=af, zeta=zetas, scale_base=sb,
                           center=center, out_q=tq, out_k=tk)
    if inverse:
        np.negative(tq[:, 1], out=tq[:, 1])
        np.negative(tk[:, 1], out=tk[:, 1])
    return tq, tk
