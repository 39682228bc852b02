/*
 * test-tokenizer.c - Hugging Face tokenizer.json tokenizers (formats/tokenizer.c): a tiny
 * byte-level BPE built here (the 256 byte characters as ids 0..255 plus three merges), its
 * encoding and decoding, the streaming decoder holding back split UTF-8, and the refusal of
 * malformed and unsupported files, each by the JSON path of what is wrong. Parity with
 * Hugging Face's tokenizers on trained files is tests/interop/test_tokenizer.py.
 */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "tests/unit/test-tokenizer-util.h"

/* GPT-2's bytes_to_unicode, as UTF-8 (the test's own copy: what the file format says). */
static void byte_token(int b, char out[3]) {
    int n = 0, c = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
        c = 256;
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) c++;
    }
    if (c < 0x80) {
        out[n++] = (char)c;
    } else {
        out[n++] = (char)(0xC0 | c >> 6);
        out[n++] = (char)(0x80 | (c & 0x3F));
    }
    out[n] = 0;
}

/* The tiny tokenizer: bytes are ids 0..255, "he" 256, "ll" 257, "hell" 258, and the special
 * token "<|endoftext|>" 259; GPT-2's pre-tokenizer. */
static json_t *make_doc(void) {
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char t[3];
        byte_token(b, t);
        json_object_set_new(vocab, t, json_integer(b));
    }
    json_object_set_new(vocab, "he", json_integer(256));
    json_object_set_new(vocab, "ll", json_integer(257));
    json_object_set_new(vocab, "hell", json_integer(258));
    json_t *doc = json_pack(
        "{s:s, s:n, s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}], s:n, "
        "s:{s:s, s:b, s:b}, s:{s:s}, s:n, "
        "s:{s:s, s:n, s:o, s:[s, [s, s], s], s:b, s:b}}",
        "version", "1.0", "truncation", "added_tokens", "id", 259, "content", "<|endoftext|>",
        "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1, "normalizer",
        "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1, "decoder",
        "type", "ByteLevel", "post_processor", "model", "type", "BPE", "dropout", "vocab", vocab,
        "merges", "h e", "l", "l", "he ll", "byte_fallback", 0, "ignore_merges", 0);
    ck_assert_ptr_nonnull(doc);
    return doc;
}

/* The text of doc (taking it); free() it. */
static char *doc_text(json_t *doc) {
    char *s = json_dumps(doc, 0);
    json_decref(doc);
    ck_assert_ptr_nonnull(s);
    return s;
}

static struct rtx_tokenizer *tiny(void) {
    struct rtx_tokenizer *tok = NULL;
    struct rtx_err err = {0};
    ck_assert_msg(tok_parse_doc(make_doc(), &tok, &err) == 0, "%s", err.msg);
    return tok;
}

START_TEST(tokenizer_encodes_and_decodes) {
    struct rtx_tokenizer *tok = tiny();
    ck_assert_uint_eq(rtx_tokenizer_vocab_size(tok), 260);
    ck_assert_int_eq(rtx_tokenizer_token_id(tok, "hell"), 258);
    ck_assert_int_eq(rtx_tokenizer_token_id(tok, "<|endoftext|>"), 259);
    ck_assert_int_eq(rtx_tokenizer_token_id(tok, "nope"), -1);
    ck_assert_str_eq(rtx_tokenizer_id_token(tok, 258), "hell");
    ck_assert_ptr_null(rtx_tokenizer_id_token(tok, 260));
    ck_assert(rtx_tokenizer_is_special(tok, 259));
    ck_assert(!rtx_tokenizer_is_special(tok, 258));

    const char *text = "hello hello<|endoftext|>";
    int32_t *ids;
    size_t n;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_tokenizer_encode(tok, text, strlen(text), true, &ids, &n, &err), 0);
    const int32_t want[] = {258, 'o', ' ', 258, 'o', 259};
    ck_assert_uint_eq(n, 6);
    ck_assert_mem_eq(ids, want, sizeof want);
    char *out;
    size_t len;
    ck_assert_int_eq(rtx_tokenizer_decode(tok, ids, n, false, &out, &len, &err), 0);
    ck_assert_str_eq(out, text);
    rtx_free(out);
    ck_assert_int_eq(rtx_tokenizer_decode(tok, ids, n, true, &out, &len, &err), 0);
    ck_assert_str_eq(out, "hello hello");
    rtx_free(out);
    rtx_free(ids);

    /* the special token as text */
    ck_assert_int_eq(rtx_tokenizer_encode(tok, text, strlen(text), false, &ids, &n, &err), 0);
    ck_assert_uint_gt(n, 6);
    ck_assert_int_ne(ids[5], 259);
    rtx_free(ids);

    ck_assert_int_eq(rtx_tokenizer_encode(tok, "", 0, true, &ids, &n, &err), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(ids);
    rtx_tokenizer_free(tok);
    rtx_tokenizer_free(NULL);
}
END_TEST

