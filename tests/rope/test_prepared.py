"""``Rotary``'s prepared calls: a plainly valid call goes straight to the kernels.

A Rotary resolves its configuration once; a call whose arrays and positions are plainly
valid (exact float32 ndarrays, C-contiguous and writable, integer positions) is checked in a
few steps and rotates through the backend's kernel on a table of cos/sin doubles kept for
the positions of recent small calls.  Everything else takes the full path, which names
what is wrong.  Here:

* every prepared result has the bits of the backend's own walk (``fastpe.rope._core``'s
  ``*_from_inv_freq`` functions, given the Rotary's frequencies at the call's length), of
  the module functions, and -- small cases -- of the exact ``python`` reference: drawn
  positions (0, 2**32 - 1, huge, repeated), every rope type, both layouts, ``(seq,)`` and
  ``(batch, seq)`` positions, offsets, ``(tokens, heads, d)`` and ``(batch, heads, seq, d)``
  arrays, every position dtype, strided position views, repeated calls (the kept tables);
* caches (``cos_sin``) in float32 and float64 from the kept tables are the kernels' bits;
* refusals keep their messages and touch nothing: aliasing q and k, positions sharing q's
  memory, strided or read-only arrays, bad positions, offsets and lengths;
* the kept tables are per backend and per length key.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastpe import _backends, rope
from fastpe.rope import Rotary, _rotary
from fastpe.rope._core import apply_from_inv_freq, apply_qk_from_inv_freq, cos_sin_from_inv_freq
from support.cli import same_bits
from support.inputs import LLAMA3, longrope


#: (head_dim 32) one configuration per rule: every rope_type Rotary takes
CONFIGS = {
    "default": {},
    "partial": {"base": 5e5, "rotary_dim": 16},
    "linear": {"scaling": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}},
    "dynamic": {"scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 16},
    "yarn": {"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}, "base": 1e4},
    "llama3": {"scaling": LLAMA3, "base": 5e5},
    "longrope": {"scaling": longrope(16), "max_position_embeddings": 64},
    "proportional": {"scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 1.0}},
}
HEAD_DIM = 32
FAST = [name for name in ("numba", "cython") if name in _backends.available_backends()]
ALL = _backends.available_backends()

positions_values = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 2**31, 2**32 - 2, 2**32 - 1]),
                             st.integers(2**32 - 64, 2**32 - 1), st.integers(0, 70))


def _reference(rotary, q, k, positions, offset, seq_len, backend):
    """The backend's own walk at the Rotary's frequencies for the call's length."""
    if positions is None:
        n_seq = q.shape[0] if q.ndim == 3 else q.shape[2]
        flat = np.arange(offset, offset + n_seq, dtype=np.uint64)
    else:
        flat = np.asarray(positions).reshape(-1)
    length = int(flat.max()) + 1 if seq_len is None else seq_len
    inv, af = rotary.inv_freq_at(length), rotary.attention_factor_at(length)
    kw = dict(layout=rotary.layout, backend=backend)
    if positions is None:
        kw["offset"] = offset
    if k is None:
        return apply_from_inv_freq(q, positions, inv, af, **kw), None
    return apply_qk_from_inv_freq(q, k, positions, inv, af, **kw)


def _config(name):
    return pytest.param(name, id=name)


@pytest.mark.any_backend
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(CONFIGS)), layout=st.sampled_from(["neox", "gptj", "NeoX", "GPTJ"]),
       form=st.sampled_from(["tokens", "bhsd-seq", "bhsd-grid", "offset", "offset3"]),
       n_seq=st.integers(1, 5), n_batch=st.integers(1, 3), hq=st.integers(1, 4), hk=st.integers(0, 3),
       values=st.lists(positions_values, min_size=15, max_size=15),
       pos_dtype=st.sampled_from(["int64", "uint32", "int32", "uint64", "int16"]),
       seq_len=st.one_of(st.none(), st.integers(0, 2**32)), data=st.data())
