"""RoPE frequency rules: HF ``rope_scaling`` / ``rope_parameters`` dicts to ``inv_freq``.

Two halves:

* :func:`resolve` validates everything once -- the dict as HF writes it in ``config.json``
  plus the model fields HF reads beside it -- and returns a frozen :class:`RopeSpec`.  Every
  failure is a :class:`TypeError` or :class:`ValueError` that names the argument (or the
  dict key, as ``scaling['factor']``), raised before anything is computed.
* :func:`compute` turns a spec and a sequence length into ``(inv_freq, attention_factor)``:
  ``inv_freq`` float64 of length ``rotary_dim / 2``, for radians per position.

The rules are those of HF transformers' current ``modeling_rope_utils`` (5.x), written
from its formulas as exact real-number definitions; :mod:`._reference_scaling` evaluates
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
    ``[0, dim - 1]`` (``high = low + 0.001`` if they meet); ``O`` =
    ``original_max_position_embeddings``.  Attention factor: ``attention_factor`` if given,
    else ``g(factor, mscale) / g(factor, mscale_all_dim)`` if both are given (and non-zero),
    else ``g(factor, 1)``, with ``g(s, m) = 0.1 * m * ln s + 1`` (1 for ``s <= 1``).
llama3
    with wavelength ``w_i = 2*pi / p_i``: ``p_i`` if ``w_i < O / high_freq_factor``,
    ``p_i / factor`` if ``w_i > O / low_freq_factor``, otherwise
    ``(1 - s_i) * p_i / factor + s_i * p_i`` with
    ``s_i = (O / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor)``.
longrope
    ``p_i / e_i`` with ``e = long_factor`` if ``seq_len > O`` else ``short_factor``.
    Attention factor: ``attention_factor`` if given, else 1 if ``F <= 1``, else
    ``sqrt(1 + ln F / ln O)``, with ``F = factor`` if given, else
    ``max_position_embeddings / O``.

For yarn, llama3 and longrope a missing ``original_max_position_embeddings`` defaults to
``max_position_embeddings``, as HF's ``standardize_rope_params`` does.

HF versions differ on YaRN: up to transformers 4.55, a dict with
``original_max_position_embeddings`` had its ``factor`` replaced by
``max_position_embeddings / original_max_position_embeddings`` (for the frequencies and the
attention factor alike); since 4.56 (huggingface/transformers#40320) the explicit
``factor`` wins and the ratio is only a fallback for a null factor.  fastpe follows the
current rule; to reproduce an older release, put that ratio in ``factor`` yourself.

Where HF only logs a warning for a value its validators call invalid (``factor < 1``,
``beta_fast < beta_slow``, ``high_freq_factor <= low_freq_factor``, a LongRoPE list of the
wrong length), fastpe raises; keys a rule does not read are ignored, as in HF.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

import numpy as np

from .._exact import decimal_pi
from .._validate import POSITION_LIMIT, check_base, check_int

__all__ = [
    "ROPE_TYPES",
    "RopeSpec",
    "resolve",
    "check_seq_len",
    "compute",
    "yarn_correction_range",
    "uses_seq_len",
    "MAX_HEAD_DIM",
]

#: the rope types understood, as HF spells them (``rope_type``, or legacy ``type``)
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
#: legacy names: early Phi-3 configs say ``"type": "su"`` for what is now ``longrope``
_ALIASES = {"su": "longrope"}
MAX_HEAD_DIM = 65536
DEFAULT_BASE = 10000.0


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

    @property
    def n_freq(self) -> int:
        return self.rotary_dim // 2


# ---------------------------------------------------------------------------- validation


def _is_real(x) -> bool:
    return isinstance(x, (numbers.Real, np.floating, np.integer)) and not isinstance(x, (bool, np.bool_))


def _real(name: str, value, *, low: float | None = None, low_open: bool = False) -> float:
    """A finite real number (not a bool) as a float, optionally bounded below."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    if low is not None and (v <= low if low_open else v < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low:g}, got {v!r}")
    return v


