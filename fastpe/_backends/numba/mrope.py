"""Numba kernel of the M-RoPE position fill (Qwen-VL multimodal RoPE position ids).

:func:`_mrope_fill` is the compiled twin of
:func:`fastpe._backends._mrope_python.mrope_fill` (see there for the arguments): integer
arithmetic only, so the two write the same values.  One work item per segment (a run of
text or of one image / video frame group); the segments write disjoint columns, so the
parallel twin needs no synchronisation.  A vision run is filled frame by frame, row by row,
with no division in the inner loop.
"""

from __future__ import annotations

from numba import prange

from ._jit import kernel

__all__ = ["mrope_fill_parallel", "mrope_fill_serial"]


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
        if grid_h == 0:
            for i in range(length):
                c = first + i if direct else columns[first + i]
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
                for wi in range(grid_w):
                    c = k if direct else columns[k]
                    t_row[c] = tv
                    h_row[c] = hv
                    w_row[c] = pos + wi
                    k += 1


mrope_fill_parallel, mrope_fill_serial = kernel(_mrope_fill)
