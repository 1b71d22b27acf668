"""The sinusoidal table's configuration (the spec's ``PosEncConfig``) and its conventions."""

from __future__ import annotations

from dataclasses import dataclass

from ._freq import MAX_FREQUENCY, Geometric
from ._validate import (
    MAX_D_MODEL,
    check_base,
    check_choice,
    check_d_model,
    check_max_len,
    check_positive,
)

__all__ = [
    "PosEncConfig",
    "DEFAULT_MAX_LEN",
    "DEFAULT_BASE",
    "MAX_D_MODEL",
    "TABLE_LAYOUTS",
    "DENOMINATORS",
]

#: the spec's default table length
DEFAULT_MAX_LEN = 2048
#: the classic Transformer base
DEFAULT_BASE = 10000.0
#: column layouts of a table
TABLE_LAYOUTS = ("interleaved", "halves")
#: ``"d"``: ``w_i = base**(-2i/d)`` (the spec); ``"half-1"``: ``w_k = base**(-k/(d//2 - 1))``
DENOMINATORS = ("d", "half-1")


@dataclass(frozen=True)
class PosEncConfig:
    """Sinusoidal positional-encoding configuration.

    The spec (the defaults): column ``j = 2i`` holds ``sin(p * w_i)`` and ``j = 2i + 1``
    holds ``cos(p * w_i)`` with ``w_i = base ** (-2i / d_model)``.

    Parameters
    ----------
    d_model:
        Number of columns, ``1 <= d_model <= 65536``; odd is legal (last column is a sine).
    max_len:
        Table length (the spec's invariant ``max_len > 0``), at most ``2**32``.
    base:
        Frequency base, a finite number greater than 1.
    layout:
        ``"interleaved"`` (the spec; HF DistilBERT/XLM): ``sin, cos, sin, cos, ...``;
        ``"halves"`` (HF Marian/RoFormer, fairseq): ``[sin | cos]``, the sine block
        ``ceil(n/2)`` wide.
    denominator:
        ``"d"`` (the spec): ``w_i = base ** (-2i / d_model)``, ``ceil(d_model/2)`` frequencies;
        ``"half-1"`` (fairseq, M2M100, tensor2tensor): ``h = d_model // 2`` frequencies
        ``w_k = base ** (-k / (h - 1))`` (``h - 1`` taken as 1 when ``h = 1``, as
        tensor2tensor does); an odd ``d_model`` then ends with a zero column.
    min_timescale, max_timescale:
        tensor2tensor's timescales: frequencies run from ``1 / min_timescale`` down to
        ``1 / max_timescale`` (``max_timescale=None`` means ``base``), so
        ``w = (1/min_ts) * (max_ts/min_ts) ** (-exponent)`` with either denominator.
        ``min_timescale`` at least ``1/1024``, ``max_timescale > min_timescale``.

    Invalid values raise :class:`TypeError` or :class:`ValueError` naming the field.
    """

    d_model: int
    max_len: int = DEFAULT_MAX_LEN
    base: float = DEFAULT_BASE
    layout: str = "interleaved"
    denominator: str = "d"
    min_timescale: float = 1.0
    max_timescale: float | None = None

    def __post_init__(self) -> None:
        # normalise numpy scalars to plain Python numbers so configs hash and compare simply
        set_ = object.__setattr__
        set_(self, "d_model", check_d_model(self.d_model))
        set_(self, "max_len", check_max_len(self.max_len))
        set_(self, "base", check_base(self.base))
        set_(self, "layout", check_choice("layout", self.layout, TABLE_LAYOUTS))
        set_(self, "denominator", check_choice("denominator", self.denominator, DENOMINATORS))
        if self.denominator == "half-1" and self.d_model < 2:
            raise ValueError("d_model must be >= 2 with denominator='half-1', got 1")
        lo = check_positive("min_timescale", self.min_timescale)
        if 1.0 / lo > MAX_FREQUENCY:
            raise ValueError(f"min_timescale must be >= 1/{MAX_FREQUENCY:g}, got {lo!r}")
        set_(self, "min_timescale", lo)
        if self.max_timescale is not None:
            hi = check_positive("max_timescale", self.max_timescale)
            if self.base not in (DEFAULT_BASE, hi):
                raise ValueError(
                    f"give base or max_timescale, not both (base={self.base!r}, "
                    f"max_timescale={hi!r})"
                )
            set_(self, "max_timescale", hi)
        if self.top_timescale <= lo:
            raise ValueError(
                f"max_timescale (or base) must be greater than min_timescale, got "
                f"{self.top_timescale!r} <= {lo!r}"
            )

    @property
    def top_timescale(self) -> float:
        """``max_timescale``, or ``base`` when it is not given."""
        return self.base if self.max_timescale is None else self.max_timescale

    @property
    def n_freq(self) -> int:
        """Number of distinct frequencies: ``ceil(d_model / 2)``, or ``d_model // 2`` under
        the ``half-1`` denominator."""
        return self.frequencies.count

    @property
    def frequencies(self) -> Geometric:
        """The frequency set (see :mod:`fastpe._freq`)."""
        if self.denominator == "d":
            count, n = (self.d_model + 1) // 2, self.d_model / 2
        else:
            count = self.d_model // 2
            n = float(max(count - 1, 1))
        return Geometric(count, n, self.top_timescale, self.min_timescale)

    @property
    def is_spec(self) -> bool:
        """The spec's own convention (the kernels of ``forward`` and ``table`` since 0.1)."""
        return (
            self.layout == "interleaved"
            and self.denominator == "d"
            and self.min_timescale == 1.0
            and self.top_timescale == self.base
        )
