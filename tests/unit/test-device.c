/*
 * test-device.c - the device layer (device/device.h): budgets and reservations, CPU and GPU
 * backends charged to their consumer, health and fault listeners, the plan cache, placement.
 *
 * DESIGN
 * GPUs are fakes made through rtx_device_gpu_i: a CPU backend underneath (made with the
 * consumer's account, so its buffers are charged as a CUDA pool's segments would be) behind
 * a vtable that counts the nodes it runs and can turn "sticky": its nodes and synchronize
 * then fail with RTX_EGPU, as a CUDA context that kept an error does. The fake GPUs' memory
 * is whole MiB so that budgets and messages read plainly.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device.h"
#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend-impl.h"
#include "runtime/mem-pool.h"
#include "tests/unit/test-util.h"

#define MIB ((size_t)1 << 20)
#define N_FAKE 3

/* ------------------------------------------------------------------------------------------
 * Fake GPUs
 * ---------------------------------------------------------------------------------------- */

struct fake {
    struct rtx_backend be;
    struct rtx_backend *cpu;
    int cuda;
    bool sticky;                   /* nodes and synchronize fail with RTX_EGPU */
    int nodes_run;
};

static int fail_cuda = -1;         /* backend_new fails with RTX_EGPU on this device */
static bool sticky_new;            /* new fakes start sticky (a warm-up that faults) */
static int pool_stats_calls;
static struct fake *last_fake;

static struct fake *fake_of(struct rtx_backend *be) { return (struct fake *)be; }

static const char *fake_name(struct rtx_backend *be) { return "fake-gpu"; }

static void fake_free(struct rtx_backend *be) {
    rtx_backend_free(fake_of(be)->cpu);
    if (last_fake == fake_of(be)) last_fake = NULL;
    free(be);
}

static bool fake_supports(struct rtx_backend *be, const struct rtx_graph *g,
                          const struct rtx_node *n) {
    return rtx_backend_supports_node(fake_of(be)->cpu, g, n);
}

static int fake_buffer(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                       struct rtx_err *err) {
    return rtx_backend_buffer_new(fake_of(be)->cpu, bytes, out, err);
}

static int fake_run(struct rtx_backend *be, const struct rtx_node_args *a, struct rtx_err *err) {
    struct fake *f = fake_of(be);
    if (f->sticky) return rtx_err_set(err, RTX_EGPU, "cudaErrorIllegalAddress (fake)");
    f->nodes_run++;
    return rtx_backend_run_node(f->cpu, a, err);
}

static int fake_sync(struct rtx_backend *be, struct rtx_err *err) {
    if (fake_of(be)->sticky)
        return rtx_err_set(err, RTX_EGPU, "cuda:%d: cudaErrorIllegalAddress (fake, sticky)",
                           fake_of(be)->cuda);
    return 0;
}

static const struct rtx_backend_i fake_iface = {
    .name = fake_name,
    .free = fake_free,
    .supports_node = fake_supports,
    .buffer_new = fake_buffer,
    .run_node = fake_run,
    .synchronize = fake_sync,
};

static int fake_new(void *ctx, int cuda, struct rtx_mem_account *account,
                    struct rtx_backend **out, struct rtx_err *err) {
    if (cuda == fail_cuda)
        return rtx_err_set(err, RTX_EGPU, "cuda:%d: cudaErrorDevicesUnavailable (fake)", cuda);
    struct fake *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    struct rtx_cpu_options co = {.n_threads = 1, .account = account};
    ck_assert_int_eq(rtx_backend_cpu_new(&co, &f->cpu, err), 0);
    f->be.iface = &fake_iface;
    f->cuda = cuda;
    f->sticky = sticky_new;
    last_fake = f;
    *out = &f->be;
    return 0;
}

static int fake_pool_stats(void *ctx, struct rtx_backend *be, struct rtx_mem_pool_stats *dev,
                           struct rtx_mem_pool_stats *pinned, struct rtx_err *err) {
    pool_stats_calls++;
    if (dev) memset(dev, 0, sizeof *dev);
    if (pinned) memset(pinned, 0, sizeof *pinned);
    if (dev) dev->cap_bytes = 42;
    return 0;
}

static const struct rtx_device_gpu_i fake_gpus = {
    .backend_new = fake_new,
    .pool_stats = fake_pool_stats,
};

/* ------------------------------------------------------------------------------------------
 * Fixture: N_FAKE GPUs of 1000 MiB each (budget 1000 MiB: fraction 1), a 64 MiB CPU
 * ---------------------------------------------------------------------------------------- */

static struct rtx_cuda_device gpu_devs[N_FAKE];
static struct rtx_cuda_devices gpu_list;
static struct rtx_devices *set;

static struct rtx_devices_options base_options(void) {
    memset(gpu_devs, 0, sizeof gpu_devs);
    for (int i = 0; i < N_FAKE; i++) {
        gpu_devs[i].index = i;
        snprintf(gpu_devs[i].name, sizeof gpu_devs[i].name, "Fake GPU %d", i);
        gpu_devs[i].memory_bytes = 1000 * MIB;
        gpu_devs[i].sm_count = 132;
        gpu_devs[i].cc_major = 9;
        gpu_devs[i].healthy = true;
    }
    gpu_list = (struct rtx_cuda_devices){.n = N_FAKE, .devs = gpu_devs};
    fail_cuda = -1;
    sticky_new = false;
    pool_stats_calls = 0;
    return (struct rtx_devices_options){
        .gpus = &gpu_list,
        .cpu_threads = 1,
        .memory_fraction = 1.0,
        .cpu_memory_bytes = 64 * MIB,
        .plan_cache = 2,
        .no_warm_up = true,
        .gpu_iface = &fake_gpus,
    };
}

static void open_set(const struct rtx_devices_options *o) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx_devices_new(o, &set, &err) == 0, "%s", err.msg);
}

static void setup(void) {
    struct rtx_devices_options o = base_options();
    open_set(&o);
}

static void teardown(void) {
    rtx_devices_free(set);
    set = NULL;
}

