"""``fastpe rope-axial``: axial RoPE caches of a token grid, through CliRunner and a process.

Every file is compared bit for bit with ``axial_cos_sin(index_grid(...), ...)`` of the same
arguments on the same backend, in every format and dtype, and its spec is shown to re-create
those bits; each option is shown to reach the library (the file equals the library's output
with that option and differs from it without).  Sizes stay small: the suite may run on the
python backend.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fastpe import _dtypes
from fastpe._io import save as _save
from fastpe.rope import _axial
from fastpe.rope._axial import axial_cos_sin, index_grid, prepend_cls
from conftest import DEFAULT, fastpe_env
from support.cli import assert_one_line_error, listing, run, run_process, same_bits, signalled
from support.cli import ok as check_summary

SUMMARY = re.compile(
    r"wrote (?P<path>\S+): cos, sin (?P<dtype>\w+)(?P<bits> \(as uint16 bits\))? \((?P<rows>\d+), (?P<cols>\d+)\) "
    r"(?P<layout>gptj|neox|neox_head), axes_dim (?P<axes>[\d,]+), (?P<what>.+), base (?P<base>[^,]+)"
    r"(?P<factors>(, \w+_factor \S+)*), [\d.]+ (B|KiB|MiB|GiB), backend (?P<backend>\w+), "
    r"[\d.]+ ms compute \+ [\d.]+ ms write"
)

FORMATS = (".npz", ".safetensors", ".npy")
DTYPES = ("float32", "float64", "float16", "bfloat16")

#: the small grid most tests write: 2 x 3 x 4 tokens, 4 + 6 + 8 columns
AXES, GRID = (4, 6, 8), (2, 3, 4)
ARGS = ["--axes-dim", "4,6,8", "--grid", "2,3,4"]


def ok(result) -> re.Match:
    return check_summary(result, SUMMARY)


def expected(grid=GRID, axes_dim=AXES, *, centered=(), cls_token=False, **kwargs):
    """The library's caches for the command's tokens: ``centered`` the axes centred."""
    coords = index_grid(grid, centered=[a in centered for a in range(len(grid))])
    if cls_token:
        coords = prepend_cls(coords, 1)
    return axial_cos_sin(coords, axes_dim, backend=DEFAULT, **kwargs)


def _safetensors(path) -> tuple[dict[str, np.ndarray], dict]:
    """The tensors and ``__metadata__`` of a .safetensors file, its header read by hand (the
    package's numpy reader has no bfloat16)."""
    with open(path, "rb") as f:
        raw = f.read()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    metadata = header.pop("__metadata__")
    kinds = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "BF16": "<u2"}
    arrays = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        array = np.frombuffer(raw[8 + size + lo:8 + size + hi], dtype=kinds[info["dtype"]]).reshape(info["shape"])
        arrays[name] = array.view(_dtypes.resolve("bfloat16")) if info["dtype"] == "BF16" else array
    return arrays, metadata


def read(path, dtype="float32") -> tuple[np.ndarray, np.ndarray, dict]:
    """``(cos, sin, spec)`` of a file the command wrote, bfloat16 stored as uint16 bits viewed
    back; an .npz or .safetensors holds cos, sin (and the spec) and nothing else."""
    path = str(path)
    if path.endswith(".npy"):
        stacked = np.load(path, allow_pickle=False)
        with open(path + ".json") as f:
            spec = json.load(f)
        assert spec.pop("stacked") == ["cos", "sin"] and stacked.shape[0] == 2
        cos, sin = stacked
    elif path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as archive:
            assert sorted(archive.files) == ["cos", "sin", "spec"]
            cos, sin, spec = archive["cos"], archive["sin"], json.loads(str(archive["spec"]))
    else:
        arrays, metadata = _safetensors(path)
        assert sorted(arrays) == ["cos", "sin"] and list(metadata) == ["spec"]
        cos, sin, spec = arrays["cos"], arrays["sin"], json.loads(metadata["spec"])
        return cos, sin, spec
    if dtype == "bfloat16":
        assert cos.dtype == np.dtype("<u2")
        cos, sin = cos.view(_dtypes.resolve(dtype)), sin.view(_dtypes.resolve(dtype))
    return cos, sin, spec


