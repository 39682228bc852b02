/*
 * test-serving-files.c - the model repository's files: config.json parsing (serving/; every
 * error class: syntax, types, missing fields, bad values, unsupported datatypes), its JSON
 * dump, KServe datatype names, and safetensors weights (formats/formats.h: malformed headers,
 * bad offsets, truncation, overlap, holes, alignment, mapping).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/formats.h"
#include "serving/serving-impl.h"

/* ------------------------------------------------------------------------------------------
 * config.json
 * ---------------------------------------------------------------------------------------- */

static const char full_config[] =
    "{\"name\": \"m\", \"platform\": \"rtx_graph\", \"max_batch_size\": 8,"
    " \"input\": [{\"name\": \"a\", \"data_type\": \"TYPE_FP32\", \"dims\": [4, -1]},"
    "            {\"name\": \"b\", \"data_type\": \"TYPE_INT64\", \"dims\": [\"2\"],"
    "             \"optional\": true, \"format\": \"FORMAT_NONE\"}],"
    " \"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_BF16\", \"dims\": [4]}],"
    " \"dynamic_batching\": {\"preferred_batch_size\": [8, 2, 4],"
    "                        \"max_queue_delay_microseconds\": \"250\"},"
    " \"instance_group\": [{\"count\": 2, \"kind\": \"KIND_CPU\"},"
    "                      {\"kind\": \"KIND_GPU\", \"gpus\": [0, 1]}],"
    " \"version_policy\": {\"specific\": {\"versions\": [3, 1]}},"
    " \"parameters\": {\"lane\": {\"string_value\": \"realtime\"}},"
    " \"optimization\": {\"whatever\": [1, 2, 3]}}";

