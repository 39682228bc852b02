/*
 * test-config-util.h - what the configuration's test files (tests/unit/test-config*.c) share:
 * the fixture (a clean environment and a temporary directory holding ini_path), argv built
 * from literals, loads, the listed view and origin of a setting, and --print-config's text.
 * Private to those files.
 *
 * DESIGN: the helpers keep the short names they had as statics of one test-config.c, so the
 * tests moved into their files unchanged; only these files include this header.
 */
#ifndef RTX_TEST_CONFIG_UTIL_H
#define RTX_TEST_CONFIG_UTIL_H

#include <check.h>
#include <stdio.h>

#include "daemon/config.h"

#define MAX_ARGS 32

/* argv built from literals; load() compacts it, so keep the original too */
struct args {
    int argc;
    char *argv[MAX_ARGS + 1];
};

/* The fixture's temporary directory, and the configuration file of a test in it (not written
 * yet). */
extern char tmp_dir[sizeof "/tmp/rtx-test-config-XXXXXX"];
extern char ini_path[256];

/* The checked fixture: setup clears the RTXD_* environment, makes the directory and quiets
 * the log; teardown removes them and restores the log level and the allocator. */
void setup(void);
void teardown(void);

/* Writes text to path, failing the test on error. Inline and file-local: test-serving-util.c
 * exports a write_file of another signature into the same test binary. */
static inline void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* args_of(&a, "--x=1", "--y", "2", NULL): argv with "rtxd" as argv[0]. */
struct args *args_of(struct args *a, ...);
/* rtx_config_load over a's argv. */
int load(struct rtx_config *cfg, struct args *a, struct rtx_err *err);
/* The listed view of one setting. */
struct rtx_setting_view view_of(const struct rtx_config *cfg, const char *name);
/* Fails the test unless setting `name` came from `origin`. */
void assert_origin(const struct rtx_config *cfg, const char *name, const char *origin);
/* Text written by rtx_config_print (free() it). */
char *print_config(const struct rtx_config *cfg);

#endif /* RTX_TEST_CONFIG_UTIL_H */
