"""torchscale's xPos (``torchscale/component/xpos_relative_position.py``), written out in
float64 torch from its published code, for the tests that compare fastpe with it: the rope
module's own (tests/rope/test_xpos.py) and the torch bridge's (tests/bridges/test_torch_bridge.py).
Import it after ``pytest.importorskip("torch")``."""

from __future__ import annotations

import torch


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """torchscale's rotate_every_two: each adjacent pair ``(x1, x2) -> (-x2, x1)``."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def torchscale_xpos(x: torch.Tensor, scale_base, offset: int = 0, downscale: bool = False, inv_freq=None):
    """torchscale's ``XPOS.forward(x, offset, downscale)`` in float64 on ``x`` ``(batch,
    length, head_dim)``: ``scale = (arange(0, d, 2) + 0.4 d) / (1.4 d)`` raised to ``power =
    arange(min_pos, max_pos) / scale_base``, ``min_pos = -(length + offset) // 2``; its
    ``fixed_pos_embedding``'s angles ``p * inv_freq`` at ``0 .. length + offset - 1``
    (``inv_freq`` by default its own ``10000 ** (-j / (d / 2))``), the last ``length`` rows
    kept; ``x * cos + rotate_every_two(x) * sin`` with cos and sin times the scale (its
    inverse when ``downscale``), each value duplicated for its GPT-J pair.  Returns the
    result and that duplicated scale."""
    length, d = x.shape[1], x.shape[2]
    f64 = torch.float64
    scale = (torch.arange(0, d, 2, dtype=f64) + 0.4 * d) / (1.4 * d)
    min_pos = -(length + offset) // 2
    max_pos = length + offset + min_pos
    scale = scale ** (torch.arange(min_pos, max_pos, 1, dtype=f64) / scale_base)[:, None]
    half = scale.shape[1]
    if inv_freq is None:
        inv_freq = 1.0 / (10000 ** (torch.arange(0, half, dtype=f64) / half))
    else:
        inv_freq = torch.tensor(inv_freq, dtype=f64)  # a copy (a Rotary's inv_freq is read-only)
    angle = torch.arange(0, scale.shape[0], dtype=f64)[:, None] * inv_freq[None, :]
    sin, cos = torch.sin(angle), torch.cos(angle)
    scale, sin, cos = scale[-length:], sin[-length:], cos[-length:]
    if downscale:
        scale = 1 / scale

    def duplicate_interleave(m):
        return m.reshape(-1, 1).repeat(1, 2).reshape(m.shape[0], -1)

    sin, cos = (duplicate_interleave(t * scale) for t in (sin, cos))
    return x * cos + rotate_every_two(x) * sin, duplicate_interleave(scale)
