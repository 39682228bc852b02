/*
 * store.h - rtxd's SQLite store: the job journal and output blobs.
 *
 * DESIGN
 * One database file in WAL mode with schema migrations recorded in a version table. Every
 * write goes through one writer thread fed by a queue; the calling thread blocks until its
 * transaction has committed (synchronous=FULL), so a function that returns 0 means the change
 * survives a crash. Reads use their own connections and run concurrently with the writer.
 * Output tensors are stored once per content (blobs keyed by the SHA-256 of their bytes,
 * OpenSSL EVP) and referenced by jobs; retention deletes outputs of finished jobs by age and by
 * total bytes, oldest first, and drops blobs nothing references.
 * All functions are thread-safe.
 */
#ifndef RTX_STORE_H
#define RTX_STORE_H

#include "runtime/runtime.h"

#define RTX_JOB_ID_LEN 32 /* bytes of a job id, including the NUL */

/* Values equal to rtx.v1.JobState and rtx.v1.RestartPolicy. */
enum rtx_job_state {
    RTX_JOB_QUEUED = 1,
    RTX_JOB_RUNNING = 2,
    RTX_JOB_SUCCEEDED = 3,
    RTX_JOB_FAILED = 4,
    RTX_JOB_CANCELLED = 5,
    RTX_JOB_EXPIRED = 6,
};
enum rtx_restart_policy {
    RTX_RESTART_RERUN = 1,
    RTX_RESTART_FAIL = 2,
};
const char *rtx_job_state_name(enum rtx_job_state s); /* "queued", ...; "?" */
bool rtx_job_state_is_terminal(enum rtx_job_state s);

struct rtx_job_label {
    char *key;
    char *value;
};

struct rtx_job_output {
    char *name;
    enum rtx_dtype dtype;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    int64_t bytes;                 /* bytes */
    char sha256[65];               /* hex */
};

/* A job's journal row (without its request and output data). Strings are owned by the
 * struct: release with rtx_job_info_clear. */
struct rtx_job_info {
    char id[RTX_JOB_ID_LEN];
    enum rtx_job_state state;
    char *reason;                  /* "" when none */
    char *lane;
    char *graph_name;
    char *idempotency_key;         /* "" when none */
    enum rtx_restart_policy restart_policy;
    int n_labels;
    struct rtx_job_label *labels;
    int64_t created_ms, started_ms, finished_ms, deadline_ms; /* unix ms; 0 = unset */
    int attempts;
    double run_ms;                 /* milliseconds */
    int64_t peak_bytes;            /* bytes */
    int n_outputs;
    struct rtx_job_output *outputs;
    bool outputs_available;        /* false once retention deleted them */
    char *device;                  /* where it runs or ran ("cpu", "cuda:0"); "" until it starts */
    char *requested_device;        /* what the submitter asked for, the default applied ("auto",
                                      "cpu", "cuda", "cuda:N"); "" for jobs of older stores */
    char *failure_code;            /* of a failed job: the gRPC status name of its failure
                                      ("RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL"); ""
                                      otherwise and for jobs failed by older versions */
};
void rtx_job_info_clear(struct rtx_job_info *job); /* frees members; the struct is reusable */
void rtx_job_info_free_array(struct rtx_job_info *jobs, int n);

struct rtx_store_options {
    const char *path;              /* database file; missing parent directories are created */
    int64_t retention_max_age_ms;  /* outputs of jobs finished longer ago are deleted; 0: keep */
    int64_t retention_max_bytes;   /* bytes of output blobs kept at most; 0: unlimited */
    bool sync_normal;              /* SQLite synchronous=NORMAL instead of FULL: a commit
                                      survives a crash of rtxd but not of the machine */
};

struct rtx_store;

/* Opens (creating or migrating) the store and starts its writer thread. */
int rtx_store_open(const struct rtx_store_options *opt, struct rtx_store **out,
                   struct rtx_err *err);
/* Finishes queued writes, stops the writer thread, closes every connection. NULL: no-op. */
void rtx_store_close(struct rtx_store *s);
/* New retention limits (SIGHUP). */
void rtx_store_set_retention(struct rtx_store *s, int64_t max_age_ms, int64_t max_bytes);

/* A new unique, time-ordered job id ("j" + 12 hex digits of unix ms + 16 random hex). */
void rtx_store_new_job_id(char id[RTX_JOB_ID_LEN]);

/* Journals a new job: `job` (id, state queued, lane, labels, times, policy, ...) and its
 * serialized request (the rtx.v1.SubmitRequest bytes). Durable when it returns 0. job->device
 * and job->requested_device may be NULL (stored as ""). When
 * job->idempotency_key is not empty and a job with that key exists, nothing is written and
 * `existing_id` receives that job's id (otherwise it is set to ""). The id is 1..31 characters
 * of [A-Za-z0-9._-]; an id that exists already gives RTX_EINVAL. */
int rtx_store_job_insert(struct rtx_store *s, const struct rtx_job_info *job,
                         const void *request, size_t request_len,
                         char existing_id[RTX_JOB_ID_LEN], struct rtx_err *err);
/* The serialized request of a job (*request from rtx_malloc; rtx_free it). */
int rtx_store_job_request(struct rtx_store *s, const char *id, void **request, size_t *len,
                          struct rtx_err *err);

