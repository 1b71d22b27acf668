"""RoPE frequency rules: HF ``rope_scaling`` / ``rope_parameters`` dicts to ``inv_freq``.

Two halves:

* :func:`resolve` validates everything once -- the dict as HF writes it in ``config.json``
  plus the model fields HF reads beside it -- and returns a frozen :class:`RopeSpec`.  Every
  failure is a :class:`TypeError` or :class:`ValueError` that names the argument (or the
  dict key, as ``scaling['factor']``), raised before anything is computed.
* :func:`compute` turns a spec and a sequence length into ``(inv_freq, attention_factor)``:
  ``inv_freq`` float64 of length ``rotary_dim / 2``, for radians per position.

The rules are those of HF transformers' current ``modeling_rope_utils`` (5.x), written
from its formulas as exact real-number definitions; :mod:`fastpe._exact.rope_scaling` evaluates
the same definitions in :mod:`decimal` and is the oracle this module is tested against.
HF evaluates them in float32; here every ``inv_freq`` and attention factor is the
correctly rounded float64 of the rule's real value (decimal arithmetic, see "Why decimal"
below), so the two agree to float32 precision.

With ``p_i = base ** (-2i / dim)``, ``i = 0 .. dim/2 - 1`` and ``dim`` the rotary dimension:

default
    ``p_i``; attention factor 1.
linear
    ``p_i / factor``.
dynamic (NTK)
    ``p_i`` with ``base`` replaced by ``base * (factor * L / M - (factor - 1)) ** (dim / (dim - 2))``
    where ``M = max_position_embeddings`` and ``L = max(seq_len, M)`` (``L = M`` when
    ``seq_len`` is None, HF's value at initialisation: no scaling).
yarn
    ``p_i * (1 - r_i) + (p_i / factor) * r_i`` with the ramp
    ``r_i = clip((i - low) / (high - low), 0, 1)``; ``low``/``high`` from
    ``d(b) = dim * ln(O / (2*pi*b)) / (2 * ln base)`` at ``b = beta_fast`` (default 32) and
    ``beta_slow`` (default 1), floored/ceiled unless ``truncate`` is false, then clamped to
    ``[0, dim - 1]`` (``high = low + 0.001`` if they meet; if the clamps leave ``high < low``,
    the ramp runs backwards, as HF's does); ``O`` =
    ``original_max_position_embeddings``.  Attention factor: ``attention_factor`` if given,
    else ``g(factor, mscale) / g(factor, mscale_all_dim)`` if both are given (and non-zero),
    else ``g(factor, 1)``, with ``g(s, m) = 0.1 * m * ln s + 1`` (1 for ``s <= 1``).
llama3
    with wavelength ``w_i = 2*pi / p_i``: ``p_i / factor`` if ``w_i > O / low_freq_factor``,
    else ``p_i`` if ``w_i < O / high_freq_factor``, otherwise
    ``(1 - s_i) * p_i / factor + s_i * p_i`` with
    ``s_i = (O / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor)`` (HF's
    order of the tests, which matters only for a negative ``low_freq_factor``: every
    frequency is then divided).  With ``high_freq_factor <= low_freq_factor`` (Llama 4
    Scout: both 1) the smoothing band is empty: HF's float32 code divides where
    ``w_i > O / low_freq_factor`` and keeps the rest, its ``0 / 0`` reached only where a
    float32 wavelength equals ``O / low_freq_factor`` exactly -- a point no real
    frequency is at (``p_i`` is algebraic, ``2*pi`` is not), so the exact rule is that cut.
longrope
    ``p_i / e_i`` with ``e = long_factor`` if ``seq_len > O`` else ``short_factor``.
    Attention factor: ``short_mscale`` / ``long_mscale`` on the same switch when given
    (Phi-3.5-MoE; HF's ``PhimoeRotaryEmbedding`` multiplies by them), else
    ``attention_factor`` if given, else 1 if ``F <= 1``, else
    ``sqrt(1 + ln F / ln O)``, with ``F = factor`` if given, else
    ``max_position_embeddings / O``.
proportional (Gemma 4)
    ``p_i / factor`` (``factor`` 1 by default) for ``i < n = int(partial_rotary_factor *
    head_dim // 2)`` -- the exponent over the whole ``head_dim``, ``p_i = base ** (-2i /
    head_dim)`` -- and 0 for the other pairs: ``rotary_dim`` is the whole head
    (``2 * (head_dim // 2)``), its pairs across the full half (NeoX's ``i`` and
    ``i + head_dim/2``), the last ``head_dim/2 - n`` of them not rotated.

For yarn, llama3 and longrope a missing ``original_max_position_embeddings`` defaults to
``max_position_embeddings``, as HF's ``standardize_rope_params`` does.

HF versions differ on YaRN: up to transformers 4.55, a dict with
``original_max_position_embeddings`` had its ``factor`` replaced by
``max_position_embeddings / original_max_position_embeddings`` (for the frequencies and the
attention factor alike); since 4.56 (huggingface/transformers#40320) the explicit
``factor`` wins and the ratio is only a fallback for a null factor.  fastpe follows the
current rule; to reproduce an older release, put that ratio in ``factor`` yourself.

Warnings.  Where HF's validators (``RotaryEmbeddingConfigMixin._validate_*``) only log a
warning and then compute, fastpe issues a :class:`RopeConfigWarning` saying the same and
computes what HF computes: a ``factor`` below 1, ``beta_fast < beta_slow``,
``high_freq_factor <= low_freq_factor``, a negative ``attention_factor`` (and YaRN's given as
an int), Llama-3's ``original_max_position_embeddings >= max_position_embeddings``, YaRN's
``factor`` against ``max_position_embeddings / original_max_position_embeddings``, LongRoPE
without a ``factor``, proportional without a ``partial_rotary_factor``, and every key the
rope type does not read, by name (HF's "unrecognized keys"; fastpe does not count as
unrecognized the keys it reads, as Phi-3.5-MoE's ``short_mscale`` / ``long_mscale``).
Where HF warns and its own arithmetic then fails or gives non-finite numbers, fastpe
raises instead, naming the key: a negative ``beta_fast`` or ``beta_slow`` (``math.log`` of
a negative number), a ``low_freq_factor`` or ``high_freq_factor`` of 0 (division by zero),
a ``factor`` of 0 or below (dynamic: below 0), LongRoPE's attention factor with
``original_max_position_embeddings = 1`` (``ln 1 = 0`` divides), LongRoPE lists of the
wrong length (torch cannot broadcast them), non-numbers.  A value HF takes without a
warning, fastpe takes too and computes the same rule with (an ``attention_factor`` of 0, a
negative ``mscale`` or ``low_freq_factor``, a base so close to 1 that YaRN's ramp runs
backwards).  Every key is validated in :func:`resolve`, before any arithmetic, and so are
the results the kernels take: a factor so small that an ``inv_freq`` passes
``MAX_INV_FREQ`` (1024), an ``mscale`` pair whose attention factor passes
:data:`MAX_ATTENTION_FACTOR` (``2**64``).  Also refused, though HF computes something:
non-finite numbers, a base of at most 1 (as everywhere in fastpe), a negative or zero
LongRoPE factor (a negative or infinite frequency), an attention factor above ``2**64``,
lengths above :data:`MAX_LENGTH`.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

import numpy as np

from .._plans.frequencies import DEFAULT_BASE
from .._exact.constants import decimal_pi
from .._validate import MAX_INV_FREQ, POSITION_LIMIT, check_int, check_layout

__all__ = [
    "ROPE_TYPES",
    "ORIGINAL_LENGTH_TYPES",
    "RopeSpec",
    "RopeConfigWarning",
    "resolve",
    "check_seq_len",
    "compute",
    "length_key",
    "yarn_correction_range",
    "uses_seq_len",
    "warn",
    "MAX_HEAD_DIM",
    "MAX_LENGTH",
    "MAX_ATTENTION_FACTOR",
]

#: the rope types understood, as HF spells them (``rope_type``, or legacy ``type``): every
#: key of HF 5.24's ``ROPE_INIT_FUNCTIONS`` and the ``default`` rule of the model classes
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope", "proportional")
#: legacy names: early Phi-3 configs say ``"type": "su"`` for what is now ``longrope``
_ALIASES = {"su": "longrope", "mrope": "default"}
#: the rope types that name M-RoPE itself: HF's Qwen2-VL config reads ``"type": "mrope"`` as
#: the default rule with ``mrope_section`` (transformers 5 rewrites it to ``"default"``)
_MROPE_NAMES = frozenset({"mrope"})
#: the rules that read ``original_max_position_embeddings``: a model config's top-level value
#: (Phi-3) takes precedence over the rope dict's, as HF reads it (legacy names included)
ORIGINAL_LENGTH_TYPES = frozenset({"yarn", "llama3", "longrope", "su"})
MAX_HEAD_DIM = 65536
#: the largest ``max_position_embeddings`` / ``original_max_position_embeddings``: positions
#: stop below 2**32, and bounded lengths keep every decimal quantity of the rules (a ratio
#: ``O / (2*pi*beta)``, ``factor * L / M``) far inside decimal's exponent range, which a
#: length of a million digits would leave (``decimal.Overflow``)
MAX_LENGTH = 1 << 64
#: the largest attention factor, in magnitude: with ``|x| < 2**128`` (float32) the rotation's
#: double products ``x1 * C - x2 * S`` stay finite (below ``2**193``), where a factor near
#: ``2**900`` would overflow them to ``inf - inf = NaN`` instead of the float32 overflow the
#: exact value rounds to.  Real models use factors near 1.
MAX_ATTENTION_FACTOR = 2.0**64

#: the keys each rope type reads besides ``rope_type`` / ``type``, ``rope_theta`` and
#: ``partial_rotary_factor``: HF's validators' required and optional keys, and the two
#: HF's validator omits although a rotary module reads them (LongRoPE's ``short_mscale`` /
#: ``long_mscale``, read by ``PhimoeRotaryEmbedding``; proportional's ``factor``, read by
#: its rule).  Any other key draws a :class:`RopeConfigWarning` naming it.
TYPE_KEYS = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
             "mscale", "mscale_all_dim", "truncate"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings", "attention_factor", "factor",
                 "short_mscale", "long_mscale"),
    "proportional": ("factor",),
}
_COMMON_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved")

#: keys of a whole model config that no rope dict has: a ``scaling`` holding one of them is
#: a config.json passed whole, whose rope_theta, head_dim and lengths sit beside its dict
_CONFIG_ONLY_KEYS = ("rope_scaling", "rope_parameters", "model_type", "architectures", "hidden_size",
                     "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "vocab_size",
                     "max_position_embeddings", "intermediate_size", "head_dim", "n_embd", "n_head",
                     "text_config", "layer_types", "torch_dtype")


class RopeConfigWarning(UserWarning):
    """A RoPE configuration HF transformers accepts with a warning (its validators'
    ``logger.warning``), or a key no rule reads: fastpe warns the same way and computes
    what HF computes."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str) -> None:
    """Issue a :class:`RopeConfigWarning` attributed to the first caller outside
    ``fastpe/rope/`` (the user's line, not this package's)."""
    level, frame = 2, sys._getframe(1)  # stacklevel 2: warn's caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, RopeConfigWarning, stacklevel=level)


