# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
"""Compiled kernels of the ``cython`` backend, built from ``csrc/`` (see fastpe._cython).

The functions take arrays the caller has already validated and converted.  They check only
what memory safety needs (shapes, row bounds, positions below 2**32), then release the GIL
for the loop, so Python threads can fill disjoint row blocks of one output at once.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "fastpe_kernels.h" nogil:
    const int FASTPE_STEPS
    const float FASTPE_TINY
    const double fastpe_sin_coeffs[8]
    const double fastpe_cos_coeffs[8]
    const char *fastpe_kernel_variant(int wide)
    void fastpe_sincos_steps(const double *turns, Py_ssize_t n_freq, double *steps)
    void fastpe_sinusoid_forward(const uint32_t *positions, const double *turns,
                                 Py_ssize_t n_freq, const double *steps, float *out,
                                 Py_ssize_t d_model, Py_ssize_t row_begin, Py_ssize_t row_end,
                                 double *scratch, int wide)
    void fastpe_sinusoid_range(uint64_t start, const double *turns, Py_ssize_t n_freq,
                               const double *steps, float *out, Py_ssize_t d_model,
                               Py_ssize_t row_begin, Py_ssize_t row_end, double *scratch,
                               int wide)

cdef extern from *:
    """
    /* the instruction set the compiler targeted (the baseline copy of the kernels) */
    #if defined(__AVX2__)
    #define FASTPE_TARGET_ISA "avx2"
    #elif defined(__AVX__)
    #define FASTPE_TARGET_ISA "avx"
    #elif defined(__SSE4_1__)
    #define FASTPE_TARGET_ISA "sse4.1"
    #elif defined(__x86_64__) || defined(_M_X64)
    #define FASTPE_TARGET_ISA "sse2"
    #elif defined(__aarch64__) || defined(_M_ARM64)
    #define FASTPE_TARGET_ISA "aarch64"
    #else
    #define FASTPE_TARGET_ISA "generic"
    #endif
    """
    const char *FASTPE_TARGET_ISA

#: every position must be below this: the kernels' exactness depends on it
cdef uint64_t POSITION_LIMIT = (<uint64_t>1) << 32

#: anchors are the multiples of STEPS; values below TINY come from the exact path
STEPS = FASTPE_STEPS
TINY = FASTPE_TINY


def coefficients():
    """``(sin, cos)``: the polynomial coefficients compiled in, as tuples of floats."""
    return (tuple(fastpe_sin_coeffs[k] for k in range(8)),
            tuple(fastpe_cos_coeffs[k] for k in range(8)))


def build_info():
    """``{"target": ISA the compiler targeted, "kernels": ISA of the kernels run here}``.

    ``kernels`` is ``"avx2"`` where a baseline x86-64 build found AVX2 on this CPU, else the
    target.  Every copy of the kernels gives the same bits.
    """
    target = FASTPE_TARGET_ISA.decode("ascii")
    variant = fastpe_kernel_variant(1).decode("ascii")
    return {"target": target, "kernels": target if variant == "baseline" else variant}


def sincos_steps(const double[:, ::1] turns, double[:, :, ::1] steps):
    """Fill ``steps[m, 0, i], steps[m, 1, i]`` with exact-path ``cos(m w_i), sin(m w_i)``.

    ``steps`` has shape ``(STEPS, 2, n_freq)``; ``turns`` is the ``(4, n_freq)`` plan.
    """
    if (turns.shape[0] != 4 or steps.shape[0] != FASTPE_STEPS or steps.shape[1] != 2
            or steps.shape[2] != turns.shape[1]):
        raise ValueError(f"steps must have shape ({STEPS}, 2, {turns.shape[1]})")
    if turns.shape[1] == 0:
        return
    with nogil:
        fastpe_sincos_steps(&turns[0, 0], turns.shape[1], &steps[0, 0, 0])


cdef int _check(const double[:, ::1] turns, const double[:, :, ::1] steps, float[:, ::1] out,
                Py_ssize_t row_begin, Py_ssize_t row_end) except -1:
    cdef Py_ssize_t n_freq = (out.shape[1] + 1) // 2
    if turns.shape[0] != 4 or turns.shape[1] != n_freq:
        raise ValueError(
            f"turns has shape ({turns.shape[0]}, {turns.shape[1]}), expected (4, {n_freq})"
        )
    if steps.shape[0] != FASTPE_STEPS or steps.shape[1] != 2 or steps.shape[2] != n_freq:
        raise ValueError(f"steps must have shape ({STEPS}, 2, {n_freq})")
    if not 0 <= row_begin <= row_end <= out.shape[0]:
        raise ValueError(f"rows [{row_begin}, {row_end}) out of range for {out.shape[0]} rows")
    return 0


cdef double *_scratch(Py_ssize_t n_freq) except NULL:
    cdef double *buf = <double *>PyMem_Malloc(2 * n_freq * sizeof(double))
    if buf == NULL:
        raise MemoryError()
    return buf


def sinusoid_forward(const uint32_t[::1] positions, const double[:, ::1] turns,
                     const double[:, :, ::1] steps, float[:, ::1] out,
                     Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, bint wide=True):
    """Fill rows ``[row_begin, row_end)`` of ``out`` (all by default) for ``positions``.

    ``turns`` is ``fastpe._plan.sinusoid_turns(d_model, base)``, ``steps`` its table from
    :func:`sincos_steps`.  ``wide=False`` runs the baseline copy of the kernel even where
    AVX2 is available (same bits; for tests).
    """
    if row_end < 0:
        row_end = out.shape[0]
    if positions.shape[0] != out.shape[0]:
        raise ValueError(f"{positions.shape[0]} positions for {out.shape[0]} output rows")
    _check(turns, steps, out, row_begin, row_end)
    if row_begin == row_end:
        return
    cdef double *scratch = _scratch(turns.shape[1])
    try:
        with nogil:
            fastpe_sinusoid_forward(&positions[0], &turns[0, 0], turns.shape[1],
                                    &steps[0, 0, 0], &out[0, 0], out.shape[1],
                                    row_begin, row_end, scratch, wide)
    finally:
        PyMem_Free(scratch)


def sinusoid_range(uint64_t start, const double[:, ::1] turns, const double[:, :, ::1] steps,
                   float[:, ::1] out, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1,
                   bint wide=True):
    """Fill rows ``[row_begin, row_end)`` of ``out`` for positions ``start + row``.

    All ``len(out)`` positions must be below 2**32.  Otherwise as :func:`sinusoid_forward`.
    """
    if row_end < 0:
        row_end = out.shape[0]
    _check(turns, steps, out, row_begin, row_end)
    if start > POSITION_LIMIT or <uint64_t>out.shape[0] > POSITION_LIMIT - start:
        raise ValueError(f"positions from {start} for {out.shape[0]} rows reach 2**32")
    if row_begin == row_end:
        return
    cdef double *scratch = _scratch(turns.shape[1])
    try:
        with nogil:
            fastpe_sinusoid_range(start, &turns[0, 0], turns.shape[1], &steps[0, 0, 0],
                                  &out[0, 0], out.shape[1], row_begin, row_end, scratch, wide)
    finally:
        PyMem_Free(scratch)
