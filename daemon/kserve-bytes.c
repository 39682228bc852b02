/*
 * kserve-bytes.c - KServe BYTES tensors in their binary form (daemon/kserve.h): each element a
 * 4-byte little-endian length and its bytes, as Triton serializes them in raw_input_contents,
 * raw_output_contents, the HTTP binary-data extension and shared memory.
 */
#include <inttypes.h>
#include <string.h>

#include "daemon/kserve.h"

static uint32_t load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int rtx__kserve_bytes_split(const void *buf, size_t len, int64_t count, const char *name,
                            struct rtx_kserve_str *out, struct rtx_err *err) {
    const unsigned char *p = buf;
    size_t at = 0;
    int64_t i = 0;
    while (at < len) {
        if (len - at < 4)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': BYTES element %" PRId64 " at byte %zu: its 4-byte "
                               "length prefix runs past the end (%zu bytes)",
                               name, i, at, len);
        uint32_t n = load_le32(p + at);
        at += 4;
        if (n > len - at)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': BYTES element %" PRId64 " claims %" PRIu32 " bytes, "
                               "but only %zu remain",
                               name, i, n, len - at);
        if (i == count)
            return rtx_err_set(err, RTX_EINVAL,
                               "input '%s': more than the %" PRId64 " BYTES elements its shape "
                               "holds",
                               name, count);
        out[i].data = (const char *)p + at;
        out[i].len = n;
        at += n;
        i++;
    }
    if (i != count)
        return rtx_err_set(err, RTX_EINVAL,
                           "input '%s': %" PRId64 " BYTES elements, but its shape holds %" PRId64,
                           name, i, count);
    return 0;
}

size_t rtx__kserve_bytes_size(const struct rtx_kserve_str *s, int64_t n) {
    size_t total = 0;
    for (int64_t i = 0; i < n; i++)
        total += 4 + s[i].len;
    return total;
}

void rtx__kserve_bytes_write(const struct rtx_kserve_str *s, int64_t n, void *dst) {
    unsigned char *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint32_t len = (uint32_t)s[i].len;
        p[0] = (unsigned char)len;
        p[1] = (unsigned char)(len >> 8);
        p[2] = (unsigned char)(len >> 16);
        p[3] = (unsigned char)(len >> 24);
        if (s[i].len) memcpy(p + 4, s[i].data, s[i].len);
        p += 4 + s[i].len;
    }
}

const char *rtx__kserve_io_datatype(const struct rtx_model_io *io) {
    return io->bytes ? "BYTES" : rtx_kserve_dtype_name(io->dtype);
}
