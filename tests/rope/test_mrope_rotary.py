"""M-RoPE inside Rotary (Qwen2-VL / Qwen2.5-VL chunked sections, Qwen3-VL interleaved), the
inverse rotation and the re-rotation of cached keys: against HF transformers' rotary
modules, against fastpe's own 1-D caches column by column, and against mpmath."""

import mpmath
import numpy as np
import pytest

from fastpe.rope import Rotary, mrope_positions

torch = pytest.importorskip("torch")

IMAGE = 151655
QWEN2 = {"type": "mrope", "mrope_section": [16, 24, 24], "rope_theta": 1e6}
QWEN3 = {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True, "rope_theta": 5e6}
BACKENDS = ("python", "numba", "cython")


def _prompt_positions(model="qwen2_vl"):
    ids = np.array([[1, 2, 151652] + [IMAGE] * 16 + [151653, 5, 6, 7],
                    [9, 151652] + [IMAGE] * 16 + [151653, 5, 6, 7, 8]])
    pos, _ = mrope_positions(ids, image_grid_thw=np.array([[1, 8, 8], [1, 8, 8]]), model=model)
    return pos


def _hf(kind):
    if kind == "qwen3":
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding, apply_rotary_pos_emb

        cfg = Qwen3VLTextConfig(hidden_size=256, num_attention_heads=2, head_dim=128, rope_parameters=dict(QWEN3))
        return Qwen3VLTextRotaryEmbedding(cfg), apply_rotary_pos_emb, QWEN3
    if kind == "qwen2_5":
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLTextConfig
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
            Qwen2_5_VLRotaryEmbedding, apply_rotary_pos_emb)

        cfg = Qwen2_5_VLTextConfig(hidden_size=256, num_attention_heads=2, rope_scaling=dict(QWEN2))
        return Qwen2_5_VLRotaryEmbedding(cfg), apply_rotary_pos_emb, QWEN2
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding, apply_rotary_pos_emb

    cfg = Qwen2VLTextConfig(hidden_size=256, num_attention_heads=2, rope_scaling=dict(QWEN2))
    return Qwen2VLRotaryEmbedding(cfg), apply_rotary_pos_emb, QWEN2


@pytest.mark.parametrize("kind", ["qwen2", "qwen2_5", "qwen3"])
def test_matches_hf_rotary_module_and_apply(kind):
    emb, apply, scaling = _hf(kind)
    pos = _prompt_positions("qwen3_vl" if kind == "qwen3" else "qwen2_vl")
    rotary = Rotary(128, scaling=scaling)
    c, s = emb(torch.zeros(1, 2, pos.shape[2], 128), torch.as_tensor(pos))
    cos, sin = rotary.cos_sin(pos)
    assert cos.shape == (2, pos.shape[2], 128)
    # HF computes p * inv_freq and cos in float32: its error at these positions is ~1e-6
    np.testing.assert_allclose(cos, c.numpy(), atol=3e-6, rtol=0)
    np.testing.assert_allclose(sin, s.numpy(), atol=3e-6, rtol=0)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, pos.shape[2], 128)).astype(np.float32)
    k = rng.standard_normal((2, 2, pos.shape[2], 128)).astype(np.float32)
    hq, hk = apply(torch.from_numpy(q), torch.from_numpy(k), c, s)
    rotary.apply_qk_(q, k, pos)
    np.testing.assert_allclose(q, hq.numpy(), atol=2e-5, rtol=0)
    np.testing.assert_allclose(k, hk.numpy(), atol=2e-5, rtol=0)


def _axes(section, interleaved):
    n = sum(section)
    if not interleaved:
        return [a for a in range(3) for _ in range(section[a])]
    out = []
    for j in range(n):
        a = j % 3
        out.append(a if a and j < 3 * section[a] else 0)
    return out


@pytest.mark.parametrize("scaling", [QWEN2, QWEN3, {"type": "mrope", "mrope_section": [2, 3, 3]}])
@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_cos_sin_is_each_axis_column_of_1d_caches(scaling, layout, dtype):
    section = scaling["mrope_section"]
    head = 2 * sum(section)
    rotary = Rotary(head, scaling=scaling, layout=layout)
    plain = Rotary(head, scaling={k: v for k, v in scaling.items() if not k.startswith("mrope")} | {"type": "default"},
                   layout=layout)
    rng = np.random.default_rng(1)
    pos = rng.integers(0, 2**32, size=(3, 2, 5), dtype=np.int64)
    cos, sin = rotary.cos_sin(pos, dtype=dtype)
    axes = _axes(section, scaling.get("mrope_interleaved", False))
    n = sum(section)
    for a in range(3):
        c1, s1 = plain.cos_sin(pos[a], dtype=dtype)
        for j in range(n):
            if axes[j] != a:
                continue
            cols = (j, j + n) if layout == "neox" else (2 * j, 2 * j + 1)
            for col in cols:
                assert np.array_equal(cos[..., col], c1[..., col])
                assert np.array_equal(sin[..., col], s1[..., col])