START_TEST(tokenizer_rejects_invalid_utf8_text) {
    struct rtx_tokenizer *tok = tiny();
    static const char *const bad[] = {"ab\xff", "\xc3", "\xe2\x82", "\xed\xa0\x80", "\xc0\xaf"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        struct rtx_err err = {0};
        ck_assert_int_eq(rtx_tokenizer_encode(tok, bad[i], strlen(bad[i]), true, &ids, &n, &err),
                         RTX_EINVAL);
        ck_assert_msg(strstr(err.msg, "not valid UTF-8 at byte"), "%s", err.msg);
    }
    rtx_tokenizer_free(tok);
}
END_TEST

START_TEST(tokenizer_rejects_unknown_ids) {
    struct rtx_tokenizer *tok = tiny();
    const int32_t ids[] = {104, 260};
    char *out = NULL;
    size_t len;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_tokenizer_decode(tok, ids, 2, false, &out, &len, &err), RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "ids[1]: unknown token id 260"), "%s", err.msg);
    const int32_t neg = -1;
    ck_assert_int_eq(rtx_tokenizer_decode(tok, &neg, 1, false, &out, &len, &err), RTX_EINVAL);
    struct rtx_tokenizer_stream *s = rtx_tokenizer_stream_new(tok, false);
    const char *piece;
    ck_assert_int_eq(rtx_tokenizer_stream_feed(s, 99999, &piece, &len, &err), RTX_EINVAL);
    rtx_tokenizer_stream_free(s);
    rtx_tokenizer_free(tok);
}
END_TEST

/* With the NFC normalizer, "e" + U+0301 encodes as the composed "é" (C3 A9); without it, as
 * its three bytes. */
START_TEST(tokenizer_nfc_composes) {
    struct rtx_tokenizer *plain = tiny(), *nfc = NULL;
    json_t *d = make_doc();
    json_object_set_new(d, "normalizer", json_pack("{s:s}", "type", "NFC"));
    struct rtx_err err = {0};
    ck_assert_msg(tok_parse_doc(d, &nfc, &err) == 0, "%s", err.msg);
    const char *text = "e\xcc\x81";
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(rtx_tokenizer_encode(nfc, text, strlen(text), true, &ids, &n, &err), 0);
    const int32_t composed[] = {0xC3, 0xA9};
    ck_assert_uint_eq(n, 2);
    ck_assert_mem_eq(ids, composed, sizeof composed);
    rtx_free(ids);
    ck_assert_int_eq(rtx_tokenizer_encode(plain, text, strlen(text), true, &ids, &n, &err), 0);
    const int32_t decomposed[] = {'e', 0xCC, 0x81};
    ck_assert_uint_eq(n, 3);
    ck_assert_mem_eq(ids, decomposed, sizeof decomposed);
    rtx_free(ids);
    rtx_tokenizer_free(nfc);
    rtx_tokenizer_free(plain);
}
END_TEST

/* "é" (C3 A9) and "👍" (F0 9F 91 8D) are one byte token per byte in the tiny vocabulary: the
 * stream emits nothing until the last byte of each character arrives. */
