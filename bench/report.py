"""Turn a saved pytest-benchmark run of ``bench/`` into the README's Markdown table.

Usage::

    python bench/report.py RUN.json [-o table.md] [--strict]

``RUN.json`` is what ``--benchmark-json=RUN.json`` wrote, or a file that ``--benchmark-save``
/ ``--benchmark-autosave`` put under ``.benchmarks/``.  Per workload, every implementation's
median (and best) time, its ratio to the fastest compiled fastpe backend and to the
yardstick (the faster way of writing the same bytes and nothing else), then the goals, met
or missed, with their figures.  ``--strict`` exits 1 when a goal is missed.

Reads nothing but the JSON file and the standard library, so it runs anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

MiB = 1 << 20


@dataclass
class Row:
    label: str
    role: str
    median: float  #: seconds, for the whole workload (estimated when ``scale != 1``)
    best: float
    rounds: int
    bytes_written: int
    scale: float = 1.0  #: the reference is timed on a slice: full-table time = measured x scale
    note: str = ""
    #: the families: how this row's values compare with fastpe's (checked before timing)
    agreement: dict | None = None

    @property
    def estimated(self) -> bool:
        return self.scale != 1.0


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 1000.0:
        return f"{seconds:,.0f} s"
    return f"{seconds:.3g} s"


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return "–"
    if r >= 100:
        return f"{r:,.0f}×"
    return f"{r:.2f}×" if r < 10 else f"{r:.1f}×"


def load(path: str) -> dict:
    with open(path) as fh:
        run = json.load(fh)
    if "benchmarks" not in run:
        raise SystemExit(f"{path}: not a pytest-benchmark JSON file (no 'benchmarks')")
    return run


def collect(run: dict) -> tuple[dict[str, dict], dict | None]:
    """``{workload: {"title", "kind", "rows": [Row...]}}`` in run order, and the memory record."""
    workloads: dict[str, dict] = {}
    memory = None
    for bench in run["benchmarks"]:
        info = bench.get("extra_info") or {}
        if "workload" not in info:
            continue
        if info.get("role") == "memory":
            memory = info
            continue
        stats = bench["stats"]
        scale = info.get("rows", 1) / info.get("rows_measured", info.get("rows", 1))
        row = Row(
            label=info.get("label", bench["name"]),
            role=info.get("role", "peer"),
            median=stats["median"] * scale,
            best=stats["min"] * scale,
            rounds=stats["rounds"],
            bytes_written=info.get("bytes", info.get("rows", 0) * info.get("d_model", 0) * 4),
            scale=scale,
            note=info.get("note", ""),
            agreement=info.get("agreement"),
        )
        entry = workloads.setdefault(
            info["workload"], {"title": info.get("workload_title", bench["group"]), "kind": info["kind"], "rows": []}
        )
        entry["rows"].append(row)
    return workloads, memory


def fastest(rows: list[Row], role: str) -> Row | None:
    candidates = [r for r in rows if r.role == role and not r.estimated]
    return min(candidates, key=lambda r: r.median) if candidates else None


def find(rows: list[Row], startswith: str) -> Row | None:
    return next((r for r in rows if r.label.startswith(startswith)), None)


def stamp_lines(run: dict) -> list[str]:
    mi = run.get("machine_info", {})
    fb = mi.get("fastpe_bench", {})
    versions = fb.get("versions", {})
    cpu = fb.get("cpu_model") or mi.get("cpu", {}).get("brand_raw", "?")
    cores = fb.get("cpus_usable") or mi.get("cpu", {}).get("count", "?")
    python = fb.get("python") or mi.get("python_version", "?")
    commit = run.get("commit_info", {})
    parts = [
        f"CPU: {cpu}, {cores} cores",
        f"Python {python}",
        *(
            f"{name} {versions[name]}"
            for name in ("numpy", "numba", "torch", "positional-encodings", "transformers", "diffusers")
            if versions.get(name)
        ),
    ]
    lines = [
        f"Measured {run.get('datetime', fb.get('date', '?'))[:19].replace('T', ' ')} UTC — " + ", ".join(parts) + ".",
        f"fastpe {fb.get('fastpe', '?')} (commit {str(commit.get('id', '?'))[:10]}"
        f"{', uncommitted changes' if commit.get('dirty') else ''}); backends {', '.join(fb.get('fastpe_backends', []))}; "
        f"numba threading layer {fb.get('numba_threading_layer', '?')} × {fb.get('numba_threads', '?')} threads; "
        f"torch threads {fb.get('torch_threads', '–')}.",
    ]
    load_start, load_end = fb.get("loadavg_at_start"), fb.get("loadavg_now")
    if load_start is not None:
        busy = max(load_start[0], (load_end or [0])[0]) > 0.5 * (cores if isinstance(cores, int) else 1)
        lines.append(
            f"Load average (1 min) {load_start[0]:.2f} at start, {load_end[0]:.2f} at the end"
            + (" — **the machine was busy: times are noisy**." if busy else ".")
        )
    return lines


def process_table(entry: dict) -> list[str]:
    """The CLI goal: whole-process times, each against the NumPy np.save process."""
    rows: list[Row] = entry["rows"]
    peer = fastest(rows, "peer")
    out = [
        f"### {entry['title']}",
        "",
        "| process | median | best | vs the np.save process | rounds |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        label = f"`{r.label}`"
        out.append(
            f"| {label} | {fmt_time(r.median)} | {fmt_time(r.best)} "
            f"| {fmt_ratio(r.median / peer.median if peer else None)} | {r.rounds} |"
        )
    return out


#: the families' workload kinds (``bench/peers.py``): their tables say how each row agrees
FAMILY_KINDS = ("family_table", "grid", "timestep", "add", "alibi", "t5", "t5_positions")


def fmt_agreement(a: dict | None) -> str:
    """``values_differing`` of ``values`` (and the largest difference), or "identical"."""
    if not a:
        return "–"
    if a["values_differing"] == 0:
        return "identical"
    share = 100.0 * a["values_differing"] / a["values"]
    return f"{share:.3g}% of values, ≤ {a['max_abs_diff']:.2g}"


def workload_table(entry: dict) -> list[str]:
    rows: list[Row] = entry["rows"]
    ours = fastest(rows, "fastpe")
    yard = fastest(rows, "yardstick")
    family = entry["kind"] in FAMILY_KINDS
    more = (" differs from fastpe |", " --- |") if family else ("", "")
    out = [
        f"### {entry['title']}",
        "",
        "| implementation | median | best | vs fastest fastpe | vs yardstick | GB/s | rounds |" + more[0],
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |" + more[1],
    ]
    for r in rows:
        tilde = "≈ " if r.estimated else ""
        name = r.label + (" (est. whole workload)" if r.estimated else "")
        if r is ours:
            name = f"**{name}**"
        gbs = r.bytes_written / r.median / 1e9 if r.median > 0 else 0.0
        out.append(
            f"| {name} | {tilde}{fmt_time(r.median)} | {tilde}{fmt_time(r.best)} "
            f"| {tilde}{fmt_ratio(r.median / ours.median if ours else None)} "
            f"| {tilde}{fmt_ratio(r.median / yard.median if yard else None)} | {gbs:.2f} | {r.rounds} |"
            + (f" {fmt_agreement(r.agreement) if r.role != 'yardstick' else '–'} |" if family else "")
        )
    notes = [r for r in rows if r.estimated]
    out.append("")
    peers = [r for r in rows if r.role == "peer"]
    if ours and peers:
        out.append(
            f"Each peer's median ÷ {ours.label}'s (same run): "
            + "; ".join(f"{p.label} {fmt_ratio(p.median / ours.median)}" for p in peers)
            + "."
        )
    if yard:
        out.append(f"Yardstick here: {yard.label.removeprefix('yardstick: ')} ({fmt_time(yard.median)}), the faster one.")
    for r in notes:
        out.append(f"{r.label}: {r.note}.")
    if family:
        out += [f"{r.label}: {r.note}." for r in peers if r.note]
    spread = [r.label for r in rows if r.best > 0 and r.median / r.best > 2.0]
    if spread:
        out.append(f"Median more than 2× the best (a busy machine, or a thread pool waiting): {', '.join(spread)}.")
    return out


@dataclass
class Goal:
    text: str
    met: bool | None  #: None: could not be evaluated (a row is missing)
    figure: str


def goals(workloads: dict[str, dict], memory: dict | None) -> list[Goal]:
    result: list[Goal] = []

    def rows(key):
        return workloads.get(key, {}).get("rows", [])

    def speedup(key, peer_prefix, at_least, what):
        rs = rows(key)
        ours, peer = fastest(rs, "fastpe"), find(rs, peer_prefix)
        if not ours or not peer:
            result.append(Goal(what, None, "not measured in this run"))
            return
        x = peer.median / ours.median
        result.append(
            Goal(what, x >= at_least, f"{x:.1f}× ({ours.label} {fmt_time(ours.median)} vs {fmt_time(peer.median)})")
        )

    speedup("table-2048x512", "torch tutorial", 10, "table 2048x512: ≥ 10× faster than the torch tutorial module")
    speedup("table-2048x512", "NumPy f32", 8, "table 2048x512: ≥ 8× faster than NumPy float32")
    speedup("table-131072x1024", "torch tutorial", 15, "table 131072x1024: ≥ 15× faster than the torch tutorial module")

    def within_yardstick(key, at_most, what):
        rs = rows(key)
        ours, yard = fastest(rs, "fastpe"), fastest(rs, "yardstick")
        if ours and yard:
            x = ours.median / yard.median
            result.append(
                Goal(what, x <= at_most, f"{x:.2f}× ({fmt_time(ours.median)} vs {fmt_time(yard.median)}, {yard.label})")
            )
        else:
            result.append(Goal(what, None, "not measured in this run"))

    within_yardstick("table-131072x1024", 1.3, "table 131072x1024: ≤ 1.3× the yardstick (fresh array, same bytes)")

    speedup("forward-1Mx64", "NumPy f32", 5, "forward 1M x 64: ≥ 5× faster than NumPy float32")

    for shape in ("1x32x4096x128", "8x32x512x128"):
        key = f"rope-apply-qk-{shape}"
        speedup(key, "HF transformers", 25, f"RoPE apply_qk_ {shape}: ≥ 25× faster than HF's torch apply_rotary_pos_emb")
        within_yardstick(key, 2.0, f"RoPE apply_qk_ {shape}: ≤ 2× the in-place read+write yardstick")
    within_yardstick(
        "rope-cos-sin-131072x128", 1.5, "RoPE cos_sin 131072x128: ≤ 1.5× the yardstick (fresh arrays, same bytes)"
    )

    rs = rows("cli-2048x512")
    ours, peer = fastest(rs, "fastpe"), fastest(rs, "peer")
    what = "CLI table 2048x512: whole process ≤ 2× a NumPy np.save process"
    if ours and peer:
        x = ours.median / peer.median
        result.append(Goal(what, x <= 2.0, f"{x:.2f}× ({fmt_time(ours.median)} vs {fmt_time(peer.median)})"))
    else:
        result.append(Goal(what, None, "not measured in this run"))

    what = "peak memory of fastpe.table(1024, 131072) ≤ output + 64 MiB"
    if memory:
        extra, limit, outb = memory["peak_extra_bytes"], memory["limit_bytes"], memory["output_bytes"]
        result.append(
            Goal(
                what, extra <= limit,
                f"+{extra / MiB:.1f} MiB over the warmed-up process for a {outb / MiB:.0f} MiB table "
                f"(limit {limit / MiB:.0f} MiB; backend {memory.get('backend', '?')})",
            )
        )
    else:
        result.append(Goal(what, None, "not measured in this run"))
    return result


def render(run: dict) -> tuple[str, list[Goal]]:
    workloads, memory = collect(run)
    lines = ["## Benchmarks", "", *stamp_lines(run), ""]
    kinds = {entry["kind"] for entry in workloads.values()}
    lines += [
        "Median of one-call rounds after warm-up (JIT compiled or loaded, pools started). "
        "*vs* columns: median ÷ the fastest compiled fastpe backend's median, and ÷ the yardstick's "
        "(the time to allocate and write the same bytes and nothing else: `np.empty` + `fill(0)` or a "
        "numba `prange` fill, whichever is faster; for in-place work, one parallel read and write "
        "of the input).",
        "",
    ]
    if kinds & {"table", "forward"}:
        lines += [
            "Tables are fresh arrays per call for everyone; "
            "`forward` writes into an output allocated once. The torch and NumPy peers run the PyTorch "
            "tutorial's formula as written (float32, `zeros` then `sin`/`cos` into even/odd columns); "
            "peers take `forward`'s uint32 positions cast to float32. All peers here use fastpe's column layout.",
            "",
        ]
    if kinds & set(FAMILY_KINDS):
        lines += [
            "The families (fairseq/M2M100 tables, MAE grids, diffusers timesteps, `add_`, ALiBi, "
            "T5 buckets): each peer is its library's own function, or the same formula written in "
            "NumPy or torch; outputs are fresh arrays or tensors for everyone, except `add_`'s, "
            "which works in place on an input restored (untimed) before every round. What a peer "
            "computes once before timing is said under its table. Every row's values are checked "
            "against fastpe's before timing; the last column counts those not identical to fastpe's "
            "and gives the largest difference (the peers' float32 formulas round the angle or "
            "the slope). fastpe's float16 values are correctly rounded from the exact value; "
            "torch's float32 result cast with `.half()` is not (it rounds an approximation).",
            "",
        ]
    for key, entry in workloads.items():
        lines += process_table(entry) if entry["kind"] == "process" else workload_table(entry)
        lines.append("")
    if memory:
        lines += [
            f"### {memory['workload_title']}",
            "",
            f"Peak RSS {memory['peak_rss'] / MiB:.1f} MiB − {memory['baseline_rss'] / MiB:.1f} MiB after imports "
            f"and warm-up = **+{memory['peak_extra_bytes'] / MiB:.1f} MiB** for a "
            f"{memory['output_bytes'] / MiB:.0f} MiB table (backend {memory.get('backend', '?')}).",
            "",
        ]
    met = goals(workloads, memory)
    measured = [g for g in met if g.met is not None]
    if measured:  # a run of some workloads only (pytest -k) shows only their goals
        lines += ["### Goals", ""]
        for g in measured:
            lines.append(f"- {g.text}: {'met' if g.met else '**missed**'} — {g.figure}")
        if len(measured) < len(met):
            lines.append(f"- {len(met) - len(measured)} more not measured in this run")
        lines.append("")
    return "\n".join(lines), met


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Markdown table of a saved fastpe benchmark run.")
    parser.add_argument("run", help="pytest-benchmark JSON (--benchmark-json or --benchmark-save output)")
    parser.add_argument("-o", "--output", help="also write the Markdown here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args(argv)
    text, met = render(load(args.run))
    sys.stdout.write(text)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
        print(f"\nwrote {args.output}", file=sys.stderr)
    missed = [g for g in met if g.met is False]
    print(
        f"goals: {sum(g.met is True for g in met)} met, {len(missed)} missed, "
        f"{sum(g.met is None for g in met)} not measured",
        file=sys.stderr,
    )
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