def _opt_real(name: str, params: Mapping, key: str, **bounds) -> float | None:
    value = params.get(key)
    return None if value is None else _real(f"{name}[{key!r}]", value, **bounds)


def _factor_list(name: str, value, n: int) -> tuple[float, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a list of {n} numbers, got {type(value).__name__}")
    if len(value) != n:
        raise ValueError(f"{name} must have rotary_dim/2 = {n} entries, got {len(value)}")
    return tuple(_real(f"{name}[{i}]", v, low=0.0, low_open=True) for i, v in enumerate(value))


def _rope_type(scaling: Mapping) -> str:
    # HF: ``rope_type`` wins; the legacy ``type`` fills in when it is absent
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type is None:
        rope_type = "default"
    if not isinstance(rope_type, str):
        raise TypeError(f"scaling['rope_type'] must be a string, got {type(rope_type).__name__} {rope_type!r}")
    rope_type = _ALIASES.get(rope_type, rope_type)
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"scaling['rope_type'] {rope_type!r} is not supported; choose one of {', '.join(ROPE_TYPES)}")
    return rope_type


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
) -> RopeSpec:
    """Validate every argument and the ``scaling`` dict; return the :class:`RopeSpec`.

    ``base=None`` means ``scaling['rope_theta']`` if present, else 10000; ``rotary_dim=None``
    means ``int(head_dim * scaling['partial_rotary_factor'])`` if present (HF's rule), else
    ``head_dim``.  Giving both an argument and the dict's value is fine when they agree and
    a :class:`ValueError` when they do not.  The dict is only read, never modified.
    """
    head_dim = check_int("head_dim", head_dim, low=2, high=MAX_HEAD_DIM)
    if scaling is None:
        scaling = {}
    elif not isinstance(scaling, Mapping):
        raise TypeError(
            "scaling must be a dict (an HF rope_scaling / rope_parameters dict) or None, "
            f"got {type(scaling).__name__}"
        )
    nested = [k for k, v in scaling.items() if isinstance(v, Mapping)]
    if nested:
        raise ValueError(
            f"scaling holds dicts under {', '.join(map(repr, nested))}: per-layer rope_parameters "
            "are not supported; pass one layer's dict"
        )
    if not isinstance(scaling, dict):  # a read-only Mapping is fine; work on a plain copy
        scaling = dict(scaling)
    rope_type = _rope_type(scaling)

    if max_position_embeddings is not None:
        max_position_embeddings = check_int("max_position_embeddings", max_position_embeddings, low=1)

    # base / rope_theta
    theta = scaling.get("rope_theta")
    if theta is not None:
        if isinstance(theta, (bool, np.bool_)) or not _is_real(theta):
            raise TypeError(f"scaling['rope_theta'] must be a real number, got {type(theta).__name__} {theta!r}")
        try:
            theta = check_base(theta)
        except ValueError as exc:
            raise ValueError(f"scaling['rope_theta'] {str(exc)[len('base '):]}") from None
    if base is not None:
        base = check_base(base)
        if theta is not None and theta != base:
            raise ValueError(f"base={base!r} contradicts scaling['rope_theta']={theta!r}; give one of them")
    base = base if base is not None else theta if theta is not None else DEFAULT_BASE

    # rotary_dim / partial_rotary_factor
    prf = scaling.get("partial_rotary_factor")
    dim_from_prf = None
    if prf is not None:
        prf = _real("scaling['partial_rotary_factor']", prf, low=0.0, low_open=True)
        if prf > 1.0:
            raise ValueError(f"scaling['partial_rotary_factor'] must be <= 1, got {prf!r}")
        dim_from_prf = int(head_dim * prf)  # HF's rule, float product truncated
    if rotary_dim is not None:
        rotary_dim = check_int("rotary_dim", rotary_dim, low=2)
        if dim_from_prf is not None and dim_from_prf != rotary_dim:
            raise ValueError(
                f"rotary_dim={rotary_dim} contradicts scaling['partial_rotary_factor']={prf!r} "
                f"(int({head_dim} * {prf!r}) = {dim_from_prf}); give one of them"
            )
        name = "rotary_dim"
    elif dim_from_prf is not None:
        rotary_dim, name = dim_from_prf, "rotary_dim (int(head_dim * scaling['partial_rotary_factor']))"
    else:
        rotary_dim, name = head_dim, "rotary_dim (= head_dim)"
    if rotary_dim > head_dim:
        raise ValueError(f"{name} must be <= head_dim = {head_dim}, got {rotary_dim}")
    if rotary_dim < 2:
        raise ValueError(f"{name} must be >= 2, got {rotary_dim}")
    if rotary_dim % 2:
        raise ValueError(f"{name} must be even, got {rotary_dim}")

    spec = dict(rope_type=rope_type, head_dim=head_dim, rotary_dim=rotary_dim, base=base,
                max_position_embeddings=max_position_embeddings)
    return RopeSpec(**spec, **_type_params(rope_type, scaling, rotary_dim, max_position_embeddings))