/* State change of a non-terminal job. RUNNING sets started_ms = now_ms and attempts += 1;
 * QUEUED (a re-run after restart) keeps the times; a terminal state sets finished_ms = now_ms.
 * Moving a job that is already terminal fails with RTX_EINVAL (so a cancel never races a
 * finish into two terminal states). */
int rtx_store_job_set_state(struct rtx_store *s, const char *id, enum rtx_job_state state,
                            const char *reason, int64_t now_ms, struct rtx_err *err);

/* Moves a queued job to RUNNING as rtx_store_job_set_state does and records the device it
 * runs on ("cpu", "cuda:0"; 1..31 characters) in the same transaction. */
/* rtx_store_job_set_state(RTX_JOB_FAILED) that also journals the failure code (a gRPC
 * status name, e.g. "RESOURCE_EXHAUSTED"). */
int rtx_store_job_fail(struct rtx_store *s, const char *id, const char *failure_code,
                       const char *reason, int64_t now_ms, struct rtx_err *err);
int rtx_store_job_start(struct rtx_store *s, const char *id, const char *device, int64_t now_ms,
                        struct rtx_err *err);

/* Marks a running job succeeded and stores its outputs in one transaction (RTX_EINVAL when
 * the job is not running). */
int rtx_store_job_succeed(struct rtx_store *s, const char *id, int64_t now_ms, double run_ms,
                          int64_t peak_bytes, int n_outputs, const char *const *names,
                          const struct rtx_tensor *const *outputs, struct rtx_err *err);

/* RTX_ENOTFOUND for an unknown id. */
int rtx_store_job_get(struct rtx_store *s, const char *id, struct rtx_job_info *out,
                      struct rtx_err *err);

/* The outputs of a succeeded job as new contiguous tensors (in output order) with their
 * names; *tensors and *names are rtx_malloc'ed arrays (release each tensor with
 * rtx_tensor_unref, each name and both arrays with rtx_free). RTX_ENOTFOUND for an unknown
 * job; RTX_EINVAL when the job has not succeeded; RTX_ENOTFOUND with "deleted by retention"
 * in the message when retention removed them. */
int rtx_store_job_outputs(struct rtx_store *s, const char *id, struct rtx_tensor ***tensors,
                          char ***names, int *n, struct rtx_err *err);

struct rtx_job_filter {
    int n_states;
    const enum rtx_job_state *states;   /* any of these; none = all */
    int n_labels;
    const struct rtx_job_label *labels; /* all must match */
    int64_t created_after_ms, created_before_ms; /* exclusive bounds; 0 = no bound */
    int limit;                          /* page size, 1..1000 */
    const char *page_token;             /* NULL or "" for the first page */
};

/* Jobs matching the filter, newest first. *jobs is an rtx_malloc'ed array (free with
 * rtx_job_info_free_array); next_token is "" on the last page. next_token may be the buffer
 * f->page_token points to. */
int rtx_store_job_list(struct rtx_store *s, const struct rtx_job_filter *f,
                       struct rtx_job_info **jobs, int *n, char next_token[RTX_JOB_ID_LEN + 32],
                       struct rtx_err *err);

/* Jobs in state queued or running, oldest first (for recovery at start). */
int rtx_store_job_unfinished(struct rtx_store *s, struct rtx_job_info **jobs, int *n,
                             struct rtx_err *err);

/* Applies retention now; *deleted_bytes (may be NULL) gets the blob bytes freed. The store
 * never runs retention by itself: the daemon calls this periodically (and after SIGHUP). */
int rtx_store_retention_run(struct rtx_store *s, int64_t now_ms, int64_t *deleted_bytes,
                            struct rtx_err *err);

struct rtx_store_stats {
    bool ok;                        /* the last write succeeded (rejections - RTX_EINVAL,
                                       RTX_ENOTFOUND - say nothing about storage, don't count) */
    char last_error[256];           /* the latest write failure, kept after recovery */
    int64_t db_bytes;               /* database + WAL file bytes */
    int64_t jobs;                   /* rows in the journal */
    int64_t blob_bytes, blobs;      /* stored output data */
};
int rtx_store_stats(struct rtx_store *s, struct rtx_store_stats *st, struct rtx_err *err);

/* A learned run-time average of the scheduler (scheduler/sched.h's cost table), per device:
 * the job manager loads them at start and saves them periodically and at stop. */
struct rtx_store_cost {
    char device[24];  /* "cpu", "cuda:0" */
    uint64_t key;     /* the cost key (a graph's content key), never 0 */
    int64_t ema_ns;   /* ns: moving average of measured run times, > 0 */
    int64_t samples;  /* run times averaged, >= 0 */
};
/* Every saved cost, in (device, key) order; *rows is rtx_malloc'ed (rtx_free it; non-NULL
 * even when *n is 0). Store errors as the other reads. */
int rtx_store_cost_list(struct rtx_store *s, struct rtx_store_cost **rows, int *n,
                        struct rtx_err *err);
/* Inserts or replaces n costs in one transaction (now_ms is recorded as their update time).
 * RTX_EINVAL for a row with key 0, ema_ns <= 0, samples < 0 or an empty device name; nothing
 * is written then. */
int rtx_store_cost_put(struct rtx_store *s, const struct rtx_store_cost *rows, int n,
                       int64_t now_ms, struct rtx_err *err);

#endif /* RTX_STORE_H */
