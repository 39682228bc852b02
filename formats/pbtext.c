/*
 * pbtext.c - the protobuf text format (what protobuf's TextFormat and Python's text_format
 * read, and Triton's config.pbtxt is written in), parsed into a protobuf-c message by its
 * descriptors, and a walk over the fields a message has set.
 *
 * DESIGN
 * A lexer (pbtext-lex.c) hands out tokens (identifiers, numbers, quoted strings,
 * punctuation) with their line and column; `#` starts a comment to the end of the line, and
 * reads scalar values for their field's type. A recursive-descent parser
 * reads `name: value`, `name { ... }` / `name < ... >` (the colon optional before a message)
 * and `name: [v, ...]` lists, each field looked up by name in the message's descriptor, and
 * stores the value where the descriptor's offsets say, as protobuf-c's own unpacker would:
 * has_ flags for proto2 optional scalars, the case word of a oneof, n_ counts and arrays of
 * repeated fields (grown in powers of two), messages initialised with
 * protobuf_c_message_init. Every allocation goes through rtx_malloc and is attached to the
 * message before anything else can fail, so on any error the partial message is freed with
 * protobuf_c_message_free_unpacked and nothing leaks. The bounds: the text's size, the
 * nesting depth and the bytes the message may take (RTX_PBTEXT_MAX_*).
 * A map<K, V> field is, in protobuf-c, a repeated message of {key = 1, value = 2} named
 * "...Entry"; a later entry with the same key replaces the earlier one's value, as protobuf's
 * maps do. Errors say "WHAT:LINE:COL: FIELD.PATH: problem", the path with list indices
 * ("input[1].dims[0]"). Deviations from protobuf's parsers, all stricter: an enum number that
 * names no value is refused, so is a float beyond the range of its type, an unknown escape
 * and an integer with a '_'.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "formats/pbtext-impl.h"

/* ------------------------------------------------------------------------------------------
 * Allocation: protobuf-c frees through this allocator (rtx_pbtext_free)
 * ---------------------------------------------------------------------------------------- */

static void *pb_alloc(void *data, size_t size) {
    return rtx_malloc(size);
}
static void pb_free(void *data, void *p) {
    rtx_free(p);
}
static ProtobufCAllocator allocator = {.alloc = pb_alloc, .free = pb_free};

void rtx_pbtext_free(ProtobufCMessage *m) {
    if (m) protobuf_c_message_free_unpacked(m, &allocator);
}

/* ------------------------------------------------------------------------------------------
 * Field paths and storage
 * ---------------------------------------------------------------------------------------- */

/* Appends to the path; returns the length to restore. */
static size_t path_push(struct parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static size_t path_push(struct parser *p, const char *fmt, ...) {
    size_t old = p->path_len;
    if (old < sizeof p->path - 1) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p->path + old, sizeof p->path - old, fmt, ap);
        va_end(ap);
        p->path_len = n < 0                               ? old
                      : old + (size_t)n >= sizeof p->path ? sizeof p->path - 1
                                                          : old + (size_t)n;
    }
    return old;
}

static void path_pop(struct parser *p, size_t len) {
    p->path_len = len;
    p->path[len] = '\0';
}

static void *member(ProtobufCMessage *m, unsigned offset) {
    return (char *)m + offset;
}

/* Room for one more element of a repeated field; returns where it goes (the count is not
 * raised yet). Arrays grow in powers of two, so the capacity follows from the count. */
static void *repeated_slot(struct parser *p, ProtobufCMessage *m,
                           const ProtobufCFieldDescriptor *f, int *rc) {
    size_t *n = member(m, f->quantifier_offset);
    void **arr = member(m, f->offset);
    size_t es = rtx__pbtext_elem_size(f);
    if (*n == 0 || (*n & (*n - 1)) == 0) {
        size_t cap = *n ? *n * 2 : 1;
        if (cap > RTX_PBTEXT_MAX_ALLOC / es ||
            p->alloc_bytes > RTX_PBTEXT_MAX_ALLOC - cap * es / 2) {
            *rc = rtx__pbtext_fail(p, &p->tok, RTX_ELIMIT, "the message needs more than %zu MiB",
                                   (size_t)RTX_PBTEXT_MAX_ALLOC >> 20);
            return NULL;
        }
        void *g = rtx_realloc(*arr, cap * es);
        if (!g) {
            *rc = rtx_err_set(p->err, RTX_ENOMEM, "%s: out of memory", p->what);
            return NULL;
        }
        p->alloc_bytes += cap * es / 2 + (*n ? 0 : es / 2);
        *arr = g;
    }
    return (char *)*arr + *n * es;
}