def test_cos_sin_against_mpmath():
    rotary = Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
    pos = np.array([[5, 2**32 - 1], [7, 123456789], [11, 3]])
    cos, _ = rotary.cos_sin(pos, dtype="float64")
    axes = _axes([2, 3, 3], False)
    mpmath.mp.prec = 200
    for t in range(2):
        for j in range(8):
            want = float(mpmath.cos(int(pos[axes[j], t]) * mpmath.mpf(float(rotary.inv_freq[j]))))
            assert abs(cos[t, j] - want) <= 2**-52


def test_out_and_positions_1d_2d_for_grid():
    rotary = Rotary(128, scaling=QWEN2)
    pos = _prompt_positions()[:, 0]
    out = (np.empty((pos.shape[1], 128), np.float32), np.empty((pos.shape[1], 128), np.float32))
    got = rotary.cos_sin(pos, out=out)
    assert got is out
    want = rotary.cos_sin(pos[:, None, :])
    assert np.array_equal(out[0], want[0][0]) and np.array_equal(out[1], want[1][0])


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_same_bits_and_tokens_layout(backend):
    rotary = Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
    rng = np.random.default_rng(2)
    pos = rng.integers(0, 1000, size=(3, 2, 6))
    x = rng.standard_normal((2, 3, 6, 16)).astype(np.float32)
    ref = x.copy()
    rotary.apply_(ref, pos, backend="numba")
    y = x.copy()
    rotary.apply_(y, pos, backend=backend)
    assert np.array_equal(y, ref)
    # (tokens, heads, d) with (3, tokens)
    t = x[0].transpose(1, 0, 2).copy()
    rotary.apply_(t, pos[:, 0], backend=backend)
    assert np.array_equal(t.transpose(1, 0, 2), ref[0])


def test_text_only_equals_plain_rope_and_offset():
    rotary = Rotary(128, scaling=QWEN2)
    plain = Rotary(128, base=1e6)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 7, 128)).astype(np.float32)
    a, b, c = x.copy(), x.copy(), x.copy()
    rotary.apply_(a, np.broadcast_to(np.arange(7), (3, 7)))
    plain.apply_(b)
    rotary.apply_(c)  # positions None: the offset's run on every axis
    assert np.array_equal(a, b) and np.array_equal(c, b)


def test_yarn_attention_factor_composes():
    sc = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
          "mrope_section": [16, 24, 24]}
    rotary = Rotary(128, scaling=sc)
    plain = Rotary(128, scaling={k: v for k, v in sc.items() if k != "mrope_section"})
    assert rotary.attention_factor == plain.attention_factor != 1
    pos = _prompt_positions()
    cos, _ = rotary.cos_sin(pos)
    c0, _ = plain.cos_sin(pos[0])
    assert np.array_equal(cos[..., :16], c0[..., :16])


