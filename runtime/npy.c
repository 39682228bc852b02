/*
 * npy.c - NumPy .npy files: reading (format versions 1.0, 2.0 and 3.0, C or Fortran order)
 * into contiguous tensors, and writing tensors as version 1.0 files.
 *
 * DESIGN
 * An .npy file is a 6-byte magic "\x93NUMPY", a major and minor version byte, a header
 * length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0), the header (a Python dict
 * literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
 * spaces and a final newline) and the raw element bytes. Files come from anywhere, so the
 * header is parsed by a small bounded recursive-descent parser over a (pointer, end) cursor
 * that accepts exactly the three keys NumPy writes, with string, boolean and tuple values,
 * and rejects anything else with RTX_EFORMAT and the offset of the problem. The data size
 * must match the shape exactly. Loading a file reads the header first and then the data
 * straight into the tensor, so the file is never held twice in memory.
 * Element bytes are the host's: rtxd runs on little-endian hosts only.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_PREAMBLE_MAX 12       /* magic, version, 4-byte header length; bytes */
#define NPY_HEADER_MAX (1u << 16) /* largest header accepted; bytes */
#define NPY_DESCR_MAX 32          /* longest dtype string accepted; chars */
#define NPY_CHUNK_ELEMS 16384     /* bf16 elements converted per write */

struct npy_header {
    enum rtx_dtype dtype;
    bool fortran;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    size_t data_bytes; /* numel * dtype size; bytes */
};

/* ------------------------------------------------------------------------------------------
 * dtypes
 * ---------------------------------------------------------------------------------------- */

struct npy_type {
    char kind;           /* NumPy kind: 'f', 'i', 'u', 'b', 'c' */
    int size;            /* bytes */
    int dtype;           /* enum rtx_dtype, or -1 when unsupported */
    const char *numpy;   /* NumPy's name */
    const char *convert; /* suggested NumPy type for unsupported ones */
};

static const struct npy_type npy_types[] = {
    {'f', 4, RTX_F32, "float32", NULL},
    {'f', 2, RTX_F16, "float16", NULL},
    {'i', 1, RTX_I8, "int8", NULL},
    {'i', 4, RTX_I32, "int32", NULL},
    {'i', 8, RTX_I64, "int64", NULL},
    {'u', 1, RTX_U8, "uint8", NULL},
    {'b', 1, RTX_BOOL, "bool", NULL},
    {'f', 8, -1, "float64", "np.float32"},
    {'f', 16, -1, "longdouble", "np.float32"},
    {'f', 12, -1, "longdouble", "np.float32"},
    {'i', 2, -1, "int16", "np.int32"},
    {'u', 2, -1, "uint16", "np.int32"},
    {'u', 4, -1, "uint32", "np.int64"},
    {'u', 8, -1, "uint64", "np.int64"},
    {'c', 8, -1, "complex64", NULL},
    {'c', 16, -1, "complex128", NULL},
};

#define NPY_SUPPORTED "float32, float16, int8, int32, int64, uint8, bool"

/* Maps a descr string ("<f4") to a dtype. */
static int descr_to_dtype(const char *descr, enum rtx_dtype *out, struct rtx_err *err) {
    const char *p = descr;
    char order = 0;
    if (*p == '<' || *p == '>' || *p == '|' || *p == '=') order = *p++;
    char kind = *p ? *p++ : 0;
    int size = 0;
    bool digits = false;
    while (*p >= '0' && *p <= '9' && size < 1000) {
        size = size * 10 + (*p++ - '0');
        digits = true;
    }
    const struct npy_type *ty = NULL;
    if (digits && *p == '\0') {
        for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
            if (npy_types[i].kind == kind && npy_types[i].size == size) ty = &npy_types[i];
    }
    if (!ty)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "unsupported dtype '%s'; supported: " NPY_SUPPORTED, descr);
    if (ty->dtype < 0) {
        if (ty->convert)
            return rtx_err_set(err, RTX_EUNSUPPORTED,
                               "unsupported dtype '%s' (%s); convert with a.astype(%s)", descr,
                               ty->numpy, ty->convert);
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "unsupported dtype '%s' (%s); supported: " NPY_SUPPORTED, descr,
                           ty->numpy);
    }
    if (ty->size > 1 && order == '>')
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "unsupported dtype '%s' (big-endian %s); convert with "
                           "a.astype('<%c%d')",
                           descr, ty->numpy, kind, size);
    if (ty->size > 1 && order != '<' && order != '=')
        return rtx_err_set(err, RTX_EFORMAT, "dtype '%s' has no byte order", descr);
    *out = (enum rtx_dtype)ty->dtype;
    return 0;
}

