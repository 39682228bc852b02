/*
 * pbtext-encode.c - rtx-pbtext-encode, the protobuf text parser (formats/pbtext.c) as a
 * filter for tests/serving/test_triton_repo_pbtext.py, which compares it with Python's
 * google.protobuf.text_format: reads protobuf text on stdin, parses it as the message type
 * named by the argument and writes the message's binary encoding to stdout. A parse error is
 * printed on stderr with exit status 1; a bad usage exits 2.
 *
 * Usage: rtx-pbtext-encode TYPE < text > binary
 *   TYPE: inference.ModelConfig, inference.InferTensorContents, onnx.AttributeProto,
 *         onnx.ModelProto
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "inference/grpc_service.pb-c.h"
#include "inference/model_config.pb-c.h"
#include "onnx/onnx.pb-c.h"

static const ProtobufCMessageDescriptor *const types[] = {
    &inference__model_config__descriptor,
    &inference__infer_tensor_contents__descriptor,
    &onnx__attribute_proto__descriptor,
    &onnx__model_proto__descriptor,
};

int main(int argc, char **argv) {
    const ProtobufCMessageDescriptor *d = NULL;
    for (size_t i = 0; argc == 2 && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(types[i]->name, argv[1]) == 0) d = types[i];
    if (!d) {
        fprintf(stderr, "usage: rtx-pbtext-encode TYPE < text > binary (TYPE: ");
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", types[i]->name);
        fprintf(stderr, ")\n");
        return 2;
    }
    size_t cap = 1 << 16, n = 0, got;
    char *text = malloc(cap);
    while (text && (got = fread(text + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            char *g = realloc(text, cap *= 2);
            if (!g) free(text);
            text = g;
        }
    }
    if (!text) {
        fprintf(stderr, "rtx-pbtext-encode: out of memory\n");
        return 1;
    }
    ProtobufCMessage *m;
    struct rtx_err err = {0};
    int rc = rtx_pbtext_parse(d, text, n, "stdin", &m, &err);
    free(text);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *out = malloc(len ? len : 1);
    if (out) protobuf_c_message_pack(m, out);
    int ok = out && fwrite(out, 1, len, stdout) == len;
    free(out);
    rtx_pbtext_free(m);
    return ok ? 0 : 1;
}
