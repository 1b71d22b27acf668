"""bench/report.py on a small fake run: the goals it reads (met, missed, not measured) and
``--docs``, which rewrites the text between the documents' markers and nothing else.

Nothing here is timed: the run is a hand-made pytest-benchmark JSON whose medians are chosen
so each goal's outcome is known.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_backend

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "bench" / "report.py"

if not REPORT.is_file():
    pytest.skip("bench/ is not in this checkout", allow_module_level=True)


def _load_report():
    spec = importlib.util.spec_from_file_location("bench_report_under_test", REPORT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


report = _load_report()


def _bench(workload, impl, role, median, *, label=None, backend=None, kind="table", iterations=1, rounds=50):
    return {
        "group": workload,
        "name": f"test_speed[{workload}-{impl}]",
        "fullname": f"bench/test_bench.py::test_speed[{workload}-{impl}]",
        "stats": {"median": median, "min": median * 0.9, "rounds": rounds, "iterations": iterations},
        "extra_info": {
            "workload": workload, "workload_title": f"title of {workload}", "kind": kind,
            "implementation": impl, "label": label or impl, "role": role, "backend": backend,
            "rows": 2048, "rows_measured": 2048, "d_model": 512, "bytes": 2048 * 512 * 4,
        },
    }


def fake_run() -> dict:
    """Medians chosen so that: table 2048x512 meets both goals (20x torch, 1.25x the write);
    the decode step misses both (20 us, 4x HF), timed in batches of 100 calls; the bridge
    meets its 1.2x (1.1x); the CLI misses its 1.5x (1.6x); the rest are not measured."""
    b = [
        _bench("table-2048x512", "yardstick-numba", "yardstick", 80e-6, label="yardstick: numba fill"),
        _bench("table-2048x512", "numba", "fastpe", 100e-6, label="fastpe numba", backend="numba"),
        _bench("table-2048x512", "cython", "fastpe", 150e-6, label="fastpe cython", backend="cython"),
        _bench("table-2048x512", "torch-tutorial", "peer", 2e-3, label="torch tutorial module (f32)"),
        _bench("rope-decode-1x32x1x128", "numba", "fastpe", 20e-6, label="fastpe numba: Rotary.apply_qk_",
               backend="numba", kind="rope_decode", iterations=100),
        _bench("rope-decode-1x32x1x128", "fastpe-rope-apply-fn", "fastpe", 30e-6, label="fastpe.rope.apply_qk_",
               kind="rope_decode", iterations=70),
        _bench("rope-decode-1x32x1x128", "hf-rope-step", "peer", 80e-6, label="HF step", kind="rope_decode",
               iterations=25),
        _bench("rope-cos-sin-32768x128", "fastpe-torch", "fastpe", 1.1e-3, label="bridge", kind="rope_cos_sin"),
        _bench("rope-cos-sin-32768x128", "fastpe-rope-cos-sin-fn", "fastpe", 1.0e-3, label="numpy path",
               kind="rope_cos_sin"),
        _bench("cli-2048x512", "fastpe-cli", "fastpe", 0.32, label="fastpe table", kind="process"),
        _bench("cli-2048x512", "numpy-save", "peer", 0.20, label="np.save", kind="process"),
    ]
    return {
        "datetime": "2026-12-01T15:50:00.000000",
        "commit_info": {"id": "0123456789abcdef", "dirty": False},
        "machine_info": {"fastpe_bench": {
            "cpu_model": "Test CPU", "cpus_usable": 2, "python": "3.11.0", "fastpe": "0.1.0",
            "fastpe_backends": ["cython", "numba", "python"], "numba_threading_layer": "tbb",
            "numba_threads": 2, "torch_threads": 2, "versions": {"numpy": "2.0", "torch": "2.13.0"},
            "loadavg_at_start": [1.5, 1.0, 1.0], "loadavg_now": [2.5, 1.0, 1.0],
        }},
        "benchmarks": b,
    }


def outcome(goals):
    return {g.text.split(":")[0] + ":" + g.limit: g.met for g in goals}


def test_goals_are_the_table_and_read_the_right_rows():
    workloads, memory = report.collect(fake_run())
    goals = report.goals(workloads, memory)
    assert len(goals) == 14  # ten rows of work, four of them with two goals
    met = {g.text: g.met for g in goals}
    table = [g for g in goals if g.work == "table 2048x512 float32"]
    assert [g.met for g in table] == [True, True]
    assert table[0].ratio == "20.0× faster" and table[0].other == "torch tutorial module, 2 ms" and table[1].ratio == "1.25× its time"
    decode = [g for g in goals if g.work.startswith("RoPE decode")]
    assert [g.met for g in decode] == [False, False]
    assert decode[0].ours == "20 µs"  # the Rotary (backend) row, not the module function
    assert "fastpe.rope.apply_qk_ 30 µs" in decode[0].figure
    assert decode[1].ratio == "4.0× faster"
    bridge = next(g for g in goals if g.work.startswith("torch bridge"))
    assert bridge.met is True and bridge.ratio == "1.10× its time"
    cli = next(g for g in goals if "whole process" in g.work)
    assert cli.met is False and cli.ratio == "1.60× its time"
    assert sum(v is None for v in met.values()) == 8  # 131072 table x2, apply x2, BLOOM, float16, M-RoPE, axial


def _pair(workload, other, ours_median, other_median, ratio, *, other_label=None):
    return {
        "group": f"paired rounds: {workload}",
        "name": f"test_goal_pair[{workload}-{other}]",
        "fullname": f"bench/test_bench.py::test_goal_pair[{workload}-{other}]",
        "stats": {"median": ours_median + other_median, "min": ours_median, "rounds": 40, "iterations": 1},
        "extra_info": {"goal_pair": {
            "workload": workload, "ours": "cython", "ours_label": "fastpe cython", "other": other,
            "other_label": other_label or other, "rounds": 40, "ours_median": ours_median,
            "other_median": other_median, "ratio_median": ratio,
        }},
    }


def test_paired_rounds_judge_the_goals_they_pair():
    """A goal whose two calls were timed again in the same rounds takes the median per-round
    ratio, not the rows' medians timed apart: here the rows say 20x torch and 1.25x the
    write (both met), the paired rounds 8x and 2.5x (both missed); of two yardsticks paired,
    the one faster in its rounds stands; goals without a pair keep the rows' medians."""
    run = fake_run()
    run["benchmarks"] += [
        _pair("table-2048x512", "torch-tutorial", 200e-6, 1.6e-3, 1 / 8),
        _pair("table-2048x512", "yardstick-fill", 200e-6, 120e-6, 1.6, other_label="np fill"),
        _pair("table-2048x512", "yardstick-numba", 210e-6, 84e-6, 2.5, other_label="numba fill"),
        _pair("alibi-bloom-32x2048", "hf-bloom", 10e-6, 30e-6, 1 / 3),  # no rows: nothing to judge
    ]
    # a pair row without a workload of rows must not reach the tables
    workloads, memory = report.collect(run)
    assert workloads["table-2048x512"]["pairs"]["torch-tutorial"]["ratio_median"] == 1 / 8
    assert not workloads["alibi-bloom-32x2048"]["rows"]
    goals = report.goals(workloads, memory)
    table = [g for g in goals if g.work == "table 2048x512 float32"]
    assert [g.met for g in table] == [False, False]
    assert table[0].ratio == "8.0× faster" and table[0].other == "torch tutorial module, 1.6 ms"
    assert table[0].ours == "200 µs" and "40 paired rounds" in table[0].figure
    assert "rows timed apart: 100 µs vs 2 ms" in table[0].figure
    assert table[1].ratio == "2.50× its time" and "numba fill 84 µs" in table[1].figure
    bloom = next(g for g in goals if g.work.startswith("BLOOM"))
    assert bloom.met is None  # a pair alone, without fastpe's row, is not a measurement
    decode = [g for g in goals if g.work.startswith("RoPE decode")]
    assert decode[1].ratio == "4.0× faster"  # unpaired: the rows' medians
    markdown, _ = report.render(run)
    assert "median per-round ratio of 40 paired rounds" in markdown
    assert "title of alibi" not in markdown and "### alibi" not in markdown