static struct rtx_device *gpu(int i) { return rtx_devices_cuda(set, i); }

static struct rtx_device_consumer *consumer(struct rtx_device *d, const char *name,
                                            size_t reserve) {
    struct rtx_device_consumer *c = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_device_consumer_new(d, name, reserve, &c, &err) == 0, "%s", err.msg);
    return c;
}

static struct rtx_backend *backend(struct rtx_device_consumer *c) {
    struct rtx_backend *be = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_device_backend_new(c, &be, &err) == 0, "%s", err.msg);
    return be;
}

static struct rtx_device_info info(struct rtx_device *d) {
    struct rtx_device_info i;
    rtx_device_info(d, &i);
    return i;
}

static void charge_ok(struct rtx_device_consumer *c, size_t bytes) {
    struct rtx_err err = {0};
    ck_assert_msg(rtx_device_consumer_charge(c, bytes, &err) == 0, "%s", err.msg);
}

/* ------------------------------------------------------------------------------------------
 * The set
 * ---------------------------------------------------------------------------------------- */

START_TEST(device_set_has_cpu_and_listed_gpus) {
    struct rtx_devices_options o = base_options();
    gpu_devs[1].healthy = false;
    snprintf(gpu_devs[1].detail, sizeof gpu_devs[1].detail, "self-test failed (fake)");
    o.memory_fraction = 0.5;
    o.memory_cap_bytes = 400 * MIB;
    open_set(&o);
    ck_assert_int_eq(rtx_devices_count(set), 1 + N_FAKE);
    ck_assert_str_eq(rtx_devices_no_gpu_reason(set), "");
    struct rtx_device *cpu = rtx_devices_get(set, 0);
    ck_assert_str_eq(rtx_device_name(cpu), "cpu");
    ck_assert_int_eq(rtx_device_kind(cpu), RTX_DEVICE_CPU);
    ck_assert_int_eq(rtx_device_cuda_index(cpu), -1);
    ck_assert_uint_eq(info(cpu).budget_bytes, 32 * MIB); /* half of 64 MiB, under the cap */
    ck_assert_ptr_eq(rtx_devices_get(set, 2), gpu(1));
    ck_assert_ptr_null(rtx_devices_get(set, 1 + N_FAKE));
    ck_assert_ptr_null(rtx_devices_cuda(set, N_FAKE));
    ck_assert_ptr_null(rtx_devices_cuda(set, -1));
    struct rtx_device_info i = info(gpu(0));
    ck_assert_str_eq(i.name, "cuda:0");
    ck_assert_str_eq(i.model, "Fake GPU 0");
    ck_assert_int_eq(i.slot, 1);
    ck_assert_int_eq(i.cuda, 0);
    ck_assert_int_eq(i.sm_count, 132);
    ck_assert_int_eq(i.cc_major, 9);
    ck_assert_uint_eq(i.memory_bytes, 1000 * MIB);
    ck_assert_uint_eq(i.budget_bytes, 400 * MIB); /* 500 MiB capped */
    ck_assert(i.healthy);
    ck_assert(!rtx_device_healthy(gpu(1)));
    char detail[64];
    rtx_device_detail(gpu(1), detail, sizeof detail);
    ck_assert_str_eq(detail, "self-test failed (fake)");
    teardown();
}
END_TEST

START_TEST(device_set_without_gpus_says_why) {
    struct rtx_devices_options o = base_options();
    o.gpus = NULL;
    open_set(&o);
    ck_assert_int_eq(rtx_devices_count(set), 1);
    ck_assert_str_eq(rtx_devices_no_gpu_reason(set), "none was listed at start");
    teardown();
    struct rtx_cuda_devices none = {.n = 0};
    snprintf(none.absent, sizeof none.absent, "no NVIDIA driver is installed");
    o.gpus = &none;
    open_set(&o);
    ck_assert_str_eq(rtx_devices_no_gpu_reason(set), "no NVIDIA driver is installed");
    int out[RTX_DEVICES_MAX];
    ck_assert_int_eq(rtx_devices_place(set, NULL, out), 0);
    teardown();
}
END_TEST

START_TEST(device_set_rejects_bad_options) {
    struct rtx_devices_options o = base_options();
    struct rtx_err err = {0};
    o.memory_fraction = 1.5;
    ck_assert_int_eq(rtx_devices_new(&o, &set, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "memory_fraction"));
    o = base_options();
    o.plan_cache = -1;
    ck_assert_int_eq(rtx_devices_new(&o, &set, &err), RTX_EINVAL);
    ck_assert_ptr_null(set);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Budget
 * ---------------------------------------------------------------------------------------- */

START_TEST(budget_reservation_that_does_not_fit_is_refused) {
    setup();
    struct rtx_device_consumer *a = consumer(gpu(0), "jobs", 600 * MIB), *b = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_device_consumer_new(gpu(0), "model mlp:1", 500 * MIB, &b, &err),
                     RTX_ELIMIT);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(err.msg, "cuda:0") && strstr(err.msg, "'model mlp:1'") &&
                      strstr(err.msg, "500 MiB") && strstr(err.msg, "400 MiB"),
                  "%s", err.msg);
    struct rtx_device_info i = info(gpu(0));
    ck_assert_uint_eq(i.reserved_bytes, 600 * MIB);
    ck_assert_int_eq(i.consumers, 1);
    b = consumer(gpu(0), "model mlp:1", 400 * MIB); /* exactly what is left */
    rtx_device_consumer_free(a);
    rtx_device_consumer_free(b);
    i = info(gpu(0));
    ck_assert_uint_eq(i.reserved_bytes, 0);
    ck_assert_int_eq(i.consumers, 0);
    teardown();
}
END_TEST

