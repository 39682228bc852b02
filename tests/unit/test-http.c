/*
 * test-http.c - the HTTP server's parts that need no model (daemon/http.h, daemon/metrics.h):
 * the KServe v2 inference codec (JSON and binary inputs, datatype conversion, every error
 * class, shared-memory inputs and outputs, rendering in both forms, an out-of-memory loop),
 * the status mapping, error bodies, the Prometheus text without a model repository, and the
 * server itself on a loopback port: routes, keep-alive connections open at shutdown, bind
 * and address errors.
 */
#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "daemon/http.h"
#include "daemon/metrics.h"

static int parse(const char *body, int64_t hlen, struct rtx_shm *shm, struct rtx_http_infer **q,
                 struct rtx_err *err) {
    size_t len = hlen >= 0 ? (size_t)hlen : strlen(body);
    return rtx__http_infer_parse(body, len, hlen, shm, q, err);
}

START_TEST(http_parse_json_inputs) {
    const char *body =
        "{\"id\":\"r1\",\"parameters\":{\"binary_data_output\":true,\"priority\":3,"
        "\"timeout\":5000},\"inputs\":[{\"name\":\"a\",\"shape\":[2,3],\"datatype\":\"INT32\","
        "\"data\":[[1,2,3],[4,5,-6]]},{\"name\":\"b\",\"shape\":[1],\"datatype\":\"FP32\","
        "\"data\":[0.5]}],\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":false}},"
        "{\"name\":\"z\"}]}";
    struct rtx_http_infer *q = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(parse(body, -1, NULL, &q, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(q->id, "r1");
    ck_assert(q->binary_output);
    ck_assert_int_eq(q->priority, 3);
    ck_assert_int_eq(q->timeout_us, 5000);
    ck_assert_int_eq(q->n_inputs, 2);
    ck_assert_str_eq(q->inputs[0].name, "a");
    const struct rtx_tensor *a = q->inputs[0].tensor;
    ck_assert_int_eq(a->dtype, RTX_I32);
    ck_assert_int_eq(a->ndim, 2);
    ck_assert_int_eq(a->dims[1], 3);
    const int32_t *av = rtx_tensor_data(a);
    ck_assert_int_eq(av[0], 1);
    ck_assert_int_eq(av[5], -6);
    ck_assert(((const float *)rtx_tensor_data(q->inputs[1].tensor))[0] == 0.5f);
    ck_assert_int_eq(q->n_outputs, 2);
    ck_assert_str_eq(q->output_names[1], "z");
    ck_assert_int_eq(q->outputs[0].binary, 0);
    ck_assert_int_eq(q->outputs[1].binary, -1);
    rtx__http_infer_free(q);
}
END_TEST

START_TEST(http_parse_binary_inputs) {
    const char head[] = "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"INT64\","
                        "\"parameters\":{\"binary_data_size\":16}},{\"name\":\"m\",\"shape\":"
                        "[3],\"datatype\":\"BOOL\",\"data\":[true,false,true]},{\"name\":\"u\","
                        "\"shape\":[2],\"datatype\":\"UINT8\",\"parameters\":"
                        "{\"binary_data_size\":2}}]}";
    size_t hl = sizeof head - 1;
    char body[sizeof head + 18];
    memcpy(body, head, hl);
    int64_t xs[2] = {-7, 1LL << 40};
    memcpy(body + hl, xs, 16);
    body[hl + 16] = 9;
    body[hl + 17] = (char)200;
    struct rtx_http_infer *q = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx__http_infer_parse(body, hl + 18, (int64_t)hl, NULL, &q, &err) == 0, "%s",
                  err.msg);
    const int64_t *x = rtx_tensor_data(q->inputs[0].tensor);
    ck_assert(x[0] == -7 && x[1] == (1LL << 40));
    const uint8_t *m = rtx_tensor_data(q->inputs[1].tensor);
    ck_assert(m[0] == 1 && m[1] == 0 && m[2] == 1);
    const uint8_t *u = rtx_tensor_data(q->inputs[2].tensor);
    ck_assert(u[0] == 9 && u[1] == 200);
    ck_assert(!q->binary_output);
    rtx__http_infer_free(q);
}
END_TEST

