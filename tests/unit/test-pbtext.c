/*
 * test-pbtext.c - the protobuf text format parser (formats/pbtext.c): Triton ModelConfig texts
 * read into inference.ModelConfig (repeated fields both ways, oneofs, maps with the last value
 * winning, enums by name and number), every scalar type through a message descriptor made
 * here (sint, fixed, sfixed, proto2 optional bytes, required) checked by its binary encoding,
 * ONNX's proto2 AttributeProto (has_ flags), each error with its position and field path,
 * the bounds, the walk over set fields and an out-of-memory loop. Then config.pbtxt read into
 * serving's model config (serving/config-pbtxt.c): every mapped field, the ignored ones
 * logged by name, the refused ones all named in one error, bad values, out of memory. Parity
 * with Python's text_format is tests/serving/test_triton_repo_pbtext.py; serving such
 * repositories end to end is tests/serving/test_triton_repo.py.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "inference/model_config.pb-c.h"
#include "onnx/onnx.pb-c.h"
#include "serving/serving-impl.h"

static Inference__ModelConfig *parse_config(const char *text, struct rtx_err *err) {
    ProtobufCMessage *m = NULL;
    int rc = rtx_pbtext_parse(&inference__model_config__descriptor, text, strlen(text),
                              "config.pbtxt", &m, err);
    if (rc) ck_assert_ptr_null(m);
    return (Inference__ModelConfig *)m;
}

/* The error message of a text that must fail with code. */
static const char *parse_error(const char *text, int code) {
    static struct rtx_err err;
    memset(&err, 0, sizeof err);
    Inference__ModelConfig *c = parse_config(text, &err);
    ck_assert_msg(!c, "parsed: %s", text);
    ck_assert_msg(err.code == code, "%s: code %d (%s)", text, err.code, err.msg);
    return err.msg;
}

START_TEST(pbtext_reads_triton_config) {
    const char *text =
        "# the minimal configuration of Triton's documentation\n"
        "name: \"mlp\"\n"
        "platform: \"onnxruntime_onnx\"\n"
        "max_batch_size: 8\n"
        "input [\n"
        "  { name: \"x\" data_type: TYPE_FP32 dims: [ 16, -1 ] },\n"
        "  { name: \"mask\" data_type: 6 dims: 4 dims: [5] optional: true }\n"
        "]\n"
        "output { name: \"y\", data_type: TYPE_FP32; dims: [ 4 ] reshape: { shape: [] } }\n"
        "output: < name: 'z' data_type: TYPE_INT64 dims: [] >\n"
        "version_policy: { specific { versions: [1, 3] } }\n"
        "dynamic_batching { preferred_batch_size: [ 4, 8 ] "
        "max_queue_delay_microseconds: 100 }\n"
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
        "parameters { key: \"lane\" value: { string_value: \"a\" } }\n"
        "parameters { key: \"other\" value: { string_value: \"b\" } }\n"
        "parameters { key: \"lane\" value: { string_value: \"realtime\" } }\n";
    struct rtx_err err = {0};
    Inference__ModelConfig *c = parse_config(text, &err);
    ck_assert_msg(c, "%s", err.msg);
    ck_assert_str_eq(c->name, "mlp");
    ck_assert_str_eq(c->platform, "onnxruntime_onnx");
    ck_assert_str_eq(c->backend, ""); /* unset: the empty default */
    ck_assert_int_eq(c->max_batch_size, 8);
    ck_assert_uint_eq(c->n_input, 2);
    ck_assert_str_eq(c->input[0]->name, "x");
    ck_assert_int_eq(c->input[0]->data_type, INFERENCE__DATA_TYPE__TYPE_FP32);
    ck_assert_uint_eq(c->input[0]->n_dims, 2);
    ck_assert_int_eq(c->input[0]->dims[0], 16);
    ck_assert_int_eq(c->input[0]->dims[1], -1);
    ck_assert_int_eq(c->input[1]->data_type, INFERENCE__DATA_TYPE__TYPE_INT8);
    ck_assert_uint_eq(c->input[1]->n_dims, 2);
    ck_assert_int_eq(c->input[1]->dims[1], 5);
    ck_assert(c->input[1]->optional);
    ck_assert_uint_eq(c->n_output, 2);
    ck_assert_ptr_nonnull(c->output[0]->reshape);
    ck_assert_uint_eq(c->output[0]->reshape->n_shape, 0);
    ck_assert_ptr_null(c->output[1]->reshape);
    ck_assert_str_eq(c->output[1]->name, "z");
    ck_assert_int_eq(c->version_policy->policy_choice_case,
                     INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_SPECIFIC);
    ck_assert_uint_eq(c->version_policy->specific->n_versions, 2);
    ck_assert_int_eq(c->scheduling_choice_case,
                     INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING);
    ck_assert_uint_eq(c->dynamic_batching->n_preferred_batch_size, 2);
    ck_assert_uint_eq(c->dynamic_batching->max_queue_delay_microseconds, 100);
    ck_assert_int_eq(c->instance_group[0]->kind, INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU);
    /* map: the third entry's key is the first's, so its value replaces it in place */
    ck_assert_uint_eq(c->n_parameters, 2);
    ck_assert_str_eq(c->parameters[0]->key, "lane");
    ck_assert_str_eq(c->parameters[0]->value->string_value, "realtime");
    ck_assert_str_eq(c->parameters[1]->key, "other");
    rtx_pbtext_free(&c->base);
}
END_TEST

