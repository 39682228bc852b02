/*
 * test-tokenizer-util.h - what the tokenizer's unit tests (test-tokenizer.c,
 * test-tokenizer-sp.c) share: parsing a tokenizer.json built as a jansson document, and
 * asserting that one is refused with a given code and message.
 */
#ifndef RTX_TEST_TOKENIZER_UTIL_H
#define RTX_TEST_TOKENIZER_UTIL_H

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"

/* Parses doc (taking it); returns the code, with err filled and *out set on success. */
static inline int tok_parse_doc(json_t *doc, struct rtx_tokenizer **out, struct rtx_err *err) {
    char *s = json_dumps(doc, 0);
    json_decref(doc);
    ck_assert_ptr_nonnull(s);
    int rc = rtx_tokenizer_parse(s, strlen(s), "tokenizer.json", out, err);
    free(s);
    return rc;
}

/* Asserts that doc (taken) is refused with code and a message containing want. */
static inline void tok_assert_refused(json_t *doc, int code, const char *want) {
    struct rtx_tokenizer *tok = NULL;
    struct rtx_err err = {0};
    int rc = tok_parse_doc(doc, &tok, &err);
    ck_assert_msg(rc == code, "code %d, want %d: %s", rc, code, err.msg);
    ck_assert_msg(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
    ck_assert_ptr_null(tok);
}

#endif /* RTX_TEST_TOKENIZER_UTIL_H */