START_TEST(budget_reservation_is_always_usable) {
    setup();
    struct rtx_device_consumer *a = consumer(gpu(0), "jobs", 300 * MIB);
    struct rtx_device_consumer *b = consumer(gpu(0), "kv-cache", 0);
    charge_ok(b, 700 * MIB); /* borrows the whole unreserved rest */
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_device_consumer_charge(b, 1, &err), RTX_ENOMEM);
    charge_ok(a, 300 * MIB); /* its reservation, though b borrowed everything else */
    ck_assert_int_eq(rtx_device_consumer_charge(a, MIB, &err), RTX_ENOMEM);
    ck_assert_msg(strstr(err.msg, "cuda:0") && strstr(err.msg, "'jobs'") &&
                      strstr(err.msg, "would use 301 MiB") &&
                      strstr(err.msg, "reserved 300 MiB") &&
                      strstr(err.msg, "only 0 B of the unreserved 700 MiB is free to borrow"),
                  "%s", err.msg);
    struct rtx_device_info i = info(gpu(0));
    ck_assert_uint_eq(i.used_bytes, 1000 * MIB);
    ck_assert_uint_eq(i.borrowed_bytes, 700 * MIB);
    ck_assert_uint_eq(i.refusals, 2);
    struct rtx_device_consumer_info ci[3];
    ck_assert_int_eq(rtx_device_consumers(gpu(0), ci, 3), 2);
    ck_assert_str_eq(ci[0].name, "jobs");
    ck_assert_uint_eq(ci[0].reserved_bytes, 300 * MIB);
    ck_assert_uint_eq(ci[0].used_bytes, 300 * MIB);
    ck_assert_uint_eq(ci[0].refusals, 1);
    ck_assert_str_eq(ci[1].name, "kv-cache");
    ck_assert_uint_eq(ci[1].used_bytes, 700 * MIB);
    ck_assert_uint_eq(ci[1].refusals, 1);
    rtx_device_consumer_credit(a, 300 * MIB);
    rtx_device_consumer_credit(b, 700 * MIB);
    i = info(gpu(0));
    ck_assert_uint_eq(i.used_bytes, 0);
    ck_assert_uint_eq(i.borrowed_bytes, 0);
    ck_assert_int_eq(rtx_device_consumers(gpu(0), ci, 3), 2);
    ck_assert_uint_eq(ci[1].peak_bytes, 700 * MIB);
    ck_assert_uint_eq(ci[1].used_bytes, 0);
    rtx_device_consumer_free(a);
    rtx_device_consumer_free(b);
    teardown();
}
END_TEST

START_TEST(budget_borrowing_is_first_come) {
    setup();
    struct rtx_device_consumer *a = consumer(gpu(0), "a", 100 * MIB);
    struct rtx_device_consumer *b = consumer(gpu(0), "b", 100 * MIB);
    charge_ok(a, 500 * MIB); /* 400 MiB borrowed of the 800 MiB unreserved */
    charge_ok(b, 100 * MIB + 400 * MIB);
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_device_consumer_charge(b, MIB, &err), RTX_ENOMEM);
    ck_assert_int_eq(err.code, RTX_ENOMEM);
    rtx_device_consumer_credit(a, 450 * MIB); /* a is back within its reservation */
    struct rtx_device_info i = info(gpu(0));
    ck_assert_uint_eq(i.borrowed_bytes, 400 * MIB);
    charge_ok(b, 400 * MIB); /* what a gave back may be borrowed again */
    ck_assert_int_eq(rtx_device_consumer_charge(b, MIB, &err), RTX_ENOMEM);
    charge_ok(a, 50 * MIB); /* a's own reservation stays usable */
    rtx_device_consumer_credit(a, 100 * MIB);
    rtx_device_consumer_credit(b, 900 * MIB);
    ck_assert_uint_eq(info(gpu(0)).used_bytes, 0);
    rtx_device_consumer_free(a);
    rtx_device_consumer_free(b);
    teardown();
}
END_TEST

START_TEST(budget_reservation_cannot_take_lent_memory) {
    setup();
    struct rtx_device_consumer *a = consumer(gpu(0), "a", 0), *b = NULL;
    charge_ok(a, 800 * MIB);
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_device_consumer_new(gpu(0), "b", 300 * MIB, &b, &err), RTX_ELIMIT);
    ck_assert_ptr_nonnull(strstr(err.msg, "only 200 MiB"));
    b = consumer(gpu(0), "b", 200 * MIB);
    charge_ok(b, 200 * MIB);
    rtx_device_consumer_credit(a, 800 * MIB);
    rtx_device_consumer_credit(b, 200 * MIB);
    rtx_device_consumer_free(a);
    rtx_device_consumer_free(b);
    teardown();
}
END_TEST

START_TEST(budget_account_is_the_consumer_share) {
    setup();
    struct rtx_device_consumer *a = consumer(gpu(2), "a", 10 * MIB);
    ck_assert_ptr_eq(rtx_device_consumer_device(a), gpu(2));
    struct rtx_mem_account *acc = rtx_device_consumer_account(a);
    struct rtx_err err = {0};
    ck_assert_int_eq(acc->charge(acc, 1000 * MIB, &err), 0);
    ck_assert_int_eq(acc->charge(acc, 1, &err), RTX_ENOMEM);
    acc->credit(acc, 1000 * MIB);
    ck_assert_uint_eq(info(gpu(2)).used_bytes, 0);
    rtx_device_consumer_free(a);
    teardown();
}
END_TEST

