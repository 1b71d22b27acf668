"""M-RoPE layout constants: what the public layer, the reference and the kernels share.

A *segment* is one run of attended tokens of one type (text, or one image, or one video
-- for Qwen3-VL one video frame), a row of ``int64`` fields :data:`SEGMENT_FIELDS`; the plan
operation writes them, the fill operation reads them (see
:mod:`fastpe._backends._mrope_python`).  The plan reports an error through ``info[1]``, a
code of :data:`PLAN_ERRORS`.

numba bakes these constants into its cached machine code: after changing one, delete
``fastpe/_backends/numba/__pycache__``.
"""

from __future__ import annotations

__all__ = ["SEGMENT_FIELDS", "PLAN_ERRORS", "CODES", "POSITION_LIMIT", "TOO_MANY_IMAGE_RUNS", "TOO_MANY_VIDEO_RUNS",
           "IMAGE_RUN_LENGTH", "VIDEO_RUN_LENGTH", "TOO_FEW_IMAGE_RUNS", "TOO_FEW_VIDEO_RUNS", "POSITION_OVERFLOW"]

#: the columns of a segment row: first attended token (row-major over the batch), number of
#: tokens, starting position, merged grid height (0 marks text) and width, first time offset
SEGMENT_FIELDS = ("first", "length", "position", "grid_h", "grid_w", "t_offset")

TOO_MANY_IMAGE_RUNS = 1
TOO_MANY_VIDEO_RUNS = 2
IMAGE_RUN_LENGTH = 3
VIDEO_RUN_LENGTH = 4
TOO_FEW_IMAGE_RUNS = 5
TOO_FEW_VIDEO_RUNS = 6
POSITION_OVERFLOW = 7

#: ``info[1]`` codes of the plan (``info[2]`` the grid's index, ``info[3]`` the row)
PLAN_ERRORS = {
    TOO_MANY_IMAGE_RUNS: "more runs of image tokens than image grids",
    TOO_MANY_VIDEO_RUNS: "more runs of video tokens than video grids",
    IMAGE_RUN_LENGTH: "an image run's length is not its grid's token count",
    VIDEO_RUN_LENGTH: "a video run's length is not its grid's token count",
    TOO_FEW_IMAGE_RUNS: "fewer runs of image tokens than image grids",
    TOO_FEW_VIDEO_RUNS: "fewer runs of video tokens than video grids",
    POSITION_OVERFLOW: "a position overflows int64",
}

#: every code by its name (what the C kernels export, checked against this home)
CODES = {
    "TOO_MANY_IMAGE_RUNS": TOO_MANY_IMAGE_RUNS,
    "TOO_MANY_VIDEO_RUNS": TOO_MANY_VIDEO_RUNS,
    "IMAGE_RUN_LENGTH": IMAGE_RUN_LENGTH,
    "VIDEO_RUN_LENGTH": VIDEO_RUN_LENGTH,
    "TOO_FEW_IMAGE_RUNS": TOO_FEW_IMAGE_RUNS,
    "TOO_FEW_VIDEO_RUNS": TOO_FEW_VIDEO_RUNS,
    "POSITION_OVERFLOW": POSITION_OVERFLOW,
}
assert sorted(CODES.values()) == sorted(PLAN_ERRORS)

#: every position stays below this (far inside int64: a sum of two never overflows)
POSITION_LIMIT = 1 << 62
