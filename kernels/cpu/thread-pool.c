/*
 * thread-pool.c - the CPU backend's context (struct rtx_cpu): a fixed pool of worker threads
 * that heavy kernels share through rtx__cpu_parallel_for. A leaf of kernels/cpu/: the op files
 * and backend-cpu.c call it, and it calls neither.
 *
 * DESIGN
 * The pool has n_threads - 1 worker threads; the thread that calls rtx__cpu_parallel_for is
 * the n-th and works too, so a pool of n never runs more than n threads of ours at once. A
 * job's fields are written, then `state` gets a new generation with no worker joined; workers
 * join a job by raising its joined count with a compare-and-swap that also checks the
 * generation and that the job is still open, and claim items in chunks (AFFINITY below).
 * When the caller has found no chunk left it closes the job (the same word), which
 * tells it how many joined, and waits for exactly those to finish: a worker the OS has not
 * scheduled meanwhile never joins, and the caller does not wait for it (on a host with more
 * runnable threads than cores, waiting for every worker to check in stalled jobs for a
 * scheduler time slice). A joined worker reads the job's fields until it finishes, and the
 * next job is published only after that, so it never sees them change. A model runs one
 * short job after another (tens of microseconds each), and waking a sleeping thread through
 * a futex costs about as much: so a worker that finishes a job first spins for up to
 * CPU_SPIN_NS on the generation before it sleeps on its condition variable (a broadcast with
 * nobody waiting makes no system call). Past that the pool sleeps: an idle daemon burns no
 * CPU. A second caller (another thread, or a kernel calling parallel_for from inside a chunk)
 * finds `submit` locked and runs inline, so nesting cannot deadlock. OpenBLAS runs
 * single-threaded (rtx__cpu_sgemm).
 *
 * PLACEMENT. Where the OS puts the threads matters as much as the kernels (decision 144):
 * when another process keeps one CPU busy, a caller that slept while its worker finished left
 * its own CPU idle, the scheduler's idle balancing pulled the worker over, and caller and
 * worker then took turns on one CPU while the other ran the stranger: two threads slower than
 * one. So the caller never sleeps while a joined worker holds a chunk: it spins while the
 * worker runs on another CPU and yields while the worker shares its own (sched_getcpu, read
 * by each side when it starts a job and every 64 spin rounds); and a worker that finds itself
 * on the caller's CPU stops spinning between jobs at once, so that it does not take the
 * caller's time to wait. Nothing is pinned: the daemon shares the host.
 *
 * AFFINITY. A job's items are split into one contiguous share per thread (the caller's first,
 * then each worker's by its index), and a thread claims chunks of its own share before it
 * takes chunks of the others' (through the same kind of counter, so a worker the OS has not
 * scheduled costs nothing: its share is taken by the rest). Kernels number their items image
 * by image or row by row, so the same thread tends to produce a layer's rows and read them in
 * the next layer, from its own caches. With one shared counter the split was new at every job
 * and about half of every layer's input had been written on the other CPU: a ResNet-style
 * model 0.814 -> 0.801 ms, a BERT-style encoder 1.97 -> 1.87 ms at 2 threads. It is also the
 * likely cause of phases seen on this project's 2-CPU VMs (CPUs that share no cache, by the
 * look of it) in which that model ran 1.33x slower at 2 threads and onnxruntime, which splits
 * statically, 5% slower.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu-impl.h"

#define CPU_CHUNKS_PER_THREAD 4 /* chunks per thread, for load balance */
#define CPU_SPIN_NS 200000      /* spinning before sleeping, after a job (DESIGN) */

/* `state`: generation << 32 | closed bit | workers joined */
#define ST_CLOSED ((uint64_t)1 << 31)
#define ST_JOINED ((uint64_t)ST_CLOSED - 1)
#define ST_GEN(s) ((s) >> 32)

/* One thread's share of a job's items (AFFINITY): [next, end) unclaimed; on a line of its
 * own, as each thread claims from its own share most of the time. */
struct pool_range {
    _Alignas(64) _Atomic int64_t next;
    int64_t end;
};

