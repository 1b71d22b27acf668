"""What this installation can do and how well: ``fastpe info`` (versions, backends, threads)
and ``fastpe check`` (every fast backend against the exact reference across the u32 range,
distances counted in float32 ULPs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from . import _backends
from ._backends.registry import BACKENDS
from ._plans.frequencies import DEFAULT_BASE

__all__ = [
    "ulp_distance",
    "CheckResult",
    "run_check",
    "check_positions",
    "info",
]


def _ordinal(a: np.ndarray) -> np.ndarray:
    """Map float32 bit patterns to integers that are consecutive along the real line.

    ``-0.0`` and ``+0.0`` both map to 0, so they are 0 ULP apart.
    """
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def ulp_distance(a, b) -> np.ndarray:
    """``|a - b|`` counted in float32 ULPs (how many representable floats lie between)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("ulp_distance: NaN has no distance")
    return np.abs(_ordinal(a) - _ordinal(b))


@dataclass(frozen=True)
class CheckResult:
    backend: str
    d_model: int
    n_values: int
    worst_ulp: int
    n_correctly_rounded: int

    @property
    def ok(self) -> bool:
        return self.worst_ulp <= 1


def check_positions(n_per_octave: int, seed: int) -> np.ndarray:
    """Positions 0, 1, 2**32 - 1 and ``n_per_octave`` random ones in each ``[2**k, 2**(k+1))``."""
    rng = np.random.default_rng(seed)
    parts = [np.array([0, 1, 2**32 - 1], dtype=np.uint64)]
    for k in range(32):
        parts.append(rng.integers(2**k, 2 ** (k + 1), size=n_per_octave, dtype=np.uint64))
    return np.concatenate(parts).astype(np.uint32)


def run_check(
    *,
    d_models: tuple[int, ...] = (8, 63, 512),
    n_per_octave: int = 2,
    base: float = DEFAULT_BASE,
    seed: int = 0,
    backends: list[str] | None = None,
) -> list[CheckResult]:
    """Compare each backend with :mod:`fastpe._exact.sinusoid_decimal`; one result per backend and d_model.

    The ``python`` backend *is* the reference and is not compared with itself.
    """
    names = [b for b in (backends or _backends.available_backends()) if b != "python"]
    positions = check_positions(n_per_octave, seed)
    results = []
    for d_model in d_models:
        from ._exact import sinusoid_decimal as _reference  # the slow reference, only here

        exact = np.array(_reference.sinusoid(positions.tolist(), d_model, base), dtype=np.float32)
        for name in names:
            module = _backends.load(name)
            out = np.empty((positions.shape[0], d_model), dtype=np.float32)
            module.sinusoid_forward(positions=positions, d_model=d_model, base=base, out=out)
            ulps = ulp_distance(out, exact)
            results.append(
                CheckResult(name, d_model, int(ulps.size), int(ulps.max()), int((ulps == 0).sum()))
            )
    return results


def info() -> dict:
    """Version, backends (available or why not), the default choice and numba's threading.

    A ``$FASTPE_BACKEND`` that names no usable backend is reported under ``env_error``
    (and ``default`` is then the automatic choice) instead of raising.

    Loads every backend to find out, so it imports numba when numba is installed.
    """
    from ._version import __version__

    backends = {name: _backends.unavailable_reason(name) for name in BACKENDS}
    env_error = None
    try:
        default, _ = _backends.resolve(None)
    except (TypeError, ValueError) as exc:  # a bad $FASTPE_BACKEND: report it, don't fail
        env_error = str(exc)
        default = next(name for name, why in backends.items() if why is None)
    result = {
        "version": __version__,
        "backends": {name: ("available" if why is None else why) for name, why in backends.items()},
        "available": [name for name, why in backends.items() if why is None],
        "default": default,
        "env_backend": os.environ.get(_backends.ENV_VAR) or None,
        "env_error": env_error,
        "threading_layer": None,
        "threading_note": None,
        "threads": None,
        "cython_threads": None,
        "cython_build": None,
    }
    if backends.get("cython") is None:
        cython_backend = _backends.load("cython")
        result["cython_threads"] = cython_backend.threads()
        result["cython_build"] = cython_backend.build_info()
    if backends.get("numba") is None:
        numba_backend = _backends.load("numba")
        result["threading_layer"] = numba_backend.threading_layer()
        result["threading_note"] = numba_backend.THREADING.note
        result["threads"] = numba_backend.num_threads()
    else:
        result["threads"] = os.cpu_count()
    return result
