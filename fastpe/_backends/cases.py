"""Test cases of every operation of the contract (:mod:`fastpe._backends.registry`).

``CASES[name]()`` returns a list of :class:`Case`: valid inputs of operation ``name`` as the
public API hands them to a backend (converted, contiguous, within every documented bound),
with fresh arrays on each call, so two backends can each be given their own copy and their
written arguments compared.  The cases reach each operation's edges: positions 0, anchor
boundaries and the top of the u32 range, odd widths, every layout, form and output dtype,
tiny and huge frequencies, signs, strided views, infinities and NaN where they are legal.
Nothing here runs at import; only the contract test and the benchmarks' check read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .._plans.alibi import FORMS
from .._plans.frequencies import DEFAULT_BASE, Geometric
from .._plans.layouts import LAYOUTS

__all__ = ["Case", "CASES"]

U32_TOP = 2**32 - 1


@dataclass
class Case:
    label: str
    arguments: dict


def _positions(seed: int, n: int = 24) -> np.ndarray:
    """Edges (0, 1, anchor boundaries, the top of u32) and random positions of every size."""
    edges = [0, 1, 2, 63, 64, 65, 127, 128, 4095, 65536, 2**31, U32_TOP - 64, U32_TOP]
    r = np.random.default_rng(seed)
    random = (2.0 ** r.uniform(0, 32, n)).astype(np.uint64).clip(0, U32_TOP)
    return np.array(edges + random.tolist(), dtype=np.uint32)


def _sentinel(shape, dtype) -> np.ndarray:
    """An output buffer full of NaN (or -1): a cell a backend forgets to write shows."""
    out = np.empty(shape, dtype=dtype)
    out[...] = np.nan if np.dtype(dtype).kind == "f" else -1
    return out


def _hf_inv_freq(head_dim: int, base: float) -> tuple[float, ...]:
    return tuple((1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)).tolist())


#: RoPE frequency sets: HF's default rule, a scaled one with zeros, the largest and tiny ones
_INV_FREQS = {
    "hf8": _hf_inv_freq(8, DEFAULT_BASE),
    "hf16-500k": _hf_inv_freq(16, 500000.0),
    "edges": (1024.0, 1.0, 0.5, 1e-3, 1e-30, 0.0),
}


def _signed_positions(seed: int, n: int = 24) -> np.ndarray:
    """int64 positions of both signs: the edges negated beside themselves (-(2**32 - 1) the
    most negative), a run down through zero, random magnitudes with random signs."""
    edges = [int(p) for p in _positions(seed, 0)]
    run = list(range(66, -67, -1))  # crosses anchors on both sides of 0
    r = np.random.default_rng(seed)
    random = _positions(seed + 1, n).astype(np.int64) * r.choice([-1, 1], n + 13)
    return np.array(edges + [-p for p in edges] + run + random.tolist(), dtype=np.int64)


def sinusoid_forward() -> list[Case]:
    cases = []
    for d_model, base in ((1, DEFAULT_BASE), (2, DEFAULT_BASE), (7, 10.5), (16, 1e6), (33, 2.0)):
        positions = _positions(d_model)
        cases.append(Case(f"d{d_model}-b{base:g}", dict(
            positions=positions, d_model=d_model, base=base,
            out=_sentinel((len(positions), d_model), np.float32))))
    for d_model, base in ((1, DEFAULT_BASE), (6, DEFAULT_BASE), (9, 500000.0)):  # signed: int64
        positions = _signed_positions(d_model, 12)
        cases.append(Case(f"signed-d{d_model}-b{base:g}", dict(
            positions=positions, d_model=d_model, base=base,
            out=_sentinel((len(positions), d_model), np.float32))))
    return cases


def sinusoid_range() -> list[Case]:
    return [
        Case(f"s{start}-d{d_model}", dict(start=start, d_model=d_model, base=base,
                                           out=_sentinel((rows, d_model), np.float32)))
        for start, rows, d_model, base in ((0, 130, 8, DEFAULT_BASE), (61, 70, 5, 500000.0),
                                           (2**32 - 100, 100, 4, DEFAULT_BASE), (12345, 0, 8, DEFAULT_BASE))
    ]


def rope_cos_sin() -> list[Case]:
    cases = []
    for key, inv in _INV_FREQS.items():
        for layout in ("neox", "gptj"):
            for af in (1.0, 1.2345):
                pos = _positions(len(inv))
                shape = (len(pos), 2 * len(inv))
                cases.append(Case(f"{key}-{layout}-af{af}", dict(
                    positions=pos, inv_freq=inv, attention_factor=af, layout=layout,
                    out_cos=_sentinel(shape, np.float32), out_sin=_sentinel(shape, np.float32))))
    return cases


def rope_table() -> list[Case]:
    return [
        Case(f"{key}-af{af}", dict(positions=_positions(3), inv_freq=inv, attention_factor=af,
                                   out=_sentinel((len(_positions(3)), 2, len(inv)), np.float64)))
        for key, inv in _INV_FREQS.items() for af in (1.0, 0.7, 0.0)
    ]


def rope_xpos_table() -> list[Case]:
    """Scales within [0.2, 5] (the contract compares doubles to 2**-45 absolute): the whole u32
    range at a scale base of 2**32 or 3e9, the centre at 0, 2**31 or the top (2**32);
    positions around the centre at xPos's usual 512, crossing anchors (multiples of 64) on both
    sides; a scale base below 2 (pow at every value); attention factors 1, 0.7 and 0.  The
    clamp and the huge powers are tested against the reference in tests/rope/test_xpos.py."""
    from .._exact.rope import xpos_zeta

    wide = _positions(5)
    near = np.array([724, 900, 1000, 1023, 1024, 1025, 1100, 1324], dtype=np.uint32)
    runs = (("u32-sb2**32-c2**31", wide, 2.0**32, 2**31, 1.0), ("u32-sb3e9-c0", wide, 3e9, 0, 0.7),
            ("u32-top-center", wide, 2.0**32, 2**32, 1.0), ("near-sb512", near, 512.0, 1024, 1.0),
            ("near-sb500-af0", near, 500.0, 1000, 0.0),
            ("centre-sb1.5-direct", np.array([1023, 1024, 1025], dtype=np.uint32), 1.5, 1024, 1.0))
    cases = []
    for key, inv in _INV_FREQS.items():
        zeta = xpos_zeta(2 * len(inv))
        for label, pos, sb, center, af in runs:
            shape = (len(pos), 2, len(inv))
            cases.append(Case(f"{key}-{label}", dict(
                positions=pos.copy(), inv_freq=inv, attention_factor=af, zeta=zeta, scale_base=sb, center=center,
                out_q=_sentinel(shape, np.float64), out_k=_sentinel(shape, np.float64))))
    return cases


def _values(r: np.random.Generator, shape, specials: bool) -> np.ndarray:
    x = r.standard_normal(shape).astype(np.float32) * np.float32(3)
    if specials:
        flat = x.reshape(-1)
        flat[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 3e38]
    return x


def rope_apply() -> list[Case]:
    cases = []
    r = np.random.default_rng(7)
    for key, inv in (("hf8", _INV_FREQS["hf8"]), ("edges", _INV_FREQS["edges"])):
        nf = len(inv)
        for layout in ("neox", "gptj"):
            head_dim = 2 * nf + 2  # a partial rotary: the last two columns stay as they are
            tokens = 40
            pos = _positions(11, tokens - 13)
            q = _values(r, (tokens, 3, head_dim), True)
            k = _values(r, (tokens, 1, head_dim), False)
            cases.append(Case(f"{key}-{layout}-tokens", dict(
                q=q, k=k, positions=pos, inv_freq=inv, attention_factor=1.0, layout=layout)))
            q4 = _values(r, (2, 4, 70, 2 * nf), True)
            k4 = _values(r, (2, 2, 70, 2 * nf), False)
            pos2 = np.stack([np.arange(70, dtype=np.uint32), np.arange(70, dtype=np.uint32) + U32_TOP - 70])
            cases.append(Case(f"{key}-{layout}-batch-positions", dict(
                q=q4, k=k4, positions=pos2, inv_freq=inv, attention_factor=1.3, layout=layout)))
            q1 = _values(r, (1, 2, 65, 2 * nf), False)
            cases.append(Case(f"{key}-{layout}-q-only", dict(
                q=q1, k=None, positions=np.arange(1000, 1065, dtype=np.uint32), inv_freq=inv,
                attention_factor=1.0, layout=layout)))
    return cases


def _rotation_table(r: np.random.Generator, rows: int, n_freq: int, negate: bool = False) -> np.ndarray:
    """``(rows, 2, n_freq)`` doubles ``C``, ``S`` of random angles, scaled (an attention
    factor), the sine negated where ``negate`` (an inverse rotation's table)."""
    angle = r.uniform(-4.0, 4.0, (rows, n_freq))
    table = np.stack([np.cos(angle), np.sin(angle)], axis=1) * 1.1
    if negate:
        table[:, 1] = -table[:, 1]
    return np.ascontiguousarray(table)


def rope_apply_table() -> list[Case]:
    cases = []
    r = np.random.default_rng(13)
    for layout in ("neox", "gptj"):
        nf = 8
        q = _values(r, (40, 3, 2 * nf + 2), True)  # a partial rotary: the last two columns stay
        k = _values(r, (40, 1, 2 * nf + 2), False)
        cases.append(Case(f"{layout}-tokens", dict(q=q, k=k, table=_rotation_table(r, 40, nf), stride=0,
                                                   begin=0, end=40, layout=layout)))
        q = _values(r, (40, 2, 2 * nf), True)
        cases.append(Case(f"{layout}-tokens-run-q-only", dict(q=q, k=None, table=_rotation_table(r, 17, nf),
                                                              stride=0, begin=9, end=26, layout=layout)))
        q4, k4 = _values(r, (2, 4, 70, 2 * nf), True), _values(r, (2, 2, 70, 2 * nf), False)
        cases.append(Case(f"{layout}-shared-rows", dict(q=q4, k=k4, table=_rotation_table(r, 70, nf), stride=0,
                                                        begin=0, end=70, layout=layout)))
        q4, k4 = _values(r, (3, 4, 70, 2 * nf), True), _values(r, (3, 2, 70, 2 * nf), False)
        cases.append(Case(f"{layout}-per-batch-rows-negated", dict(
            q=q4, k=k4, table=_rotation_table(r, 3 * 70, nf, negate=True), stride=70, begin=0, end=70,
            layout=layout)))
        q4 = _values(r, (2, 3, 70, 2 * nf + 4), False)
        cases.append(Case(f"{layout}-per-batch-run-q-only", dict(
            q=q4, k=None, table=_rotation_table(r, 2 * 30, nf), stride=30, begin=20, end=50, layout=layout)))
        q4, k4 = _values(r, (2, 8, 512, 64), False), _values(r, (2, 4, 512, 64), False)  # on threads
        cases.append(Case(f"{layout}-parallel", dict(
            q=q4, k=k4, table=_rotation_table(r, 2 * 512, 32, negate=True), stride=512, begin=0, end=512,
            layout=layout)))
    return cases


#: frequency sets of the families: the spec's, fairseq's half-1, a grid axis, a timestep's
_FAMILIES = {
    "spec": Geometric.spec(9, DEFAULT_BASE),
    "half-1": Geometric(4, 3.0, DEFAULT_BASE),
    "grid": Geometric(4, 4.0, DEFAULT_BASE),
    "timestep": Geometric(5, 5.0, DEFAULT_BASE, 1.0, 1000.0 / 1024),
    "one": Geometric(1, 1.0, 2.0),
}


def _family_cases(make_x, tag: str) -> list[Case]:
    cases = []
    for key, freqs in _FAMILIES.items():
        for layout in LAYOUTS:
            for dtype in (np.float32, np.float64):
                for d in sorted({2 * freqs.count - 1, 2 * freqs.count, 2 * freqs.count + 1} - {0}):
                    x = make_x(freqs.count)
                    cases.append(Case(f"{key}-{layout}-{np.dtype(dtype).name}-d{d}", {
                        tag: x, "freqs": freqs, "layout": layout,
                        "out": _sentinel((len(x), d), dtype)}))
    return cases


def sincos_rows() -> list[Case]:
    return (_family_cases(lambda seed: _positions(seed, 8), "positions")
            + [Case(f"signed-{c.label}", c.arguments)
               for c in _family_cases(lambda seed: _signed_positions(seed, 4)[::3].copy(), "positions")])


def _reals(seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    x = [0.0, -0.0, 5e-324, -1e-300, 0.5, -0.5, 1.5, 999.0, 1712515.142194659, -(2.0**32) + 0.5,
         2.0**32 - 2.0**-20, math.pi / 2]
    x += (r.uniform(-1, 1, 8) * 2.0 ** r.uniform(-30, 32, 8)).tolist()
    return np.array(x, dtype=np.float64)


def sincos_real() -> list[Case]:
    return _family_cases(_reals, "x")


def grid_gather() -> list[Case]:
    cases = []
    r = np.random.default_rng(5)
    for sizes, q, first_row in (((3, 4), 2, 0), ((2, 3, 4), 3, 1), ((1, 5), 1, 0)):
        table = r.integers(0, 2**32, (max(sizes), 2 * q), dtype=np.uint32)
        n_axes, width = len(sizes), 2 * q * len(sizes)
        sin_off = np.arange(n_axes, dtype=np.int64) * 2 * q
        cos_off = sin_off + q
        out = np.full((first_row + math.prod(sizes), width), 0xFFFFFFFF, dtype=np.uint32)
        if first_row:
            out[:first_row] = 0
        cases.append(Case(f"{'x'.join(map(str, sizes))}-q{q}", dict(
            table=table, sizes=np.array(sizes, dtype=np.int64), sin_off=sin_off,
            cos_off=cos_off[::-1].copy(), first_row=first_row, out=out)))
    return cases


def _axial_pieces(widths, layout: str) -> tuple[list[tuple[int, int, int, int]], int, int]:
    """``(pieces, K, D)`` of axes of ``widths`` laid out as fastpe.rope's axial caches: gptj,
    one piece per axis (its whole block); neox, the axis's half block twice in its block;
    neox_head, twice across the head's halves."""
    pieces, start, start_h, half = [], 0, 0, sum(widths) // 2
    for a, d in enumerate(widths):
        h = d // 2
        if layout == "gptj":
            pieces.append((a, 0, start, d))
        elif layout == "neox":
            pieces += [(a, 0, start, h), (a, 0, start + h, h)]
        else:
            pieces += [(a, 0, start_h, h), (a, 0, half + start_h, h)]
        start += d
        start_h += h
    return pieces, max(widths) if layout == "gptj" else max(widths) // 2, sum(widths)


def axial_gather() -> list[Case]:
    cases = []
    r = np.random.default_rng(17)

    def case(label, table, index, pieces, width, bits):
        n = index.shape[1]
        cases.append(Case(label, dict(
            table=table, index=np.ascontiguousarray(index, dtype=np.int64),
            pieces=np.array(pieces, dtype=np.int64).reshape(-1, 4),
            out_cos=np.full((n, width), np.iinfo(bits).max, dtype=bits),
            out_sin=np.full((n, width), np.iinfo(bits).max, dtype=bits))))

    for bits in (np.uint16, np.uint32, np.uint64):
        for layout in ("gptj", "neox", "neox_head"):
            # a meshgrid (3 x 5 x 7, the rows a product of ranges), axis widths 2 (one pair), 6, 10
            sizes, widths = (3, 5, 7), (2, 6, 10)
            pieces, k, width = _axial_pieces(widths, layout)
            table = r.integers(0, np.iinfo(bits).max, (sum(sizes), 2, k), dtype=bits, endpoint=True)
            grid = np.stack([g.reshape(-1) for g in np.meshgrid(*map(np.arange, sizes), indexing="ij")])
            grid += np.cumsum((0,) + sizes[:-1])[:, None]
            case(f"{bits.__name__}-{layout}-grid3x5x7", table, grid, pieces, width, bits)
            # arbitrary coordinates: random rows, one axis reversed, one constant, 13 tokens
            widths = (4, 8)
            pieces, k, width = _axial_pieces(widths, layout)
            table = r.integers(0, np.iinfo(bits).max, (11, 2, k), dtype=bits, endpoint=True)
            index = np.stack([r.integers(0, 11, 13), np.arange(13)[::-1] % 11])
            case(f"{bits.__name__}-{layout}-random13", table, index, pieces, width, bits)
        # one axis, one token; and a strided pattern (every third row) with pieces read from
        # an offset into the table and a column left unwritten
        table = r.integers(0, np.iinfo(bits).max, (4, 2, 6), dtype=bits, endpoint=True)
        case(f"{bits.__name__}-one-token", table, np.array([[2]]), [(0, 0, 0, 6)], 6, bits)
        table = r.integers(0, np.iinfo(bits).max, (30, 2, 5), dtype=bits, endpoint=True)
        index = np.stack([np.arange(0, 30, 3), np.arange(9, -1, -1) * 3 % 30, np.full(10, 29)])
        case(f"{bits.__name__}-strided-offsets", table, index,
             [(2, 1, 0, 2), (0, 3, 2, 2), (1, 0, 5, 5)], 11, bits)
        case(f"{bits.__name__}-no-tokens", table, np.empty((3, 0), np.int64), [(0, 0, 0, 4)], 4, bits)
    # many tokens, odd sizes, FLUX's widths: 2 x 37 x 61 (the threaded kernels are tested in
    # tests/backends/test_axial_gather.py)
    sizes, widths = (2, 37, 61), (16, 56, 56)
    pieces, k, width = _axial_pieces(widths, "gptj")
    table = r.integers(0, 2**32, (sum(sizes), 2, k), dtype=np.uint32)
    grid = np.stack([g.reshape(-1) for g in np.meshgrid(*map(np.arange, sizes), indexing="ij")])
    grid += np.cumsum((0,) + sizes[:-1])[:, None]
    case("uint32-gptj-grid2x37x61", table, grid, pieces, width, np.uint32)
    return cases


def add_rows() -> list[Case]:
    cases = []
    r = np.random.default_rng(9)
    for dtype in (np.float32, np.float64):
        for scale in (None, math.sqrt(6.0), -0.0):
            x = r.standard_normal((2, 5, 6)).astype(dtype)
            x.reshape(-1)[:4] = [np.inf, -np.inf, np.nan, -0.0]
            pe = r.standard_normal((5, 6)).astype(dtype)
            cases.append(Case(f"{np.dtype(dtype).name}-scale{scale}", dict(x=x, pe=pe, scale=scale)))
            wide = r.standard_normal((3, 7, 10)).astype(dtype)
            view = wide[:, 1:6, ::2]  # strided: every other column of a wider buffer
            cases.append(Case(f"{np.dtype(dtype).name}-strided-scale{scale}", dict(
                x=view, pe=r.standard_normal((5, 5)).astype(dtype), scale=scale)))
    return cases


def narrow16() -> list[Case]:
    r = np.random.default_rng(13)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 65504.0, 65520.0, 65519.996,
                         2.0**-24, 2.0**-25, 2.0**-25 * 3, 1.0 + 2.0**-11, 1.0 + 2.0**-8,
                         3.4e38, 1e-45, -1e-45], dtype=np.float32)
    # ties of both formats: the midpoints of random float16 / bfloat16 neighbours
    halves = r.integers(0, 0x7C00, 64, dtype=np.uint32)
    tie16 = halves.astype(np.uint16).view(np.float16).astype(np.float32)
    tie16 = (tie16.view(np.uint32) + np.uint32(1 << 12)).view(np.float32)  # halfway up (normal float16s)
    bfs = (r.integers(0, 0x7F80, 64, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
    rand = r.integers(0, 2**32, 256, dtype=np.uint32).view(np.float32)
    rand = rand[~np.isnan(rand)]  # the kernels' results it narrows are never NaN
    x = np.concatenate([specials, -specials, tie16, bfs, rand]).astype(np.float32)
    return [Case(f"{'bf16' if bf16 else 'f16'}", dict(
        bits32=x.view(np.uint32).copy(), bf16=bf16, out=np.full(x.size, 0xFFFF, dtype=np.uint16),
        ties=np.ones(x.size, dtype=np.bool_))) for bf16 in (False, True)]


def _alibi_dtypes():
    from .. import _dtypes  # the narrow formats need ml_dtypes for bfloat16: only if present

    names = ["float32", "float64", "float16"]
    try:
        _dtypes.resolve("bfloat16")
        names.append("bfloat16")
    except TypeError:
        pass
    return [_dtypes.resolve(n) for n in names]


def alibi_bias() -> list[Case]:
    cases = []
    for n_heads, max_bias in ((1, 8.0), (3, 8.0), (12, 0.5), (5, 2.0**-16), (2, 64.0)):
        for form in FORMS:
            for dt in _alibi_dtypes():
                q_len, k_len = (3, 70) if form in ("bloom", "mpt") else (66, 70)
                out = np.zeros((n_heads, q_len, k_len), dtype=dt)
                cases.append(Case(f"h{n_heads}-mb{max_bias:g}-{form}-{dt.name}", dict(
                    n_heads=n_heads, max_bias=max_bias, form=form, out=out)))
    cases.append(Case("bloom-short-keys", dict(n_heads=4, max_bias=8.0, form="bloom",
                                               out=np.zeros((4, 9, 2), np.float32))))
    return cases


def sandwich_bias() -> list[Case]:
    """Square, wide and tall shapes (NeMo's bottom-right slice), both directions, every
    dtype (float64 where the values stay below 4, within the contract's 2**-45 absolute),
    one head to many, the smallest hidden size and long distances; NaN sentinels."""
    cases = []
    shapes = ((5, 5), (3, 9), (9, 3), (1, 1), (1, 70), (66, 2))
    for n_heads, hidden in ((1, 2), (3, 8), (8, 64), (2, 4)):
        for q_len, k_len in shapes:
            for bidirectional in (True, False):
                for dt in _alibi_dtypes():
                    if dt == np.float64 and n_heads * hidden > 16:
                        continue
                    cases.append(Case(f"h{n_heads}-H{hidden}-{q_len}x{k_len}-{'bi' if bidirectional else 'causal'}-"
                                      f"{dt.name}", dict(n_heads=n_heads, hidden_size=hidden,
                                                         bidirectional=bidirectional,
                                                         out=_sentinel((n_heads, q_len, k_len), dt))))
    cases.append(Case("long-distances", dict(n_heads=4, hidden_size=16, bidirectional=True,
                                             out=_sentinel((4, 1, 2500), np.float32))))
    return cases


_T5 = ((True, 32, 128), (False, 32, 128), (True, 4, 2), (True, 4096, 2000), (False, 3, 2**32))


def t5_bucket() -> list[Case]:
    rel = np.array([0, 1, -1, 7, 8, -8, 15, 16, 127, 128, -128, 129, 10**6, -(10**6),
                    2**62, -(2**62), 2**63 - 1, -(2**63) + 1] + list(range(-40, 41)), dtype=np.int64)
    return [Case(f"bi{int(bi)}-n{n}-m{m}-{np.dtype(dt).name}", dict(
        relative_position=rel.copy(), bidirectional=bi, num_buckets=n, max_distance=m,
        out=np.full(rel.size, -7, dtype=dt))) for bi, n, m in _T5 for dt in (np.int64, np.int32)]


def t5_bucket_matrix() -> list[Case]:
    return [Case(f"bi{int(bi)}-n{n}-m{m}-o{off}", dict(
        query_offset=off, bidirectional=bi, num_buckets=n, max_distance=m,
        out=np.full((q, k), -7, dtype=dt)))
        for (bi, n, m), (q, k, off), dt in zip(_T5 * 2, ((20, 300, 0), (5, 260, 100), (1, 40, 2**62),
                                                         (150, 3, 7), (33, 33, 0)) * 2,
                                              (np.int64,) * 5 + (np.int32,) * 5)]


# ------------------------------------------------------------- DeBERTa and Shaw positions

#: (bucket_size, max_position): DeBERTa-v3's, mid = 1 (no log bucket above 1), odd sizes,
#: max_position just above bucket_size // 2 (buckets climbing fast), large and huge ones
_DEBERTA = ((256, 512), (2, 3), (3, 4), (17, 10), (64, 34), (257, 1000), (4096, 4096), (256, 2**62))


def deberta_bucket() -> list[Case]:
    cases = []
    for bs, mp in _DEBERTA:
        mid = bs // 2
        edges = [0, 1, mid - 1, mid, mid + 1, mid + 2, 2 * mid, mp - 1, mp, mp + 1, 10**6, 2**24 + 1,
                 2**31, 2**53 + 1, 2**62, 2**63 - 1]
        rel = np.array(sorted(set(edges + [-e for e in edges] + list(range(-300, 301, 7)))), dtype=np.int64)
        for dt in (np.int64, np.int32):
            cases.append(Case(f"b{bs}-m{mp}-{np.dtype(dt).name}", dict(
                relative_position=rel.copy(), bucket_size=bs, max_position=mp, out=np.full(rel.size, -7, dtype=dt))))
    return cases


def deberta_bucket_matrix() -> list[Case]:
    shapes = ((20, 300), (300, 7), (1, 1), (33, 33), (70, 65), (1, 513), (513, 1))
    configs = _DEBERTA[:6] + ((0, 0),)  # (0, 0): unbucketed, i - j
    return [Case(f"b{bs}-m{mp}-{q}x{k}-{np.dtype(dt).name}", dict(
        bucket_size=bs, max_position=mp, out=np.full((q, k), -7, dtype=dt)))
        for n, (bs, mp) in enumerate(configs) for dt in (np.int64, np.int32)
        for q, k in (shapes[n % len(shapes)], shapes[(n + 3) % len(shapes)])]


def shaw_matrix() -> list[Case]:
    cases = []
    for m, (q, k), dt in ((0, (5, 9), np.int32), (1, (17, 17), np.int64), (3, (1, 40), np.int32),
                          (16, (40, 300), np.int32), (16, (300, 300), np.int64), (2**30, (7, 9), np.int32),
                          (2**62, (6, 11), np.int64), (5, (9, 9), np.int64)):
        for offset in sorted({k - q, k - 1, 0}):
            cases.append(Case(f"m{m}-{q}x{k}-o{offset}-{np.dtype(dt).name}", dict(
                max_relative_position=m, query_offset=offset, out=np.full((q, k), -7, dtype=dt))))
    return cases


# ------------------------------------------------------------------------ M-RoPE positions
# Valid prompts only: on an error the plan's outputs other than info are only partly written
# (the public API raises then), so they have no values to compare.

_IMAGE, _VIDEO = 151655, 151656
#: text tokens next to the ids: the other 32-bit half differing, the sign flipped, negated
_NEAR = [_IMAGE + (1 << 32), _VIDEO - (1 << 32), _IMAGE | (-1 << 63), _VIDEO | (-1 << 63), -_IMAGE,
         _IMAGE + 2, _VIDEO - 2, (1 << 63) - 1, -(1 << 63), 0, _IMAGE ^ (1 << 31), _VIDEO ^ (1 << 40),
         1 << 32, _IMAGE << 32, _VIDEO << 32, _IMAGE + 1 + (1 << 32), 3, 151654, 151657]


def _mrope_prompt(seed: int, rows, merge: int = 2, pad=(), holes=()) -> dict:
    """The plan's inputs of a batch: each row a list of items, ``n`` (that many text tokens),
    ``("i", (t, h, w))`` (an image run) or ``("v", (t, h, w), times)`` (a video run, its
    frames' time offsets), ``("x", n, token)`` (``n`` more vision tokens) or ``("t", tokens)``
    (these text tokens); ``pad[b]`` masked tokens before row ``b`` (image-token ids: a
    masked token is never read), ``holes`` masked ``(row, index)`` within the rows."""
    r = np.random.default_rng(seed)
    images, videos, times, lines = [], [], [], []
    for items in rows:
        line = []
        for item in items:
            if isinstance(item, int):
                line += r.integers(0, 151000, item).tolist()
                continue
            if item[0] == "x":  # vision tokens of no grid (a hole drops one of them)
                line += [item[2]] * item[1]
                continue
            if item[0] == "t":  # these text tokens
                line += list(item[1])
                continue
            t, h, w = item[1]
            n = t * (h // merge) * (w // merge)
            if item[0] == "i":
                images.append(item[1])
                line += [_IMAGE] * n
            else:
                videos.append(item[1])
                times += list(item[2])
                line += [_VIDEO] * n
        lines.append(line)
    pad = list(pad) + [0] * (len(rows) - len(pad))
    seq = max(len(line) + p for line, p in zip(lines, pad))
    ids = np.zeros((len(rows), seq), dtype=np.int64)
    mask = np.zeros((len(rows), seq), dtype=bool)
    for b, line in enumerate(lines):
        ids[b, :seq - len(line)] = _IMAGE
        ids[b, seq - len(line):] = line
        mask[b, seq - len(line):] = True
    for b, k in holes:
        mask[b, seq - len(lines[b]) + k] = False
    n_rows = mask.sum(1).astype(np.int64)
    columns = np.zeros(0, np.int64) if mask.all() else np.flatnonzero(mask).astype(np.int64)
    images = np.array(images, dtype=np.int64).reshape(-1, 3)
    videos = np.array(videos, dtype=np.int64).reshape(-1, 3)
    n_frames = int(images[:, 0].sum() + videos[:, 0].sum())
    return dict(ids=ids.reshape(-1), columns=columns, n_rows=n_rows, image_token_id=_IMAGE,
                video_token_id=_VIDEO, images=images, videos=videos, merge=merge,
                video_times=np.array(times, dtype=np.int64),
                segments=np.full((2 * (len(images) + len(videos)) + len(rows), 6), -1, np.int64),
                temporal=np.full(n_frames, -1, np.int64), deltas=np.full(len(rows), -1, np.int64),
                info=np.full(4, -1, np.int64))


def _mrope_prompts() -> list[tuple[str, dict]]:
    frames = [item for k in range(3) for item in (2, ("v", (1, 4, 4), [0]))]  # Qwen3-VL: a run per frame
    big = [3000, ("i", (1, 36, 52)), 700, ("v", (4, 36, 52), [0, 1, 2, 3]), 11] * 8  # 2 x 48408 tokens
    return [
        ("text", _mrope_prompt(1, [[37]])),
        ("text-batch2-padded", _mrope_prompt(2, [[5], [9]], pad=(4,), holes=((1, 3),))),
        ("images", _mrope_prompt(3, [[("i", (1, 4, 6)), 3, ("i", (1, 2, 2)), 5, ("i", (2, 4, 4)), 2]])),
        ("image-then-video", _mrope_prompt(4, [[4, ("i", (1, 6, 4)), ("v", (2, 2, 4), [0, 7]), 1]])),
        ("videos-qwen25-times", _mrope_prompt(5, [[2, ("v", (3, 4, 4), [0, 50, 100]), 3,
                                                   ("v", (2, 2, 6), [0, 25]), 4]])),
        ("qwen3-frames", _mrope_prompt(6, [frames + [3]])),
        ("merge1", _mrope_prompt(7, [[1, ("i", (1, 3, 5)), 2]], merge=1)),
        # text tokens that share a 32-bit half (or all bits but the sign) with an id, at every
        # place of a block of 16, and runs of every length around 16 and 32
        ("near-ids", _mrope_prompt(12, [[("t", _NEAR * 3), ("i", (1, 8, 8)), ("t", _NEAR[5:] + _NEAR[:5]), 17,
                                          ("v", (1, 2, 30), [0]), ("t", _NEAR[::-1]), ("i", (1, 2, 32)),
                                          ("v", (1, 2, 34), [0]), 15, ("i", (1, 2, 2)), 1]])),
        ("batch3", _mrope_prompt(8, [[3, ("i", (1, 4, 4)), 2], [6], [("v", (2, 4, 2), [0, 1]), 1]])),
        ("left-padding", _mrope_prompt(9, [[3, ("i", (1, 4, 4)), 2], [("i", (1, 2, 4)), 4], [7]],
                                       pad=(0, 5, 9))),
        # a hole inside an image run: its tokens are not adjacent columns (gathered)
        ("holes", _mrope_prompt(10, [[3, ("i", (1, 4, 4)), ("x", 1, _IMAGE), 6], [2, ("v", (2, 4, 4), [0, 2]), 3]],
                                pad=(2,), holes=((0, 1), (0, 5), (1, 11)))),
        ("parallel-size", _mrope_prompt(11, [big, big[:-1] + [5]], pad=(0, 6), holes=((1, 10),))),
    ]


def mrope_plan() -> list[Case]:
    return [Case(label, arguments) for label, arguments in _mrope_prompts()]


def mrope_fill() -> list[Case]:
    from ._mrope_python import mrope_plan as plan  # the segments the reference lays out

    cases = []
    for label, a in _mrope_prompts():
        plan(**a)
        assert a["info"][1] == 0, label
        cases.append(Case(label, dict(
            segments=a["segments"][:int(a["info"][0])].copy(), temporal=a["temporal"], columns=a["columns"],
            out=np.full((3, a["ids"].shape[0]), -1, np.int64))))
    return cases


# ------------------------------------------------------------------------ calendar fields

#: ``(per_second, tick_seconds)`` of every unit, and the int64 ticks it allows (a week's
#: days must fit int64)
_CAL_UNITS = {"W": (1, 604800), "D": (1, 86400), "h": (1, 3600), "m": (1, 60), "s": (1, 1),
              "ms": (10**3, 1), "us": (10**6, 1), "ns": (10**9, 1), "ps": (10**12, 1),
              "fs": (10**15, 1), "as": (10**18, 1)}


def _calendar_ticks(unit: str, per_second: int, tick_seconds: int) -> np.ndarray:
    """Leap days, year ends (ISO weeks 52/53 and week 1 of the next year), 1900/2000/2400,
    days before 1970, the extremes the unit allows, random ticks of every size."""
    top = (2**63 - 1) // 7 if unit == "W" else 2**63 - 1
    days = [0, -1, 1, 58, 59, 60, -365, -366, 10956, 10957, 11016, 11017, 11322, -25508, -25509,
            -25568, -25569, -135140, 13149, 13150, 16435, 16436, 16442, 16799, 16800, 20088,
            -719162, -719163, 157795, 2932896, -12219292]
    ticks = []
    for d in days:  # the day's first and last tick, where the unit has them
        s0 = d * 86400
        if per_second > 1:
            if abs(s0) < 2**62 // per_second:
                ticks += [s0 * per_second, (s0 + 86400) * per_second - 1]
        else:
            first = s0 // tick_seconds if tick_seconds < 604800 else d // 7
            ticks += [first, (s0 + 86399) // tick_seconds if tick_seconds < 604800 else d // 7 + 1]
    r = np.random.default_rng(len(unit) + tick_seconds + per_second % 97)
    rand = (r.uniform(-1, 1, 40) * 2.0 ** r.uniform(0, 62, 40)).astype(np.int64)
    ticks += rand.tolist() + [top, -top, top - 1, -top + 1, -(2**63) if unit != "W" else -top, 1, -2]
    return np.array([t for t in ticks if -top - (unit != "W") <= t <= top], dtype=np.int64)


def calendar_fields() -> list[Case]:
    cases = []
    all_fields = np.arange(8, dtype=np.int64)
    for unit, (per_second, tick_seconds) in _CAL_UNITS.items():
        for dt in (np.int64, np.int32):
            ticks = _calendar_ticks(unit, per_second, tick_seconds)
            cases.append(Case(f"{unit}-{np.dtype(dt).name}", dict(
                ticks=ticks, per_second=per_second, tick_seconds=tick_seconds, fields=all_fields.copy(),
                offsets=np.zeros(8, np.int64) if dt == np.int64 else np.array([0, 60, -5, 1 << 20, -(1 << 20), 7, -1, 3], np.int64),
                out=np.full((ticks.size, 8), -7, dtype=dt))))
    hourly = np.arange(-40000, 40000, 7, dtype=np.int64) * 3600 + 1800  # on threads
    cases.append(Case("s-gluonts-hourly-order", dict(
        ticks=hourly, per_second=1, tick_seconds=1, fields=np.array([2, 3, 4, 5], dtype=np.int64),
        offsets=np.array([0, 24, 30, 61], dtype=np.int64), out=np.full((hourly.size, 4), -7, dtype=np.int32))))
    seconds = np.arange(-200_000, 200_000, 997, dtype=np.int64)  # runs of one day, across midnights
    cases.append(Case("s-runs-of-days", dict(
        ticks=seconds, per_second=1, tick_seconds=1, fields=np.arange(8, dtype=np.int64)[::-1].copy(),
        offsets=np.zeros(8, np.int64), out=np.full((seconds.size, 8), -7, dtype=np.int64))))
    cases.append(Case("ns-one-field-twice", dict(
        ticks=np.arange(-50, 50, dtype=np.int64) * 86_399_999_999_999, per_second=10**9, tick_seconds=1,
        fields=np.array([7, 0, 7], dtype=np.int64), offsets=np.array([-1, 0, 2], dtype=np.int64),
        out=np.full((100, 3), -7, dtype=np.int64))))
    cases.append(Case("empty", dict(ticks=np.zeros(0, np.int64), per_second=1, tick_seconds=86400,
                                    fields=all_fields.copy(), offsets=np.zeros(8, np.int64),
                                    out=np.zeros((0, 8), np.int32))))
    return cases


# ------------------------------------------------------ Fourier features, time encodings
# ticks near both int64 limits, before 1970, the exact quarter turns of daily seasonality at
# hourly ticks; periods on both kernel routes (exact residues below 2**62, split words above)

from fractions import Fraction as _Fraction  # noqa: E402

_INT64_TOP = 2**63 - 1
_NS, _US = _Fraction(1, 10**9), _Fraction(1, 10**6)


def _time_ticks(seed: int, n: int = 20) -> np.ndarray:
    edges = [0, 1, -1, 2, -2, 5, 6, 12, 18, 24, 2**31, -(2**31), 2**32 - 1, 2**32, -(2**32),
             2**62, -(2**62), _INT64_TOP, -_INT64_TOP - 1, _INT64_TOP - 1, -_INT64_TOP,
             1_704_067_200 * 10**9, -1_000_000_000 * 10**9, 1_700_000_000, 473_364]
    r = np.random.default_rng(seed)
    rand = (r.uniform(-1, 1, n) * 2.0 ** r.uniform(0, 62.9, n)).astype(np.int64)
    return np.array(edges + rand.tolist(), dtype=np.int64)


def _frequency(tick_seconds, unit_seconds, period: float) -> tuple[int, int]:
    """``(N, D)``: turns per tick of a period in a unit, exactly."""
    v = _Fraction(tick_seconds) / (_Fraction(unit_seconds) * _Fraction(period))
    return v.numerator, v.denominator


#: (label, tick seconds, period unit seconds, period)
_FOURIER_PERIODS = [
    ("ns-yearly", _NS, 86400, 365.25),
    ("ns-monthly", _NS, 86400, 30.5),
    ("ns-weekly", _NS, 86400, 7.0),
    ("ns-1/24", _NS, 86400, 1 / 24),
    ("h-daily", 3600, 86400, 1.0),
    ("s-1/24", 1, 86400, 1 / 24),
    ("D-yearly", 86400, 86400, 365.25),
    ("us-gregorian", _US, 86400, 365.2425),
    ("s-odd", 1, 3600, 0.1),
    ("ns-1e30-days", _NS, 86400, 1e30),  # tiny phases: sines of 1e-44 (float32 subnormals)
]


def fourier_ticks() -> list[Case]:
    cases = []
    for i, (label, tick, unit, period) in enumerate(_FOURIER_PERIODS):
        num, den = _frequency(tick, unit, period)
        ticks = _time_ticks(i)
        for order, dt in ((1, np.float32), (3, np.float64), (50 if i % 3 == 0 else 4, np.float32)):
            cases.append(Case(f"{label}-o{order}-{np.dtype(dt).name}", dict(
                ticks=ticks.copy(), numerator=num, denominator=den, order=order,
                out=_sentinel((ticks.size, 2 * order), dt))))
    hourly = np.arange(-1400, 1400, dtype=np.int64) * 3600 * 10**9 + 1_704_067_200 * 10**9  # on threads
    num, den = _frequency(_NS, 86400, 1.0)
    for dt in (np.float32, np.float64):
        cases.append(Case(f"ns-hourly-daily-o6-threads-{np.dtype(dt).name}", dict(
            ticks=hourly.copy(), numerator=num, denominator=den, order=6,
            out=_sentinel((hourly.size, 12), dt))))
    cases.append(Case("empty", dict(ticks=np.zeros(0, np.int64), numerator=1, denominator=7, order=2,
                                    out=np.zeros((0, 4), np.float64))))
    return cases


def time_cos() -> list[Case]:
    sets = {
        "tgn100": tuple((1 / 10 ** np.linspace(0, 9, 100)).tolist()),
        "tgn7-f32": tuple(np.float32(1 / 10 ** np.linspace(0, 9, 7)).astype(np.float64).tolist()),
        "edges": (0.0, 1.0, 1e-30, 1e5, 3.0, 2.0**-40, 1024.0, -2.5),
    }
    scales = {"s": _Fraction(1), "ns": _NS, "D": _Fraction(86400), "float": _Fraction(1, 1 << 40)}
    cases = []
    for i, (name, freqs) in enumerate(sets.items()):
        for j, (sname, scale) in enumerate(scales.items()):
            ticks = _time_ticks(10 + 4 * i + j, 12 if name == "tgn100" else 20)
            dt = (np.float32, np.float64)[(i + j) % 2]
            cases.append(Case(f"{name}-{sname}-{np.dtype(dt).name}", dict(
                ticks=ticks, frequencies=freqs, scale=scale, out=_sentinel((ticks.size, len(freqs)), dt))))
    many = np.arange(-3000, 3000, dtype=np.int64) * 977  # on threads
    cases.append(Case("tgn7-threads", dict(ticks=many, frequencies=sets["tgn7-f32"], scale=_Fraction(1),
                                           out=_sentinel((many.size, 7), np.float32))))
    cases.append(Case("empty", dict(ticks=np.zeros(0, np.int64), frequencies=(1.0,), scale=_Fraction(1),
                                    out=np.zeros((0, 1), np.float32))))
    return cases


def embedding_sum() -> list[Case]:
    cases = []
    r = np.random.default_rng(17)
    for dtype in (np.float32, np.float64):
        for k, d, n, rows in ((1, 3, 5, 4), (4, 8, 40, 32), (5, 7, 33, 60), (2, 512, 300, 32), (3, 5, 9, 6),
                              (6, 9, 11, 7), (7, 4, 13, 60), (9, 17, 8, 5)):
            table = r.standard_normal((rows, d)).astype(dtype)
            table[0, :3] = [0.0, -0.0, 1e-30]
            if k == 2:  # infinities and NaN: IEEE sums, the same on every backend
                big = 3e38 if dtype == np.float32 else 1.7e308
                table[1, :4] = [np.inf, -np.inf, np.nan, big]
                table[2, :4] = [-np.inf, 1.0, 0.0, big]
            indices = r.integers(0, rows, (n, k)).astype(np.int64)
            indices[:3] = np.arange(3)[:, None] % rows
            cases.append(Case(f"{np.dtype(dtype).name}-k{k}-d{d}-n{n}", dict(
                table=table, indices=indices, out=_sentinel((n, d), dtype))))
    big = r.standard_normal((32, 512)).astype(np.float32)
    idx = np.stack([r.integers(0, n, 3072) for n in (24, 7, 32, 13)], axis=1).astype(np.int64)
    cases.append(Case("informer-3072x512-on-threads", dict(table=big, indices=idx,
                                                          out=_sentinel((3072, 512), np.float32))))
    cases.append(Case("empty", dict(table=big[:2].copy(), indices=np.zeros((0, 2), np.int64),
                                    out=np.zeros((0, 512), np.float32))))
    return cases


CASES: dict[str, Callable[[], list[Case]]] = {
    fn.__name__: fn
    for fn in (sinusoid_forward, sinusoid_range, rope_cos_sin, rope_table, rope_apply, rope_apply_table, rope_xpos_table, sincos_rows,
               sincos_real, grid_gather, axial_gather, add_rows, narrow16, alibi_bias, sandwich_bias, t5_bucket,
               t5_bucket_matrix, mrope_plan, mrope_fill, calendar_fields, embedding_sum,
               deberta_bucket, deberta_bucket_matrix, shaw_matrix, fourier_ticks, time_cos)
}