START_TEST(http_parse_half_precision) {
    const char *body = "{\"inputs\":[{\"name\":\"h\",\"shape\":[2],\"datatype\":\"FP16\","
                       "\"data\":[1.5,-2]},{\"name\":\"b\",\"shape\":[1],\"datatype\":\"BF16\","
                       "\"data\":[3]}]}";
    struct rtx_http_infer *q = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(parse(body, -1, NULL, &q, &err) == 0, "%s", err.msg);
    const uint16_t *h = rtx_tensor_data(q->inputs[0].tensor);
    ck_assert(rtx_f16_to_f32(h[0]) == 1.5f && rtx_f16_to_f32(h[1]) == -2.0f);
    ck_assert(rtx_bf16_to_f32(((const uint16_t *)rtx_tensor_data(q->inputs[1].tensor))[0]) ==
              3.0f);
    rtx__http_infer_free(q);
}
END_TEST

/* The start of a request body whose input a has one element of the datatype that follows
 * (IN_A1 "\"INT8\",\"data\":[300]}]}"), and one whose input a is FP32 [1], with the request's
 * object left open for more members. */
#define IN_A1 "{\"inputs\":[{\"name\":\"a\",\"shape\":[1],\"datatype\":"
#define IN_A1_OK IN_A1 "\"FP32\",\"data\":[1]}]"

static const struct {
    const char *body;
    int64_t hlen; /* -2: strlen(body) as JSON only */
    int code;
    const char *needle;
} parse_errors[] = {
    {"{", -2, RTX_EFORMAT, "malformed JSON"},
    {"[1]", -2, RTX_EINVAL, "JSON object"},
    {"{}", -2, RTX_EINVAL, "\"inputs\""},
    {"{\"inputs\":{}}", -2, RTX_EINVAL, "\"inputs\""},
    {"{\"id\":5,\"inputs\":[]}", -2, RTX_EINVAL, "\"id\""},
    {"{\"inputs\":[3]}", -2, RTX_EINVAL, "inputs[0]"},
    {"{\"inputs\":[{\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}", -2, RTX_EINVAL,
     "inputs[0]"},
    {IN_A1 "\"FP64\",\"data\":[1]}]}", -2, RTX_EUNSUPPORTED, "FP64"},
    {IN_A1 "\"WHAT\",\"data\":[1]}]}", -2, RTX_EINVAL, "input 'a'"},
    {"{\"inputs\":[{\"name\":\"a\",\"shape\":\"x\",\"datatype\":\"FP32\",\"data\":[1]}]}", -2,
     RTX_EINVAL, "shape"},
    {"{\"inputs\":[{\"name\":\"a\",\"shape\":[-1],\"datatype\":\"FP32\",\"data\":[1]}]}", -2,
     RTX_EINVAL, "shape[0]"},
    {"{\"inputs\":[{\"name\":\"a\",\"shape\":[1,1,1,1,1,1,1,1,1],\"datatype\":\"FP32\","
     "\"data\":[1]}]}",
     -2, RTX_EINVAL, "9 dimensions"},
    {"{\"inputs\":[{\"name\":\"a\",\"shape\":[4611686018427387904,4],\"datatype\":\"FP32\","
     "\"data\":[1]}]}",
     -2, RTX_EINVAL, "too large"},
    {"{\"inputs\":[{\"name\":\"a\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1]}]}", -2,
     RTX_EINVAL, "1 elements"},
    {IN_A1 "\"FP32\",\"data\":[\"x\"]}]}", -2, RTX_EINVAL, "not a number"},
    {IN_A1 "\"INT8\",\"data\":[300]}]}", -2, RTX_EINVAL, "out of range"},
    {IN_A1 "\"UINT8\",\"data\":[-1]}]}", -2, RTX_EINVAL, "out of range"},
    {IN_A1 "\"INT32\",\"data\":[1.5]}]}", -2, RTX_EINVAL, "not an integer"},
    {IN_A1 "\"BOOL\",\"data\":[1]}]}", -2, RTX_EINVAL, "true or false"},
    {IN_A1 "\"FP32\"}]}", -2, RTX_EINVAL, "no data"},
    {IN_A1 "\"FP32\",\"data\":[1],"
     "\"parameters\":{\"binary_data_size\":4}}]}",
     -2, RTX_EINVAL, "only one"},
    {IN_A1 "\"FP32\",\"parameters\":"
     "{\"binary_data_size\":4}}]}",
     -2, RTX_EINVAL, "Inference-Header-Content-Length"},
    {IN_A1 "\"FP32\",\"parameters\":"
     "{\"binary_data_size\":-4}}]}",
     -2, RTX_EINVAL, "binary_data_size"},
    {IN_A1 "\"FP32\",\"parameters\":"
     "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":4}}]}",
     -2, RTX_EUNSUPPORTED, "shared memory"},
    {IN_A1_OK ",\"outputs\":[{\"name\":\"y\"},{\"name\":\"y\"}]}", -2, RTX_EINVAL, "twice"},
    {IN_A1_OK ","
     "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"classification\":3}}]}",
     -2, RTX_EUNSUPPORTED, "classification"},
    {IN_A1_OK ","
     "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":1}}]}",
     -2, RTX_EINVAL, "binary_data"},
    {IN_A1_OK ",\"parameters\":\"x\"}", -2, RTX_EINVAL, "parameters"},
    {IN_A1_OK ",\"parameters\":{\"timeout\":-1}}", -2, RTX_EINVAL, "timeout"},
    {"{\"inputs\":[], \"inputs\":[]}", -2, RTX_EFORMAT, "duplicate"},
    {"", -2, RTX_EINVAL, "no JSON body"},
    {IN_A1_OK "}", 4000, RTX_EINVAL, "larger than the body"},
};