def test_prepared_rotation_is_the_kernels_walk(name, layout, form, n_seq, n_batch, hq, hk, values, pos_dtype, seq_len,
                                               data):
    """Drawn calls, each made twice (the second from the kept table), give the bits of the
    backend's own walk and of the module function, on every compiled backend."""
    rotary = Rotary(HEAD_DIM, layout=layout, **CONFIGS[name])
    rng = np.random.default_rng(len(values) + n_seq)
    if form in ("tokens", "offset3"):
        q0 = rng.standard_normal((n_seq * n_batch, hq, HEAD_DIM)).astype(np.float32)
        k0 = rng.standard_normal((n_seq * n_batch, hk, HEAD_DIM)).astype(np.float32)
        n_rows = n_seq * n_batch
    else:
        q0 = rng.standard_normal((n_batch, hq, n_seq, HEAD_DIM)).astype(np.float32)
        k0 = rng.standard_normal((n_batch, hk, n_seq, HEAD_DIM)).astype(np.float32)
        n_rows = n_seq
    offset = 0
    if form.startswith("offset"):
        positions = None
        offset = data.draw(st.integers(0, 2**32 - n_rows) | st.just(2**32 - n_rows), label="offset")
    elif form == "bhsd-grid":
        positions = np.array(values[:n_batch * n_seq], dtype=np.uint64).reshape(n_batch, n_seq)
    else:
        positions = np.array(values[:n_rows], dtype=np.uint64)
    if positions is not None:
        info = np.iinfo(pos_dtype)
        if positions.max() > info.max:
            positions = positions % (info.max + 1)
        positions = positions.astype(pos_dtype)
        if data.draw(st.booleans(), label="strided positions"):
            wide = np.zeros((*positions.shape[:-1], 2 * positions.shape[-1]), dtype=positions.dtype)
            wide[..., ::2] = positions
            positions = wide[..., ::2]  # a strided view of the same values
    for backend in FAST:
        want_q, want_k = _reference(rotary, q0.copy(), k0.copy(), positions, offset, seq_len, backend)
        want_x, _ = _reference(rotary, q0.copy(), None, positions, offset, seq_len, backend)
        for _round in range(2):
            q, k = q0.copy(), k0.copy()
            assert rotary.apply_qk_(q, k, positions, offset=offset, seq_len=seq_len, backend=backend) == (q, k)
            assert same_bits(q, want_q) and same_bits(k, want_k)
            x = q0.copy()
            assert rotary.apply_(x, positions, offset=offset, seq_len=seq_len, backend=backend) is x
            assert same_bits(x, want_x)
        q, k = q0.copy(), k0.copy()
        rope.apply_qk_(q, k, positions, offset=offset, seq_len=seq_len, layout=layout, backend=backend,
                       **CONFIGS[name])
        assert same_bits(q, want_q) and same_bits(k, want_k)


@pytest.mark.any_backend
@pytest.mark.parametrize("name", [_config(n) for n in CONFIGS])
@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_prepared_rotation_is_exact_on_small_cases(name, layout):
    """A decoding step's call -- one position, queries and keys -- against the exact
    ``python`` reference, at positions 0, 1, 2**31 and 2**32 - 1."""
    rotary = Rotary(HEAD_DIM, layout=layout, **CONFIGS[name])
    rng = np.random.default_rng(7)
    q0 = rng.standard_normal((1, 3, 1, HEAD_DIM)).astype(np.float32)
    k0 = rng.standard_normal((1, 2, 1, HEAD_DIM)).astype(np.float32)
    for p in (0, 1, 2**31, 2**32 - 1):
        wq, wk = q0.copy(), k0.copy()
        rotary.apply_qk_(wq, wk, np.array([p]), backend="python")
        for backend in FAST:
            for positions, offset in ((np.array([p]), 0), (np.array([[p]]), 0), (None, p)):
                q, k = q0.copy(), k0.copy()
                rotary.apply_qk_(q, k, positions, offset=offset, backend=backend)
                assert same_bits(q, wq) and same_bits(k, wk), (backend, p, positions)