/* ------------------------------------------------------------------------------------------
 * Messages
 * ---------------------------------------------------------------------------------------- */

#define MAX_FIELDS 1024 /* fields of one message type the parser handles */

static int parse_body(struct parser *p, ProtobufCMessage *m, char close, const struct tok *open);

/* A map entry type as protoc makes it: "...Entry" with exactly key = 1 and value = 2. */
static bool is_map_entry(const ProtobufCMessageDescriptor *d) {
    size_t n = strlen(d->short_name);
    return d->n_fields == 2 && n > 5 && strcmp(d->short_name + n - 5, "Entry") == 0 &&
           d->fields[0].id == 1 && strcmp(d->fields[0].name, "key") == 0 && d->fields[1].id == 2 &&
           strcmp(d->fields[1].name, "value") == 0;
}

static bool same_key(const ProtobufCMessage *a, const ProtobufCMessage *b) {
    const ProtobufCFieldDescriptor *k = &a->descriptor->fields[0];
    const void *x = (const char *)a + k->offset, *y = (const char *)b + k->offset;
    if (k->type == PROTOBUF_C_TYPE_STRING) {
        const char *s = *(char *const *)x, *t = *(char *const *)y;
        return strcmp(s ? s : "", t ? t : "") == 0;
    }
    return memcmp(x, y, rtx__pbtext_elem_size(k)) == 0;
}

/* The last map entry replaces an earlier one with its key (and takes its place). */
static void map_dedup(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    size_t *n = member(m, f->quantifier_offset);
    ProtobufCMessage **arr = *(ProtobufCMessage ***)member(m, f->offset);
    for (size_t i = 0; i + 1 < *n; i++)
        if (same_key(arr[i], arr[*n - 1])) {
            rtx_pbtext_free(arr[i]);
            arr[i] = arr[*n - 1];
            (*n)--;
            return;
        }
}

/* One message value ({...} or <...>) of field f: a new message attached to m (in the array of
 * a repeated field), then read. */
static int parse_message_value(struct parser *p, ProtobufCMessage *m,
                               const ProtobufCFieldDescriptor *f) {
    char b[64];
    struct tok open = p->tok;
    if (!pbtext_is_punct(&open, '{') && !pbtext_is_punct(&open, '<'))
        return rtx__pbtext_fail(p, &open, RTX_EFORMAT, "expected '{' or '<', found %s",
                                rtx__pbtext_show(&open, b, sizeof b));
    if (p->depth >= RTX_PBTEXT_MAX_DEPTH)
        return rtx__pbtext_fail(p, &open, RTX_ELIMIT, "messages nested deeper than %d",
                                RTX_PBTEXT_MAX_DEPTH);
    const ProtobufCMessageDescriptor *d = f->descriptor;
    int rc = 0;
    void *slot =
        f->label == PROTOBUF_C_LABEL_REPEATED ? repeated_slot(p, m, f, &rc) : member(m, f->offset);
    if (!slot) return rc;
    ProtobufCMessage *sub = rtx__pbtext_alloc(p, &open, d->sizeof_message, &rc);
    if (!sub) return rc;
    protobuf_c_message_init(d, sub);
    *(ProtobufCMessage **)slot = sub;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) (*(size_t *)member(m, f->quantifier_offset))++;
    if ((rc = rtx__pbtext_next(p))) return rc;
    p->depth++;
    rc = parse_body(p, sub, open.p[0] == '{' ? '}' : '>', &open);
    p->depth--;
    if (rc == 0 && f->label == PROTOBUF_C_LABEL_REPEATED && is_map_entry(d)) map_dedup(m, f);
    return rc;
}

/* One value of field f; a repeated field's value is appended. */
static int parse_value(struct parser *p, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    if (f->type == PROTOBUF_C_TYPE_MESSAGE) return parse_message_value(p, m, f);
    int rc = 0;
    if (f->label != PROTOBUF_C_LABEL_REPEATED)
        return rtx__pbtext_scalar(p, f, member(m, f->offset));
    void *slot = repeated_slot(p, m, f, &rc);
    if (!slot) return rc;
    if ((rc = rtx__pbtext_scalar(p, f, slot))) return rc;
    (*(size_t *)member(m, f->quantifier_offset))++;
    return 0;
}