struct rtx_cpu {
    int n_threads;               /* workers + the calling thread */
    int n_workers;               /* pool threads started */
    pthread_t *workers;
    pthread_mutex_t submit;      /* held by the thread running a parallel job */
    pthread_mutex_t mu;          /* guards everything below but `next` */
    pthread_cond_t wake;         /* workers wait for a new generation or stop */
    _Atomic uint64_t state;      /* the job's generation, closed bit and joined count */
    _Atomic int finished;        /* joined workers done with the current job */
    _Atomic int started;         /* workers that have taken their index */
    _Atomic int caller_cpu;      /* the CPU the caller published the last job on */
    _Atomic int *worker_cpu;     /* per worker: the CPU it runs a job on, -1 between jobs */
    bool stop;
    void (*fn)(void *ctx, int64_t begin, int64_t end);
    void *fn_ctx;
    int64_t n;                   /* items of the current job */
    int64_t chunk;               /* items per chunk */
    struct pool_range *ranges;   /* per thread (the caller 0, worker w w + 1): its share */
    struct rtx_backend *be;      /* the backend this pool serves (rtx__cpu_backend) */
    bool wide;                   /* rtx__cpu_wide */
};

/* Thread `self` runs chunks of its own share, then of the others' in turn (AFFINITY). A claim
 * past a share's end (the counter overshoots by at most a chunk a thread) is dropped. */
static void run_chunks(struct rtx_cpu *cpu, int self) {
    for (int j = 0; j < cpu->n_threads; j++) {
        struct pool_range *r = &cpu->ranges[(self + j) % cpu->n_threads];
        for (;;) {
            int64_t begin = atomic_fetch_add_explicit(&r->next, cpu->chunk, memory_order_relaxed);
            if (begin >= r->end) break;
            cpu->fn(cpu->fn_ctx, begin, begin + cpu->chunk < r->end ? begin + cpu->chunk : r->end);
        }
    }
}

static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool gen_changed(struct rtx_cpu *cpu, uint64_t gen) {
    return ST_GEN(atomic_load_explicit(&cpu->state, memory_order_acquire)) != gen;
}

static bool all_finished(struct rtx_cpu *cpu, uint64_t n) {
    return (uint64_t)atomic_load_explicit(&cpu->finished, memory_order_acquire) >= n;
}

/* A worker waiting for the job after generation gen: spins until it is published or
 * CPU_SPIN_NS pass, or as soon as it finds itself on the caller's CPU (PLACEMENT); the clock
 * and the CPU are read every 64 rounds only. */
static void worker_spin(struct rtx_cpu *cpu, uint64_t gen) {
    int64_t until = 0;
    for (unsigned i = 1;; i++) {
        if (gen_changed(cpu, gen)) return;
        spin_pause();
        if (i % 64 == 0) {
            if (sched_getcpu() == atomic_load_explicit(&cpu->caller_cpu, memory_order_relaxed))
                return;
            int64_t now = mono_ns();
            if (until == 0) until = now + CPU_SPIN_NS;
            else if (now > until) return;
        }
    }
}

/* Whether a joined worker that has not finished runs on CPU `me`. */
static bool worker_on(struct rtx_cpu *cpu, int me) {
    for (int w = 0; w < cpu->n_workers; w++)
        if (atomic_load_explicit(&cpu->worker_cpu[w], memory_order_relaxed) == me) return true;
    return false;
}

/* The caller waits for the `joined` workers of its job (PLACEMENT): spinning while they run on
 * other CPUs, yielding its CPU while one of them shares it, and every 64 rounds once the wait
 * has lasted CPU_SPIN_NS (a worker that moved after it joined is not seen). */
static void caller_wait(struct rtx_cpu *cpu, uint64_t joined) {
    int64_t until = 0;
    for (unsigned i = 1; !all_finished(cpu, joined); i++) {
        if (i % 64 != 0) {
            spin_pause();
            continue;
        }
        int64_t now = mono_ns();
        if (until == 0) until = now + CPU_SPIN_NS;
        if (now > until || worker_on(cpu, sched_getcpu())) sched_yield();
    }
}