START_TEST(http_parse_rejects) {
    const char *body = parse_errors[_i].body;
    int64_t hl = parse_errors[_i].hlen;
    size_t len = strlen(body);
    struct rtx_http_infer *q = NULL;
    struct rtx_err err = {0};
    int rc = rtx__http_infer_parse(body, len, hl == -2 ? -1 : hl, NULL, &q, &err);
    ck_assert_msg(rc == parse_errors[_i].code, "case %d (%s): rc %d (%s)", _i, body, rc,
                  err.msg);
    ck_assert_ptr_null(q);
    ck_assert_msg(strstr(err.msg, parse_errors[_i].needle), "case %d: '%s' lacks '%s'", _i,
                  err.msg, parse_errors[_i].needle);
}
END_TEST

START_TEST(http_parse_binary_sizes) {
    const char head[] = "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\","
                        "\"parameters\":{\"binary_data_size\":8}}]}";
    size_t hl = sizeof head - 1;
    char body[sizeof head + 16] = {0};
    memcpy(body, head, hl);
    struct rtx_http_infer *q = NULL;
    struct rtx_err err = {0};
    /* short */
    ck_assert_int_eq(rtx__http_infer_parse(body, hl + 7, (int64_t)hl, NULL, &q, &err),
                     RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "runs past the end"));
    /* long */
    ck_assert_int_eq(rtx__http_infer_parse(body, hl + 9, (int64_t)hl, NULL, &q, &err),
                     RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "1 bytes"));
    /* size disagreeing with the shape */
    const char bad[] = "{\"inputs\":[{\"name\":\"x\",\"shape\":[3],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":8}}]}";
    char body2[sizeof bad + 8] = {0};
    memcpy(body2, bad, sizeof bad - 1);
    ck_assert_int_eq(
        rtx__http_infer_parse(body2, sizeof bad - 1 + 8, sizeof bad - 1, NULL, &q, &err),
        RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "needs 12"));
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Shared memory
 * ---------------------------------------------------------------------------------------- */

