"""The sinusoidal table's configuration (the spec's ``PosEncConfig``)."""

from __future__ import annotations

from dataclasses import dataclass

from ._validate import MAX_D_MODEL, check_base, check_d_model, check_max_len

__all__ = ["PosEncConfig", "DEFAULT_MAX_LEN", "DEFAULT_BASE", "MAX_D_MODEL"]

#: the spec's default table length
DEFAULT_MAX_LEN = 2048
#: the classic Transformer base
DEFAULT_BASE = 10000.0


@dataclass(frozen=True)
class PosEncConfig:
    """Sinusoidal positional-encoding configuration.

    Column ``j = 2i`` holds ``sin(p * w_i)`` and ``j = 2i + 1`` holds ``cos(p * w_i)`` with
    ``w_i = base ** (-2i / d_model)``.

    Parameters
    ----------
    d_model:
        Number of columns, ``1 <= d_model <= 65536``; odd is legal (last column is a sine).
    max_len:
        Table length (the spec's invariant ``max_len > 0``), at most ``2**32``.
    base:
        Frequency base, a finite number greater than 1.

    Invalid values raise :class:`TypeError` or :class:`ValueError` naming the field.
    """

    d_model: int
    max_len: int = DEFAULT_MAX_LEN
    base: float = DEFAULT_BASE

    def __post_init__(self) -> None:
        # normalise numpy scalars to plain Python numbers so configs hash and compare simply
        object.__setattr__(self, "d_model", check_d_model(self.d_model))
        object.__setattr__(self, "max_len", check_max_len(self.max_len))
        object.__setattr__(self, "base", check_base(self.base))

    @property
    def n_freq(self) -> int:
        """Number of distinct frequencies, ``ceil(d_model / 2)``."""
        return (self.d_model + 1) // 2