def test_from_config_layouts():
    q2 = {"model_type": "qwen2_vl", "hidden_size": 3584, "num_attention_heads": 28, "rope_theta": 1e6,
          "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}
    q25 = {"model_type": "qwen2_5_vl", "text_config": {
        "model_type": "qwen2_5_vl_text", "hidden_size": 2048, "num_attention_heads": 16, "rope_theta": 1e6,
        "rope_parameters": {"rope_type": "default", "mrope_section": [16, 24, 24]}}}
    q3 = {"model_type": "qwen3_vl", "text_config": {
        "model_type": "qwen3_vl_text", "hidden_size": 2560, "num_attention_heads": 32, "head_dim": 128,
        "rope_theta": 5e6, "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                                            "rope_type": "default"}}}
    r2, r25, r3 = (Rotary.from_config(c) for c in (q2, q25, q3))
    assert r2.mrope_section == r25.mrope_section == (16, 24, 24) and not r2.mrope_interleaved
    assert r2.head_dim == 128 and r2.base == 1e6
    assert r3.mrope_section == (24, 20, 20) and r3.mrope_interleaved and r3.base == 5e6
    # a Qwen3-VL dict without its section takes the model's, as HF's module does
    del q3["text_config"]["rope_scaling"]["mrope_section"]
    assert Rotary.from_config(q3).mrope_section == (24, 20, 20)


@pytest.mark.any_backend
@pytest.mark.parametrize("bad, err, word", [
    ({"type": "mrope"}, ValueError, "mrope_section"),
    ({"type": "mrope", "mrope_section": [16, 24, 23]}, ValueError, "sum"),
    ({"mrope_section": [16, 24, -1, ]}, ValueError, "mrope_section"),
    ({"mrope_section": [16.0, 24, 24]}, TypeError, "mrope_section"),
    ({"mrope_section": [16, 48]}, ValueError, "mrope_section"),
    ({"mrope_section": "16,24,24"}, TypeError, "mrope_section"),
    ({"mrope_section": [64, 0, 0], "mrope_interleaved": 1}, TypeError, "mrope_interleaved"),
    ({"mrope_interleaved": True}, ValueError, "mrope_section"),
    ({"mrope_section": [4, 30, 30], "mrope_interleaved": True}, ValueError, "interleaved"),
])
def test_bad_sections_refused(bad, err, word):
    with pytest.raises(err, match=word):
        Rotary(128, scaling=bad)


@pytest.mark.any_backend
def test_positions_axis_refused_nothing_modified():
    rotary = Rotary(128, scaling=QWEN2)
    plain = Rotary(128)
    x = np.ones((1, 2, 4, 128), np.float32)
    for bad in (np.arange(4), np.zeros((2, 4), int), np.zeros((4, 1, 4), int)):
        with pytest.raises(ValueError, match="leading axis of 3"):
            rotary.apply_(x, bad)
        with pytest.raises(ValueError, match="leading axis of 3"):
            rotary.cos_sin(bad)
    with pytest.raises(ValueError, match="mrope_section"):
        plain.apply_(x, np.zeros((3, 1, 4), int))
    with pytest.raises(ValueError, match="mrope_section"):
        plain.cos_sin(np.zeros((3, 1, 4), int))
    with pytest.raises(ValueError, match="positions"):
        rotary.apply_(x, np.full((3, 4), -1))
    assert (x == 1).all()


def test_yarn_mrope_matches_hf():
    """YaRN's frequencies and attention factor under M-RoPE's section selection, as HF's
    Qwen2-VL module (and vLLM's MRotaryEmbedding) compose them."""
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    sc = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192,
          "mrope_section": [16, 24, 24], "rope_theta": 1e6}
    emb = Qwen2VLRotaryEmbedding(Qwen2VLTextConfig(hidden_size=256, num_attention_heads=2, rope_scaling=dict(sc),
                                                   max_position_embeddings=32768))
    rotary = Rotary(128, scaling=sc, max_position_embeddings=32768)
    assert rotary.attention_factor == pytest.approx(emb.attention_scaling, rel=1e-15)
    pos = _prompt_positions()
    c, s = emb(torch.zeros(1), torch.as_tensor(pos))
    cos, sin = rotary.cos_sin(pos)
    np.testing.assert_allclose(cos, c.numpy(), atol=4e-6, rtol=0)
    np.testing.assert_allclose(sin, s.numpy(), atol=4e-6, rtol=0)


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inverse", [False, True])
def test_small_calls_same_bits_as_the_full_checks(backend, inverse):
    """A few plainly valid positions go straight to the kernel on their kept table: the bits
    of the full path (positions as a list take it), first call and kept table alike."""
    rotary = Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
    rng = np.random.default_rng(4)
    for shape, pos_shape in (((2, 3, 1, 16), (3, 2, 1)), ((2, 3, 4, 16), (3, 4)), ((4, 3, 16), (3, 4))):
        pos = rng.integers(0, 2**32, size=pos_shape).astype(np.uint32)
        q, k = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
        want_q, want_k = q.copy(), k.copy()
        rotary.apply_qk_(want_q, want_k, pos.tolist(), backend=backend, inverse=inverse)
        for _ in range(2):
            a, b = q.copy(), k.copy()
            rotary.apply_qk_(a, b, pos, backend=backend, inverse=inverse)
            assert np.array_equal(a, want_q) and np.array_equal(b, want_k)
            x = q.copy()
            rotary.apply_(x, pos, backend=backend, inverse=inverse)
            assert np.array_equal(x, want_q)


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", ["numba", "cython"])
def test_one_rotary_from_threads(backend):
    """One M-RoPE Rotary shared by threads (kept tables filled and cleared concurrently):
    each thread's results are the serial ones."""
    import threading

    rotary = Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
    rng = np.random.default_rng(5)
    jobs = []
    for i in range(8):
        pos = rng.integers(0, 2**32, size=(3, 1 + i % 3)).astype(np.int64)
        x = rng.standard_normal((1 + i % 3, 2, 16)).astype(np.float32)
        want = x.copy()
        Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]}).apply_(want, pos, backend=backend,
                                                                               inverse=bool(i % 2))
        jobs.append((pos, x, want, bool(i % 2)))
    errors = []

    def work(job):
        pos, x, want, inverse = job
        for _ in range(200):
            y = x.copy()
            rotary.apply_(y, pos, backend=backend, inverse=inverse)
            if not np.array_equal(y, want):
                errors.append(job)
                return

    threads = [threading.Thread(target=work, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.any_backend
@pytest.mark.parametrize("chunk", [1, 3, 1 << 12])
def test_long_calls_in_runs_same_bits(monkeypatch, chunk):
    """Long M-RoPE, inverse and per-token re-rotations rotate a run of positions at a time
    (bounded tables), large ones on the backend's threads: every run length, every backend,
    the same bits."""
    from fastpe.rope import _rotary

    monkeypatch.setattr(_rotary, "_CHUNK_ROWS", chunk)
    rotary = Rotary(64, scaling={"type": "mrope", "mrope_section": [8, 12, 12]})
    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 8, 70, 64)).astype(np.float32)  # 2 * 70 * 8 * 32 pairs: threaded
    k = rng.standard_normal((2, 2, 70, 64)).astype(np.float32)
    pos = rng.integers(0, 2**32, size=(3, 2, 70))
    delta = rng.integers(-(2**32) + 1, 2**32, size=(2, 70))
    results = {}
    for backend in BACKENDS:
        a, b = q.copy(), k.copy()
        rotary.apply_qk_(a, b, pos, backend=backend)
        rotary.apply_qk_(a, b, pos[:, 0], backend=backend, inverse=True)
        t = a[0].transpose(1, 0, 2).copy()  # (tokens, heads, d)
        rotary.apply_(t, pos[:, 1], backend=backend)
        plain = Rotary(64)
        c = b.copy()
        plain.rerotate_(c, delta, backend=backend)
        results[backend] = (a, b, t, c)
    for backend in BACKENDS:
        for got, want in zip(results[backend], results["python"]):
            assert np.array_equal(got, want), backend
    monkeypatch.setattr(_rotary, "_CHUNK_ROWS", 1 << 20)
    a, b = q.copy(), k.copy()
    rotary.apply_qk_(a, b, pos, backend="cython")
    rotary.apply_qk_(a, b, pos[:, 0], backend="cython", inverse=True)
    assert np.array_equal(a, results["python"][0]) and np.array_equal(b, results["python"][1])


