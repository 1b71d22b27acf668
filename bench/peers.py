"""The benchmark's one table: workloads x implementations (fastpe backends, peers, yardstick).

Each implementation's ``make(workload)`` returns a zero-argument callable that does the whole
piece of work once, or raises :class:`Unavailable` saying why it cannot run here.  The test
suite (``test_bench.py``) and the report (``report.py``) both read these tables, so a row
is named the same everywhere.

Rules every row follows, so the numbers compare:

* ``table`` workloads return a fresh ``(n, d)`` float32 array or tensor: allocating it is
  part of the work, for fastpe as for the peers and the yardstick.
* ``forward`` workloads write into an output allocated once, before timing, for everyone
  (the yardstick too); the peers start from the same ``uint32`` positions and cast them to
  float32 first, as a user would.
* Every implementation runs on this machine's default thread count: numba's pool (TBB) for
  fastpe and the numba yardstick, torch's intra-op pool; NumPy's ufuncs are single-threaded.
* RoPE ``rope_apply_qk`` workloads rotate q and k of one shape (positions ``0 .. seq-1``, HF's
  default frequencies at head_dim 128): fastpe in place into arrays allocated once, HF's
  ``apply_rotary_pos_emb`` from cos/sin caches computed before timing (as HF's model does,
  once per forward pass) into new tensors, as HF does; the yardstick reads and writes q and k
  once in place.  ``rope_cos_sin`` workloads return fresh cos and sin arrays (or tensors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import numpy as np

import fastpe
from fastpe._registry import BACKENDS

__all__ = [
    "Unavailable",
    "Workload",
    "Implementation",
    "WORKLOADS",
    "IMPLEMENTATIONS",
    "CASES",
    "REFERENCE_ROWS",
    "SEED",
    "ROPE_INV_FREQ",
    "hf_cos_sin",
    "hf_apply_rotary_pos_emb",
]

#: seed of the random positions (forward workloads)
SEED = 20240601
#: rows of the smallest table the ``python`` reference computes (it is ~5 ms a row at d=512)
REFERENCE_ROWS = 64


class Unavailable(Exception):
    """This implementation cannot run here (missing package, unsupported workload)."""


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Workload:
    key: str  #: pytest id and JSON key
    kind: str  #: "table" or "forward"
    rows: int
    d_model: int
    title: str  #: the pytest-benchmark group and the report's heading
    positions_kind: str = "arange"  #: "arange", "random_u32" or "near_2p32"
    #: RoPE: q's (and k's) shape (batch, heads, seq, head_dim), or cos_sin's (positions,
    #: rotary_dim); ``rows * d_model * 4`` is then the bytes written (q and k, or cos and sin)
    shape: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        return self.rows * self.d_model * 4

    @cached_property
    def positions(self) -> np.ndarray:
        """The ``uint32`` positions of a forward workload (fixed seed)."""
        rng = np.random.default_rng(SEED)
        if self.positions_kind == "random_u32":
            return rng.integers(0, 1 << 32, size=self.rows, dtype=np.uint32)
        if self.positions_kind == "near_2p32":
            # the top 2**20 positions below 2**32: the largest arguments fastpe accepts
            return ((1 << 32) - 1 - rng.integers(0, 1 << 20, size=self.rows, dtype=np.uint64)).astype(
                np.uint32
            )
        return np.arange(self.rows, dtype=np.uint32)

    @property
    def is_rope(self) -> bool:
        return self.kind.startswith("rope")

    @property
    def rope_positions(self) -> np.ndarray:
        """Positions ``0 .. seq - 1`` (HF's default ``position_ids``)."""
        n = self.shape[2] if self.kind == "rope_apply_qk" else self.shape[0]
        return np.arange(n, dtype=np.uint32)

    @cached_property
    def rope_qk(self) -> tuple[np.ndarray, np.ndarray]:
        """The workload's q and k (fixed seed); implementations take copies."""
        rng = np.random.default_rng(SEED)
        return (rng.standard_normal(self.shape, dtype=np.float32),
                rng.standard_normal(self.shape, dtype=np.float32))


#: RoPE frequencies of every RoPE workload: HF's default rule at head_dim 128, base 10000
ROPE_HEAD_DIM = 128
ROPE_INV_FREQ = 1.0 / (10000.0 ** (np.arange(0, ROPE_HEAD_DIM, 2, dtype=np.float64) / ROPE_HEAD_DIM))


def _rope_apply_workload(b: int, h: int, s: int, d: int) -> Workload:
    return Workload(
        f"rope-apply-qk-{b}x{h}x{s}x{d}", "rope_apply_qk", 2 * b * h * s, d,
        f"RoPE apply_qk_: q and k {b}x{h}x{s}x{d} float32", shape=(b, h, s, d),
    )


WORKLOADS: dict[str, Workload] = {
    w.key: w
    for w in (
        Workload(
            "table-2048x512", "table", 2048, 512,
            "table 2048x512 (the python reference: first 64 rows, scaled in the report)",
        ),
        Workload("table-8192x1024", "table", 8192, 1024, "table 8192x1024"),
        Workload("table-131072x1024", "table", 131072, 1024, "table 131072x1024"),
        Workload(
            "forward-1Mx64", "forward", 1_000_000, 64,
            "forward 1,000,000 random u32 positions x 64", "random_u32",
        ),
        Workload(
            "forward-4096x512-near2p32", "forward", 4096, 512,
            "forward 4096 positions in [2^32-2^20, 2^32) x 512", "near_2p32",
        ),
        _rope_apply_workload(1, 32, 4096, ROPE_HEAD_DIM),
        _rope_apply_workload(8, 32, 512, ROPE_HEAD_DIM),
        Workload(
            "rope-cos-sin-131072x128", "rope_cos_sin", 2 * 131072, ROPE_HEAD_DIM,
            "RoPE cos/sin caches: 131072 positions x 128, fresh arrays", shape=(131072, ROPE_HEAD_DIM),
        ),
    )
}

#: the sinusoidal workloads (the peers of the sinusoid computation run on these only)
SINUSOID = tuple(k for k, w in WORKLOADS.items() if not w.is_rope)
ROPE = tuple(k for k, w in WORKLOADS.items() if w.is_rope)

SMALLEST = "table-2048x512"


# --------------------------------------------------------------------- implementations


@dataclass(frozen=True)
class Implementation:
    key: str  #: pytest id
    label: str  #: the report's row name
    role: str  #: "fastpe", "reference", "peer" or "yardstick"
    make: Callable[[Workload], Callable[[], object]]
    workloads: tuple[str, ...] = tuple(WORKLOADS)
    note: str = ""
    backend: str | None = None  #: the fastpe backend, for the fastpe and reference rows


def _fastpe(backend: str):
    def make(w: Workload):
        if backend not in fastpe.available_backends():
            from fastpe._backends import unavailable_reason

            raise Unavailable(f"fastpe backend {backend!r} not available: {unavailable_reason(backend)}")
        if w.is_rope:
            return _fastpe_rope(backend, w)
        if w.kind == "table":
            rows = REFERENCE_ROWS if backend == "python" else w.rows
            return lambda: fastpe.table(w.d_model, rows, backend=backend)
        config = fastpe.PosEncConfig(w.d_model)
        positions = w.positions
        out = np.empty((w.rows, w.d_model), dtype=np.float32)
        return lambda: fastpe.forward(positions, config, out, backend=backend)

    return make


def _fastpe_rope(backend: str, w: Workload):
    from fastpe.rope._core import apply_qk_from_inv_freq, cos_sin_from_inv_freq

    positions = w.rope_positions
    if w.kind == "rope_cos_sin":
        return lambda: cos_sin_from_inv_freq(positions, ROPE_INV_FREQ, 1.0, backend=backend)
    q, k = (a.copy() for a in w.rope_qk)  # rotated in place, round after round
    return lambda: apply_qk_from_inv_freq(q, k, positions, ROPE_INV_FREQ, 1.0, backend=backend)


# -- the PyTorch tutorial module ("Sequence-to-Sequence Modeling with nn.Transformer")


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise Unavailable(f"torch not installed ({exc})") from None
    return torch


def torch_tutorial(position, d_model: int, pe):
    """The tutorial's ``PositionalEncoding.__init__`` body, float32, 2-D.

    Kept as the tutorial writes it: ``position * div_term`` is formed twice, and a fresh
    table starts from ``torch.zeros``.  ``position`` is the ``(n, 1)`` float32 column.
    """
    import torch

    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    if pe is None:
        pe = torch.zeros(position.shape[0], d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def _make_torch(w: Workload):
    torch = _torch()
    if w.kind == "table":
        return lambda: torch_tutorial(torch.arange(w.rows, dtype=torch.float32).unsqueeze(1), w.d_model, None)
    positions = w.positions
    out = torch.from_numpy(np.empty((w.rows, w.d_model), dtype=np.float32))

    def run():
        position = torch.from_numpy(positions.astype(np.float32)).unsqueeze(1)
        return torch_tutorial(position, w.d_model, out)

    return run


# -- the same computation in NumPy float32


def numpy_tutorial(position, d_model: int, pe):
    """The tutorial's computation in NumPy, float32 throughout (``position``: ``(n, 1)`` f32)."""
    div_term = np.exp(np.arange(0, d_model, 2, dtype=np.float32) * np.float32(-math.log(10000.0) / d_model))
    if pe is None:
        pe = np.zeros((position.shape[0], d_model), dtype=np.float32)
    pe[:, 0::2] = np.sin(position * div_term)
    pe[:, 1::2] = np.cos(position * div_term)
    return pe


def _make_numpy(w: Workload):
    if w.kind == "table":
        return lambda: numpy_tutorial(np.arange(w.rows, dtype=np.float32)[:, None], w.d_model, None)
    positions = w.positions
    out = np.empty((w.rows, w.d_model), dtype=np.float32)
    return lambda: numpy_tutorial(positions.astype(np.float32)[:, None], w.d_model, out)


# -- PyPI positional-encodings: PositionalEncoding1D (torch)


def _make_pe1d(w: Workload):
    _torch()
    if w.kind != "table":
        raise Unavailable("positional-encodings encodes only positions 0..n-1 (no arbitrary positions)")
    try:
        from positional_encodings.torch_encodings import PositionalEncoding1D
    except ImportError as exc:
        raise Unavailable(f"positional-encodings not installed ({exc})") from None
    import torch

    module = PositionalEncoding1D(w.d_model)
    # it reads only the input's shape, dtype and device: a broadcast view costs no memory
    x = torch.empty(1, 1, w.d_model).expand(1, w.rows, w.d_model)

    def run():
        module.cached_penc = None  # it caches by input shape; every call must compute
        return module(x)

    return run


# -- HF transformers' RoPE (LlamaRotaryEmbedding.forward, apply_rotary_pos_emb), float32


def hf_cos_sin(torch, inv_freq, position_ids, attention_scaling: float = 1.0):
    """``LlamaRotaryEmbedding.forward``'s body: float32 cos/sin caches ``(batch, seq, dim)``."""
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_scaling, emb.sin() * attention_scaling


def hf_rotate_half(torch, x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(torch, q, k, cos, sin, unsqueeze_dim: int = 1):
    """``apply_rotary_pos_emb`` of HF's Llama: new q and k tensors."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (hf_rotate_half(torch, q) * sin)
    k_embed = (k * cos) + (hf_rotate_half(torch, k) * sin)
    return q_embed, k_embed


def _make_hf_rope(w: Workload):
    torch = _torch()
    # HF keeps inv_freq as a float32 buffer; position_ids are int64 (batch, seq)
    inv = torch.from_numpy(ROPE_INV_FREQ.astype(np.float32))
    position_ids = torch.from_numpy(w.rope_positions.astype(np.int64))[None]
    if w.kind == "rope_cos_sin":
        return lambda: hf_cos_sin(torch, inv, position_ids)
    cos, sin = hf_cos_sin(torch, inv, position_ids)  # computed once per forward pass in HF
    q, k = (torch.from_numpy(a.copy()) for a in w.rope_qk)
    return lambda: hf_apply_rotary_pos_emb(torch, q, k, cos, sin)


# -- the yardstick: writing the same bytes, and nothing else


_numba_fill = None


def numba_fill():
    """The parallel fill kernel, compiled (and cached on disk) on first use.

    fastpe's numba backend is loaded first so numba's thread pool uses the same threading
    layer (TBB) as fastpe's kernels.
    """
    global _numba_fill
    if _numba_fill is None:
        fastpe.available_backends()
        import numba

        @numba.njit(parallel=True, cache=True, nogil=True, boundscheck=False)
        def fill_zero(flat):
            for i in numba.prange(flat.shape[0]):
                flat[i] = np.float32(0.0)

        _numba_fill = fill_zero
    return _numba_fill


_numba_negate = None


def numba_negate():
    """A parallel in-place pass: reads and writes every value once (``x = -x``)."""
    global _numba_negate
    if _numba_negate is None:
        fastpe.available_backends()
        import numba

        @numba.njit(parallel=True, cache=True, nogil=True, boundscheck=False)
        def negate(flat):
            for i in numba.prange(flat.shape[0]):
                flat[i] = -flat[i]

        _numba_negate = negate
    return _numba_negate


def _make_inplace(w: Workload):
    negate = numba_negate()
    q, k = (a.copy().reshape(-1) for a in w.rope_qk)

    def run():
        negate(q)
        negate(k)

    return run


def _fresh_pair(w: Workload, fill):
    """Two fresh ``shape`` float32 arrays (cos and sin), each filled with ``fill``."""
    def run():
        a = np.empty(w.shape, dtype=np.float32)
        b = np.empty(w.shape, dtype=np.float32)
        fill(a)
        fill(b)
        return a, b

    return run


def _make_fill(w: Workload):
    if w.kind == "rope_cos_sin":
        return _fresh_pair(w, lambda a: a.fill(0))
    if w.kind == "table":
        def run():
            a = np.empty((w.rows, w.d_model), dtype=np.float32)
            a.fill(0)
            return a

        return run
    out = np.empty((w.rows, w.d_model), dtype=np.float32)
    return lambda: out.fill(0)


def _make_numba_fill(w: Workload):
    fill = numba_fill()
    if w.kind == "rope_cos_sin":
        return _fresh_pair(w, lambda a: fill(a.reshape(-1)))
    if w.kind == "table":
        def run():
            a = np.empty((w.rows, w.d_model), dtype=np.float32)
            fill(a.reshape(-1))
            return a

        return run
    out = np.empty((w.rows, w.d_model), dtype=np.float32)
    flat = out.reshape(-1)
    return lambda: fill(flat)


def _fastpe_rows() -> list[Implementation]:
    rows = []
    for backend in BACKENDS:
        if backend == "python":
            rows.append(
                Implementation(
                    "python-64rows", f"fastpe python (reference): first {REFERENCE_ROWS} rows only",
                    "reference", _fastpe("python"), (SMALLEST,),
                    note=f"timed on rows 0..{REFERENCE_ROWS - 1} only; the report scales it to the "
                    f"full table (x{WORKLOADS[SMALLEST].rows // REFERENCE_ROWS}) and marks it 'est.'",
                    backend="python",
                )
            )
        else:
            rows.append(Implementation(backend, f"fastpe {backend}", "fastpe", _fastpe(backend), backend=backend))
    return rows


IMPLEMENTATIONS: dict[str, Implementation] = {
    im.key: im
    for im in (
        *_fastpe_rows(),
        Implementation(
            "torch-tutorial", "torch tutorial module (f32)", "peer", _make_torch, SINUSOID,
            note="PyTorch tutorial PositionalEncoding computation; same column layout as fastpe",
        ),
        Implementation(
            "numpy-f32", "NumPy f32 (tutorial formula)", "peer", _make_numpy, SINUSOID,
            note="the tutorial's computation in NumPy float32; same column layout as fastpe",
        ),
        Implementation(
            "hf-torch-rope", "HF transformers RoPE (torch f32)", "peer", _make_hf_rope, ROPE,
            note="LlamaRotaryEmbedding.forward (cos/sin) and apply_rotary_pos_emb (q*cos + "
            "rotate_half(q)*sin, new tensors; the cos/sin caches computed before timing)",
        ),
        Implementation(
            "positional-encodings", "positional-encodings PositionalEncoding1D", "peer", _make_pe1d,
            tuple(k for k, w in WORKLOADS.items() if w.kind == "table"),
            note="PyPI positional-encodings (torch); returns (1, n, d); sin/cos interleaved as in fastpe",
        ),
        Implementation(
            "yardstick-fill", "yardstick: np.empty + fill(0)", "yardstick", _make_fill,
            (*SINUSOID, "rope-cos-sin-131072x128"),
            note="writes the same bytes and nothing else (forward: into the preallocated out)",
        ),
        Implementation(
            "yardstick-numba", "yardstick: np.empty + numba prange fill", "yardstick", _make_numba_fill,
            (*SINUSOID, "rope-cos-sin-131072x128"),
            note="parallel fill of the same bytes (forward: into the preallocated out)",
        ),
        Implementation(
            "yardstick-inplace", "yardstick: numba prange x = -x over q and k", "yardstick", _make_inplace,
            tuple(k for k in ROPE if WORKLOADS[k].kind == "rope_apply_qk"),
            note="reads and writes q and k once, in place, in parallel: the memory traffic of apply_qk_",
        ),
    )
}

#: run order within a workload: the yardstick right next to fastpe (the goal compares the two,
#: and on a shared machine the load drifts over the seconds the slow peers take), then the peers
_ORDER = {"yardstick": 0, "fastpe": 1, "reference": 2, "peer": 3}

#: every (workload, implementation) pair the suite measures, in run order
CASES: list[tuple[Workload, Implementation]] = [
    (w, im)
    for w in WORKLOADS.values()
    for im in sorted(IMPLEMENTATIONS.values(), key=lambda im: _ORDER[im.role])
    if w.key in im.workloads
]
