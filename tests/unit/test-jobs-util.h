/*
 * test-jobs-util.h - what the job manager's test files (tests/unit/test-jobs*.c) share: a store
 * in a temporary directory (struct fx), the graphs and inputs they submit, SubmitRequest
 * building and submission, polling the journal, a recording watcher, and fake CUDA devices
 * (struct fake_gpu) with the job-manager options that use them. Private to those files.
 *
 * DESIGN: the helpers keep the short names they had as statics of one test-jobs.c, so the
 * tests moved into their files unchanged; only these files include this header.
 */
#ifndef RTX_TEST_JOBS_UTIL_H
#define RTX_TEST_JOBS_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/jobs.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend-impl.h"

/* A store in a fresh temporary directory, and the device set (device/device.h) the job
 * managers of a test run on: made by jobs_opts (the CPU only) or gpu_opts (with fake GPUs),
 * freed by fx_close. */
struct fx {
    char dir[64];
    char path[96];
    struct rtx_store *store;
    struct rtx_devices *devices;
    struct rtx_devices_options dopts; /* what devices was made with */
};

/* sync_normal: commits without fsync, so jobs finish fast enough to race their Submit. */
void fx_open_sync(struct fx *f, bool sync_normal);

void fx_open(struct fx *f);

void fx_close(struct fx *f);

/* The device set's options of the tests: the CPU only, one CPU thread, the daemon's plan
 * cache defaults (16 plans, 1 GiB). */
struct rtx_devices_options devices_opts(void);

/* Replaces f's device set by one made with *o (no job manager may run on the old one). */
struct rtx_devices *fx_devices(struct fx *f, const struct rtx_devices_options *o);

/* Remakes f's device set with another plan cache (the settings device.plan_cache and
 * device.plan_cache_bytes) and points o at it; no job manager may run on the old one. */
void fx_plan_cache(struct fx *f, struct rtx_jobs_options *o, int plans, size_t bytes);

/* What device slot `slot` of f's set holds: health, budget, plan cache. */
struct rtx_device_info dev_info(struct fx *f, int slot);

/* Options of a job manager with `workers` CPU workers on f's device set (made, CPU only, when
 * f has none). */
struct rtx_jobs_options jobs_opts(struct fx *f, int workers);

struct rtx_jobs *start(const struct rtx_jobs_options *o);

/* y = relu(x @ w + b), x f32[-1,3] (the input), w f32[3,4] drawn with seed wseed, b f32[4]. */
struct rtx_graph *small_graph_seeded(unsigned wseed);

struct rtx_graph *small_graph(void);

/* What a SubmitRequest holds besides the graph. */
struct req_opts {
    const char *lane;
    int64_t deadline_ms;
    const char *idempotency_key;
    int restart_policy;
    int n_labels;
    const char *const *labels; /* key, value, key, value, ... */
    const char *device;        /* SubmitRequest.device */
};

/* Serializes a SubmitRequest for g with inputs named names[i]. *len receives its size; free
 * the result with free(). */
void *make_request(const struct rtx_graph *g, int n_inputs, const char *const *names,
                   struct rtx_tensor *const *inputs, const struct req_opts *o,
                   size_t *len);

/* Polls the store until the job reaches `state` (or any terminal state when state is 0);
 * fails the test after timeout_ms. Returns the state reached. */
enum rtx_job_state wait_state(struct rtx_store *s, const char *id, int state,
                              int timeout_ms);

/* x f32[512,512] -> n times (matmul with a 512x512 weight, tanh): seconds of work, to cancel. */
struct rtx_graph *long_graph(int n);

/* Submits g with input x; returns 0 or the error code (id and err filled). */
int submit_x(struct rtx_jobs *j, const struct rtx_graph *g, struct rtx_tensor *x,
             const struct req_opts *o, char id[RTX_JOB_ID_LEN], bool *dedup,
             struct rtx_err *err);

/* Submits g with input x and fails the test on error. */
void submit_ok(struct rtx_jobs *j, const struct rtx_graph *g, struct rtx_tensor *x,
               const struct req_opts *o, char id[RTX_JOB_ID_LEN]);

struct rtx_job_info get_job(struct rtx_store *s, const char *id);

/* Jobs in the journal (up to 1000). */
int count_jobs(struct rtx_store *s);

/* Waits until no job is queued or running, so that the counters (updated right after the
 * journal write a test polls for) are final. */
void settle(struct rtx_jobs *j);

/* small_graph()'s usual input: a fixed random f32[2,3]. */
struct rtx_tensor *small_x(void);

/* long_graph(n)'s usual input: a fixed random f32[512,512]. */
struct rtx_tensor *long_x(void);

/* Submits g with input x (options o), fails the test on error, and waits until the job runs:
 * how a test keeps a worker busy. */