static char shm_key[64];

static void shm_setup(void) {
    snprintf(shm_key, sizeof shm_key, "/rtx-test-http-%d", (int)getpid());
    shm_unlink(shm_key);
    int fd = shm_open(shm_key, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    float *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    for (int i = 0; i < 1024; i++)
        p[i] = (float)i;
    munmap(p, 4096);
    close(fd);
}

static void shm_teardown(void) {
    shm_unlink(shm_key);
    rtx_alloc_fail_after(0);
}

/* A result of one output `y` (f32 [2, 2] = 10, 11, 12, 13). */
struct fake_result {
    struct rtx_infer_result res;
    struct rtx_model_info info;
    const char *names[1];
    struct rtx_tensor *outs[1];
};

static void fake_result(struct fake_result *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->info.name, sizeof f->info.name, "m");
    f->info.version = 3;
    struct rtx_err err;
    ck_assert_int_eq(rtx_tensor_new(RTX_F32, 2, (const int64_t[]){2, 2}, &f->outs[0], &err), 0);
    float *v = rtx_tensor_data(f->outs[0]);
    for (int i = 0; i < 4; i++)
        v[i] = 10.0f + (float)i;
    f->names[0] = "y";
    f->res.model = &f->info;
    f->res.n_outputs = 1;
    f->res.output_names = f->names;
    f->res.outputs = f->outs;
}

START_TEST(http_shm_input_and_output) {
    struct rtx_shm *shm = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_shm_new(&shm, &err), 0);
    ck_assert_int_eq(rtx_shm_register(shm, "reg", shm_key, 0, 4096, &err), 0);
    /* x = floats 16..19 (offset 64 bytes: aligned, used in place); z at offset 4 (copied) */
    const char *body =
        "{\"inputs\":[{\"name\":\"x\",\"shape\":[4],\"datatype\":\"FP32\",\"parameters\":"
        "{\"shared_memory_region\":\"reg\",\"shared_memory_offset\":64,"
        "\"shared_memory_byte_size\":16}},{\"name\":\"z\",\"shape\":[1],\"datatype\":\"FP32\","
        "\"parameters\":{\"shared_memory_region\":\"reg\",\"shared_memory_offset\":4,"
        "\"shared_memory_byte_size\":4}}],\"outputs\":[{\"name\":\"y\",\"parameters\":"
        "{\"shared_memory_region\":\"reg\",\"shared_memory_offset\":1024,"
        "\"shared_memory_byte_size\":64}}]}";
    struct rtx_http_infer *q = NULL;
    ck_assert_msg(parse(body, -1, shm, &q, &err) == 0, "%s", err.msg);
    const float *x = rtx_tensor_data(q->inputs[0].tensor);
    ck_assert(x[0] == 16.0f && x[3] == 19.0f);
    ck_assert(((const float *)rtx_tensor_data(q->inputs[1].tensor))[0] == 1.0f);

    /* unregistering while the request holds the region keeps the mapping */
    ck_assert_int_eq(rtx_shm_unregister(shm, "reg", &err), 0);
    struct fake_result f;
    fake_result(&f);
    struct rtx_http_body b;
    ck_assert_msg(rtx__http_infer_render(q, &f.res, &b, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b.header_len, -1);
    /* name, datatype and shape only, as Triton answers for an output in shared memory */
    ck_assert_ptr_null(strstr(b.data, "\"parameters\""));
    ck_assert_ptr_nonnull(strstr(b.data, "\"shape\""));
    ck_assert_ptr_null(strstr(b.data, "\"data\""));
    rtx_free(b.data);
    rtx__http_infer_free(q);
    rtx_tensor_unref(f.outs[0]);

    int fd = shm_open(shm_key, O_RDONLY, 0);
    float got[4];
    ck_assert_int_eq(pread(fd, got, sizeof got, 1024), (ssize_t)sizeof got);
    close(fd);
    ck_assert(got[0] == 10.0f && got[3] == 13.0f);
    rtx_shm_free(shm);
}
END_TEST