/* `[v, v, ...]` of a repeated field (the current token is '['); `[]` is no value. */
static int parse_list(struct parser *p, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    int rc = rtx__pbtext_next(p);
    if (rc) return rc;
    if (pbtext_is_punct(&p->tok, ']')) return rtx__pbtext_next(p);
    size_t *n = member(m, f->quantifier_offset);
    for (;;) {
        size_t keep = path_push(p, "[%zu]", *n);
        rc = parse_value(p, m, f);
        path_pop(p, keep);
        if (rc) return rc;
        if (pbtext_is_punct(&p->tok, ']')) return rtx__pbtext_next(p);
        if ((rc = rtx__pbtext_expect(p, ','))) return rc;
    }
}

/* Reads `name: value` pairs into m until `close` ('}', '>' or 0: the end of the text). */
static int parse_body(struct parser *p, ProtobufCMessage *m, char close, const struct tok *open) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    uint64_t seen[MAX_FIELDS / 64] = {0};
    char b[64];
    int rc;
    if (d->n_fields > MAX_FIELDS)
        return rtx__pbtext_fail(p, &p->tok, RTX_EINVAL, "%s has more than %d fields", d->name,
                                MAX_FIELDS);
    for (;;) {
        struct tok t = p->tok;
        if (close ? pbtext_is_punct(&t, close) : t.kind == PB_EOF) break;
        if (t.kind == PB_EOF)
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT,
                                    "'%c' at %d:%d is not closed (expected '%c')", open->p[0],
                                    open->line, open->col, close);
        if (pbtext_is_punct(&t, '['))
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT,
                                    "extensions and Any ('[...]' names) are not "
                                    "supported");
        if (t.kind != PB_IDENT)
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "expected a field name, found %s",
                                    rtx__pbtext_show(&t, b, sizeof b));
        char name[128];
        const ProtobufCFieldDescriptor *f = NULL;
        if (rtx__pbtext_text(&t, name, sizeof name))
            f = protobuf_c_message_descriptor_get_field_by_name(d, name);
        if (!f)
            return rtx__pbtext_fail(p, &t, RTX_EFORMAT, "%s has no field named '%.*s'", d->name,
                                    (int)(t.len > 64 ? 64 : t.len), t.p);
        size_t idx = (size_t)(f - d->fields);
        size_t keep = path_push(p, "%s%s", p->path_len ? "." : "", f->name);
        bool repeated = f->label == PROTOBUF_C_LABEL_REPEATED;
        if (!repeated && (seen[idx / 64] >> (idx % 64) & 1)) {
            rc = rtx__pbtext_fail(p, &t, RTX_EFORMAT, "given twice (it is not repeated)");
            goto done;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t other = *(uint32_t *)member(m, f->quantifier_offset);
            const ProtobufCFieldDescriptor *o =
                other && other != f->id ? protobuf_c_message_descriptor_get_field(d, other) : NULL;
            if (o) {
                rc = rtx__pbtext_fail(p, &t, RTX_EFORMAT,
                                      "'%s' is set already, and they are members of "
                                      "one oneof",
                                      o->name);
                goto done;
            }
        }
        seen[idx / 64] |= (uint64_t)1 << (idx % 64);
        /* the case first: a message member is freed through it if reading it fails */
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
            *(uint32_t *)member(m, f->quantifier_offset) = f->id;
        if ((rc = rtx__pbtext_next(p))) goto done;
        bool colon = pbtext_is_punct(&p->tok, ':');
        if (colon && (rc = rtx__pbtext_next(p))) goto done;
        if (!colon && f->type != PROTOBUF_C_TYPE_MESSAGE) {
            rc = rtx__pbtext_fail(p, &p->tok, RTX_EFORMAT, "expected ':', found %s",
                                  rtx__pbtext_show(&p->tok, b, sizeof b));
            goto done;
        }
        if (pbtext_is_punct(&p->tok, '[')) {
            if (!repeated) {
                rc = rtx__pbtext_fail(p, &p->tok, RTX_EFORMAT,
                                      "a list for a field that is not repeated");
                goto done;
            }
            rc = parse_list(p, m, f);
        } else {
            size_t keep_i = repeated
                                ? path_push(p, "[%zu]", *(size_t *)member(m, f->quantifier_offset))
                                : p->path_len;
            rc = parse_value(p, m, f);
            path_pop(p, keep_i);
        }
        if (rc) goto done;
        if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && f->label == PROTOBUF_C_LABEL_OPTIONAL &&
            f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            *(protobuf_c_boolean *)member(m, f->quantifier_offset) = 1;
        if (pbtext_is_punct(&p->tok, ',') || pbtext_is_punct(&p->tok, ';'))
            rc = rtx__pbtext_next(p);
    done:
        path_pop(p, keep);
        if (rc) return rc;
    }
    for (unsigned i = 0; i < d->n_fields; i++)
        if (d->fields[i].label == PROTOBUF_C_LABEL_REQUIRED && !(seen[i / 64] >> (i % 64) & 1))
            return rtx__pbtext_fail(p, &p->tok, RTX_EFORMAT, "%s: required field '%s' is missing",
                                    d->name, d->fields[i].name);
    return close ? rtx__pbtext_next(p) : 0;
}