def rerun(spec: dict):
    """``axial_cos_sin`` of a spec's parameters, the coordinates made as it records them."""
    assert spec["function"] == "rope.axial_cos_sin" and set(spec) == {"fastpe", "function", "params"}
    params = dict(spec["params"])
    made = params.pop("coords")
    coords = index_grid(**made["index_grid"])
    if "prepend_cls" in made:
        coords = prepend_cls(coords, made["prepend_cls"])
    assert set(made) <= {"index_grid", "prepend_cls"}
    return axial_cos_sin(coords, **params, backend=DEFAULT)


# ============================================================================ writing files


def test_writes_the_default_file_and_one_summary_line(in_tmp):
    m = ok(run("rope-axial", *ARGS))
    assert m["path"] == "rope_axial_2x3x4_18.npz" and listing() == ["rope_axial_2x3x4_18.npz"]
    assert (m["dtype"], m["bits"], m["rows"], m["cols"], m["layout"]) == ("float32", None, "24", "18", "gptj")
    assert (m["axes"], m["what"], m["base"], m["factors"], m["backend"]) == (
        "4,6,8", "3-axis grid 2x3x4", "10000", "", DEFAULT)
    cos, sin, _ = read("rope_axial_2x3x4_18.npz")
    want = expected()
    assert same_bits(cos, want[0]) and same_bits(sin, want[1])


def test_flux_sized_default_name(in_tmp):
    m = ok(run("rope-axial", "--axes-dim", "16,56,56", "--grid", "1,8,8"))
    assert m["path"] == "rope_axial_1x8x8_128.npz" and (m["rows"], m["cols"]) == ("64", "128")
    cos, sin, _ = read(m["path"])
    want = expected((1, 8, 8), (16, 56, 56))
    assert same_bits(cos, want[0]) and same_bits(sin, want[1])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_format_and_dtype_holds_the_librarys_bits_and_a_spec_that_remakes_them(in_tmp, fmt, dtype):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    m = ok(run("rope-axial", *ARGS, "--cls-token", "--dtype", dtype.upper(), "-o", f"c{fmt}"))
    assert m["dtype"] == dtype and (m["bits"] is not None) == (dtype == "bfloat16" and fmt != ".safetensors")
    assert listing() == ([f"c{fmt}", f"c{fmt}.json"] if fmt == ".npy" else [f"c{fmt}"])
    cos, sin, spec = read(f"c{fmt}", dtype)
    want = expected(cls_token=True, dtype=dtype)
    assert same_bits(cos, want[0]) and same_bits(sin, want[1])
    assert spec["params"] == {
        "coords": {"index_grid": {"sizes": [2, 3, 4], "centered": [False, False, False]}, "prepend_cls": 1},
        "axes_dim": [4, 6, 8], "base": 10000.0, "layout": "gptj", "linear_factor": 1.0, "ntk_factor": 1.0,
        "offset": 0.0, "dtype": dtype}
    again = rerun(spec)
    assert same_bits(again[0], want[0]) and same_bits(again[1], want[1])
    # the class token's row: no rotation
    assert (cos[0].astype(np.float64) == 1).all() and (sin[0].astype(np.float64) == 0).all()


def test_safetensors_reads_back_through_its_own_package(in_tmp):
    safetensors = pytest.importorskip("safetensors")
    ok(run("rope-axial", *ARGS, "--dtype", "float64", "-o", "c.safetensors"))
    with safetensors.safe_open("c.safetensors", framework="numpy") as f:
        got = {name: f.get_tensor(name) for name in f.keys()}
        spec = json.loads(f.metadata()["spec"])
    want = expected(dtype="float64")
    assert same_bits(got["cos"], want[0]) and same_bits(got["sin"], want[1])
    assert spec["function"] == "rope.axial_cos_sin"