static const char *dtype_to_descr(enum rtx_dtype dt) {
    switch (dt) {
    case RTX_F32: return "<f4";
    case RTX_BF16: return "<f4"; /* converted: NumPy has no bfloat16 */
    case RTX_F16: return "<f2";
    case RTX_I8: return "|i1";
    case RTX_I32: return "<i4";
    case RTX_I64: return "<i8";
    case RTX_U8: return "|u1";
    case RTX_BOOL: return "|b1";
    default: return NULL;
    }
}

/* ------------------------------------------------------------------------------------------
 * Header parsing
 * ---------------------------------------------------------------------------------------- */

struct cursor {
    const char *p;
    const char *begin;
    const char *end;
};

static int syntax(const struct cursor *c, struct rtx_err *err, const char *what) {
    return rtx_err_set(err, RTX_EFORMAT, "bad .npy header: %s at offset %td", what,
                       c->p - c->begin);
}

static void skip_ws(struct cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Skips whitespace and consumes ch if it comes next. */
static bool eat(struct cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes, of printable ASCII, shorter than cap. */
static int parse_string(struct cursor *c, char *buf, size_t cap, struct rtx_err *err) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return syntax(c, err, "expected a quoted string");
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch < 0x20 || ch > 0x7e || ch == '\\')
            return syntax(c, err, "unexpected character in string");
        if (n + 1 >= cap) return syntax(c, err, "string too long");
        buf[n++] = (char)ch;
        c->p++;
    }
    if (c->p >= c->end) return syntax(c, err, "unterminated string");
    c->p++;
    buf[n] = '\0';
    return 0;
}

static bool eat_word(struct cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return false;
    const char *after = c->p + n;
    if (after < c->end && ((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
                           (*after >= '0' && *after <= '9') || *after == '_'))
        return false;
    c->p = after;
    return true;
}

static int parse_bool(struct cursor *c, bool *out, struct rtx_err *err) {
    skip_ws(c);
    if (eat_word(c, "True")) {
        *out = true;
        return 0;
    }
    if (eat_word(c, "False")) {
        *out = false;
        return 0;
    }
    return syntax(c, err, "expected True or False");
}

/* A tuple of non-negative integers: (), (3,), (2, 3), (2, 3,). */
static int parse_shape(struct cursor *c, struct npy_header *h, struct rtx_err *err) {
    if (!eat(c, '(')) return syntax(c, err, "expected a shape tuple");
    h->ndim = 0;
    bool comma = false; /* a comma followed the last element */
    for (;;) {
        if (eat(c, ')')) break;
        if (h->ndim > 0 && !comma) return syntax(c, err, "expected ',' or ')' in shape");
        skip_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return syntax(c, err, "expected a non-negative integer in shape");
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            int d = *c->p++ - '0';
            if (v > (INT64_MAX - d) / 10) return syntax(c, err, "dimension too large");
            v = v * 10 + d;
        }
        if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long literal */
        if (h->ndim == RTX_MAX_DIMS)
            return rtx_err_set(err, RTX_EUNSUPPORTED, "array has more than %d dimensions",
                               RTX_MAX_DIMS);
        h->dims[h->ndim++] = v;
        comma = eat(c, ',');
    }
    if (h->ndim == 1 && !comma) return syntax(c, err, "shape is not a tuple (missing ',')");
    return 0;
}