START_TEST(pbtext_strings_and_escapes) {
    struct rtx_err err = {0};
    Inference__ModelConfig *c =
        parse_config("name: \"a\\tb\" 'c\\'d' \"\\101\\x42\\u00e9\\U0001F600\\\\\"", &err);
    ck_assert_msg(c, "%s", err.msg);
    ck_assert_str_eq(c->name, "a\tbc'dAB\xc3\xa9\xf0\x9f\x98\x80\\");
    rtx_pbtext_free(&c->base);
    /* bytes fields take any byte; string fields only UTF-8 */
    ProtobufCMessage *m = NULL;
    const char *t = "name: \"w\" s: \"\\000\\377\\x80\" type: STRING f: 0.5";
    ck_assert_int_eq(
        rtx_pbtext_parse(&onnx__attribute_proto__descriptor, t, strlen(t), "attr", &m, &err), 0);
    Onnx__AttributeProto *a = (Onnx__AttributeProto *)m;
    ck_assert(a->has_s && a->s.len == 3);
    ck_assert(memcmp(a->s.data, "\0\377\200", 3) == 0);
    ck_assert(a->has_f && a->f == 0.5f);
    ck_assert(a->has_type && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    ck_assert(!a->has_i); /* proto2: absent fields stay absent */
    rtx_pbtext_free(m);
}
END_TEST

/* A message type with the scalar types Triton's and ONNX's schemas lack. */
struct scalars {
    ProtobufCMessage base;
    int32_t a;  /* sint32 = 1 */
    int64_t b;  /* sint64 = 2 */
    uint32_t c; /* fixed32 = 3 */
    uint64_t d; /* fixed64 = 4 */
    int32_t e;  /* sfixed32 = 5 */
    int64_t f;  /* sfixed64 = 6 */
    int32_t g;  /* required int32 = 7 */
    protobuf_c_boolean has_h;
    ProtobufCBinaryData h; /* optional bytes = 8 */
    size_t n_i;
    double *i; /* repeated double = 9 */
};

static const ProtobufCMessageDescriptor scalars_desc;

static void scalars_init(ProtobufCMessage *m) {
    memset(m, 0, sizeof(struct scalars));
    m->descriptor = &scalars_desc;
}

#define FIELD(nm, id, label, type, member, q)                                                     \
    { nm, id, label, type, q, offsetof(struct scalars, member), NULL, NULL, 0, 0, NULL, NULL }
static const ProtobufCFieldDescriptor scalars_fields[9] = {
    FIELD("a", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_SINT32, a, 0),
    FIELD("b", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_SINT64, b, 0),
    FIELD("c", 3, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_FIXED32, c, 0),
    FIELD("d", 4, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_FIXED64, d, 0),
    FIELD("e", 5, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_SFIXED32, e, 0),
    FIELD("f", 6, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_SFIXED64, f, 0),
    FIELD("g", 7, PROTOBUF_C_LABEL_REQUIRED, PROTOBUF_C_TYPE_INT32, g, 0),
    FIELD("h", 8, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_BYTES, h,
          offsetof(struct scalars, has_h)),
    FIELD("i", 9, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_DOUBLE, i,
          offsetof(struct scalars, n_i)),
};
static const unsigned scalars_by_name[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
static const ProtobufCIntRange scalars_ranges[2] = {{1, 0}, {0, 9}};
static const ProtobufCMessageDescriptor scalars_desc = {
    PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
    "t.Scalars",
    "Scalars",
    "Scalars",
    "t",
    sizeof(struct scalars),
    9,
    scalars_fields,
    scalars_by_name,
    1,
    scalars_ranges,
    scalars_init,
    NULL,
    NULL,
    NULL,
};

START_TEST(pbtext_every_scalar_type) {
    const char *t = "a: -1 b: -2147483649 c: 0xffffffff d: 18446744073709551615 e: -2 "
                    "f: -9223372036854775808 g: 0 h: \"\\x01\" i: [1, -0.5e1, 2.5f, -inf]";
    ProtobufCMessage *m = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_pbtext_parse(&scalars_desc, t, strlen(t), "t", &m, &err) == 0, "%s",
                  err.msg);
    struct scalars *s = (struct scalars *)m;
    ck_assert_int_eq(s->a, -1);
    ck_assert(s->b == -2147483649LL);
    ck_assert(s->c == 0xffffffffu && s->d == UINT64_MAX && s->e == -2 && s->f == INT64_MIN);
    ck_assert(s->has_h && s->h.len == 1 && s->h.data[0] == 1);
    ck_assert(s->n_i == 4 && s->i[1] == -5.0 && s->i[2] == 2.5 && s->i[3] < -1e308);
    /* the encoding: zigzag for sint, little-endian words for fixed */
    uint8_t buf[128];
    size_t n = protobuf_c_message_pack(m, buf);
    static const uint8_t want_head[] = {
        0x08, 0x01,                                           /* a = -1: zigzag 1 */
        0x10, 0x81, 0x80, 0x80, 0x80, 0x10,                   /* b = -2^31 - 1: zigzag 2^32 + 1 */
        0x1d, 0xff, 0xff, 0xff, 0xff,                         /* c */
        0x21, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* d */
        0x2d, 0xfe, 0xff, 0xff, 0xff,                         /* e = -2 */
        0x31, 0,    0,    0,    0,    0,    0,    0,    0x80, /* f = INT64_MIN */
        0x38, 0x00,                                           /* g (required: always written) */
        0x42, 0x01, 0x01,                                     /* h */
    };
    ck_assert_uint_ge(n, sizeof want_head);
    ck_assert(memcmp(buf, want_head, sizeof want_head) == 0);
    rtx_pbtext_free(m);
    /* the required field is required */
    const char *no_g = "a: 1";
    ck_assert_int_eq(rtx_pbtext_parse(&scalars_desc, no_g, strlen(no_g), "t", &m, &err),
                     RTX_EFORMAT);
    ck_assert_msg(strstr(err.msg, "required field 'g' is missing"), "%s", err.msg);
    const char *big = "g: 1 a: 2147483648";
    ck_assert_int_eq(rtx_pbtext_parse(&scalars_desc, big, strlen(big), "t", &m, &err),
                     RTX_EFORMAT);
    ck_assert_str_eq(err.msg, "t:1:9: a: 2147483648 is out of range for int32");
    const char *neg = "g: 1 c: -1";
    ck_assert_int_eq(rtx_pbtext_parse(&scalars_desc, neg, strlen(neg), "t", &m, &err),
                     RTX_EFORMAT);
    ck_assert_str_eq(err.msg, "t:1:9: c: -1 is out of range for uint32");
}
END_TEST

START_TEST(pbtext_errors_name_position_and_path) {
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"name: \"a\"\nnope: 1",
         "config.pbtxt:2:1: inference.ModelConfig has no field named 'nope'"},
        {"input {\n  name: \"a\"\n  dims: [1, x]\n}",
         "config.pbtxt:3:13: input[0].dims[1]: expected an integer, found 'x'"},
        {"input { name: \"a\" }\ninput { data_type: TYPE_NOPE }",
         "config.pbtxt:2:20: input[1].data_type: inference.DataType has no value named "
         "'TYPE_NOPE'"},
        {"input { data_type: 99 }",
         "config.pbtxt:1:20: input[0].data_type: inference.DataType has no value numbered 99"},
        {"max_batch_size: 1\nmax_batch_size: 2",
         "config.pbtxt:2:1: max_batch_size: given twice (it is not repeated)"},
        {"version_policy { latest {} all {} }",
         "config.pbtxt:1:28: version_policy.all: 'latest' is set already, and they are members "
         "of one oneof"},
        {"dynamic_batching {}\nsequence_batching {}",
         "config.pbtxt:2:1: sequence_batching: 'dynamic_batching' is set already, and they are "
         "members of one oneof"},
        {"name: \"\\q\"", "config.pbtxt:1:8: name: unknown escape '\\q'"},
        {"name: \"\\xff\"", "config.pbtxt:1:7: name: string is not valid UTF-8 (byte 0)"},
        {"name: \"abc", "config.pbtxt:1:7: string without its closing quote"},
        {"input {\n  name: \"a\"\n", "config.pbtxt:3:1: input[0]: '{' at 1:7 is not closed "
                                     "(expected '}')"},
        {"input { name: \"a\" >", "config.pbtxt:1:19: input[0]: expected a field name, found '>'"},
        {"input { name: \"a\" } }", "config.pbtxt:1:21: expected a field name, found '}'"},
        {"name \"a\"", "config.pbtxt:1:6: name: expected ':', found '\"a\"'"},
        {"name: [\"a\"]", "config.pbtxt:1:7: name: a list for a field that is not repeated"},
        {"input: 5", "config.pbtxt:1:8: input[0]: expected '{' or '<', found '5'"},
        {"input { dims: [1 2] }", "config.pbtxt:1:18: input[0].dims: expected ',', found '2'"},
        {"input { optional: yes }",
         "config.pbtxt:1:19: input[0].optional: expected true or false, found 'yes'"},
        {"[ext.x]: 1", "config.pbtxt:1:1: extensions and Any ('[...]' names) are not supported"},
        {"max_batch_size: 1e3",
         "config.pbtxt:1:17: max_batch_size: expected an integer, found '1e3'"},
        {"sequence_batching { direct { minimum_slot_utilization: 1e39 } }",
         "config.pbtxt:1:56: sequence_batching.direct.minimum_slot_utilization: 1e39 is out of "
         "range for float"},
        {"name: \"a\" $", "config.pbtxt:1:11: unexpected character '$'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_str_eq(parse_error(cases[i].text, RTX_EFORMAT), cases[i].msg);
}
END_TEST

START_TEST(pbtext_bounds) {
    /* nesting */
    char *deep = malloc(70 * 40 + 1);
    size_t n = 0;
    for (int i = 0; i < 70; i++) {
        const char *level = i ? "node { attribute { g { " : "graph { ";
        memcpy(deep + n, level, strlen(level));
        n += strlen(level);
    }
    ProtobufCMessage *m = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_pbtext_parse(&onnx__model_proto__descriptor, deep, n, "deep", &m, &err),
                     RTX_ELIMIT);
    ck_assert_msg(strstr(err.msg, "messages nested deeper than 64"), "%s", err.msg);
    free(deep);
    /* the text's size */
    ck_assert_int_eq(rtx_pbtext_parse(&inference__model_config__descriptor, "",
                                      RTX_PBTEXT_MAX_BYTES + 1, "big", &m, &err),
                     RTX_ELIMIT);
    /* what the message takes: a million empty inputs are ~100 MiB of messages */
    size_t count = 1000000;
    char *many = malloc(count * 8 + 1);
    for (size_t i = 0; i < count; i++)
        memcpy(many + i * 8, "input{} ", 8);
    ck_assert_int_eq(
        rtx_pbtext_parse(&inference__model_config__descriptor, many, count * 8, "many", &m, &err),
        RTX_ELIMIT);
    ck_assert_msg(strstr(err.msg, "the message needs more than 64 MiB"), "%s", err.msg);
    ck_assert_ptr_null(m);
    free(many);
}
END_TEST

