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
 *   rtxtok chat TEMPLATE MESSAGES.json [--add-generation-prompt] [--bos X] [--eos Y]
 *                                                  renders a chat template (a file holding the
 *                                                  Jinja text) over a JSON array of {"role",
 *                                                  "content"} messages ("-": stdin) to stdout
 * A line that cannot be handled prints its error to stderr and `null` to stdout; the exit status
 * is then 1 (chat: a render that fails). Exit status 2: bad arguments, or a tokenizer or
 * template that does not load.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"

enum mode { ENCODE, DECODE, STREAM };

static void usage(void) {
    fprintf(stderr, "usage: rtxtok TOKENIZER.json encode [--no-special] [--add-special]\n"
                    "       rtxtok TOKENIZER.json decode|stream [--skip-special]\n"
                    "       rtxtok chat TEMPLATE MESSAGES.json [--add-generation-prompt] "
                    "[--bos X] [--eos Y]\n");
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

/* The whole of a file ("-": stdin) into *out (malloc'ed, NUL-terminated). */
static int slurp(const char *path, char **out, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return -1;
    size_t cap = 4096, n = 0, got;
    char *p = malloc(cap);
    while (p && (got = fread(p + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *q = realloc(p, cap *= 2);
            if (!q) free(p);
            p = q;
        }
    }
    int bad = !p || ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        free(p);
        return -1;
    }
    p[n] = 0;
    *out = p, *len = n;
    return 0;
}

/* rtxtok chat TEMPLATE MESSAGES.json [--add-generation-prompt] [--bos X] [--eos Y] */
static int chat_main(int argc, char **argv) {
    bool agp = false;
    const char *bos = NULL, *eos = NULL;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--add-generation-prompt")) {
            agp = true;
        } else if (i + 1 < argc && (!strcmp(argv[i], "--bos") || !strcmp(argv[i], "--eos"))) {
            *(argv[i][2] == 'b' ? &bos : &eos) = argv[i + 1];
            i++;
        } else {
            usage();
            return 2;
        }
    }
    char *src, *msgs_text;
    size_t len, msgs_len;
    if (slurp(argv[2], &src, &len)) {
        fprintf(stderr, "rtxtok: %s: cannot read\n", argv[2]);
        return 2;
    }
    struct rtx_err err = {0};
    struct rtx_chat_template *t;
    const char *base = strrchr(argv[2], '/');
    if (rtx_chat_template_new(src, len, base ? base + 1 : argv[2], &t, &err)) {
        fprintf(stderr, "rtxtok: %s\n", err.msg);
        free(src);
        return 2;
    }
    free(src);
    int status = 2;
    json_error_t jerr;
    json_t *doc = NULL;
    struct rtx_chat_message *msgs = NULL;
    size_t n = 0;
    if (slurp(argv[3], &msgs_text, &msgs_len)) {
        fprintf(stderr, "rtxtok: %s: cannot read\n", argv[3]);
        goto out;
    }
    doc = json_loadb(msgs_text, msgs_len, 0, &jerr);
    free(msgs_text);
    if (!json_is_array(doc)) {
        fprintf(stderr, "rtxtok: %s: expected a JSON array of messages%s%s\n", argv[3],
                doc ? "" : ": ", doc ? "" : jerr.text);
        goto out;
    }
    n = json_array_size(doc);
    msgs = calloc(n ? n : 1, sizeof *msgs);
    for (size_t i = 0; msgs && i < n; i++) {
        json_t *m = json_array_get(doc, i);
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        msgs[i].content = json_string_value(json_object_get(m, "content"));
        if (!msgs[i].role || !msgs[i].content) {
            fprintf(stderr, "rtxtok: %s: messages[%zu]: expected string role and content\n",
                    argv[3], i);
            goto out;
        }
    }
    char *text;
    size_t text_len;
    if (!msgs ||
        rtx_chat_template_render(t, msgs, (int)n, agp, bos, eos, &text, &text_len, &err)) {
        fprintf(stderr, "rtxtok: %s\n", msgs ? err.msg : "out of memory");
        status = 1;
        goto out;
    }
    fwrite(text, 1, text_len, stdout);
    rtx_free(text);
    status = 0;
out:
    free(msgs);
    json_decref(doc);
    rtx_chat_template_free(t);
    return status;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "chat")) return chat_main(argc, argv);
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
