"""Numba kernels of the M-RoPE position ids (Qwen-VL multimodal RoPE).

The compiled twins of :mod:`fastpe._backends._mrope_python` (see there for the arguments),
integer arithmetic only, so each writes the same values as its reference:

* :func:`_mrope_plan` cuts the attended tokens into runs and lays them out in one pass over
  the tokens (serial: the image and video grids are consumed in order across the rows);
* :func:`_mrope_fill` writes the positions, one work item per segment (a run of text or one
  image / video); the segments write disjoint columns, so the parallel twin needs no
  synchronisation.  A vision run is filled frame by frame, row by row, with no division in
  the inner loop.
"""

from __future__ import annotations

from numba import prange

from ..._plans import mrope as _plan
from ._jit import inline, kernel

__all__ = ["mrope_plan_serial", "mrope_fill_parallel", "mrope_fill_serial"]

_LIMIT = _plan.POSITION_LIMIT
_TOO_MANY_IMAGE_RUNS = _plan.TOO_MANY_IMAGE_RUNS
_TOO_MANY_VIDEO_RUNS = _plan.TOO_MANY_VIDEO_RUNS
_IMAGE_RUN_LENGTH = _plan.IMAGE_RUN_LENGTH
_VIDEO_RUN_LENGTH = _plan.VIDEO_RUN_LENGTH
_TOO_FEW_IMAGE_RUNS = _plan.TOO_FEW_IMAGE_RUNS
_TOO_FEW_VIDEO_RUNS = _plan.TOO_FEW_VIDEO_RUNS
_POSITION_OVERFLOW = _plan.POSITION_OVERFLOW


@inline
def _kind(token, image, video):
    if token == image:
        return 1
    if token == video:
        return 2
    return 0


def _mrope_plan(ids, columns, n_rows, image_token_id, video_token_id, images, videos, merge,
                video_times, segments, temporal, deltas, info):
    direct = columns.shape[0] == 0
    n_images = images.shape[0]
    n_videos = videos.shape[0]
    used_images = 0
    used_videos = 0
    n_times = 0
    n_seg = 0
    n_frames = 0
    k = 0
    for i in range(4):
        info[i] = 0
    for b in range(n_rows.shape[0]):
        end = k + n_rows[b]
        pos = 0
        top = -1
        # a row whose attended tokens are one block (left or right padding) is read directly
        shift = 0
        gather = not direct
        if gather and columns[end - 1] - columns[k] == end - 1 - k:
            shift = columns[k] - k
            gather = False
        while k < end:
            kind = _kind(ids[columns[k] if gather else k + shift], image_token_id, video_token_id)
            j = k + 1
            while j < end and _kind(ids[columns[j] if gather else j + shift], image_token_id, video_token_id) == kind:
                j += 1
            length = j - k
            if kind == 0:
                segments[n_seg, 0] = k
                segments[n_seg, 1] = length
                segments[n_seg, 2] = pos
                segments[n_seg, 3] = 0
                segments[n_seg, 4] = 0
                segments[n_seg, 5] = 0
                top = max(top, pos + length - 1)
                pos += length
            else:
                if kind == 1:
                    if used_images == n_images:
                        info[0] = n_seg
                        info[1] = _TOO_MANY_IMAGE_RUNS
                        info[2] = used_images
                        info[3] = b
                        return
                    index = used_images
                    t = images[index, 0]
                    h = images[index, 1] // merge
                    w = images[index, 2] // merge
                    used_images += 1
                else:
                    if used_videos == n_videos:
                        info[0] = n_seg
                        info[1] = _TOO_MANY_VIDEO_RUNS
                        info[2] = used_videos
                        info[3] = b
                        return
                    index = used_videos
                    t = videos[index, 0]
                    h = videos[index, 1] // merge
                    w = videos[index, 2] // merge
                    used_videos += 1
                if t * h * w != length:
                    info[0] = n_seg
                    info[1] = _IMAGE_RUN_LENGTH if kind == 1 else _VIDEO_RUN_LENGTH
                    info[2] = index
                    info[3] = b
                    return
                if kind == 1:
                    for f in range(t):
                        temporal[n_frames + f] = f
                else:
                    for f in range(t):
                        temporal[n_frames + f] = video_times[n_times + f]
                    n_times += t
                segments[n_seg, 0] = k
                segments[n_seg, 1] = length
                segments[n_seg, 2] = pos
                segments[n_seg, 3] = h
                segments[n_seg, 4] = w
                segments[n_seg, 5] = n_frames
                n_frames += t
                top = max(top, pos + max(temporal[n_frames - 1], max(h - 1, w - 1)))
                pos += max(h, w)
            n_seg += 1
            k = j
        if top >= _LIMIT:
            info[0] = n_seg
            info[1] = _POSITION_OVERFLOW
            info[3] = b
            return
        deltas[b] = top + 1 - n_rows[b]
    last = n_rows.shape[0] - 1
    if used_images != n_images:
        info[0] = n_seg
        info[1] = _TOO_FEW_IMAGE_RUNS
        info[2] = used_images
        info[3] = last
        return
    if used_videos != n_videos:
        info[0] = n_seg
        info[1] = _TOO_FEW_VIDEO_RUNS
        info[2] = used_videos
        info[3] = last
        return
    info[0] = n_seg


def _mrope_fill(segments, temporal, columns, out):
    n_segments = segments.shape[0]
    direct = columns.shape[0] == 0
    t_row = out[0]
    h_row = out[1]
    w_row = out[2]
    for s in prange(n_segments):
        first = segments[s, 0]
        length = segments[s, 1]
        pos = segments[s, 2]
        grid_h = segments[s, 3]
        grid_w = segments[s, 4]
        t_offset = segments[s, 5]
        # a segment whose tokens are adjacent columns (always, unless the mask has holes
        # inside it) is written through a shifted index, not gathered column by column
        shift = 0
        gather = not direct
        if gather and columns[first + length - 1] - columns[first] == length - 1:
            shift = columns[first] - first
            gather = False
        if grid_h == 0:
            for i in range(length):
                c = columns[first + i] if gather else first + i + shift
                v = pos + i
                t_row[c] = v
                h_row[c] = v
                w_row[c] = v
            continue
        plane = grid_h * grid_w
        frames = length // plane
        k = first
        for ti in range(frames):
            tv = pos + temporal[t_offset + ti]
            for hi in range(grid_h):
                hv = pos + hi
                if gather:
                    for wi in range(grid_w):
                        c = columns[k + wi]
                        t_row[c] = tv
                        h_row[c] = hv
                        w_row[c] = pos + wi
                else:
                    c0 = k + shift
                    for wi in range(grid_w):
                        t_row[c0 + wi] = tv
                        h_row[c0 + wi] = hv
                        w_row[c0 + wi] = pos + wi
                k += grid_w


#: no prange: the plan is serial (its parallel twin is never used)
_unused, mrope_plan_serial = kernel(_mrope_plan)
mrope_fill_parallel, mrope_fill_serial = kernel(_mrope_fill)
