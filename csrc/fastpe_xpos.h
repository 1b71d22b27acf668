/*
 * fastpe_xpos.h -- xPos's scaling of the RoPE table (the cython backend's rope_xpos_table).
 *
 * The twin of fastpe/_backends/numba/xpos.py, operation for operation: rows [lo, hi) of the
 * (rows, 2, n_freq) table of C, S doubles (fastpe_rope_table's, in tq) are multiplied in place
 * by s = clamp(pow(zeta[i], e)) and written to tk times clamp(pow(zeta[i], -e)), with
 * e = (position - center) / scale_base in double (the difference is exact: integers below
 * 2**33), the clamp to [2**-600, 2**600] (fastpe._exact.rope.XPOS_CLAMP).  Compiled without
 * FMA contraction or fast-math (setup.py), so pow stays the C library's scalar call.
 */
#ifndef FASTPE_XPOS_H
#define FASTPE_XPOS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define FASTPE_XPOS_CLAMP 600

static inline double fastpe_xpos_clamp_(double s, double lo, double hi)
{
    return s > hi ? hi : (s < lo ? lo : s);
}

static void fastpe_xpos_scale(const uint32_t *positions, const double *zeta, ptrdiff_t n_freq,
                              double scale_base, double center, double *tq, double *tk,
                              ptrdiff_t lo, ptrdiff_t hi)
{
    const double top = ldexp(1.0, FASTPE_XPOS_CLAMP), bottom = ldexp(1.0, -FASTPE_XPOS_CLAMP);
    for (ptrdiff_t r = lo; r < hi; r++) {
        const double e = ((double)positions[r] - center) / scale_base;
        double *q = tq + 2 * r * n_freq, *k = tk + 2 * r * n_freq;
        for (ptrdiff_t i = 0; i < n_freq; i++) {
            const double s = fastpe_xpos_clamp_(pow(zeta[i], e), bottom, top);
            const double t = fastpe_xpos_clamp_(pow(zeta[i], -e), bottom, top);
            const double c = q[i], sn = q[n_freq + i];
            q[i] = c * s;
            q[n_freq + i] = sn * s;
            k[i] = c * t;
            k[n_freq + i] = sn * t;
        }
    }
}

#endif