def test_batched_rows_say_so():
    text, _ = report.render(fake_run())
    assert "| 50 × 100 calls |" in text
    assert "Rows timed in batches" in text
    assert "**missed**" in text and "8 more not measured in this run" in text


PROSE_BEFORE = "# Benchmarks\r\n\r\nHand-written prose, CRLF, ünïcode — kept.\r\n\r\n"
PROSE_AFTER = "\r\nMore prose after the table.\r\n\twith a tab, no final newline"


def _docs(tmp_path, *, readme_markers=True):
    tables = tmp_path / "docs" / "benchmarks.md"
    readme = tmp_path / "README.md"
    tables.parent.mkdir()
    tables.write_bytes(
        (PROSE_BEFORE + "<!-- bench:table:begin -->\r\nold table\r\n<!-- bench:table:end -->" + PROSE_AFTER)
        .encode()
    )
    body = "<!-- bench:summary:begin -->\nold summary\n<!-- bench:summary:end -->" if readme_markers else "none here"
    readme.write_bytes(("# fastpe\n\nIntro.\n\n" + body + "\n\n## Next section\n").encode())
    return tables, readme


def _outside(data: bytes, begin: str, end: str) -> tuple[bytes, bytes]:
    i = data.index(begin.encode()) + len(begin)
    j = data.index(end.encode())
    return data[:i], data[j:]


