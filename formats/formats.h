/*
 * formats.h - model file formats that rtxd reads, independent of serving: today safetensors
 * weight files (formats/safetensors.c: the header parsed and checked, the file mapped
 * read-only, tensors over the mapped bytes), Hugging Face tokenizer.json tokenizers
 * (formats/tokenizer*.c: byte-level BPE and SentencePiece-style BPE with byte fallback) and
 * chat templates (formats/chat-template*.c: the Jinja subset that tokenizer_config.json's
 * chat_template uses). ONNX import and Hugging Face checkpoints belong here too. The serving core
 * (serving/) loads a model version's weights through this header; it includes only runtime/.
 */
#ifndef RTX_FORMATS_H
#define RTX_FORMATS_H

#include <stdatomic.h>
#include <stdbool.h>
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
    void *map;           /* the whole file; NULL for an empty mapping */
    size_t map_bytes;    /* bytes */
    const uint8_t *data; /* the data section (after the 8-byte length and the header) */
    uint64_t data_bytes; /* bytes */
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

/* ------------------------------------------------------------------------------------------
 * Tokenizers (tokenizer*.c): Hugging Face tokenizer.json, byte-level BPE (GPT-2, Llama 3,
 * Qwen2) and SentencePiece-style BPE with byte fallback (Llama 2, Mistral, TinyLlama).
 * docs/tokenizer.md lists what is supported and what is refused.
 * ---------------------------------------------------------------------------------------- */

/* A loaded tokenizer; immutable after loading, so one may be used from several threads. */
struct rtx_tokenizer;

/* Parses a tokenizer.json held in memory (json, len bytes); `what` names the file in
 * messages. RTX_EFORMAT for malformed JSON or a malformed field, RTX_EUNSUPPORTED for a type or
 * option rtxd does not implement; either message names the JSON path, e.g.
 * "tokenizer.json: pre_tokenizer.pretokenizers[0].type 'Digits' is not supported".
 * RTX_ENOMEM. *out is set on success only. */
int rtx_tokenizer_parse(const char *json, size_t len, const char *what, struct rtx_tokenizer **out,
                        struct rtx_err *err);
/* Reads and parses the file at path (rtx_tokenizer_parse); RTX_EIO naming it when unreadable. */
int rtx_tokenizer_load(const char *path, struct rtx_tokenizer **out, struct rtx_err *err);
void rtx_tokenizer_free(struct rtx_tokenizer *tok); /* NULL: no-op */

/* Number of ids: the largest id of the vocabulary or the added tokens, plus one. */
size_t rtx_tokenizer_vocab_size(const struct rtx_tokenizer *tok);
/* The id of a token as the vocabulary spells it (byte-level: "Ġthe") or of an added token's
 * content; -1 when there is none. */
int32_t rtx_tokenizer_token_id(const struct rtx_tokenizer *tok, const char *token);
/* The token of an id (NUL-terminated, owned by tok; an added token whose normalized flag is
 * set: its content through the normalizer, as Hugging Face decodes it); NULL for an unknown
 * id. */
const char *rtx_tokenizer_id_token(const struct rtx_tokenizer *tok, int32_t id);
/* Whether id is an added token flagged special. */
bool rtx_tokenizer_is_special(const struct rtx_tokenizer *tok, int32_t id);

/* Encodes len bytes of UTF-8 text into ids, as Hugging Face's encode(text,
 * add_special_tokens=False) does: added tokens are found first (those with normalized false,
 * then, in the normalized rest, the others; leftmost-longest, with their single_word, lstrip
 * and rstrip rules), the rest is pre-tokenized and merged. parse_special false treats special
 * added tokens as plain text (non-special added tokens are still found). The post-processor's
 * tokens (a BOS) are never added: see rtx_tokenizer_special_prefix. RTX_EINVAL naming the byte
 * offset when text is not valid UTF-8; RTX_ENOMEM. *ids comes from rtx_malloc (rtx_free it; NULL
 * when *n_ids is 0). */
int rtx_tokenizer_encode(const struct rtx_tokenizer *tok, const char *text, size_t len,
                         bool parse_special, int32_t **ids, size_t *n_ids, struct rtx_err *err);

/* The ids the post-processor (TemplateProcessing) puts before (prefix) and after (suffix) a
 * single sequence, so that prefix + rtx_tokenizer_encode(...) + suffix is Hugging Face's
 * encode(text, add_special_tokens=True): Llama 2 and Llama 3 put their BOS before. Returns the
 * count (0 when the file has no such post-processor); *ids (when ids is not NULL) points into
 * tok. */
