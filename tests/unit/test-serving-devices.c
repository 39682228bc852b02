/*
 * test-serving-devices.c - serving through the device layer (device/device.h): a version's
 * consumer and its reservation (one that does not fit fails the load with the device layer's
 * message; a bad memory_reserve_bytes fails it naming the field), a batch beyond the version's
 * share fails with RTX_ENOMEM naming the consumer while the next one runs, repeated batches
 * of one shape replay from the device's plan cache, and a sticky fault on a (fake) GPU makes
 * the device unhealthy: the version's requests go to its instances elsewhere, or fail
 * RTX_EUNAVAILABLE and the version is not ready when it has none.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend-cpu.h"
#include "kernels/cuda/backend-cuda.h"
#include "runtime/backend-impl.h"
#include "tests/unit/test-serving-util.h"

/* ------------------------------------------------------------------------------------------
 * A fake GPU: a CPU backend underneath with upload and download (so not a host backend);
 * while fault_next is set, its next run fails with RTX_EGPU and leaves it faulted (every
 * later call and synchronize fail with RTX_EGPU), as an illegal address does on a device.
 * ---------------------------------------------------------------------------------------- */

static atomic_bool fault_next;

struct fake {
    struct rtx_backend be;
    struct rtx_backend *cpu;
    bool faulted; /* only its instance's thread touches it */
};

static const char *fake_name(struct rtx_backend *be) {
    return "cuda:0";
}
static void fake_free(struct rtx_backend *be) {
    struct fake *f = be->ctx;
    rtx_backend_free(f->cpu);
    free(f);
}
static bool fake_supports(struct rtx_backend *be, const struct rtx_graph *g,
                          const struct rtx_node *n) {
    return rtx_backend_supports_node(((struct fake *)be->ctx)->cpu, g, n);
}
static int fake_check(struct fake *f, struct rtx_err *err) {
    return f->faulted ? rtx_err_set(err, RTX_EGPU, "cudaErrorIllegalAddress (fake)") : 0;
}
static int fake_buffer(struct rtx_backend *be, size_t bytes, struct rtx_buffer **out,
                       struct rtx_err *err) {
    struct fake *f = be->ctx;
    int rc = fake_check(f, err);
    return rc ? rc : rtx_backend_buffer_new(f->cpu, bytes, out, err);
}
static int fake_run(struct rtx_backend *be, const struct rtx_node_args *a, struct rtx_err *err) {
    struct fake *f = be->ctx;
    int rc = fake_check(f, err);
    if (rc) return rc;
    if (atomic_exchange(&fault_next, false)) {
        f->faulted = true;
        return rtx_err_set(err, RTX_EGPU, "an illegal memory access (fake)");
    }
    return rtx_backend_run_node(f->cpu, a, err);
}
static int fake_sync(struct rtx_backend *be, struct rtx_err *err) {
    return fake_check(be->ctx, err);
}
static int fake_copy(struct rtx_backend *be, const struct rtx_tensor *src,
                     struct rtx_tensor **dst, struct rtx_err *err) {
    int rc = fake_check(be->ctx, err);
    if (rc == 0) rc = rtx_tensor_new(src->dtype, src->ndim, src->dims, dst, err);
    if (rc == 0) memcpy(rtx_tensor_data(*dst), rtx_tensor_data(src), rtx_tensor_nbytes(src));
    return rc;
}
static const struct rtx_backend_i fake_iface = {
    .name = fake_name,
    .free = fake_free,
    .supports_node = fake_supports,
    .buffer_new = fake_buffer,
    .run_node = fake_run,
    .synchronize = fake_sync,
    .upload = fake_copy,
    .download = fake_copy,
};

static int fake_new(void *ctx, int cuda, struct rtx_mem_account *account,
                    struct rtx_backend **out, struct rtx_err *err) {
    struct fake *f = calloc(1, sizeof *f);
    ck_assert_ptr_nonnull(f);
    struct rtx_cpu_options co = {.n_threads = 1, .account = account};
    ck_assert(rtx_backend_cpu_new(&co, &f->cpu, err) == 0);
    f->be.iface = &fake_iface;
    f->be.ctx = f;
    *out = &f->be;
    return 0;
}
static int fake_pool_stats(void *ctx, struct rtx_backend *be, struct rtx_mem_pool_stats *dev,
                           struct rtx_mem_pool_stats *pinned, struct rtx_err *err) {
    return rtx_err_set(err, RTX_EUNSUPPORTED, "the fake GPU has no pools");
}
static const struct rtx_device_gpu_i fake_gpus = {.backend_new = fake_new,
                                                  .pool_stats = fake_pool_stats};

/* f's device set: the CPU (cpu_memory_bytes of memory, 0: physical RAM) and, with_gpu, one
 * fake GPU. */
