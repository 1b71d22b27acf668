"""The specification's worked examples, on every available backend (the reference included)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fastpe

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend

# the `backend` fixture (tests/conftest.py) runs each test on every available backend


def encode(backend, positions, d_model, base=10000.0) -> np.ndarray:
    out = np.empty((len(positions), d_model), dtype=np.float32)
    config = fastpe.PosEncConfig(d_model, base=base)
    return fastpe.forward(np.asarray(positions, dtype=np.uint32), config, out, backend=backend)


def test_d8_position_1(backend):
    pe = encode(backend, [1], 8)[0]
    expected = [0.8414710, 0.5403023, 0.0998334, 0.9950042]
    assert np.abs(pe[:4] - expected).max() <= 1e-6, pe[:4]


def test_d8_position_0_is_exactly_sin0_cos0(backend):
    pe = encode(backend, [0], 8)[0]
    assert pe[6] == 0.0 and not math.copysign(1.0, pe[6]) < 0
    assert pe[7] == 1.0
    assert (pe[0::2] == 0.0).all() and (pe[1::2] == 1.0).all()


def test_d8_pythagoras(backend):
    pe = encode(backend, [37], 8)[0].astype(np.float64)
    assert abs(pe[2] ** 2 + pe[3] ** 2 - 1.0) <= 1e-6


@pytest.mark.parametrize(
    "position, printed",
    [
        (3, ["0.1411", "-0.9900", "0.0300", "0.9996"]),
        (1, ["0.8415", "0.5403", "0.0100", "0.99995"]),
    ],
)
def test_d4_rows_to_printed_precision(backend, position, printed):
    pe = encode(backend, [position], 4)[0]
    for j, text in enumerate(printed):
        # each printed number is the value rounded to the decimals shown
        half_unit = 0.5 * 10.0 ** -len(text.split(".")[1])
        assert abs(float(pe[j]) - float(text)) <= half_unit + 1e-12, (j, pe[j], text)


def test_odd_d_model_ends_with_a_sine(backend):
    d_model, p = 7, 123
    pe = encode(backend, [p], d_model)[0]
    w = 10000.0 ** (-6 / 7)  # frequency 3, the lone last column
    assert abs(pe[6] - math.sin(p * w)) <= 1e-6
    assert pe.dtype == np.float32 and pe.shape == (7,)
