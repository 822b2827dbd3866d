
/* Split GEMMs on a persistent C worker thread: the calling thread runs one job, a pthread the
   other; hand-off and completion by a short spin on atomics, then a condition variable. No
   Python and no GIL on the worker, so a hand-off costs about a microsecond where a Python
   thread needs a futex wake-up and the GIL (tens of microseconds). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TR_PAUSE() _mm_pause()
#else
#define TR_PAUSE() ((void)0)
#endif

typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                          const float *, int64_t, float, float *, int64_t);
typedef void (*sgemm32_t)(int, int, int, int32_t, int32_t, int32_t, float, const float *, int32_t,
                          const float *, int32_t, float, float *, int32_t);

typedef struct tr_job_s {
    int64_t ta, tb;              /* CblasNoTrans (111) or CblasTrans (112) */
    int64_t m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float *c;
    const float *bias;           /* optional: c[i, j] += bias[j] */
    const float *sum_src;        /* optional: sum_dst[j] = sum over i < sum_rows of sum_src[i * sum_ld + j] */
    float *sum_dst;
    int64_t sum_ld, sum_n, sum_rows;
    double seconds;              /* out: how long the job took */
    void (*call)(const int64_t *, const double *);  /* optional: call(iargs, fargs) instead */
    int64_t iargs[12];
    double fargs[8];
    struct tr_job_s *next;       /* optional: run right after, on the same thread */
    int64_t own;                 /* 1: the GEMM with the kernels' own OpenBLAS instance (tr_setup_own) */
    int64_t relu;                /* 1: c[i, j] = relu(c[i, j]) after the bias (an FC+ReLU forward) */
    const float *gate;           /* optional: c[i, j] *= (gate[i * gate_ld + j] > 0), a ReLU backward from
                                    its output (an FC backward whose input is a ReLU's output) */
    int64_t gate_ld;
    int64_t nargs;               /* 1-12: call is a kernel taking iargs[0..nargs) as its own arguments (all pointers
                                    or integers), called as fn(iargs[0], ..., iargs[nargs - 1]) */
} tr_job;

static void *g_sgemm, *g_sgemm_own;
static int g_ilp64, g_ilp64_own;
static tr_job *g_list;
static int g_count;
static atomic_int g_next;
static atomic_int g_posted, g_done, g_sleeping;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_cv_done = PTHREAD_COND_INITIALIZER;
static int g_started;
/* tr_setup sets all three (_parallel.IDLE_SPIN_NS, CONTENDED_SPIN_NS, WAIT_SPIN_NS) */
static int64_t g_idle_spin_ns = 300000, g_contended_spin_ns = 20000, g_wait_spin_ns = 1000000;
#define TR_CONTENDED_JOBS 16 /* job lists (splits) the worker spins briefly for after a preemption in the process */

/* Involuntary context switches of this process's threads so far (Linux): a runnable thread, of
   another process or of this one, took a core from one of them. -1 where not counted (then the
   worker always spins briefly). */
static long preemptions(void) {
#ifdef __linux__
    struct rusage r;
    if (getrusage(RUSAGE_SELF, &r) == 0) return r.ru_nivcsw;
#endif
    return -1;  /* elsewhere struct rusage may hide ru_nivcsw under _POSIX_C_SOURCE (Darwin) */
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_one(tr_job *j);

static void run_job(tr_job *j) {
    for (; j; j = j->next) run_one(j);
}

/* A compiled kernel of the CPU backend called with its own arguments. Its parameters are pointers and
   integers (long or int), each passed in a general-purpose register or stack slot of 8 bytes on the LP64
   ABIs this runs on (x86-64 System V, AArch64), where an int64_t argument is received the same way. */
typedef void (*k1_t)(int64_t);
typedef void (*k2_t)(int64_t, int64_t);
typedef void (*k3_t)(int64_t, int64_t, int64_t);
typedef void (*k4_t)(int64_t, int64_t, int64_t, int64_t);
typedef void (*k5_t)(int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void (*k6_t)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void (*k7_t)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void (*k8_t)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void (*k9_t)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void (*k10_t)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void (*k11_t)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                      int64_t);
typedef void (*k12_t)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                      int64_t, int64_t);

static void call_kernel(tr_job *j) {
    const int64_t *a = j->iargs;
    void (*f)(const int64_t *, const double *) = j->call;
    switch (j->nargs) {
    case 1: ((k1_t)f)(a[0]); break;
    case 2: ((k2_t)f)(a[0], a[1]); break;
    case 3: ((k3_t)f)(a[0], a[1], a[2]); break;
    case 4: ((k4_t)f)(a[0], a[1], a[2], a[3]); break;
    case 5: ((k5_t)f)(a[0], a[1], a[2], a[3], a[4]); break;
    case 6: ((k6_t)f)(a[0], a[1], a[2], a[3], a[4], a[5]); break;
    case 7: ((k7_t)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
    case 8: ((k8_t)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
    case 9: ((k9_t)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]); break;
    case 10: ((k10_t)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9]); break;
    case 11: ((k11_t)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]); break;
    default: ((k12_t)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11]); break;
    }
}

