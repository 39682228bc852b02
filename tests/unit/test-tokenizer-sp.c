/*
 * test-tokenizer-sp.c - SentencePiece-style BPE with byte fallback in tokenizer.json
 * (formats/tokenizer*.c): a tiny Llama-2-like tokenizer built here (<unk> <s> </s>, the 256
 * "<0xNN>" byte tokens, a few characters and merges), its normalizer / Metaspace layouts,
 * byte fallback and <unk>, the added tokens' lstrip / rstrip / single_word, the BOS the
 * post-processor adds, decoding with the leading space dropped, the streaming decoder holding
 * byte runs, and the refusal of malformed and unsupported variants by JSON path. Parity with
 * Hugging Face's tokenizers on trained files is tests/interop/test_tokenizer.py.
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "tests/unit/test-tokenizer-util.h"

#define SP "\xe2\x96\x81" /* "▁" */
#define B(x) (3 + (x))    /* the id of "<0xNN>" */

enum { UNK, BOS, EOS, SPACE = 259, H, E, L, O, HE, LL, SP_HE, TOOL = 300, LO };

/* The tiny tokenizer, Llama 2's layout: normalizer Prepend + Replace, no pre-tokenizer,
 * decoder Replace + ByteFallback + Fuse + Strip, post-processor "<s> $A". */
static json_t *make_doc(void) {
    json_t *vocab = json_pack("{s:i, s:i, s:i}", "<unk>", UNK, "<s>", BOS, "</s>", EOS);
    for (int b = 0; b < 256; b++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", b);
        json_object_set_new(vocab, t, json_integer(B(b)));
    }
    static const char *const toks[] = {SP, "h", "e", "l", "o", "he", "ll", SP "he"};
    for (int i = 0; i < 8; i++)
        json_object_set_new(vocab, toks[i], json_integer(SPACE + i));
    json_t *doc = json_pack(
        "{s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}, {s:i, s:s, s:b, s:b, s:b, s:b, s:b}, "
        "{s:i, s:s, s:b, s:b, s:b, s:b, s:b}, {s:i, s:s, s:b, s:b, s:b, s:b, s:b}, "
        "{s:i, s:s, s:b, s:b, s:b, s:b, s:b}], "
        "s:{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}, s:n, "
        "s:{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}, "
        "s:{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:{s:{s:s, s:[i], s:[s]}}}, "
        "s:{s:s, s:o, s:[s, s, s], s:b, s:b, s:s}}",
        "added_tokens", "id", UNK, "content", "<unk>", "single_word", 0, "lstrip", 0, "rstrip", 0,
        "normalized", 0, "special", 1, "id", BOS, "content", "<s>", "single_word", 0, "lstrip", 0,
        "rstrip", 0, "normalized", 0, "special", 1, "id", EOS, "content", "</s>", "single_word", 0,
        "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1, "id", TOOL, "content", "<t>",
        "single_word", 0, "lstrip", 1, "rstrip", 1, "normalized", 0, "special", 0, "id", LO,
        "content", "lo", "single_word", 1, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 0,
        "normalizer", "type", "Sequence", "normalizers", "type", "Prepend", "prepend", SP, "type",
        "Replace", "pattern", "String", " ", "content", SP, "pre_tokenizer", "decoder", "type",
        "Sequence", "decoders", "type", "Replace", "pattern", "String", SP, "content", " ", "type",
        "ByteFallback", "type", "Fuse", "type", "Strip", "content", " ", "start", 1, "stop", 0,
        "post_processor", "type", "TemplateProcessing", "single", "SpecialToken", "id", "<s>",
        "type_id", 0, "Sequence", "id", "A", "type_id", 0, "special_tokens", "<s>", "id", "<s>",
        "ids", BOS, "tokens", "<s>", "model", "type", "BPE", "vocab", vocab, "merges", "h e",
        "l l", SP " he", "byte_fallback", 1, "fuse_unk", 1, "unk_token", "<unk>");
    ck_assert_ptr_nonnull(doc);
    return doc;
}

/* The Metaspace layout: no normalizer, pre-tokenizer Metaspace (always, split), decoder
 * ByteFallback + Metaspace. */
static json_t *make_metaspace_doc(void) {
    json_t *d = make_doc();
    json_object_set_new(d, "normalizer", json_null());
    json_object_set_new(d, "pre_tokenizer",
                        json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement", SP,
                                  "prepend_scheme", "always", "split", 1));
    json_object_set_new(d, "decoder",
                        json_pack("{s:s, s:[{s:s}, {s:s, s:s, s:s}]}", "type", "Sequence",
                                  "decoders", "type", "ByteFallback", "type", "Metaspace",
                                  "replacement", SP, "prepend_scheme", "always"));
    return d;
}

