"""Polynomial constants shared by every compiled kernel (numba here, C in ``csrc/``).

The kernels evaluate ``sin(2*pi*r)`` and ``cos(2*pi*r)`` for a reduced argument ``r`` in
turns, ``|r| <= 1/8 + 2**-30``.  Folding ``2*pi`` into the coefficients saves a multiply and
a rounding.  The coefficients are the Taylor ones, ``(-1)**k (2*pi)**n / n!`` with
``n = 2k+1`` (sine) or ``n = 2k`` (cosine), rounded to the nearest double (values computed
with mpmath at 40 digits; ``tests/backends/test_poly.py`` recomputes and compares them).

Why these degrees: at ``|r| = 1/8`` the first omitted term is 4.6e-17 for the sine (degree 17)
and 1.0e-15 for the cosine (degree 16), against results >= 0.7 there, i.e. relative errors
below 2**-49.  A float32 result needs 2**-24; the margin is what keeps ~all outputs
*correctly* rounded, not merely within 1 ULP.  No libm call appears in a kernel, so loops
vectorise.

The hex strings below are written out once more, identically, in ``csrc/fastpe_kernels.h``;
a test checks the compiled extension reports the same bits.
"""

from __future__ import annotations

SIN_COEFFS: tuple[float, ...] = tuple(
    float.fromhex(h)
    for h in (
        "0x1.921fb54442d18p+2",
        "-0x1.4abbce625be53p+5",
        "0x1.466bc6775aae2p+6",
        "-0x1.32d2cce62bd86p+6",
        "0x1.50783487ee782p+5",
        "-0x1.e3074fde8871fp+3",
        "0x1.e8f434d018d63p+1",
        "-0x1.6fadb9f155744p-1",
    )
)

COS_COEFFS: tuple[float, ...] = tuple(
    float.fromhex(h)
    for h in (
        "0x1.0000000000000p+0",
        "-0x1.3bd3cc9be45dep+4",
        "0x1.03c1f081b5ac4p+6",
        "-0x1.55d3c7e3cbffap+6",
        "0x1.e1f506891babbp+5",
        "-0x1.a6d1f2a204a8cp+4",
        "0x1.f9d38a3763cc3p+2",
        "-0x1.b6e24f44b128fp+0",
    )
)
