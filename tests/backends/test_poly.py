"""The kernels' polynomial coefficients are the Taylor ones of sin(2 pi r) and cos(2 pi r),
each the nearest double, and short enough a series for the kernels' error analysis."""

from __future__ import annotations

import mpmath
import pytest

from fastpe._plans.poly import COS_COEFFS, SIN_COEFFS
from support.oracle import taylor_coefficient

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend


def test_sine_coefficients_are_the_nearest_doubles():
    assert [c.hex() for c in SIN_COEFFS] == [taylor_coefficient(2 * k + 1).hex() for k in range(len(SIN_COEFFS))]


def test_cosine_coefficients_are_the_nearest_doubles():
    assert [c.hex() for c in COS_COEFFS] == [taylor_coefficient(2 * k).hex() for k in range(len(COS_COEFFS))]


def test_the_first_omitted_terms_are_below_the_stated_bounds():
    """At |r| = 1/8 the first omitted terms are 4.6e-17 (sine) and 1.0e-15 (cosine): relative
    errors below 2**-49 against results >= 0.7."""
    r = mpmath.mpf(1) / 8
    with mpmath.workdps(40):
        sin_next = (2 * mpmath.pi * r) ** (2 * len(SIN_COEFFS) + 1) / mpmath.factorial(2 * len(SIN_COEFFS) + 1)
        cos_next = (2 * mpmath.pi * r) ** (2 * len(COS_COEFFS)) / mpmath.factorial(2 * len(COS_COEFFS))
    assert 4.6e-17 < sin_next < 4.7e-17 and 1.0e-15 < cos_next < 1.01e-15
    assert cos_next / mpmath.mpf("0.7") < mpmath.mpf(2) ** -49
