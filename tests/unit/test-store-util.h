/*
 * test-store-util.h - what the store's test files (tests/unit/test-store*.c) share: a store in
 * its own temporary directory (struct fixture), job rows inserted and moved through their
 * states, output tensors made, compared and freed, and the store's statistics. Private to
 * those files.
 *
 * DESIGN: the helpers keep the short names they had as statics of one test-store.c, so the
 * tests moved into their files unchanged; only these files include this header.
 */
#ifndef RTX_TEST_STORE_UTIL_H
#define RTX_TEST_STORE_UTIL_H

#include <ftw.h>
#include <stdint.h>
#include <sys/stat.h>

#include "store/store-impl.h"

struct fixture {
    char dir[64];
    char path[128];
    struct rtx_store *s;
};

/* nftw's callback that removes every entry (with FTW_DEPTH: a directory after its contents). */
int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw);

/* fixture_dir: a fresh directory from mkdtemp and, in a subdirectory that does not exist yet
 * (open creates it), the store's path; store_open opens the store there with the given
 * retention (0: none) and fails the test on error; fixture_open does both; fixture_close
 * closes the store and removes the directory; reopen closes and opens the store again. */
void fixture_dir(struct fixture *fx);
void store_open(struct fixture *fx, int64_t max_age_ms, int64_t max_bytes);
void fixture_open(struct fixture *fx);
void fixture_close(struct fixture *fx);
void reopen(struct fixture *fx);

/* A job row with fixed defaults; strings point at literals (insert copies nothing). */
void job_init(struct rtx_job_info *j, const char *id, int64_t created_ms);
/* Inserts j (request "req"), failing the test unless it is new. */
void insert_ok(struct rtx_store *s, const struct rtx_job_info *j);
/* Inserts a job_init row. */
void insert_simple(struct rtx_store *s, const char *id, int64_t created_ms);
void set_state_ok(struct rtx_store *s, const char *id, enum rtx_job_state st, int64_t now_ms);
/* Runs one job to success with the given outputs. */
void succeed_ok(struct rtx_store *s, const char *id, int64_t now_ms, int n,
                const char *const *names, struct rtx_tensor *const *outs);

/* A tensor of random values from seed (0..100 for unsigned types, -100..100 otherwise). */
struct rtx_tensor *filled(enum rtx_dtype dt, int ndim, const int64_t *dims, unsigned seed);
/* Fails the test unless b (contiguous) has a's dtype, dims and values. */
void assert_same_tensor(const struct rtx_tensor *a, const struct rtx_tensor *b);
/* Frees the outputs and names that the store's read of a job's outputs returned. */
void free_outputs(struct rtx_tensor **t, char **names, int n);
/* rtx_store_stats, failing the test on error. */
struct rtx_store_stats stats(struct rtx_store *s);

#endif /* RTX_TEST_STORE_UTIL_H */