static struct rtx_tokenizer *load(json_t *doc) {
    struct rtx_tokenizer *tok = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(tok_parse_doc(doc, &tok, &err) == 0, "%s", err.msg);
    return tok;
}

/* Asserts that text encodes to want (n ids). */
static void assert_encodes(const struct rtx_tokenizer *tok, const char *text, const int32_t *want,
                           size_t n) {
    int32_t *ids = NULL;
    size_t got = 0;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_tokenizer_encode(tok, text, strlen(text), true, &ids, &got, &err) == 0, "%s",
                  err.msg);
    ck_assert_msg(got == n, "'%s': %zu ids, want %zu", text, got, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(ids[i] == want[i], "'%s': ids[%zu] = %d, want %d", text, i, ids[i], want[i]);
    rtx_free(ids);
}

/* Asserts that ids decode to want. */
static void assert_decodes(const struct rtx_tokenizer *tok, const int32_t *ids, size_t n,
                           bool skip, const char *want) {
    char *text = NULL;
    size_t len;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_tokenizer_decode(tok, ids, n, skip, &text, &len, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(len, strlen(want));
    ck_assert_str_eq(text, want);
    rtx_free(text);
}

#define ENC(tok, text, ...)                                                                       \
    do {                                                                                          \
        const int32_t w_[] = {__VA_ARGS__};                                                       \
        assert_encodes(tok, text, w_, sizeof w_ / sizeof *w_);                                    \
    } while (0)
#define DEC(tok, skip, want, ...)                                                                 \
    do {                                                                                          \
        const int32_t i_[] = {__VA_ARGS__};                                                       \
        assert_decodes(tok, i_, sizeof i_ / sizeof *i_, skip, want);                              \
    } while (0)

START_TEST(sp_encodes_with_byte_fallback) {
    struct rtx_tokenizer *tok = load(make_doc());
    ENC(tok, "hello", SP_HE, LL, O);
    ENC(tok, "hello hello", SP_HE, LL, O, SP_HE, LL, O);
    ENC(tok, " he", SPACE, SP_HE);                       /* Prepend, then the space */
    ENC(tok, "h\xc3\xa9", SPACE, H, B(0xC3), B(0xA9));   /* "é" is not in the vocabulary */
    ENC(tok, "<s>hello", BOS, SP_HE, LL, O);             /* special, not normalized */
    ENC(tok, "he<s>he", SP_HE, BOS, SP_HE);              /* each stretch gets its "▁" */
    ENC(tok, "he <t>  lo", SP_HE, TOOL, LO);             /* lstrip, rstrip take the spaces */
    ENC(tok, "he <t> hlo", SP_HE, TOOL, SPACE, H, L, O); /* "lo" inside a word: not matched */
    ENC(tok, "he lo", SP_HE, SPACE, LO);                 /* "lo" stands alone */
    const int32_t *pre;
    ck_assert_int_eq(rtx_tokenizer_special_prefix(tok, &pre), 1);
    ck_assert_int_eq(pre[0], BOS);
    ck_assert_int_eq(rtx_tokenizer_special_suffix(tok, NULL), 0);
    rtx_tokenizer_free(tok);
}
END_TEST

/* Byte tokens missing from the vocabulary: a character that cannot fall back is <unk>, fused
 * with the next one under fuse_unk. */
START_TEST(sp_unknown_characters) {
    json_t *d = make_doc();
    json_object_del(json_object_get(json_object_get(d, "model"), "vocab"), "<0xC3>");
    struct rtx_tokenizer *tok = load(d);
    ENC(tok, "\xc3\xa9\xc3\xa9h", SPACE, UNK, H);
    rtx_tokenizer_free(tok);
    d = make_doc();
    json_object_del(json_object_get(json_object_get(d, "model"), "vocab"), "<0xC3>");
    json_object_set_new(json_object_get(d, "model"), "fuse_unk", json_false());
    tok = load(d);
    ENC(tok, "\xc3\xa9\xc3\xa9h", SPACE, UNK, UNK, H);
    rtx_tokenizer_free(tok);
}
END_TEST

START_TEST(sp_decodes_as_hugging_face) {
    struct rtx_tokenizer *tok = load(make_doc());
    DEC(tok, false, "hello", SP_HE, LL, O);          /* the first space is stripped */
    DEC(tok, false, "<s> hello", BOS, SP_HE, LL, O); /* ... unless a token is before */
    DEC(tok, true, "hello", BOS, SP_HE, LL, O);      /* a skipped one does not count */
    DEC(tok, false, " \xe4\xb8\xad", SPACE, SPACE, B(0xE4), B(0xB8), B(0xAD));
    DEC(tok, false, "\xef\xbf\xbd\xef\xbf\xbdh", B(0xE4), B(0x41), H); /* one U+FFFD a byte */
    DEC(tok, false, "\xef\xbf\xbd A", B(0xE4), SPACE, B(0x41));        /* an incomplete run */
    rtx_tokenizer_free(tok);
    tok = load(make_metaspace_doc());
    ENC(tok, "hello hello", SP_HE, LL, O, SP_HE, LL, O);
    DEC(tok, false, "hello hello", SP_HE, LL, O, SP_HE, LL, O);
    DEC(tok, false, " he", SPACE, SP_HE); /* Metaspace drops the "▁"s of the first token */
    DEC(tok, false, "he", SP_HE);
    rtx_tokenizer_free(tok);
}
END_TEST

/* The stream: nothing while a byte run may still turn invalid; an invalid run at once. */
START_TEST(sp_stream_holds_byte_runs) {
    struct rtx_tokenizer *tok = load(make_doc());
    struct rtx_tokenizer_stream *s = rtx_tokenizer_stream_new(tok, false);
    ck_assert_ptr_nonnull(s);
    const int32_t ids[] = {SPACE, B(0xE4), B(0xB8), B(0xAD), H, B(0xE4), B(0x41), B(0x41), H};
    const char *const want[] = {
        "", "", "", "", "\xe4\xb8\xadh", "", "\xef\xbf\xbd\xef\xbf\xbd", "\xef\xbf\xbd", "h"};
    struct rtx_err err = {0};
    for (int i = 0; i < 9; i++) {
        const char *piece;
        size_t len;
        ck_assert_int_eq(rtx_tokenizer_stream_feed(s, ids[i], &piece, &len, &err), 0);
        ck_assert_msg(len == strlen(want[i]) && !memcmp(piece, want[i], len), "id %d: '%.*s'", i,
                      (int)len, piece);
    }
    /* a valid run at the end comes out at the flush; an incomplete one as U+FFFDs */
    const char *piece;
    size_t len;
    ck_assert_int_eq(rtx_tokenizer_stream_feed(s, B(0x41), &piece, &len, &err), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(rtx_tokenizer_stream_flush(s, &piece, &len, &err), 0);
    ck_assert_uint_eq(len, 1);
    ck_assert_int_eq(rtx_tokenizer_stream_feed(s, SP_HE, &piece, &len, &err), 0);
    ck_assert_str_eq(piece, "he"); /* a new text after the flush: its first space dropped */
    ck_assert_int_eq(rtx_tokenizer_stream_feed(s, B(0xE4), &piece, &len, &err), 0);
    ck_assert_int_eq(rtx_tokenizer_stream_feed(s, B(0xB8), &piece, &len, &err), 0);
    ck_assert_int_eq(rtx_tokenizer_stream_flush(s, &piece, &len, &err), 0);
    ck_assert_str_eq(piece, "\xef\xbf\xbd\xef\xbf\xbd");
    rtx_tokenizer_stream_free(s);
    rtx_tokenizer_free(tok);
}
END_TEST

/* Sets doc[key] (taking v) and asserts the refusal. */
static void refused_with(const char *key, json_t *v, int code, const char *want) {
    json_t *d = make_doc();
    json_object_set_new(d, key, v);
    tok_assert_refused(d, code, want);
}

START_TEST(sp_refuses_malformed_and_unsupported) {
    refused_with("normalizer",
                 json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "Regex", " +",
                           "content", SP),
                 RTX_EUNSUPPORTED, "normalizer.pattern.Regex is not supported");
    refused_with("normalizer",
                 json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", "",
                           "content", SP),
                 RTX_EFORMAT, "normalizer: expected a non-empty pattern.String");
    refused_with("normalizer",
                 json_pack("{s:s, s:[{s:s, s:i}]}", "type", "Sequence", "normalizers", "type",
                           "Prepend", "prepend", 3),
                 RTX_EFORMAT, "normalizer.normalizers[0].prepend: expected a string");
    refused_with(
        "normalizer",
        json_pack("{s:s, s:[{s:s}]}", "type", "Sequence", "normalizers", "type", "Lowercase"),
        RTX_EUNSUPPORTED, "normalizer.normalizers[0].type 'Lowercase' is not supported");
    refused_with("pre_tokenizer",
                 json_pack("{s:s, s:s, s:s}", "type", "Metaspace", "replacement", "ab",
                           "prepend_scheme", "first"),
                 RTX_EFORMAT, "pre_tokenizer.replacement: expected one character");
    refused_with("pre_tokenizer",
                 json_pack("{s:s, s:s, s:s}", "type", "Metaspace", "replacement", SP,
                           "prepend_scheme", "sometimes"),
                 RTX_EFORMAT, "pre_tokenizer.prepend_scheme: expected");
    refused_with("decoder", json_null(), RTX_EUNSUPPORTED, "decoder: null is not supported");
    refused_with("decoder",
                 json_pack("{s:s, s:[{s:s}, {s:s}]}", "type", "Sequence", "decoders", "type",
                           "Fuse", "type", "ByteFallback"),
                 RTX_EUNSUPPORTED,
                 "decoder.decoders[1]: ByteFallback after Fuse or ByteLevel is not supported");
    refused_with(
        "decoder",
        json_pack("{s:s, s:s, s:i, s:i}", "type", "Strip", "content", "", "start", 1, "stop", 0),
        RTX_EFORMAT, "decoder: expected a one-character content");
    refused_with(
        "decoder",
        json_pack("{s:s, s:s, s:i, s:i}", "type", "Strip", "content", " ", "start", -1, "stop", 0),
        RTX_EFORMAT, "decoder: expected a one-character content");
    refused_with("post_processor",
                 json_pack("{s:s, s:[{s:{s:s}}, {s:{s:s}}], s:{}}", "type", "TemplateProcessing",
                           "single", "Sequence", "id", "A", "Sequence", "id", "B",
                           "special_tokens"),
                 RTX_EUNSUPPORTED, "post_processor.single[1]: only one Sequence A");
    refused_with("post_processor",
                 json_pack("{s:s, s:[{s:{s:s}}, {s:{s:s}}], s:{}}", "type", "TemplateProcessing",
                           "single", "SpecialToken", "id", "<s>", "Sequence", "id", "A",
                           "special_tokens"),
                 RTX_EFORMAT, "post_processor.single[0]: special token '<s>' has no ids");
    refused_with("post_processor",
                 json_pack("{s:s, s:[{s:{s:s}}, {s:{s:s}}], s:{s:{s:[i]}}}", "type",
                           "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "Sequence",
                           "id", "A", "special_tokens", "<s>", "ids", 99999),
                 RTX_EFORMAT, "post_processor.special_tokens['<s>'].ids[0]: not a token id");
    refused_with("post_processor", json_pack("{s:s}", "type", "BertProcessing"), RTX_EUNSUPPORTED,
                 "post_processor.type 'BertProcessing' is not supported");

    /* an added token whose id the vocabulary gives to another token */
    json_t *d = make_doc();
    json_object_set_new(json_array_get(json_object_get(d, "added_tokens"), 3), "id",
                        json_integer(H));
    tok_assert_refused(d, RTX_EFORMAT, "added_tokens[3]: id 260 is the vocabulary's token 'h'");
    /* a normalized added token that the normalizer makes empty */
    d = make_doc();
    json_object_set_new(d, "normalizer",
                        json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String",
                                  "<t>", "content", ""));
    json_object_set_new(json_array_get(json_object_get(d, "added_tokens"), 3), "normalized",
                        json_true());
    tok_assert_refused(d, RTX_EUNSUPPORTED,
                       "added_tokens[3]: the normalizer makes its content empty");
}
END_TEST

