"""Turn a saved pytest-benchmark run of ``bench/`` into the README's Markdown table.

Usage::

    python bench/report.py RUN.json [-o table.md] [--strict] [--docs]

``RUN.json`` is what ``--benchmark-json=RUN.json`` wrote, or a file that ``--benchmark-save``
/ ``--benchmark-autosave`` put under ``.benchmarks/``.  Per workload, every implementation's
median (and best) time, its ratio to the fastest compiled fastpe backend and to the
yardstick (the faster way of writing the same bytes and nothing else), then the goals, met
or missed, with their figures.  ``--strict`` exits 1 when a goal is missed.  ``--docs`` rewrites the documentation's copies
in place: the full tables between ``<!-- bench:table:begin -->`` and ``<!-- bench:table:end -->``
in ``docs/benchmarks.md`` and a short summary (one row per goal) between
``<!-- bench:summary:begin -->`` and ``<!-- bench:summary:end -->`` in ``README.md``, keeping
every byte outside the markers; a missing marker pair is an error (exit 2) and writes nothing.

Reads nothing but the JSON file and the standard library, so it runs anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
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
    key: str = ""  #: the implementation's key (``bench/peers.py``)
    backend: str | None = None  #: the fastpe backend of a backend row
    #: calls per timed round: > 1 for work of microseconds, timed in batches (the times
    #: are per call: the round's time divided by this)
    iterations: int = 1
    #: a pair timed in the same rounds (bench/peers.py's Alternated): both medians and the
    #: median per-round ratio, this row's call over the other's
    paired: dict | None = None

    @property
    def estimated(self) -> bool:
        return self.scale != 1.0


def fmt_time(seconds: float) -> str:
    if seconds < 10e-6:  # the decode step's microseconds: a digit more
        return f"{seconds * 1e6:.1f} µs"
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
        pair = info.get("goal_pair")
        if pair:  # a goal's two rows timed again in the same rounds (test_bench.test_goal_pair)
            entry = workloads.setdefault(pair["workload"], {"title": pair["workload"], "kind": "", "rows": []})
            entry.setdefault("pairs", {})[pair["other"]] = pair
            continue
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
            key=info.get("implementation", ""),
            backend=info.get("backend"),
            iterations=int(stats.get("iterations", info.get("iterations", 1)) or 1),
            paired=info.get("paired"),
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


def by_key(rows: list[Row], key: str) -> Row | None:
    return next((r for r in rows if r.key == key), None)


def fmt_rounds(r: Row) -> str:
    return f"{r.rounds} × {r.iterations} calls" if r.iterations > 1 else str(r.rounds)


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
            f"| {fmt_ratio(r.median / peer.median if peer else None)} | {fmt_rounds(r)} |"
        )
    return out


#: the families' workload kinds (``bench/peers.py``): their tables say how each row agrees
FAMILY_KINDS = ("family_table", "grid", "timestep", "add", "alibi", "t5", "t5_positions", "mrope", "axial", "calendar", "temporal")
FAMILY_KINDS += ("deberta", "deberta_positions", "shaw")
FAMILY_KINDS += ("fourier", "time_encoding")


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
            f"| {tilde}{fmt_ratio(r.median / yard.median if yard else None)} | {gbs:.2f} | {fmt_rounds(r)} |"
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
    batched = [r for r in rows if r.iterations > 1]
    if batched:
        out.append(
            "Rows timed in batches (rounds × calls): each round times that many calls back to back and "
            "its time is divided by their number, so a call of microseconds is not lost in the timer's "
            "resolution and the timing loop; median and best are per call."
        )
    spread = [r.label for r in rows if r.best > 0 and r.median / r.best > 2.0]
    if spread:
        out.append(f"Median more than 2× the best (a busy machine, or a thread pool waiting): {', '.join(spread)}.")
    return out


@dataclass
class Goal:
    text: str
    met: bool | None  #: None: could not be evaluated (a row is missing)
    figure: str
    work: str = ""  #: the README summary's first column
    ours: str = ""  #: fastpe's median, formatted
    other: str = ""  #: what it is measured against, and its median
    ratio: str = ""  #: the measured ratio, phrased as the goal is
    limit: str = ""  #: the goal, short ("≥ 10×")


#: the workloads and implementations the goals read (``bench/peers.py``'s keys)
DECODE = "rope-decode-1x32x1x128"
BRIDGE = "rope-cos-sin-32768x128"
APPLY = "rope-apply-qk-1x32x4096x128"


def goals(workloads: dict[str, dict], memory: dict | None = None) -> list[Goal]:
    """The goals, met or missed: fastpe against its peer (at least ``n``× faster) or against
    a limit (at most ``n``× its time), each pair measured in the same run.  ``memory`` is
    shown in the report but is not a goal (the suite's memory test asserts it)."""
    result: list[Goal] = []

    def rows(key):
        return workloads.get(key, {}).get("rows", [])

    def missing(what, work, limit):
        result.append(Goal(what, None, "not measured in this run", work, "–", "–", "–", limit))

    def pair_for(key, others):
        """The paired rounds of workload ``key`` against one of the rows ``others`` (the one
        whose call was fastest in its rounds), or ``None``."""
        pairs = workloads.get(key, {}).get("pairs", {})
        found = [pairs[r.key] for r in others if r is not None and r.key in pairs]
        return min(found, key=lambda p: p["other_median"]) if found else None

    def apart(ours, other):
        return f"rows timed apart: {fmt_time(ours.median)} vs {fmt_time(other.median)}"

    def paired_detail(x, pair, ours, other):
        return (f"{x:.2f}× (median per-round ratio of {pair['rounds']} paired rounds: fastpe {pair['ours']} "
                f"{fmt_time(pair['ours_median'])} vs {pair['other_label']} {fmt_time(pair['other_median'])}; "
                f"{apart(ours, other)})")

    def faster(key, ours, peer, at_least, what, work, short):
        """``peer / ours >= at_least``: the per-round ratio of the pair's paired rounds where
        they were timed (test_bench.test_goal_pair), else the rows' medians (``short``: the
        peer, in the summary)."""
        limit = f"≥ {at_least:g}× faster"
        if not ours or not peer:
            return missing(what, work, limit)
        pair = pair_for(key, [peer])
        if pair:
            x = 1.0 / pair["ratio_median"]
            ours_t, peer_t, detail = pair["ours_median"], pair["other_median"], paired_detail(x, pair, ours, peer)
        else:
            x = peer.median / ours.median
            ours_t, peer_t = ours.median, peer.median
            detail = f"{x:.2f}× ({ours.label} {fmt_time(ours.median)} vs {fmt_time(peer.median)})"
        ratio = f"{x:.1f}× faster" if x >= 1 else f"{1 / x:.1f}× slower"
        result.append(Goal(what, x >= at_least, detail, work, fmt_time(ours_t), f"{short}, {fmt_time(peer_t)}",
                           ratio, limit))

    def within(key, ours, other, at_most, what, work, short, candidates=()):
        """``ours / other <= at_most``, paired as :func:`faster` is (``candidates``: the rows
        whose pairs may stand for ``other``: every yardstick; ``short``: the other, in the
        summary)."""
        limit = f"≤ {at_most:g}× its time"
        if not ours or not other:
            return missing(what, work, limit)
        pair = pair_for(key, list(candidates) or [other])
        if pair:
            x = pair["ratio_median"]
            ours_t, other_t, detail = pair["ours_median"], pair["other_median"], paired_detail(x, pair, ours, other)
        else:
            x = ours.median / other.median
            ours_t, other_t = ours.median, other.median
            detail = f"{x:.2f}× ({ours.label} {fmt_time(ours.median)} vs {other.label} {fmt_time(other.median)})"
        result.append(Goal(what, x <= at_most, detail, work, fmt_time(ours_t), f"{short}, {fmt_time(other_t)}",
                           f"{x:.2f}× its time", limit))

    def yardsticks(key):
        return [r for r in rows(key) if r.role == "yardstick"]

    def backends(key):
        """The fastest compiled fastpe backend's row (not the wrappers measured beside them)."""
        candidates = [r for r in rows(key) if r.role == "fastpe" and r.backend and not r.estimated]
        return min(candidates, key=lambda r: r.median) if candidates else None

    # RoPE decode step: through a Rotary (the backend rows); the module function is shown
    work = "RoPE decode step, q 1x32x1x128 + k 1x8x1x128"
    rotary, fn = backends(DECODE), by_key(rows(DECODE), "fastpe-rope-apply-fn")
    what = "RoPE decode step: ≤ 5 µs a call through a Rotary"
    if rotary:
        also = f"; the module function fastpe.rope.apply_qk_ {fmt_time(fn.median)}" if fn else ""
        result.append(Goal(
            what, rotary.median <= 5e-6, f"{fmt_time(rotary.median)} ({rotary.label}{also})",
            work, fmt_time(rotary.median), "–", f"{rotary.median * 1e6:.1f} µs a call", "≤ 5 µs a call",
        ))
    else:
        missing(what, work, "≤ 5 µs")
    faster(DECODE, rotary, by_key(rows(DECODE), "hf-rope-step"), 10,
           "RoPE decode step: ≥ 10× faster than HF's step (LlamaRotaryEmbedding cos/sin + apply_rotary_pos_emb)",
           work, "HF's step (its rotary module + apply)")

    for key, at_least, at_most, work in (
        ("table-2048x512", 10, 2.0, "table 2048x512 float32"),
        ("table-131072x1024", 15, 1.15, "table 131072x1024 float32"),
    ):
        ours = fastest(rows(key), "fastpe")
        faster(key, ours, by_key(rows(key), "torch-tutorial"), at_least,
               f"{work}: ≥ {at_least}× faster than the torch tutorial module", work, "torch tutorial module")
        within(key, ours, fastest(rows(key), "yardstick"), at_most,
               f"{work}: ≤ {at_most:g}× the fresh write of its bytes (yardstick)", work, "fresh write of the bytes",
               yardsticks(key))

    work = "RoPE apply_qk_ 1x32x4096x128"
    ours = fastest(rows(APPLY), "fastpe")
    faster(APPLY, ours, by_key(rows(APPLY), "hf-torch-rope"), 25,
           f"{work}: ≥ 25× faster than HF's apply_rotary_pos_emb alone (caches given)", work,
           "HF `apply_rotary_pos_emb` alone")
    within(APPLY, ours, fastest(rows(APPLY), "yardstick"), 1.3,
           f"{work}: ≤ 1.3× the in-place read+write yardstick", work, "in-place read+write", yardsticks(APPLY))

    work = "torch bridge cos/sin 32768x128"
    bridge, numpy_path = by_key(rows(BRIDGE), "fastpe-torch"), by_key(rows(BRIDGE), "fastpe-rope-cos-sin-fn")
    what = ("torch bridge caches 32768x128 (fastpe.torch.RotaryEmbedding.cos_sin): within 1.2× of "
            "the NumPy path fastpe.rope.cos_sin")
    if bridge and numpy_path and bridge.paired and numpy_path.paired:
        # the rows alternate round by round, each running the pair in the other order: the
        # geometric mean of their per-round ratios cancels which call ran second, and neither
        # drifts with the load between the rows as their medians do
        x = (bridge.paired["ratio_median"] / numpy_path.paired["ratio_median"]) ** 0.5
        result.append(Goal(
            what, x <= 1.2, f"{x:.2f}× (median per-round ratio, the two rows alternated; row medians "
            f"{bridge.label} {fmt_time(bridge.median)}, {numpy_path.label} {fmt_time(numpy_path.median)})",
            work, fmt_time(bridge.median), f"`fastpe.rope.cos_sin` (NumPy), {fmt_time(numpy_path.median)}",
            f"{x:.2f}× its time (per-round ratio)", "≤ 1.2× its time",
        ))
    else:
        within(BRIDGE, bridge, numpy_path, 1.2, what, work, "`fastpe.rope.cos_sin` (NumPy)")

    key, work = "alibi-bloom-32x2048", "BLOOM ALiBi 32 heads x 2048 keys"
    faster(key, fastest(rows(key), "fastpe"), by_key(rows(key), "hf-bloom"), 1,
           f"{work}: ≥ 1× HF's build_alibi_tensor", work, "HF `build_alibi_tensor`")

    key, work = "table-f16-2048x512", "table 2048x512 float16"
    faster(key, fastest(rows(key), "fastpe"), by_key(rows(key), "torch-tutorial-half"), 1,
           f"{work}: ≥ 1× torch's float32 table then .half()", work, "torch f32 table `.half()`")

    key, work = "mrope-4096-2images", "M-RoPE position ids, 4096 tokens, two images"
    faster(key, fastest(rows(key), "fastpe"), by_key(rows(key), "hf-mrope"), 10,
           f"{work}: ≥ 10× HF's get_rope_index", work, "HF `get_rope_index`")

    key, work = "axial-flux-64x64", "axial RoPE caches, FLUX 64x64"
    faster(key, fastest(rows(key), "fastpe"), by_key(rows(key), "diffusers-flux"), 10,
           f"{work}: ≥ 10× diffusers' FluxPosEmbed", work, "diffusers `FluxPosEmbed`")

    rs = rows("cli-2048x512")
    within("cli-2048x512", fastest(rs, "fastpe"), fastest(rs, "peer"), 1.5,
           "`fastpe table --d-model 512 --max-len 2048`: whole process ≤ 1.5× a NumPy-only process "
           "saving the same array", "`fastpe table --d-model 512 --max-len 2048`, whole process",
           "NumPy-only process")
    return result


def render(run: dict, heading: bool = True) -> tuple[str, list[Goal]]:
    """The Markdown of a run (stamp, every workload's table, the goals) and the goals.
    ``heading=False`` leaves out the top ``## Benchmarks`` line (a document gives its own)."""
    workloads, memory = collect(run)
    lines = [*(["## Benchmarks", ""] if heading else []), *stamp_lines(run), ""]
    kinds = {entry["kind"] for entry in workloads.values()}
    lines += [
        "Median of timed rounds after warm-up (JIT compiled or loaded, pools started): one call a "
        "round, or for calls of microseconds a batch of calls divided by their number (the rounds "
        "column says rounds × calls). "
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
        if not entry["rows"]:  # paired rounds of a workload whose rows were not timed
            continue
        lines += process_table(entry) if entry["kind"] == "process" else workload_table(entry)
        lines.append("")
    if memory:
        lines += [
            f"### {memory['workload_title']}",
            "",
            f"Peak RSS {memory['peak_rss'] / MiB:.1f} MiB − {memory['baseline_rss'] / MiB:.1f} MiB after imports "
            f"and warm-up = **+{memory['peak_extra_bytes'] / MiB:.1f} MiB** for a "
            f"{memory['output_bytes'] / MiB:.0f} MiB table (backend {memory.get('backend', '?')}); "
            f"the suite's test requires at most the output + {(memory['limit_bytes'] - memory['output_bytes']) // MiB} MiB.",
            "",
        ]
    met = goals(workloads, memory)
    measured = [g for g in met if g.met is not None]
    if measured:  # a run of some workloads only (pytest -k) shows only their goals
        lines += ["### Goals", "",
                  "A goal between two calls of milliseconds (the 131072x1024 table, `apply_qk_`) is judged "
                  "on the two calls timed again in the same rounds, which of them runs first alternating "
                  "round by round: the median of their per-round ratios (and their medians in those "
                  "rounds), since rows timed seconds apart drift apart with the machine's load; the rows' "
                  "own medians are shown beside. Shorter calls are judged on their rows, whose rounds "
                  "take a second or two.", ""]
        for g in measured:
            lines.append(f"- {g.text}: {'met' if g.met else '**missed**'} — {g.figure}")
        if len(measured) < len(met):
            lines.append(f"- {len(met) - len(measured)} more not measured in this run")
        lines.append("")
    return "\n".join(lines), met


# ------------------------------------------------------------------ the documents' tables

#: the documents ``--docs`` rewrites (relative to the repository root), and their markers
DOCS_TABLES = "docs/benchmarks.md"
DOCS_SUMMARY = "README.md"
TABLE_MARKERS = ("<!-- bench:table:begin -->", "<!-- bench:table:end -->")
SUMMARY_MARKERS = ("<!-- bench:summary:begin -->", "<!-- bench:summary:end -->")


class MarkerError(Exception):
    """A document lacks its marker pair (or has it more than once, or out of order)."""


def summary(run: dict, met: list[Goal], tables_path: str = DOCS_TABLES) -> str:
    """The README's short summary: when and where, one row per goal (fastpe's median, what it
    is measured against, the ratio, the goal, met or not), and how many goals were met."""
    mi = run.get("machine_info", {}).get("fastpe_bench", {})
    when = run.get("datetime", mi.get("date", "?"))[:10]
    cpu = f"{mi.get('cpu_model', '?')}, {mi.get('cpus_usable', '?')} cores"
    load = ""
    if mi.get("loadavg_at_start") and mi.get("loadavg_now"):
        load = f", load average {mi['loadavg_at_start'][0]:.1f} at the start and {mi['loadavg_now'][0]:.1f} at the end"
    counted = [g for g in met if g.met is not None]
    lines = [
        f"Medians of one `make bench` run ({when}, {cpu}{load}: a shared machine). Each figure is "
        "fastpe's time against the peer's, or the limit's, measured in the same run; where a goal "
        "compares two calls of milliseconds, they were timed in the same rounds, alternately, and the "
        "ratio is the median of the per-round ratios.",
        "",
        "| work | fastpe | against | measured | goal | |",
        "| --- | ---: | --- | ---: | --- | --- |",
    ]
    for g in met:
        state = "–" if g.met is None else ("met" if g.met else "**missed**")
        lines.append(f"| {g.work} | {g.ours} | {g.other} | {g.ratio} | {g.limit} | {state} |")
    lines += [
        "",
        f"**{sum(g.met is True for g in counted)} of {len(met)} goals met**"
        + (f" ({len(met) - len(counted)} not measured in this run)" if len(counted) < len(met) else "")
        + f". Every table, with what each peer computes and how its values differ: [Benchmarks]({tables_path}).",
    ]
    return "\n".join(lines)


def replace_between(text: str, markers: tuple[str, str], content: str, where: str) -> str:
    """``text`` with what lies between the two markers replaced by ``content`` (on lines of
    its own, the markers kept); every byte outside the markers is kept as it was.  Each
    marker must appear exactly once, the begin marker first: else :class:`MarkerError`."""
    begin, end = markers
    for m in markers:
        n = text.count(m)
        if n != 1:
            raise MarkerError(
                f"{where}: {'has no' if n == 0 else f'has {n} of the'} marker {m!r}"
                f"{'' if n == 0 else ' (it must appear once)'}: the benchmark tables go between "
                f"{begin} and {end}, each on a line of its own"
            )
    i, j = text.index(begin) + len(begin), text.index(end)
    if j < i:
        raise MarkerError(f"{where}: {end!r} comes before {begin!r}")
    return text[:i] + "\n" + content.strip("\n") + "\n" + text[j:]


def update_docs(run: dict, tables_path: str, summary_path: str) -> list[str]:
    """Rewrite the tables in ``tables_path`` and the summary in ``summary_path`` between their
    markers.  Both files are read and checked before either is written: a missing marker pair
    leaves both untouched.  Returns the paths written (a file already up to date is not)."""
    text, met = render(run, heading=False)
    wanted = {
        tables_path: (TABLE_MARKERS, text),
        summary_path: (SUMMARY_MARKERS, summary(run, met, os.path.relpath(tables_path, os.path.dirname(
            os.path.abspath(summary_path)))))
    }
    new = {}
    for path, (markers, content) in wanted.items():
        try:
            with open(path, encoding="utf-8", newline="") as fh:
                old = fh.read()
        except FileNotFoundError:
            raise MarkerError(f"{path}: no such file (it holds the markers {markers[0]} ... {markers[1]})") from None
        new[path] = (old, replace_between(old, markers, content, path))
    written = []
    for path, (old, text) in new.items():
        if text != old:
            with open(path, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            written.append(path)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Markdown table of a saved fastpe benchmark run.")
    parser.add_argument("run", help="pytest-benchmark JSON (--benchmark-json or --benchmark-save output)")
    parser.add_argument("-o", "--output", help="also write the Markdown here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument(
        "--docs", action="store_true",
        help=f"rewrite, in place, the tables between {TABLE_MARKERS[0]} and {TABLE_MARKERS[1]} in "
        f"{DOCS_TABLES} and the summary between {SUMMARY_MARKERS[0]} and {SUMMARY_MARKERS[1]} in "
        f"{DOCS_SUMMARY} (exit 2, writing neither, when a marker pair is missing)",
    )
    parser.add_argument("--docs-tables", default=None, metavar="PATH",
                        help=f"the tables' document (default: the checkout's {DOCS_TABLES})")
    parser.add_argument("--docs-summary", default=None, metavar="PATH",
                        help=f"the summary's document (default: the checkout's {DOCS_SUMMARY})")
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print the Markdown")
    args = parser.parse_args(argv)
    run = load(args.run)
    text, met = render(run)
    if not args.quiet:
        sys.stdout.write(text)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
        print(f"\nwrote {args.output}", file=sys.stderr)
    if args.docs or args.docs_tables or args.docs_summary:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            written = update_docs(
                run, args.docs_tables or os.path.join(root, DOCS_TABLES),
                args.docs_summary or os.path.join(root, DOCS_SUMMARY),
            )
        except MarkerError as exc:
            print(f"report.py --docs: {exc}", file=sys.stderr)
            return 2
        print("rewrote " + (", ".join(written) if written else "nothing (the documents were up to date)"),
              file=sys.stderr)
    missed = [g for g in met if g.met is False]
    print(
        f"goals: {sum(g.met is True for g in met)} met, {len(missed)} missed, "
        f"{sum(g.met is None for g in met)} not measured",
        file=sys.stderr,
    )
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