/* Parses the header dict text [s, s + n). */
static int parse_dict(const char *s, size_t n, struct npy_header *h, struct rtx_err *err) {
    struct cursor c = {.p = s, .begin = s, .end = s + n};
    bool have_descr = false, have_order = false, have_shape = false;
    char descr[NPY_DESCR_MAX] = "";
    int rc;
    if (!eat(&c, '{')) return syntax(&c, err, "expected '{'");
    for (;;) {
        if (eat(&c, '}')) break;
        char key[32];
        if ((rc = parse_string(&c, key, sizeof key, err)) < 0) return rc;
        if (!eat(&c, ':')) return syntax(&c, err, "expected ':'");
        if (strcmp(key, "descr") == 0 && !have_descr) {
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return rtx_err_set(err, RTX_EUNSUPPORTED, "structured dtypes are not supported");
            if ((rc = parse_string(&c, descr, sizeof descr, err)) < 0) return rc;
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
            if ((rc = parse_bool(&c, &h->fortran, err)) < 0) return rc;
            have_order = true;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if ((rc = parse_shape(&c, h, err)) < 0) return rc;
            have_shape = true;
        } else if (strcmp(key, "descr") == 0 || strcmp(key, "fortran_order") == 0 ||
                   strcmp(key, "shape") == 0) {
            return rtx_err_set(err, RTX_EFORMAT, "bad .npy header: duplicate key '%s'", key);
        } else {
            return rtx_err_set(err, RTX_EFORMAT, "bad .npy header: unexpected key '%s'", key);
        }
        if (eat(&c, ',')) continue;
        if (eat(&c, '}')) break;
        return syntax(&c, err, "expected ',' or '}'");
    }
    skip_ws(&c);
    if (c.p != c.end) return syntax(&c, err, "unexpected text after the dict");
    if (!have_descr || !have_order || !have_shape)
        return rtx_err_set(err, RTX_EFORMAT, "bad .npy header: missing key '%s'",
                           !have_descr   ? "descr"
                           : !have_order ? "fortran_order"
                                         : "shape");
    if ((rc = descr_to_dtype(descr, &h->dtype, err)) < 0) return rc;

    size_t esize = rtx_dtype_size(h->dtype);
    uint64_t bytes = esize;
    for (int i = 0; i < h->ndim; i++) {
        if (h->dims[i] == 0) {
            bytes = 0;
            break;
        }
    }
    for (int i = 0; i < h->ndim && bytes > 0; i++) {
        if ((uint64_t)h->dims[i] > (uint64_t)INT64_MAX / bytes)
            return rtx_err_set(err, RTX_EFORMAT, "bad .npy header: shape too large");
        bytes *= (uint64_t)h->dims[i];
    }
    if (bytes > SIZE_MAX) return rtx_err_set(err, RTX_EFORMAT, "bad .npy header: too large");
    h->data_bytes = (size_t)bytes;
    return 0;
}

/* Checks the fixed preamble in [p, p + len) (at least NPY_PREAMBLE_MAX bytes or the whole
 * input) and returns the header dict's offset and length. */
