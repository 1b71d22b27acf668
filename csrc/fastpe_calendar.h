/* Calendar fields of int64 timestamps: the C twin of fastpe/_backends/numba/calendar.py,
 * line for line (integer arithmetic only, so the same values).  Every division of a value
 * that may be negative goes through fastpe_cal_fdiv / fastpe_cal_fmod (floor, as Python's
 * // and %); C's own / and % truncate.  Fields by code (fastpe._exact.calendar.FIELDS):
 * 0 second, 1 minute, 2 hour, 3 weekday (Monday 0), 4 day of month, 5 day of year,
 * 6 month, 7 ISO week; each written plus its offset. */
#ifndef FASTPE_CALENDAR_H
#define FASTPE_CALENDAR_H

#include <stddef.h>
#include <stdint.h>

static inline int64_t fastpe_cal_fdiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}

static inline int64_t fastpe_cal_days_in_year(int64_t y) {
    return (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 366 : 365;
}

/* (day, second of day) of tick t: a branch per unit, so each divisor is a constant */
static inline void fastpe_cal_split(int64_t t, int64_t per_second, int64_t tick_seconds, int64_t *day,
                                    int64_t *sod) {
    if (per_second > 1) {
        int64_t secs;
        if (per_second == 1000) secs = fastpe_cal_fdiv(t, 1000);
        else if (per_second == 1000000) secs = fastpe_cal_fdiv(t, 1000000);
        else if (per_second == 1000000000) secs = fastpe_cal_fdiv(t, 1000000000);
        else secs = fastpe_cal_fdiv(t, per_second);
        *day = fastpe_cal_fdiv(secs, 86400);
        *sod = secs - *day * 86400;
    } else if (tick_seconds == 1) {
        *day = fastpe_cal_fdiv(t, 86400);
        *sod = t - *day * 86400;
    } else if (tick_seconds == 60) {
        *day = fastpe_cal_fdiv(t, 1440);
        *sod = (t - *day * 1440) * 60;
    } else if (tick_seconds == 3600) {
        *day = fastpe_cal_fdiv(t, 24);
        *sod = (t - *day * 24) * 3600;
    } else if (tick_seconds == 86400) {
        *day = t;
        *sod = 0;
    } else {
        *day = t * 7;
        *sod = 0;
    }
}

/* the date fields of day (days since 1970-01-01) into v[3..7] */
static inline void fastpe_cal_date(int64_t day, int64_t v[8]) {
    int64_t era = fastpe_cal_fdiv(day, 146097);
    int64_t doe = day - era * 146097 + 719468;
    era += doe / 146097;
    doe = doe % 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy_mar + 2) / 153;
    int64_t mday = doy_mar - (153 * mp + 2) / 5 + 1;
    int64_t month, year, doy;
    if (mp < 10) {
        month = mp + 3;
        year = yoe + era * 400;
        doy = doy_mar + 60 + (fastpe_cal_days_in_year(year) == 366 ? 1 : 0);
    } else {
        month = mp - 9;
        year = yoe + era * 400 + 1;
        doy = doy_mar - 305;
    }
    int64_t wd = (day - fastpe_cal_fdiv(day, 7) * 7) + 3;
    if (wd >= 7) wd -= 7;
    int64_t thursday = doy - wd + 3;
    if (thursday < 1) {
        thursday += fastpe_cal_days_in_year(year - 1);
    } else {
        int64_t diy = fastpe_cal_days_in_year(year);
        if (thursday > diy) thursday -= diy;
    }
    v[3] = wd;
    v[4] = mday;
    v[5] = doy;
    v[6] = month;
    v[7] = (thursday - 1) / 7 + 1;
}