static void run_one(tr_job *j) {
    double t0 = now();
    if (j->call && j->nargs) {
        call_kernel(j);
        j->seconds = now() - t0;
        return;
    }
    if (j->call) {
        j->call(j->iargs, j->fargs);
        j->seconds = now() - t0;
        return;
    }
    void *sgemm = j->own && g_sgemm_own ? g_sgemm_own : g_sgemm;
    int ilp64 = j->own && g_sgemm_own ? g_ilp64_own : g_ilp64;
    if (j->m > 0 && j->n > 0) {
        if (ilp64)
            ((sgemm64_t)sgemm)(101, (int)j->ta, (int)j->tb, j->m, j->n, j->k, 1.0f, j->a, j->lda, j->b, j->ldb,
                                 0.0f, j->c, j->ldc);
        else
            ((sgemm32_t)sgemm)(101, (int)j->ta, (int)j->tb, (int32_t)j->m, (int32_t)j->n, (int32_t)j->k, 1.0f,
                                 j->a, (int32_t)j->lda, j->b, (int32_t)j->ldb, 0.0f, j->c, (int32_t)j->ldc);
    }
    if (j->bias) {
        for (int64_t i = 0; i < j->m; i++) {
            float *row = j->c + i * j->ldc;
            for (int64_t q = 0; q < j->n; q++) row[q] = row[q] + j->bias[q];
        }
    }
    /* The ReLU epilogues are lowering/cpu/activation.py's RELU_C_SOURCE expressions (relu_fwd_y,
       relu_bwd_y), so a fused job gives the unfused kernels' bits. The job's fields are read into
       locals first: a store through a row could otherwise alias them, which keeps GCC from
       vectorizing the loops. */
    if (j->relu || j->gate) {
        const int64_t m = j->m, n = j->n, ldc = j->ldc, ldg = j->gate_ld;
        const int relu = j->relu != 0;
        float *const c = j->c;
        const float *const gate = j->gate;
        for (int64_t i = 0; i < m; i++) {
            float *row = c + i * ldc;
            if (relu) {
#pragma GCC ivdep
                for (int64_t q = 0; q < n; q++) { const float v = row[q]; row[q] = v <= 0.0f ? 0.0f : v; }
            }
            if (gate) {
                const float *g = gate + i * ldg;
#pragma GCC ivdep
                for (int64_t q = 0; q < n; q++) row[q] = row[q] * (float)(g[q] > 0.0f);
            }
        }
    }
    if (j->sum_dst) {
        /* from +0, as np.add.reduce starts from the identity: a column of -0 sums to +0 there */
        for (int64_t q = 0; q < j->sum_n; q++) j->sum_dst[q] = 0.0f;
        for (int64_t i = 0; i < j->sum_rows; i++) {
            const float *row = j->sum_src + i * j->sum_ld;
            for (int64_t q = 0; q < j->sum_n; q++) j->sum_dst[q] = j->sum_dst[q] + row[q];
        }
    }
    j->seconds = now() - t0;
}

static int spin_until(atomic_int *v, int want_diff_from, int want_eq, int mode, int64_t spin_ns) {
    /* mode 0: wait while *v == want_diff_from; mode 1: wait until *v == want_eq.
       Spins up to spin_ns; returns 1 when satisfied, 0 on timeout. */
    double limit = now() + 1e-9 * (double)spin_ns;
    for (int64_t it = 0;; it++) {
        int x = atomic_load_explicit(v, memory_order_acquire);
        if (mode == 0 ? x != want_diff_from : x == want_eq) return 1;
        if ((it & 63) == 63 && now() > limit) return 0;
        TR_PAUSE();
    }
}

/* Run jobs of the posted list until none is left (each thread takes the next one). */
static void drain(void) {
    for (;;) {
        int i = atomic_fetch_add_explicit(&g_next, 1, memory_order_acq_rel);
        if (i >= g_count) return;
        run_job(&g_list[i]);
    }
}