@dataclass(frozen=True)
class RopeSpec:
    """A validated RoPE configuration: everything :func:`compute` needs, nothing else.

    Fields that do not apply to ``rope_type`` are ``None``.  Frozen and hashable, so
    frequencies can be cached per spec.
    """

    rope_type: str
    head_dim: int
    rotary_dim: int
    base: float
    factor: float | None = None
    max_position_embeddings: int | None = None
    original_max_position_embeddings: int | None = None
    attention_factor: float | None = None  # as given in the dict (yarn, longrope)
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    short_mscale: float | None = None  # longrope (Phi-3.5-MoE): the attention factor, both or neither
    long_mscale: float | None = None
    partial_rotary_factor: float | None = None  # proportional: the share of head_dim // 2 pairs rotated
    #: M-RoPE (Qwen-VL): pairs per axis (time, height, width), summing to ``rotary_dim / 2``;
    #: ``None`` for one-axis RoPE.  ``mrope_interleaved``: Qwen3-VL's T H W T H W ... order
    #: (else consecutive sections, Qwen2-VL / Qwen2.5-VL); ``None`` without sections.
    mrope_section: tuple[int, int, int] | None = None
    mrope_interleaved: bool | None = None

    @property
    def is_mrope(self) -> bool:
        return self.mrope_section is not None

    @property
    def n_freq(self) -> int:
        return self.rotary_dim // 2

    @property
    def rotated_pairs(self) -> int:
        """The pairs that rotate: ``rotary_dim / 2``, except proportional's leading
        ``int(partial_rotary_factor * head_dim // 2)`` (HF's float arithmetic)."""
        if self.rope_type == "proportional":
            return int(self.partial_rotary_factor * self.head_dim // 2)
        return self.n_freq


# ---------------------------------------------------------------------------- validation


def _is_real(x) -> bool:
    return isinstance(x, (numbers.Real, np.floating, np.integer)) and not isinstance(x, (bool, np.bool_))


def _to_float(name: str, value) -> float:
    """``float(value)`` of a real number, finite; an int or Fraction beyond the doubles
    (``10**400``) is a ValueError naming ``name``, not a bare OverflowError."""
    try:
        v = float(value)
    except OverflowError:  # only exact types overflow: ints and Fractions
        bits = abs(value.numerator).bit_length() - value.denominator.bit_length()
        raise ValueError(f"{name} must be finite, got {type(value).__name__} beyond the float64 range "
                         f"(about 2**{bits})") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return v


def _real(name: str, value, *, low: float | None = None, low_open: bool = False) -> float:
    """A finite real number (not a bool) as a float, optionally bounded below."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = _to_float(name, value)
    if low is not None and (v <= low if low_open else v < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low:g}, got {v!r}")
    return v


def _base(name: str, value) -> float:
    """RoPE theta: a finite real number greater than 1 (the messages of ``check_base``)."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    v = _to_float(name, value)
    if v <= 1.0:
        raise ValueError(f"{name} must be greater than 1, got {v!r}")
    return v


def _length(name: str, value) -> int:
    """A length in ``[1, MAX_LENGTH]``.  A huge one is described by its size: ``str()`` of
    an int past 4300 digits is itself an error."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = operator.index(value)
    if not 1 <= value <= MAX_LENGTH:
        shown = value if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"
        raise ValueError(f"{name} must be {'>= 1' if value < 1 else '<= 2**64'}, got {shown}")
    return value


def _is_int(x) -> bool:
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def _opt_real(name: str, params: Mapping, key: str, **bounds) -> float | None:
    value = params.get(key)
    return None if value is None else _real(f"{name}[{key!r}]", value, **bounds)


def _factor_list(name: str, value, n: int) -> tuple[float, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a list of {n} numbers, got {type(value).__name__}")
    if isinstance(value, np.ndarray) and value.ndim != 1:  # a 0-d array has no len()
        raise ValueError(f"{name} must be a list of {n} numbers, got an array of shape {value.shape}")
    if len(value) != n:
        raise ValueError(f"{name} must have rotary_dim/2 = {n} entries, got {len(value)}")
    return tuple(_real(f"{name}[{i}]", v, low=0.0, low_open=True) for i, v in enumerate(value))


def _rope_type(scaling: Mapping, label: str = "scaling") -> str:
    # HF: ``rope_type`` wins; the legacy ``type`` fills in when it is absent
    key = "rope_type" if "rope_type" in scaling else "type"  # the key the caller wrote
    rope_type = scaling.get(key, "default")
    if rope_type is None:
        rope_type = "default"
    if not isinstance(rope_type, str):
        raise TypeError(f"{label}[{key!r}] must be a string, got {type(rope_type).__name__} {rope_type!r}")
    name = rope_type.strip().lower()  # in any letter case, as every fastpe name ('Llama3', 'YaRN')
    name = _ALIASES.get(name, name)
    if name not in ROPE_TYPES:
        raise ValueError(f"{label}[{key!r}] {rope_type!r} is not supported; choose one of {', '.join(ROPE_TYPES)}")
    return name


def rope_layout(layout) -> str:
    """``layout`` checked, in any letter case (``"NEOX"`` is ``"neox"``): the name, or
    check_layout's error naming what was given."""
    if isinstance(layout, str):
        key = layout.strip().lower()
        if key in ("neox", "gptj"):
            return key
    return check_layout(layout)


def check_seq_len(seq_len) -> int | None:
    """``seq_len``: None or an integer in ``[0, 2**32]``."""
    if seq_len is None:
        return None
    return check_int("seq_len", seq_len, low=0, high=POSITION_LIMIT)


def resolve(
    head_dim,
    *,
    base=None,
    rotary_dim=None,
    scaling=None,
    max_position_embeddings=None,
    label: str = "scaling",
) -> RopeSpec:
    """Validate every argument and the ``scaling`` dict; return the :class:`RopeSpec`.

    ``base=None`` means ``scaling['rope_theta']`` if present, else 10000 (a model's
    ``config.json`` keeps ``rope_theta`` beside its rope dict, not in it: pass it as
    ``base``, or read the config with ``Rotary.from_config``); ``rotary_dim=None`` means
    ``int(head_dim * scaling['partial_rotary_factor'])`` if present (HF's rule), else
    ``head_dim`` (``proportional`` rotates pairs across the whole head, its
    ``partial_rotary_factor`` counting the pairs that turn).  Giving both an argument and
    the dict's value is fine when they agree and a :class:`ValueError` when they do not.
    The dict is only read, never modified.  ``label`` is how messages name the dict
    (``Rotary.from_config`` names the config field it came from).  Issues a
    :class:`RopeConfigWarning` wherever HF's validators warn (see the module notes).
    """
    head_dim = check_int("head_dim", head_dim, low=2, high=MAX_HEAD_DIM)
    if scaling is None:
        scaling = {}
    elif not isinstance(scaling, Mapping):
        raise TypeError(
            "scaling must be a dict (an HF rope_scaling / rope_parameters dict) or None, "
            f"got {type(scaling).__name__}"
        )
    whole = [k for k in _CONFIG_ONLY_KEYS if k in scaling]
    if whole:
        raise ValueError(
            f"{label} is a whole model config (it has {', '.join(map(repr, whole[:3]))}), not a rope dict: read "
            "it with fastpe.rope.Rotary.from_config(config), which also takes rope_theta, head_dim, the lengths "
            "and the per-layer dicts from beside the dict -- or pass scaling=config['rope_scaling'] with "
            "base=config['rope_theta'] and the lengths yourself"
        )
    nested = [k for k, v in scaling.items() if isinstance(v, Mapping)]
    if nested:
        raise ValueError(
            f"{label} holds dicts under {', '.join(map(repr, nested))}: per-layer rope_parameters (HF v5); "
            "pass one layer's dict, or read the config with fastpe.rope.Rotary.from_config(config, layer_type=...)"
        )
    if not isinstance(scaling, dict):  # a read-only Mapping is fine; work on a plain copy
        scaling = dict(scaling)
    rope_type = _rope_type(scaling, label)

    if max_position_embeddings is not None:
        max_position_embeddings = _length("max_position_embeddings", max_position_embeddings)

    # base / rope_theta
    theta = scaling.get("rope_theta")
    if theta is not None:
        theta = _base(f"{label}['rope_theta']", theta)
    if base is not None:
        base = _base("base", base)
        if theta is not None and theta != base:
            raise ValueError(f"base={base!r} contradicts {label}['rope_theta']={theta!r}; give one of them")
    base = base if base is not None else theta if theta is not None else DEFAULT_BASE

    if rope_type == "proportional":
        rotary_dim, prf = _proportional_dims(head_dim, rotary_dim, scaling, label)
    else:
        rotary_dim, prf = _rotary_dim(head_dim, rotary_dim, scaling, label), None

    _warn_unread_keys(scaling, rope_type, label)
    spec = dict(rope_type=rope_type, head_dim=head_dim, rotary_dim=rotary_dim, base=base,
                max_position_embeddings=max_position_embeddings, partial_rotary_factor=prf)
    spec.update(_mrope_params(scaling, rotary_dim, label))
    spec = RopeSpec(**spec, **_type_params(rope_type, scaling, rotary_dim, max_position_embeddings, label))
    _check_results(spec, label)
    return spec


def _mrope_params(scaling: Mapping, rotary_dim: int, label: str) -> dict:
    """``mrope_section`` (three non-negative ints summing to ``rotary_dim / 2``) and
    ``mrope_interleaved`` (a bool) of the dict, or nothing for one-axis RoPE.  ``"type":
    "mrope"`` needs a section; so does ``mrope_interleaved``."""
    key = "rope_type" if "rope_type" in scaling else "type"
    named = isinstance(scaling.get(key), str) and scaling[key].strip().lower() in _MROPE_NAMES
    section = scaling.get("mrope_section")
    interleaved = scaling.get("mrope_interleaved")
    name = f"{label}['mrope_section']"
    if interleaved is not None and not isinstance(interleaved, (bool, np.bool_)):
        raise TypeError(f"{label}['mrope_interleaved'] must be true or false, got {type(interleaved).__name__} "
                        f"{interleaved!r}")
    if section is None:
        if named:
            raise ValueError(f"{name} is required for {label}[{key!r}] 'mrope' (the pairs of the time, height "
                             "and width axes)")
        if interleaved:
            raise ValueError(f"{label}['mrope_interleaved'] needs {name} (the pairs of each axis)")
        return {}
    section = check_mrope_section(section, rotary_dim // 2, bool(interleaved), name)
    return {"mrope_section": section, "mrope_interleaved": bool(interleaved)}


def check_mrope_section(section, n_freq: int, interleaved: bool, name: str = "mrope_section") -> tuple[int, ...]:
    """Three non-negative integers summing to ``n_freq`` (``rotary_dim / 2``); interleaved,
    each axis's pairs must fit the T H W order (HF's strided columns), else a ValueError."""
    if isinstance(section, (str, bytes, Mapping)) or not isinstance(section, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a list of 3 integers, got {type(section).__name__}")
    if isinstance(section, np.ndarray) and section.ndim != 1:
        raise ValueError(f"{name} must be a list of 3 integers, got an array of shape {section.shape}")
    if len(section) != 3:
        raise ValueError(f"{name} must have 3 entries (time, height, width), got {len(section)}")
    out = []
    for i, v in enumerate(section):
        if not _is_int(v):
            raise TypeError(f"{name}[{i}] must be an integer, got {type(v).__name__} {v!r}")
        v = operator.index(v)
        if v < 0:
            raise ValueError(f"{name}[{i}] must be >= 0, got {v}")
        out.append(v)
    if sum(out) != n_freq:
        raise ValueError(f"{name} must sum to rotary_dim/2 = {n_freq}, got {out} (sum {sum(out)})")
    if interleaved:
        counts = np.bincount(mrope_axes(tuple(out), True), minlength=3).tolist()
        if counts != out:
            raise ValueError(f"{name} {out} does not fit the interleaved order T H W T H W ... of {n_freq} pairs "
                             f"(it gives {counts})")
    return tuple(out)


def mrope_axes(section: tuple[int, ...], interleaved: bool) -> np.ndarray:
    """The axis (0 time, 1 height, 2 width) of each pair, ``int64 (sum(section),)``, as HF
    picks them: consecutive sections (Qwen2-VL's split), or pair ``j`` from axis ``j % 3``
    while that axis has pairs left, the time axis for the rest (Qwen3-VL's
    ``recomposition_frequencies``: height ``1, 4, ... < 3 * section[1]``, width ``2, 5, ... <
    3 * section[2]``)."""
    n = sum(section)
    if not interleaved:
        return np.repeat(np.arange(3), section)
    axes = np.zeros(n, dtype=np.int64)
    for axis in (1, 2):
        axes[axis:min(3 * section[axis], n):3] = axis
    return axes


def _rotary_dim(head_dim: int, rotary_dim, scaling: Mapping, label: str) -> int:
    """``rotary_dim``, or ``int(head_dim * partial_rotary_factor)`` (HF's rule), or the head."""
    prf = scaling.get("partial_rotary_factor")
    dim_from_prf = None
    key = f"{label}['partial_rotary_factor']"
    if prf is not None:
        prf = _real(key, prf, low=0.0, low_open=True)
        if prf > 1.0:
            raise ValueError(f"{key} must be <= 1, got {prf!r}")
        dim_from_prf = int(head_dim * prf)  # HF's rule, float product truncated
    if rotary_dim is not None:
        rotary_dim = check_int("rotary_dim", rotary_dim, low=2)
        if dim_from_prf is not None and dim_from_prf != rotary_dim:
            raise ValueError(
                f"rotary_dim={rotary_dim} contradicts {key}={prf!r} "
                f"(int({head_dim} * {prf!r}) = {dim_from_prf}); give one of them"
            )
        name = "rotary_dim"
    elif dim_from_prf is not None:
        rotary_dim, name = dim_from_prf, f"rotary_dim (int(head_dim * {key}))"
    else:
        rotary_dim, name = head_dim, "rotary_dim (= head_dim)"
    if rotary_dim > head_dim:
        raise ValueError(f"{name} must be <= head_dim = {head_dim}, got {rotary_dim}")
    if rotary_dim < 2:
        raise ValueError(f"{name} must be >= 2, got {rotary_dim}")
    if rotary_dim % 2:
        raise ValueError(f"{name} must be even, got {rotary_dim}")
    return rotary_dim


def _proportional_dims(head_dim: int, rotary_dim, scaling: Mapping, label: str) -> tuple[int, float]:
    """Proportional rotates pairs across the whole head (``2 * (head_dim // 2)`` columns);
    ``partial_rotary_factor`` in ``[0, 1]`` says how many turn (HF: missing means 1, with
    a warning)."""
    key = f"{label}['partial_rotary_factor']"
    prf = scaling.get("partial_rotary_factor")
    if prf is None:
        warn(f"{key} is missing for rope_type 'proportional': every pair rotates (HF warns and takes 1.0, which "
             "makes it the default rule divided by factor); give a value below 1 for proportional RoPE")
        prf = 1.0
    else:
        prf = _real(key, prf, low=0.0)
        if prf > 1.0:
            raise ValueError(f"{key} must be <= 1, got {prf!r}")
    full = 2 * (head_dim // 2)
    if rotary_dim is not None:
        rotary_dim = check_int("rotary_dim", rotary_dim, low=2)
        if rotary_dim != full:
            raise ValueError(
                f"rotary_dim={rotary_dim} contradicts rope_type 'proportional', which pairs dimensions across the "
                f"whole head (rotary_dim {full} for head_dim {head_dim}); {key} sets how many pairs rotate"
            )
    return full, prf


def _warn_unread_keys(scaling: Mapping, rope_type: str, label: str) -> None:
    """One warning naming every key ``rope_type`` does not read (HF: "unrecognized keys")."""
    known = _COMMON_KEYS + TYPE_KEYS[rope_type]
    unread = [k for k in scaling if k not in known]
    if not unread:
        return
    import difflib

    names = []
    for key in unread:
        name = f"{label}[{key!r}]"
        close = difflib.get_close_matches(key, known, n=1) if isinstance(key, str) else []
        names.append(f"{name} (did you mean {close[0]!r}?)" if close else name)
    many = len(unread) > 1
    warn(f"{', '.join(names)} {'are not keys' if many else 'is not a key'} of rope_type {rope_type!r}: "
         f"{'they are' if many else 'it is'} ignored (HF warns of unrecognized keys and ignores them too)")


def _required(params: Mapping, key: str, rope_type: str, label: str = "scaling"):
    if key not in params:
        raise ValueError(f"{label}[{key!r}] is required for rope_type {rope_type!r}")
    return params[key]


#: what a factor below 1 does to each rule (the warning says it)
_BELOW_ONE = {
    "linear": "every frequency is multiplied by 1 / factor",
    "dynamic": "the base grows more slowly past max_position_embeddings",
    "yarn": "the interpolated frequencies rise instead of falling; the attention factor is 1",
    "llama3": "the low frequencies rise instead of falling",
    "longrope": "the attention factor is 1",
}


def _factor(params: Mapping, rope_type: str, label: str, value=None) -> float:
    """``factor``: required (a number) for linear, dynamic, yarn and llama3; also
    longrope's optional one (``value`` given).  HF's validators say factor "must be a
    float or int >= 1" -- a log line, after which it computes -- so a factor below 1 is a
    warning here too; one HF's arithmetic cannot use (0 divides, a negative flips the
    frequencies) is an error."""
    name = f"{label}['factor']"
    if value is None:
        value = _required(params, "factor", rope_type, label)
    value = _real(name, value)
    if rope_type == "dynamic":
        if value < 0:
            raise ValueError(f"{name} must be >= 0 for rope_type 'dynamic' (the base grows by "
                             f"factor * L / M - (factor - 1)), got {value!r}")
    elif rope_type != "longrope" and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if value < 1:
        warn(f"{name} = {value!r} is below 1: HF warns (its validator wants a factor >= 1) and computes with it, "
             f"as fastpe does ({_BELOW_ONE[rope_type]})")
    return value


def _original(params: Mapping, rope_type: str, max_position_embeddings, label: str) -> tuple[int, bool]:
    """``(original_max_position_embeddings, whether the dict gave it)``."""
    value = params.get("original_max_position_embeddings")
    if value is None:
        if max_position_embeddings is None:
            raise ValueError(
                f"{label}['original_max_position_embeddings'] (or max_position_embeddings, its "
                f"default) is required for rope_type {rope_type!r}"
            )
        return max_position_embeddings, False
    return _length(f"{label}['original_max_position_embeddings']", value), True


def _beta(params: Mapping, key: str, default: float, label: str) -> float:
    # HF: ``get(...) or default``, so 0 and None both mean the default.  A negative count of
    # rotations has no correction dimension (``ln(O / (2*pi*beta))``; HF's math.log raises)
    value = _opt_real(label, params, key)
    if not value:
        return default
    if value < 0:
        raise ValueError(f"{label}[{key!r}] must be > 0 (0 or null: the default {default:g}), got {value!r}")
    return value


def _llama3_band(params: Mapping, key: str, label: str) -> float:
    # HF divides O by both (``O / low_freq_factor``: ZeroDivisionError at 0); a negative one is
    # taken as HF takes it (see _llama3)
    value = _real(f"{label}[{key!r}]", _required(params, key, "llama3", label))
    if value == 0:
        raise ValueError(f"{label}[{key!r}] must not be 0 (the band edge is original_max_position_embeddings / {key})")
    return value


def _type_params(rope_type: str, p: Mapping, rotary_dim: int, mpe: int | None, label: str = "scaling") -> dict:
    if rope_type == "default":
        return {}
    if rope_type == "linear":
        return {"factor": _factor(p, rope_type, label)}
    if rope_type == "dynamic":
        factor = _factor(p, rope_type, label)
        if mpe is None:
            raise ValueError("max_position_embeddings is required for rope_type 'dynamic'")
        if rotary_dim < 4:
            raise ValueError("rotary_dim must be >= 4 for rope_type 'dynamic' (its exponent is dim / (dim - 2))")
        return {"factor": factor}
    if rope_type == "proportional":
        factor = p.get("factor")
        if factor is not None:  # HF: ``get("factor", 1.0)``, divided by
            factor = _real(f"{label}['factor']", factor, low=0.0, low_open=True)
        return {"factor": factor}
    if rope_type == "yarn":
        factor = _factor(p, rope_type, label)
        orig, _ = _original(p, rope_type, mpe, label)
        out = {"factor": factor, "original_max_position_embeddings": orig}
        out["attention_factor"] = _attention_key(p, rope_type, label)
        out["beta_fast"] = _beta(p, "beta_fast", 32.0, label)
        out["beta_slow"] = _beta(p, "beta_slow", 1.0, label)
        if out["beta_fast"] < out["beta_slow"]:
            warn(f"{label}['beta_fast'] ({out['beta_fast']:g}) is below {label}['beta_slow'] ({out['beta_slow']:g}): "
                 "HF warns and computes with them, as fastpe does (the ramp then runs backwards)")
        out["mscale"] = _opt_real(label, p, "mscale")
        out["mscale_all_dim"] = _opt_real(label, p, "mscale_all_dim")
        truncate = p.get("truncate", True)
        if truncate is not None and not isinstance(truncate, (bool, np.bool_)):
            raise TypeError(f"{label}['truncate'] must be true or false, got {type(truncate).__name__} {truncate!r}")
        out["truncate"] = bool(truncate)  # HF tests its truth: an explicit null means false
        if mpe is not None:
            implicit = mpe / orig  # HF's check, in its float arithmetic
            if implicit != factor and implicit != 1:
                warn(f"{label}['factor'] = {factor!r} differs from max_position_embeddings / "
                     f"{label}['original_max_position_embeddings'] = {mpe} / {orig} = {implicit!r}: HF warns and "
                     "uses the explicit factor (since transformers 4.56), as fastpe does")
        return out
    if rope_type == "llama3":
        factor = _factor(p, rope_type, label)
        orig, given = _original(p, rope_type, mpe, label)
        out = {"factor": factor, "original_max_position_embeddings": orig}
        low = _llama3_band(p, "low_freq_factor", label)
        high = _llama3_band(p, "high_freq_factor", label)
        if high <= low:
            warn(f"{label}['high_freq_factor'] ({high:g}) is not greater than {label}['low_freq_factor'] ({low:g}): "
                 "HF warns and computes with them, as fastpe does -- with no band between them, every frequency "
                 "whose wavelength exceeds original_max_position_embeddings / low_freq_factor is divided by "
                 "factor and the others are kept")
        if mpe is not None and orig >= mpe:
            where = f"{label}['original_max_position_embeddings']" if given else \
                "original_max_position_embeddings (defaulted to max_position_embeddings)"
            warn(f"{where} = {orig} is not below max_position_embeddings = {mpe}: HF warns and computes with it, "
                 "as fastpe does")
        out["low_freq_factor"], out["high_freq_factor"] = low, high
        return out
    assert rope_type == "longrope", rope_type
    n = rotary_dim // 2
    out = {
        "short_factor": _factor_list(f"{label}['short_factor']", _required(p, "short_factor", rope_type, label), n),
        "long_factor": _factor_list(f"{label}['long_factor']", _required(p, "long_factor", rope_type, label), n),
    }
    orig, _ = _original(p, rope_type, mpe, label)
    out["original_max_position_embeddings"] = orig
    out["attention_factor"] = _attention_key(p, rope_type, label)
    factor = p.get("factor")
    if factor is None:
        ratio = f" = {mpe} / {orig}" if mpe is not None else ""
        warn(f"{label} has no 'factor': HF warns and recommends setting it to max_position_embeddings / "
             f"original_max_position_embeddings{ratio}, the ratio LongRoPE's attention factor falls back to")
    else:
        out["factor"] = _factor(p, rope_type, label, factor)
    out["short_mscale"], out["long_mscale"] = _mscale_pair(p, label)
    if out["attention_factor"] is None and out["short_mscale"] is None:
        if factor is None and mpe is None:
            raise ValueError(
                f"longrope needs {label}['factor'], {label}['attention_factor'] or max_position_embeddings "
                "to set its attention factor"
            )
        # sqrt(1 + ln F / ln O) for F > 1: ln 1 = 0 divides (HF: ZeroDivisionError)
        above_one = out["factor"] > 1 if factor is not None else mpe > orig
        if above_one and orig == 1:
            raise ValueError(
                f"{label}['original_max_position_embeddings'] must be >= 2 for LongRoPE's attention factor "
                "sqrt(1 + ln(factor) / ln(original_max_position_embeddings)), got 1 (ln 1 = 0); "
                f"give {label}['attention_factor'] to set the factor directly"
            )
    return out


def _attention_key(params: Mapping, rope_type: str, label: str) -> float | None:
    """yarn's and longrope's ``attention_factor``, multiplying cos and sin.  HF warns below
    0 (and, for yarn, of anything but a float) and multiplies by it all the same."""
    raw = params.get("attention_factor")
    value = _opt_real(label, params, "attention_factor")
    if value is None:
        return None
    name = f"{label}['attention_factor']"
    if abs(value) > MAX_ATTENTION_FACTOR:
        raise ValueError(f"{name} must be <= 2**64 in magnitude, got {value!r}")
    if value < 0:
        warn(f"{name} = {value!r} is negative: HF warns and multiplies cos and sin by it, as fastpe does")
    elif rope_type == "yarn" and not isinstance(raw, float):
        warn(f"{name} = {raw!r} is not a float: HF's YaRN validator warns; the value is used as given")
    return value


def _mscale_pair(params: Mapping, label: str) -> tuple[float | None, float | None]:
    """LongRoPE's ``short_mscale`` / ``long_mscale`` (Phi-3.5-MoE): both or neither."""
    values = {}
    for key, other in (("short_mscale", "long_mscale"), ("long_mscale", "short_mscale")):
        if params.get(key) is None:
            if params.get(other) is not None:
                raise ValueError(f"{label}[{key!r}] is required beside {label}[{other!r}]: the attention factor at "
                                 "lengths up to and past original_max_position_embeddings")
            return None, None
        value = _real(f"{label}[{key!r}]", params[key])
        if abs(value) > MAX_ATTENTION_FACTOR:
            raise ValueError(f"{label}[{key!r}] must be <= 2**64 in magnitude, got {value!r}")
        values[key] = value
    return values["short_mscale"], values["long_mscale"]


def _check_results(spec: RopeSpec, label: str = "scaling") -> None:
    """Refuse, naming the key, a configuration whose results the kernels cannot take: every
    ``inv_freq`` in ``[0, MAX_INV_FREQ]`` and ``|attention_factor| <= MAX_ATTENTION_FACTOR``.

    Once their keys are in range, the default and dynamic rules give frequencies of at most
    1; a factor below 1 raises the others' by up to ``1 / factor``; LongRoPE divides by
    factors that may be tiny; Llama-3's smoothing with a negative ``high_freq_factor``
    beside a positive ``low_freq_factor`` (HF computes it) can go below 0; YaRN's
    ``mscale`` pair is a ratio whose denominator may be 0.  The values are those
    :func:`compute` returns (and caches).
    """
    if spec.rope_type == "yarn" and spec.attention_factor is None and spec.mscale and spec.mscale_all_dim:
        with localcontext() as ctx:
            ctx.prec = _PREC + 5
            denominator = _mscale(Decimal(spec.factor), Decimal(spec.mscale_all_dim))
        pair = f"{label}['mscale'] = {spec.mscale!r} and {label}['mscale_all_dim'] = {spec.mscale_all_dim!r}"
        # exactly 0 needs mscale_all_dim * ln(factor) = -10 to 45 digits, which doubles
        # practically never give; but a DivisionByZero must not be what the caller sees
        if denominator == 0:
            raise ValueError(f"{pair} give no attention factor: 0.1 * mscale_all_dim * ln(factor) + 1 is 0")
        attention = _compute(spec, None)[1]
        if not abs(attention) <= MAX_ATTENTION_FACTOR:
            raise ValueError(f"{pair} give the attention factor {attention!r}; its magnitude must be <= 2**64")
    if spec.rope_type in ("default", "dynamic"):
        return
    if spec.rope_type == "longrope":
        for long, key in ((False, "short_factor"), (True, "long_factor")):
            values = _compute(spec, long)[0]
            if max(values) > MAX_INV_FREQ:  # resolve runs on every call: one C-level pass when fine
                i, v = next((i, v) for i, v in enumerate(values) if v > MAX_INV_FREQ)
                e = getattr(spec, key)[i]
                raise ValueError(
                    f"{label}[{key!r}][{i}] = {e!r} is too small: inv_freq[{i}] = "
                    f"base**(-{2 * i}/{spec.rotary_dim}) / {e!r} = {v!r} exceeds {MAX_INV_FREQ:g}, "
                    "the largest frequency fastpe's exact kernels take"
                )
        return
    values = _compute(spec, None)[0]
    if max(values) > MAX_INV_FREQ:
        i, v = next((i, v) for i, v in enumerate(values) if v > MAX_INV_FREQ)
        raise ValueError(f"{label}['factor'] = {spec.factor!r} is too small: inv_freq[{i}] = {v!r} exceeds "
                         f"{MAX_INV_FREQ:g}, the largest frequency fastpe's exact kernels take")
    if min(values) < 0:  # llama3 only: see _llama3
        i, v = next((i, v) for i, v in enumerate(values) if v < 0)
        raise ValueError(
            f"{label}['high_freq_factor'] = {spec.high_freq_factor!r} below 0 beside {label}['low_freq_factor'] = "
            f"{spec.low_freq_factor!r} gives the negative frequency inv_freq[{i}] = {v!r} (HF computes it); "
            "fastpe's exact kernels take frequencies >= 0"
        )


# ------------------------------------------------------------------------------ numerics
#
# Why decimal.  The rules are cheap (dim/2 values) but some are ill-conditioned in float64:
# YaRN's ramp with ``truncate: false`` divides by ``high - low`` with real-valued bounds, and
# Llama-3's smoothing is quadratic in ``p_i``, so rounding an intermediate to a double moves
# the result by up to ~``factor`` ULP.  Evaluated at 40 digits and rounded once, every
# ``inv_freq`` and attention factor here is the correctly rounded double of the rule's
# real value -- the same number the reference computes by another route -- which matters
# because fastpe's cos/sin are exact for the double ``inv_freq`` at positions up to 2**32.

#: decimal digits: ~133 bits, so that after up to 32,768 chained multiplications (each off
#: by < 1e-40) and a rule's few operations, the float64 rounding is the correct one
_PREC = 40


@functools.lru_cache(maxsize=256)
def _base_powers(ln_base: Decimal, dim: int) -> tuple[Decimal, ...]:
    """``exp(-(2i/dim) * ln_base)`` for ``i < dim/2``, to ~``_PREC`` digits.

    One decimal exponential for the ratio, then repeated multiplication (a *different* route
    from the reference, which takes one exponential per column).  Cached.
    """
    out = []
    with localcontext() as ctx:
        ctx.prec = _PREC + 5
        ratio = (-2 * ln_base / dim).exp()
        w = Decimal(1)
        for _ in range(dim // 2):
            out.append(w)
            w *= ratio
    return tuple(out)


def _ln_base(base: float) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = _PREC + 5
        return Decimal(base).ln()


def _dynamic_ln_base(spec: RopeSpec, seq_len: int | None) -> Decimal:
    """``ln`` of dynamic NTK's effective base, exactly from the doubles it is built of."""
    mpe = spec.max_position_embeddings
    length = mpe if seq_len is None else max(seq_len, mpe)
    # HF's factor * L / M - (factor - 1), as 1 + factor * (L - M) / M: a sum of non-negative
    # terms, where the difference of the two large ones cancels for a huge factor (1e300 gave
    # 0 at 45 digits, hence ln 0 and infinite frequencies); exactly 1 at L = M
    s = 1 + Decimal(spec.factor) * (length - mpe) / mpe
    dim = spec.rotary_dim
    return Decimal(spec.base).ln() + Decimal(dim) / (dim - 2) * s.ln()


def uses_seq_len(spec: RopeSpec) -> bool:
    """Whether the frequencies depend on the sequence length (dynamic, longrope)."""
    return spec.rope_type in ("dynamic", "longrope")


def length_key(spec: RopeSpec, seq_len: int | None):
    """What of ``seq_len`` the rule sees: one key per distinct result, not per length --
    dynamic's ``max(seq_len, max_position_embeddings)``, longrope's long/short switch
    (``seq_len > original_max_position_embeddings``), ``None`` for the other rules."""
    if spec.rope_type == "dynamic":
        return spec.max_position_embeddings if seq_len is None else max(seq_len, spec.max_position_embeddings)
    if spec.rope_type == "longrope":
        return bool(seq_len and seq_len > spec.original_max_position_embeddings)
    return None


def _yarn_range(spec: RopeSpec) -> tuple[Decimal, Decimal]:
    two_pi = 2 * decimal_pi(_PREC + 5)
    ln_base = Decimal(spec.base).ln()

    def d(rotations: float) -> Decimal:
        orig = Decimal(spec.original_max_position_embeddings)
        return spec.rotary_dim * (orig / (Decimal(rotations) * two_pi)).ln() / (2 * ln_base)

    low, high = d(spec.beta_fast), d(spec.beta_slow)
    if spec.truncate:
        low, high = low.to_integral_value(ROUND_FLOOR), high.to_integral_value(ROUND_CEILING)
    return max(low, Decimal(0)), min(high, Decimal(spec.rotary_dim - 1))


def yarn_correction_range(spec: RopeSpec) -> tuple[float, float]:
    """YaRN's ``(low, high)`` ramp bounds in pair indices (integers when ``truncate``)."""
    with localcontext() as ctx:
        ctx.prec = _PREC + 5
        low, high = _yarn_range(spec)
    return float(low), float(high)


def compute(spec: RopeSpec, seq_len: int | None = None) -> tuple[np.ndarray, float]:
    """``(inv_freq, attention_factor)`` for a resolved spec; ``inv_freq`` is a new float64 array.

    ``seq_len`` matters only for dynamic (``None``: ``max_position_embeddings``) and
    longrope (``None`` or ``<= original_max_position_embeddings``: ``short_factor``).
    """
    values, attention = _compute(spec, length_key(spec, seq_len))  # one cache entry per distinct result
    return np.array(values, dtype=np.float64), attention


@functools.lru_cache(maxsize=256)
def _compute(spec: RopeSpec, key) -> tuple[tuple[float, ...], float]:
    with localcontext() as ctx:
        ctx.prec = _PREC + 5
        kind, dim = spec.rope_type, spec.rotary_dim
        one = Decimal(1)
        if kind == "dynamic":
            values, attention = _base_powers(_dynamic_ln_base(spec, key), dim), one
        elif kind == "proportional":
            values, attention = _proportional(spec), one
        else:
            p = _base_powers(_ln_base(spec.base), dim)
            if kind == "default":
                values, attention = p, one
            elif kind == "linear":
                f = Decimal(spec.factor)
                values, attention = [x / f for x in p], one
            elif kind == "yarn":
                values, attention = _yarn(spec, p)
            elif kind == "llama3":
                values, attention = _llama3(spec, p), one
            else:
                values, attention = _longrope(spec, p, long=key)
        # float(Decimal) rounds correctly
        return tuple(float(v) for v in values), float(attention)


def _mscale(scale: Decimal, m: Decimal) -> Decimal:
    # HF's ``0.1 * m * ln(scale) + 1``: one tenth, exactly
    return Decimal(1) if scale <= 1 else m * scale.ln() / 10 + 1


def _yarn(spec: RopeSpec, p) -> tuple[list[Decimal], Decimal]:
    factor = Decimal(spec.factor)
    if spec.attention_factor is not None:
        attention = Decimal(spec.attention_factor)
    elif spec.mscale and spec.mscale_all_dim:  # HF tests their truth: 0 counts as absent
        attention = _mscale(factor, Decimal(spec.mscale)) / _mscale(factor, Decimal(spec.mscale_all_dim))
    else:
        attention = _mscale(factor, Decimal(1))
    low, high = _yarn_range(spec)
    if low == high:
        high += Decimal(0.001)  # HF's guard against a zero-width ramp (a double there too)
    width = high - low
    out = []
    for i, x in enumerate(p):
        # HF's clamp((i - low) / (high - low), 0, 1), tested as such: where the clamps to
        # [0, dim - 1] leave high below low (a base near 1 or a tiny beta_fast) the ramp runs
        # the other way -- 1 up to high, 0 from low on -- which tests of i against low and
        # high would miss
        ramp = (i - low) / width
        if ramp <= 0:
            out.append(x)
        elif ramp >= 1:
            out.append(x / factor)
        else:
            out.append(x * (1 - ramp) + x / factor * ramp)
    return out, attention


def _llama3(spec: RopeSpec, p) -> list[Decimal]:
    orig = Decimal(spec.original_max_position_embeddings)
    lo, hi, factor = Decimal(spec.low_freq_factor), Decimal(spec.high_freq_factor), Decimal(spec.factor)
    two_pi = 2 * decimal_pi(_PREC + 5)
    out = []
    for x in p:
        # O / wavelength, with wavelength = 2*pi / p_i: the bands compare it with lo and hi,
        # in HF's order.  HF tests ``wavelength > O / lo`` first; with lo < 0 that holds
        # everywhere (O / lo is negative), so every frequency is divided, whatever hi says.
        # Its ``wavelength < O / hi`` never holds for hi < 0: then every frequency the first
        # test leaves is smoothed, with s <= 0 (a negative result is refused in resolve)
        turns = orig * x / two_pi
        if lo < 0 or turns < lo:  # wavelength > O / low_freq_factor: fully interpolated
            out.append(x / factor)
        elif (hi > 0 and turns > hi) or hi == lo:  # wavelength < O / high_freq_factor: unchanged
            # hi == lo leaves no band: HF's float32 0 / 0 there needs a wavelength equal to
            # O / lo, which no real p_i has (algebraic, where 2*pi is transcendental)
            out.append(x)
        else:
            s = (turns - lo) / (hi - lo)
            out.append((1 - s) * x / factor + s * x)
    return out


def _proportional(spec: RopeSpec) -> list[Decimal]:
    """``base ** (-2i / head_dim) / factor`` for the rotated pairs, 0 for the others."""
    p = _base_powers(_ln_base(spec.base), spec.head_dim)  # the exponent over the whole head
    n = spec.rotated_pairs
    factor = Decimal(1) if spec.factor is None else Decimal(spec.factor)
    return [x / factor for x in p[:n]] + [Decimal(0)] * (spec.n_freq - n)


def _longrope(spec: RopeSpec, p, *, long: bool) -> tuple[list[Decimal], Decimal]:
    orig = spec.original_max_position_embeddings
    if spec.short_mscale is not None:  # Phi-3.5-MoE: the attention factor switches with the factors
        attention = Decimal(spec.long_mscale if long else spec.short_mscale)
    elif spec.attention_factor is not None:
        attention = Decimal(spec.attention_factor)
    else:
        if spec.factor is not None:
            factor = Decimal(spec.factor)
        else:
            factor = Decimal(spec.max_position_embeddings) / orig
        attention = Decimal(1) if factor <= 1 else (1 + factor.ln() / Decimal(orig).ln()).sqrt()
    ext = spec.long_factor if long else spec.short_factor
    return [x / Decimal(e) for x, e in zip(p, ext)], attention