def _required(params: Mapping, key: str, rope_type: str):
    if key not in params:
        raise ValueError(f"scaling[{key!r}] is required for rope_type {rope_type!r}")
    return params[key]


def _factor(params: Mapping, rope_type: str) -> float:
    # HF's validators say factor "must be a float or int >= 1" (they log it; we refuse it)
    return _real("scaling['factor']", _required(params, "factor", rope_type), low=1.0)


def _original(params: Mapping, rope_type: str, max_position_embeddings) -> int:
    value = params.get("original_max_position_embeddings")
    if value is None:
        if max_position_embeddings is None:
            raise ValueError(
                f"scaling['original_max_position_embeddings'] (or max_position_embeddings, its "
                f"default) is required for rope_type {rope_type!r}"
            )
        return max_position_embeddings
    return check_int("scaling['original_max_position_embeddings']", value, low=1)


def _type_params(rope_type: str, p: Mapping, rotary_dim: int, mpe: int | None) -> dict:
    if rope_type == "default":
        return {}
    if rope_type == "linear":
        return {"factor": _factor(p, rope_type)}
    if rope_type == "dynamic":
        factor = _factor(p, rope_type)
        if mpe is None:
            raise ValueError("max_position_embeddings is required for rope_type 'dynamic'")
        if rotary_dim < 4:
            raise ValueError("rotary_dim must be >= 4 for rope_type 'dynamic' (its exponent is dim / (dim - 2))")
        return {"factor": factor}
    if rope_type == "yarn":
        out = {"factor": _factor(p, rope_type), "original_max_position_embeddings": _original(p, rope_type, mpe)}
        out["attention_factor"] = _opt_real("scaling", p, "attention_factor", low=0.0, low_open=True)
        # HF: ``get(...) or default``, so 0 and None both mean the default
        out["beta_fast"] = _opt_real("scaling", p, "beta_fast") or 32.0
        out["beta_slow"] = _opt_real("scaling", p, "beta_slow") or 1.0
        if out["beta_fast"] < out["beta_slow"]:
            raise ValueError(
                f"scaling['beta_fast'] ({out['beta_fast']:g}) must be >= scaling['beta_slow'] "
                f"({out['beta_slow']:g})"
            )
        out["mscale"] = _opt_real("scaling", p, "mscale")
        out["mscale_all_dim"] = _opt_real("scaling", p, "mscale_all_dim")
        truncate = p.get("truncate", True)
        if truncate is not None and not isinstance(truncate, (bool, np.bool_)):
            raise TypeError(f"scaling['truncate'] must be true or false, got {type(truncate).__name__} {truncate!r}")
        out["truncate"] = bool(truncate)  # HF tests its truth: an explicit null means false
        return out
    if rope_type == "llama3":
        out = {"factor": _factor(p, rope_type), "original_max_position_embeddings": _original(p, rope_type, mpe)}
        low = _real("scaling['low_freq_factor']", _required(p, "low_freq_factor", rope_type), low=0.0, low_open=True)
        high = _real("scaling['high_freq_factor']", _required(p, "high_freq_factor", rope_type))
        if high <= low:
            raise ValueError(
                f"scaling['high_freq_factor'] ({high:g}) must be greater than scaling['low_freq_factor'] ({low:g})"
            )
        out["low_freq_factor"], out["high_freq_factor"] = low, high
        return out
    assert rope_type == "longrope", rope_type
    n = rotary_dim // 2
    out = {
        "short_factor": _factor_list("scaling['short_factor']", _required(p, "short_factor", rope_type), n),
        "long_factor": _factor_list("scaling['long_factor']", _required(p, "long_factor", rope_type), n),
        "original_max_position_embeddings": _original(p, rope_type, mpe),
        "attention_factor": _opt_real("scaling", p, "attention_factor", low=0.0, low_open=True),
    }
    factor = p.get("factor")
    if factor is not None:
        out["factor"] = _real("scaling['factor']", factor, low=1.0)
    elif out["attention_factor"] is None and mpe is None:
        raise ValueError(
            "longrope needs scaling['factor'], scaling['attention_factor'] or max_position_embeddings "
            "to set its attention factor"
        )
    return out


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
    f = Decimal(spec.factor)
    s = f * length / mpe - (f - 1)
    dim = spec.rotary_dim
    return Decimal(spec.base).ln() + Decimal(dim) / (dim - 2) * s.ln()