/* Joins the job of generation gen unless it is closed or gone; whether it did. */
static bool join_job(struct rtx_cpu *cpu, uint64_t gen) {
    uint64_t s = atomic_load_explicit(&cpu->state, memory_order_acquire);
    while (ST_GEN(s) == gen && !(s & ST_CLOSED))
        if (atomic_compare_exchange_weak_explicit(&cpu->state, &s, s + 1, memory_order_acquire,
                                                  memory_order_acquire))
            return true;
    return false;
}

static void *worker_main(void *arg) {
    struct rtx_cpu *cpu = arg;
    rtx_thread_name("rtx-cpu-pool");
    int id = atomic_fetch_add_explicit(&cpu->started, 1, memory_order_relaxed);
    uint64_t seen = 0;
    for (;;) {
        worker_spin(cpu, seen); /* stop comes with a new generation too */
        pthread_mutex_lock(&cpu->mu);
        while (!cpu->stop &&
               ST_GEN(atomic_load_explicit(&cpu->state, memory_order_relaxed)) == seen)
            pthread_cond_wait(&cpu->wake, &cpu->mu);
        bool stop = cpu->stop;
        seen = ST_GEN(atomic_load_explicit(&cpu->state, memory_order_relaxed));
        pthread_mutex_unlock(&cpu->mu);
        if (stop) break;
        if (!join_job(cpu, seen)) continue; /* closed before this thread got to it */
        atomic_store_explicit(&cpu->worker_cpu[id], sched_getcpu(), memory_order_relaxed);
        run_chunks(cpu, id + 1);
        atomic_store_explicit(&cpu->worker_cpu[id], -1, memory_order_relaxed);
        atomic_fetch_add_explicit(&cpu->finished, 1, memory_order_release);
    }
    return NULL;
}

/* [0, n) in chunks of `chunk` items over the pool (rtx__cpu_parallel_for, _each). */
static void parallel_chunks(struct rtx_cpu *cpu, int64_t n, int64_t chunk,
                            void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx) {
    if (chunk >= n || pthread_mutex_trylock(&cpu->submit) != 0) {
        fn(ctx, 0, n); /* one chunk, or the pool is busy (nested or concurrent call) */
        return;
    }
    pthread_mutex_lock(&cpu->mu);
    cpu->fn = fn;
    cpu->fn_ctx = ctx;
    cpu->n = n;
    cpu->chunk = chunk;
    for (int k = 0; k < cpu->n_threads; k++) { /* contiguous shares, as even as can be */
        atomic_store_explicit(&cpu->ranges[k].next, n * k / cpu->n_threads, memory_order_relaxed);
        cpu->ranges[k].end = n * (k + 1) / cpu->n_threads;
    }
    atomic_store_explicit(&cpu->finished, 0, memory_order_relaxed);
    atomic_store_explicit(&cpu->caller_cpu, sched_getcpu(), memory_order_relaxed);
    uint64_t gen = ST_GEN(atomic_load_explicit(&cpu->state, memory_order_relaxed)) + 1;
    atomic_store_explicit(&cpu->state, gen << 32, memory_order_release); /* open, none joined */
    pthread_cond_broadcast(&cpu->wake);
    pthread_mutex_unlock(&cpu->mu);

    run_chunks(cpu, 0);

    /* close the job: workers that have not joined by now stay out of it */
    int joined = (int)(atomic_fetch_or_explicit(&cpu->state, ST_CLOSED, memory_order_acq_rel) &
                       ST_JOINED);
    caller_wait(cpu, (uint64_t)joined);
    pthread_mutex_lock(&cpu->mu);
    cpu->fn = NULL;
    cpu->fn_ctx = NULL;
    pthread_mutex_unlock(&cpu->mu);
    pthread_mutex_unlock(&cpu->submit);
}