int rtx_pbtext_parse(const ProtobufCMessageDescriptor *desc, const char *text, size_t len,
                     const char *what, ProtobufCMessage **out, struct rtx_err *err) {
    if (!desc || desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC || (!text && len) || !out)
        return rtx_err_set(err, RTX_EINVAL, "pbtext: no descriptor, text or result");
    *out = NULL;
    what = what ? what : "text";
    if (len > RTX_PBTEXT_MAX_BYTES)
        return rtx_err_set(err, RTX_ELIMIT, "%s: %zu bytes (at most %zu)", what, len,
                           (size_t)RTX_PBTEXT_MAX_BYTES);
    struct parser p = {
        .text = text,
        .end = text + len,
        .cur = text,
        .line = 1,
        .line_start = text,
        .what = what,
        .err = err,
    };
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) p.cur = p.line_start = text + 3;
    int rc = 0;
    ProtobufCMessage *m = rtx__pbtext_alloc(&p, &p.tok, desc->sizeof_message, &rc);
    if (!m) return rc;
    protobuf_c_message_init(desc, m);
    if ((rc = rtx__pbtext_next(&p)) || (rc = parse_body(&p, m, 0, NULL))) {
        rtx_pbtext_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Walking the fields a message has set
 * ---------------------------------------------------------------------------------------- */

/* Whether m sets f, by protobuf's rules of presence. */
static bool field_set(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    const char *v = (const char *)m + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED)
        return *(const size_t *)((const char *)m + f->quantifier_offset) > 0;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return *(const uint32_t *)((const char *)m + f->quantifier_offset) == f->id;
    if (f->label == PROTOBUF_C_LABEL_REQUIRED) return true;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING) {
        const void *ptr = *(const void *const *)v;
        if (!ptr || ptr == f->default_value) return false;
        return f->type == PROTOBUF_C_TYPE_MESSAGE || f->label == PROTOBUF_C_LABEL_OPTIONAL ||
               *(const char *)ptr != '\0';
    }
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL)
        return *(const protobuf_c_boolean *)((const char *)m + f->quantifier_offset) != 0;
    if (f->type == PROTOBUF_C_TYPE_BYTES) return ((const ProtobufCBinaryData *)v)->len > 0;
    static const char zeros[8];
    return memcmp(v, zeros, rtx__pbtext_elem_size(f)) !=
           0; /* proto3: a value other than 0 is set */
}

static int visit(const ProtobufCMessage *m, char *path, size_t len, size_t cap,
                 rtx_pbtext_visit_fn fn, void *ctx) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (!field_set(m, f)) continue;
        int w = snprintf(path + len, cap - len, "%s%s", len ? "." : "", f->name);
        size_t flen = w < 0 || (size_t)w >= cap - len ? cap - 1 : len + (size_t)w;
        int rc = fn(ctx, path, m, f);
        if (rc < 0) return rc;
        if (rc == 0 && f->type == PROTOBUF_C_TYPE_MESSAGE) {
            const char *v = (const char *)m + f->offset;
            if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
                const ProtobufCMessage *const *arr = *(const ProtobufCMessage *const *const *)v;
                for (size_t k = 0; k < n; k++) {
                    int e = snprintf(path + flen, cap - flen, "[%zu]", k);
                    size_t elen = e < 0 || (size_t)e >= cap - flen ? cap - 1 : flen + (size_t)e;
                    if ((rc = visit(arr[k], path, elen, cap, fn, ctx)) < 0) return rc;
                }
            } else if ((rc = visit(*(const ProtobufCMessage *const *)v, path, flen, cap, fn,
                                   ctx)) < 0) {
                return rc;
            }
        }
        path[len] = '\0';
    }
    return 0;
}

int rtx_pbtext_visit(const ProtobufCMessage *m, rtx_pbtext_visit_fn fn, void *ctx) {
    char path[512] = "";
    return m ? visit(m, path, 0, sizeof path, fn, ctx) : 0;
}