@pytest.mark.any_backend
@pytest.mark.parametrize("name", [_config(n) for n in ("default", "dynamic", "longrope")])
@pytest.mark.parametrize("form", ["grid", "seq", "offset", "tokens"])
def test_calls_the_backends_walk_takes(name, form):
    """The calls the prepared path hands to the backend's own rope_apply -- the python
    backend's, and the compiled ones' above the direct kernel's size -- in each form of
    positions, (batch, seq) grids among them: the bits of the full path."""
    rotary = Rotary(HEAD_DIM, **CONFIGS[name])
    rng = np.random.default_rng(11)
    sizes = [("python", (2, 1, 2)), *((b, (2, 8, 70)) for b in FAST)]  # (batch, heads, seq)
    for backend, (n_batch, heads, n_seq) in sizes:
        assert backend == "python" or n_batch * n_seq * heads * 2 * HEAD_DIM // 2 >= _rotary._DIRECT_PAIRS
        shape = (n_batch * n_seq, heads, HEAD_DIM) if form == "tokens" else (n_batch, heads, n_seq, HEAD_DIM)
        q0 = rng.standard_normal(shape).astype(np.float32)
        k0 = rng.standard_normal(shape).astype(np.float32)
        offset, positions = 0, None
        if form == "grid":
            positions = rng.integers(0, 2**32, (n_batch, n_seq))
            positions[0, 0] = 2**32 - 1
        elif form == "seq":
            positions = rng.integers(0, 100, n_seq)
        elif form == "tokens":
            positions = rng.integers(0, 100, n_batch * n_seq)
        else:
            offset = 2**32 - n_seq
        want_q, want_k = _reference(rotary, q0.copy(), k0.copy(), positions, offset, None, backend)
        q, k = q0.copy(), k0.copy()
        rotary.apply_qk_(q, k, positions, offset=offset, backend=backend)
        assert same_bits(q, want_q) and same_bits(k, want_k), backend
        x = q0.copy()
        rotary.apply_(x, positions, offset=offset, backend=backend)
        assert same_bits(x, _reference(rotary, q0.copy(), None, positions, offset, None, backend)[0]), backend


@pytest.mark.any_backend
@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(CONFIGS)), layout=st.sampled_from(["neox", "gptj"]),
       dtype=st.sampled_from([None, "float32", "float64", np.float32, np.float64, np.dtype("float32"),
                              np.dtype("float64"), "float16", "bfloat16"]),
       values=st.lists(positions_values, min_size=1, max_size=6), grid=st.booleans(),
       pos_dtype=st.sampled_from(["int64", "uint32", "int32"]), seq_len=st.one_of(st.none(), st.integers(0, 2**32)))
def test_prepared_caches_are_the_kernels(name, layout, dtype, values, grid, pos_dtype, seq_len):
    """``cos_sin`` of a few positions, from the kept table: the float32 kernel's bits (or,
    float64, the doubles), in the shape of the positions, twice over; float16 and bfloat16
    (the full path's correctly rounded values) alike."""
    rotary = Rotary(HEAD_DIM, layout=layout, **CONFIGS[name])
    positions = np.array(values, dtype=np.uint64) % (np.iinfo(pos_dtype).max + 1)
    positions = positions.astype(pos_dtype)
    if grid:
        positions = positions[None]
    length = int(positions.max()) + 1 if seq_len is None else seq_len
    inv, af = rotary.inv_freq_at(length), rotary.attention_factor_at(length)
    from fastpe import _dtypes

    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    for backend in FAST:
        want_dtype = _dtypes.resolve("float32" if dtype is None else dtype)  # float16, bfloat16: the full path
        out = tuple(np.empty((positions.size, rotary.rotary_dim), dtype=want_dtype) for _ in range(2))
        want = cos_sin_from_inv_freq(positions.reshape(-1), inv, af, layout=layout, out_cos=out[0], out_sin=out[1],
                                     backend=backend)
        for _round in range(2):
            cos, sin = rotary.cos_sin(positions, dtype=dtype, seq_len=seq_len, backend=backend)
            assert cos.shape == sin.shape == (*positions.shape, rotary.rotary_dim)
            assert cos.dtype == sin.dtype == want_dtype
            assert cos.flags.c_contiguous and cos.flags.writeable and not np.may_share_memory(cos, sin)
            assert same_bits(cos.reshape(want[0].shape), want[0]) and same_bits(sin.reshape(want[1].shape), want[1])
        if not grid:
            mod = rope.cos_sin(positions, HEAD_DIM, layout=layout, dtype=dtype, seq_len=seq_len, backend=backend,
                               **CONFIGS[name])
            assert same_bits(mod[0], cos) and same_bits(mod[1], sin)


