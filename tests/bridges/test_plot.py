"""``fastpe plot`` and fastpe._plot: the plotted numbers are the library's, the files are
valid pictures of the announced size, and bad input leaves nothing behind."""

from __future__ import annotations

import importlib
import io
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("matplotlib")
import matplotlib.image  # noqa: E402

import fastpe  # noqa: E402
import fastpe.grid  # noqa: E402
from fastpe import _plot  # noqa: E402
from conftest import fastpe_env  # noqa: E402
from support.cli import assert_one_line_error, listing, run  # noqa: E402


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARY = re.compile(
    r"wrote (?P<path>\S+): (?P<title>.+); (?P<extent>\d+x\d+ px|\S+ in (SVG|PDF)), [\d.]+ (B|KiB|MiB), "
    r"[\d.]+ ms compute \+ [\d.]+ ms draw"
)


def png_size(path) -> tuple[int, int]:
    """(width, height) from the PNG header: the IHDR chunk right after the signature."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_MAGIC and head[12:16] == b"IHDR"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


# --------------------------------------------------------------------------- the numbers


def test_table_heatmap_is_the_table():
    h = _plot.table_heatmap(48, 100, base=1000.0)
    table = fastpe.table(48, 100, base=1000.0)
    assert h.data.shape == (100, 48) and not np.ma.is_masked(h.data)
    assert np.array_equal(h.data.filled(np.nan), table.astype(np.float64))
    m = float(np.abs(table).max())
    assert (h.vmin, h.vmax) == (-m, m)
    assert "d_model=48" in h.title and "max_len=100" in h.title and "base=1000" in h.title
    assert (h.xlabel, h.ylabel) == ("dimension", "position")


@pytest.mark.parametrize("part", ["cos", "sin", "both"])
def test_rope_heatmap_is_the_cache(part):
    h = _plot.rope_heatmap(32, 70, base=500.0, part=part)
    cos, sin = fastpe.rope.cos_sin(np.arange(70), 32, base=500.0)
    want = {"cos": (cos,), "sin": (sin,), "both": (cos, sin)}[part]
    assert len(h.panels) == len(want)
    for panel, w in zip(h.panels, want):
        assert np.array_equal(panel.filled(np.nan), w.astype(np.float64))
    m = max(float(np.abs(w).max()) for w in want)
    assert (h.vmin, h.vmax) == (-m, m)
    assert h.panel_titles == (("cos", "sin") if part == "both" else ())


@pytest.mark.parametrize("form", ["symmetric", "causal"])
def test_alibi_heatmap_is_one_head_with_the_mask(form):
    from fastpe import alibi

    h = _plot.alibi_heatmap(4, 20, head=2, form=form)
    bias = alibi.bias(4, 20, form=form)[2]
    finite = np.isfinite(bias)
    assert np.array_equal(h.data.mask, ~finite) if not finite.all() else not np.ma.is_masked(h.data)
    assert np.array_equal(h.data.compressed(), bias[finite].astype(np.float64))
    m = float(np.abs(bias[finite]).max())
    assert (h.vmin, h.vmax) == (-m, m)
    assert (h.xlabel, h.ylabel) == ("key position", "query position")


@pytest.mark.any_backend
def test_alibi_head_out_of_range():
    with pytest.raises(ValueError, match="head"):
        _plot.alibi_heatmap(4, 20, head=4)


@pytest.mark.any_backend
def test_prepare_masks_non_finite_and_centres_the_limits():
    a = np.array([[0.0, -np.inf, 2.5], [np.nan, -4.0, np.inf]], dtype=np.float32)
    h = _plot.prepare(a, title="t")
    assert h.data.mask.tolist() == [[False, True, False], [True, False, True]]
    assert h.data.compressed().tolist() == [0.0, 2.5, -4.0]
    assert (h.vmin, h.vmax) == (-4.0, 4.0)


@pytest.mark.any_backend
@pytest.mark.parametrize("values", [np.zeros((3, 4)), np.full((2, 2), -np.inf)])
def test_limits_never_collapse(values):
    assert _plot.prepare(values, title="t").vmax == 1.0


@pytest.mark.any_backend
def test_array_heatmap_and_index():
    a = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    h = _plot.array_heatmap(a, name="dir/bias.npy", index=1)
    assert np.array_equal(h.data, a[1].astype(np.float64))
    assert h.title.startswith("bias.npy[1]: 3 x 4 int16")
    with pytest.raises(ValueError, match="--index"):
        _plot.array_heatmap(a, name="bias.npy")
    with pytest.raises(ValueError, match="< 2"):
        _plot.array_heatmap(a, name="bias.npy", index=2)
    with pytest.raises(ValueError, match="3-D"):
        _plot.array_heatmap(a[0], name="x.npy", index=0)


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "array, error, match",
    [
        (np.zeros(5), ValueError, "2-D"),
        (np.zeros((2, 2, 2, 2)), ValueError, "2-D"),
        (np.zeros((0, 3)), ValueError, "empty"),
        (np.array([["a", "b"]]), TypeError, "real numbers"),
        (np.zeros((2, 2), dtype=complex), TypeError, "real numbers"),
        (np.zeros((2, 2), dtype=bool), TypeError, "real numbers"),
    ],
)
def test_array_heatmap_rejects(array, error, match):
    with pytest.raises(error, match=match):
        _plot.array_heatmap(array, name="a.npy")


@pytest.mark.any_backend
def test_size_limit_is_checked_before_computing():
    with pytest.raises(ValueError, match="at most"):
        _plot.table_heatmap(65536, 2**20)


def test_render_png_svg_pdf():
    h = _plot.table_heatmap(16, 30)
    for fmt, magic in (("png", PNG_MAGIC), ("svg", b"<?xml"), ("pdf", b"%PDF")):
        buf = io.BytesIO()
        _plot.render(h, buf, fmt=fmt, dpi=40)
        assert buf.getvalue().startswith(magic), fmt
    with pytest.raises(ValueError, match="cmap"):
        _plot.render(h, io.BytesIO(), cmap="no-such-map")
    with pytest.raises(ValueError, match="fmt"):
        _plot.render(h, io.BytesIO(), fmt="jpg")


@pytest.mark.any_backend
def test_rendered_pixels_show_the_data():
    # one column of +1 and one of -1, drawn with a colormap whose ends are pure colours
    a = np.array([[1.0, -1.0]] * 4)
    buf = io.BytesIO()
    _plot.render(_plot.prepare(a, title="t"), buf, dpi=50, cmap="bwr")
    buf.seek(0)
    image = matplotlib.image.imread(buf, format="png")
    w, h = _plot.pixel_size(50)
    assert image.shape[:2] == (h, w)
    row = image[h // 2, :, :3]
    reds = np.flatnonzero((row[:, 0] > 0.9) & (row[:, 2] < 0.1))
    blues = np.flatnonzero((row[:, 2] > 0.9) & (row[:, 0] < 0.1))
    assert reds.size > 20 and blues.size > 20 and reds.mean() < blues.mean()  # +1 left of -1


# --------------------------------------------------------------------------- the command


def test_table_png(in_tmp):
    result = run("plot", "--d-model", 128, "--max-len", 100, "-o", "pe.png")
    assert result.exit_code == 0, result.output
    m = SUMMARY.fullmatch(result.stdout.strip())
    assert m and m["path"] == "pe.png" and m["extent"] == "800x600 px"
    assert "d_model=128, max_len=100" in m["title"]
    assert png_size("pe.png") == (800, 600) == _plot.pixel_size(100)
    image = matplotlib.image.imread("pe.png")
    assert image.shape[:2] == (600, 800)
    assert listing() == ["pe.png"]


def test_dpi_sets_the_pixel_size(in_tmp):
    assert run("plot", "--d-model", 8, "--max-len", 10, "--dpi", 30, "-o", "small.png").exit_code == 0
    assert png_size("small.png") == (240, 180)


@pytest.mark.parametrize("name, magic", [("pe.svg", b"<?xml"), ("pe.PDF", b"%PDF")])
def test_vector_formats(in_tmp, name, magic):
    result = run("plot", "--d-model", 8, "--max-len", 10, "-o", name)
    assert result.exit_code == 0, result.output
    assert SUMMARY.fullmatch(result.stdout.strip())
    with open(name, "rb") as f:
        assert f.read(len(magic)) == magic


def test_default_output_names(in_tmp):
    assert run("plot", "--d-model", 16, "--max-len", 20).exit_code == 0
    assert run("plot", "--kind", "rope", "--head-dim", 8, "--max-len", 20, "--part", "sin").exit_code == 0
    assert listing() == ["pe_20x16.png", "rope_sin_20x8.png"]


def test_npy_input(in_tmp):
    table = fastpe.table(40, 60)
    np.save("t.npy", table)
    result = run("plot", "t.npy", "-o", "t.png", "--cmap", "coolwarm")
    assert result.exit_code == 0, result.output
    assert "t.npy: 60 x 40 float32" in result.stdout
    assert png_size("t.png") == (800, 600)
    # no -o: named after the input
    assert run("plot", "t.npy").exit_code == 0
    assert listing() == ["t.npy", "t.png"]


def test_npy_input_3d_with_index(in_tmp):
    np.save("b.npy", np.stack([fastpe.table(8, 8), -fastpe.table(8, 8)]))
    result = run("plot", "b.npy", "--index", 1, "-o", "b1.png")
    assert result.exit_code == 0, result.output
    assert "b.npy[1]: 8 x 8 float32" in result.stdout


def _drawn(path, entry=None):
    """The heatmap ``fastpe plot PATH [--entry ENTRY]`` draws."""
    from fastpe.cli.plot import _load_input

    array, label, bits = _load_input(path, entry)
    return _plot.array_heatmap(array, name=label, bfloat16_bits=bits is not None, stored=bits or "")


@pytest.mark.parametrize("fmt", [".npy", ".npz", ".safetensors"])
@pytest.mark.parametrize("command", [["table", "--d-model", 12, "--max-len", 9],
                                     ["grid", "--height", 2, "--width", 3, "--d-model", 8]])
def test_a_bfloat16_file_fastpe_wrote_is_drawn_as_its_values(in_tmp, fmt, command):
    assert run(*command, "--dtype", "bfloat16", "-o", f"bf{fmt}").exit_code == 0
    want = (fastpe.table(12, 9, dtype="bfloat16") if command[0] == "table"
            else fastpe.grid.sincos_2d(2, 3, 8, dtype="bfloat16"))
    result = run("plot", f"bf{fmt}", "-o", "bf.png")
    assert result.exit_code == 0, result.output
    stored = " (stored as uint16 bits)" if fmt != ".safetensors" else ""
    assert f"bf{fmt}: {want.shape[0]} x {want.shape[1]} bfloat16{stored};" in result.stdout
    h = _drawn(f"bf{fmt}")
    assert np.array_equal(h.data.filled(np.nan), want.astype(np.float64))
    assert h.vmax == float(np.abs(want.astype(np.float64)).max()) <= 1.0  # not the bit patterns' 16000s


def test_a_uint16_file_without_a_bfloat16_spec_is_drawn_as_it_is(in_tmp):
    bits = np.arange(12, dtype=np.uint16).reshape(3, 4) * 1000
    np.save("u.npy", bits)
    result = run("plot", "u.npy")
    assert result.exit_code == 0 and "u.npy: 3 x 4 uint16;" in result.stdout
    assert np.array_equal(_drawn("u.npy").data, bits.astype(np.float64))
    # a spec beside it that names another dtype changes nothing
    assert run("table", "--d-model", 4, "--max-len", 3, "--dtype", "float16", "-o", "h.npy").exit_code == 0
    np.save("h.npy", bits)
    assert "h.npy: 3 x 4 uint16;" in run("plot", "h.npy").stdout


@pytest.mark.any_backend
def test_bfloat16_values_of_every_bit_pattern_are_exact():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = np.arange(1 << 16, dtype=np.uint16)
    got = _plot.bfloat16_values(bits)
    want = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_an_entry_of_an_npz_or_safetensors_file(in_tmp):
    cos, sin = fastpe.rope.cos_sin(np.arange(6), 8)
    arrays = {"cos": cos, "sin": sin, "inv_freq": np.arange(4.0)}
    np.savez("r.npz", **arrays)
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    safetensors_numpy.save_file(arrays, "r.safetensors")
    assert np.array_equal(_drawn("r.npz").data, cos.astype(np.float64))  # the first array by default
    for name in ("r.npz", "r.safetensors"):
        result = run("plot", name, "--entry", "sin", "-o", "s.png")
        assert result.exit_code == 0 and f"{name}:sin: 6 x 8 float32;" in result.stdout
        assert np.array_equal(_drawn(name, "sin").data, sin.astype(np.float64))
        line = assert_one_line_error(run("plot", name, "--entry", "tan"))
        assert "holds no entry 'tan'; it holds " in line and all(n in line for n in arrays)
        assert "must be a 2-D array" in assert_one_line_error(run("plot", name, "--entry", "inv_freq"))


@pytest.mark.any_backend
def test_ticks_are_whole_indices_on_small_inputs():
    for h in (_plot.table_heatmap(4, 3), _plot.alibi_heatmap(2, 2), _plot.array_heatmap(np.eye(2))):
        fig = _plot.figure(h)
        fig.draw_without_rendering()
        for ax in fig.axes[:-1]:  # the last is the colorbar's
            for ticks in (ax.get_xticks(), ax.get_yticks()):
                assert len(ticks) and np.array_equal(ticks, np.round(ticks)), ticks


@pytest.mark.any_backend
@pytest.mark.parametrize("form", ["symmetric", "causal"])
def test_the_colour_bar_spans_the_data(form):
    h = _plot.alibi_heatmap(8, 12, head=3, form=form)
    lowest = float(h.data.min())
    assert lowest < 0 and float(h.data.max()) == 0.0
    assert h.span == (lowest, 0.0) and (h.vmin, h.vmax) == (lowest, -lowest)  # zero stays the middle colour
    fig = _plot.figure(h)
    fig.draw_without_rendering()
    bar = fig.axes[-1]
    assert bar.get_ylim() == pytest.approx((lowest, 0.0))
    assert all(lowest <= t <= 0.0 for t in bar.get_yticks())
    table = _plot.table_heatmap(8, 20)
    assert table.span == (float(table.data.min()), float(table.data.max()))


@pytest.mark.parametrize("part", ["cos", "sin", "both"])
def test_rope_kind(in_tmp, part):
    result = run("plot", "--kind", "rope", "--head-dim", 16, "--max-len", 40, "--part", part, "--base", 100, "-o", "r.png")
    assert result.exit_code == 0, result.output
    assert "RoPE" in result.stdout and "head_dim=16" in result.stdout and "base=100" in result.stdout
    assert png_size("r.png") == (800, 600)


@pytest.mark.parametrize("form", ["symmetric", "causal", "bloom", "mpt"])
def test_alibi_kind(in_tmp, form):
    result = run("plot", "--kind", "alibi", "--heads", 4, "--head", 3, "--max-len", 30, "--form", form, "-o", "a.png")
    assert result.exit_code == 0, result.output
    assert "ALiBi" in result.stdout and "head index 3 (0-based) of 4" in result.stdout
    assert png_size("a.png") == (800, 600)


@pytest.mark.parametrize(
    "args, match",
    [
        (["missing.npy"], "does not exist"),
        (["notes.txt"], "'notes.txt' is not a .npy, .npz or .safetensors file"),
        (["fake.npy"], "'fake.npy' is not a .npy file: it does not start with NumPy's magic string"),
        (["fake.npz"], "fake.npz is not a readable .npz file"),
        (["fake.safetensors"], "fake.safetensors has no readable .safetensors header"),
        (["t.npy", "--entry", "table"], "--entry applies to .npz and .safetensors files"),
        (["one_d.npy"], "2-D"),
        (["three_d.npy"], "--index"),
        (["three_d.npy", "--index", 5], "index must be < 2"),
        (["t.npy", "--index", 0], "3-D"),
        (["broken.npy"], "cannot read"),
        (["strings.npy"], "real numbers"),
        (["t.npy", "--kind", "rope"], "--kind does not apply"),
        (["t.npy", "--d-model", 8], "--d-model does not apply"),
        (["--d-model", 8, "-o", "out.jpg"], "does not end in .png, .svg or .pdf"),
        (["--d-model", 8, "-o", "nodir/out.png"], "does not exist"),
        (["--d-model", 8, "-o", "dir.png"], "directory"),
        (["--d-model", 0], "--d-model"),
        (["--d-model", 8, "--max-len", 0], "--max-len"),
        (["--d-model", 8, "--base", 1], "--base"),
        (["--d-model", 8, "--dpi", 0], "--dpi"),
        (["--d-model", 8, "--cmap", "nope"], "colormap"),
        (["--d-model", 65536, "--max-len", 2048], "at most"),
        (["--max-len", 8], "Missing option '--d-model'"),
        (["--kind", "rope", "--max-len", 8], "Missing option '--head-dim'"),
        (["--kind", "rope", "--head-dim", 7], "head_dim"),
        (["--kind", "rope", "--head-dim", 8, "--d-model", 8], "--d-model does not apply to --kind rope"),
        (["--d-model", 8, "--part", "sin"], "--part does not apply to --kind table"),
        (["--d-model", 8, "--index", 1], "--index does not apply"),
        (["--d-model", 8, "--heads", 4], "--heads does not apply to --kind table"),
        (["--kind", "alibi", "--n-heads", 4], "No such option '--n-heads'"),
        (["--kind", "alibi", "--heads", 4, "--head", 4], "head must be < n_heads = 4"),
        (["--kind", "spiral"], "spiral"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(in_tmp, args, match):
    np.save("t.npy", fastpe.table(8, 8))
    np.save("one_d.npy", np.zeros(5))
    np.save("three_d.npy", np.zeros((2, 3, 4)))
    np.save("strings.npy", np.array([["a", "b"]]))
    (in_tmp / "broken.npy").write_bytes(b"\x93NUMPY garbage")
    (in_tmp / "notes.txt").write_text("x")
    for fake in ("fake.npy", "fake.npz", "fake.safetensors"):  # text files by another name
        (in_tmp / fake).write_text("hello\n")
    (in_tmp / "out.png").write_bytes(b"keep me")
    (in_tmp / "dir.png").mkdir()
    before = listing()
    result = run("plot", *args)
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert match in assert_one_line_error(result)
    assert listing() == before
    assert (in_tmp / "out.png").read_bytes() == b"keep me"


def test_existing_file_is_replaced_and_quiet_prints_nothing(in_tmp):
    (in_tmp / "pe.png").write_bytes(b"old")
    result = run("-q", "plot", "--d-model", "8", "--max-len", "8", "-o", "pe.png")
    assert result.exit_code == 0 and result.stdout == ""
    assert png_size("pe.png") == (800, 600)
    assert listing() == ["pe.png"]


@pytest.mark.any_backend
def test_without_matplotlib_the_error_names_the_install(in_tmp, monkeypatch):
    # as if never imported: neither in sys.modules nor bound on the package
    monkeypatch.delitem(sys.modules, "fastpe._plot", raising=False)
    monkeypatch.delattr(fastpe, "_plot", raising=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install 'fastpe\[plot\]'"):
        importlib.import_module("fastpe._plot")
    result = run("plot", "--d-model", 8, "--max-len", 8, "-o", "pe.png")
    assert result.exit_code == 1
    assert "pip install 'fastpe[plot]'" in assert_one_line_error(result, 1)
    assert listing() == []


@pytest.mark.any_backend
def test_help_and_import_do_not_load_matplotlib(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        import fastpe
        from fastpe.cli import main
        for args in (["--help"], ["plot", "--help"]):
            try:
                main(args, prog_name="fastpe")
            except SystemExit as exc:
                assert exc.code == 0, exc.code
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("matplotlib", "dask"))
        assert not heavy, heavy
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fastpe_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "plot" in proc.stdout