struct visited {
    char paths[32][96];
    int n;
};

static int collect(void *ctx, const char *path, const ProtobufCMessage *m,
                   const ProtobufCFieldDescriptor *f) {
    struct visited *v = ctx;
    if (v->n < 32) snprintf(v->paths[v->n++], sizeof v->paths[0], "%s", path);
    return strcmp(f->name, "optimization") == 0; /* not into this one */
}

START_TEST(pbtext_visit_set_fields) {
    struct rtx_err err = {0};
    Inference__ModelConfig *c = parse_config(
        "name: \"m\" max_batch_size: 0 input { name: \"a\" dims: [1] optional: false } "
        "input { reshape {} } optimization { graph { level: 1 } } "
        "version_policy { all {} } parameters { key: \"k\" value {} }",
        &err);
    ck_assert_msg(c, "%s", err.msg);
    struct visited v = {0};
    ck_assert_int_eq(rtx_pbtext_visit(&c->base, collect, &v), 0);
    static const char *const want[] = {
        "name",          "version_policy",    "version_policy.all",  "input",
        "input[0].name", "input[0].dims",     "input[1].reshape",    "optimization",
        "parameters",    "parameters[0].key", "parameters[0].value",
    };
    ck_assert_int_eq(v.n, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < v.n; i++)
        ck_assert_str_eq(v.paths[i], want[i]);
    rtx_pbtext_free(&c->base);
}
END_TEST