int rtx_tokenizer_special_prefix(const struct rtx_tokenizer *tok, const int32_t **ids);
int rtx_tokenizer_special_suffix(const struct rtx_tokenizer *tok, const int32_t **ids);

/* Decodes n ids into UTF-8 text as Hugging Face's decode does: each id becomes its token
 * (special ones left out when skip_special) and the tokens go through the file's decoder
 * steps (ByteLevel: byte-level characters back to bytes, invalid UTF-8 becoming U+FFFD as
 * Rust's from_utf8_lossy does; ByteFallback: runs of "<0xNN>" tokens to their text, or one
 * U+FFFD per byte when a run is not valid UTF-8; Replace, Fuse, Strip, Metaspace, which drop
 * the leading "▁" of the first token). RTX_EINVAL naming the
 * first unknown id; RTX_ENOMEM. *text (rtx_malloc'ed, NUL-terminated, *len bytes before the
 * NUL) is rtx_free'd by the caller. */
int rtx_tokenizer_decode(const struct rtx_tokenizer *tok, const int32_t *ids, size_t n,
                         bool skip_special, char **text, size_t *len, struct rtx_err *err);

/* A streaming decoder: ids are fed one at a time and only complete UTF-8 characters come
 * out; the concatenation of everything it emits up to a flush is rtx_tokenizer_decode of the
 * ids fed. A partial character at the end is held back until a later id completes it (bytes
 * that can never start or continue a character come out as U+FFFD at once); a run of byte-
 * fallback tokens is held until a token that is not a byte ends it (a later byte could still
 * make the whole run invalid, which decodes to one U+FFFD per byte); a trailing run of what a
 * decoder's Strip removes at the end is held until more text follows. The first token's
 * leading space is dropped as decode drops it: to continue a text instead (a generated reply
 * after its prompt), feed the prompt's ids first and ignore what they give. It refers to tok,
 * which must outlive it. NULL when out of memory. */
struct rtx_tokenizer_stream *rtx_tokenizer_stream_new(const struct rtx_tokenizer *tok,
                                                      bool skip_special);
/* Feeds one id. *text and *len receive the text that became complete (possibly empty); the
 * pointer is owned by the stream and valid until the next call. RTX_EINVAL for an unknown id
 * (the stream is unchanged), RTX_ENOMEM. */
int rtx_tokenizer_stream_feed(struct rtx_tokenizer_stream *s, int32_t id, const char **text,
                              size_t *len, struct rtx_err *err);
/* Ends the stream: a held-back partial sequence comes out as U+FFFD. The stream may be fed
 * again afterwards, as a new one. */
int rtx_tokenizer_stream_flush(struct rtx_tokenizer_stream *s, const char **text, size_t *len,
                               struct rtx_err *err);
void rtx_tokenizer_stream_free(struct rtx_tokenizer_stream *s); /* NULL: no-op */

/* ------------------------------------------------------------------------------------------
 * Chat templates (chat-template*.c): the Jinja subset of tokenizer_config.json's
 * "chat_template", rendered byte for byte as Hugging Face's apply_chat_template renders it
 * with jinja2. docs/chat-templates.md lists the supported syntax and what is refused.
 * ---------------------------------------------------------------------------------------- */

/* A parsed template; immutable after parsing, so one may be rendered from several threads. */
struct rtx_chat_template;

/* Parses a template (src, len bytes of UTF-8); `what` names it in messages ("chat template"
 * when NULL). RTX_EFORMAT for malformed syntax and RTX_EUNSUPPORTED for Jinja that rtxd does
 * not implement (include, call blocks, an unknown filter, test, method or function, ...);
 * either message names the line and the construct, e.g.
 * "chat template: line 3: filter 'wordwrap' is not supported". A template that parses renders
 * as jinja2 renders it, or fails at render; it is never rendered differently. RTX_EINVAL for
 * text that is not UTF-8, RTX_ENOMEM. *out is set on success only. */
int rtx_chat_template_new(const char *src, size_t len, const char *what,
                          struct rtx_chat_template **out, struct rtx_err *err);
void rtx_chat_template_free(struct rtx_chat_template *t); /* NULL: no-op */

struct rtx_chat_message {
    const char *role;    /* "system", "user", "assistant", ... (UTF-8, NUL-terminated) */
    const char *content; /* UTF-8, NUL-terminated */
};