OPTIONS = [
    # (CLI options, the library's keywords, the axes centred, cls token); each differs from the default
    (["--layout", "neox"], {"layout": "neox"}, (), False),
    (["--layout", "NEOX_HEAD"], {"layout": "neox_head"}, (), False),
    (["--base", 256], {"base": 256.0}, (), False),
    (["--base", 1], {"base": 1.0}, (), False),
    (["--linear-factor", 2.5], {"linear_factor": 2.5}, (), False),
    (["--ntk-factor", 4], {"ntk_factor": 4.0}, (), False),
    (["--ntk-factor", 0.5, "--base", 3], {"ntk_factor": 0.5, "base": 3.0}, (), False),
    # Qwen-Image's scale_rope: height and width centred, frames from 0
    (["--centered"], {}, (1, 2), False),
    (["--cls-token"], {}, (), True),
    (["--dtype", "float64"], {"dtype": "float64"}, (), False),
    (["--layout", "neox", "--base", 500, "--linear-factor", 0.5, "--ntk-factor", 2, "--centered", "--cls-token",
      "--dtype", "float16"],
     {"layout": "neox", "base": 500.0, "linear_factor": 0.5, "ntk_factor": 2.0, "dtype": "float16"}, (1, 2), True),
]


@pytest.mark.parametrize(("cli", "kwargs", "centered", "cls_token"), OPTIONS)
def test_options_reach_the_library(in_tmp, cli, kwargs, centered, cls_token):
    ok(run("rope-axial", *ARGS, *cli, "-o", "c.npz"))
    cos, sin, spec = read("c.npz")
    want = expected(centered=centered, cls_token=cls_token, **kwargs)
    assert same_bits(cos, want[0]) and same_bits(sin, want[1])
    again = rerun(spec)
    assert same_bits(again[0], want[0]) and same_bits(again[1], want[1])
    plain = expected()
    assert not (same_bits(cos, plain[0]) and same_bits(sin, plain[1]))