START_TEST(tokenizer_stream_holds_back_split_utf8) {
    struct rtx_tokenizer *tok = tiny();
    struct rtx_tokenizer_stream *s = rtx_tokenizer_stream_new(tok, false);
    ck_assert_ptr_nonnull(s);
    const int32_t ids[] = {'a', 0xC3, 0xA9, 0xF0, 0x9F, 0x91, 0x8D, 'b'};
    const char *const want[] = {"a", "", "\xc3\xa9", "", "", "", "\xf0\x9f\x91\x8d", "b"};
    struct rtx_err err = {0};
    for (int i = 0; i < 8; i++) {
        const char *piece;
        size_t len;
        ck_assert_int_eq(rtx_tokenizer_stream_feed(s, ids[i], &piece, &len, &err), 0);
        ck_assert_uint_eq(len, strlen(want[i]));
        ck_assert_mem_eq(piece, want[i], len);
    }
    /* a partial character at the end comes out as U+FFFD at the flush */
    const char *piece;
    size_t len;
    ck_assert_int_eq(rtx_tokenizer_stream_feed(s, 0xE2, &piece, &len, &err), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(rtx_tokenizer_stream_flush(s, &piece, &len, &err), 0);
    ck_assert_uint_eq(len, 3);
    ck_assert_mem_eq(piece, "\xef\xbf\xbd", 3);
    /* a byte that can never start a character comes out at once */
    ck_assert_int_eq(rtx_tokenizer_stream_feed(s, 0xFF, &piece, &len, &err), 0);
    ck_assert_uint_eq(len, 3);
    ck_assert_int_eq(rtx_tokenizer_stream_flush(s, &piece, &len, &err), 0);
    ck_assert_uint_eq(len, 0);
    rtx_tokenizer_stream_free(s);
    rtx_tokenizer_free(tok);
}
END_TEST

START_TEST(tokenizer_rejects_malformed_files) {
    struct rtx_tokenizer *tok = NULL;
    struct rtx_err err = {0};
    char *s = doc_text(make_doc());
    ck_assert_int_eq(rtx_tokenizer_parse(s, strlen(s) / 2, "tokenizer.json", &tok, &err),
                     RTX_EFORMAT);
    ck_assert_msg(strstr(err.msg, "tokenizer.json: line 1"), "%s", err.msg);
    ck_assert_int_eq(rtx_tokenizer_parse(s, strlen(s), "tokenizer.json", &tok, &err), 0);
    rtx_tokenizer_free(tok);
    free(s);

    json_t *d = make_doc();
    json_object_del(json_object_get(d, "model"), "vocab");
    tok_assert_refused(d, RTX_EFORMAT, "model.vocab missing");

    d = make_doc();
    json_array_append_new(json_object_get(json_object_get(d, "model"), "merges"),
                          json_string("he zz"));
    tok_assert_refused(d, RTX_EFORMAT, "model.merges[3]: token 'zz' is not in the vocab");

    d = make_doc();
    json_array_append_new(json_object_get(json_object_get(d, "model"), "merges"),
                          json_string("h l"));
    tok_assert_refused(d, RTX_EFORMAT, "model.merges[3]: merged token 'hl' is not in the vocab");

    d = make_doc();
    json_array_append_new(json_object_get(json_object_get(d, "model"), "merges"), json_integer(3));
    tok_assert_refused(d, RTX_EFORMAT, "model.merges[3]: expected a string or a pair");

    d = make_doc();
    json_object_set_new(json_object_get(json_object_get(d, "model"), "vocab"), "x",
                        json_integer(-4));
    tok_assert_refused(d, RTX_EFORMAT, "model.vocab['x']");

    d = make_doc();
    json_object_set_new(json_array_get(json_object_get(d, "added_tokens"), 0), "content",
                        json_string(""));
    tok_assert_refused(d, RTX_EFORMAT, "added_tokens[0]: expected an id and a non-empty content");

    d = make_doc();
    json_object_set_new(json_object_get(d, "pre_tokenizer"), "type", json_string("Split"));
    json_object_set_new(json_object_get(d, "pre_tokenizer"), "behavior", json_string("Isolated"));
    json_object_set_new(json_object_get(d, "pre_tokenizer"), "pattern",
                        json_pack("{s:s}", "Regex", "(unclosed"));
    tok_assert_refused(d, RTX_EFORMAT, "pre_tokenizer.pattern.Regex: at offset");

    ck_assert_int_eq(rtx_tokenizer_load("/nonexistent/tokenizer.json", &tok, &err), RTX_EIO);
    ck_assert_msg(strstr(err.msg, "/nonexistent/tokenizer.json"), "%s", err.msg);
}
END_TEST

START_TEST(tokenizer_refuses_unsupported_by_name) {
    json_t *d = make_doc();
    json_object_set_new(json_object_get(d, "model"), "type", json_string("Unigram"));
    tok_assert_refused(d, RTX_EUNSUPPORTED, "model.type 'Unigram' is not supported");

    d = make_doc();
    json_object_set_new(d, "pre_tokenizer",
                        json_pack("{s:s, s:[{s:s}, {s:s, s:b, s:b}]}", "type", "Sequence",
                                  "pretokenizers", "type", "Whitespace", "type", "ByteLevel",
                                  "add_prefix_space", 0, "use_regex", 1));
    tok_assert_refused(d, RTX_EUNSUPPORTED,
                       "tokenizer.json: pre_tokenizer.pretokenizers[0].type 'Whitespace' is not "
                       "supported");

    d = make_doc();
    json_object_set_new(d, "pre_tokenizer",
                        json_pack("{s:s, s:[{s:s, s:b, s:b}, {s:s, s:{s:s}, s:s}]}", "type",
                                  "Sequence", "pretokenizers", "type", "ByteLevel",
                                  "add_prefix_space", 0, "use_regex", 0, "type", "Split",
                                  "pattern", "Regex", "\\s+", "behavior", "Isolated"));
    tok_assert_refused(d, RTX_EUNSUPPORTED,
                       "pre_tokenizer.pretokenizers[1]: a pre-tokenizer after ByteLevel is not "
                       "supported");

    d = make_doc();
    json_object_set_new(d, "pre_tokenizer",
                        json_pack("{s:s, s:{s:s}, s:s}", "type", "Split", "pattern", "Regex",
                                  "\\s+", "behavior", "Removed"));
    tok_assert_refused(d, RTX_EUNSUPPORTED, "pre_tokenizer.behavior 'Removed' is not supported");

    d = make_doc();
    json_object_set_new(d, "pre_tokenizer",
                        json_pack("{s:s, s:[{s:s, s:[{s:s}]}, {s:s}]}", "type", "Sequence",
                                  "pretokenizers", "type", "Sequence", "pretokenizers", "type",
                                  "ByteLevel", "type", "ByteLevel"));
    tok_assert_refused(d, RTX_EUNSUPPORTED,
                       "pre_tokenizer.pretokenizers[1]: a pre-tokenizer after ByteLevel");

    d = make_doc();
    json_object_set_new(d, "normalizer", json_pack("{s:s}", "type", "NFKC"));
    tok_assert_refused(d, RTX_EUNSUPPORTED, "normalizer.type 'NFKC' is not supported");

    d = make_doc();
    json_object_set_new(d, "decoder", json_pack("{s:s}", "type", "CTC"));
    tok_assert_refused(d, RTX_EUNSUPPORTED, "decoder.type 'CTC' is not supported");

    d = make_doc();
    json_object_set_new(d, "post_processor", json_pack("{s:s}", "type", "BertProcessing"));
    tok_assert_refused(d, RTX_EUNSUPPORTED, "post_processor.type 'BertProcessing'");

    d = make_doc();
    json_object_set_new(d, "padding", json_object());
    tok_assert_refused(d, RTX_EUNSUPPORTED, "padding is not supported");
}
END_TEST

/* Every allocation failure while loading and encoding is RTX_ENOMEM and leaks nothing (the
 * ASan build checks the leaks). */
START_TEST(tokenizer_out_of_memory) {
    char *s = doc_text(make_doc());
    int rc = -1;
    for (long n = 1; n < 200 && rc != 0; n++) {
        struct rtx_tokenizer *tok = NULL;
        struct rtx_err err = {0};
        int32_t *ids = NULL;
        size_t n_ids;
        rtx_alloc_fail_after(n);
        rc = rtx_tokenizer_parse(s, strlen(s), "tokenizer.json", &tok, &err);
        if (!rc)
            rc = rtx_tokenizer_encode(tok, "hello <|endoftext|> world", 25, true, &ids, &n_ids,
                                      &err);
        rtx_alloc_fail_after(0);
        if (rc) ck_assert_msg(rc == RTX_ENOMEM, "n %ld: %d %s", n, rc, err.msg);
        rtx_free(ids);
        rtx_tokenizer_free(tok);
    }
    ck_assert_int_eq(rc, 0);
    free(s);
}
END_TEST

/* One tokenizer, four threads encoding at once: each gets the single-threaded ids. */
struct enc_job {
    const struct rtx_tokenizer *tok;
    const int32_t *want;
    size_t n_want;
    int bad;
};

static void *encode_many(void *arg) {
    struct enc_job *j = arg;
    const char *text = "hello hello <|endoftext|> \xc3\xa9\xf0\x9f\x91\x8d hello";
    for (int i = 0; i < 300; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (rtx_tokenizer_encode(j->tok, text, strlen(text), true, &ids, &n, NULL) ||
            n != j->n_want || memcmp(ids, j->want, n * sizeof *ids))
            j->bad++;
        rtx_free(ids);
    }
    return NULL;
}

START_TEST(tokenizer_encodes_from_several_threads) {
    struct rtx_tokenizer *tok = tiny();
    const char *text = "hello hello <|endoftext|> \xc3\xa9\xf0\x9f\x91\x8d hello";
    int32_t *want;
    size_t n;
    ck_assert_int_eq(rtx_tokenizer_encode(tok, text, strlen(text), true, &want, &n, NULL), 0);
    pthread_t th[4];
    struct enc_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct enc_job){tok, want, n, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, encode_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(jobs[i].bad, 0);
    }
    rtx_free(want);
    rtx_tokenizer_free(tok);
}
END_TEST

Suite *rtx_tokenizer_suite(void) {
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, tokenizer_encodes_and_decodes);
    tcase_add_test(tc, tokenizer_rejects_invalid_utf8_text);
    tcase_add_test(tc, tokenizer_nfc_composes);
    tcase_add_test(tc, tokenizer_rejects_unknown_ids);
    tcase_add_test(tc, tokenizer_stream_holds_back_split_utf8);
    tcase_add_test(tc, tokenizer_rejects_malformed_files);
    tcase_add_test(tc, tokenizer_refuses_unsupported_by_name);
    tcase_add_test(tc, tokenizer_out_of_memory);
    tcase_add_test(tc, tokenizer_encodes_from_several_threads);
    suite_add_tcase(s, tc);
    return s;
}