def test_kept_caches_are_fresh_arrays():
    """Each cos_sin call returns new arrays: writing one never reaches the next call's."""
    rotary = Rotary(HEAD_DIM)
    a, _ = rotary.cos_sin(np.array([5]))
    want = a.copy()
    a[...] = 7
    b, _ = rotary.cos_sin(np.array([5]))
    assert same_bits(b, want)


# ========================================================================= refusals


def _pair():
    rng = np.random.default_rng(1)
    return (rng.standard_normal((1, 4, 2, HEAD_DIM)).astype(np.float32),
            rng.standard_normal((1, 2, 2, HEAD_DIM)).astype(np.float32))


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", ALL)
def test_refusals_keep_their_messages_and_touch_nothing(backend):
    rotary = Rotary(HEAD_DIM)
    q, k = _pair()
    q0, k0 = q.copy(), k.copy()
    buf = np.zeros((1, 6, 2, HEAD_DIM), dtype=np.float32)
    cases = [
        ((q[..., ::2].copy()[..., :0], k, [0, 1]), ValueError, "head_dim"),
        ((np.zeros((1, 4, 4, HEAD_DIM), np.float32)[:, :, ::2], k, [0, 1]), ValueError, "must be C-contiguous"),
        ((buf.reshape(-1)[:q.size].reshape(q.shape), buf.reshape(-1)[q.size - 64:q.size - 64 + k.size].reshape(k.shape),
          np.array([0, 1])), ValueError, "k must not share memory with q"),
        ((q, q[:, :2].copy(), np.array([2**32, 1])), ValueError, "positions must be < 2\\*\\*32"),
        ((q, k, np.array([-1, 1])), ValueError, "positions must be >= 0"),
        ((q, k, np.array([0.5, 1.0])), ValueError, "whole numbers"),
        ((q, k, np.array([True, False])), TypeError, "booleans"),
        ((q, k, np.array([1, 2, 3])), ValueError, "positions must have shape"),
        ((q.astype(np.float64), k, np.array([0, 1])), TypeError, "q must have dtype float32"),
        ((q, k.astype(">f4"), np.array([0, 1])), TypeError, "native byte order"),
        ((q, k[:, :, :1].copy(), np.array([0, 1])), ValueError, "k must have the seq of q"),
    ]
    ro = q.copy()
    ro.flags.writeable = False
    cases.append(((ro, k, np.array([0, 1])), ValueError, "read-only"))
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            rotary.apply_qk_(*args, backend=backend)
    assert same_bits(q, q0) and same_bits(k, k0)
    # positions in q's own memory
    mem = np.zeros((1, 4, 2, HEAD_DIM), dtype=np.float32)
    shared = mem.reshape(-1).view(np.int32)[:2]
    with pytest.raises(ValueError, match="must not share memory with positions"):
        rotary.apply_qk_(mem, k.copy(), shared, backend=backend)
    assert not mem.any()
    # offsets and lengths
    for kwargs, error, match in (({"offset": 2**32 - 1}, ValueError, "offset \\+ seq must be <= 2\\*\\*32"),
                                 ({"offset": -1}, ValueError, "offset"), ({"offset": 1.5}, TypeError, "offset"),
                                 ({"seq_len": -1}, ValueError, "seq_len"),
                                 ({"seq_len": 2**32 + 1}, ValueError, "seq_len"),
                                 ({"offset": 3, "positions": np.array([0, 1])}, ValueError, "not both")):
        with pytest.raises(error, match=match):
            rotary.apply_qk_(q, k, **kwargs, backend=backend)
    assert same_bits(q, q0) and same_bits(k, k0)
    with pytest.raises(ValueError, match="is not a fastpe backend"):
        rotary.apply_qk_(q, k, np.array([0, 1]), backend="nope")
    with pytest.raises(TypeError, match="backend must be a string"):
        rotary.apply_qk_(q, k, np.array([0, 1]), backend=3)
    assert same_bits(q, q0) and same_bits(k, k0)
    with pytest.raises(ValueError, match="is not a fastpe backend"):
        rotary.cos_sin(np.array([0]), backend="nope")


