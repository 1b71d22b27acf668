"""Self-check: every fast backend against the exact reference, across the u32 range."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _backends, _reference
from ._ulp import ulp_distance

__all__ = ["CheckResult", "run_check", "check_positions"]


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
    base: float = 10000.0,
    seed: int = 0,
    backends: list[str] | None = None,
) -> list[CheckResult]:
    """Compare each backend with :mod:`fastpe._reference`; one result per backend and d_model.

    The ``python`` backend *is* the reference and is not compared with itself.
    """
    names = [b for b in (backends or _backends.available_backends()) if b != "python"]
    positions = check_positions(n_per_octave, seed)
    results = []
    for d_model in d_models:
        exact = np.array(_reference.sinusoid(positions.tolist(), d_model, base), dtype=np.float32)
        for name in names:
            module = _backends.load(name)
            out = np.empty((positions.shape[0], d_model), dtype=np.float32)
            module.sinusoid_forward(positions, d_model, base, out)
            ulps = ulp_distance(out, exact)
            results.append(
                CheckResult(name, d_model, int(ulps.size), int(ulps.max()), int((ulps == 0).sum()))
            )
    return results
