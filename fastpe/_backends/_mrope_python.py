"""The pure-Python references of the M-RoPE position ids (the twins of the numba kernels).

Two operations: :func:`mrope_plan` cuts the attended tokens into runs of text, image and
video tokens and lays the runs out (where each starts, its grid, its time offsets, the
delta of every row), checking each run against its grid; :func:`mrope_fill` writes every
token's three positions from that layout.

``mrope_fill(segments, temporal, columns, out)`` writes the 3-D positions (time, height,
width) of the Qwen-VL models' multimodal RoPE, segment by segment, as
:func:`fastpe.rope._mrope.mrope_positions` lays them out (see there for every value):

* ``segments``: ``int64`` ``(n_segments, 6)``, one row per run of text or vision tokens:
  ``first`` (index of its first token among the attended tokens of the whole batch, in
  row-major order), ``length`` (its number of tokens), ``position`` (the position its first
  token starts from), ``grid_h``, ``grid_w`` (the merged height and width of a vision run;
  ``grid_h == 0`` marks text) and ``t_offset`` (where its temporal offsets start in
  ``temporal``);
* ``temporal``: ``int64`` ``(n,)``: per frame of every vision run, the time offset HF's rule
  gives it (already converted to integers);
* ``columns``: ``int64`` ``(n_attended,)``, the flat column (``b * seq + s``) of each attended
  token, or ``(0,)`` when every token is attended (the column is then the index itself);
* ``out``: writable ``int64`` ``(3, batch * seq)``, written at the attended columns only.

A text run gets ``position + i`` on all three axes; a vision run of ``t`` frames of
``grid_h x grid_w`` tokens (row-major: time slowest, width fastest) gets
``position + temporal[t_offset + ti]``, ``position + hi``, ``position + wi``.  Integers only:
the fast kernels write the same values bit for bit.
"""

from __future__ import annotations

import itertools

from .._plans import mrope as _plan

__all__ = ["mrope_plan", "mrope_fill"]


def mrope_plan(ids, columns, n_rows, image_token_id, video_token_id, images, videos, merge,
               video_times, segments, temporal, deltas, info) -> None:
    """Cut the attended tokens into runs and lay them out, as ``get_rope_index`` does.

    ``ids``: ``int64`` ``(batch * seq,)`` (the flat input ids); ``columns`` as
    :func:`mrope_fill` takes it; ``n_rows``: ``int64`` ``(batch,)`` attended tokens per row
    (each ``>= 1``; the attended tokens of row ``b`` are the next ``n_rows[b]`` of the
    row-major order); ``images``, ``videos``: ``int64`` ``(n, 3)`` grids ``(t, h, w)`` in
    order of appearance (``h``, ``w`` multiples of ``merge``; Qwen3-VL's videos already
    split into frames); ``video_times``: ``int64``, the time offsets of every video frame,
    video after video.  Writes ``segments`` (``int64`` ``(cap, 6)``, ``cap >=
    2 * (len(images) + len(videos)) + batch``; the rows :func:`mrope_fill` reads), the
    ``temporal`` offsets (``int64``, one per frame of every vision run, in run order),
    ``deltas`` (``int64`` ``(batch,)``) and ``info`` (``int64`` ``(4,)``): the number of
    segments, then ``0`` or an error code of :data:`fastpe._plans.mrope.PLAN_ERRORS` with the grid's index and
    the row.  On an error the other outputs are partly written and meaningless."""
    n_images, n_videos = len(images), len(videos)
    cols = columns.tolist() if len(columns) else None
    flat = ids.tolist()
    image, video = int(image_token_id), int(video_token_id)
    grids = {1: images.tolist(), 2: videos.tolist()}
    used = {1: 0, 2: 0}
    times = video_times.tolist()
    n_times = 0
    n_seg = n_frames = 0
    k = 0
    info[:] = 0

    def fail(code, index, row):
        info[0], info[1], info[2], info[3] = n_seg, code, index, row

    for b, count in enumerate(n_rows.tolist()):
        row = [flat[cols[j]] if cols is not None else flat[j] for j in range(k, k + count)]
        kinds = [1 if t == image else 2 if t == video else 0 for t in row]
        pos = 0
        top = -1
        first = k
        for kind, group in itertools.groupby(kinds):
            length = len(list(group))
            if kind == 0:
                segments[n_seg] = (first, length, pos, 0, 0, 0)
                top = max(top, pos + length - 1)
                pos += length
            else:
                index = used[kind]
                if index == len(grids[kind]):
                    return fail(_plan.TOO_MANY_IMAGE_RUNS if kind == 1 else _plan.TOO_MANY_VIDEO_RUNS, index, b)
                used[kind] += 1
                t, h, w = grids[kind][index]
                h //= merge
                w //= merge
                if t * h * w != length:
                    return fail(_plan.IMAGE_RUN_LENGTH if kind == 1 else _plan.VIDEO_RUN_LENGTH, index, b)
                if kind == 1:
                    offsets = list(range(t))
                else:
                    offsets = times[n_times:n_times + t]
                    n_times += t
                temporal[n_frames:n_frames + t] = offsets
                segments[n_seg] = (first, length, pos, h, w, n_frames)
                n_frames += t
                top = max(top, pos + max(offsets[-1], h - 1, w - 1))
                pos += max(h, w)
            n_seg += 1
            first += length
        if top >= _plan.POSITION_LIMIT:
            return fail(_plan.POSITION_OVERFLOW, 0, b)
        deltas[b] = top + 1 - count
        k += count
    if used[1] != n_images:
        return fail(_plan.TOO_FEW_IMAGE_RUNS, used[1], len(n_rows) - 1)
    if used[2] != n_videos:
        return fail(_plan.TOO_FEW_VIDEO_RUNS, used[2], len(n_rows) - 1)
    info[0] = n_seg



def mrope_fill(segments, temporal, columns, out) -> None:
    segs = segments.tolist()
    times = temporal.tolist()
    cols = columns.tolist() if len(columns) else None
    t_row, h_row, w_row = out[0], out[1], out[2]
    for first, length, pos, grid_h, grid_w, t_offset in segs:
        if grid_h == 0:
            for i in range(length):
                c = cols[first + i] if cols is not None else first + i
                t_row[c] = h_row[c] = w_row[c] = pos + i
            continue
        plane = grid_h * grid_w
        for k in range(length):
            ti, rest = divmod(k, plane)
            hi, wi = divmod(rest, grid_w)
            c = cols[first + k] if cols is not None else first + k
            t_row[c] = pos + times[t_offset + ti]
            h_row[c] = pos + hi
            w_row[c] = pos + wi