/* Every allocation failing in turn: RTX_ENOMEM each time, then success; the ASan build checks
 * that nothing leaks on any of the error paths. */
START_TEST(pbtext_out_of_memory) {
    const char *text = "name: \"m\" input [{name: \"a\" dims: [1, 2, 3, 4, 5]}, {name: \"b\"}] "
                       "parameters { key: \"x\" value { string_value: \"1\" } } "
                       "parameters { key: \"x\" value { string_value: \"2\" } } "
                       "version_policy { specific { versions: [1] } }";
    int rc = -1;
    for (long n = 1; n < 200 && rc != 0; n++) {
        ProtobufCMessage *m = NULL;
        struct rtx_err err = {0};
        rtx_alloc_fail_after(n);
        rc = rtx_pbtext_parse(&inference__model_config__descriptor, text, strlen(text),
                              "config.pbtxt", &m, &err);
        rtx_alloc_fail_after(0);
        if (rc) {
            ck_assert_msg(rc == RTX_ENOMEM, "n %ld: %d %s", n, rc, err.msg);
            ck_assert_ptr_null(m);
        }
        rtx_pbtext_free(m);
    }
    ck_assert_int_eq(rc, 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * config.pbtxt into serving's model config
 * ---------------------------------------------------------------------------------------- */

static char logged[16][96]; /* the "field" of each "config setting ignored" line */
static int n_logged;

static void capture(enum rtx_serving_log_level level, const char *msg, const char *const *f) {
    if (strcmp(msg, "config setting ignored") != 0) return;
    for (int i = 0; f[i] && f[i + 1]; i += 2)
        if (strcmp(f[i], "field") == 0 && n_logged < 16)
            snprintf(logged[n_logged++], sizeof logged[0], "%s", f[i + 1]);
}

static int read_config(const char *text, struct rtx__model_config *c, struct rtx_err *err) {
    n_logged = 0;
    return rtx__model_config_pbtxt(text, strlen(text), "m", "m/config.pbtxt", capture, c, err);
}

START_TEST(config_pbtxt_maps_fields) {
    const char *text =
        "platform: \"onnxruntime_onnx\" max_batch_size: 16\n"
        "input [ { name: \"ids\" data_type: TYPE_INT64 dims: [ -1 ] format: FORMAT_NHWC },\n"
        "        { name: \"s\" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } "
        "optional: true } ]\n"
        "output [ { name: \"y\" data_type: TYPE_FP16 dims: [ 2, 3 ] reshape { shape: [ 6 ] } "
        "label_filename: \"l.txt\" } ]\n"
        "dynamic_batching { preferred_batch_size: [ 8, 4 ] max_queue_delay_microseconds: 100\n"
        "  preserve_ordering: true priority_levels: 3 default_priority_level: 2\n"
        "  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 500\n"
        "    allow_timeout_override: true max_queue_size: 9 }\n"
        "  priority_queue_policy { key: 1 value { max_queue_size: 2 } } }\n"
        "instance_group [ { kind: KIND_CPU }, { count: 3 kind: KIND_GPU gpus: [ 1, 0 ] "
        "rate_limiter { priority: 2 } } ]\n"
        "version_policy { latest { num_versions: 2 } }\n"
        "default_model_filename: \"net.onnx\"\n"
        "parameters { key: \"lane\" value { string_value: \"batch\" } }\n"
        "parameters { key: \"memory_reserve_bytes\" value { string_value: \"1048576\" } }\n"
        "parameters { key: \"intra_op_thread_count\" value { string_value: \"1\" } }\n"
        "model_transaction_policy { decoupled: false }\n";
    struct rtx__model_config c;
    struct rtx_err err = {0};
    ck_assert_msg(read_config(text, &c, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(c.info.name, "m");
    ck_assert_str_eq(c.info.platform, "onnxruntime_onnx");
    ck_assert_str_eq(c.backend, "onnxruntime");
    ck_assert_int_eq(c.info.max_batch_size, 16);
    ck_assert(!c.auto_inputs && !c.auto_outputs && !c.batch_autofill);
    ck_assert_int_eq(c.info.n_inputs, 2);
    ck_assert_int_eq(c.info.inputs[0].dtype, RTX_I64);
    ck_assert(c.info.inputs[0].ndim == 1 && c.info.inputs[0].dims[0] == -1);
    ck_assert(c.info.inputs[1].optional && c.in_reshape[1].set && c.in_reshape[1].ndim == 0);
    ck_assert(!c.in_reshape[0].set);
    ck_assert_int_eq(c.info.outputs[0].dtype, RTX_F16);
    ck_assert(c.out_reshape[0].set && c.out_reshape[0].ndim == 1 && c.out_reshape[0].dims[0] == 6);
    ck_assert(c.info.dynamic_batching && c.info.n_preferred == 2);
    ck_assert(c.info.preferred_batch_sizes[0] == 4 && c.info.preferred_batch_sizes[1] == 8);
    ck_assert_int_eq(c.info.max_queue_delay_us, 100);
    ck_assert(c.priority_levels == 3 && c.default_priority_level == 2);
    ck_assert(c.default_policy.set && c.default_policy.on_timeout == RTX_SCHED_TIMEOUT_DELAY);
    ck_assert(c.default_policy.timeout_us == 500 && c.default_policy.allow_override);
    ck_assert_int_eq(c.default_policy.max_queue, 9);
    ck_assert(c.n_level_policies == 1 && c.level_policies[0].level == 1);
    ck_assert(c.level_policies[0].policy.on_timeout == RTX_SCHED_TIMEOUT_REJECT);
    ck_assert_int_eq(c.level_policies[0].policy.max_queue, 2);
    ck_assert_int_eq(c.n_groups, 2);
    ck_assert(c.groups[0].kind == RTX__KIND_CPU && c.groups[0].count == 2); /* ONNX: 2 */
    ck_assert(c.groups[1].kind == RTX__KIND_GPU && c.groups[1].count == 3);
    ck_assert(c.groups[1].n_gpus == 2 && c.groups[1].gpus[0] == 1);
    ck_assert_int_eq(c.info.instances, 5);
    ck_assert(c.policy == RTX__POLICY_LATEST && c.latest_n == 2);
    ck_assert_str_eq(c.model_filename, "net.onnx");
    ck_assert_str_eq(c.info.default_lane, "batch");
    ck_assert_int_eq(c.memory_reserve_bytes, 1048576);
    static const char *const ignored[] = {
        "input[0].format", "output[0].label_filename", "dynamic_batching.preserve_ordering",
        "instance_group[1].rate_limiter", "parameters[\"intra_op_thread_count\"]"};
    ck_assert_int_eq(n_logged, 5);
    for (int i = 0; i < 5; i++) {
        bool found = false;
        for (int k = 0; k < n_logged; k++)
            found |= strcmp(logged[k], ignored[i]) == 0;
        ck_assert_msg(found, "%s was not logged", ignored[i]);
    }
    /* no config of io: the ONNX model gives them, and the batch size when none is given */
    ck_assert_int_eq(read_config("backend: \"onnxruntime\"", &c, &err), 0);
    ck_assert(c.auto_inputs && c.auto_outputs && c.batch_autofill);
    ck_assert_int_eq(
        read_config("platform: \"rtx_graph\" input [{name: \"x\" data_type: TYPE_FP32 "
                    "dims: [1]}] output [{name: \"y\" data_type: TYPE_FP32 dims: [1]}]",
                    &c, &err),
        0);
    ck_assert_str_eq(c.info.platform, "rtx_graph");
    ck_assert(c.groups[0].kind == RTX__KIND_AUTO && c.groups[0].count == 1);
}
END_TEST

START_TEST(config_pbtxt_refuses_by_name) {
    static const struct {
        const char *text;
        int code;
        const char *msg;
    } cases[] = {
        {"sequence_batching { }\ninput [ { name: \"x\" is_shape_tensor: true } ]\n"
         "model_repository_agents { agents { name: \"checksum\" } }\nbatch_input [ { } ]\n",
         RTX_EUNSUPPORTED,
         "m/config.pbtxt: not supported by rtxd: input[0].is_shape_tensor (shape tensors "
         "(TensorRT)), sequence_batching (sequence batching (stateful models)), batch_input "
         "(batch inputs (ragged batching)), model_repository_agents (repository agents)"},
        {"model_transaction_policy { decoupled: true }", RTX_EUNSUPPORTED,
         "model_transaction_policy.decoupled (decoupled models"},
        {"ensemble_scheduling { step [ { model_name: \"a\" } ] }", RTX_EUNSUPPORTED,
         "ensemble_scheduling (ensembles)"},
        {"cc_model_filenames { key: \"8.0\" value: \"a.onnx\" }", RTX_EUNSUPPORTED,
         "cc_model_filenames (model files per compute capability)"},
        {"platform: \"pytorch_libtorch\"", RTX_EUNSUPPORTED, "platform \"pytorch_libtorch\""},
        {"platform: \"onnxruntime_onnx\" backend: \"python\"", RTX_EUNSUPPORTED,
         "backend \"python\""},
        {"name: \"other\"", RTX_EFORMAT, "name \"other\" differs from the directory \"m\""},
        {"max_batch_size: -1", RTX_EFORMAT, "max_batch_size: -1 is not in [0, 2^20]"},
        {"input [ { name: \"x\" dims: [ 1 ] } ]", RTX_EFORMAT, "input[0].data_type: missing"},
        {"input [ { name: \"x\" data_type: TYPE_STRING dims: [ 1 ] } ]", RTX_EUNSUPPORTED,
         "TYPE_STRING"},
        {"input [ { name: \"x\" data_type: TYPE_FP32 } ]", RTX_EFORMAT, "input[0].dims: empty"},
        {"input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 0 ] } ]", RTX_EFORMAT,
         "input[0].dims: dimension 0 is 0"},
        {"input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 1 ] }, { name: \"x\" "
         "data_type: TYPE_FP32 dims: [ 1 ] } ]",
         RTX_EFORMAT, "input: 'x' is listed twice"},
        {"input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 3 ] } } ]",
         RTX_EFORMAT, "input[0].reshape.shape: a different number of elements than dims"},
        {"input [ { name: \"x\" data_type: TYPE_FP32 dims: [ -1 ] reshape { shape: [ 1, -1 ] } } "
         "]",
         RTX_EUNSUPPORTED, "a reshape of -1 dimensions that differs from dims"},
        {"max_batch_size: 0 input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 1 ] } ] "
         "dynamic_batching { }",
         RTX_EFORMAT, "dynamic_batching: needs max_batch_size > 0"},
        {"max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }", RTX_EFORMAT,
         "preferred_batch_size[0]: 8 is not in [1, max_batch_size 4]"},
        {"max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
         RTX_EFORMAT, "default_priority_level: 3 is not in [1, priority_levels 2]"},
        {"max_batch_size: 4 dynamic_batching { priority_levels: 2 priority_queue_policy { key: 5 "
         "value { } } }",
         RTX_EFORMAT, "priority_queue_policy[5]: level 5 is not in [1, priority_levels 2]"},
        {"instance_group [ { kind: KIND_MODEL } ]", RTX_EUNSUPPORTED,
         "instance_group[0].kind: KIND_MODEL"},
        {"instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]", RTX_EFORMAT,
         "instance_group[0].gpus: given with KIND_CPU"},
        {"instance_group [ { count: 65 } ]", RTX_EFORMAT, "instance_group[0].count: 65"},
        {"version_policy { specific { } }", RTX_EFORMAT,
         "version_policy.specific.versions: 0 versions"},
        {"default_model_filename: \"../x.onnx\"", RTX_EFORMAT,
         "default_model_filename: \"../x.onnx\" is not a file name"},
        {"parameters { key: \"memory_reserve_bytes\" value { string_value: \"lots\" } }",
         RTX_EFORMAT, "parameters[\"memory_reserve_bytes\"].string_value: \"lots\""},
        {"platform: \"rtx_graph\" output [ { name: \"y\" data_type: TYPE_FP32 dims: [ 1 ] } ]",
         RTX_EFORMAT, "input: missing or empty"},
        {"input { name: \"x\" ", RTX_EFORMAT, "m/config.pbtxt:1:19: input[0]: '{' at 1:7"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rtx__model_config c;
        struct rtx_err err = {0};
        int rc = read_config(cases[i].text, &c, &err);
        ck_assert_msg(rc == cases[i].code, "case %zu: %d %s", i, rc, err.msg);
        ck_assert_msg(strstr(err.msg, cases[i].msg), "case %zu: '%s' lacks '%s'", i, err.msg,
                      cases[i].msg);
        ck_assert_int_eq(n_logged, 0); /* a refused config logs nothing as ignored */
    }
}
END_TEST

START_TEST(config_pbtxt_out_of_memory) {
    const char *text = "platform: \"onnxruntime_onnx\" max_batch_size: 4 "
                       "input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 4 ] } ] "
                       "dynamic_batching { priority_levels: 2 priority_queue_policy { key: 1 "
                       "value { max_queue_size: 1 } } } optimization { graph { level: 1 } } "
                       "parameters { key: \"lane\" value { string_value: \"realtime\" } }";
    int rc = -1;
    for (long n = 1; n < 300 && rc != 0; n++) {
        struct rtx__model_config c;
        struct rtx_err err = {0};
        rtx_alloc_fail_after(n);
        rc = read_config(text, &c, &err);
        rtx_alloc_fail_after(0);
        if (rc) ck_assert_msg(rc == RTX_ENOMEM, "n %ld: %d %s", n, rc, err.msg);
    }
    ck_assert_int_eq(rc, 0);
}
END_TEST

Suite *rtx_pbtext_suite(void) {
    Suite *s = suite_create("pbtext");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, pbtext_reads_triton_config);
    tcase_add_test(tc, pbtext_strings_and_escapes);
    tcase_add_test(tc, pbtext_every_scalar_type);
    tcase_add_test(tc, pbtext_errors_name_position_and_path);
    tcase_add_test(tc, pbtext_bounds);
    tcase_add_test(tc, pbtext_visit_set_fields);
    tcase_add_test(tc, pbtext_out_of_memory);
    suite_add_tcase(s, tc);
    TCase *cfg = tcase_create("config");
    tcase_add_test(cfg, config_pbtxt_maps_fields);
    tcase_add_test(cfg, config_pbtxt_refuses_by_name);
    tcase_add_test(cfg, config_pbtxt_out_of_memory);
    suite_add_tcase(s, cfg);
    return s;
}
