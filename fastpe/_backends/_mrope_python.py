"""The pure-Python reference of the M-RoPE position fill (the twin of the numba kernel).

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

__all__ = ["mrope_fill"]


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