static int parse_preamble(const uint8_t *p, size_t len, size_t *dict_off, size_t *dict_len,
                          struct rtx_err *err) {
    if (len < NPY_MAGIC_LEN || memcmp(p, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return rtx_err_set(err, RTX_EFORMAT, "not an .npy file (bad magic)");
    if (len < NPY_MAGIC_LEN + 2) return rtx_err_set(err, RTX_EFORMAT, "truncated .npy preamble");
    int major = p[6], minor = p[7];
    if (major < 1 || major > 3 || minor != 0)
        return rtx_err_set(err, RTX_EUNSUPPORTED, "unsupported .npy format version %d.%d", major,
                           minor);
    size_t off = major == 1 ? 10 : 12;
    if (len < off) return rtx_err_set(err, RTX_EFORMAT, "truncated .npy preamble");
    uint32_t n = major == 1 ? (uint32_t)p[8] | (uint32_t)p[9] << 8
                            : (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 |
                                  (uint32_t)p[11] << 24;
    if (n > NPY_HEADER_MAX)
        return rtx_err_set(err, RTX_EFORMAT,
                           "bad .npy header: length %" PRIu32 " exceeds %u bytes", n,
                           NPY_HEADER_MAX);
    *dict_off = off;
    *dict_len = n;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Data
 * ---------------------------------------------------------------------------------------- */

/* Copies Fortran-order (column-major) elements at src into the C-order tensor storage dst. */
static void fortran_to_c(const struct npy_header *h, const uint8_t *src, uint8_t *dst) {
    size_t esize = rtx_dtype_size(h->dtype);
    size_t numel = h->data_bytes / esize;
    int64_t fstride[RTX_MAX_DIMS]; /* elements */
    int64_t idx[RTX_MAX_DIMS] = {0};
    int64_t s = 1;
    for (int k = 0; k < h->ndim; k++) {
        fstride[k] = s;
        s *= h->dims[k];
    }
    int64_t at = 0; /* source element of the current C-order index */
    for (size_t i = 0; i < numel; i++) {
        memcpy(dst + i * esize, src + (size_t)at * esize, esize);
        for (int k = h->ndim - 1; k >= 0; k--) {
            if (++idx[k] < h->dims[k]) {
                at += fstride[k];
                break;
            }
            at -= fstride[k] * (idx[k] - 1);
            idx[k] = 0;
        }
    }
}

/* Booleans other than 0 and 1 would break kernels that treat them as 0/1. */
static void normalize_bools(const struct npy_header *h, uint8_t *data) {
    if (h->dtype != RTX_BOOL) return;
    for (size_t i = 0; i < h->data_bytes; i++)
        data[i] = data[i] != 0;
}

/* A new tensor holding the data at src (the file's element bytes). */
static int make_tensor(const struct npy_header *h, const uint8_t *src, struct rtx_tensor **out,
                       struct rtx_err *err) {
    struct rtx_tensor *t = NULL;
    int rc = rtx_tensor_new(h->dtype, h->ndim, h->dims, &t, err);
    if (rc < 0) return rc;
    uint8_t *dst = rtx_tensor_data(t);
    if (h->data_bytes > 0) {
        if (h->fortran && h->ndim > 1)
            fortran_to_c(h, src, dst);
        else
            memcpy(dst, src, h->data_bytes);
        normalize_bools(h, dst);
    }
    *out = t;
    return 0;
}

int rtx_npy_read(const void *data, size_t len, struct rtx_tensor **out, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!out || (!data && len > 0)) return rtx_err_set(err, RTX_EINVAL, "npy: invalid argument");
    *out = NULL;
    const uint8_t *p = data;
    size_t off, n;
    int rc = parse_preamble(p, len, &off, &n, err);
    if (rc < 0) return rc;
    if (len - off < n) return rtx_err_set(err, RTX_EFORMAT, "truncated .npy header");
    struct npy_header h = {0};
    if ((rc = parse_dict((const char *)p + off, n, &h, err)) < 0) return rc;
    size_t have = len - off - n;
    if (have != h.data_bytes) {
        char shape[128];
        rtx_shape_str(h.dtype, h.ndim, h.dims, shape, sizeof shape);
        return rtx_err_set(err, RTX_EFORMAT, "%s data: %zu bytes, %s needs %zu bytes",
                           have < h.data_bytes ? "truncated" : "unexpected", have, shape,
                           h.data_bytes);
    }
    return make_tensor(&h, p + off + n, out, err);
}

/* ------------------------------------------------------------------------------------------
 * Files
 * ---------------------------------------------------------------------------------------- */

/* Reads exactly n bytes; a short file is RTX_EFORMAT (truncated). */
static int read_full(int fd, void *buf, size_t n, struct rtx_err *err) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (uint8_t *)buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            return rtx_err_set(err, -e, "read: %s", strerror(e));
        }
        if (r == 0)
            return rtx_err_set(err, RTX_EFORMAT, "truncated file: %zu bytes missing", n - got);
        got += (size_t)r;
    }
    return 0;
}