FORK_SCRIPT = """
import multiprocessing as mp, os, sys
import numpy as np
from fastpe.rope import Rotary

BACKEND = sys.argv[1]
ROTARY = Rotary(128, scaling={"type": "mrope", "mrope_section": [16, 24, 24]})
RNG = np.random.default_rng(7)
Q = RNG.standard_normal((1, 16, 300, 128)).astype(np.float32)
POS = RNG.integers(0, 2**32, size=(3, 300))

def run(_=None):
    x = Q.copy()
    ROTARY.apply_(x, POS, backend=BACKEND)
    ROTARY.apply_(x, POS, backend=BACKEND, inverse=True)
    ROTARY.rerotate_(x, np.broadcast_to(np.arange(300) - 150, (3, 1, 300)), backend=BACKEND)
    return x.tobytes()

WANT = run()                            # the parent rotates on the backend's threads first
pid = os.fork()
if pid == 0:
    os._exit(0 if run() == WANT else 3)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
with mp.get_context("fork").Pool(2) as pool:
    assert all(r == WANT for r in pool.map(run, range(4)))
assert run() == WANT
print("fork-ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numba", "cython"])
def test_fork_after_threaded_rotation(backend, tmp_path):
    import subprocess
    import sys

    from conftest import fastpe_env

    script = tmp_path / "fork_mrope.py"
    script.write_text(FORK_SCRIPT)
    try:
        proc = subprocess.run([sys.executable, str(script), backend], capture_output=True, text=True, timeout=240,
                              env=fastpe_env(), cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"fork case hung: {exc}")
    assert proc.returncode == 0 and "fork-ok" in proc.stdout, proc.stdout + proc.stderr
