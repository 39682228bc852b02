/*
 * test-pbtext.c - the protobuf text format parser (formats/pbtext.c): Triton ModelConfig texts
 * read into inference.ModelConfig (repeated fields both ways, oneofs, maps with the last value
 * winning, enums by name and number), every scalar type through a message descriptor made
 * here (sint, fixed, sfixed, proto2 optional bytes, required) checked by its binary encoding,
 * ONNX's proto2 AttributeProto (has_ flags), each error with its position and field path,
 * the bounds, the walk over set fields and an out-of-memory loop. Parity with Python's
 * text_format is tests/serving/test_triton_repo_pbtext.py.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "inference/model_config.pb-c.h"
#include "onnx/onnx.pb-c.h"

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
    return s;
}