void submit_running(struct rtx_jobs *j, struct fx *f, const struct rtx_graph *g,
                    struct rtx_tensor *x, const struct req_opts *o,
                    char id[RTX_JOB_ID_LEN]);

/* The end of a test: stops j, then drops x and g (either may be NULL) and closes f. */
void finish(struct fx *f, struct rtx_jobs *j, struct rtx_graph *g, struct rtx_tensor *x);

/* What a watch saw. */
struct rec {
    pthread_mutex_t mu;
    int n;
    enum rtx_job_state states[16];
    bool last[16];
    int seq[16];  /* global order of running events (lane test) */
    int in_cb;    /* atomic: inside the callback */
    int calls;    /* atomic */
    int delay_us; /* sleep inside the callback */
    bool have_run[16];            /* the callback got the job's run */
    struct rtx_jobs_run runs[16]; /* that run */
};

void rec_init(struct rec *r);

void rec_cb(void *ctx, const struct rtx_job_info *job, const struct rtx_jobs_run *run,
            bool last);

/* Waits until the watch got its last callback. */
void rec_wait_last(struct rec *r, int timeout_ms);

/* Milliseconds since the epoch (CLOCK_REALTIME), as deadlines and the journal count time. */
int64_t wall_ms(void);

/* A fake CUDA device: computes with a CPU backend on host memory but, having upload and
 * download, is not a host backend, so the job manager treats it as a GPU. Node names trigger
 * faults: "sticky*" fails with RTX_EGPU and leaves the backend faulted (every later call and
 * synchronize fail with RTX_EGPU), as an illegal address does on a real device; "oom*" fails
 * with RTX_ENOMEM and leaves it usable. fake_refuse_op is an op its supports_node refuses.
 * With fake_capture set when it is made, it also captures graphs the way CUDA graphs behave
 * (as tests/unit/test-plan-replay.c's fake does): while capturing, run_node records the node
 * and its tensor pointers and runs nothing, and a launch runs the recorded nodes again on
 * those same tensors, so a replay is right only if the plan kept every address and the graph
 * it points into. */
#define FAKE_REC_MAX_IO 4

struct fake_rec {
    const struct rtx_graph *graph;
    const struct rtx_node *node;
    int n_in, n_out;
    struct rtx_tensor *in[FAKE_REC_MAX_IO], *out[FAKE_REC_MAX_IO];
};

struct fake_gpu {
    struct rtx_backend be;
    struct rtx_backend *cpu;
    char name[24];
    int device;
    bool faulted;          /* only its worker thread touches it */
    int buffers;           /* atomic: buffers allocated */
    bool capturing;        /* only its worker thread touches these */
    struct fake_rec *recs; /* the capture in progress */
    int n_recs, cap_recs;
    int launches;          /* atomic: graphs launched */
};

/* The fake GPUs' settings, which tests change, and what they made. */
extern int fake_refuse_op;          /* an RTX_OP_* the fake GPUs do not support; -1: none */
extern int fake_fail_device;        /* a device whose backend cannot be created; -1: none */
extern bool fake_capture;           /* fake GPUs made from now on capture graphs */
extern int fake_fault_next;         /* atomic: when set, the next node any fake GPU runs faults
                                       as a "sticky" node does (for graphs whose names a test
                                       does not choose: a served model's) */
extern struct fake_gpu *fake_made[4]; /* the fake GPU of each device last made (one worker) */

/* n healthy fake CUDA devices as device discovery lists them. */
struct gpu_list {
    struct rtx_cuda_device devs[4];
    struct rtx_cuda_devices l;
};

void gpu_list_init(struct gpu_list *g, int n);

/* Options of a job manager with one CPU worker and per_device workers on each fake GPU of g,
 * on a device set made for them (replacing f's: no job manager may run on it). */
struct rtx_jobs_options gpu_opts(struct fx *f, struct gpu_list *g, int per_device);

/* Opens f (synchronous journal), lists n fake GPUs in gl and starts a job manager with
 * per_device workers on each and one on the CPU; its options go to *o (for a restart). */
struct rtx_jobs *gpu_start(struct fx *f, struct gpu_list *gl, int n, int per_device,
                           struct rtx_jobs_options *o);

/* y = relu(x) with the node named `node` (its name triggers the fake device's faults). */
struct rtx_graph *named_graph(const char *node);

/* Submits g on `device` and waits for the end; returns the final journal row. */
struct rtx_job_info run_on(struct rtx_jobs *j, struct fx *f, const struct rtx_graph *g,
                           struct rtx_tensor *x, const char *device);

struct rtx_jobs_device dev_stats(struct rtx_jobs *j, int slot);

#endif /* RTX_TEST_JOBS_UTIL_H */
