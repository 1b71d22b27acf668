/*
 * fastpe_xpos.h -- xPos's scaling of the RoPE table (the cython backend's rope_xpos_table).
 *
 * The twin of fastpe/_backends/numba/xpos.py, operation for operation: rows [lo, hi) of the
 * (rows, 2, n_freq) table of C, S doubles (fastpe_rope_table's, in tq) are multiplied in place
 * by the queries' power s and written to tk times the keys' power t, with n = position - center
 * (an exact integer):
 *   anchored (steps given): n = a + d, d = n & 63, s = pow(zeta[i], fl(a / sb)) * up[i][d],
 *     t = pow(zeta[i], -fl(a / sb)) * down[i][d], the anchor's powers computed once per run of
 *     rows sharing it (fastpe/_backends/_xpos.py makes the step tables with the same pow);
 *   direct (steps NULL): s = pow(zeta[i], fl(n / sb)), t = pow(zeta[i], -fl(n / sb));
 * each clamped to [2**-600, 2**600] (fastpe._exact.rope.XPOS_CLAMP).  Compiled without FMA
 * contraction or fast-math (setup.py), so pow stays the C library's scalar call.  `scratch`
 * holds 4 * n_freq doubles.
 */
#ifndef FASTPE_XPOS_H
#define FASTPE_XPOS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define FASTPE_XPOS_CLAMP 600
#define FASTPE_XPOS_STEP 64

static inline double fastpe_xpos_clamp_(double s, double lo, double hi)
{
    return s > hi ? hi : (s < lo ? lo : s);
}

static void fastpe_xpos_scale(const uint32_t *positions, const double *zeta, ptrdiff_t n_freq,
                              double scale_base, int64_t center, const double *up,
                              const double *down, double *tq, double *tk, double *scratch,
                              ptrdiff_t lo, ptrdiff_t hi)
{
    const double top = ldexp(1.0, FASTPE_XPOS_CLAMP), bottom = ldexp(1.0, -FASTPE_XPOS_CLAMP);
    double *sq = scratch, *sk = scratch + n_freq, *aq = scratch + 2 * n_freq, *ak = scratch + 3 * n_freq;
    int64_t last = 0;
    int have = 0;
    for (ptrdiff_t r = lo; r < hi; r++) {
        const int64_t m = (int64_t)positions[r] - center;
        if (up != NULL) {
            const int64_t d = m & (FASTPE_XPOS_STEP - 1);
            const int64_t a = m - d;
            if (!have || a != last) {
                const double ea = (double)a / scale_base;
                for (ptrdiff_t i = 0; i < n_freq; i++) {
                    aq[i] = pow(zeta[i], ea);
                    ak[i] = pow(zeta[i], -ea);
                }
                last = a;
                have = 1;
            }
            for (ptrdiff_t i = 0; i < n_freq; i++) {
                sq[i] = aq[i] * up[i * FASTPE_XPOS_STEP + d];
                sk[i] = ak[i] * down[i * FASTPE_XPOS_STEP + d];
            }
        } else {
            const double e = (double)m / scale_base;
            for (ptrdiff_t i = 0; i < n_freq; i++) {
                sq[i] = pow(zeta[i], e);
                sk[i] = pow(zeta[i], -e);
            }
        }
        double *q = tq + 2 * r * n_freq, *k = tk + 2 * r * n_freq;
        for (ptrdiff_t i = 0; i < n_freq; i++) {
            const double s = fastpe_xpos_clamp_(sq[i], bottom, top);
            const double t = fastpe_xpos_clamp_(sk[i], bottom, top);
            const double c = q[i], sn = q[n_freq + i];
            q[i] = c * s;
            q[n_freq + i] = sn * s;
            k[i] = c * t;
            k[n_freq + i] = sn * t;
        }
    }
}

#endif