START_TEST(http_shm_errors) {
    struct rtx_shm *shm = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_shm_new(&shm, &err), 0);
    ck_assert_int_eq(rtx_shm_register(shm, "reg", shm_key, 0, 64, &err), 0);
    struct rtx_http_infer *q = NULL;
    /* unknown region: a bad request */
    const char *unknown = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
                          "\"parameters\":{\"shared_memory_region\":\"nope\","
                          "\"shared_memory_byte_size\":4}}]}";
    ck_assert_int_eq(parse(unknown, -1, shm, &q, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "nope"));
    /* window past the end */
    const char *past = "{\"inputs\":[{\"name\":\"x\",\"shape\":[4],\"datatype\":\"FP32\","
                       "\"parameters\":{\"shared_memory_region\":\"reg\","
                       "\"shared_memory_offset\":60,\"shared_memory_byte_size\":16}}]}";
    ck_assert_int_eq(parse(past, -1, shm, &q, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "input 'x'"));
    /* size disagreeing with the shape */
    const char *size = "{\"inputs\":[{\"name\":\"x\",\"shape\":[4],\"datatype\":\"FP32\","
                       "\"parameters\":{\"shared_memory_region\":\"reg\","
                       "\"shared_memory_byte_size\":12}}]}";
    ck_assert_int_eq(parse(size, -1, shm, &q, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "needs 16"));
    /* an output too large for its window fails at render */
    const char *small = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
                        "\"data\":[1]}],\"outputs\":[{\"name\":\"y\",\"parameters\":"
                        "{\"shared_memory_region\":\"reg\",\"shared_memory_byte_size\":8}}]}";
    ck_assert_int_eq(parse(small, -1, shm, &q, &err), 0);
    struct fake_result f;
    fake_result(&f);
    struct rtx_http_body b;
    ck_assert_int_eq(rtx__http_infer_render(q, &f.res, &b, &err), RTX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "16 bytes do not fit"));
    rtx__http_infer_free(q);
    rtx_tensor_unref(f.outs[0]);
    rtx_shm_free(shm);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Rendering
 * ---------------------------------------------------------------------------------------- */

START_TEST(http_render_json_and_binary) {
    const char *body = "{\"id\":\"q9\",\"inputs\":[{\"name\":\"x\",\"shape\":[1],"
                       "\"datatype\":\"FP32\",\"data\":[1]}]}";
    struct rtx_http_infer *q = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(parse(body, -1, NULL, &q, &err), 0);
    struct fake_result f;
    fake_result(&f);
    struct rtx_http_body b;
    ck_assert_int_eq(rtx__http_infer_render(q, &f.res, &b, &err), 0);
    ck_assert_int_eq(b.header_len, -1);
    ck_assert_str_eq(b.data, "{\"model_name\":\"m\",\"model_version\":\"3\",\"id\":\"q9\","
                             "\"outputs\":[{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":"
                             "[2,2],\"data\":[10.0,11.0,12.0,13.0]}]}");
    rtx_free(b.data);
    q->binary_output = true;
    ck_assert_int_eq(rtx__http_infer_render(q, &f.res, &b, &err), 0);
    ck_assert_int_gt(b.header_len, 0);
    ck_assert_int_eq(b.len, (size_t)b.header_len + 16);
    ck_assert_ptr_nonnull(strstr(b.data, "\"binary_data_size\":16"));
    float v[4];
    memcpy(v, b.data + b.header_len, 16);
    ck_assert(v[0] == 10.0f && v[3] == 13.0f);
    rtx_free(b.data);
    /* a non-finite value has no JSON form: null */
    q->binary_output = false;
    ((float *)rtx_tensor_data(f.outs[0]))[1] = 1.0f / 0.0f;
    ck_assert_int_eq(rtx__http_infer_render(q, &f.res, &b, &err), 0);
    ck_assert_ptr_nonnull(strstr(b.data, "[10.0,null,12.0,13.0]"));
    rtx_free(b.data);
    rtx__http_infer_free(q);
    rtx_tensor_unref(f.outs[0]);
}
END_TEST