/* a run of timestamps on one day (hourly data) computes its date once */
#define FASTPE_CAL_KERNEL(NAME, T)                                                               \
    static void NAME(const int64_t *ticks, int64_t per_second, int64_t tick_seconds,           \
                     const int64_t *fields, const int64_t *offsets, ptrdiff_t n_fields, T *out, \
                     ptrdiff_t lo, ptrdiff_t hi) {                                              \
        int64_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                \
        int64_t last = 0, day, sod;                                                             \
        int have = 0;                                                                           \
        for (ptrdiff_t k = lo; k < hi; k++) {                                                   \
            fastpe_cal_split(ticks[k], per_second, tick_seconds, &day, &sod);                   \
            if (!have || day != last) {                                                         \
                fastpe_cal_date(day, v);                                                        \
                last = day;                                                                     \
                have = 1;                                                                       \
            }                                                                                   \
            v[0] = sod % 60;                                                                    \
            v[1] = sod / 60 % 60;                                                               \
            v[2] = sod / 3600;                                                                  \
            T *row = out + k * n_fields;                                                        \
            for (ptrdiff_t j = 0; j < n_fields; j++) row[j] = (T)(v[fields[j]] + offsets[j]);   \
        }                                                                                       \
    }

FASTPE_CAL_KERNEL(fastpe_calendar_fields_i32, int32_t)
FASTPE_CAL_KERNEL(fastpe_calendar_fields_i64, int64_t)

/* Sums of table rows, left to right in T (Informer's TemporalEmbedding): out[r] =
 * ((table[idx[r, 0]] + table[idx[r, 1]]) + ...), each addition rounded to T, up to four
 * rows added per pass over the output row (one store per value and pass).  Elementwise, so
 * vectorised loops keep the order (built with -ffp-contract=off). */
#define FASTPE_SUM_KERNEL(NAME, T)                                                               \
    static void NAME(const T *table, const int64_t *idx, ptrdiff_t k, T *out, ptrdiff_t d,     \
                     ptrdiff_t lo, ptrdiff_t hi) {                                              \
        for (ptrdiff_t r = lo; r < hi; r++) {                                                   \
            T *restrict o = out + r * d;                                                        \
            const int64_t *p = idx + r * k;                                                     \
            const T *restrict a = table + p[0] * d;                                             \
            if (k == 1) {                                                                       \
                for (ptrdiff_t c = 0; c < d; c++) o[c] = a[c];                                  \
                continue;                                                                       \
            }                                                                                   \
            const T *restrict b = table + p[1] * d;                                             \
            if (k == 2) {                                                                       \
                for (ptrdiff_t c = 0; c < d; c++) o[c] = a[c] + b[c];                           \
                continue;                                                                       \
            }                                                                                   \
            const T *restrict e = table + p[2] * d;                                             \
            if (k == 3) {                                                                       \
                for (ptrdiff_t c = 0; c < d; c++) o[c] = (a[c] + b[c]) + e[c];                  \
                continue;                                                                       \
            }                                                                                   \
            const T *restrict f = table + p[3] * d;                                             \
            for (ptrdiff_t c = 0; c < d; c++) o[c] = ((a[c] + b[c]) + e[c]) + f[c];             \
            for (ptrdiff_t j = 4; j < k;) {                                                     \
                const T *restrict x = table + p[j] * d;                                         \
                if (k - j == 1) {                                                               \
                    for (ptrdiff_t c = 0; c < d; c++) o[c] = o[c] + x[c];                       \
                    j += 1;                                                                     \
                } else if (k - j == 2) {                                                        \
                    const T *restrict y = table + p[j + 1] * d;                                 \
                    for (ptrdiff_t c = 0; c < d; c++) o[c] = (o[c] + x[c]) + y[c];              \
                    j += 2;                                                                     \
                } else {                                                                        \
                    const T *restrict y = table + p[j + 1] * d;                                 \
                    const T *restrict z = table + p[j + 2] * d;                                 \
                    for (ptrdiff_t c = 0; c < d; c++) o[c] = ((o[c] + x[c]) + y[c]) + z[c];     \
                    j += 3;                                                                     \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }

FASTPE_SUM_KERNEL(fastpe_embedding_sum_f32, float)
FASTPE_SUM_KERNEL(fastpe_embedding_sum_f64, double)

#endif