START_TEST(budget_cpu_backend_buffers_are_charged) {
    setup();
    struct rtx_device *cpu = rtx_devices_get(set, 0);
    struct rtx_device_consumer *big = consumer(cpu, "big", 62 * MIB);
    struct rtx_device_consumer *small = consumer(cpu, "small", MIB);
    struct rtx_backend *be = backend(small);
    ck_assert_str_eq(rtx_backend_name(be), "cpu");
    struct rtx_buffer *buf = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_backend_buffer_new(be, 4 * MIB, &buf, &err), RTX_ENOMEM);
    ck_assert_msg(strstr(err.msg, "cpu: consumer 'small' would use 4 MiB"), "%s", err.msg);
    ck_assert_msg(rtx_backend_buffer_new(be, 1536 * 1024, &buf, &err) == 0, "%s", err.msg);
    struct rtx_device_consumer_info ci[2];
    rtx_device_consumers(cpu, ci, 2);
    ck_assert_uint_eq(ci[1].used_bytes, 1536 * 1024);
    ck_assert_int_eq(ci[1].backends, 1);
    rtx_buffer_unref(buf);
    rtx_device_consumers(cpu, ci, 2);
    ck_assert_uint_eq(ci[1].used_bytes, 0);
    /* a plan whose output is larger than the share fails the run, not the process */
    struct rtx_graph *g = NULL;
    const int64_t dims[] = {1024, 1024}; /* 4 MiB */
    ck_assert_int_eq(rtx_graph_new("big", &g, &err), 0);
    ck_assert_int_eq(rtx_graph_add_input(g, "x", RTX_F32, 2, dims, &err), 0);
    ck_assert_int_eq(rtx_graph_add_node(g, "relu", "r", (const char *[]){"x"}, 1,
                                        (const char *[]){"y"}, 1, &err),
                     0);
    ck_assert_int_eq(rtx_graph_add_output(g, "y", &err), 0);
    struct rtx_tensor *x = tu_tensor(RTX_F32, 2, dims, NULL), *y = NULL;
    struct rtx_plan *plan = NULL;
    ck_assert_int_eq(rtx_plan_new(g, (const struct rtx_tensor *const *)&x, 1, NULL, &plan, &err),
                     0);
    ck_assert_int_eq(rtx_plan_execute(plan, be, &x, 1, &y, 1, NULL, NULL, &err), RTX_ENOMEM);
    ck_assert_ptr_nonnull(strstr(err.msg, "'small'"));
    rtx_plan_free(plan);
    rtx_graph_free(g);
    rtx_tensor_unref(x);
    rtx_device_consumers(cpu, ci, 2);
    ck_assert_uint_eq(ci[1].used_bytes, 0);
    ck_assert_uint_eq(ci[1].refusals, 2);
    ck_assert_uint_eq(info(cpu).backends, 1);
    rtx_device_backend_free(small, be);
    ck_assert_uint_eq(info(cpu).backends, 0);
    rtx_device_consumer_free(small);
    rtx_device_consumer_free(big);
    teardown();
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * GPU backends
 * ---------------------------------------------------------------------------------------- */

START_TEST(gpu_backend_is_warmed_up_and_charged) {
    struct rtx_devices_options o = base_options();
    o.no_warm_up = false;
    open_set(&o);
    struct rtx_device_consumer *c = consumer(gpu(1), "jobs", 100 * MIB);
    struct rtx_backend *be = backend(c);
    ck_assert_int_eq(fake_of(be)->cuda, 1);
    ck_assert_int_eq(fake_of(be)->nodes_run, 6); /* 3 nodes, twice */
    struct rtx_device_info i = info(gpu(1));
    ck_assert_int_eq(i.backends, 1);
    ck_assert_int_eq(i.backends_warm, 1);
    ck_assert(i.warmup_ms > 0);
    ck_assert_uint_eq(i.used_bytes, 0); /* the warm-up's buffers were charged, then credited */
    struct rtx_device_consumer_info ci;
    rtx_device_consumers(gpu(1), &ci, 1);
    ck_assert_uint_gt(ci.peak_bytes, 0); /* the warm-up's outputs and arena */
    ck_assert_int_eq(ci.backends, 1);
    struct rtx_mem_pool_stats ds;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_device_backend_pool_stats(gpu(1), be, &ds, NULL, &err), 0);
    ck_assert_uint_eq(ds.cap_bytes, 42);
    ck_assert_int_eq(pool_stats_calls, 1);
    ck_assert_int_eq(rtx_device_backend_pool_stats(rtx_devices_get(set, 0), be, &ds, NULL, &err),
                     RTX_EUNSUPPORTED);
    rtx_device_backend_free(c, be);
    i = info(gpu(1));
    ck_assert_int_eq(i.backends, 0);
    ck_assert_int_eq(i.backends_warm, 0);
    rtx_device_consumer_free(c);
    teardown();
}
END_TEST

struct heard {
    int calls;
    struct rtx_device *d;
    char why[256];
};

static void on_fault(void *ctx, struct rtx_device *d, const char *why) {
    struct heard *h = ctx;
    h->calls++;
    h->d = d;
    snprintf(h->why, sizeof h->why, "%s", why);
}

START_TEST(gpu_backend_that_cannot_be_made_faults_the_device) {
    setup();
    struct heard h = {0};
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_devices_on_fault(set, on_fault, &h, &err), 0);
    fail_cuda = 0;
    struct rtx_device_consumer *c = consumer(gpu(0), "jobs", 0);
    struct rtx_backend *be = (void *)1;
    ck_assert_int_eq(rtx_device_backend_new(c, &be, &err), RTX_EGPU);
    ck_assert_ptr_null(be);
    ck_assert_ptr_nonnull(strstr(err.msg, "cudaErrorDevicesUnavailable"));
    ck_assert(!rtx_device_healthy(gpu(0)));
    ck_assert_int_eq(h.calls, 1);
    ck_assert_ptr_eq(h.d, gpu(0));
    ck_assert_ptr_nonnull(strstr(h.why, "cannot create its backend"));
    ck_assert_int_eq(info(gpu(0)).backends, 0);
    fail_cuda = -1;
    ck_assert_int_eq(rtx_device_backend_new(c, &be, &err), RTX_EUNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.msg, "cuda:0 is unhealthy"));
    struct rtx_device_consumer *c2 = NULL;
    ck_assert_int_eq(rtx_device_consumer_new(gpu(0), "late", 0, &c2, &err), RTX_EUNAVAILABLE);
    rtx_device_consumer_free(c);
    teardown();
}
END_TEST