START_TEST(http_parse_and_render_oom) {
    const char *body = "{\"id\":\"q\",\"inputs\":[{\"name\":\"x\",\"shape\":[1],"
                       "\"datatype\":\"FP32\",\"data\":[1]},{\"name\":\"w\",\"shape\":[2],"
                       "\"datatype\":\"INT8\",\"data\":[1,2]}],\"outputs\":[{\"name\":\"y\"}]}";
    int ok = 0;
    for (long n = 1; n < 200 && !ok; n++) {
        struct rtx_http_infer *q = NULL;
        struct rtx_err err = {0};
        rtx_alloc_fail_after(n);
        int rc = parse(body, -1, NULL, &q, &err);
        rtx_alloc_fail_after(0);
        if (rc != 0) {
            ck_assert_msg(rc == RTX_ENOMEM, "n=%ld: rc %d (%s)", n, rc, err.msg);
            ck_assert_ptr_null(q);
            continue;
        }
        struct fake_result f;
        fake_result(&f);
        struct rtx_http_body b;
        rtx_alloc_fail_after(1);
        rc = rtx__http_infer_render(q, &f.res, &b, &err);
        rtx_alloc_fail_after(0);
        ck_assert_int_eq(rc, RTX_ENOMEM);
        rtx_tensor_unref(f.outs[0]);
        rtx__http_infer_free(q);
        ok = 1;
    }
    ck_assert(ok);
}
END_TEST

START_TEST(http_error_bodies_and_status) {
    size_t len = 0;
    char *b = rtx__http_error_json("a \"quote\" \\ and\nnewline \x01 \xc3\xa9", &len);
    ck_assert_str_eq(b, "{\"error\":\"a \\\"quote\\\" \\\\ and\\u000anewline \\u0001 "
                        "\\u00c3\\u00a9\"}");
    ck_assert_int_eq(len, strlen(b));
    rtx_free(b);
    ck_assert_int_eq(rtx__http_status_from_err(0), 200);
    ck_assert_int_eq(rtx__http_status_from_err(RTX_EINVAL), 400);
    ck_assert_int_eq(rtx__http_status_from_err(RTX_ELIMIT), 400);
    ck_assert_int_eq(rtx__http_status_from_err(RTX_EUNSUPPORTED), 400);
    ck_assert_int_eq(rtx__http_status_from_err(RTX_ENOTFOUND), 404);
    ck_assert_int_eq(rtx__http_status_from_err(RTX_EUNAVAILABLE), 503);
    ck_assert_int_eq(rtx__http_status_from_err(RTX_EEXPIRED), 503);
    ck_assert_int_eq(rtx__http_status_from_err(RTX_ENOMEM), 429);
    ck_assert_int_eq(rtx__http_status_from_err(-5), 500);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * Metrics without models
 * ---------------------------------------------------------------------------------------- */

START_TEST(metrics_escape_and_render) {
    char buf[64];
    ck_assert_str_eq(rtx_metrics_escape("a\"b\\c\nd", buf, sizeof buf), "a\\\"b\\\\c\\nd");
    ck_assert_str_eq(rtx_metrics_escape("abcdef", buf, 4), "ab");
    struct rtx_daemon d;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__daemon_init(&d, &err), 0);
    ck_assert_int_eq(rtx_shm_new(&d.shm, &err), 0);
    char *text = NULL;
    size_t len = 0;
    ck_assert_int_eq(rtx_metrics_render(&d, &text, &len, &err), 0);
    ck_assert_int_eq(len, strlen(text));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE rtxd_build_info gauge\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nrtxd_shm_regions 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nnv_cpu_memory_total_bytes "));
    ck_assert_ptr_null(strstr(text, "nv_inference_count")); /* no serving: no family */
    ck_assert(text[len - 1] == '\n');
    rtx_free(text);
    rtx_alloc_fail_after(1);
    ck_assert_int_eq(rtx_metrics_render(&d, &text, &len, &err), RTX_ENOMEM);
    rtx_alloc_fail_after(0);
    rtx_shm_free(d.shm);
    rtx__daemon_close(&d);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * The server on a loopback port (no model repository)
 * ---------------------------------------------------------------------------------------- */

static int connect_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Sends one request with Connection: close; returns the status code, the body in body. */
static int http_call(int port, const char *method, const char *path, const char *payload,
                     char *body, size_t cap) {
    int fd = connect_port(port);
    char req[512];
    size_t plen = payload ? strlen(payload) : 0;
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu"
                     "\r\n\r\n",
                     method, path, plen);
    ck_assert(n > 0 && n < (int)sizeof req);
    ck_assert_int_eq(write(fd, req, (size_t)n), n);
    /* the server may answer (413) and close before taking a large body: short writes ok */
    if (plen) (void)!write(fd, payload, plen);
    static char resp[65536];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof resp - 1 && (r = read(fd, resp + got, sizeof resp - 1 - got)) > 0)
        got += (size_t)r;
    resp[got] = '\0';
    close(fd);
    int status = 0;
    ck_assert_int_eq(sscanf(resp, "HTTP/1.1 %d", &status), 1);
    const char *b = strstr(resp, "\r\n\r\n");
    snprintf(body, cap, "%s", b ? b + 4 : "");
    return status;
}