# ===================================================================== the kept tables


@pytest.mark.any_backend
def test_tables_are_kept_per_backend_and_length():
    """One table per (backend, frequencies, positions): a dynamic rule's new length gets its
    own, and no backend reads another's (each computes its own, so the backends' agreement is
    never assumed).  The python backend's rotation takes its own walk, its caches a table."""
    rotary = Rotary(HEAD_DIM, **CONFIGS["dynamic"])
    q, k = _pair()
    for backend in ALL:
        rotary.apply_qk_(q.copy(), k.copy(), np.array([3, 4]), backend=backend)
    assert len(rotary._tables) == len(FAST)
    for backend in ALL:
        rotary.apply_qk_(q.copy(), k.copy(), np.array([3, 4]), seq_len=1000, backend=backend)
        rotary.cos_sin(np.array([3, 4]), seq_len=1000, backend=backend)
    assert len(rotary._tables) == 2 * len(FAST) + ("python" in ALL)
    for (module, key, _), table in rotary._tables.items():
        assert table.shape == (2, 2, HEAD_DIM // 2)
        assert key in (16, 1000)


def test_tables_stay_bounded():
    rotary = Rotary(HEAD_DIM)
    q, k = _pair()
    for p in range(_rotary._MAX_TABLES + 10):
        rotary.apply_qk_(q, k, offset=p)
    assert len(rotary._tables) <= _rotary._MAX_TABLES


def test_the_environment_picks_the_backend(monkeypatch):
    """``backend=None`` follows ``$FASTPE_BACKEND`` as it changes, as resolve does."""
    for name in ALL:
        monkeypatch.setenv(_backends.ENV_VAR, name)
        assert _rotary._module(None)[0] is _backends.resolve(None)[1]
    monkeypatch.delenv(_backends.ENV_VAR)
    assert _rotary._module(None)[0] is _backends.resolve(None)[1]
    monkeypatch.setenv(_backends.ENV_VAR, "bogus")
    assert _rotary._module(None) is None
    with pytest.raises(ValueError, match="FASTPE_BACKEND 'bogus' is not a fastpe backend"):
        Rotary(HEAD_DIM).apply_qk_(*_pair(), np.array([0, 1]))


# ================================================================= threads and fork


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", FAST)
def test_threads_share_one_rotary(backend, monkeypatch):
    """Eight threads rotating through one Rotary -- its kept tables filled, read and (kept
    small here) cleared under them -- each get the bits of the backend's own walk."""
    import threading

    monkeypatch.setattr(_rotary, "_MAX_TABLES", 5)
    rotary = Rotary(HEAD_DIM, **CONFIGS["llama3"])
    rng = np.random.default_rng(5)
    q0 = rng.standard_normal((1, 4, 1, HEAD_DIM)).astype(np.float32)
    k0 = rng.standard_normal((1, 2, 1, HEAD_DIM)).astype(np.float32)
    plist = [0, 1, 7, 2**31, 2**32 - 1, 12345, 99, 3]
    want = {p: _reference(rotary, q0.copy(), k0.copy(), np.array([p]), 0, None, backend) for p in plist}
    failures = []
    barrier = threading.Barrier(8)

    def work(i):
        try:
            barrier.wait()
            for n in range(300):
                p = plist[(i + n) % len(plist)]
                q, k = q0.copy(), k0.copy()
                rotary.apply_qk_(q, k, offset=p, backend=backend)
                if not (same_bits(q, want[p][0]) and same_bits(k, want[p][1])):
                    failures.append((i, p))
                    return
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, failures


@pytest.mark.any_backend
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
@pytest.mark.parametrize("backend", FAST)
def test_a_forked_child_rotates_from_the_kept_tables(backend):
    import os

    rotary = Rotary(HEAD_DIM)
    q0, k0 = _pair()
    want = _reference(rotary, q0.copy(), k0.copy(), np.array([5, 6]), 0, None, backend)
    rotary.apply_qk_(q0.copy(), k0.copy(), np.array([5, 6]), backend=backend)  # a kept table
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            q, k = q0.copy(), k0.copy()
            rotary.apply_qk_(q, k, np.array([5, 6]), backend=backend)
            code = 0 if same_bits(q, want[0]) and same_bits(k, want[1]) else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    got = os.read(read, 1)
    os.waitpid(pid, 0)
    assert got == b"\x00"


@pytest.mark.any_backend
@pytest.mark.parametrize("name", [_config(n) for n in ("default", "dynamic", "longrope", "yarn")])
def test_a_decoding_loop_reads_the_rows_computed_ahead(name):
    """A missing single position computes the next ones with it; a decoding loop (one
    position a step, by array and by offset, up to 2**32 - 1) then reads their rows: the
    bits of the backend's own walk at every step, and of cos_sin (float16 and bfloat16: the
    module function's)."""
    rotary = Rotary(HEAD_DIM, **CONFIGS[name])
    rng = np.random.default_rng(2)
    q0 = rng.standard_normal((1, 3, 1, HEAD_DIM)).astype(np.float32)
    k0 = rng.standard_normal((1, 2, 1, HEAD_DIM)).astype(np.float32)
    for backend in FAST:
        for start in (0, 2**32 - 20):
            for p in range(start, start + 20):
                want = _reference(rotary, q0.copy(), k0.copy(), np.array([p]), 0, None, backend)
                for positions, offset in ((np.array([p]), 0), (None, p)):
                    q, k = q0.copy(), k0.copy()
                    rotary.apply_qk_(q, k, positions, offset=offset, backend=backend)
                    assert same_bits(q, want[0]) and same_bits(k, want[1]), (backend, p)
                cos, sin = rotary.cos_sin(np.array([[p]]), backend=backend)
                length = p + 1
                wc, ws = cos_sin_from_inv_freq([p], rotary.inv_freq_at(length), rotary.attention_factor_at(length),
                                               backend=backend)
                assert same_bits(cos[0], wc) and same_bits(sin[0], ws)
                for dtype in ("float16", "bfloat16"):  # kept rows of the full path's, computed ahead too
                    cos, sin = rotary.cos_sin(np.array([[p]]), dtype=dtype, backend=backend)
                    wc, ws = rope.cos_sin(np.array([p]), HEAD_DIM, dtype=dtype, backend=backend, **CONFIGS[name])
                    assert cos.shape == (1, 1, rotary.rotary_dim) and cos.dtype == wc.dtype
                    assert same_bits(cos[0], wc) and same_bits(sin[0], ws), (backend, p, dtype)
    assert len(rotary._tables) <= max(_rotary._MAX_TABLES, _rotary._AHEAD)


@pytest.mark.any_backend
def test_without_a_direct_kernel_the_backends_walk_runs(monkeypatch):
    """Where a compiled backend hands out no rotation kernel, its rope_apply and
    rope_apply_table rotate: the same bits."""
    rotary = Rotary(HEAD_DIM)
    q0, k0 = _pair()
    want = {b: rotary.apply_qk_(q0.copy(), k0.copy(), np.array([3, 9]), backend=b) for b in FAST}
    back = {b: rotary.apply_qk_(q0.copy(), k0.copy(), np.array([3, 9]), backend=b, inverse=True) for b in FAST}
    moved = {b: rotary.rerotate_(k0.copy(), -5, backend=b) for b in FAST}
    for backend in FAST:
        monkeypatch.setattr(_backends.resolve(backend)[1], "rotation_kernel", lambda: None)
    monkeypatch.setattr(_rotary, "_RESOLVED", {})
    for backend in FAST:
        got = Rotary(HEAD_DIM).apply_qk_(q0.copy(), k0.copy(), np.array([3, 9]), backend=backend)
        assert same_bits(got[0], want[backend][0]) and same_bits(got[1], want[backend][1])
        got = Rotary(HEAD_DIM).apply_qk_(q0.copy(), k0.copy(), np.array([3, 9]), backend=backend, inverse=True)
        assert same_bits(got[0], back[backend][0]) and same_bits(got[1], back[backend][1])
        assert same_bits(Rotary(HEAD_DIM).rerotate_(k0.copy(), -5, backend=backend), moved[backend])
        assert _rotary._module(backend)[1] is None
