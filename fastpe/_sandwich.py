"""The Sandwich attention bias (Chi et al. 2023, "Dissecting Transformer Length Extrapolation
via the Lens of Receptive Field Analysis"), as NeMo publishes it
(``nemo/collections/nlp/modules/common/megatron/position_embedding/
sandwich_relative_position_embedding.py``, ``SandwichRelativePositionEmbedding``).

NeMo's ``forward(query_seq_length, key_seq_length)`` gives, for head ``h = 0 .. n-1`` of ``n``
heads, query ``i`` and key ``j``::

    d = |i - j| of the bottom-right (q_len, k_len) corner of its square matrix
      = |j - i + q_len - k_len|                  (0 at j > i unless bidirectional: torch.tril)
    w_k = 1 / 10000 ** (2k / H),  k = 1 .. H/2   (H = hidden_size, "hidden size per head")
    bias = (sum_k cos(d w_k) - H/2) / ((h + 1) * 8 / n)

so every value is ``<= 0``, ``0`` on the diagonal (and wherever a causal mask put ``d = 0``),
its constant offset ``-H/2`` making ``d = 0`` exactly zero and its head scaling dividing head
``h`` by ``8 (h + 1) / n``.  NeMo returns it with a leading batch axis of 1; fastpe returns
``(n_heads, q_len, k_len)`` (``[None]`` adds the axis).

Exactness.  ``cos x - 1 = -2 sin(x/2)**2``, so the value is ``-(n / (4 (h + 1))) * D(d)`` with
``D(d) = sum_k sin(d w_k / 2)**2``: a sum of terms of one sign, which cannot cancel -- the
cosines' sum may pass near ``H/2`` (small ``d``) or near 0 but the bias is never a small
difference of large numbers.  The bias is Toeplitz, so ``D`` is computed once per distance
(each sine by the exact path of the table kernels, a compensated sum), scaled per head, and
every row copied from its head's line: float32, float16 and bfloat16 values are within 1 ULP
of the correctly rounded value (in practice correctly rounded), float64 within about
``2**-50`` relative; the ``python`` backend gives the correctly rounded values themselves
(:mod:`fastpe._exact.sandwich`).
"""

from __future__ import annotations

import numpy as np

from . import _backends, _dtypes
from ._validate import check_int
from .sinusoid import output_array

__all__ = ["sandwich_bias", "MAX_HEADS", "MAX_HIDDEN", "MAX_LEN", "MAX_ELEMENTS"]

MAX_HEADS = 1 << 16
MAX_HIDDEN = 1 << 16
#: query and key lengths (distances stay below 2**32, the exact path's range)
MAX_LEN = 1 << 32
MAX_ELEMENTS = 1 << 40


def sandwich_bias(n_heads, q_len, k_len=None, *, hidden_size, bidirectional=True, dtype=None, out=None,
                  backend=None) -> np.ndarray:
    """The Sandwich bias ``(n_heads, q_len, k_len)`` to add to attention logits (see the module
    docstring for every value).

    ``n_heads`` (NeMo's ``num_attention_heads``) 1 .. 65536; ``q_len``, ``k_len`` (its
    ``query_seq_length``, ``key_seq_length``; ``k_len`` defaults to ``q_len``) 1 .. 2**32;
    ``hidden_size`` its ``hidden_size``, the size per head, even, 2 .. 65536 (keyword);
    ``bidirectional`` its ``bidirectional`` (``False`` in a decoder: ``j > i`` gets 0, as its
    ``torch.tril`` of the distances does).  ``dtype``: float32 (the default without ``out``),
    float64, float16 or bfloat16; ``out`` as in :func:`fastpe.alibi.bias`; ``backend`` as
    everywhere.  :class:`TypeError` / :class:`ValueError` name the argument before anything
    is written.
    """
    n_heads = check_int("n_heads", n_heads, low=1, high=MAX_HEADS)
    q_len = check_int("q_len", q_len, low=1, high=MAX_LEN)
    k_len = q_len if k_len is None else check_int("k_len", k_len, low=1, high=MAX_LEN)
    hidden_size = check_int("hidden_size", hidden_size, low=2, high=MAX_HIDDEN)
    if hidden_size % 2:
        raise ValueError(f"hidden_size must be even (NeMo's H/2 frequencies), got {hidden_size}")
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"bidirectional must be a bool, got {type(bidirectional).__name__}")
    shape = (n_heads, q_len, k_len)
    if n_heads * q_len * k_len > MAX_ELEMENTS:
        raise ValueError(f"n_heads * q_len * k_len must be <= 2**40, got {n_heads} * {q_len} * {k_len}")
    if out is None:
        _dtypes.resolve(dtype)  # a bad dtype first, before a bad backend and the allocation
        _, module = _backends.resolve(backend)
        out = output_array(None, shape, dtype)
    else:
        out = output_array(out, shape, dtype)
        _, module = _backends.resolve(backend)
    module.sandwich_bias(n_heads=n_heads, hidden_size=hidden_size, bidirectional=bool(bidirectional), out=out)
    return out
