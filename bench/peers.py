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
  once in place.  ``rope_cos_sin`` workloads return fresh cos and sin arrays (or tensors);
  at 32768 positions the torch bridge (``fastpe.torch.RotaryEmbedding.cos_sin``) and the
  NumPy path it wraps (``fastpe.rope.cos_sin``) are alternated round by round
  (:class:`Alternated`): each round of either row runs the other's call first, so both
  allocate and free the same 2 x 16 MiB in the same order, and each row records both
  medians and the median per-round ratio from the same rounds (``extra_info["paired"]``).
* The ``rope_decode`` workload is one generation step: q ``(1, 32, 1, 128)`` and k
  ``(1, 8, 1, 128)`` at one position, rotated in place by a ``Rotary`` built once (and by the
  module function, which resolves its arguments each call); HF's peer runs its own
  ``LlamaRotaryEmbedding`` for the step's cos/sin, then ``apply_rotary_pos_emb``, as a
  model's step does.  Its yardsticks read and write q and k once (NumPy's cheapest in-place
  call; numba's parallel pass).  These calls take microseconds: ``test_bench.py`` times them
  in batches.
* The float16 table is fastpe's correctly rounded table against torch's float32 table
  cast with ``.half()`` (as ``model.half()`` casts the buffer).
* The families (:data:`FAMILY_KINDS`: fairseq/M2M100 tables, MAE grids, diffusers timesteps,
  ``add_``, ALiBi, T5 buckets) return fresh outputs too, except ``add``, which works on an
  input that is restored before every round, untimed (the callable's ``setup``).  Each peer
  starts from what its own library starts from (timesteps as a float32 tensor, masks of ones)
  and anything its library computes once per model (a ``pe`` buffer, a precomputed table) is
  computed before timing; the report says which.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import numpy as np

import fastpe
from fastpe._backends.registry import BACKENDS

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
    "FAMILY_KINDS",
    "fastpe_family",
    "reference_slice",
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
    #: the output's dtype (fastpe's; the peers' where they differ are converted for the check)
    dtype: str = "float32"
    #: rows (in units of ``rows``) the ``python`` reference computes; its time is scaled to
    #: ``rows`` in the report.  ``None``: the reference does not run on this workload
    ref_rows: int | None = None
    #: the convention within a kind (ALiBi's ``form``)
    variant: str = ""
    #: ``rope_decode``: k's shape, where it differs from q's (grouped-query attention)
    k_shape: tuple[int, ...] = ()

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.rows * self.d_model * self.itemsize

    @property
    def is_family(self) -> bool:
        return self.kind in FAMILY_KINDS

    def rows_measured(self, role: str) -> int:
        """Rows an implementation of ``role`` computes per call (the reference: a slice)."""
        if role == "reference":
            return self.ref_rows if self.ref_rows is not None else REFERENCE_ROWS
        return self.rows

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
    def operations(self) -> tuple[str, ...]:
        """The backend operations (``fastpe._backends.registry.OPERATIONS``) this workload
        exercises: a registry operation no workload names has no benchmark, and
        ``tests/backends/test_contract.py`` says so."""
        ops = KIND_OPERATIONS[self.kind]
        if self.dtype in ("float16", "bfloat16"):
            ops += ("narrow16",)
        return ops

    @property
    def is_rope(self) -> bool:
        return self.kind.startswith("rope")

    @property
    def rope_positions(self) -> np.ndarray:
        """Positions ``0 .. seq - 1`` (HF's default ``position_ids``); a decode step's one
        position, :data:`DECODE_POSITION`."""
        if self.kind == "rope_decode":
            return np.array([DECODE_POSITION], dtype=np.uint32)
        n = self.shape[2] if self.kind == "rope_apply_qk" else self.shape[0]
        return np.arange(n, dtype=np.uint32)

    @cached_property
    def rope_qk(self) -> tuple[np.ndarray, np.ndarray]:
        """The workload's q and k (fixed seed); implementations take copies."""
        rng = np.random.default_rng(SEED)
        return (rng.standard_normal(self.shape, dtype=np.float32),
                rng.standard_normal(self.k_shape or self.shape, dtype=np.float32))

    @cached_property
    def timesteps(self) -> np.ndarray:
        """``rows`` float32 timesteps in ``[0, 1000)`` (fixed seed): what a diffusion sampler
        hands the embedding; fastpe reads them exactly, the peers as float32 tensors."""
        rng = np.random.default_rng(SEED)
        return (rng.random(self.rows) * 1000.0).astype(np.float32)

    @cached_property
    def relative_positions(self) -> np.ndarray:
        """``rows`` int64 relative positions ``j - i`` in ``(-2**20, 2**20)`` (fixed seed): a
        batch of decode-time lookups of both signs, every bucket of T5's rule reached."""
        return np.random.default_rng(SEED).integers(-(1 << 20) + 1, 1 << 20, self.rows, dtype=np.int64)

    @cached_property
    def add_x(self) -> np.ndarray:
        """The ``add`` workload's embeddings ``(batch, seq, d_model)`` (fixed seed)."""
        return np.random.default_rng(SEED).standard_normal(self.shape, dtype=np.float32)


#: RoPE frequencies of every RoPE workload: HF's default rule at head_dim 128, base 10000
ROPE_HEAD_DIM = 128
ROPE_INV_FREQ = 1.0 / (10000.0 ** (np.arange(0, ROPE_HEAD_DIM, 2, dtype=np.float64) / ROPE_HEAD_DIM))
#: the position of the decode-step workload: the token after a 4096-token prompt
DECODE_POSITION = 4096


#: the xPos workload's scale base (torchscale's, flash-attention's and rotary-embedding-torch's default)
XPOS_SCALE_BASE = 512.0


def _rope_apply_workload(b: int, h: int, s: int, d: int) -> Workload:
    return Workload(
        f"rope-apply-qk-{b}x{h}x{s}x{d}", "rope_apply_qk", 2 * b * h * s, d,
        f"RoPE apply_qk_: q and k {b}x{h}x{s}x{d} float32", shape=(b, h, s, d),
    )


def _grid_workload(h: int, w: int, dim: int, ref: bool = False) -> Workload:
    return Workload(
        f"grid-mae-{h}x{w}x{dim}", "grid", h * w, dim,
        f"2-D sin-cos grid (MAE order): {h}x{w} tokens x {dim} float32", shape=(h, w),
        ref_rows=h * w if ref else None,
    )


#: the families' workload kinds (``table``/``forward``/RoPE are the sinusoid's own)
FAMILY_KINDS = ("family_table", "grid", "timestep", "add", "alibi", "t5", "t5_positions", "mrope", "axial",
                "relative_table", "sandwich", "calendar", "temporal")

#: the backend operations each kind of workload runs (a float16/bfloat16 output adds narrow16);
#: rope_apply's kernels read rope_table's doubles, so the apply workloads time both
KIND_OPERATIONS: dict[str, tuple[str, ...]] = {
    "table": ("sinusoid_range",),
    "forward": ("sinusoid_forward",),
    "rope_apply_qk": ("rope_apply", "rope_table"),
    "rope_decode": ("rope_apply", "rope_table", "rope_apply_table"),
    "rope_cos_sin": ("rope_cos_sin",),
    "family_table": ("sincos_rows",),
    "grid": ("sincos_rows", "grid_gather"),
    "timestep": ("sincos_real",),
    "add": ("sinusoid_range", "add_rows"),
    "alibi": ("alibi_bias",),
    "t5": ("t5_bucket_matrix",),
    "t5_positions": ("t5_bucket",),
    "mrope": ("mrope_plan", "mrope_fill"),
    "axial": ("sincos_rows", "axial_gather"),
    # Transformer-XL's halves: sincos_rows; a Conformer's interleaved float32 rows: sinusoid_forward
    "relative_table": ("sincos_rows", "sinusoid_forward"),
    "sandwich": ("sandwich_bias",),
    "xpos_qk": ("rope_xpos_table", "rope_table", "rope_apply_table"),
    "xpos_decode": ("rope_xpos_table", "rope_table", "rope_apply_table"),
    "calendar": ("calendar_fields",),
    "temporal": ("calendar_fields", "sinusoid_range", "embedding_sum"),
}
#: DeBERTa's bucketed relative positions and Shaw's clipped ones (fastpe.relative)
FAMILY_KINDS += ("deberta", "deberta_positions", "shaw")
KIND_OPERATIONS.update({"deberta": ("deberta_bucket_matrix",), "deberta_positions": ("deberta_bucket",),
                        "shaw": ("shaw_matrix",)})
#: Prophet's Fourier seasonality features and TGAT/TGN's time encoding (fastpe.time)
FAMILY_KINDS += ("fourier", "time_encoding")
KIND_OPERATIONS.update({"fourier": ("fourier_ticks",), "time_encoding": ("time_cos",)})
#: the Fourier workload's period (days: Prophet's yearly seasonality) and order (Prophet's yearly default)
FOURIER_PERIOD, FOURIER_ORDER = 365.25, 10
#: DeBERTa-v3's configuration, and the query rows the python reference computes (all keys)
DEBERTA_BUCKETS, DEBERTA_MAX_POSITION, DEBERTA_REFERENCE_ROWS = 256, 512, 64
#: the Shaw workload's clipping distance (tensor2tensor's transformer_relative hparams: 20)
SHAW_MAX_RELATIVE = 20
#: query rows the python reference computes of an ALiBi bias (all heads, all keys)
ALIBI_REFERENCE_QUERIES = 1
#: query rows the python reference computes of the T5 bucket matrix (all keys)
T5_REFERENCE_ROWS = 64
#: the T5 bucket matrix's dtype: HF's ``torch.long``; the report's bytes assume it
T5_DTYPE = "int64"
#: the M-RoPE workload's prompt: its length and the patch grid (t, h, w) of each of its images
MROPE_SEQ = 4096
MROPE_GRID = (1, 36, 52)
#: Qwen-VL's token ids: image, vision start, vision end
MROPE_IMAGE, MROPE_START, MROPE_END = 151655, 151652, 151653
#: the axial workload: FLUX's image tokens at 1024 x 1024 (a 64 x 64 grid, one frame) and its
#: per-axis widths (FluxPosEmbed(theta=10000, axes_dim=(16, 56, 56)))
AXIAL_GRID = (1, 64, 64)
AXIAL_DIMS = (16, 56, 56)
#: the Sandwich workload's hidden size per head (NeMo's ``hidden_size``)
SANDWICH_HIDDEN = 1024
#: query rows per chunk of NeMo's Sandwich formula: its (q, k, H/2) cosine tensor in full
#: would be 16 GiB at 2048 x 2048 x 512; the chunks compute the same values in bounded memory
SANDWICH_PEER_ROWS = 32


def mrope_prompt(w: "Workload") -> tuple[np.ndarray, np.ndarray]:
    """The M-RoPE workload's ``(input_ids (1, seq), image_grid_thw (2, 3))``: text (fixed seed),
    then ``<vision_start>`` image ``<vision_end>`` twice, as the processor lays a prompt out."""
    n_image = MROPE_GRID[0] * (MROPE_GRID[1] // 2) * (MROPE_GRID[2] // 2)
    text = w.d_model - 2 * (n_image + 2)
    rng = np.random.default_rng(SEED)
    a, b = text // 4, text // 2
    words = rng.integers(0, 150000, text).tolist()
    image = [MROPE_START] + [MROPE_IMAGE] * n_image + [MROPE_END]
    row = words[:a] + image + words[a:a + b] + image + words[a + b:]
    return np.array([row], dtype=np.int64), np.array([MROPE_GRID] * 2, dtype=np.int64)


#: the temporal-embedding workload's batch of windows: Informer's ETTh batch (32, 96), d_model 512
TEMPORAL_SHAPE = (32, 96)


def calendar_stamps(w: "Workload") -> np.ndarray:
    """The calendar workloads' timestamps: hourly ``datetime64[h]`` from 2000-01-01 (1M hours
    reach 2114, every calendar field and leap day on the way), shaped as the workload says."""
    n = math.prod(w.shape) if w.shape else w.rows
    return (np.datetime64("2000-01-01T00", "h") + np.arange(n)).reshape(w.shape or (n,))


def fourier_stamps(w: "Workload") -> np.ndarray:
    """The Fourier workload's timestamps: hourly ``datetime64[ns]`` from 2024-01-01 (1M hours
    reach 2138), as Prophet holds a frame's ``ds`` column."""
    return (np.datetime64("2024-01-01T00", "h") + np.arange(w.rows)).astype("datetime64[ns]")


def time_encoding_times(w: "Workload") -> np.ndarray:
    """The time-encoding workload's times: int64 seconds since a dataset's start, sorted,
    spread over 30 days (TGN's Wikipedia and Reddit span ~2.7e6 s; float32 holds these
    exactly, so the peer's error is its own arithmetic's)."""
    rng = np.random.default_rng(SEED)
    return np.sort(rng.integers(0, 30 * 86400, w.rows, dtype=np.int64))


WORKLOADS: dict[str, Workload] = {
    w.key: w
    for w in (
        Workload(
            "table-2048x512", "table", 2048, 512,
            "table 2048x512 (the python reference: first 64 rows, scaled in the report)",
        ),
        Workload(
            "table-f16-2048x512", "table", 2048, 512, "table 2048x512 float16 (correctly rounded)",
            dtype="float16",
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
        Workload(
            "rope-decode-1x32x1x128", "rope_decode", 32 + 8, ROPE_HEAD_DIM,
            f"RoPE decode step: q 1x32x1x128, k 1x8x1x128 float32, position {DECODE_POSITION}",
            shape=(1, 32, 1, ROPE_HEAD_DIM), k_shape=(1, 8, 1, ROPE_HEAD_DIM),
        ),
        _rope_apply_workload(1, 32, 4096, ROPE_HEAD_DIM),
        _rope_apply_workload(8, 32, 512, ROPE_HEAD_DIM),
        Workload(
            "xpos-apply-qk-1x32x4096x128", "xpos_qk", 2 * 32 * 4096, ROPE_HEAD_DIM,
            f"xPos apply_qk_: q and k 1x32x4096x{ROPE_HEAD_DIM} float32, scale base {XPOS_SCALE_BASE:g} "
            "(flash-attention's centring), q and k restored before each round (untimed)",
            shape=(1, 32, 4096, ROPE_HEAD_DIM),
        ),
        Workload(
            "xpos-decode-1x32x1x128", "xpos_decode", 32 + 8, ROPE_HEAD_DIM,
            f"xPos decode step: q 1x32x1x128, k 1x8x1x128 float32, position {DECODE_POSITION}, centre there "
            "(a scale of 1, so rounds in place keep their magnitude; the cost does not depend on the centre)",
            shape=(1, 32, 1, ROPE_HEAD_DIM), k_shape=(1, 8, 1, ROPE_HEAD_DIM),
        ),
        Workload(
            "rope-cos-sin-32768x128", "rope_cos_sin", 2 * 32768, ROPE_HEAD_DIM,
            "RoPE cos/sin caches: 32768 positions x 128, fresh arrays (and tensors)", shape=(32768, ROPE_HEAD_DIM),
        ),
        Workload(
            "rope-cos-sin-131072x128", "rope_cos_sin", 2 * 131072, ROPE_HEAD_DIM,
            "RoPE cos/sin caches: 131072 positions x 128, fresh arrays", shape=(131072, ROPE_HEAD_DIM),
        ),
        # ---- the families
        Workload(
            "fairseq-table-2048x512", "family_table", 2048, 512,
            "fairseq/M2M100 table 2048x512 float32 (halves, half-1 denominator)",
            ref_rows=REFERENCE_ROWS,
        ),
        Workload(
            "fairseq-table-f16-2048x512", "family_table", 2048, 512,
            "fairseq/M2M100 table 2048x512 float16", dtype="float16", ref_rows=REFERENCE_ROWS,
        ),
        _grid_workload(32, 32, 768, ref=True),
        _grid_workload(64, 64, 1024),
        Workload(
            "timestep-4096x320", "timestep", 4096, 320,
            "timestep embedding: 4096 float timesteps x 320 (flip_sin_to_cos, shift 0)",
            ref_rows=REFERENCE_ROWS,
        ),
        Workload(
            "add-8x2048x512", "add", 8 * 2048, 512,
            "add_: x (8, 2048, 512) float32, x * sqrt(512) + pe", shape=(8, 2048, 512),
            ref_rows=8 * REFERENCE_ROWS,
        ),
        Workload(
            "alibi-causal-32x2048x2048", "alibi", 32 * 2048, 2048,
            "ALiBi causal bias: 32 heads x 2048 x 2048 float32", shape=(32, 2048, 2048),
            ref_rows=32 * ALIBI_REFERENCE_QUERIES, variant="causal",
        ),
        Workload(
            "alibi-bloom-32x2048", "alibi", 32, 2048,
            "ALiBi BLOOM bias: 32 heads x 2048 keys (one query row, broadcast)", shape=(32, 1, 2048),
            variant="bloom",
        ),
        Workload(
            "t5-buckets-2048x2048", "t5", 2048, 2048,
            "T5 relative-position buckets 2048x2048 (bidirectional, 32 buckets, max distance 128)",
            shape=(2048, 2048), dtype=T5_DTYPE, ref_rows=T5_REFERENCE_ROWS,
        ),
        Workload(
            "deberta-buckets-512x512", "deberta", 512, 512,
            "DeBERTa-v3 relative positions 512x512, log-bucketed (bucket_size 256, max_position 512), int64",
            shape=(512, 512), dtype="int64", ref_rows=DEBERTA_REFERENCE_ROWS,
        ),
        Workload(
            "deberta-bucket-1M", "deberta_positions", 1_000_000, 1,
            "DeBERTa-v3 buckets of 1,000,000 random relative positions in (-2^18, 2^18) (int64)",
            dtype="int64", ref_rows=DEBERTA_REFERENCE_ROWS * 64,
        ),
        Workload(
            "shaw-2048x2048", "shaw", 2048, 2048,
            f"Shaw clipped relative positions 2048x2048 (max_relative_position {SHAW_MAX_RELATIVE}), int32",
            shape=(2048, 2048), dtype="int32",
        ),
        Workload(
            "t5-bucket-1M", "t5_positions", 1_000_000, 1,
            "T5 buckets of 1,000,000 random relative positions in (-2^20, 2^20) (int64)",
            dtype=T5_DTYPE, ref_rows=T5_REFERENCE_ROWS * 64,
        ),
        Workload(
            "axial-flux-64x64", "axial", 2 * math.prod(AXIAL_GRID), sum(AXIAL_DIMS),
            f"axial RoPE caches (FLUX): {AXIAL_GRID[1]}x{AXIAL_GRID[2]} image tokens, axes_dim "
            f"{AXIAL_DIMS}, cos and sin float32 (2 x {math.prod(AXIAL_GRID)} x {sum(AXIAL_DIMS)})",
            shape=AXIAL_GRID,
        ),
        Workload(
            "transformer-xl-2048x512", "relative_table", 2048, 512,
            "Transformer-XL relative embedding: klen 2048 x 512 float32 (positions 2047..0, [sin | cos])",
            variant="transformer_xl",
        ),
        Workload(
            "conformer-2048x512", "relative_table", 2 * 2048 - 1, 512,
            "Conformer (NeMo RelPositionalEncoding): length 2048, 4095 rows x 512 float32 "
            "(positions 2047..-2047, interleaved)", variant="conformer",
        ),
        Workload(
            "sandwich-16x2048x2048", "sandwich", 16 * 2048, 2048,
            f"Sandwich bias: 16 heads x 2048 x 2048 float32, hidden size {SANDWICH_HIDDEN} (bidirectional)",
            shape=(16, 2048, 2048),
        ),
        Workload(
            "calendar-gluonts-1M-hourly", "calendar", 1_000_000, 4,
            "GluonTS calendar features of 1,000,000 hourly timestamps, freq H (hour of day, day of week, "
            "day of month, day of year), float32", ref_rows=2048,
        ),
        Workload(
            "temporal-informer-32x96x512", "temporal", math.prod(TEMPORAL_SHAPE), 512,
            "Informer/Autoformer fixed TemporalEmbedding: (32, 96) hourly marks x d_model 512 float32",
            shape=TEMPORAL_SHAPE,
        ),
        Workload(
            "fourier-prophet-1M-hourly", "fourier", 1_000_000, 2 * FOURIER_ORDER,
            f"Prophet Fourier features: 1,000,000 hourly datetime64[ns] timestamps, yearly period "
            f"({FOURIER_PERIOD} d), order {FOURIER_ORDER}, float64", dtype="float64",
        ),
        Workload(
            "time-encoding-tgn-1Mx100", "time_encoding", 1_000_000, 100,
            "TGAT/TGN time encoding cos(t w): 1,000,000 int64 times in seconds x dim 100, float32 "
            "(TGN's float32 weights)",
        ),
        Workload(
            "mrope-4096-2images", "mrope", 3, MROPE_SEQ,
            f"M-RoPE position ids (Qwen2-VL): a {MROPE_SEQ}-token prompt with two images of grid "
            f"{MROPE_GRID} (merge 2), batch 1, (3, 1, {MROPE_SEQ}) int64",
            shape=(1, MROPE_SEQ), dtype="int64", ref_rows=3, variant="qwen2_vl",
        ),
    )
}

#: the sinusoidal workloads (the yardsticks of the sinusoid computation run on these)
SINUSOID = tuple(k for k, w in WORKLOADS.items() if w.kind in ("table", "forward"))
#: ... and the float32 ones, which the float32 peers compute
SINUSOID_F32 = tuple(k for k in SINUSOID if WORKLOADS[k].dtype == "float32")
#: the float16 tables: the peers cast their float32 tables
TABLE_F16 = tuple(k for k in SINUSOID if WORKLOADS[k].dtype == "float16")
ROPE = tuple(k for k, w in WORKLOADS.items() if w.is_rope)
#: the families' workloads, by kind
FAMILY = {kind: tuple(k for k, w in WORKLOADS.items() if w.kind == kind) for kind in FAMILY_KINDS}
#: families whose output is a fresh array (every one but ``add``, which works in place)
FAMILY_FRESH = tuple(k for kind in FAMILY_KINDS if kind != "add" for k in FAMILY[kind])

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
    #: the label on workloads of these kinds, where it says more than ``label``
    kind_labels: tuple[tuple[str, str], ...] = ()

    def label_for(self, w: Workload) -> str:
        return dict(self.kind_labels).get(w.kind, self.label)


def _fastpe(backend: str):
    def make(w: Workload):
        if backend not in fastpe.available_backends():
            from fastpe._backends import unavailable_reason

            raise Unavailable(f"fastpe backend {backend!r} not available: {unavailable_reason(backend)}")
        if w.kind in ("xpos_qk", "xpos_decode"):
            return _fastpe_xpos(backend, w)
        if w.is_rope:
            return _fastpe_rope(backend, w)
        if w.is_family:
            return fastpe_family(w, backend, w.rows_measured("reference" if backend == "python" else "fastpe"))
        if w.kind == "table":
            rows = REFERENCE_ROWS if backend == "python" else w.rows
            return lambda: fastpe.table(w.d_model, rows, dtype=w.dtype, backend=backend)
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
    if w.kind == "rope_decode":  # a model's step: its Rotary, built once, at the step's offset
        from fastpe.rope import Rotary

        rotary, offset = Rotary(ROPE_HEAD_DIM, base=10000.0), int(positions[0])
        return lambda: rotary.apply_qk_(q, k, offset=offset, backend=backend)
    return lambda: apply_qk_from_inv_freq(q, k, positions, ROPE_INV_FREQ, 1.0, backend=backend)


def _fastpe_xpos(backend: str | None, w: Workload):
    """xPos ``Rotary.apply_qk_`` in place, q and k restored before each round (``run.setup``);
    a decode step: the model's Rotary at the step's offset, as the plain decode workload runs."""
    from fastpe.rope import Rotary

    q0, k0 = w.rope_qk
    q, k = q0.copy(), k0.copy()
    if w.kind == "xpos_decode":
        rotary = Rotary(ROPE_HEAD_DIM, base=10000.0, xpos_scale_base=XPOS_SCALE_BASE, xpos_center=DECODE_POSITION)
        return lambda: rotary.apply_qk_(q, k, offset=DECODE_POSITION, backend=backend)
    rotary = Rotary(ROPE_HEAD_DIM, base=10000.0, xpos_scale_base=XPOS_SCALE_BASE, xpos_center="flash_attn")

    def run():
        return rotary.apply_qk_(q, k, backend=backend)

    def setup():  # returns None: pytest-benchmark takes a returned value as the call's arguments
        np.copyto(q, q0)
        np.copyto(k, k0)

    run.setup = setup
    return run


def flash_xpos_caches(torch, seqlen: int, dim: int, scale_base: float, inv_freq):
    """flash-attention's ``RotaryEmbedding._update_cos_sin_cache`` with ``scale_base``
    (``flash_attn/layers/rotary.py``), float32: ``cos * scale``, ``sin * scale`` for queries,
    ``/ scale`` for keys, ``scale = zeta ** ((arange(seqlen) - seqlen // 2) / scale_base)``;
    returned as ``(seqlen, dim)`` halves (``cat(x, x)``, the NeoX layout)."""
    t = torch.arange(seqlen, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    zeta = (torch.arange(0, dim, 2, dtype=torch.float32) + 0.4 * dim) / (1.4 * dim)
    power = (torch.arange(seqlen, dtype=torch.float32) - seqlen // 2) / scale_base
    scale = zeta ** power[:, None]
    cos, sin = torch.cos(freqs), torch.sin(freqs)
    caches = (cos * scale, sin * scale, cos / scale, sin / scale)
    return tuple(torch.cat((c, c), dim=-1) for c in caches)


def _make_flash_xpos(w: Workload):
    """flash-attention's torch rotation (``apply_rotary_emb_torch``: ``x * cos + rotate_half(x) *
    sin``, new tensors) with its xPos caches computed before timing; checked against fastpe once."""
    torch = _torch()
    b, h, s, d = w.shape
    inv = torch.from_numpy(ROPE_INV_FREQ.astype(np.float32))
    cq, sq, ck, sk = flash_xpos_caches(torch, s, d, XPOS_SCALE_BASE, inv)
    q, k = (torch.from_numpy(a.copy()) for a in w.rope_qk)

    @torch.no_grad()
    def run():
        return q * cq + hf_rotate_half(torch, q) * sq, k * ck + hf_rotate_half(torch, k) * sk

    got = [t.numpy() for t in run()]
    want = _fastpe_xpos(None, w)()
    for g, v in zip(got, want):  # float32 angles: p * 2**-24 radians, times the row's magnitude
        tol = 16 * s * 2.0**-24 * np.abs(v).max(axis=-1, keepdims=True)
        if not np.all(np.abs(g.astype(np.float64) - v) <= tol):
            raise AssertionError("the flash-attention xPos formula differs from fastpe beyond float32's error")
    return run


def _make_fastpe_rope_function(w: Workload):
    """The module functions, default backend: ``fastpe.rope.apply_qk_`` (a decode step at its
    offset) and ``fastpe.rope.cos_sin`` (the NumPy path the torch bridge is measured against,
    alternated with it: :func:`_bridge_pair`)."""
    from fastpe import rope

    if w.kind == "rope_cos_sin":
        return _bridge_pair(w, "fastpe-rope-cos-sin-fn")
    q, k = (a.copy() for a in w.rope_qk)
    offset = int(w.rope_positions[0])
    return lambda: rope.apply_qk_(q, k, head_dim=ROPE_HEAD_DIM, base=10000.0, offset=offset)


def _family_module(w: Workload, backend: str | None):
    """``fastpe.alibi`` / ``fastpe.relative`` once a tiny call works on ``backend``, else
    :class:`Unavailable`: in a checkout without the module, or whose backends lack its kernel.
    The peers of these workloads need it too: without fastpe there is nothing to check them by."""
    name = "alibi" if w.kind == "alibi" else "relative"
    try:
        module = importlib.import_module(f"fastpe.{name}")
    except ImportError as exc:
        raise Unavailable(f"fastpe.{name} is not in this checkout ({exc})") from None
    try:
        if name == "alibi":
            module.bias(2, 2, form=w.variant, backend=backend)
        else:
            module.t5_bucket_matrix(2, backend=backend)
    except (AttributeError, NotImplementedError) as exc:
        raise Unavailable(f"fastpe.{name} has no kernel on backend {backend or 'default'} ({exc})") from None
    return module


def fastpe_family(w: Workload, backend: str | None, rows: int):
    """fastpe's call for a family workload, on its first ``rows`` rows (``rows < w.rows`` for
    the reference): ``backend=None`` is the default backend, which the checks compare with."""
    if w.kind == "family_table":
        return lambda: fastpe.table(
            w.d_model, rows, layout="halves", denominator="half-1", dtype=w.dtype, backend=backend
        )
    if w.kind == "grid":
        from fastpe import grid

        h, wd = w.shape
        return lambda: grid.sincos_2d(h, wd, w.d_model, order="mae", backend=backend)
    if w.kind == "timestep":
        t = w.timesteps[:rows]
        return lambda: fastpe.timestep(t, w.d_model, flip_sin_to_cos=True, shift=0, backend=backend)
    if w.kind == "add":
        batch, seq, d = w.shape
        x0 = np.ascontiguousarray(w.add_x[:, : rows // batch])
        x = x0.copy()
        scale = math.sqrt(d)

        def run():
            return fastpe.add_(x, scale=scale, backend=backend)

        run.setup = lambda: np.copyto(x, x0)
        return run
    if w.kind == "alibi":
        alibi = _family_module(w, backend)
        heads, _, k_len = w.shape
        q_len = rows // heads
        return lambda: alibi.bias(heads, q_len, k_len, form=w.variant, backend=backend)
    if w.kind == "t5_positions":
        relative = _family_module(w, backend)
        rel = w.relative_positions[:rows]
        return lambda: relative.t5_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128, backend=backend)
    if w.kind == "axial":  # FLUX's image ids: the integer meshgrid of (frame, row, column)
        from fastpe import rope

        coords = rope.index_grid(w.shape)
        return lambda: rope.axial_cos_sin(coords, AXIAL_DIMS, backend=backend)
    if w.kind == "mrope":  # the positions and the deltas are computed; the positions compared
        from fastpe.rope._mrope import mrope_positions

        ids, grids = mrope_prompt(w)
        return lambda: mrope_positions(ids, image_grid_thw=grids, model=w.variant, backend=backend)[0]
    if w.kind == "relative_table":
        length = (rows + 1) // 2
        if w.variant == "transformer_xl":
            return lambda: fastpe.transformer_xl_embedding(rows, w.d_model, backend=backend)
        return lambda: fastpe.conformer_embedding(length, w.d_model, backend=backend)[:rows]
    if w.kind == "sandwich":
        from fastpe._sandwich import sandwich_bias

        heads, _, k_len = w.shape
        return lambda: sandwich_bias(heads, rows // heads, k_len, hidden_size=SANDWICH_HIDDEN, backend=backend)
    if w.kind == "calendar":
        import fastpe.time as ft

        stamps = calendar_stamps(w)[:rows]
        return lambda: ft.calendar_features(stamps, "H", backend=backend)
    if w.kind == "temporal":
        import fastpe.time as ft

        stamps = calendar_stamps(w)
        return lambda: ft.temporal_embedding(stamps, w.d_model, "h", backend=backend)
    if w.kind == "fourier":
        import fastpe.time as ft

        stamps = fourier_stamps(w)[:rows]
        return lambda: ft.fourier_features(stamps, FOURIER_PERIOD, FOURIER_ORDER, backend=backend)
    if w.kind == "time_encoding":
        import fastpe.time as ft

        times = time_encoding_times(w)[:rows]
        return lambda: ft.time_encoding(times, w.d_model, frequencies="tgn", backend=backend)
    if w.kind == "deberta":  # the first rows of the matrix are the matrix of fewer queries
        relative = _family_module(w, backend)
        return lambda: relative.deberta_bucket_matrix(
            rows, w.shape[1], bucket_size=DEBERTA_BUCKETS, max_position=DEBERTA_MAX_POSITION, backend=backend)
    if w.kind == "deberta_positions":
        relative = _family_module(w, backend)
        rel = deberta_positions(w)[:rows]
        return lambda: relative.deberta_bucket(rel, DEBERTA_BUCKETS, DEBERTA_MAX_POSITION, backend=backend)
    if w.kind == "shaw":
        relative = _family_module(w, backend)
        return lambda: relative.shaw_positions(rows, w.shape[1], max_relative_position=SHAW_MAX_RELATIVE,
                                               backend=backend)
    if w.kind == "t5":
        relative = _family_module(w, backend)
        k_len = w.shape[1]
        return lambda: relative.t5_bucket_matrix(
            rows, k_len, bidirectional=True, num_buckets=32, max_distance=128, backend=backend
        )
    raise AssertionError(w.kind)


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
    if w.kind == "table" and w.dtype == "float16":  # the float32 table, cast as model.half() casts it
        return lambda: torch_tutorial(torch.arange(w.rows, dtype=torch.float32).unsqueeze(1), w.d_model, None).half()
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


def _make_hf_rope_step(w: Workload):
    """A decode step as HF's Llama runs it: ``LlamaRotaryEmbedding.forward`` (transformers'
    own module, of a Llama config with 32 heads of 128, 8 key-value heads) computes the
    step's cos/sin from ``position_ids``, then ``apply_rotary_pos_emb`` makes new q and k."""
    torch = _torch()
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    except ImportError as exc:
        raise Unavailable(f"transformers not installed ({exc})") from None
    config = LlamaConfig(hidden_size=32 * ROPE_HEAD_DIM, num_attention_heads=32, num_key_value_heads=8)
    rotary = LlamaRotaryEmbedding(config)
    # HF computes its frequencies in float32: equal to the workload's within float32's error
    if not np.allclose(rotary.inv_freq.numpy(), ROPE_INV_FREQ, rtol=1e-6, atol=0):
        raise Unavailable("this transformers' Llama defaults give other frequencies than the workload's")
    position_ids = torch.from_numpy(w.rope_positions.astype(np.int64))[None]  # (1, 1)
    q, k = (torch.from_numpy(a.copy()) for a in w.rope_qk)

    @torch.no_grad()  # inference, as generate() runs it
    def run():
        cos, sin = rotary(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)

    return run


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


# -- fastpe.torch: RotaryEmbedding.cos_sin, the caches as tensors (HF's rotary module's drop-in)


def _make_fastpe_torch_rope(w: Workload):
    if w.key == BRIDGE_WORKLOAD:
        return _bridge_pair(w, "fastpe-torch")
    return _bridge_call(w)


#: the workload of the bridge's goal: RotaryEmbedding.cos_sin within 1.2x of fastpe.rope.cos_sin
BRIDGE_WORKLOAD = "rope-cos-sin-32768x128"


def _bridge_call(w: Workload):
    """``RotaryEmbedding.cos_sin`` on int64 torch positions, as HF holds them."""
    torch = _torch()
    from fastpe.torch import RotaryEmbedding

    rotary = RotaryEmbedding(ROPE_HEAD_DIM, base=10000.0)  # HF's default frequencies, as ROPE_INV_FREQ
    positions = torch.from_numpy(w.rope_positions.astype(np.int64))
    return lambda: rotary.cos_sin(positions)


def _numpy_path_call(w: Workload):
    """``fastpe.rope.cos_sin`` on int64 positions, as ``np.arange`` gives them: the NumPy
    path the bridge wraps."""
    from fastpe import rope

    positions = w.rope_positions.astype(np.int64)
    return lambda: rope.cos_sin(positions, ROPE_HEAD_DIM, base=10000.0)


class Alternated:
    """One row of a pair measured in the same rounds: calling it runs the row's own call
    (what pytest-benchmark times); its ``setup``, run before every round, runs the other
    row's call and times it (``other_times``).  Each round of either row is then the other
    call followed by this one: the two rows allocate and free the same arrays in the same
    order, and a row holds both calls' times from the same rounds, whose per-round ratio
    does not drift with the machine's load as two rows measured seconds apart do.  The call
    run second in a round can gain or lose a few per cent on a busy machine; the two rows
    run the pair in opposite orders, so ``sqrt(bridge row's ratio / NumPy row's ratio)``
    cancels that."""

    def __init__(self, own, other, other_key: str):
        self.own, self.other, self.other_key = own, other, other_key
        self.other_times: list[float] = []

    def __call__(self):
        return self.own()

    def setup(self) -> None:  # returns nothing: pytest-benchmark would take a value as arguments
        import time

        t0 = time.perf_counter()
        self.other()
        self.other_times.append(time.perf_counter() - t0)

    def paired(self, own_times) -> dict:
        """The pair's figures from the timed rounds (``own_times``, in order; ``other_times``
        cleared before them): both medians and the median of this call's time over the
        other's in the same round."""
        from statistics import median

        other = self.other_times[-len(own_times):]
        return {
            "with": self.other_key,
            "rounds": len(own_times),
            "median": median(own_times),
            "other_median": median(other),
            "ratio_median": median(t / o for t, o in zip(own_times, other)),
        }


def _bridge_pair(w: Workload, key: str):
    """The bridge workload's row ``key`` (``"fastpe-torch"`` or ``"fastpe-rope-cos-sin-fn"``),
    alternated with the other one (:class:`Alternated`); the NumPy path alone where torch is
    missing."""
    numpy_path = _numpy_path_call(w)
    try:
        bridge = _bridge_call(w)
    except Unavailable:
        if key == "fastpe-torch":
            raise
        return numpy_path
    if key == "fastpe-torch":
        return Alternated(bridge, numpy_path, "fastpe-rope-cos-sin-fn")
    return Alternated(numpy_path, bridge, "fastpe-torch")


# -- the families' peers.  Each is its library's function, or (NumPy, torch) the same formula
# -- written from the published code's equations, float32 unless the original says otherwise.


def _hf(module: str, name: str):
    """``transformers.models.<module>.<name>``, or :class:`Unavailable`."""
    _torch()
    try:
        mod = importlib.import_module(f"transformers.models.{module}")
    except ImportError as exc:
        raise Unavailable(f"transformers not installed ({exc})") from None
    return getattr(mod, name)


def numpy_fairseq(n: int, d: int) -> np.ndarray:
    """fairseq's / M2M100's table in NumPy float32: ``w_k = exp(-k ln(10000) / (h - 1))``,
    ``h = d // 2``, rows ``[sin(p w) | cos(p w)]`` (``d`` even)."""
    half = d // 2
    freq = np.exp(np.arange(half, dtype=np.float32) * np.float32(-math.log(10000.0) / (half - 1)))
    angle = np.arange(n, dtype=np.float32)[:, None] * freq[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


def _make_hf_m2m100(w: Workload):
    m2m = _hf("m2m_100.modeling_m2m_100", "M2M100SinusoidalPositionalEmbedding")
    if w.dtype == "float16":  # the model's float32 buffer, cast as model.half() casts it
        return lambda: m2m.get_embedding(w.rows, w.d_model).half()
    return lambda: m2m.get_embedding(w.rows, w.d_model)


def _make_numpy_fairseq(w: Workload):
    return lambda: numpy_fairseq(w.rows, w.d_model)


def mae_1d(d: int, pos: np.ndarray) -> np.ndarray:
    """MAE's 1-D block: ``omega_k = 1 / 10000 ** (k / (d / 2))`` in float64, positions
    ``pos`` flattened, ``[sin(pos omega) | cos(pos omega)]``."""
    omega = 1.0 / 10000.0 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def mae_2d(h: int, w: int, dim: int) -> np.ndarray:
    """MAE's ``get_2d_sincos_pos_embed`` (generalised to ``h != w``): a meshgrid with the
    width coordinate first, half the channels each; float64, as MAE returns it."""
    grid = np.stack(np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32)), axis=0)
    return np.concatenate([mae_1d(dim // 2, grid[0]), mae_1d(dim // 2, grid[1])], axis=1)


def _make_mae(w: Workload):
    h, wd = w.shape
    # MAE copies its float64 result into the model's float32 parameter: the cast is part of it
    return lambda: mae_2d(h, wd, w.d_model).astype(np.float32)


def torch_grid(torch, h: int, w: int, dim: int):
    """The MAE grid in torch float32: ``[sin x | cos x | sin y | cos y]``, row-major tokens."""
    q = dim // 4
    omega = 1.0 / 10000.0 ** (torch.arange(q, dtype=torch.float32) / q)
    ys, xs = torch.meshgrid(
        torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij"
    )
    ax = xs.reshape(-1, 1) * omega
    ay = ys.reshape(-1, 1) * omega
    return torch.cat([ax.sin(), ax.cos(), ay.sin(), ay.cos()], dim=1)


def _make_torch_grid(w: Workload):
    torch = _torch()
    h, wd = w.shape
    return lambda: torch_grid(torch, h, wd, w.d_model)


def _make_diffusers(w: Workload):
    torch = _torch()
    try:
        from diffusers.models.embeddings import get_timestep_embedding
    except ImportError as exc:
        raise Unavailable(f"diffusers not installed ({exc})") from None
    t = torch.from_numpy(w.timesteps)
    return lambda: get_timestep_embedding(t, w.d_model, flip_sin_to_cos=True, downscale_freq_shift=0)


def _make_diffusers_flux(w: Workload):
    """diffusers' ``FluxPosEmbed(theta=10000, axes_dim=(16, 56, 56))`` on FLUX's image ids
    (float64 ``(tokens, 3)``, made before timing, as the pipeline prepares them once)."""
    torch = _torch()
    try:
        from diffusers.models.transformers.transformer_flux import FluxPosEmbed
    except ImportError as exc:
        raise Unavailable(f"diffusers not installed ({exc})") from None
    from fastpe import rope

    embed = FluxPosEmbed(theta=10000, axes_dim=list(AXIAL_DIMS))
    ids = torch.from_numpy(rope.index_grid(w.shape))

    def run():
        with torch.no_grad():
            return embed(ids)

    return run


def numpy_timestep(t: np.ndarray, dim: int) -> np.ndarray:
    """diffusers' formula in NumPy float32 with ``flip_sin_to_cos=True``, shift 0 (``dim``
    even): ``w_k = exp(-ln(10000) k / h)``, rows ``[cos(t w) | sin(t w)]``."""
    half = dim // 2
    freq = np.exp(np.float32(-math.log(10000.0)) * np.arange(half, dtype=np.float32) / np.float32(half))
    angle = t[:, None] * freq[None, :]
    return np.concatenate([np.cos(angle), np.sin(angle)], axis=1)


def _make_numpy_timestep(w: Workload):
    t = w.timesteps
    return lambda: numpy_timestep(t, w.d_model)


def _make_numpy_add(w: Workload):
    _, seq, d = w.shape
    table = fastpe.table(d, seq)  # precomputed once, before timing (as a model keeps its buffer)
    x0 = w.add_x
    x = x0.copy()
    scale = np.float32(math.sqrt(d))

    def run():  # x *= scale; x += table[:seq]
        np.multiply(x, scale, out=x)
        np.add(x, table[:seq], out=x)
        return x

    run.setup = lambda: np.copyto(x, x0)
    return run


def _make_torch_add(w: Workload):
    torch = _torch()
    _, seq, d = w.shape
    # the tutorial's buffer, computed at construction (before timing); its forward adds it
    pe = torch_tutorial(torch.arange(seq, dtype=torch.float32).unsqueeze(1), d, None)
    x = torch.from_numpy(w.add_x.copy())
    scale = math.sqrt(d)
    return lambda: x * scale + pe[:seq]


def torch_transformer_xl(torch, klen: int, d_model: int):
    """kimiyoung/transformer-xl's PositionalEmbedding (pytorch/mem_transformer.py), float32:
    ``pos_seq = arange(klen-1, -1, -1.0)``, ``inv_freq = 1 / 10000 ** (arange(0, d, 2) / d)``,
    ``cat([sin, cos])`` of their outer product."""
    inv_freq = 1 / (10000 ** (torch.arange(0.0, d_model, 2.0) / d_model))
    pos_seq = torch.arange(klen - 1, -1, -1.0)
    sinusoid_inp = torch.ger(pos_seq, inv_freq)
    return torch.cat([sinusoid_inp.sin(), sinusoid_inp.cos()], dim=-1)


def torch_nemo_rel_pe(torch, length: int, d_model: int):
    """NeMo's RelPositionalEncoding (extend_pe, then create_pe), float32: positions
    ``length-1 .. -(length-1)``, ``div_term = exp(arange(0, d, 2) * -(ln 10000 / d))``,
    interleaved sin/cos."""
    positions = torch.arange(length - 1, -length, -1, dtype=torch.float32).unsqueeze(1)
    pe = torch.zeros(positions.size(0), d_model)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(positions * div_term)
    pe[:, 1::2] = torch.cos(positions * div_term)
    return pe


def torch_nemo_sandwich(torch, n_heads: int, q_len: int, k_len: int, hidden: int, rows: int):
    """NeMo's SandwichRelativePositionEmbedding.forward (bidirectional), float32, computed
    ``rows`` query rows at a time (the formula's (q, k, H/2) cosines would not fit otherwise):
    ``sum(cos(|i - j| * inv_freq)) - H/2`` over ``(h + 1) * 8 / n``."""
    m = max(q_len, k_len)
    rel = torch.arange(1 - m, 1)[None, :].mul(-1)
    mem = torch.arange(1 - m, 1)[:, None].mul(-1)
    relative_position = torch.abs(mem - rel)[-q_len:, -k_len:]
    inv_freq = 1.0 / (10000 ** (2 * torch.arange(1, hidden / 2 + 1) / hidden))
    scales = (torch.arange(1, n_heads + 1, 1)[:, None, None] * 8 / n_heads)
    out = torch.empty((n_heads, q_len, k_len))
    for r0 in range(0, q_len, rows):
        part = relative_position[r0:r0 + rows]
        bias = torch.sum((part[:, :, None].repeat(1, 1, len(inv_freq)) * inv_freq).cos(), axis=2)
        out[:, r0:r0 + rows] = (bias[None] - hidden / 2) / scales
    return out


def _make_torch_transformer_xl(w: Workload):
    torch = _torch()
    if w.variant == "transformer_xl":
        return lambda: torch_transformer_xl(torch, w.rows, w.d_model)
    return lambda: torch_nemo_rel_pe(torch, (w.rows + 1) // 2, w.d_model)


def _make_torch_sandwich(w: Workload):
    torch = _torch()
    heads, q_len, k_len = w.shape
    return lambda: torch_nemo_sandwich(torch, heads, q_len, k_len, SANDWICH_HIDDEN, SANDWICH_PEER_ROWS)


def alibi_slopes(n_heads: int, max_bias: float = 8.0) -> list[float]:
    """The ALiBi paper's head slopes: ``2 ** (-max_bias * (h + 1) / n)`` for ``n`` a power of
    two (the workloads use 32 heads)."""
    assert n_heads & (n_heads - 1) == 0, "power-of-two head counts only"
    return [2.0 ** (-max_bias * (h + 1) / n_heads) for h in range(n_heads)]


def torch_alibi_causal(torch, slopes, q_len: int, k_len: int):
    """The causal ALiBi bias with its mask: ``slope * (j - i)`` for keys ``j <= i``, ``-inf``
    after the query; ``(heads, q_len, k_len)`` float32 (``q_len == k_len``)."""
    distance = torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]
    bias = slopes[:, None, None] * distance
    return bias.masked_fill_(distance > 0, float("-inf"))


def _make_torch_alibi(w: Workload):
    torch = _torch()
    _family_module(w, None)
    heads, q_len, k_len = w.shape
    slopes = torch.tensor(alibi_slopes(heads), dtype=torch.float32)
    return lambda: torch_alibi_causal(torch, slopes, q_len, k_len)


def _make_hf_bloom(w: Workload):
    build = _hf("bloom.modeling_bloom", "build_alibi_tensor")
    _family_module(w, None)
    import torch

    heads, _, k_len = w.shape
    mask = torch.ones(1, k_len)  # one sequence, no padding
    return lambda: build(mask, heads, torch.float32)


def _make_hf_t5(w: Workload):
    t5 = _hf("t5.modeling_t5", "T5Attention")
    _family_module(w, None)
    import torch

    if w.kind == "t5_positions":  # the same rule on a tensor of relative positions
        rel = torch.from_numpy(w.relative_positions)
        return lambda: t5._relative_position_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128)
    q_len, k_len = w.shape

    def run():  # T5Attention.compute_bias's positions, then the bucket rule
        context = torch.arange(q_len, dtype=torch.long)[:, None]
        memory = torch.arange(k_len, dtype=torch.long)[None, :]
        return t5._relative_position_bucket(memory - context, bidirectional=True, num_buckets=32, max_distance=128)

    return run


def deberta_positions(w: Workload) -> np.ndarray:
    """The DeBERTa workload's relative positions: the T5 workload's, a quarter as far, in
    (-2**18, 2**18).  HF's float32 buckets with this machine's torch log first differ from the
    correctly rounded log's at distance 403,269 (one position in a million of (-2**20, 2**20)
    lands on such a distance); below that they are identical, so the check can ask for bits."""
    return w.relative_positions >> 2


def _make_hf_deberta(w: Workload):
    """HF deberta_v2's ``build_relative_position`` (query ids minus key ids, then
    ``make_log_bucket_position``'s float32 log buckets, then ``.to(torch.long)``), as its
    attention calls it; the layers are only read for their lengths."""
    build = _hf("deberta_v2.modeling_deberta_v2", "build_relative_position")
    _family_module(w, None)
    import torch

    if w.kind == "deberta_positions":  # the bucket rule on a tensor of relative positions (float32 out)
        bucket = _hf("deberta_v2.modeling_deberta_v2", "make_log_bucket_position")
        rel = torch.from_numpy(deberta_positions(w))
        return lambda: bucket(rel, DEBERTA_BUCKETS, DEBERTA_MAX_POSITION)
    q_len, k_len = w.shape
    query, key = torch.empty(q_len, 1), torch.empty(k_len, 1)
    return lambda: build(query, key, DEBERTA_BUCKETS, DEBERTA_MAX_POSITION)


def numpy_shaw(length_q: int, length_k: int, max_relative_position: int) -> np.ndarray:
    """tensor2tensor's ``_generate_relative_positions_matrix`` (cache=False) written out in
    NumPy: int32 ranges as ``tf.range``, the queries the last ``length_q`` keys, the distance
    clipped to ``±max_relative_position`` and shifted."""
    range_vec_k = np.arange(length_k, dtype=np.int32)
    range_vec_q = range_vec_k[-length_q:]
    distance = range_vec_k[None, :] - range_vec_q[:, None]
    return np.clip(distance, -max_relative_position, max_relative_position) + max_relative_position


def _make_numpy_shaw(w: Workload):
    _family_module(w, None)
    q_len, k_len = w.shape
    return lambda: numpy_shaw(q_len, k_len, SHAW_MAX_RELATIVE)


def _make_hf_mrope(w: Workload):
    """HF's ``Qwen2VLModel.get_rope_index`` on a bare object holding the config (it reads only
    ``self.config`` and its vision-position helpers), from the processor's tensors: the ids,
    the grids and ``mm_token_type_ids``, all made before timing."""
    import types

    cls = _hf("qwen2_vl.modeling_qwen2_vl", "Qwen2VLModel")
    import torch
    import transformers

    obj = types.SimpleNamespace(config=transformers.Qwen2VLConfig(vision_config={"spatial_merge_size": 2}),
                                rope_deltas=None)
    for name in ("get_vision_position_ids", "get_rope_index", "compute_3d_position_ids"):
        if hasattr(cls, name):
            setattr(obj, name, types.MethodType(getattr(cls, name), obj))
    ids, grids = (torch.from_numpy(a) for a in mrope_prompt(w))
    token_types = (ids == MROPE_IMAGE).to(torch.int32)

    def run():
        with torch.no_grad():
            return obj.get_rope_index(ids, token_types, image_grid_thw=grids)[0]

    return run


# -- the yardstick: writing the same bytes, and nothing else


_numba_fill = None


def gluonts_hourly_numpy(stamps: np.ndarray) -> np.ndarray:
    """GluonTS' ``time_features_from_frequency_str("H")`` (gluonts/time_feature/_base.py:
    ``_normalize(x, num) = x / (num - 1) - 0.5`` of hour, day of week, day - 1, day of year - 1),
    stacked as ``np.vstack`` and cast to float32 as ``AddTimeFeatures`` does; the fields from
    NumPy datetime64 arithmetic (pandas' ``DatetimeIndex`` fields where pandas is installed).
    Returned transposed, ``(n, 4)``, fastpe's layout (a view: the transpose costs nothing)."""
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is not None:
        index = pd.DatetimeIndex(stamps)
        hour, dow, day, doy = index.hour, index.day_of_week, index.day, index.day_of_year
    else:
        days = stamps.astype("datetime64[D]")
        hour = (stamps - days).astype(np.int64)
        dow = (days.astype(np.int64) + 3) % 7
        day = (days - stamps.astype("datetime64[M]").astype("datetime64[D]")).astype(np.int64) + 1
        doy = (days - stamps.astype("datetime64[Y]").astype("datetime64[D]")).astype(np.int64) + 1
    feats = [np.asarray(hour) / 23.0 - 0.5, np.asarray(dow) / 6.0 - 0.5, (np.asarray(day) - 1) / 30.0 - 0.5,
             (np.asarray(doy) - 1) / 365.0 - 0.5]
    return np.vstack(feats).astype(np.float32).T


def _make_gluonts_calendar(w: Workload):
    stamps = calendar_stamps(w)
    return lambda: gluonts_hourly_numpy(stamps)


def prophet_fourier_numpy(dates_ns: np.ndarray, period: float, series_order: int) -> np.ndarray:
    """Prophet's ``Prophet.fourier_series`` (prophet/forecaster.py) in NumPy float64: days since
    1970 from whole seconds, ``x_T = t * pi * 2``, column ``2i`` ``sin(x_T (i + 1) / period)``
    and ``2i + 1`` its cosine."""
    t = dates_ns // 1_000_000_000 / (3600 * 24.0)
    x_t = t * np.pi * 2
    out = np.empty((dates_ns.shape[0], 2 * series_order))
    for i in range(series_order):
        c = x_t * (i + 1) / period
        out[:, 2 * i] = np.sin(c)
        out[:, 2 * i + 1] = np.cos(c)
    return out


def _make_prophet_fourier(w: Workload):
    dates = fourier_stamps(w).view(np.int64)  # what dates.to_numpy(dtype=np.int64) gives
    return lambda: prophet_fourier_numpy(dates, FOURIER_PERIOD, FOURIER_ORDER)


def _make_tgn_time_encode(w: Workload):
    """TGN's ``TimeEncode`` (model/time_encoding.py) at initialisation: ``Linear(1, dim)``
    with the float32 ``1 / 10 ** linspace(0, 9, dim)`` weights and a zero bias, then ``cos``;
    the times a float32 tensor ``(n, 1)`` made before timing (TGN unsqueezes its batch)."""
    torch = _torch()
    dim = w.d_model
    lin = torch.nn.Linear(1, dim)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(1 / 10 ** np.linspace(0, 9, dim)).float().reshape(dim, -1))
        lin.bias.zero_()
    t = torch.from_numpy(time_encoding_times(w).astype(np.float32)).unsqueeze(-1)

    def run():
        with torch.no_grad():
            return torch.cos(lin(t))

    return run


def informer_temporal_torch(torch, tables: dict, x):
    """Informer's ``TemporalEmbedding.forward`` (models/embed.py): FixedEmbedding lookups of the
    marks ``x`` (month, day, weekday, hour), summed as ``hour_x + weekday_x + day_x + month_x``."""
    emb = torch.nn.functional.embedding
    return (emb(x[:, :, 3], tables["hour"]) + emb(x[:, :, 2], tables["weekday"]) + emb(x[:, :, 1], tables["day"])
            + emb(x[:, :, 0], tables["month"]))


def _make_informer_temporal(w: Workload):
    """The module's forward on the marks of ``time_features(timeenc=0, freq='h')`` made before
    timing (the data loader's work, once per dataset) and FixedEmbedding's tables built before
    timing (the module builds them once, at construction): fastpe's tables are plugged in, so
    the check compares bits; the module's own float32 tables differ by up to 1.6e-6 in value,
    not in time."""
    torch = _torch()
    import fastpe.time as ft

    marks = torch.from_numpy(ft.temporal_marks(calendar_stamps(w), "h"))
    table = torch.from_numpy(fastpe.table(w.d_model, 32))
    tables = {"hour": table[:24], "weekday": table[:7], "day": table[:32], "month": table[:13]}

    def run():
        with torch.no_grad():
            return informer_temporal_torch(torch, tables, marks)

    return run


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
    if w.kind == "add":
        x = w.add_x.copy().reshape(-1)
        return lambda: negate(x)
    q, k = (a.copy().reshape(-1) for a in w.rope_qk)

    def run():
        negate(q)
        negate(k)

    return run


def _make_inplace_numpy(w: Workload):
    """``np.negative(x, out=x)`` on q and k: one read and write of the bytes with the least
    dispatch cost there is (a decode step's arrays are 20 KiB: call overhead is the time)."""
    q, k = (a.copy() for a in w.rope_qk)

    def run():
        np.negative(q, out=q)
        np.negative(k, out=k)

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


def _fresh_output(w: Workload, fill):
    """A fresh array of the family workload's output bytes (its dtype), filled by ``fill``
    through a flat float32 view (every output here is a whole number of 4-byte words)."""
    shape = w.shape if w.kind in ("alibi", "t5") else (w.rows, w.d_model)

    def run():
        a = np.empty(shape, dtype=w.dtype)
        fill(a.reshape(-1).view(np.float32))
        return a

    return run


def _make_fill(w: Workload):
    if w.is_family:
        return _fresh_output(w, lambda flat: flat.fill(0))
    if w.kind == "rope_cos_sin":
        return _fresh_pair(w, lambda a: a.fill(0))
    if w.kind == "table":
        def run():
            a = np.empty((w.rows, w.d_model), dtype=w.dtype)
            a.fill(0)
            return a

        return run
    out = np.empty((w.rows, w.d_model), dtype=np.float32)
    return lambda: out.fill(0)


def _make_numba_fill(w: Workload):
    fill = numba_fill()
    if w.is_family:
        return _fresh_output(w, fill)
    if w.kind == "rope_cos_sin":
        return _fresh_pair(w, lambda a: fill(a.reshape(-1)))
    if w.kind == "table":
        def run():
            a = np.empty((w.rows, w.d_model), dtype=w.dtype)
            fill(a.reshape(-1).view(np.float32))
            return a

        return run
    out = np.empty((w.rows, w.d_model), dtype=np.float32)
    flat = out.reshape(-1)
    return lambda: fill(flat)


def reference_slice(w: Workload) -> tuple[str, str]:
    """The python reference's label and note on a family workload: whole if small, else its
    first rows (the report scales those to the whole workload and marks them 'est.')."""
    if w.ref_rows == w.rows:
        return "fastpe python (reference)", "the whole workload"
    what = {"alibi": "query row", "add": "sequence position"}.get(w.kind, "row")
    part = w.ref_rows // (w.rows // w.shape[1]) if w.kind in ("alibi", "add") else w.ref_rows
    first = f"first {what}" if part == 1 else f"first {part} {what}s"
    return (
        f"fastpe python (reference): {first} only",
        f"timed on the {first} only; the report scales it to the whole workload "
        f"(x{w.rows // w.ref_rows}) and marks it 'est.'",
    )


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
            rows.append(
                Implementation(
                    "python-ref", "fastpe python (reference)", "reference", _fastpe("python"),
                    tuple(k for k, w in WORKLOADS.items() if w.is_family and w.ref_rows),
                    note="see reference_slice()", backend="python",
                )
            )
        else:
            rows.append(
                Implementation(
                    backend, f"fastpe {backend}", "fastpe", _fastpe(backend), backend=backend,
                    kind_labels=(("rope_decode", f"fastpe {backend}: Rotary.apply_qk_(q, k, offset=p)"),),
                )
            )
    return rows


IMPLEMENTATIONS: dict[str, Implementation] = {
    im.key: im
    for im in (
        *_fastpe_rows(),
        Implementation(
            "torch-tutorial", "torch tutorial module (f32)", "peer", _make_torch, SINUSOID_F32,
            note="PyTorch tutorial PositionalEncoding computation; same column layout as fastpe",
        ),
        Implementation(
            "torch-tutorial-half", "torch tutorial module (f32) then .half()", "peer", _make_torch, TABLE_F16,
            note="the tutorial's float32 table cast with .half(), as model.half() casts its buffer: the "
            "float16 nearest torch's float32 approximation, not the correctly rounded value",
        ),
        Implementation(
            "numpy-f32", "NumPy f32 (tutorial formula)", "peer", _make_numpy, SINUSOID_F32,
            note="the tutorial's computation in NumPy float32; same column layout as fastpe",
        ),
        Implementation(
            "hf-torch-rope", "HF transformers RoPE (torch f32)", "peer", _make_hf_rope,
            tuple(k for k in ROPE if WORKLOADS[k].kind != "rope_decode"),
            kind_labels=(("rope_apply_qk", "HF transformers apply_rotary_pos_emb alone (torch f32, caches given)"),),
            note="LlamaRotaryEmbedding.forward (cos/sin) and apply_rotary_pos_emb (q*cos + "
            "rotate_half(q)*sin, new tensors; the cos/sin caches computed before timing)",
        ),
        Implementation(
            "flash-xpos-torch", "flash-attention xPos formula (torch f32, caches given)", "peer", _make_flash_xpos,
            tuple(k for k, w in WORKLOADS.items() if w.kind == "xpos_qk"),
            note="flash_attn/layers/rotary.py's scale_base caches (cos * scale, cos / scale) made before timing, "
            "then x * cos + rotate_half(x) * sin for q and k (new tensors); checked against fastpe once",
        ),
        Implementation(
            "hf-rope-step", "HF transformers decode step: LlamaRotaryEmbedding + apply_rotary_pos_emb",
            "peer", _make_hf_rope_step, tuple(k for k in ROPE if WORKLOADS[k].kind == "rope_decode"),
            note="transformers' own LlamaRotaryEmbedding computes the step's cos/sin from position_ids "
            "(1, 1), then apply_rotary_pos_emb returns new q and k, under torch.no_grad()",
        ),
        Implementation(
            "fastpe-rope-apply-fn", "fastpe.rope.apply_qk_(q, k, head_dim=128, offset=p) (module function)",
            "fastpe", _make_fastpe_rope_function, tuple(k for k in ROPE if WORKLOADS[k].kind == "rope_decode"),
            note="the module function resolves its arguments on every call; default backend",
        ),
        Implementation(
            "fastpe-torch", "fastpe.torch RotaryEmbedding.cos_sin (default backend, tensors)", "fastpe",
            _make_fastpe_torch_rope, tuple(k for k in ROPE if WORKLOADS[k].kind == "rope_cos_sin"),
            note="fastpe's float32 caches computed by its float32 kernel and returned as tensors over "
            "its arrays (torch.from_numpy, no copy); at 32768 positions each round runs fastpe.rope.cos_sin "
            "first (untimed here, timed into extra_info's paired figures), so this row and that one "
            "alternate, allocate alike and hold the same rounds' ratio",
        ),
        Implementation(
            "fastpe-rope-cos-sin-fn", "fastpe.rope.cos_sin (default backend, NumPy arrays)", "fastpe",
            _make_fastpe_rope_function, ("rope-cos-sin-32768x128",),
            note="the NumPy path the torch bridge wraps (the module function, which resolves the rope "
            "arguments each call; the bridge holds a Rotary): int64 positions, as np.arange gives them; each "
            "round runs the bridge's RotaryEmbedding.cos_sin first (untimed here, timed into extra_info's "
            "paired figures), as the bridge's row runs this call before each of its rounds",
        ),
        Implementation(
            "positional-encodings", "positional-encodings PositionalEncoding1D", "peer", _make_pe1d,
            tuple(k for k in SINUSOID_F32 if WORKLOADS[k].kind == "table"),
            note="PyPI positional-encodings (torch); returns (1, n, d); sin/cos interleaved as in fastpe",
        ),
        Implementation(
            "hf-m2m100", "HF M2M100 get_embedding (torch f32)", "peer", _make_hf_m2m100,
            tuple(k for k in FAMILY["family_table"] if WORKLOADS[k].dtype == "float32"),
            note="M2M100SinusoidalPositionalEmbedding.get_embedding(n, d): fairseq's formula, float32 angles",
        ),
        Implementation(
            "hf-m2m100-half", "HF M2M100 get_embedding (torch f32) then .half()", "peer", _make_hf_m2m100,
            tuple(k for k in FAMILY["family_table"] if WORKLOADS[k].dtype == "float16"),
            note="the float32 table cast with .half(), as model.half() casts the buffer: the float16 "
            "nearest torch's float32 approximation, not the correctly rounded value",
        ),
        Implementation(
            "numpy-fairseq", "NumPy f32 (fairseq formula)", "peer", _make_numpy_fairseq,
            tuple(k for k in FAMILY["family_table"] if WORKLOADS[k].dtype == "float32"),
            note="exp(-k ln(10000)/(h-1)), [sin | cos] halves, float32 throughout",
        ),
        Implementation(
            "mae-numpy", "MAE get_2d_sincos_pos_embed (NumPy f64 → f32)", "peer", _make_mae, FAMILY["grid"],
            note="MAE's published formula (float64 omega and einsum, as MAE computes it), cast to "
            "float32 as MAE copies it into its parameter",
        ),
        Implementation(
            "torch-grid", "torch f32 (MAE formula)", "peer", _make_torch_grid, FAMILY["grid"],
            note="meshgrid, outer products and one cat, float32",
        ),
        Implementation(
            "diffusers", "diffusers get_timestep_embedding (torch f32)", "peer", _make_diffusers,
            FAMILY["timestep"],
            note="flip_sin_to_cos=True, downscale_freq_shift=0; timesteps as a float32 tensor",
        ),
        Implementation(
            "numpy-timestep", "NumPy f32 (diffusers formula)", "peer", _make_numpy_timestep, FAMILY["timestep"],
            note="diffusers' formula in NumPy float32, [cos | sin] written directly",
        ),
        Implementation(
            "numpy-add", "NumPy in place: x *= s; x += table[:seq] (table precomputed)", "peer",
            _make_numpy_add, FAMILY["add"],
            note="the table (fastpe.table, exact) is computed once before timing; only the "
            "in-place multiply and add are timed",
        ),
        Implementation(
            "torch-add", "torch tutorial: x * s + pe[:seq] (pe precomputed, new tensor)", "peer",
            _make_torch_add, FAMILY["add"],
            note="the tutorial's buffer pe computed before timing; x * s and + pe each make a new tensor",
        ),
        Implementation(
            "torch-alibi", "torch f32 (ALiBi formula)", "peer", _make_torch_alibi,
            tuple(k for k in FAMILY["alibi"] if WORKLOADS[k].variant == "causal"),
            note="float32 slopes 2^(-8(h+1)/n) times the int64 distance j - i into a fresh (h, q, k) "
            "tensor, then masked_fill_(j > i, -inf)",
        ),
        Implementation(
            "hf-bloom", "HF BLOOM build_alibi_tensor (torch f32)", "peer", _make_hf_bloom,
            tuple(k for k in FAMILY["alibi"] if WORKLOADS[k].variant == "bloom"),
            note="build_alibi_tensor(ones(1, k), heads, float32): slope * key index, (heads, 1, k)",
        ),
        Implementation(
            "torch-relative-sinusoid", "torch f32 (Transformer-XL / NeMo formula)", "peer",
            _make_torch_transformer_xl, FAMILY["relative_table"],
            note="transformer-xl's PositionalEmbedding (outer product, cat of sin and cos) or NeMo's "
            "RelPositionalEncoding (exp div_term, interleaved), float32, as published",
        ),
        Implementation(
            "torch-nemo-sandwich", "torch f32 (NeMo Sandwich formula, 32 query rows at a time)", "peer",
            _make_torch_sandwich, FAMILY["sandwich"],
            note="NeMo's forward: |i - j| times inv_freq, cos, sum over H/2, minus H/2, over (h+1)*8/n; "
            "its (q, k, H/2) tensor computed 32 query rows at a time (16 GiB in one piece)",
        ),
        Implementation(
            "hf-t5", "HF T5Attention._relative_position_bucket (torch)", "peer", _make_hf_t5, FAMILY["t5"] + FAMILY["t5_positions"],
            note="memory - context positions (int64), then the bucket rule, as compute_bias does",
        ),
        Implementation(
            "hf-deberta", "HF DeBERTa-v2 build_relative_position (torch)", "peer", _make_hf_deberta,
            FAMILY["deberta"] + FAMILY["deberta_positions"],
            note="q_ids[:, None] - k_ids[None, :] (int64), make_log_bucket_position(256, 512) in float32, "
            "then .to(torch.long); shape (1, q, k)",
        ),
        Implementation(
            "numpy-shaw", "tensor2tensor's formula in NumPy (int32)", "peer", _make_numpy_shaw, FAMILY["shaw"],
            note="_generate_relative_positions_matrix: k[None, :] - q[:, None] clipped to +-20, plus 20",
        ),
        Implementation(
            "diffusers-flux", "diffusers FluxPosEmbed (torch, float64 angles)", "peer", _make_diffusers_flux,
            FAMILY["axial"],
            note="FluxPosEmbed(theta=10000, axes_dim=(16, 56, 56)) on the (4096, 3) image ids made before "
            "timing; returns (cos, sin) float32, each frequency in two adjacent columns",
        ),
        Implementation(
            "hf-mrope", "HF transformers Qwen2VLModel.get_rope_index (torch)", "peer", _make_hf_mrope,
            FAMILY["mrope"],
            note="transformers' own get_rope_index on an object holding only the config; ids, grids "
            "and mm_token_type_ids as torch tensors made before timing; positions and deltas computed",
        ),
        Implementation(
            "gluonts-calendar-numpy", "GluonTS time features 'H' (formula, NumPy f64 → f32)", "peer",
            _make_gluonts_calendar, FAMILY["calendar"],
            note="gluonts/time_feature/_base.py's formulas on the timestamps' fields (pandas' DatetimeIndex "
            "fields if installed, else NumPy datetime64 arithmetic), np.vstack, cast to float32 as "
            "AddTimeFeatures does; returned transposed (a view)",
        ),
        Implementation(
            "informer-temporal-torch", "Informer TemporalEmbedding.forward (torch f32, tables and marks given)",
            "peer", _make_informer_temporal, FAMILY["temporal"],
            note="four nn.functional.embedding lookups summed in the module's order; marks (int64) and "
            "FixedEmbedding tables (fastpe's, for a bitwise check) made before timing",
        ),
        Implementation(
            "prophet-fourier-numpy", "Prophet fourier_series (formula, NumPy f64)", "peer",
            _make_prophet_fourier, FAMILY["fourier"],
            note="prophet/forecaster.py's fourier_series on the int64 nanoseconds (dates // 10**9 / 86400, "
            "then sin and cos of 2 pi k t / period per column)",
        ),
        Implementation(
            "tgn-time-encode-torch", "TGN TimeEncode.forward (torch f32, weights at init)", "peer",
            _make_tgn_time_encode, FAMILY["time_encoding"],
            note="torch.cos(Linear(1, 100)(t)) with the float32 1 / 10 ** linspace(0, 9, 100) weights and "
            "a zero bias; the times a float32 (n, 1) tensor made before timing",
        ),
        Implementation(
            "yardstick-fill", "yardstick: np.empty + fill(0)", "yardstick", _make_fill,
            (*SINUSOID, *(k for k in ROPE if WORKLOADS[k].kind == "rope_cos_sin"), *FAMILY_FRESH),
            note="writes the same bytes and nothing else (forward: into the preallocated out)",
        ),
        Implementation(
            "yardstick-numba", "yardstick: np.empty + numba prange fill", "yardstick", _make_numba_fill,
            (*SINUSOID, *(k for k in ROPE if WORKLOADS[k].kind == "rope_cos_sin"), *FAMILY_FRESH),
            note="parallel fill of the same bytes (forward: into the preallocated out)",
        ),
        Implementation(
            "yardstick-inplace", "yardstick: numba prange x = -x in place", "yardstick", _make_inplace,
            (*(k for k in ROPE if WORKLOADS[k].kind in ("rope_apply_qk", "rope_decode")), *FAMILY["add"]),
            note="reads and writes the input once, in place, in parallel: the memory traffic of "
            "apply_qk_ (q and k) or add_ (x)",
        ),
        Implementation(
            "yardstick-inplace-numpy", "yardstick: np.negative(x, out=x) on q and k", "yardstick",
            _make_inplace_numpy, tuple(k for k in ROPE if WORKLOADS[k].kind == "rope_decode"),
            note="one read and write of q and k by NumPy's cheapest in-place call: at 20 KiB the "
            "time of a call, not of memory",
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