void rtx__cpu_parallel_for(struct rtx_cpu *cpu, int64_t n, int64_t grain,
                           void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (cpu == NULL || cpu->n_workers == 0 || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    int64_t chunk = n / ((int64_t)cpu->n_threads * CPU_CHUNKS_PER_THREAD);
    parallel_chunks(cpu, n, chunk < grain ? grain : chunk, fn, ctx);
}

void rtx__cpu_parallel_each(struct rtx_cpu *cpu, int64_t n,
                            void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx) {
    if (n <= 0) return;
    if (cpu == NULL || cpu->n_workers == 0 || n == 1) {
        fn(ctx, 0, n);
        return;
    }
    parallel_chunks(cpu, n, 1, fn, ctx);
}

int rtx__cpu_n_threads(const struct rtx_cpu *cpu) {
    return cpu ? cpu->n_threads : 1;
}

void rtx__cpu_pool_free(struct rtx_cpu *cpu) {
    if (cpu == NULL) return;
    pthread_mutex_lock(&cpu->mu);
    cpu->stop = true;
    uint64_t gen = ST_GEN(atomic_load_explicit(&cpu->state, memory_order_relaxed)) + 1;
    atomic_store_explicit(&cpu->state, gen << 32 | ST_CLOSED, memory_order_release); /* wakes */
    pthread_cond_broadcast(&cpu->wake);
    pthread_mutex_unlock(&cpu->mu);
    for (int i = 0; i < cpu->n_workers; i++) pthread_join(cpu->workers[i], NULL);
    pthread_cond_destroy(&cpu->wake);
    pthread_mutex_destroy(&cpu->mu);
    pthread_mutex_destroy(&cpu->submit);
    rtx_free(cpu->workers);
    rtx_free(cpu->worker_cpu);
    rtx_free_aligned(cpu->ranges);
    rtx_free(cpu);
}

int rtx__cpu_pool_new(int n, struct rtx_cpu **out, struct rtx_err *err) {
    *out = NULL;
    struct rtx_cpu *cpu = rtx_calloc(1, sizeof *cpu);
    if (cpu == NULL) return rtx_err_set(err, RTX_ENOMEM, "cpu: backend context");
    cpu->n_threads = n;
    cpu->ranges = rtx_malloc_aligned((size_t)n * sizeof *cpu->ranges);
    if (cpu->ranges == NULL) {
        rtx_free(cpu);
        return rtx_err_set(err, RTX_ENOMEM, "cpu: thread shares");
    }
    for (int k = 0; k < n; k++) {
        atomic_init(&cpu->ranges[k].next, 0);
        cpu->ranges[k].end = 0;
    }
    atomic_init(&cpu->state, 0);
    atomic_init(&cpu->finished, 0);
    atomic_init(&cpu->started, 0);
    atomic_init(&cpu->caller_cpu, -1);
    if (n > 1) {
        cpu->workers = rtx_calloc((size_t)n - 1, sizeof *cpu->workers);
        cpu->worker_cpu = rtx_calloc((size_t)n - 1, sizeof *cpu->worker_cpu);
        if (cpu->workers == NULL || cpu->worker_cpu == NULL) {
            rtx_free(cpu->workers);
            rtx_free(cpu->worker_cpu);
            rtx_free_aligned(cpu->ranges);
            rtx_free(cpu);
            return rtx_err_set(err, RTX_ENOMEM, "cpu: thread table");
        }
        for (int w = 0; w < n - 1; w++) atomic_init(&cpu->worker_cpu[w], -1);
    }
    pthread_mutex_init(&cpu->submit, NULL);
    pthread_mutex_init(&cpu->mu, NULL);
    pthread_cond_init(&cpu->wake, NULL);

    /* Workers block every signal: the daemon handles signals on its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    for (int i = 0; i < n - 1; i++) {
        rc = pthread_create(&cpu->workers[i], NULL, worker_main, cpu);
        if (rc != 0) break;
        cpu->n_workers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        rtx__cpu_pool_free(cpu);
        return rtx_err_set(err, -rc, "cpu: starting worker thread: %s", strerror(rc));
    }
    *out = cpu;
    return 0;
}

void rtx__cpu_set_backend(struct rtx_cpu *cpu, struct rtx_backend *be, bool wide) {
    cpu->be = be;
    cpu->wide = wide;
}

bool rtx__cpu_wide(const struct rtx_cpu *cpu) { return cpu->wide; }

struct rtx_backend *rtx__cpu_backend(const struct rtx_cpu *cpu) { return cpu->be; }