START_TEST(http_server_routes_and_shutdown) {
    signal(SIGPIPE, SIG_IGN);
    struct rtx_daemon d;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__daemon_init(&d, &err), 0);
    ck_assert_int_eq(rtx_shm_new(&d.shm, &err), 0);
    struct rtx_http_options o = {.listen = "127.0.0.1:0", .max_body_bytes = 4096, .daemon = &d};
    struct rtx_http *h = NULL;
    int port = 0;
    ck_assert_msg(rtx_http_start(&o, &h, &port, &err) == 0, "%s", err.msg);
    ck_assert_int_gt(port, 0);
    char body[4096];
    ck_assert_int_eq(http_call(port, "GET", "/v2/health/live", NULL, body, sizeof body), 200);
    ck_assert_int_eq(http_call(port, "GET", "/v2/health/ready", NULL, body, sizeof body), 200);
    ck_assert_int_eq(http_call(port, "GET", "/v2", NULL, body, sizeof body), 200);
    ck_assert_ptr_nonnull(strstr(body, "\"name\":\"rtxd\""));
    ck_assert_int_eq(http_call(port, "GET", "/v2/models/m", NULL, body, sizeof body), 404);
    ck_assert_ptr_nonnull(strstr(body, "no model repository"));
    ck_assert_int_eq(http_call(port, "POST", "/v2/models/m/infer", "{}", body, sizeof body),
                     404);
    ck_assert_int_eq(http_call(port, "GET", "/nowhere", NULL, body, sizeof body), 404);
    ck_assert_ptr_nonnull(strstr(body, "/nowhere"));
    ck_assert_int_eq(http_call(port, "DELETE", "/v2", NULL, body, sizeof body), 405);
    ck_assert_int_eq(http_call(port, "POST", "/v2/repository/index", NULL, body, sizeof body),
                     200);
    ck_assert_str_eq(body, "[]");
    ck_assert_int_eq(http_call(port, "GET", "/v2/models/stats", NULL, body, sizeof body), 200);
    ck_assert_str_eq(body, "{\"model_stats\":[]}");
    ck_assert_int_eq(http_call(port, "GET", "/metrics", NULL, body, sizeof body), 200);
    ck_assert_ptr_nonnull(strstr(body, "rtxd_build_info"));
    ck_assert_int_eq(http_call(port, "GET", "/v2/systemsharedmemory/status", NULL, body,
                               sizeof body),
                     200);
    ck_assert_str_eq(body, "[]");
    /* over max_body_bytes */
    static char big[8192];
    memset(big, ' ', sizeof big - 1);
    ck_assert_int_eq(http_call(port, "POST", "/v2/repository/index", big, body, sizeof body),
                     413);
    /* draining: not ready */
    atomic_store(&d.draining, true);
    ck_assert_int_eq(http_call(port, "GET", "/v2/health/ready", NULL, body, sizeof body), 503);
    ck_assert_ptr_nonnull(strstr(body, "shutting down"));

    /* a second server on the same port fails naming the address */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    struct rtx_http_options o2 = {.listen = addr, .max_body_bytes = 4096, .daemon = &d};
    struct rtx_http *h2 = NULL;
    ck_assert_int_eq(rtx_http_start(&o2, &h2, NULL, &err), RTX_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, addr));
    ck_assert_ptr_null(h2);

    /* idle keep-alive connections, one with half a request, are closed by the shutdown */
    int idle = connect_port(port);
    int half = connect_port(port);
    ck_assert_int_eq(write(half, "GET /v2 HTTP/1.1\r\nHo", 20), 20);
    usleep(50 * 1000);
    rtx_http_shutdown(h, 1000);
    rtx_http_shutdown(h, 1000); /* idempotent */
    char c;
    ck_assert_int_le(read(idle, &c, 1), 0);
    close(idle);
    close(half);
    rtx_http_free(h);
    rtx_shm_free(d.shm);
    rtx__daemon_close(&d);
}
END_TEST