static int load_fd(int fd, struct rtx_tensor **out, struct rtx_err *err) {
    uint8_t pre[NPY_PREAMBLE_MAX];
    size_t have = 0;
    int rc;
    /* 10 bytes cover a 1.0 preamble and show the version of the longer 2.0/3.0 ones. */
    if ((rc = read_full(fd, pre, 10, err)) < 0) {
        if (rc == RTX_EFORMAT) return rtx_err_set(err, rc, "not an .npy file (too short)");
        return rc;
    }
    have = 10;
    size_t off, n;
    if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) == 0 && pre[6] >= 2 && pre[6] <= 3) {
        if ((rc = read_full(fd, pre + 10, 2, err)) < 0) return rc;
        have = 12;
    }
    if ((rc = parse_preamble(pre, have, &off, &n, err)) < 0) return rc;
    char *dict = rtx_malloc(n ? n : 1);
    if (!dict) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    struct npy_header h = {0};
    rc = read_full(fd, dict, n, err);
    if (rc == RTX_EFORMAT) rtx_err_set(err, rc, "truncated .npy header");
    if (rc == 0) rc = parse_dict(dict, n, &h, err);
    rtx_free(dict);
    if (rc < 0) return rc;

    char shape[128];
    rtx_shape_str(h.dtype, h.ndim, h.dims, shape, sizeof shape);
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        uint64_t left = sb.st_size > (off_t)(off + n) ? (uint64_t)sb.st_size - (off + n) : 0;
        if (left != h.data_bytes)
            return rtx_err_set(err, RTX_EFORMAT, "%s data: %" PRIu64 " bytes, %s needs %zu bytes",
                               left < h.data_bytes ? "truncated" : "unexpected", left, shape,
                               h.data_bytes);
    }
    bool transpose = h.fortran && h.ndim > 1 && h.data_bytes > 0;
    uint8_t *tmp = NULL;
    if (transpose && !(tmp = rtx_malloc(h.data_bytes)))
        return rtx_err_set(err, RTX_ENOMEM, "out of memory (%zu bytes)", h.data_bytes);
    struct rtx_tensor *t = NULL;
    rc = rtx_tensor_new(h.dtype, h.ndim, h.dims, &t, err);
    if (rc == 0) rc = read_full(fd, transpose ? tmp : rtx_tensor_data(t), h.data_bytes, err);
    if (rc == RTX_EFORMAT) rtx_err_set(err, rc, "truncated data: %s", shape);
    if (rc == 0) {
        uint8_t extra;
        ssize_t r;
        do
            r = read(fd, &extra, 1);
        while (r < 0 && errno == EINTR);
        if (r > 0) rc = rtx_err_set(err, RTX_EFORMAT, "unexpected data after %s", shape);
    }
    if (rc == 0 && transpose) fortran_to_c(&h, tmp, rtx_tensor_data(t));
    if (rc == 0) normalize_bools(&h, rtx_tensor_data(t));
    rtx_free(tmp);
    if (rc < 0) {
        rtx_tensor_unref(t);
        return rc;
    }
    *out = t;
    return 0;
}

int rtx_npy_load(const char *path, struct rtx_tensor **out, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!path || !out) return rtx_err_set(err, RTX_EINVAL, "npy: invalid argument");
    *out = NULL;
    int fd;
    do
        fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int e = errno;
        return rtx_err_set(err, -e, "%s: %s", path, strerror(e));
    }
    int rc = load_fd(fd, out, err);
    close(fd);
    if (rc < 0) rtx_err_prefix(err, "%s", path);
    return rc;
}

static int write_full(int fd, const void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const uint8_t *)buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        done += (size_t)w;
    }
    return 0;
}