START_TEST(gpu_warm_up_with_a_sticky_error_faults_the_device) {
    struct rtx_devices_options o = base_options();
    o.no_warm_up = false;
    open_set(&o);
    sticky_new = true;
    struct rtx_device_consumer *c = consumer(gpu(2), "serving", 0);
    struct rtx_backend *be = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_device_backend_new(c, &be, &err), RTX_EGPU);
    ck_assert_ptr_null(be);
    ck_assert_ptr_null(last_fake); /* freed */
    ck_assert_msg(strstr(err.msg, "cuda:2") && strstr(err.msg, "warm-up failed"), "%s",
                  err.msg);
    ck_assert(!rtx_device_healthy(gpu(2)));
    struct rtx_device_info i = info(gpu(2));
    ck_assert_int_eq(i.backends, 0);
    ck_assert_uint_eq(i.used_bytes, 0);
    ck_assert(rtx_device_healthy(gpu(1)));
    rtx_device_consumer_free(c);
    teardown();
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Health
 * ---------------------------------------------------------------------------------------- */

START_TEST(health_fault_is_sticky_and_heard_once) {
    setup();
    struct heard h1 = {0}, h2 = {0};
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_devices_on_fault(set, on_fault, &h1, &err), 0);
    ck_assert_int_eq(rtx_devices_on_fault(set, on_fault, &h2, &err), 0);
    ck_assert(rtx_device_fault(gpu(1), "first fault"));
    ck_assert(!rtx_device_fault(gpu(1), "second fault"));
    char detail[64];
    rtx_device_detail(gpu(1), detail, sizeof detail);
    ck_assert_str_eq(detail, "first fault");
    struct rtx_device_info i = info(gpu(1));
    ck_assert(!i.healthy);
    ck_assert_str_eq(i.detail, "first fault");
    ck_assert_int_eq(h1.calls, 1);
    ck_assert_int_eq(h2.calls, 1);
    ck_assert_str_eq(h1.why, "first fault");
    ck_assert(rtx_device_healthy(gpu(0)));
    rtx_devices_off_fault(set, on_fault, &h1);
    ck_assert(rtx_device_fault(gpu(0), "other"));
    ck_assert_int_eq(h1.calls, 1); /* removed */
    ck_assert_int_eq(h2.calls, 2);
    ck_assert_ptr_eq(h2.d, gpu(0));
    teardown();
}
END_TEST

START_TEST(health_listeners_are_bounded) {
    setup();
    struct heard h[9] = {{0}};
    struct rtx_err err = {0};
    for (int i = 0; i < 8; i++) ck_assert_int_eq(rtx_devices_on_fault(set, on_fault, &h[i], &err), 0);
    ck_assert_int_eq(rtx_devices_on_fault(set, on_fault, &h[8], &err), RTX_ELIMIT);
    rtx_devices_off_fault(set, on_fault, &h[3]);
    ck_assert_int_eq(rtx_devices_on_fault(set, on_fault, &h[8], &err), 0);
    rtx_device_fault(gpu(0), "x");
    ck_assert_int_eq(h[3].calls, 0);
    ck_assert_int_eq(h[8].calls, 1);
    teardown();
}
END_TEST

struct slow {
    volatile int started, finished;
};

static void slow_listener(void *ctx, struct rtx_device *d, const char *why) {
    struct slow *s = ctx;
    __atomic_store_n(&s->started, 1, __ATOMIC_SEQ_CST);
    usleep(100 * 1000);
    __atomic_store_n(&s->finished, 1, __ATOMIC_SEQ_CST);
}

static void *fault_thread(void *arg) {
    rtx_device_fault(arg, "from a thread");
    return NULL;
}

START_TEST(health_off_fault_waits_for_a_running_call) {
    setup();
    struct slow s = {0};
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_devices_on_fault(set, slow_listener, &s, &err), 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, fault_thread, gpu(0)), 0);
    while (!__atomic_load_n(&s.started, __ATOMIC_SEQ_CST)) usleep(1000);
    rtx_devices_off_fault(set, slow_listener, &s);
    ck_assert_int_eq(__atomic_load_n(&s.finished, __ATOMIC_SEQ_CST), 1);
    pthread_join(t, NULL);
    teardown();
}
END_TEST

START_TEST(health_check_faults_only_on_a_sticky_error) {
    setup();
    struct heard h = {0};
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_devices_on_fault(set, on_fault, &h, &err), 0);
    struct rtx_device_consumer *c = consumer(gpu(0), "jobs", 0);
    struct rtx_backend *be = backend(c);
    char reason[160] = "node 'mm': out of device memory";
    ck_assert(!rtx_device_check(gpu(0), be, reason, sizeof reason)); /* synchronizes fine */
    ck_assert_str_eq(reason, "node 'mm': out of device memory");
    ck_assert(rtx_device_healthy(gpu(0)));
    fake_of(be)->sticky = true;
    snprintf(reason, sizeof reason, "node 'mm': cudaErrorIllegalAddress");
    ck_assert(rtx_device_check(gpu(0), be, reason, sizeof reason));
    ck_assert_str_eq(reason, "node 'mm': cudaErrorIllegalAddress "
                             "[cuda:0 is now unhealthy and takes no more work]");
    ck_assert(!rtx_device_healthy(gpu(0)));
    ck_assert_int_eq(h.calls, 1);
    ck_assert_ptr_nonnull(strstr(h.why, "sticky"));
    char tiny[8] = "abc";
    ck_assert(rtx_device_check(gpu(0), be, tiny, sizeof tiny)); /* truncated, terminated */
    ck_assert_int_lt(strlen(tiny), sizeof tiny);
    ck_assert_int_eq(h.calls, 1);
    rtx_device_backend_free(c, be);
    rtx_device_consumer_free(c);
    teardown();
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Plan cache
 * ---------------------------------------------------------------------------------------- */

static int released;

/* Frees the graph a plan points into; counts calls. */
static void release_graph(void *owner) {
    released++;
    rtx_graph_free(owner);
}

