/*
 * rtxtok.c - tokenizer.json from the command line (formats/tokenizer.c), for tests and users.
 *
 *   rtxtok TOKENIZER.json encode [--no-special] [--add-special]
 *                                                  stdin: one JSON string per line;
 *                                                  stdout: one JSON array of ids per line
 *                                                  (--add-special: with the post-processor's
 *                                                  ids around them, e.g. a BOS)
 *   rtxtok TOKENIZER.json decode [--skip-special] stdin: one JSON array of ids per line;
 *                                                  stdout: one JSON string per line
 *   rtxtok TOKENIZER.json stream [--skip-special] as decode, but through the streaming decoder:
 *                                                  one JSON array of the pieces it emitted
 *                                                  (one per id, then the flush) per line
 * A line that cannot be handled prints its error to stderr and `null` to stdout; the exit status
 * is then 1. Exit status 2: bad arguments or a tokenizer that does not load.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"

enum mode { ENCODE, DECODE, STREAM };

static void usage(void) {
    fprintf(stderr, "usage: rtxtok TOKENIZER.json encode [--no-special] [--add-special]\n"
                    "       rtxtok TOKENIZER.json decode|stream [--skip-special]\n");
}

/* The ids of a JSON array line into *ids (malloc'ed). */
static int read_ids(json_t *v, int32_t **ids, size_t *n, struct rtx_err *err) {
    if (!json_is_array(v)) return rtx_err_set(err, RTX_EINVAL, "expected a JSON array of ids");
    *n = json_array_size(v);
    *ids = malloc((*n ? *n : 1) * sizeof **ids);
    if (!*ids) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    for (size_t i = 0; i < *n; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < INT32_MIN ||
            json_integer_value(x) > INT32_MAX)
            return rtx_err_set(err, RTX_EINVAL, "element %zu is not an id", i);
        (*ids)[i] = (int32_t)json_integer_value(x);
    }
    return 0;
}

/* One input line: the JSON result, or NULL with err set. */
static json_t *handle(const struct rtx_tokenizer *tok, enum mode mode, bool special,
                      bool add_special, json_t *in, struct rtx_err *err) {
    json_t *res = NULL;
    if (mode == ENCODE) {
        if (!json_is_string(in)) {
            rtx_err_set(err, RTX_EINVAL, "expected a JSON string");
            return NULL;
        }
        int32_t *ids;
        size_t n;
        if (rtx_tokenizer_encode(tok, json_string_value(in), json_string_length(in), special, &ids,
                                 &n, err))
            return NULL;
        res = json_array();
        const int32_t *pre, *post;
        int n_pre = add_special ? rtx_tokenizer_special_prefix(tok, &pre) : 0;
        int n_post = add_special ? rtx_tokenizer_special_suffix(tok, &post) : 0;
        for (int i = 0; res && i < n_pre; i++)
            json_array_append_new(res, json_integer(pre[i]));
        for (size_t i = 0; res && i < n; i++)
            json_array_append_new(res, json_integer(ids[i]));
        for (int i = 0; res && i < n_post; i++)
            json_array_append_new(res, json_integer(post[i]));
        rtx_free(ids);
        return res;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (read_ids(in, &ids, &n, err)) {
        free(ids);
        return NULL;
    }
    if (mode == DECODE) {
        char *text;
        size_t len;
        if (!rtx_tokenizer_decode(tok, ids, n, special, &text, &len, err)) {
            res = json_stringn(text, len);
            rtx_free(text);
        }
        free(ids);
        return res;
    }
    struct rtx_tokenizer_stream *s = rtx_tokenizer_stream_new(tok, special);
    res = s ? json_array() : NULL;
    const char *piece;
    size_t len;
    for (size_t i = 0; res && i <= n; i++) {
        int rc = i < n ? rtx_tokenizer_stream_feed(s, ids[i], &piece, &len, err)
                       : rtx_tokenizer_stream_flush(s, &piece, &len, err);
        if (rc) {
            json_decref(res);
            res = NULL;
        } else {
            json_array_append_new(res, json_stringn(piece, len));
        }
    }
    rtx_tokenizer_stream_free(s);
    free(ids);
    return res;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        usage();
        return 2;
    }
    enum mode mode;
    if (!strcmp(argv[2], "encode"))
        mode = ENCODE;
    else if (!strcmp(argv[2], "decode"))
        mode = DECODE;
    else if (!strcmp(argv[2], "stream"))
        mode = STREAM;
    else {
        usage();
        return 2;
    }
    /* encode: special tokens recognised unless --no-special; decode: kept unless
     * --skip-special */
    bool special = mode == ENCODE, add_special = false;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], mode == ENCODE ? "--no-special" : "--skip-special")) {
            special = !special;
        } else if (mode == ENCODE && !strcmp(argv[i], "--add-special")) {
            add_special = true;
        } else {
            usage();
            return 2;
        }
    }
    struct rtx_err err = {0};
    struct rtx_tokenizer *tok;
    if (rtx_tokenizer_load(argv[1], &tok, &err)) {
        fprintf(stderr, "rtxtok: %s\n", err.msg);
        return 2;
    }
    int status = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    for (long lineno = 1; (got = getline(&line, &cap, stdin)) >= 0; lineno++) {
        json_error_t jerr;
        json_t *in = json_loadb(line, (size_t)got, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        json_t *out = NULL;
        if (!in)
            rtx_err_set(&err, RTX_EINVAL, "not JSON: %s", jerr.text);
        else
            out = handle(tok, mode, special, add_special, in, &err);
        char *text = out ? json_dumps(out, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        if (!text) {
            fprintf(stderr, "rtxtok: line %ld: %s\n", lineno, err.msg);
            status = 1;
        }
        printf("%s\n", text ? text : "null");
        fflush(stdout);
        free(text);
        json_decref(in);
        json_decref(out);
    }
    free(line);
    rtx_tokenizer_free(tok);
    return status;
}