@pytest.mark.parametrize(("grid", "centred"), [("5", (0,)), ("3,4", (0, 1)), ("2,3,5", (1, 2)), ("2,2,3,4", (2, 3))])
def test_centered_centres_the_last_two_axes(in_tmp, grid, centred):
    sizes = tuple(map(int, grid.split(",")))
    axes_dim = (4,) * len(sizes)
    m = ok(run("rope-axial", "--axes-dim", ",".join(map(str, axes_dim)), "--grid", grid, "--centered", "-o", "c.npz"))
    assert m["what"] == f"{len(sizes)}-axis grid {'x'.join(map(str, sizes))} centered"
    cos, sin, spec = read("c.npz")
    want = expected(sizes, axes_dim, centered=centred)
    assert same_bits(cos, want[0]) and same_bits(sin, want[1])
    flags = spec["params"]["coords"]["index_grid"]["centered"]
    assert flags == [a in centred for a in range(len(sizes))]
    # a side of N runs -(N - N//2) .. N//2 - 1
    coords = index_grid(sizes, centered=flags)
    for a in centred:
        n = sizes[a]
        assert coords[:, a].min() == -(n - n // 2) and coords[:, a].max() == n // 2 - 1


def test_flux_caches_agree_with_diffusers(in_tmp):
    """FLUX's image ids through diffusers' own FluxPosEmbed (float64 arithmetic on the CPU,
    rounded to float32): within 1 float32 ULP (diffusers rounds each frequency and product
    to float64 first; fastpe does not)."""
    torch = pytest.importorskip("torch")
    flux = pytest.importorskip("diffusers.models.transformers.transformer_flux")
    ok(run("rope-axial", "--axes-dim", "16,56,56", "--grid", "1,12,10", "-o", "f.npz"))
    cos, sin, _ = read("f.npz")
    ids = torch.from_numpy(index_grid((1, 12, 10)))
    theirs = flux.FluxPosEmbed(theta=10000, axes_dim=[16, 56, 56])(ids)
    assert theirs[0].dtype == torch.float32 and tuple(theirs[0].shape) == cos.shape
    np.testing.assert_array_max_ulp(cos, theirs[0].numpy(), maxulp=1)
    np.testing.assert_array_max_ulp(sin, theirs[1].numpy(), maxulp=1)


def test_centered_caches_agree_with_qwen_image(in_tmp):
    """--centered through diffusers' own QwenEmbedRope with scale_rope (float32 frequencies
    and products, so close, not equal): the same token order and coordinates, an odd side
    and an even one, in the gptj layout's pairs (its complex rotation)."""
    torch = pytest.importorskip("torch")
    qwen = pytest.importorskip("diffusers.models.transformers.transformer_qwenimage")
    ok(run("rope-axial", "--axes-dim", "16,56,56", "--grid", "1,5,6", "--centered", "-o", "q.npz"))
    cos, sin, _ = read("q.npz")
    with torch.no_grad():
        theirs, _ = qwen.QwenEmbedRope(theta=10000, axes_dim=[16, 56, 56], scale_rope=True)((1, 5, 6), None, 1)
    assert tuple(theirs.shape) == (30, 64)
    assert same_bits(cos[:, 0::2], cos[:, 1::2]) and same_bits(sin[:, 0::2], sin[:, 1::2])
    np.testing.assert_allclose(cos[:, 0::2], theirs.real.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(sin[:, 0::2], theirs.imag.numpy(), rtol=0, atol=1e-6)


def test_summary_names_the_grid_options_and_factors(in_tmp):
    m = ok(run("rope-axial", "--axes-dim", "8,8", "--grid", "3,2", "--centered", "--cls-token", "--layout", "neox",
               "--base", 256, "--linear-factor", 2, "-o", "s.npy"))
    assert (m["path"], m["rows"], m["cols"], m["layout"]) == ("s.npy", "7", "16", "neox")
    assert (m["what"], m["base"], m["factors"]) == ("2-axis grid 3x2 centered, cls token", "256", ", linear_factor 2")
    m = ok(run("rope-axial", "--axes-dim", "8,8", "--grid", "3,2", "--ntk-factor", 1.5, "-o", "t.npy"))
    assert m["factors"] == ", ntk_factor 1.5"


def test_bfloat16_summary_says_how_it_is_stored(in_tmp):
    pytest.importorskip("ml_dtypes")
    m = ok(run("rope-axial", *ARGS, "--dtype", "bfloat16", "-o", "b.npy"))
    assert m["dtype"] == "bfloat16" and m["bits"] == " (as uint16 bits)"
    assert np.load("b.npy").dtype == np.uint16 and np.load("b.npy").shape == (2, 24, 18)
    m = ok(run("rope-axial", *ARGS, "--dtype", "bfloat16", "-o", "b.safetensors"))
    assert m["dtype"] == "bfloat16" and m["bits"] is None


def test_backend_option(in_tmp):
    m = ok(run("rope-axial", *ARGS, "--backend", "python", "-o", "p.npz"))
    assert m["backend"] == "python"
    cos, sin, _ = read("p.npz")
    want = expected()  # every backend computes the same bits
    assert same_bits(cos, want[0]) and same_bits(sin, want[1])


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_prints_nothing_and_replaces_an_existing_file(in_tmp, where):
    (in_tmp / "r.npz").write_bytes(b"old")
    command = ["rope-axial", *ARGS, "-o", "r.npz"]
    args = ["-q", *command] if where == "before" else [*command, "-q"]
    result = run(*args)
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""
    assert listing() == ["r.npz"]
    cos, _, _ = read("r.npz")
    assert same_bits(cos, expected()[0])


def test_verbose_after_the_command_still_one_summary_line(in_tmp):
    ok(run("rope-axial", *ARGS, "-v", "-o", "v.npz"))
    ok(run("-v", "rope-axial", *ARGS, "-o", "w.npz"))


# ============================================================================ bad input


BAD = [
    pytest.param(["--grid", "2,3"], "Missing option '--axes-dim'", id="no-axes-dim"),
    pytest.param(["--axes-dim", "4,6"], "Missing option '--grid'", id="no-grid"),
    pytest.param(["--axes-dim", "4,5", "--grid", "2,3"],
                 "Error: Invalid value for '--axes-dim': axes_dim[1] must be even, got 5", id="odd-width"),
    pytest.param(["--axes-dim", "4,-6", "--grid", "2,3"], "'--axes-dim': axes_dim[1] must be >= 0, got -6",
                 id="negative-width"),
    pytest.param(["--axes-dim", "0,0", "--grid", "2,3"], "sum(axes_dim) must be in [2, 65536], got 0", id="no-columns"),
    pytest.param(["--axes-dim", "65536,2", "--grid", "2,3"], "sum(axes_dim) must be in [2, 65536], got 65538",
                 id="too-wide"),
    pytest.param(["--axes-dim", "4,x", "--grid", "2,3"], "'--axes-dim': 'x' is not an integer", id="width-text"),
    pytest.param(["--axes-dim", "4,6.0", "--grid", "2,3"], "'6.0' is not an integer", id="width-float"),
    pytest.param(["--axes-dim", "4,,6", "--grid", "2,3"], "'--axes-dim': empty item in '4,,6'", id="width-empty-item"),
    pytest.param(["--axes-dim", "", "--grid", "2,3"], "'--axes-dim': empty item", id="widths-empty"),
    pytest.param(["--axes-dim", "4,6", "--grid", "2,3,4"],
                 "Error: Invalid value for '--grid': has 3 axes but --axes-dim has 2: give one size per axis",
                 id="grid-more-axes"),
    pytest.param(["--axes-dim", "4,6,8", "--grid", "5"], "'--grid': has 1 axis but --axes-dim has 3",
                 id="grid-fewer-axes"),
    pytest.param(["--axes-dim", "4,6", "--grid", "2,0"],
                 "'--grid': each size must be between 1 and 2**32, got 0 (axis 1)", id="size-0"),
    pytest.param(["--axes-dim", "4,6", "--grid", "-2,3"], "'--grid': each size must be between 1 and 2**32, got -2",
                 id="size-negative"),
    pytest.param(["--axes-dim", "4,6", "--grid", "2,4294967297"], "'--grid': each size must be between 1 and 2**32",
                 id="size-past-2**32"),
    pytest.param(["--axes-dim", "4,6", "--grid", "2x3"], "'--grid': '2x3' is not an integer", id="grid-x"),
    pytest.param(["--axes-dim", "4,6", "--grid", "2,,3"], "'--grid': empty item", id="grid-empty-item"),
    pytest.param([*ARGS, "--base", "0.5"], "Error: Invalid value for '--base': must be >= 1, got 0.5", id="base-small"),
    pytest.param([*ARGS, "--base", "nan"], "'--base': must be finite", id="base-nan"),
    pytest.param([*ARGS, "--base", "inf"], "'--base': must be finite", id="base-inf"),
    pytest.param([*ARGS, "--base", "ten"], "'--base'", id="base-text"),
    pytest.param([*ARGS, "--ntk-factor", "0"], "'--ntk-factor': must be > 0", id="ntk-0"),
    pytest.param([*ARGS, "--ntk-factor", "1e-5"], "'--ntk-factor': must be > 0 with base * ntk_factor finite and >= 1",
                 id="ntk-below-1-over-base"),
    pytest.param([*ARGS, "--ntk-factor", "1e305", "--base", "1e10"], "'--ntk-factor'", id="ntk-overflow"),
    pytest.param([*ARGS, "--linear-factor", "-1"], "'--linear-factor': must be >= 1/1024", id="linear-negative"),
    pytest.param([*ARGS, "--linear-factor", "nan"], "'--linear-factor': must be finite", id="linear-nan"),
    pytest.param([*ARGS, "--layout", "halves"], "'--layout'", id="layout"),
    pytest.param([*ARGS, "--dtype", "int8"], "'--dtype'", id="dtype"),
    pytest.param([*ARGS, "--backend", "gpu"], "'--backend'", id="backend"),
    pytest.param([*ARGS, "-o", "c.txt"], "does not end in .npy, .npz or .safetensors", id="out-txt"),
    pytest.param([*ARGS, "-o", "missing/c.npz"], "does not exist", id="out-no-dir"),
    pytest.param([*ARGS, "-o", "adir"], "names a directory", id="out-dir"),
    pytest.param([*ARGS, "-o", ""], "empty", id="out-empty"),
    # too many tokens: first the memory they would take
    pytest.param(["--axes-dim", "16,56,56", "--grid", "1,65536,65536"],
                 "Error: the 2 x 4294967296 x 128 float32 array needs 4844724158464 bytes (4.4 TiB) of memory",
                 id="too-many-tokens"),
    pytest.param(["--axes-dim", "2", "--grid", "4294967296", "--dtype", "float16", "--cls-token"],
                 "the 2 x 4294967297 x 2 float16 array needs", id="too-many-tokens-narrow"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize("args, message", BAD)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(in_tmp, monkeypatch, args, message):
    monkeypatch.setattr(_save, "physical_memory", lambda: 4 << 30)  # the sizes' messages, on any machine
    (in_tmp / "adir").mkdir()
    before = listing()
    line = assert_one_line_error(run("rope-axial", *args))
    assert message in line, line
    assert listing() == before and listing("adir") == []


def test_the_default_output_path_must_be_usable(in_tmp):
    (in_tmp / "rope_axial_2x3x4_18.npz").mkdir()
    line = assert_one_line_error(run("rope-axial", *ARGS))
    assert "default output path" in line and "use -o" in line


def _never(*args, **kwargs):  # pragma: no cover - reached only if a size check is missing
    raise AssertionError("the library was called")


@pytest.mark.any_backend
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("args", "held"), [
    (["--axes-dim", "16,56,56", "--grid", "1,64,64"], "2 x 4096 x 128 float32"),
    (["--axes-dim", "16,56,56", "--grid", "1,64,64", "--cls-token", "--dtype", "float16"], "2 x 4097 x 128 float16"),
    (["--axes-dim", "2,2", "--grid", "256,256", "--dtype", "bfloat16"], "2 x 65536 x 4 bfloat16"),
])
def test_caches_larger_than_memory_are_refused_before_any_work(in_tmp, monkeypatch, fmt, args, held):
    monkeypatch.setattr(_save, "physical_memory", lambda: 1 << 20)
    for name in ("axial_cos_sin", "index_grid", "prepend_cls"):
        monkeypatch.setattr(_axial, name, _never)
    line = assert_one_line_error(run("rope-axial", *args, "-o", f"big{fmt}"))
    assert f"the {held} array needs " in line and "of memory, more than this machine's 1048576 bytes" in line
    assert line.endswith("; ask for a smaller --grid, narrower --axes-dim or a 16-bit --dtype"), line
    assert listing() == []


@pytest.mark.any_backend
def test_past_the_token_limit_on_a_big_machine_the_limit_is_the_error(in_tmp, monkeypatch):
    """Memory enough, disk too small: too many tokens is bad input (exit 2) before the disk matters."""
    monkeypatch.setattr(_save, "physical_memory", lambda: 1 << 80)
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=0))
    monkeypatch.setattr(_axial, "axial_cos_sin", _never)
    line = assert_one_line_error(run("rope-axial", "--axes-dim", "2,2", "--grid", "65536,32769", "-o", "big.npz"))
    assert line == "Error: Invalid value for '--grid': gives more than 2**31 tokens: (65536, 32769)", line
    assert listing() == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_free_space_check_is_exact_and_comes_before_any_work(in_tmp, monkeypatch, fmt):
    ok(run("rope-axial", *ARGS, "-o", f"probe{fmt}"))
    probe = [f for f in listing() if f.startswith("probe")]
    needed = sum(os.path.getsize(f) for f in probe)
    for f in probe:
        os.unlink(f)
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=needed - 1))
    monkeypatch.setattr(_axial, "axial_cos_sin", _never)
    line = assert_one_line_error(run("rope-axial", *ARGS, "-o", f"out{fmt}"), code=1)
    assert "[Errno 28] not enough free space" in line and f"needs {needed} bytes" in line
    assert listing() == []
    monkeypatch.undo()
    monkeypatch.chdir(in_tmp)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=needed))
    ok(run("rope-axial", *ARGS, "-o", f"out{fmt}"))  # exactly enough is enough


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_ctrl_c_or_a_failure_leaves_no_file_and_keeps_the_old_one(in_tmp, monkeypatch, fmt, existing):
    target = f"out{fmt}"
    files = [target, target + ".json"] if fmt == ".npy" else [target]
    if existing:
        for f in files:
            (in_tmp / f).write_bytes(b"precious")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_axial, "axial_cos_sin", interrupted)
    result = run("rope-axial", *ARGS, "-o", target)
    assert (result.exit_code, result.stderr.strip(), result.stdout) == (130, "Aborted!", "")
    monkeypatch.undo()
    monkeypatch.chdir(in_tmp)

    from fastpe._io.writers import WRITERS

    def full_disk(f, layout, blocks):
        f.write(b"\0" * 100)
        f.flush()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(WRITERS[fmt], "write_data", full_disk)
    line = assert_one_line_error(run("rope-axial", *ARGS, "-o", target), code=1)
    assert line == f"Error: could not write {target}: [Errno 28] No space left on device"
    assert listing() == (sorted(files) if existing else [])
    assert all((in_tmp / f).read_bytes() == b"precious" for f in listing())


