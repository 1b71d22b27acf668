"""The reference twin of :mod:`._scaling`: the same RoPE frequency rules, evaluated exactly.

Standard library only (:mod:`decimal`; :mod:`fractions` for the rational parts), no numpy,
and a deliberately different route: every frequency on its own,
``p_i = exp(-(2i/dim) * ln base)`` in decimal, where the fast module chains
multiplications; every rule is then applied in decimal at ~60 digits to the exact values of
the doubles in the spec (``Decimal(x)`` of a float is exact) and rounded to float64 once,
correctly.  Where a rule tests a condition (YaRN's floor/ceil, Llama-3's bands, LongRoPE's
short/long switch) the test is made on the exact value too.

The constants follow the formulas, not float code: ``0.1`` in YaRN's mscale is one tenth,
``2*pi`` is pi to 60 digits.  The one number that is a double in HF's code by nature --
the ``0.001`` YaRN adds to a degenerate ramp -- is taken as that double.

Arguments are not validated here: :func:`inv_freq` takes a :class:`RopeSpec` that
:func:`fastpe.rope._scaling.resolve` produced (one validator for both implementations).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

from .constants import decimal_pi

__all__ = ["inv_freq", "inv_freq_exact", "yarn_correction_range"]

PREC = 60


def _d(x) -> Decimal:
    """The exact value of a float or int, or a Fraction at the context precision."""
    if isinstance(x, Fraction):
        return Decimal(x.numerator) / Decimal(x.denominator)
    return Decimal(x)


def _powers(ln_base: Decimal, dim: int) -> list[Decimal]:
    return [(-Decimal(2 * i) / dim * ln_base).exp() for i in range(dim // 2)]


def _mscale(scale: Decimal, m: Decimal) -> Decimal:
    return Decimal(1) if scale <= 1 else m * scale.ln() / 10 + 1


def yarn_correction_range(spec) -> tuple[Decimal, Decimal]:
    """YaRN's ``(low, high)`` from the exact ``dim * ln(O / (2*pi*b)) / (2 * ln base)``."""
    with localcontext() as ctx:
        ctx.prec = PREC
        two_pi = 2 * decimal_pi(PREC + 10)
        ln_base = _d(spec.base).ln()

        def d(rotations) -> Decimal:
            return spec.rotary_dim * (_d(spec.original_max_position_embeddings) / (_d(rotations) * two_pi)).ln() / (
                2 * ln_base
            )

        low, high = d(spec.beta_fast), d(spec.beta_slow)
        if spec.truncate:
            low, high = low.to_integral_value(ROUND_FLOOR), high.to_integral_value(ROUND_CEILING)
        return max(low, Decimal(0)), min(high, Decimal(spec.rotary_dim - 1))


def inv_freq_exact(spec, seq_len: int | None = None) -> tuple[list[Decimal], Decimal]:
    """``(inv_freq, attention_factor)`` as decimals correct to ~``PREC`` digits."""
    with localcontext() as ctx:
        ctx.prec = PREC
        kind, dim = spec.rope_type, spec.rotary_dim
        one = Decimal(1)
        ln_base = _d(spec.base).ln()

        if kind == "dynamic":
            mpe = spec.max_position_embeddings
            length = mpe if seq_len is None else max(seq_len, mpe)
            f = Fraction(spec.factor)
            s = f * length / mpe - (f - 1)  # exact rational
            new_ln_base = ln_base + Decimal(dim) / (dim - 2) * _d(s).ln()
            return _powers(new_ln_base, dim), one

        p = _powers(ln_base, dim)
        if kind == "default":
            return p, one
        if kind == "linear":
            factor = _d(spec.factor)
            return [x / factor for x in p], one

        if kind == "yarn":
            factor = _d(spec.factor)
            if spec.attention_factor is not None:
                attention = _d(spec.attention_factor)
            elif spec.mscale and spec.mscale_all_dim:
                attention = _mscale(factor, _d(spec.mscale)) / _mscale(factor, _d(spec.mscale_all_dim))
            else:
                attention = _mscale(factor, one)
            low, high = yarn_correction_range(spec)
            if low == high:
                high = low + Decimal(0.001)
            out = []
            for i, x in enumerate(p):
                ramp = min(max((i - low) / (high - low), Decimal(0)), one)
                out.append(x * (1 - ramp) + x / factor * ramp)
            return out, attention

        if kind == "llama3":
            factor = _d(spec.factor)
            orig = _d(spec.original_max_position_embeddings)
            lo, hi = _d(spec.low_freq_factor), _d(spec.high_freq_factor)
            two_pi = 2 * decimal_pi(PREC + 10)
            out = []
            for x in p:
                wavelength = two_pi / x
                # HF's order of the tests: with lo < 0 the first always holds, with hi < 0
                # the second never does; hi == lo leaves no band (HF's 0 / 0 needs a
                # wavelength equal to O / lo, which no real frequency has)
                if wavelength > orig / lo:
                    out.append(x / factor)
                elif wavelength < orig / hi or hi == lo:
                    out.append(x)
                else:
                    s = (orig / wavelength - lo) / (hi - lo)
                    out.append((1 - s) * x / factor + s * x)
            return out, one

        if kind == "proportional":
            # the exponent over the whole head; HF's int(prf * head_dim // 2) pairs rotate
            n = int(spec.partial_rotary_factor * spec.head_dim // 2)
            factor = one if spec.factor is None else _d(spec.factor)
            rotated = [x / factor for x in _powers(ln_base, spec.head_dim)[:n]]
            return rotated + [Decimal(0)] * (dim // 2 - n), one

        assert kind == "longrope", kind
        orig = spec.original_max_position_embeddings
        long = bool(seq_len and seq_len > orig)
        if spec.short_mscale is not None:
            attention = _d(spec.long_mscale if long else spec.short_mscale)
        elif spec.attention_factor is not None:
            attention = _d(spec.attention_factor)
        else:
            if spec.factor is not None:
                factor = _d(spec.factor)
            else:
                factor = _d(Fraction(spec.max_position_embeddings, orig))
            attention = one if factor <= 1 else (1 + factor.ln() / _d(orig).ln()).sqrt()
        ext = spec.long_factor if long else spec.short_factor
        return [x / _d(e) for x, e in zip(p, ext)], attention


def inv_freq(spec, seq_len: int | None = None) -> tuple[list[float], float]:
    """:func:`inv_freq_exact` rounded to float64, correctly (``float(Decimal)`` is)."""
    if spec.rope_type not in ("dynamic", "longrope"):
        seq_len = None
    values, attention = inv_freq_exact(spec, seq_len)
    return [float(v) for v in values], float(attention)