/* Renders the template over n messages (each a dict {role, content} to the template), with
 * add_generation_prompt, bos_token and eos_token (NULL: undefined, as when the tokenizer has
 * none) and tools and documents set to none, as transformers' apply_chat_template passes them.
 * *out (rtx_malloc'ed, NUL-terminated, *out_len bytes before the NUL) is rtx_free'd by the
 * caller. RTX_EINVAL with the template's message when it calls raise_exception, and for
 * errors jinja2 raises too (an attribute of an undefined value, unsupported operand types,
 * division by zero, ...), naming the line; RTX_ELIMIT when the render passes its bounds (16
 * MiB of output, 256 MiB of values, 20 million evaluation steps, 200 nested macro calls);
 * RTX_ENOMEM. */
int rtx_chat_template_render(const struct rtx_chat_template *t,
                             const struct rtx_chat_message *msgs, int n,
                             bool add_generation_prompt, const char *bos_token,
                             const char *eos_token, char **out, size_t *out_len,
                             struct rtx_err *err);

/* ------------------------------------------------------------------------------------------
 * Protobuf text format (pbtext.c): what protobuf's TextFormat writes and Triton's
 * config.pbtxt is, read into a protobuf-c message through its descriptors.
 * ---------------------------------------------------------------------------------------- */

#include <protobuf-c/protobuf-c.h>

#define RTX_PBTEXT_MAX_BYTES ((size_t)16 << 20) /* bytes: largest text */
#define RTX_PBTEXT_MAX_ALLOC ((size_t)64 << 20) /* bytes: most the parsed message may take */
#define RTX_PBTEXT_MAX_DEPTH 64                 /* messages nested in messages, at most */

/* Parses len bytes of protobuf text format into a new message of type desc: fields as
 * `name: value` with scalars of every type (integers decimal, 0x hex or 0-led octal; floats
 * with an optional f suffix, inf, nan; bools as true/false/t/f/True/False/1/0; enums by name
 * or number; strings and bytes in single or double quotes with C escapes, adjacent ones
 * joined), messages as `name { ... }` or `name < ... >` (the colon before them optional),
 * repeated fields given repeatedly or as `name: [a, b]` lists, map fields as their entry
 * messages (a repeated key's last value wins), oneofs (one member at most), `#` comments,
 * `,` or `;` after a field. An unknown field name, a value of the wrong type or out of its
 * type's range, an enum value that does not exist, a non-repeated field given twice, two
 * members of one oneof, a bad escape, a string that is not UTF-8, unbalanced braces,
 * extensions or Any: RTX_EFORMAT "WHAT:LINE:COL: FIELD.PATH: problem" (path with list
 * indices: "input[1].dims[0]"). Bounds: RTX_PBTEXT_MAX_BYTES of text, RTX_PBTEXT_MAX_DEPTH
 * of nesting and RTX_PBTEXT_MAX_ALLOC of message (RTX_ELIMIT); RTX_ENOMEM. what names the
 * text (NULL: "text"). On success *out is the message (free it with rtx_pbtext_free); on
 * error *out is NULL and nothing leaks. */
int rtx_pbtext_parse(const ProtobufCMessageDescriptor *desc, const char *text, size_t len,
                     const char *what, ProtobufCMessage **out, struct rtx_err *err);
/* Frees a message from rtx_pbtext_parse: protobuf_c_message_free_unpacked through an
 * allocator over rtx_malloc/rtx_free. NULL: no-op. */
void rtx_pbtext_free(ProtobufCMessage *m);

/* Called for each field a message sets (rtx_pbtext_visit), with its path ("input[1].dims",
 * list indices for the elements of repeated messages), the message holding it and its
 * descriptor. Returns 0 to walk into a message field's value(s), 1 to skip them, or a
 * negative code that stops the walk and is returned. */
typedef int (*rtx_pbtext_visit_fn)(void *ctx, const char *path, const ProtobufCMessage *m,
                                   const ProtobufCFieldDescriptor *f);
/* Walks the fields m sets, in field-number order, depth first. Set means: a repeated field
 * with elements, the selected member of a oneof, a proto2 optional field that has a value, a
 * message field that points to a message, and a proto3 scalar other than its zero value
 * ("", 0, false, the first enum value: proto3 cannot tell that from absent). Returns 0 or
 * fn's negative code. */
int rtx_pbtext_visit(const ProtobufCMessage *m, rtx_pbtext_visit_fn fn, void *ctx);

#endif /* RTX_FORMATS_H */