START_TEST(http_start_rejects_bad_addresses) {
    struct rtx_daemon d;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__daemon_init(&d, &err), 0);
    const char *bad[] = {"nocolon", ":80", "127.0.0.1:", "127.0.0.1:99999", "host.example:80",
                         "[::1:80", "1.2.3:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct rtx_http_options o = {.listen = bad[i], .max_body_bytes = 4096, .daemon = &d};
        struct rtx_http *h = NULL;
        ck_assert_int_eq(rtx_http_start(&o, &h, NULL, &err), RTX_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i]) != NULL, "'%s' not named in '%s'", bad[i],
                      err.msg);
        ck_assert_ptr_null(h);
    }
    /* IPv6 loopback and localhost work */
    const char *good[] = {"[::1]:0", "localhost:0"};
    for (size_t i = 0; i < 2; i++) {
        struct rtx_http_options o = {.listen = good[i], .max_body_bytes = 4096, .daemon = &d};
        struct rtx_http *h = NULL;
        int port = 0;
        int rc = rtx_http_start(&o, &h, &port, &err);
        if (rc != 0 && i == 0) continue; /* a host without IPv6 */
        ck_assert_msg(rc == 0, "%s: %s", good[i], err.msg);
        ck_assert_int_gt(port, 0);
        rtx_http_free(h);
    }
    rtx__daemon_close(&d);
}
END_TEST

Suite *rtx_http_suite(void) {
    Suite *s = suite_create("http");
    TCase *t = tcase_create("codec");
    tcase_add_test(t, http_parse_json_inputs);
    tcase_add_test(t, http_parse_binary_inputs);
    tcase_add_test(t, http_parse_half_precision);
    tcase_add_loop_test(t, http_parse_rejects, 0,
                        (int)(sizeof parse_errors / sizeof parse_errors[0]));
    tcase_add_test(t, http_parse_binary_sizes);
    tcase_add_test(t, http_render_json_and_binary);
    tcase_add_test(t, http_parse_and_render_oom);
    tcase_add_test(t, http_error_bodies_and_status);
    tcase_add_test(t, metrics_escape_and_render);
    suite_add_tcase(s, t);
    TCase *m = tcase_create("shm");
    tcase_add_checked_fixture(m, shm_setup, shm_teardown);
    tcase_add_test(m, http_shm_input_and_output);
    tcase_add_test(m, http_shm_errors);
    suite_add_tcase(s, m);
    TCase *v = tcase_create("server");
    tcase_set_timeout(v, 30);
    tcase_add_test(v, http_server_routes_and_shutdown);
    tcase_add_test(v, http_start_rejects_bad_addresses);
    suite_add_tcase(s, v);
    return s;
}