START_TEST(config_parses_every_field) {
    struct rtx__model_config c;
    struct rtx_err err = {0};
    int rc = rtx__model_config_parse(full_config, strlen(full_config), "m", "m/config.json", &c,
                                     &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    const struct rtx_model_info *i = &c.info;
    ck_assert_str_eq(i->name, "m");
    ck_assert_str_eq(i->platform, "rtx_graph");
    ck_assert_int_eq(i->max_batch_size, 8);
    ck_assert_int_eq(i->n_inputs, 2);
    ck_assert_str_eq(i->inputs[0].name, "a");
    ck_assert_int_eq(i->inputs[0].dtype, RTX_F32);
    ck_assert_int_eq(i->inputs[0].ndim, 2);
    ck_assert_int_eq(i->inputs[0].dims[1], -1);
    ck_assert(!i->inputs[0].optional);
    ck_assert_int_eq(i->inputs[1].dtype, RTX_I64);
    ck_assert_int_eq(i->inputs[1].dims[0], 2);
    ck_assert(i->inputs[1].optional);
    ck_assert_int_eq(i->outputs[0].dtype, RTX_BF16);
    ck_assert(i->dynamic_batching);
    ck_assert_int_eq(i->n_preferred, 3);
    ck_assert_int_eq(i->preferred_batch_sizes[0], 2); /* sorted */
    ck_assert_int_eq(i->preferred_batch_sizes[2], 8);
    ck_assert_int_eq(i->max_queue_delay_us, 250);
    ck_assert_int_eq(c.n_groups, 2);
    ck_assert_int_eq(c.groups[0].count, 2);
    ck_assert_int_eq(c.groups[0].kind, RTX__KIND_CPU);
    ck_assert_int_eq(c.groups[1].kind, RTX__KIND_GPU);
    ck_assert_int_eq(c.groups[1].n_gpus, 2);
    ck_assert_int_eq(i->instances, 3);
    ck_assert_str_eq(i->instance_kind, "KIND_GPU");
    ck_assert_int_eq(c.policy, RTX__POLICY_SPECIFIC);
    ck_assert_int_eq(c.n_versions, 2);
    ck_assert_str_eq(i->default_lane, "realtime");
}
END_TEST

START_TEST(config_defaults) {
    const char *j =
        "{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_UINT8\", \"dims\": []}],"
        " \"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_BOOL\", \"dims\": [1]}]}";
    struct rtx__model_config c;
    struct rtx_err err = {0};
    ck_assert_msg(rtx__model_config_parse(j, strlen(j), "dir", "f", &c, &err) == 0, "%s",
                  err.msg);
    ck_assert_str_eq(c.info.name, "dir"); /* from the directory */
    ck_assert_str_eq(c.info.platform, "rtx_graph");
    ck_assert_int_eq(c.info.max_batch_size, 0);
    ck_assert(!c.info.dynamic_batching);
    ck_assert_int_eq(c.policy, RTX__POLICY_LATEST);
    ck_assert_int_eq(c.latest_n, 1);
    ck_assert_int_eq(c.n_groups, 1);
    ck_assert_int_eq(c.groups[0].count, 1);
    ck_assert_int_eq(c.info.instances, 1);
    ck_assert_str_eq(c.info.default_lane, "");
}
END_TEST

#define IO_OK                                                                                   \
    "\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]}], "            \
    "\"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]}]"

static const struct {
    const char *json;
    int code;
    const char *msg; /* a substring the message must hold */
} config_errors[] = {
    {"{", RTX_EFORMAT, "line 1"},
    {"[1, 2]", RTX_EFORMAT, "expected a JSON object"},
    {"{\"name\": \"other\", " IO_OK "}", RTX_EFORMAT, "differs from the directory"},
    {"{\"name\": 5, " IO_OK "}", RTX_EFORMAT, "name: expected a string"},
    {"{\"platform\": \"tensorrt_plan\", " IO_OK "}", RTX_EUNSUPPORTED, "tensorrt_plan"},
    {"{\"max_batch_size\": \"x\", " IO_OK "}", RTX_EFORMAT, "max_batch_size: expected an integer"},
    {"{\"max_batch_size\": -1, " IO_OK "}", RTX_EFORMAT, "out of range"},
    {"{\"max_batch_size\": 1.5, " IO_OK "}", RTX_EFORMAT, "max_batch_size"},
    {"{\"input\": {}, \"output\": []}", RTX_EFORMAT, "input: expected an array"},
    {"{\"input\": [3], \"output\": []}", RTX_EFORMAT, "input[0]: expected an object"},
    {"{\"input\": [{\"data_type\": \"TYPE_FP32\", \"dims\": [1]}]}", RTX_EFORMAT,
     "input[0].name: missing"},
    {"{\"input\": [{\"name\": \"x\", \"dims\": [1]}]}", RTX_EFORMAT,
     "input[0].data_type: missing"},
    {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FOO\", \"dims\": [1]}]}", RTX_EFORMAT,
     "TYPE_FOO"},
    {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_STRING\", \"dims\": [1]}]}",
     RTX_EUNSUPPORTED, "TYPE_STRING"},
    {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\"}]}", RTX_EFORMAT,
     "input[0].dims: missing"},
    {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [\"a\"]}]}",
     RTX_EFORMAT, "input[0].dims[0]: expected an integer"},
    {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [0]}]}", RTX_EFORMAT,
     "dims[0]: 0"},
    {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [-2]}]}",
     RTX_EFORMAT, "out of range"},
    {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [1],"
     " \"optional\": 1}]}",
     RTX_EFORMAT, "optional: expected true or false"},
    {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [1]},"
     "{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [1]}]}",
     RTX_EFORMAT, "listed twice"},
    {"{\"output\": [{\"name\": \"y\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]}]}", RTX_EFORMAT,
     "input: missing or empty"},
    {"{\"input\": [{\"name\": \"x\", \"data_type\": \"TYPE_FP32\", \"dims\": [4]}]}", RTX_EFORMAT,
     "output: missing or empty"},
    {"{" IO_OK ", \"dynamic_batching\": {}}", RTX_EFORMAT, "needs max_batch_size"},
    {"{\"max_batch_size\": 4, " IO_OK ", \"dynamic_batching\": []}", RTX_EFORMAT,
     "dynamic_batching: expected an object"},
    {"{\"max_batch_size\": 4, " IO_OK ", \"dynamic_batching\": {\"preferred_batch_size\": [8]}}",
     RTX_EFORMAT, "out of range"},
    {"{\"max_batch_size\": 4, " IO_OK ", \"dynamic_batching\": {\"preferred_batch_size\": 2}}",
     RTX_EFORMAT, "preferred_batch_size: expected an array"},
    {"{\"max_batch_size\": 4, " IO_OK
     ", \"dynamic_batching\": {\"max_queue_delay_microseconds\": \"soon\"}}",
     RTX_EFORMAT, "max_queue_delay_microseconds: expected an integer"},
    {"{" IO_OK ", \"instance_group\": [{\"kind\": \"KIND_TPU\"}]}", RTX_EFORMAT, "KIND_TPU"},
    {"{" IO_OK ", \"instance_group\": [{\"count\": 0}]}", RTX_EFORMAT, "count"},
    {"{" IO_OK ", \"instance_group\": [{\"kind\": \"KIND_CPU\", \"gpus\": [0]}]}", RTX_EFORMAT,
     "gpus with KIND_CPU"},
    {"{" IO_OK ", \"instance_group\": {}}", RTX_EFORMAT, "instance_group: expected an array"},
    {"{" IO_OK ", \"version_policy\": {\"all\": {}, \"latest\": {}}}", RTX_EFORMAT,
     "exactly one"},
    {"{" IO_OK ", \"version_policy\": {\"specific\": {\"versions\": []}}}", RTX_EFORMAT,
     "missing or empty"},
    {"{" IO_OK ", \"version_policy\": {\"latest\": {\"num_versions\": 0}}}", RTX_EFORMAT,
     "num_versions"},
    {"{" IO_OK ", \"parameters\": {\"lane\": \"fast\"}}", RTX_EFORMAT,
     "parameters.lane: expected an object"},
    {"{" IO_OK ", \"parameters\": {\"lane\": {}}}", RTX_EFORMAT,
     "parameters.lane.string_value: missing"},
    {"{\"name\": \"m\", \"name\": \"m\", " IO_OK "}", RTX_EFORMAT, "duplicate"},
};