def test_docs_rewrites_between_the_markers_only(tmp_path, capsys):
    run_path = tmp_path / "run.json"
    run_path.write_text(json.dumps(fake_run()))
    tables, readme = _docs(tmp_path)
    before = {p: p.read_bytes() for p in (tables, readme)}
    argv = [str(run_path), "-q", "--docs-tables", str(tables), "--docs-summary", str(readme)]
    assert report.main(argv) == 0
    for path, markers in ((tables, report.TABLE_MARKERS), (readme, report.SUMMARY_MARKERS)):
        new = path.read_bytes()
        assert _outside(new, *markers) == _outside(before[path], *markers)  # byte for byte
        assert new != before[path]
    table_text = tables.read_text(encoding="utf-8")
    assert "old table" not in table_text and "### Goals" in table_text and "## Benchmarks" not in table_text
    assert "### title of rope-decode-1x32x1x128" in table_text
    summary = readme.read_text(encoding="utf-8")
    assert "old summary" not in summary
    assert "| table 2048x512 float32 | 100 µs | torch tutorial module, 2 ms | 20.0× faster | ≥ 10× faster | met |" in summary
    assert "**3 of 14 goals met** (8 not measured in this run)" in summary  # table x2, the bridge
    assert "(docs/benchmarks.md)" in summary
    # a second run changes nothing
    again = {p: p.read_bytes() for p in (tables, readme)}
    assert report.main(argv) == 0
    assert {p: p.read_bytes() for p in (tables, readme)} == again
    assert "nothing" in capsys.readouterr().err


def test_docs_missing_marker_fails_and_writes_nothing(tmp_path, capsys):
    run_path = tmp_path / "run.json"
    run_path.write_text(json.dumps(fake_run()))
    tables, readme = _docs(tmp_path, readme_markers=False)
    before = {p: p.read_bytes() for p in (tables, readme)}
    argv = [str(run_path), "-q", "--docs-tables", str(tables), "--docs-summary", str(readme)]
    assert report.main(argv) == 2
    err = capsys.readouterr().err
    assert str(readme) in err and "<!-- bench:summary:begin -->" in err and "has no marker" in err
    assert {p: p.read_bytes() for p in (tables, readme)} == before  # the tables' file untouched too


@pytest.mark.parametrize(
    "text, says",
    [
        ("<!-- bench:table:begin -->\nx\n", "has no marker '<!-- bench:table:end -->'"),
        ("<!-- bench:table:begin --><!-- bench:table:begin --><!-- bench:table:end -->", "has 2 of the marker"),
        ("<!-- bench:table:end -->\n<!-- bench:table:begin -->", "comes before"),
    ],
)
def test_replace_between_refuses_bad_markers(text, says):
    with pytest.raises(report.MarkerError, match=says.replace("(", r"\(")):
        report.replace_between(text, report.TABLE_MARKERS, "new", "doc.md")


def test_replace_between_keeps_every_outside_byte():
    text = "a\r\n<!-- bench:table:begin -->old<!-- bench:table:end -->\r\nz"
    got = report.replace_between(text, report.TABLE_MARKERS, "\nnew\n", "doc.md")
    assert got == "a\r\n<!-- bench:table:begin -->\nnew\n<!-- bench:table:end -->\r\nz"
