/*
 * fastpe_pool.h -- the persistent worker threads of the cython backend.
 *
 * A call splits its range of rows (or items) into `parts` contiguous blocks; the calling
 * thread and the pool's workers claim blocks one at a time until none is left, and the call
 * returns when every claimed block is done.  The blocks are disjoint and every kernel's value
 * depends only on its own row, so the result is the same whoever runs which block, and a
 * worker the OS has not scheduled yet never delays the call: the caller takes its blocks.
 *
 * Why not OpenMP: a GNU OpenMP runtime that has run in a process hangs its fork() children.
 * Why not threads started per call: starting and joining one costs ~0.1 ms, more than a
 * 2048 x 512 table takes.  The workers are started on the first parallel call; between
 * calls each polls for ~30 us (a call that follows soon starts without a wake-up), then sleeps
 * on a condition variable.  A caller whose last blocks are a worker's polls likewise before
 * sleeping.
 *
 * Concurrent callers: one call at a time uses the workers; a caller that finds them busy
 * runs all its blocks itself (same blocks, same bits), so callers never wait for each other.
 *
 * fork(): a child has only the thread that forked, so a pthread_atfork child handler drops
 * the pool (its memory is leaked: its mutex may have been held by a thread that no longer
 * exists) and the child's first parallel call starts a new one.
 *
 * Without POSIX threads (Windows builds) every call runs on the calling thread.
 */
#ifndef FASTPE_POOL_H
#define FASTPE_POOL_H

#include <stddef.h>
#include <stdlib.h>

/* run block `part` of a call: rows [lo, hi) */
typedef void (*fastpe_task_fn)(void *ctx, int part, ptrdiff_t lo, ptrdiff_t hi);

/* block k of [lo, hi) cut into `parts`, edges rounded down to multiples of `align` from lo */
static inline void fastpe_part_range_(ptrdiff_t lo, ptrdiff_t hi, int parts, ptrdiff_t align,
                                      int k, ptrdiff_t *b, ptrdiff_t *e)
{
    ptrdiff_t n = hi - lo;
    ptrdiff_t a = n / parts * k + n % parts * k / parts;
    ptrdiff_t z = n / parts * (k + 1) + n % parts * (k + 1) / parts;
    if (align > 1) {
        a -= a % align;
        z = k + 1 == parts ? n : z - z % align;
    }
    if (k + 1 == parts)
        z = n;
    *b = lo + a;
    *e = lo + z;
}

#if defined(_WIN32) || !(defined(__GNUC__) || defined(__clang__))

static int fastpe_pool_run(fastpe_task_fn fn, void *ctx, ptrdiff_t lo, ptrdiff_t hi, int parts,
                           ptrdiff_t align, int n_threads)
{
    (void)n_threads;
    for (int k = 0; k < parts; k++) {
        ptrdiff_t b, e;
        fastpe_part_range_(lo, hi, parts, align, k, &b, &e);
        if (e > b)
            fn(ctx, k, b, e);
    }
    return 0;
}

static int fastpe_pool_workers(void) { return 0; }

#else

#include <pthread.h>
#include <sched.h>
#include <string.h>

typedef struct fastpe_pool_ {
    pthread_mutex_t lock;   /* guards everything below */
    pthread_cond_t wake;    /* workers: a new call (or generation) is posted */
    pthread_cond_t done;    /* the caller: the last claimed block finished */
    pthread_mutex_t busy;   /* held by the one caller using the workers */
    int n_workers;
    unsigned long generation;
    /* the call in progress */
    fastpe_task_fn fn;
    void *ctx;
    ptrdiff_t lo, hi, align;
    int parts, next;
    unsigned long running; /* blocks being run; read by a polling caller, so atomic */
} fastpe_pool_;

static fastpe_pool_ *fastpe_pool_instance_ = NULL;
static int fastpe_pool_atfork_done_ = 0;

/* claim and run blocks of the posted call until none is left; called with p->lock held */
static void fastpe_pool_drain_(fastpe_pool_ *p)
{
    while (p->fn != NULL && p->next < p->parts) {
        int k = p->next++;
        fastpe_task_fn fn = p->fn;
        void *ctx = p->ctx;
        ptrdiff_t b, e;
        fastpe_part_range_(p->lo, p->hi, p->parts, p->align, k, &b, &e);
        __atomic_add_fetch(&p->running, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&p->lock);
        if (e > b)
            fn(ctx, k, b, e);
        pthread_mutex_lock(&p->lock);
        if (__atomic_sub_fetch(&p->running, 1, __ATOMIC_RELEASE) == 0 && p->next >= p->parts)
            pthread_cond_signal(&p->done);
    }
}

/* polls before a thread sleeps: about 30 us (a PAUSE is 10-140 cycles by CPU) */
#define FASTPE_POOL_SPIN 2000