/* Writes the header and the (contiguous) tensor's data. Returns 0 or -errno / RTX_ENOMEM. */
static int save_fd(int fd, const struct rtx_tensor *t) {
    char hdr[384]; /* the longest header (8 dims of 19 digits) is about 250 bytes */
    memcpy(hdr, NPY_MAGIC, NPY_MAGIC_LEN);
    hdr[6] = 1; /* version 1.0 */
    hdr[7] = 0;
    int n = 10;
    n += snprintf(hdr + n, sizeof hdr - (size_t)n,
                  "{'descr': '%s', 'fortran_order': False, 'shape': (", dtype_to_descr(t->dtype));
    for (int i = 0; i < t->ndim; i++)
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%" PRId64, i ? ", " : "", t->dims[i]);
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s), }", t->ndim == 1 ? "," : "");
    /* Pad with spaces to a multiple of 64 including the final newline, as NumPy does. */
    while ((n + 1) % 64 != 0)
        hdr[n++] = ' ';
    hdr[n++] = '\n';
    uint16_t dict_len = (uint16_t)(n - 10);
    hdr[8] = (char)(dict_len & 0xff);
    hdr[9] = (char)(dict_len >> 8);
    int rc = write_full(fd, hdr, (size_t)n);
    if (rc < 0) return rc;

    const uint8_t *data = rtx_tensor_data(t);
    size_t numel = (size_t)rtx_tensor_numel(t);
    if (t->dtype != RTX_BF16) return write_full(fd, data, rtx_tensor_nbytes(t));
    float *chunk = rtx_malloc(NPY_CHUNK_ELEMS * sizeof *chunk);
    if (!chunk) return RTX_ENOMEM;
    const uint16_t *src = (const uint16_t *)data;
    for (size_t i = 0; i < numel && rc == 0; i += NPY_CHUNK_ELEMS) {
        size_t m = numel - i < NPY_CHUNK_ELEMS ? numel - i : NPY_CHUNK_ELEMS;
        for (size_t j = 0; j < m; j++)
            chunk[j] = rtx_bf16_to_f32(src[i + j]);
        rc = write_full(fd, chunk, m * sizeof *chunk);
    }
    rtx_free(chunk);
    return rc;
}

int rtx_npy_save(const char *path, const struct rtx_tensor *t, struct rtx_err *err) {
    struct rtx_err local;
    if (!err) err = &local;
    if (!path || !t) return rtx_err_set(err, RTX_EINVAL, "npy: invalid argument");
    if (!dtype_to_descr(t->dtype) || t->ndim < 0 || t->ndim > RTX_MAX_DIMS)
        return rtx_err_set(err, RTX_EINVAL, "%s: invalid tensor", path);
    struct rtx_tensor *c = NULL;
    int rc = rtx_tensor_contiguous(t, &c, err);
    if (rc < 0) return rtx_err_prefix(err, "%s", path);
    int fd;
    do
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int e = errno;
        rtx_tensor_unref(c);
        return rtx_err_set(err, -e, "%s: %s", path, strerror(e));
    }
    rc = save_fd(fd, c);
    if (close(fd) != 0 && rc == 0) rc = -errno;
    rtx_tensor_unref(c);
    if (rc < 0) {
        unlink(path);
        if (rc == RTX_ENOMEM) return rtx_err_set(err, rc, "%s: out of memory", path);
        return rtx_err_set(err, rc, "%s: write: %s", path, strerror(-rc));
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Output files
 * ---------------------------------------------------------------------------------------- */

int rtx_make_dirs(const char *path) {
    size_t n = strlen(path);
    char *p = rtx_malloc(n + 1);
    if (!p) return -ENOMEM;
    memcpy(p, path, n + 1);
    int rc = 0;
    for (size_t i = 1; i <= n && rc == 0; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        struct stat sb;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            rc = -errno;
        else if (stat(p, &sb) != 0)
            rc = -errno;
        else if (!S_ISDIR(sb.st_mode))
            rc = -ENOTDIR;
        p[i] = c;
    }
    rtx_free(p);
    return rc;
}

char *rtx_npy_output_path(const char *dir, const char *name, char *const *taken, int n_taken) {
    size_t len = strlen(dir) + strlen(name) + 32;
    char *path = rtx_malloc(len);
    if (!path) return NULL;
    for (int suffix = 1;; suffix++) {
        int w = snprintf(path, len, "%s/", dir);
        size_t base = (size_t)w;
        for (const char *s = name; *s; s++)
            path[w++] = (*s == '/' || *s == ':') ? '_' : *s;
        path[w] = '\0';
        if (strcmp(path + base, ".") == 0 || strcmp(path + base, "..") == 0) path[base] = '_';
        if (suffix > 1) w += snprintf(path + w, len - (size_t)w, "_%d", suffix);
        snprintf(path + w, len - (size_t)w, ".npy");
        bool clash = false;
        for (int i = 0; i < n_taken; i++)
            if (taken[i] && strcmp(taken[i], path) == 0) clash = true;
        if (!clash) return path;
    }
}