static void *worker_main(void *arg) {
    (void)arg;
    int seen = 0;
    long last = preemptions();
    int64_t contended_left = 0;
    for (;;) {
        /* the long idle spin only while no thread of the process was preempted lately: another
           runnable thread (another process's, or a Python or OpenBLAS thread of this one) wants
           a core, and spinning would take it */
        const int64_t spin = (last < 0 || contended_left > 0) ? g_contended_spin_ns : g_idle_spin_ns;
        if (!spin_until(&g_posted, seen, 0, 0, spin)) {
            pthread_mutex_lock(&g_mu);
            atomic_store(&g_sleeping, 1);
            while (atomic_load(&g_posted) == seen) pthread_cond_wait(&g_cv, &g_mu);
            atomic_store(&g_sleeping, 0);
            pthread_mutex_unlock(&g_mu);
        }
        seen = atomic_load_explicit(&g_posted, memory_order_acquire);
        drain();
        pthread_mutex_lock(&g_mu);
        atomic_store_explicit(&g_done, seen, memory_order_release);
        pthread_cond_broadcast(&g_cv_done);
        pthread_mutex_unlock(&g_mu);
        /* after the hand-back, off the caller's path (a system call, about 0.5 us) */
        const long p = preemptions();
        if (p != last) {
            contended_left = TR_CONTENDED_JOBS;
            last = p;
        } else if (contended_left > 0) {
            contended_left--;
        }
    }
    return 0;
}

int tr_setup(void *sgemm, int ilp64, int64_t idle_spin_ns, int64_t contended_spin_ns, int64_t wait_spin_ns) {
    g_sgemm = sgemm;
    g_ilp64 = ilp64;
    g_idle_spin_ns = idle_spin_ns;
    g_contended_spin_ns = contended_spin_ns;
    g_wait_spin_ns = wait_spin_ns;
    return 0;
}

/* The kernels' own OpenBLAS instance (jobs with own = 1). */
int tr_setup_own(void *sgemm, int ilp64) {
    g_sgemm_own = sgemm;
    g_ilp64_own = ilp64;
    return 0;
}

/* Run one job (and its chain) on the calling thread. */
void tr_run_here(tr_job *j) {
    run_job(j);
}

/* After fork(): the child has no worker thread; reset the state so the next call starts one. */
void tr_after_fork(void) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER, cv2 = PTHREAD_COND_INITIALIZER;
    g_mu = mu;
    g_cv = cv;
    g_cv_done = cv2;
    atomic_store(&g_posted, 0);
    atomic_store(&g_done, 0);
    atomic_store(&g_sleeping, 0);
    g_started = 0;
}

/* Start the worker thread once: 0, or -1 when it cannot be started. */
static int start_worker(void) {
    if (!g_started) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &at, worker_main, 0);
        pthread_attr_destroy(&at);
        if (rc != 0) return -1;
        g_started = 1;
    }
    return 0;
}

/* Post `count` jobs to the started worker, drain them with it, wait until all are done. */
static void run_posted(tr_job *jobs, int count) {
    pthread_mutex_lock(&g_mu);
    g_list = jobs;
    g_count = count;
    atomic_store_explicit(&g_next, 0, memory_order_release);
    int seq = atomic_load(&g_posted) + 1;
    atomic_store_explicit(&g_posted, seq, memory_order_release);
    if (atomic_load(&g_sleeping)) pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    drain();
    if (!spin_until(&g_done, 0, seq, 1, g_wait_spin_ns)) {
        pthread_mutex_lock(&g_mu);
        while (atomic_load(&g_done) != seq) pthread_cond_wait(&g_cv_done, &g_mu);
        pthread_mutex_unlock(&g_mu);
    }
}

/* Run the `count` jobs of `jobs` on this thread and the worker thread, each taking the next
   job not yet started (the calling thread starts with the first); return when all are done (0),
   or -1 when the worker thread cannot be started (nothing was run). One caller at a time. */
int tr_run_list(tr_job *jobs, int count) {
    if (start_worker() != 0) return -1;
    run_posted(jobs, count);
    return 0;
}

/* Run `nseg` segments of `jobs` in order, each one after the previous one is done: a
   prepared group of a graph replay (lowering/cpu/_prepared.py, ReplayGroup), the kernel calls
   of several launches without a return to Python between them. counts[s] > 0: that many jobs
   on this thread and the worker, as tr_run_list; counts[s] < 0: -counts[s] jobs one after the
   other on this thread, as tr_run_here. Returns -1, having run nothing, when a segment needs
   the worker thread and it cannot be started; else 0. One caller at a time. */
int tr_run_segments(tr_job *jobs, const int64_t *counts, int64_t nseg) {
    for (int64_t s = 0; s < nseg; s++)
        if (counts[s] > 0 && start_worker() != 0) return -1;
    for (int64_t s = 0; s < nseg; s++) {
        const int64_t c = counts[s];
        if (c > 0) {
            run_posted(jobs, (int)c);
            jobs += c;
        } else {
            for (int64_t i = 0; i < -c; i++) run_job(&jobs[i]);
            jobs += -c;
        }
    }
    return 0;
}