/* Every allocation failure while loading, encoding and decoding is RTX_ENOMEM and leaks
 * nothing (the ASan build checks the leaks). */
START_TEST(sp_out_of_memory) {
    json_t *d = make_doc();
    char *s = json_dumps(d, 0);
    json_decref(d);
    int rc = -1;
    const char *text = "he <t> lo h\xc3\xa9llo <s>";
    for (long n = 1; n < 400 && rc != 0; n++) {
        struct rtx_tokenizer *tok = NULL;
        struct rtx_err err = {0};
        int32_t *ids = NULL;
        char *out = NULL;
        size_t n_ids, len;
        rtx_alloc_fail_after(n);
        rc = rtx_tokenizer_parse(s, strlen(s), "tokenizer.json", &tok, &err);
        if (!rc) rc = rtx_tokenizer_encode(tok, text, strlen(text), true, &ids, &n_ids, &err);
        if (!rc) rc = rtx_tokenizer_decode(tok, ids, n_ids, false, &out, &len, &err);
        rtx_alloc_fail_after(0);
        if (rc) ck_assert_msg(rc == RTX_ENOMEM, "n %ld: %d %s", n, rc, err.msg);
        rtx_free(out);
        rtx_free(ids);
        rtx_tokenizer_free(tok);
    }
    ck_assert_int_eq(rc, 0);
    free(s);
}
END_TEST

Suite *rtx_tokenizer_sp_suite(void) {
    Suite *s = suite_create("tokenizer_sp");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, sp_encodes_with_byte_fallback);
    tcase_add_test(tc, sp_unknown_characters);
    tcase_add_test(tc, sp_decodes_as_hugging_face);
    tcase_add_test(tc, sp_stream_holds_byte_runs);
    tcase_add_test(tc, sp_refuses_malformed_and_unsupported);
    tcase_add_test(tc, sp_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