START_TEST(config_rejects_each_error_class) {
    const char *j = config_errors[_i].json;
    struct rtx__model_config c;
    struct rtx_err err = {0};
    int rc = rtx__model_config_parse(j, strlen(j), "m", "m/config.json", &c, &err);
    ck_assert_msg(rc == config_errors[_i].code, "case %d (%s): rc %d, %s", _i, j, rc, err.msg);
    ck_assert_msg(strstr(err.msg, config_errors[_i].msg), "case %d: message '%s' lacks '%s'", _i,
                  err.msg, config_errors[_i].msg);
    ck_assert_msg(rc == RTX_EUNSUPPORTED || strstr(err.msg, "m/config.json") ||
                      strstr(err.msg, "duplicate"),
                  "case %d: message '%s' does not name the file", _i, err.msg);
}
END_TEST

/* A generative model's "generation" settings: each one read, cuda_graph_max_tokens unset is
 * -1 (the engine's default) and 0 is kept (never replay); out of range or unknown keys fail. */
START_TEST(config_generation_settings) {
    struct rtx__model_config c;
    struct rtx_err err = {0};
    const char *j = "{\"name\": \"m\", \"platform\": \"rtx_generate\", \"generation\": "
                    "{\"max_batch_tokens\": 4096, \"max_seqs\": 64, \"block_size\": 32, "
                    "\"cuda_graph_max_tokens\": 0, \"prefix_caching\": false}}";
    ck_assert_msg(rtx__model_config_parse(j, strlen(j), "m", "f", &c, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.gen.max_batch_tokens, 4096);
    ck_assert_int_eq(c.gen.max_seqs, 64);
    ck_assert_int_eq(c.gen.block_size, 32);
    ck_assert_int_eq(c.gen.graph_max_tokens, 0);
    ck_assert(!c.gen.prefix_caching);
    j = "{\"name\": \"m\", \"platform\": \"rtx_generate\"}";
    ck_assert_msg(rtx__model_config_parse(j, strlen(j), "m", "f", &c, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.gen.graph_max_tokens, -1);
    ck_assert(c.gen.prefix_caching);
    static const char *const bad[][2] = {
        {"{\"cuda_graph_max_tokens\": -1}", "generation.cuda_graph_max_tokens"},
        {"{\"cuda_graph_max_tokens\": \"all\"}", "generation.cuda_graph_max_tokens"},
        {"{\"cuda_graphs\": true}", "generation.cuda_graphs: unknown setting"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[256];
        snprintf(text, sizeof text, "{\"name\": \"m\", \"platform\": \"rtx_generate\", "
                                    "\"generation\": %s}", bad[i][0]);
        ck_assert_int_eq(rtx__model_config_parse(text, strlen(text), "m", "m/config.json", &c,
                                                 &err), RTX_EFORMAT);
        ck_assert_msg(strstr(err.msg, bad[i][1]) && strstr(err.msg, "m/config.json"), "%s",
                      err.msg);
    }
}
END_TEST

START_TEST(config_dump_parses_back_the_same) {
    struct rtx__model_config c, d;
    struct rtx_err err = {0};
    ck_assert(rtx__model_config_parse(full_config, strlen(full_config), "m", "f", &c, &err) == 0);
    char *text = rtx__model_config_dump(&c);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(rtx__model_config_parse(text, strlen(text), "m", "dump", &d, &err) == 0, "%s",
                  err.msg);
    ck_assert(memcmp(&c.info, &d.info, sizeof c.info) == 0);
    ck_assert_int_eq(d.policy, c.policy);
    ck_assert_int_eq(d.n_groups, c.n_groups);
    ck_assert(strstr(text, "\"max_queue_delay_microseconds\":250"));
    ck_assert(strstr(text, "\"data_type\":\"TYPE_INT64\""));
    rtx_free(text);
}
END_TEST

START_TEST(kserve_datatype_names) {
    enum rtx_dtype dt;
    struct rtx_err err = {0};
    for (int i = 0; i < RTX_DTYPE_COUNT; i++) {
        ck_assert_int_eq(rtx_kserve_dtype_from_name(rtx_kserve_dtype_name(i), &dt, &err), 0);
        ck_assert_int_eq(dt, i);
    }
    ck_assert_str_eq(rtx_kserve_dtype_name(RTX_F32), "FP32");
    ck_assert_str_eq(rtx_kserve_dtype_name(RTX_U8), "UINT8");
    ck_assert_int_eq(rtx_kserve_dtype_from_name("FP64", &dt, &err), RTX_EUNSUPPORTED);
    ck_assert(strstr(err.msg, "FP64"));
    ck_assert_int_eq(rtx_kserve_dtype_from_name("BYTES", &dt, &err), RTX_EUNSUPPORTED);
    ck_assert_int_eq(rtx_kserve_dtype_from_name("FLOAT", &dt, &err), RTX_EINVAL);
    ck_assert_int_eq(rtx_kserve_dtype_from_name(NULL, &dt, &err), RTX_EINVAL);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * safetensors
 * ---------------------------------------------------------------------------------------- */

/* A file image: the 8-byte length, `header` padded with spaces to pad_to bytes (0: as is),
 * then data_len bytes of data (0, 1, 2, ...). *len gets the size; free() the result. */
static uint8_t *st_image(const char *header, size_t pad_to, size_t data_len, size_t *len) {
    size_t h = strlen(header);
    size_t hp = pad_to > h ? pad_to : h;
    uint8_t *b = malloc(8 + hp + data_len + 1);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)hp >> (8 * i));
    memcpy(b + 8, header, h);
    memset(b + 8 + h, ' ', hp - h);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hp + i] = (uint8_t)i;
    *len = 8 + hp + data_len;
    return b;
}

START_TEST(safetensors_parses_a_valid_header) {
    const char *h = "{\"__metadata__\": {\"format\": \"pt\"},"
                    " \"b\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [24, 40]},"
                    " \"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]},"
                    " \"s\": {\"dtype\": \"BOOL\", \"shape\": [], \"data_offsets\": [40, 41]}}";
    size_t len;
    uint8_t *img = st_image(h, 248, 41, &len);
    struct rtx_safetensors_entry *e;
    int n;
    uint64_t off;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_safetensors_parse(img, len, "w.safetensors", &e, &n, &off, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(n, 3);
    ck_assert_uint_eq(off, 256);
    ck_assert_str_eq(e[0].name, "a"); /* sorted by offset */
    ck_assert_int_eq(e[0].dtype, RTX_F32);
    ck_assert_int_eq(e[0].ndim, 2);
    ck_assert_int_eq(e[0].dims[1], 3);
    ck_assert_str_eq(e[1].name, "b");
    ck_assert_int_eq(e[2].ndim, 0);
    rtx_safetensors_entries_free(e, n);
    free(img);
}
END_TEST

#define T(name, body) "\"" name "\": {" body "}"

static const struct {
    const char *header;
    size_t pad_to;   /* header bytes after padding */
    size_t data_len; /* bytes of data */
    int code;
    const char *msg;
} st_errors[] = {
    {"{\"a\": ", 0, 0, RTX_EFORMAT, "header JSON"},
    {"[1]", 0, 0, RTX_EFORMAT, "not a JSON object"},
    {"{\"a\": 5}", 0, 0, RTX_EFORMAT, "tensor 'a': expected an object"},
    {"{" T("a", "\"shape\": [1], \"data_offsets\": [0, 4]") "}", 0, 4, RTX_EFORMAT,
     "dtype missing"},
    {"{" T("a", "\"dtype\": \"Q4\", \"shape\": [1], \"data_offsets\": [0, 4]") "}", 0, 4,
     RTX_EFORMAT, "unknown dtype"},
    {"{" T("a", "\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]") "}", 0, 8,
     RTX_EUNSUPPORTED, "F64"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]") "}", 0, 4,
     RTX_EFORMAT, "shape missing or not an array"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]") "}", 0, 4,
     RTX_EFORMAT, "shape[0]"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]")
     "}", 0, 4, RTX_EFORMAT, "9 dimensions"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]") "}", 0, 4,
     RTX_EFORMAT, "data_offsets must be"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]") "}", 0, 4,
     RTX_EFORMAT, "invalid"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]") "}", 0, 8,
     RTX_EFORMAT, "truncated"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]") "}", 0, 8,
     RTX_EFORMAT, "the shape needs 12"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]") ","
     T("b", "\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]") "}", 248, 12,
     RTX_EFORMAT, "overlap"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]") "}", 248, 8,
     RTX_EFORMAT, "belong to no tensor"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]") "}", 248, 8,
     RTX_EFORMAT, "after the last tensor"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]") ","
     T("b", "\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [1, 5]") "}", 248, 5,
     RTX_EFORMAT, "not aligned"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]") ","
     T("a", "\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]") "}", 0, 4,
     RTX_EFORMAT, "duplicate"},
    {"{\"__metadata__\": {\"k\": 1}}", 0, 0, RTX_EFORMAT, "__metadata__['k']"},
    {"{\"__metadata__\": 3}", 0, 0, RTX_EFORMAT, "__metadata__ is not an object"},
};