/* A plan of y = relu(x), x f32[rows, 8]; *g is its graph (the owner to release). */
static struct rtx_plan *make_plan(int rows, struct rtx_graph **g) {
    struct rtx_err err = {0};
    const int64_t dims[] = {rows, 8};
    ck_assert_int_eq(rtx_graph_new("p", g, &err), 0);
    ck_assert_int_eq(rtx_graph_add_input(*g, "x", RTX_F32, 2, dims, &err), 0);
    ck_assert_int_eq(rtx_graph_add_node(*g, "relu", "r", (const char *[]){"x"}, 1,
                                        (const char *[]){"y"}, 1, &err),
                     0);
    ck_assert_int_eq(rtx_graph_add_output(*g, "y", &err), 0);
    struct rtx_tensor *x = tu_tensor(RTX_F32, 2, dims, NULL);
    struct rtx_plan *p = NULL;
    ck_assert_int_eq(rtx_plan_new(*g, (const struct rtx_tensor *const *)&x, 1, NULL, &p, &err),
                     0);
    rtx_tensor_unref(x);
    return p;
}

static bool keep(struct rtx_device *d, struct rtx_backend *be, uint8_t tag, size_t bytes) {
    uint8_t key[RTX_DEVICE_PLAN_KEY_LEN] = {tag};
    struct rtx_graph *g = NULL;
    struct rtx_plan *p = make_plan(4, &g);
    return rtx_device_plan_keep(d, be, key, p, bytes, release_graph, g);
}

static struct rtx_device_plan *take(struct rtx_device *d, struct rtx_backend *be, uint8_t tag) {
    uint8_t key[RTX_DEVICE_PLAN_KEY_LEN] = {tag};
    return rtx_device_plan_take(d, be, key);
}

/* Plan-cache fixture: the CPU device with two backends of one consumer. */
static struct rtx_device_consumer *pc;
static struct rtx_backend *be1, *be2;
static struct rtx_device *cpu_dev;

static void plans_setup(int max_plans, size_t max_bytes) {
    struct rtx_devices_options o = base_options();
    o.plan_cache = max_plans;
    o.plan_cache_bytes = max_bytes;
    open_set(&o);
    released = 0;
    cpu_dev = rtx_devices_get(set, 0);
    pc = consumer(cpu_dev, "jobs", 0);
    be1 = backend(pc);
    be2 = backend(pc);
}

static void plans_teardown(void) {
    rtx_device_backend_free(pc, be1);
    rtx_device_backend_free(pc, be2);
    rtx_device_consumer_free(pc);
    teardown();
}

START_TEST(plan_cache_counts_hits_and_misses_per_backend) {
    plans_setup(4, 0);
    ck_assert_ptr_null(take(cpu_dev, be1, 1));
    ck_assert(keep(cpu_dev, be1, 1, 100));
    ck_assert_ptr_null(take(cpu_dev, be2, 1)); /* same key, other backend: its own entry */
    struct rtx_device_plan *p = take(cpu_dev, be1, 1);
    ck_assert_ptr_nonnull(p);
    struct rtx_plan *plan = rtx_device_plan_get(p);
    ck_assert_ptr_nonnull(plan);
    ck_assert_int_eq(info(cpu_dev).plans, 0); /* out while it runs */
    ck_assert_ptr_null(take(cpu_dev, be1, 1));
    rtx_device_plan_return(cpu_dev, p, true);
    p = take(cpu_dev, be1, 1);
    ck_assert_ptr_eq(rtx_device_plan_get(p), plan);
    rtx_device_plan_return(cpu_dev, p, true);
    struct rtx_device_info i = info(cpu_dev);
    ck_assert_int_eq(i.plans, 1);
    ck_assert_uint_eq(i.plan_bytes, 100);
    ck_assert_uint_eq(i.plan_hits, 2);
    ck_assert_uint_eq(i.plan_misses, 3);
    ck_assert_uint_eq(i.plan_evictions, 0);
    ck_assert_int_eq(released, 0);
    plans_teardown();
    ck_assert_int_eq(released, 1);
}
END_TEST

START_TEST(plan_cache_drops_least_recently_used_by_count) {
    plans_setup(2, 0);
    ck_assert(keep(cpu_dev, be1, 1, 10));
    ck_assert(keep(cpu_dev, be1, 2, 10));
    rtx_device_plan_return(cpu_dev, take(cpu_dev, be1, 1), true); /* 1 is most recent */
    ck_assert(keep(cpu_dev, be2, 3, 10));                         /* drops 2 */
    ck_assert_int_eq(released, 1);
    ck_assert_ptr_null(take(cpu_dev, be1, 2));
    struct rtx_device_plan *p = take(cpu_dev, be1, 1);
    ck_assert_ptr_nonnull(p);
    rtx_device_plan_return(cpu_dev, p, true);
    struct rtx_device_info i = info(cpu_dev);
    ck_assert_int_eq(i.plans, 2);
    ck_assert_uint_eq(i.plan_evictions, 1);
    plans_teardown();
    ck_assert_int_eq(released, 3);
}
END_TEST

START_TEST(plan_cache_drops_least_recently_used_by_bytes) {
    plans_setup(10, 1000);
    ck_assert(keep(cpu_dev, be1, 1, 400));
    ck_assert(keep(cpu_dev, be1, 2, 400));
    ck_assert(keep(cpu_dev, be1, 3, 400)); /* drops 1 */
    ck_assert_int_eq(released, 1);
    ck_assert_ptr_null(take(cpu_dev, be1, 1));
    ck_assert(!keep(cpu_dev, be1, 4, 1001)); /* alone over the bound: freed at once */
    ck_assert_int_eq(released, 2);
    struct rtx_device_info i = info(cpu_dev);
    ck_assert_int_eq(i.plans, 2);
    ck_assert_uint_eq(i.plan_bytes, 800);
    ck_assert_uint_eq(i.plan_evictions, 1);
    plans_teardown();
    ck_assert_int_eq(released, 4);
}
END_TEST

START_TEST(plan_cache_drops_a_plan_whose_run_failed) {
    plans_setup(4, 0);
    ck_assert(keep(cpu_dev, be1, 1, 10));
    struct rtx_device_plan *p = take(cpu_dev, be1, 1);
    rtx_device_plan_return(cpu_dev, p, false);
    ck_assert_int_eq(released, 1);
    ck_assert_ptr_null(take(cpu_dev, be1, 1));
    struct rtx_device_info i = info(cpu_dev);
    ck_assert_int_eq(i.plans, 0);
    ck_assert_uint_eq(i.plan_evictions, 1);
    plans_teardown();
    ck_assert_int_eq(released, 1);
}
END_TEST

