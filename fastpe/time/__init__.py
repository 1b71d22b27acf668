"""Time-series encodings computed exactly from integer timestamps.

Timestamps are where float arithmetic fails loudest: a Unix time in seconds (~1.7e9) has a
float32 spacing of 128 s, so a daily Fourier feature computed from it in float32 is off by
~0.01 rad, and a count of nanoseconds is not exact in float64 either.  Every function here
takes ``datetime64`` values of any unit (or integer counts of a unit) and computes each
phase and calendar field from the integer, rounding once.  What is accepted:
:func:`fastpe.time._timestamps.check_timestamps`.
"""

from __future__ import annotations

from ._calendar import calendar_features
from ._encoding import tgn_frequencies, time_encoding
from ._fourier import fourier_features
from ._temporal import temporal_embedding, temporal_marks

__all__: list[str] = ["calendar_features", "fourier_features", "time_encoding", "tgn_frequencies", "temporal_embedding", "temporal_marks"]
