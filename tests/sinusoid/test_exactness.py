"""Every backend against exact values from mpmath: within 1 ULP, and ~always correctly rounded.

The exact values are computed with mpmath (``support.oracle.exact_values``), not taken from
the reference backend, so a fault in the reference cannot hide one in a fast backend.

Samples per table (``CASES``): positions spread over every octave of the u32 range plus the
format edges, times a sample of columns (all of them for narrow tables), plus the hard
inputs -- positions where ``p * w`` lands within ~1e-10 of a multiple of pi/2.  The python
backend (the decimal reference, ~10 us a value) runs on the narrow tables only.

Run with ``-rA`` to see each backend's worst ULP and fraction correctly rounded.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from support.inputs import edge_positions, hard_positions, octave_positions, sample_columns
from support.oracle import exact_values, ulp_distance

import fastpe
from fastpe import _backends

from conftest import BACKEND_PARAMS as BACKENDS  # noqa: E402  (the default one only, in a default-only run)

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend

#: (d_model, base): odd and even widths up to the maximum, every base of support.inputs.BASES
CASES = [
    (1, 10000.0),
    (2, 10000.0),
    (3, 500000.0),
    (7, 10.5),
    (8, 10000.0),
    (63, 1e6),
    (64, 2.0),
    (255, 10000.0),
    (512, 10000.0),
    (512, 500000.0),
    (1023, 1e6),
    (65536, 10000.0),
    (65536, 500000.0),
]

#: the python backend computes whole rows at ~20 us a column pair: narrow tables only
PYTHON_MAX_D_MODEL = 64

#: the contract: within 1 ULP of the correctly rounded float32
MAX_ULP = 1
#: and in practice correctly rounded: the kernels carry ~2**-49 relative error
MIN_CORRECTLY_ROUNDED = 0.99999


def cases_for(backend: str):
    if backend == "python":
        return [c for c in CASES if c[0] <= PYTHON_MAX_D_MODEL]
    return CASES


@functools.cache
def samples(d_model: int, base: float):
    """``(pairs, exact)`` for one table: ``(position, column)`` pairs and float32 exact values.

    Cached: every backend is compared with the same, once-computed, mpmath values.
    """
    seed = d_model * 7 + int(base) % 1000
    positions = sorted(set(octave_positions(3, seed)) | set(edge_positions()))
    columns = sample_columns(d_model, 32, seed)
    pairs = [(p, j) for p in positions for j in columns]
    pairs += hard_positions(d_model, base)
    exact = np.array(exact_values(pairs, d_model, base), dtype=np.float32)
    return pairs, exact


def backend_values(backend: str, pairs, d_model: int, base: float) -> np.ndarray:
    """Column ``j`` of position ``p`` for each pair, from ``fastpe.forward`` on ``backend``.

    Whole rows are computed (that is what forward does), a few at a time so a 65,536-wide
    table does not need a row per pair in memory at once.
    """
    positions = np.array(sorted({p for p, _ in pairs}), dtype=np.uint32)
    config = fastpe.PosEncConfig(d_model, base=base)
    wanted = {}
    for p, j in pairs:
        wanted.setdefault(p, []).append(j)
    rows_per_call = max(1, (1 << 20) // d_model)
    picked = {}
    for start in range(0, positions.size, rows_per_call):
        chunk = positions[start : start + rows_per_call]
        out = np.empty((chunk.size, d_model), dtype=np.float32)
        fastpe.forward(chunk, config, out, backend=backend)
        for r, p in enumerate(chunk.tolist()):
            for j in wanted.get(p, ()):
                picked[(p, j)] = out[r, j]
    return np.array([picked[pair] for pair in pairs], dtype=np.float32)


def describe(pairs, got, exact, ulps, d_model, base, limit=10) -> list[str]:
    order = np.argsort(-ulps, kind="stable")[:limit]
    return [
        f"  d_model={d_model} base={base!r} p={pairs[k][0]} col={pairs[k][1]}: "
        f"got {float(got[k])!r} exact {float(exact[k])!r} ({int(ulps[k])} ULP)"
        for k in order
        if ulps[k] > 0
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_within_one_ulp_and_correctly_rounded(backend, record_property):
    lines = []
    total = n_exact = worst = 0
    offenders = []
    for d_model, base in cases_for(backend):
        pairs, exact = samples(d_model, base)
        got = backend_values(backend, pairs, d_model, base)
        ulps = ulp_distance(got, exact)
        case_worst = int(ulps.max())
        total += ulps.size
        n_exact += int((ulps == 0).sum())
        worst = max(worst, case_worst)
        lines.append(
            f"  d_model={d_model:<6} base={base!r:<9} values={ulps.size:<6} "
            f"worst={case_worst} ULP  misrounded={int((ulps > 0).sum())}"
        )
        if case_worst > MAX_ULP or (ulps > 0).any():
            offenders += describe(pairs, got, exact, ulps, d_model, base)
    fraction = n_exact / total
    record_property("worst_ulp", worst)
    record_property("fraction_correctly_rounded", fraction)
    print(
        f"\n[{backend}] {total} values: worst {worst} ULP, "
        f"correctly rounded {n_exact}/{total} = {fraction:.7f}"
    )
    print("\n".join(lines))
    if offenders:
        print("values not correctly rounded:\n" + "\n".join(offenders))
    assert worst <= MAX_ULP, f"[{backend}] worst {worst} ULP:\n" + "\n".join(offenders)
    assert fraction >= MIN_CORRECTLY_ROUNDED, (
        f"[{backend}] only {fraction:.7f} correctly rounded:\n" + "\n".join(offenders)
    )


# --------------------------------------------------------------------------- hard inputs

HARD_CASES = [(8, 10000.0), (64, 500000.0), (512, 10000.0), (1023, 1e6), (7, 10.5)]


def hard_samples(d_model: int, base: float):
    pairs = hard_positions(d_model, base)
    return pairs, np.array(exact_values(pairs, d_model, base), dtype=np.float32)


@pytest.mark.parametrize("d_model, base", HARD_CASES)
def test_hard_inputs_defeat_naive_float64(d_model, base, record_property):
    """The hard inputs are hard: ``np.sin(p * w)`` in float64 misrounds a large share.

    Near ``p = 2**32`` the product ``p * w`` is off by up to ~2**-22 in float64, while the
    result is ~1e-10: no correct digit is left.
    """
    pairs, exact = hard_samples(d_model, base)
    p = np.array([q for q, _ in pairs], dtype=np.float64)
    j = np.array([c for _, c in pairs])
    w = np.power(base, -2.0 * (j // 2) / d_model)
    naive = np.where(j % 2 == 0, np.sin(p * w), np.cos(p * w)).astype(np.float32)
    wrong = float((ulp_distance(naive, exact) > 0).mean())
    record_property("naive_misrounded", wrong)
    print(
        f"\nnaive float64, d_model={d_model} base={base!r}: {wrong:.0%} of {len(pairs)} misrounded"
    )
    assert len(pairs) >= 50
    assert float(np.abs(exact).min()) < 1e-9
    assert wrong > 0.10


@pytest.mark.parametrize("backend", BACKENDS)
def test_hard_inputs_within_one_ulp(backend):
    for d_model, base in HARD_CASES:
        if backend == "python" and d_model > PYTHON_MAX_D_MODEL:
            continue
        pairs, exact = hard_samples(d_model, base)
        got = backend_values(backend, pairs, d_model, base)
        ulps = ulp_distance(got, exact)
        assert ulps.max() <= MAX_ULP, "\n".join(describe(pairs, got, exact, ulps, d_model, base))


# --------------------------------------------------------------------------- range path


@pytest.mark.parametrize("backend", BACKENDS)
def test_range_path_exact_at_the_top(backend):
    """``sinusoid_range`` (the table path) on the last positions of the u32 range."""
    d_model, base, n = 7, 10000.0, 40
    start = (1 << 32) - n
    out = np.empty((n, d_model), dtype=np.float32)
    _backends.load(backend).sinusoid_range(start, d_model, base, out)
    pairs = [(start + r, j) for r in range(n) for j in range(d_model)]
    exact = np.array(exact_values(pairs, d_model, base), dtype=np.float32)
    ulps = ulp_distance(out.ravel(), exact)
    assert ulps.max() <= MAX_ULP, "\n".join(
        describe(pairs, out.ravel(), exact, ulps, d_model, base)
    )