def test_running_out_of_memory_anyway_is_one_line_exit_1(in_tmp, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 4.0 GiB for an array with shape (4194304, 128)")

    monkeypatch.setattr(_axial, "axial_cos_sin", no_memory)
    line = assert_one_line_error(run("rope-axial", *ARGS), code=1)
    assert line == "Error: not enough memory: Unable to allocate 4.0 GiB for an array with shape (4194304, 128)"
    assert listing() == []


# ============================================================================ help and imports


@pytest.mark.any_backend
def test_help_lists_rope_axial_and_its_options():
    listing_ = run("--help")
    assert listing_.exit_code == 0
    assert re.search(r"^\s+rope-axial\s", listing_.stdout.split("Commands:")[1], re.M)
    result = run("rope-axial", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for option in ("--axes-dim", "--grid", "--base", "--layout", "--centered", "--cls-token", "--linear-factor",
                   "--ntk-factor", "--dtype", "--backend", "-o, --output", "-q, --quiet", "-v, --verbose"):
        assert option in text, option
    assert "rope_axial_<GRID joined by x>_<sum(D)>.npz" in text and "(2, TOKENS, sum(D)), axis 0 = (cos, sin)" in text
    assert "numpy.load(PATH).view(ml_dtypes.bfloat16)" in text


@pytest.mark.slow
@pytest.mark.any_backend
def test_help_imports_no_kernels_and_a_table_run_not_the_axial_code(tmp_path):
    code = textwrap.dedent(
        """
        import json, sys
        from fastpe.cli import main
        try:
            main(sys.argv[1:], prog_name="fastpe")
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        sys.stderr.write(json.dumps(sorted(sys.modules)))
        """
    )

    def modules(*args):
        proc = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=fastpe_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return set(json.loads(proc.stderr))

    helped = modules("rope-axial", "--help")
    assert "fastpe.cli.rope_axial" in helped
    assert sorted(m for m in helped if m.split(".")[0] in ("numba", "llvmlite", "torch")) == []
    assert "fastpe.rope._axial" not in helped
    table = modules("table", "--d-model", "8", "--max-len", "4", "--backend", "python")
    assert {"fastpe.cli.rope_axial", "fastpe.rope._axial"}.isdisjoint(table)


# ============================================================================ real processes


@pytest.mark.slow
def test_process_writes_the_caches_and_refuses_bad_input(tmp_path):
    proc = run_process("rope-axial", "--axes-dim", "16,56,56", "--grid", "1,6,5", "--layout", "neox",
                       "--backend", DEFAULT, "-o", "caches.safetensors", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and SUMMARY.fullmatch(proc.stdout.rstrip("\n"))
    assert listing(tmp_path) == ["caches.safetensors"]
    cos, sin, spec = read(tmp_path / "caches.safetensors")
    want = expected((1, 6, 5), (16, 56, 56), layout="neox")
    assert same_bits(cos, want[0]) and same_bits(sin, want[1])
    bad = run_process("rope-axial", "--axes-dim", "16,56,57", "--grid", "1,6,5", "-o", "bad.npz", cwd=tmp_path)
    assert "axes_dim[2] must be even, got 57" in assert_one_line_error(bad)
    assert listing(tmp_path) == ["caches.safetensors"]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals")
@pytest.mark.parametrize(("signame", "status", "said"), [("SIGINT", 130, "Aborted!"),
                                                         ("SIGTERM", 143, "Aborted! (SIGTERM)")])
def test_process_signal_while_writing_leaves_nothing(tmp_path, signame, status, said):
    (tmp_path / "old.npz").write_bytes(b"precious")
    child = signalled(["rope-axial", *ARGS, "--backend", "python", "-o", "old.npz"], tmp_path, wait=True)
    try:
        assert child.stdout.readline() == "temporary file written\n", child.stderr.read()
        assert len(listing(tmp_path)) == 2  # the old file and the temporary one
        child.send_signal(getattr(signal, signame))
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
        child.wait()
    assert (child.returncode, err.strip(), out) == (status, said, "")
    assert listing(tmp_path) == ["old.npz"] and (tmp_path / "old.npz").read_bytes() == b"precious"