static void devices_of(struct serving_fx *f, size_t cpu_memory_bytes, bool with_gpu) {
    static struct rtx_cuda_device dev = {
        .index = 0, .name = "Fake GPU 0", .healthy = true, .memory_bytes = (size_t)1 << 30};
    static struct rtx_cuda_devices gpus = {.n = 1, .devs = &dev};
    struct rtx_devices_options o = {
        .gpus = with_gpu ? &gpus : NULL,
        .cpu_threads = 1,
        .cpu_memory_bytes = cpu_memory_bytes,
        .plan_cache = 16,
        .no_warm_up = true,
        .gpu_iface = &fake_gpus,
    };
    serving_fx_devices(f, &o);
}

static struct rtx_device_info device_info(struct serving_fx *f, int slot) {
    struct rtx_device_info di;
    rtx_device_info(rtx_devices_get(f->devices, slot), &di);
    return di;
}

/* The warnings serving reported (rtx_serving_options.log), each "msg model device;". */
static pthread_mutex_t warned_mu = PTHREAD_MUTEX_INITIALIZER;
static char warned[1024];

static void record_warning(enum rtx_serving_log_level level, const char *msg,
                           const char *const *fields) {
    if (level != RTX_SERVING_LOG_WARN) return;
    pthread_mutex_lock(&warned_mu);
    size_t n = strlen(warned);
    n += (size_t)snprintf(warned + n, sizeof warned - n, "%s", msg);
    for (int i = 0; fields[i] && fields[i + 1] && n < sizeof warned; i += 2)
        if (!strcmp(fields[i], "model") || !strcmp(fields[i], "device"))
            n += (size_t)snprintf(warned + n, sizeof warned - n, " %s", fields[i + 1]);
    if (n < sizeof warned) snprintf(warned + n, sizeof warned - n, ";");
    pthread_mutex_unlock(&warned_mu);
}

/* Whether serving warned `what` within 2 s. */
static bool warned_of(const char *what) {
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&warned_mu);
        bool seen = strstr(warned, what) != NULL;
        pthread_mutex_unlock(&warned_mu);
        if (seen) return true;
        sleep_ms(10);
    }
    return false;
}

/* Submits rows of the scale model and waits for the answer in c (initialized here). */
static void infer(struct serving_fx *f, const char *name, int rows, struct call *c) {
    struct rtx_err err = {0};
    call_init(c);
    ck_assert_msg(submit(f->s, name, rows, 1.0f, c, 0, NULL, &err) == 0, "%s", err.msg);
    call_wait(c);
}

/* ------------------------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------------------------- */

START_TEST(reservation_that_does_not_fit_fails_the_load) {
    struct serving_fx f;
    fx_repo(&f);
    devices_of(&f, (size_t)4 << 20, false);
    write_model(f.repo, "big", 8, ", \"memory_reserve_bytes\": 1073741824");
    write_model(f.repo, "bad", 8, ", \"memory_reserve_bytes\": -5");
    write_model(f.repo, "small", 8, ", \"memory_reserve_bytes\": 65536");
    fx_start(&f, RTX_MODEL_CONTROL_EXPLICIT);
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_serving_load(f.s, "big", NULL, &err), RTX_ELIMIT);
    ck_assert_msg(strstr(err.msg, "model big:1") && strstr(err.msg, "cpu"), "%s", err.msg);
    char reason[256];
    ck_assert_int_eq(index_state(f.s, "big", reason), RTX_MODEL_UNAVAILABLE);
    ck_assert_str_eq(reason, err.msg);
    ck_assert_int_eq(device_info(&f, 0).consumers, 0); /* nothing left registered */
    ck_assert_int_eq(rtx_serving_load(f.s, "bad", NULL, &err), RTX_EFORMAT);
    ck_assert_msg(strstr(err.msg, "memory_reserve_bytes"), "%s", err.msg);
    /* one that fits registers its consumer with that reservation until it is unloaded */
    ck_assert_msg(rtx_serving_load(f.s, "small", NULL, &err) == 0, "%s", err.msg);
    struct rtx_device_consumer_info ci;
    ck_assert_int_eq(rtx_device_consumers(rtx_devices_get(f.devices, 0), &ci, 1), 1);
    ck_assert_str_eq(ci.name, "model small:1");
    ck_assert_uint_eq(ci.reserved_bytes, 65536);
    ck_assert_int_eq(ci.backends, 1);
    ck_assert_int_eq(rtx_serving_unload(f.s, "small", &err), 0);
    ck_assert_int_eq(device_info(&f, 0).consumers, 0);
    fx_stop(&f);
}
END_TEST

START_TEST(batch_beyond_the_share_fails_with_enomem_and_the_next_runs) {
    struct serving_fx f;
    fx_repo(&f);
    devices_of(&f, (size_t)4 << 20, false); /* a budget of 3.6 MiB on the CPU */
    write_model(f.repo, "scale", 131072, ", \"memory_reserve_bytes\": 1048576");
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    ck_assert(rtx_serving_model_ready(f.s, "scale", 1));
    struct call big, small;
    infer(&f, "scale", 100000, &big); /* y, z and a * w: 4.8 MB */
    ck_assert_int_eq(big.code, RTX_ENOMEM);
    ck_assert_msg(strstr(big.msg, "model scale:1"), "%s", big.msg);
    ck_assert_int_ge(device_info(&f, 0).refusals, 1);
    infer(&f, "scale", 2, &small);
    check_scale(&small, 2, 1.0f, 1.0f);
    ck_assert(rtx_device_healthy(rtx_devices_get(f.devices, 0)));
    ck_assert(rtx_serving_model_ready(f.s, "scale", 1));
    call_close(&big);
    call_close(&small);
    fx_stop(&f);
}
END_TEST

