/*
 * formats.h - model file formats that rtxd reads, independent of serving: today safetensors
 * weight files (formats/safetensors.c: the header parsed and checked, the file mapped
 * read-only, tensors over the mapped bytes). ONNX import and Hugging Face checkpoints belong
 * here too. The serving core (serving/) loads a model version's weights through this header;
 * it includes only runtime/.
 */
#ifndef RTX_FORMATS_H
#define RTX_FORMATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"

/* ------------------------------------------------------------------------------------------
 * Safetensors (safetensors.c)
 * ---------------------------------------------------------------------------------------- */

#define RTX_SAFETENSORS_MAX_HEADER ((uint64_t)100 << 20) /* bytes: largest JSON header */

struct rtx_safetensors_entry {
    char *name;
    enum rtx_dtype dtype;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    uint64_t begin, end; /* bytes, relative to the data section */
};

/* A safetensors file mapped read-only into memory; reference counted (the owner holds one,
 * every tensor made by rtx_safetensors_tensor holds one), unmapped with the last reference. */
struct rtx_safetensors {
    atomic_int refs;
    char *path;
    void *map;             /* the whole file; NULL for an empty mapping */
    size_t map_bytes;      /* bytes */
    const uint8_t *data;   /* the data section (after the 8-byte length and the header) */
    uint64_t data_bytes;   /* bytes */
    int n;
    struct rtx_safetensors_entry *entries; /* sorted by begin offset */
};

/* Parses a safetensors file held in memory (data, len bytes): the 8-byte little-endian header
 * length, the JSON header (an object of tensors {dtype, shape, data_offsets} and an optional
 * "__metadata__" object of strings) and the data section. Checks every dtype (F32, F16, BF16,
 * I8, I32, I64, U8, BOOL), shape, offset range, size (numel * dtype size), alignment (each
 * tensor starts at a multiple of its element size from the start of the file), overlap and
 * holes (the tensors must tile the data section exactly), and duplicate names. `what` names
 * the file in messages. RTX_EFORMAT for a malformed file (the message says the problem),
 * RTX_EUNSUPPORTED for a dtype rtxd lacks, RTX_ENOMEM. On success *entries (rtx_malloc'ed,
 * sorted by offset; free with rtx_safetensors_entries_free) and *n are set, and *data_off is
 * the file offset of the data section. */
int rtx_safetensors_parse(const void *data, size_t len, const char *what,
                          struct rtx_safetensors_entry **entries, int *n, uint64_t *data_off,
                          struct rtx_err *err);
void rtx_safetensors_entries_free(struct rtx_safetensors_entry *e, int n);

/* Opens and maps path and parses it (rtx_safetensors_parse). RTX_EIO naming the file when it
 * cannot be opened or mapped. *out holds one reference. */
int rtx_safetensors_open(const char *path, struct rtx_safetensors **out, struct rtx_err *err);
void rtx_safetensors_unref(struct rtx_safetensors *st); /* NULL: no-op */
/* Index of the tensor with this name, or -1. */
int rtx_safetensors_find(const struct rtx_safetensors *st, const char *name);
/* A tensor over the mapped bytes of entry i (no copy; it holds a reference to st). */
int rtx_safetensors_tensor(struct rtx_safetensors *st, int i, struct rtx_tensor **out,
                           struct rtx_err *err);

#endif /* RTX_FORMATS_H */
