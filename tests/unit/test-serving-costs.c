/*
 * test-serving-costs.c - learned costs of the serving core kept in the store: a version's
 * moving average of per-request run times survives a restart and an unload, in rows of their
 * own device name (through the device set's book, opened on the store); without a book it is
 * learned but not kept.
 *
 * The test model "scale" and the fixtures are in test-serving-util.h.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "device/device.h"
#include "serving/serving-impl.h"
#include "store/store.h"
#include "tests/unit/test-serving-util.h"

/* ------------------------------------------------------------------------------------------
 * Learned costs kept in the store (suite serving_costs): a version's moving average of
 * per-request run times survives a restart and an unload, in rows of their own device name
 * ---------------------------------------------------------------------------------------- */

/* A store in REPO/.store (hidden: the repository does not list it as a model). */
static struct rtx_store *costs_store(const struct serving_fx *f) {
    char path[256];
    snprintf(path, sizeof path, "%s/.store/rtxd.db", f->repo);
    struct rtx_store_options so = {.path = path, .sync_normal = true};
    struct rtx_store *st;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_open(&so, &st, &err) == 0, "%s", err.msg);
    return st;
}

/* Opens the fixture's device set's book of learned costs on st (what rtxd does at start). */
static void costs_open(const struct serving_fx *f, struct rtx_store *st) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx_devices_costs_open(f->devices, st, &err) == 0, "%s", err.msg);
}

/* Runs n one-row requests of "scale", one after the other. */
static void costs_run(struct rtx_serving *s, int n) {
    for (int i = 0; i < n; i++) {
        struct call c;
        struct rtx_err err = {0};
        call_init(&c);
        ck_assert_msg(submit(s, "scale", 1, (float)i, &c, 0, NULL, &err) == 0, "%s", err.msg);
        call_wait(&c);
        check_scale(&c, 1, (float)i, 1.0f);
        call_close(&c);
    }
}

/* The learned cost of the newest version of "scale": rtx__model_cost's code. */
static int costs_of_scale(struct rtx_serving *s, int64_t *ema_ns, int64_t *samples) {
    struct rtx_model *m;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_model_get(s, "scale", 0, &m, &err) == 0, "%s", err.msg);
    uint64_t key;
    int rc = rtx__model_cost(m, &key, ema_ns, samples);
    ck_assert(key == rtx__model_cost_key("scale", 1));
    rtx_model_unref(m);
    return rc;
}

/* The store's row for (device, key): true and *row, or false. */
static bool costs_row(struct rtx_store *st, const char *device, uint64_t key,
                      struct rtx_store_cost *row) {
    struct rtx_store_cost *rows;
    int n;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_store_cost_list(st, &rows, &n, &err) == 0, "%s", err.msg);
    bool found = false;
    for (int i = 0; i < n && !found; i++)
        if (rows[i].key == key && strcmp(rows[i].device, device) == 0) {
            *row = rows[i];
            found = true;
        }
    rtx_free(rows);
    return found;
}

/* Requests run, serving stops (saving the cost), serving starts again on the same store and
 * the version's scheduler starts from the saved average, which its admission estimates use;
 * a job manager's row with the same key (device "cpu") is neither read nor overwritten. */