static inline void fastpe_pool_pause_(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* poll *word (read atomically) until it is no longer `value`, at most FASTPE_POOL_SPIN times;
 * every 64 polls the CPU is offered to another thread (sched_yield returns at once when none
 * waits), so that on a machine with more runnable threads than CPUs a polling thread does not
 * hold up the one it waits for */
static inline void fastpe_pool_spin_(unsigned long *word, unsigned long value)
{
    for (int i = 0; i < FASTPE_POOL_SPIN && __atomic_load_n(word, __ATOMIC_ACQUIRE) == value; i++) {
        fastpe_pool_pause_();
        if ((i & 63) == 63)
            sched_yield();
    }
}

static void *fastpe_pool_worker_(void *arg)
{
    fastpe_pool_ *p = (fastpe_pool_ *)arg;
    pthread_mutex_lock(&p->lock);
    unsigned long seen = p->generation;
    for (;;) {
        /* a call that follows soon is picked up without a wake-up (5-50 us on a futex) */
        pthread_mutex_unlock(&p->lock);
        fastpe_pool_spin_(&p->generation, seen);
        pthread_mutex_lock(&p->lock);
        while (p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        seen = p->generation;
        fastpe_pool_drain_(p);
    }
    return NULL; /* not reached: workers live as long as the process */
}

static void fastpe_pool_forget_in_child_(void)
{
    fastpe_pool_instance_ = NULL; /* the workers did not survive the fork; leak the husk */
}

/* the pool with n_threads - 1 workers, started on first use; NULL if it cannot be had */
static fastpe_pool_ *fastpe_pool_get_(int n_threads)
{
    fastpe_pool_ *p = __atomic_load_n(&fastpe_pool_instance_, __ATOMIC_ACQUIRE);
    if (p != NULL || n_threads < 2)
        return p;
    if (!__atomic_exchange_n(&fastpe_pool_atfork_done_, 1, __ATOMIC_ACQ_REL))
        pthread_atfork(NULL, NULL, fastpe_pool_forget_in_child_);
    p = (fastpe_pool_ *)calloc(1, sizeof(fastpe_pool_));
    if (p == NULL)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->busy, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 1 << 20);
    /* sleep until published: a worker must not see a pool another caller's CAS discarded */
    pthread_mutex_lock(&p->lock);
    fastpe_pool_ *expected = NULL;
    if (!__atomic_compare_exchange_n(&fastpe_pool_instance_, &expected, p, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        pthread_mutex_unlock(&p->lock);
        pthread_attr_destroy(&attr);
        free(p); /* another caller published its pool first; no worker saw this one */
        return expected;
    }
    for (int k = 0; k < n_threads - 1; k++) {
        pthread_t t;
        if (pthread_create(&t, &attr, fastpe_pool_worker_, p) != 0)
            break; /* fewer workers: the callers run the blocks nobody claims */
        __atomic_add_fetch(&p->n_workers, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->lock);
    pthread_attr_destroy(&attr);
    return p;
}

/* the workers of this process's pool (0 before the first parallel call) */
static int fastpe_pool_workers(void)
{
    fastpe_pool_ *p = __atomic_load_n(&fastpe_pool_instance_, __ATOMIC_ACQUIRE);
    if (p == NULL)
        return 0;
    return __atomic_load_n(&p->n_workers, __ATOMIC_ACQUIRE);
}

/*
 * fn(ctx, k, b, e) for the `parts` blocks [b, e) of [lo, hi) (edges multiples of `align`
 * from lo, but the last): on the calling thread and up to n_threads - 1 workers.  Returns 1
 * when workers could take part, 0 when the caller ran every block.  Must be called without
 * the GIL if fn takes it.
 */
static int fastpe_pool_run(fastpe_task_fn fn, void *ctx, ptrdiff_t lo, ptrdiff_t hi, int parts,
                           ptrdiff_t align, int n_threads)
{
    fastpe_pool_ *p = parts > 1 ? fastpe_pool_get_(n_threads) : NULL;
    /* n_workers is read atomically: a pool is published before its workers start */
    if (p == NULL || __atomic_load_n(&p->n_workers, __ATOMIC_ACQUIRE) == 0 ||
        pthread_mutex_trylock(&p->busy) != 0) {
        for (int k = 0; k < parts; k++) {
            ptrdiff_t b, e;
            fastpe_part_range_(lo, hi, parts, align, k, &b, &e);
            if (e > b)
                fn(ctx, k, b, e);
        }
        return 0;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->lo = lo;
    p->hi = hi;
    p->align = align;
    p->parts = parts;
    p->next = 0;
    __atomic_store_n(&p->running, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->generation, p->generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->wake);
    fastpe_pool_drain_(p);
    if (__atomic_load_n(&p->running, __ATOMIC_ACQUIRE) > 0) {
        /* the last blocks are the workers': poll before sleeping, as they do */
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < FASTPE_POOL_SPIN && __atomic_load_n(&p->running, __ATOMIC_ACQUIRE) > 0; i++) {
            fastpe_pool_pause_();
            if ((i & 63) == 63)
                sched_yield();
        }
        pthread_mutex_lock(&p->lock);
    }
    while (__atomic_load_n(&p->running, __ATOMIC_ACQUIRE) > 0)
        pthread_cond_wait(&p->done, &p->lock);
    p->fn = NULL;
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->busy);
    return 1;
}

#endif

#endif /* FASTPE_POOL_H */
