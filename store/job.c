/*
 * job.c - job state names, job ids and the release of rtx_job_info members.
 *
 * DESIGN
 * A job id is "j", 12 hex digits of the unix time in milliseconds and 16 hex digits from
 * OpenSSL's RAND_bytes: ids sort lexically in creation order (to the millisecond) and two ids
 * made in the same millisecond collide with probability 2^-64.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "store/store.h"

static const char *const state_names[] = {
    [RTX_JOB_QUEUED] = "queued",       [RTX_JOB_RUNNING] = "running",
    [RTX_JOB_SUCCEEDED] = "succeeded", [RTX_JOB_FAILED] = "failed",
    [RTX_JOB_CANCELLED] = "cancelled", [RTX_JOB_EXPIRED] = "expired",
};
static_assert(sizeof state_names / sizeof state_names[0] == RTX_JOB_EXPIRED + 1,
              "a name for every job state");

const char *rtx_job_state_name(enum rtx_job_state s) {
    if (s < RTX_JOB_QUEUED || s > RTX_JOB_EXPIRED) return "?";
    return state_names[s];
}

bool rtx_job_state_is_terminal(enum rtx_job_state s) {
    return s == RTX_JOB_SUCCEEDED || s == RTX_JOB_FAILED || s == RTX_JOB_CANCELLED ||
           s == RTX_JOB_EXPIRED;
}

void rtx_job_info_clear(struct rtx_job_info *job) {
    if (!job) return;
    rtx_free(job->reason);
    rtx_free(job->failure_code);
    rtx_free(job->lane);
    rtx_free(job->graph_name);
    rtx_free(job->idempotency_key);
    rtx_free(job->device);
    rtx_free(job->requested_device);
    for (int i = 0; i < job->n_labels; i++) {
        rtx_free(job->labels[i].key);
        rtx_free(job->labels[i].value);
    }
    rtx_free(job->labels);
    for (int i = 0; i < job->n_outputs; i++)
        rtx_free(job->outputs[i].name);
    rtx_free(job->outputs);
    memset(job, 0, sizeof *job);
}

void rtx_job_info_free_array(struct rtx_job_info *jobs, int n) {
    if (!jobs) return;
    for (int i = 0; i < n; i++)
        rtx_job_info_clear(&jobs[i]);
    rtx_free(jobs);
}

void rtx_store_new_job_id(char id[RTX_JOB_ID_LEN]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    unsigned char rnd[8];
    if (RAND_bytes(rnd, sizeof rnd) != 1) {
        /* The CSPRNG failed (no entropy source): fall back to the clock's nanoseconds and a
         * process-wide counter, still unique within this process. */
        static _Atomic unsigned long counter;
        uint64_t v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)counter++;
        memcpy(rnd, &v, sizeof rnd);
    }
    snprintf(id, RTX_JOB_ID_LEN, "j%012llx%02x%02x%02x%02x%02x%02x%02x%02x",
             (unsigned long long)(ms & 0xffffffffffffull), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
             rnd[5], rnd[6], rnd[7]);
}