START_TEST(costs_survive_a_restart) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    struct rtx_store *st = costs_store(&f);
    uint64_t key = rtx__model_cost_key("scale", 1);
    struct rtx_err err = {0};
    const struct rtx_store_cost job_row = {.device = "cpu", .key = key, .ema_ns = 777777777,
                                           .samples = 5};
    ck_assert_msg(rtx_store_cost_put(st, &job_row, 1, 1, &err) == 0, "%s", err.msg);
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    costs_open(&f, st);
    fx_start_opts(&f, &o);
    int64_t ema = 0, samples = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), RTX_ENOTFOUND); /* not the job's */
    costs_run(f.s, 6);
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), 0);
    ck_assert_int_eq(samples, 6);
    ck_assert_int_gt(ema, 0);
    rtx_serving_stop(f.s);
    f.s = NULL;

    struct rtx_store_cost row;
    ck_assert(costs_row(st, RTX__COST_DEVICE, key, &row));
    ck_assert_int_eq(row.ema_ns, ema);
    ck_assert_int_eq(row.samples, samples);
    ck_assert(costs_row(st, "cpu", key, &row));
    ck_assert_int_eq(row.ema_ns, 777777777);

    fx_start_opts(&f, &o);
    int64_t ema2 = 0, samples2 = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema2, &samples2), 0);
    ck_assert_int_eq(ema2, ema);
    ck_assert_int_eq(samples2, samples);
    /* admission estimates a queued request at the learned cost: hold the only worker in a
     * callback (its run is learned first), then queue one request */
    struct call gate, c;
    hold_worker(f.s, "scale", 1, 0, &gate);
    ck_assert_int_eq(costs_of_scale(f.s, &ema2, &samples2), 0);
    ck_assert_int_eq(samples2, samples + 1);
    call_init(&c);
    ck_assert_msg(submit(f.s, "scale", 1, 3.0f, &c, 0, NULL, &err) == 0, "%s", err.msg);
    struct rtx_sched_stats *ls = rtx_malloc(sizeof *ls);
    ck_assert_ptr_nonnull(ls);
    struct rtx_model *m;
    ck_assert_msg(rtx_serving_model_get(f.s, "scale", 0, &m, &err) == 0, "%s", err.msg);
    rtx__model_lanes(m, rtx_mono_ns(), ls);
    rtx_model_unref(m);
    int64_t queued_work = 0;
    for (int l = 0; l < ls->n_lanes; l++)
        queued_work += ls->lanes[l].queued_work_ns;
    ck_assert_int_eq(queued_work, ema2);
    rtx_free(ls);
    call_open_gate(&gate);
    call_wait(&gate);
    call_wait(&c);
    check_scale(&c, 1, 3.0f, 1.0f);
    call_close(&c);
    call_close(&gate);
    ck_assert_int_eq(costs_of_scale(f.s, &ema2, &samples2), 0);
    rtx_serving_stop(f.s);
    f.s = NULL;
    ck_assert(costs_row(st, RTX__COST_DEVICE, key, &row));
    ck_assert_int_eq(row.ema_ns, ema2);
    ck_assert_int_eq(row.samples, samples + 2);
    rtx_store_close(st);
    fx_stop(&f);
}
END_TEST

/* An explicit unload saves the cost; a load after it (same process) continues from it. */
START_TEST(costs_are_saved_at_unload) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    struct rtx_store *st = costs_store(&f);
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_EXPLICIT);
    costs_open(&f, st);
    fx_start_opts(&f, &o);
    struct rtx_err err = {0};
    ck_assert_msg(rtx_serving_load(f.s, "scale", NULL, &err) == 0, "%s", err.msg);
    costs_run(f.s, 3);
    int64_t ema = 0, samples = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), 0);
    ck_assert_msg(rtx_serving_unload(f.s, "scale", &err) == 0, "%s", err.msg);
    struct rtx_store_cost row;
    ck_assert(costs_row(st, RTX__COST_DEVICE, rtx__model_cost_key("scale", 1), &row));
    ck_assert_int_eq(row.ema_ns, ema);
    ck_assert_int_eq(row.samples, 3);
    ck_assert_msg(rtx_serving_load(f.s, "scale", NULL, &err) == 0, "%s", err.msg);
    int64_t ema2 = 0, samples2 = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema2, &samples2), 0);
    ck_assert_int_eq(ema2, ema);
    ck_assert_int_eq(samples2, 3);
    fx_stop(&f);
    rtx_store_close(st);
}
END_TEST

/* Without a store (the book never opened) the cost is learned and serves, and a new server
 * starts from nothing. */
START_TEST(costs_without_a_store_are_not_kept) {
    struct serving_fx f;
    fx_model(&f, "scale", 8, NULL, RTX_MODEL_CONTROL_NONE);
    int64_t ema = 0, samples = 0;
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), RTX_ENOTFOUND);
    costs_run(f.s, 2);
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), 0);
    ck_assert_int_eq(samples, 2);
    rtx_serving_stop(f.s);
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    ck_assert_int_eq(costs_of_scale(f.s, &ema, &samples), RTX_ENOTFOUND);
    costs_run(f.s, 1);
    fx_stop(&f);
}
END_TEST

Suite *rtx_serving_costs_suite(void) {
    Suite *s = suite_create("serving_costs");
    TCase *tc = tcase_create("serving_costs");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, costs_survive_a_restart);
    tcase_add_test(tc, costs_are_saved_at_unload);
    tcase_add_test(tc, costs_without_a_store_are_not_kept);
    suite_add_tcase(s, tc);
    return s;
}