def uses_seq_len(spec: RopeSpec) -> bool:
    """Whether the frequencies depend on the sequence length (dynamic, longrope)."""
    return spec.rope_type in ("dynamic", "longrope")


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
    # one cache entry per distinct result, not per length
    if spec.rope_type == "dynamic":
        key = spec.max_position_embeddings if seq_len is None else max(seq_len, spec.max_position_embeddings)
    elif spec.rope_type == "longrope":
        key = bool(seq_len and seq_len > spec.original_max_position_embeddings)
    else:
        key = None
    values, attention = _compute(spec, key)
    return np.array(values, dtype=np.float64), attention


@functools.lru_cache(maxsize=256)
def _compute(spec: RopeSpec, key) -> tuple[tuple[float, ...], float]:
    with localcontext() as ctx:
        ctx.prec = _PREC + 5
        kind, dim = spec.rope_type, spec.rotary_dim
        one = Decimal(1)
        if kind == "dynamic":
            values, attention = _base_powers(_dynamic_ln_base(spec, key), dim), one
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
        if i <= low:
            out.append(x)
        elif i >= high:
            out.append(x / factor)
        else:
            ramp = (i - low) / width
            out.append(x * (1 - ramp) + x / factor * ramp)
    return out, attention


def _llama3(spec: RopeSpec, p) -> list[Decimal]:
    orig = Decimal(spec.original_max_position_embeddings)
    lo, hi, factor = Decimal(spec.low_freq_factor), Decimal(spec.high_freq_factor), Decimal(spec.factor)
    two_pi = 2 * decimal_pi(_PREC + 5)
    out = []
    for x in p:
        # O / wavelength, with wavelength = 2*pi / p_i: the bands compare it with lo and hi
        turns = orig * x / two_pi
        if turns > hi:  # wavelength < O / high_freq_factor: unchanged
            out.append(x)
        elif turns < lo:  # wavelength > O / low_freq_factor: fully interpolated
            out.append(x / factor)
        else:
            s = (turns - lo) / (hi - lo)
            out.append((1 - s) * x / factor + s * x)
    return out


def _longrope(spec: RopeSpec, p, *, long: bool) -> tuple[list[Decimal], Decimal]:
    orig = spec.original_max_position_embeddings
    if spec.attention_factor is not None:
        attention = Decimal(spec.attention_factor)
    else:
        if spec.factor is not None:
            factor = Decimal(spec.factor)
        else:
            factor = Decimal(spec.max_position_embeddings) / orig
        attention = Decimal(1) if factor <= 1 else (1 + factor.ln() / Decimal(orig).ln()).sqrt()
    ext = spec.long_factor if long else spec.short_factor
    return [x / Decimal(e) for x, e in zip(p, ext)], attention