START_TEST(plan_cache_backend_free_drops_its_plans) {
    plans_setup(4, 0);
    ck_assert(keep(cpu_dev, be1, 1, 10));
    ck_assert(keep(cpu_dev, be1, 2, 10));
    ck_assert(keep(cpu_dev, be2, 1, 10));
    rtx_device_backend_free(pc, be1);
    be1 = NULL;
    ck_assert_int_eq(released, 2);
    ck_assert_int_eq(info(cpu_dev).plans, 1);
    /* a plan returned after its backend was freed (outside the contract) is freed too */
    struct rtx_device_plan *p = take(cpu_dev, be2, 1);
    ck_assert_ptr_nonnull(p);
    rtx_device_backend_free(pc, be2);
    be2 = NULL;
    rtx_device_plan_return(cpu_dev, p, true);
    ck_assert_int_eq(released, 3);
    ck_assert_int_eq(info(cpu_dev).plans, 0);
    /* and a plan kept for a backend the device does not know is not kept */
    be1 = backend(pc);
    struct rtx_backend *stranger = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_backend_cpu_new(&(struct rtx_cpu_options){.n_threads = 1}, &stranger,
                                         &err),
                     0);
    ck_assert(!keep(cpu_dev, stranger, 9, 10));
    ck_assert_int_eq(released, 4);
    rtx_backend_free(stranger);
    be2 = backend(pc);
    plans_teardown();
}
END_TEST

START_TEST(plan_cache_off_keeps_nothing) {
    plans_setup(0, 0);
    ck_assert(!keep(cpu_dev, be1, 1, 10));
    ck_assert_int_eq(released, 1);
    ck_assert_ptr_null(take(cpu_dev, be1, 1));
    struct rtx_device_info i = info(cpu_dev);
    ck_assert_int_eq(i.plans, 0);
    ck_assert_uint_eq(i.plan_misses, 0); /* nothing to count when off */
    plans_teardown();
}
END_TEST

START_TEST(plan_cache_clear_drops_kept_plans_only) {
    plans_setup(4, 0);
    ck_assert(keep(cpu_dev, be1, 1, 10));
    ck_assert(keep(cpu_dev, be1, 2, 10));
    ck_assert(keep(cpu_dev, be2, 3, 10));
    struct rtx_device_plan *p = take(cpu_dev, be2, 3);
    ck_assert_int_eq(rtx_device_plans_clear(cpu_dev), 2);
    ck_assert_int_eq(released, 2);
    rtx_device_plan_return(cpu_dev, p, true); /* taken out: survives and comes back */
    ck_assert_int_eq(info(cpu_dev).plans, 1);
    ck_assert_int_eq(released, 2);
    plans_teardown();
    ck_assert_int_eq(released, 3);
}
END_TEST

START_TEST(plan_cache_keep_replaces_the_same_key) {
    plans_setup(4, 0);
    ck_assert(keep(cpu_dev, be1, 1, 10));
    ck_assert(keep(cpu_dev, be1, 1, 20));
    ck_assert_int_eq(released, 1);
    struct rtx_device_info i = info(cpu_dev);
    ck_assert_int_eq(i.plans, 1);
    ck_assert_uint_eq(i.plan_bytes, 20);
    plans_teardown();
}
END_TEST

START_TEST(plan_key_covers_content_inputs_and_limits) {
    const int64_t d1[] = {2, 3}, d2[] = {3, 2};
    struct rtx_tensor *a = tu_tensor(RTX_F32, 2, d1, NULL), *b = tu_tensor(RTX_F32, 2, d2, NULL);
    struct rtx_tensor *c = tu_tensor(RTX_F16, 2, d1, NULL);
    struct rtx_limits lim = rtx_limits_default(), lim2 = lim;
    lim2.max_nodes--;
    uint8_t k[6][RTX_DEVICE_PLAN_KEY_LEN];
    struct rtx_err err = {0};
    const struct rtx_tensor *const ia[] = {a}, *const ib[] = {b}, *const ic[] = {c};
    ck_assert_int_eq(rtx_device_plan_key("graph", 5, ia, 1, &lim, k[0], &err), 0);
    ck_assert_int_eq(rtx_device_plan_key("graph", 5, ia, 1, NULL, k[1], &err), 0);
    ck_assert_int_eq(rtx_device_plan_key("graph", 5, ib, 1, &lim, k[2], &err), 0);
    ck_assert_int_eq(rtx_device_plan_key("graph", 5, ic, 1, &lim, k[3], &err), 0);
    ck_assert_int_eq(rtx_device_plan_key("graph", 5, ia, 1, &lim2, k[4], &err), 0);
    ck_assert_int_eq(rtx_device_plan_key("grapH", 5, ia, 1, &lim, k[5], &err), 0);
    ck_assert_mem_eq(k[0], k[1], RTX_DEVICE_PLAN_KEY_LEN); /* NULL: the default limits */
    for (int i = 2; i < 6; i++)
        ck_assert_msg(memcmp(k[0], k[i], RTX_DEVICE_PLAN_KEY_LEN) != 0, "key %d equals", i);
    uint8_t again[RTX_DEVICE_PLAN_KEY_LEN];
    ck_assert_int_eq(rtx_device_plan_key("graph", 5, ia, 1, &lim, again, &err), 0);
    ck_assert_mem_eq(k[0], again, RTX_DEVICE_PLAN_KEY_LEN);
    rtx_tensor_unref(a);
    rtx_tensor_unref(b);
    rtx_tensor_unref(c);
}
END_TEST