START_TEST(repeated_batches_hit_the_device_plan_cache) {
    struct serving_fx f;
    fx_repo(&f);
    write_model(f.repo, "scale", 8, NULL);
    fx_start(&f, RTX_MODEL_CONTROL_NONE);
    struct call c;
    infer(&f, "scale", 3, &c); /* a new shape: a miss, then kept */
    check_scale(&c, 3, 1.0f, 1.0f);
    call_close(&c);
    struct rtx_device_info before = device_info(&f, 0);
    ck_assert_int_ge(before.plans, 1);
    for (int i = 0; i < 5; i++) {
        infer(&f, "scale", 3, &c);
        check_scale(&c, 3, 1.0f, 1.0f);
        call_close(&c);
    }
    struct rtx_device_info after = device_info(&f, 0);
    ck_assert_uint_eq(after.plan_hits, before.plan_hits + 5);
    ck_assert_uint_eq(after.plan_misses, before.plan_misses);
    fx_stop(&f);
    /* the version's backends are gone, and with them its plans */
}
END_TEST

START_TEST(gpu_fault_moves_requests_to_healthy_instances_or_fails_them) {
    struct serving_fx f;
    fx_repo(&f);
    devices_of(&f, 0, true);
    write_model(f.repo, "gpu", 8, ", \"instance_group\": [{\"kind\": \"KIND_GPU\", \"count\": 1}]");
    write_model(f.repo, "both", 8, ", \"instance_group\": [{\"kind\": \"KIND_GPU\", \"count\": 1},"
                                   " {\"kind\": \"KIND_CPU\", \"count\": 1}]");
    struct rtx_serving_options o = fx_opts(&f, RTX_MODEL_CONTROL_NONE);
    o.log = record_warning;
    fx_start_opts(&f, &o);
    char reason[256] = "";
    ck_assert_msg(index_state(f.s, "gpu", reason) == RTX_MODEL_READY, "%s", reason);
    ck_assert_msg(index_state(f.s, "both", reason) == RTX_MODEL_READY, "%s", reason);
    ck_assert(rtx_serving_ready(f.s));
    struct call c;
    infer(&f, "gpu", 2, &c);
    check_scale(&c, 2, 1.0f, 1.0f);
    call_close(&c);
    atomic_store(&fault_next, true);
    infer(&f, "gpu", 2, &c);
    ck_assert_int_eq(c.code, RTX_EGPU);
    ck_assert_msg(strstr(c.msg, "cuda:0 is now unhealthy"), "%s", c.msg);
    call_close(&c);
    struct rtx_device *gpu = rtx_devices_cuda(f.devices, 0);
    ck_assert(!rtx_device_healthy(gpu));
    /* each instance there says so once, the one of "both" too (woken by the listener) */
    ck_assert_msg(warned_of("device unhealthy: the instance takes no more batches gpu cuda:0;"),
                  "%s", warned);
    ck_assert_msg(warned_of("device unhealthy: the instance takes no more batches both cuda:0;"),
                  "%s", warned);
    /* "gpu" has no instance left on a healthy device */
    struct rtx_err err = {0};
    call_init(&c);
    ck_assert_int_eq(submit(f.s, "gpu", 1, 1.0f, &c, 0, NULL, &err), RTX_EUNAVAILABLE);
    ck_assert_msg(strstr(err.msg, "model 'gpu': every instance's device is unhealthy (cuda:0: "),
                  "%s", err.msg);
    call_close(&c);
    ck_assert(!rtx_serving_model_ready(f.s, "gpu", 0));
    ck_assert(!rtx_serving_ready(f.s));
    /* "both" serves every request on its CPU instance from now on */
    ck_assert(rtx_serving_model_ready(f.s, "both", 0));
    for (int i = 0; i < 4; i++) {
        infer(&f, "both", 1 + i, &c);
        check_scale(&c, 1 + i, 1.0f, 1.0f);
        call_close(&c);
    }
    fx_stop(&f);
}
END_TEST

Suite *rtx_serving_devices_suite(void) {
    Suite *s = suite_create("serving_devices");
    TCase *tc = tcase_create("serving_devices");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, reservation_that_does_not_fit_fails_the_load);
    tcase_add_test(tc, batch_beyond_the_share_fails_with_enomem_and_the_next_runs);
    tcase_add_test(tc, repeated_batches_hit_the_device_plan_cache);
    tcase_add_test(tc, gpu_fault_moves_requests_to_healthy_instances_or_fails_them);
    suite_add_tcase(s, tc);
    return s;
}
