"""The step tables of the anchored products, one cache for every compiled backend.

Every kernel value at an integer position ``p`` is the product of an anchor's exact sine and
cosine with those of the step ``m = p % STEPS`` (:mod:`fastpe._plans.words`), so each
frequency set needs the table ``steps[m, 0, i], steps[m, 1, i] = cos(m w_i), sin(m w_i)``
for ``m < STEPS`` once.  A set is named by the plan function giving its split words and that
function's arguments -- ``sinusoid_turns(d_model, base)``, ``frequency_turns(inv_freq)``,
``frequencies.turns(freqs)`` -- and the table is filled by the backend's own exact-path
kernel, which is part of the key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from .._plans.words import STEPS

__all__ = ["step_plan"]


@functools.lru_cache(maxsize=64)
def step_plan(fill: Callable[[np.ndarray, np.ndarray], None], words: Callable[..., np.ndarray],
              *key) -> tuple[np.ndarray, np.ndarray]:
    """``(turns, steps)``: the split words ``words(*key)`` (``(4, n)``) and their step table
    (``(STEPS, 2, n)``, read-only), which ``fill(turns, steps)`` writes; cached."""
    turns = words(*key)
    steps = np.empty((STEPS, 2, turns.shape[1]), dtype=np.float64)
    fill(turns, steps)
    steps.setflags(write=False)
    return turns, steps