START_TEST(plan_bytes_counts_arena_inputs_and_outputs) {
    struct rtx_graph *g = NULL;
    struct rtx_plan *p = make_plan(4, &g); /* x and y are f32[4, 8]: 128 bytes each */
    ck_assert_uint_eq(rtx_device_plan_bytes(p), rtx_plan_arena_bytes(p) + 128 + 128);
    rtx_plan_free(p);
    rtx_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Placement
 * ---------------------------------------------------------------------------------------- */

START_TEST(place_orders_by_load_per_executor_then_headroom) {
    setup();
    struct rtx_device_consumer *c[N_FAKE];
    struct rtx_backend *b[4];
    for (int i = 0; i < N_FAKE; i++) c[i] = consumer(gpu(i), "jobs", 0);
    b[0] = backend(c[0]);
    b[1] = backend(c[0]);
    b[2] = backend(c[1]);
    b[3] = backend(c[2]);
    rtx_device_load_add(gpu(0), 2); /* 1 per executor */
    rtx_device_load_add(gpu(1), 1); /* 1 per executor */
    rtx_device_load_add(gpu(2), 3);
    rtx_device_load_add(gpu(2), -2); /* 1 per executor */
    charge_ok(c[0], 100 * MIB);
    charge_ok(c[2], 50 * MIB);
    int out[RTX_DEVICES_MAX];
    ck_assert_int_eq(rtx_devices_place(set, NULL, out), 3);
    ck_assert_int_eq(out[0], 2); /* tie on load: most headroom first */
    ck_assert_int_eq(out[1], 3);
    ck_assert_int_eq(out[2], 1);
    rtx_device_load_add(gpu(0), -2); /* now idle */
    ck_assert_int_eq(rtx_devices_place(set, &(struct rtx_device_place){0}, out), 3);
    ck_assert_int_eq(out[0], 1);
    ck_assert_int_eq(info(gpu(0)).load, 0);
    rtx_device_consumer_credit(c[0], 100 * MIB);
    rtx_device_consumer_credit(c[2], 50 * MIB);
    rtx_device_backend_free(c[0], b[0]);
    rtx_device_backend_free(c[0], b[1]);
    rtx_device_backend_free(c[1], b[2]);
    rtx_device_backend_free(c[2], b[3]);
    for (int i = 0; i < N_FAKE; i++) rtx_device_consumer_free(c[i]);
    teardown();
}
END_TEST

START_TEST(place_skips_unhealthy_honours_only_and_need) {
    setup();
    struct rtx_device_consumer *c = consumer(gpu(0), "jobs", 0);
    charge_ok(c, 900 * MIB); /* 100 MiB headroom on cuda:0 */
    rtx_device_fault(gpu(2), "broken");
    int out[RTX_DEVICES_MAX];
    ck_assert_int_eq(rtx_devices_place(set, NULL, out), 2);
    ck_assert_int_eq(out[0], 2);
    ck_assert_int_eq(out[1], 1);
    struct rtx_device_place need = {.need_bytes = 200 * MIB};
    ck_assert_int_eq(rtx_devices_place(set, &need, out), 1);
    ck_assert_int_eq(out[0], 2);
    const int only[] = {0, 2};
    struct rtx_device_place req = {.n_only = 2, .only = only};
    ck_assert_int_eq(rtx_devices_place(set, &req, out), 1);
    ck_assert_int_eq(out[0], 1);
    req.need_bytes = 100 * MIB + 1;
    ck_assert_int_eq(rtx_devices_place(set, &req, out), 0);
    rtx_device_consumer_credit(c, 900 * MIB);
    rtx_device_consumer_free(c);
    teardown();
}
END_TEST

Suite *rtx_device_suite(void) {
    Suite *s = suite_create("device");
    TCase *set_tc = tcase_create("set");
    tcase_add_test(set_tc, device_set_has_cpu_and_listed_gpus);
    tcase_add_test(set_tc, device_set_without_gpus_says_why);
    tcase_add_test(set_tc, device_set_rejects_bad_options);
    suite_add_tcase(s, set_tc);
    TCase *budget = tcase_create("budget");
    tcase_add_test(budget, budget_reservation_that_does_not_fit_is_refused);
    tcase_add_test(budget, budget_reservation_is_always_usable);
    tcase_add_test(budget, budget_borrowing_is_first_come);
    tcase_add_test(budget, budget_reservation_cannot_take_lent_memory);
    tcase_add_test(budget, budget_account_is_the_consumer_share);
    tcase_add_test(budget, budget_cpu_backend_buffers_are_charged);
    suite_add_tcase(s, budget);
    TCase *backends = tcase_create("backends");
    tcase_add_test(backends, gpu_backend_is_warmed_up_and_charged);
    tcase_add_test(backends, gpu_backend_that_cannot_be_made_faults_the_device);
    tcase_add_test(backends, gpu_warm_up_with_a_sticky_error_faults_the_device);
    suite_add_tcase(s, backends);
    TCase *health = tcase_create("health");
    tcase_add_test(health, health_fault_is_sticky_and_heard_once);
    tcase_add_test(health, health_listeners_are_bounded);
    tcase_add_test(health, health_off_fault_waits_for_a_running_call);
    tcase_add_test(health, health_check_faults_only_on_a_sticky_error);
    suite_add_tcase(s, health);
    TCase *plans = tcase_create("plans");
    tcase_add_test(plans, plan_cache_counts_hits_and_misses_per_backend);
    tcase_add_test(plans, plan_cache_drops_least_recently_used_by_count);
    tcase_add_test(plans, plan_cache_drops_least_recently_used_by_bytes);
    tcase_add_test(plans, plan_cache_drops_a_plan_whose_run_failed);
    tcase_add_test(plans, plan_cache_backend_free_drops_its_plans);
    tcase_add_test(plans, plan_cache_off_keeps_nothing);
    tcase_add_test(plans, plan_cache_clear_drops_kept_plans_only);
    tcase_add_test(plans, plan_cache_keep_replaces_the_same_key);
    tcase_add_test(plans, plan_key_covers_content_inputs_and_limits);
    tcase_add_test(plans, plan_bytes_counts_arena_inputs_and_outputs);
    suite_add_tcase(s, plans);
    TCase *place = tcase_create("place");
    tcase_add_test(place, place_orders_by_load_per_executor_then_headroom);
    tcase_add_test(place, place_skips_unhealthy_honours_only_and_need);
    suite_add_tcase(s, place);
    return s;
}