START_TEST(safetensors_rejects_malformed_files) {
    size_t len;
    uint8_t *img = st_image(st_errors[_i].header, st_errors[_i].pad_to, st_errors[_i].data_len,
                            &len);
    struct rtx_safetensors_entry *e = NULL;
    int n = 0;
    uint64_t off;
    struct rtx_err err = {0};
    int rc = rtx_safetensors_parse(img, len, "w.safetensors", &e, &n, &off, &err);
    ck_assert_msg(rc == st_errors[_i].code, "case %d: rc %d (%s)", _i, rc, err.msg);
    ck_assert_msg(strstr(err.msg, st_errors[_i].msg), "case %d: '%s' lacks '%s'", _i, err.msg,
                  st_errors[_i].msg);
    ck_assert_msg(strstr(err.msg, "w.safetensors"), "case %d: '%s' does not name the file", _i,
                  err.msg);
    ck_assert_ptr_null(e);
    free(img);
}
END_TEST

START_TEST(safetensors_rejects_bad_lengths) {
    struct rtx_safetensors_entry *e;
    int n;
    uint64_t off;
    struct rtx_err err = {0};
    uint8_t small[5] = {0};
    ck_assert_int_eq(rtx_safetensors_parse(small, sizeof small, "f", &e, &n, &off, &err),
                     RTX_EFORMAT);
    ck_assert(strstr(err.msg, "too short"));
    uint8_t beyond[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    ck_assert_int_eq(rtx_safetensors_parse(beyond, sizeof beyond, "f", &e, &n, &off, &err),
                     RTX_EFORMAT);
    ck_assert(strstr(err.msg, "beyond the end"));
    uint8_t huge[16] = {0, 0, 0, 0, 0, 0, 0, 1, '{', '}'};
    ck_assert_int_eq(rtx_safetensors_parse(huge, sizeof huge, "f", &e, &n, &off, &err),
                     RTX_EFORMAT);
    ck_assert(strstr(err.msg, "exceeds the limit"));
    uint8_t notobj[16] = {8, 0, 0, 0, 0, 0, 0, 0, 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x'};
    ck_assert_int_eq(rtx_safetensors_parse(notobj, sizeof notobj, "f", &e, &n, &off, &err),
                     RTX_EFORMAT);
}
END_TEST

START_TEST(safetensors_maps_tensors_without_copying) {
    char path[] = "/tmp/rtx-st-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t len;
    const char *h = "{" T("w", "\"dtype\": \"U8\", \"shape\": [2, 3], \"data_offsets\": [0, 6]")
        "}";
    uint8_t *img = st_image(h, 0, 6, &len);
    ck_assert_int_eq(write(fd, img, len), (ssize_t)len);
    close(fd);
    free(img);
    struct rtx_safetensors *st;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_safetensors_open(path, &st, &err) == 0, "%s", err.msg);
    unlink(path); /* the mapping outlives the name */
    int i = rtx_safetensors_find(st, "w");
    ck_assert_int_eq(i, 0);
    ck_assert_int_eq(rtx_safetensors_find(st, "nope"), -1);
    struct rtx_tensor *t;
    ck_assert(rtx_safetensors_tensor(st, i, &t, &err) == 0);
    ck_assert_ptr_eq(rtx_tensor_data(t), st->data); /* a view of the mapping */
    rtx_safetensors_unref(st);                       /* the tensor keeps it mapped */
    ck_assert_int_eq(t->dims[1], 3);
    for (int k = 0; k < 6; k++)
        ck_assert_int_eq((int)rtx_tensor_get(t, k), k);
    rtx_tensor_unref(t);
    ck_assert_int_eq(rtx_safetensors_open("/nonexistent/w.safetensors", &st, &err), RTX_EIO);
    ck_assert(strstr(err.msg, "/nonexistent/w.safetensors"));
}
END_TEST

Suite *rtx_serving_files_suite(void) {
    Suite *s = suite_create("serving_files");
    TCase *tc = tcase_create("serving_files");
    tcase_add_test(tc, config_parses_every_field);
    tcase_add_test(tc, config_defaults);
    tcase_add_loop_test(tc, config_rejects_each_error_class, 0,
                        (int)(sizeof config_errors / sizeof config_errors[0]));
    tcase_add_test(tc, config_dump_parses_back_the_same);
    tcase_add_test(tc, config_generation_settings);
    tcase_add_test(tc, kserve_datatype_names);
    tcase_add_test(tc, safetensors_parses_a_valid_header);
    tcase_add_loop_test(tc, safetensors_rejects_malformed_files, 0,
                        (int)(sizeof st_errors / sizeof st_errors[0]));
    tcase_add_test(tc, safetensors_rejects_bad_lengths);
    tcase_add_test(tc, safetensors_maps_tensors_without_copying);
    suite_add_tcase(s, tc);
    return s;
}
