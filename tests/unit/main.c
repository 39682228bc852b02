/*
 * main.c - the Check runner for every unit-test suite in test-list.h.
 * Usage: rtx-unit-tests [SUITE...]  (no argument: all suites)
 * RTX_TEST_LOG sets the level of the daemon's log lines during the tests (default: error).
 * The unit tests see no GPU on any host: CUDA_VISIBLE_DEVICES is set to "" before anything
 * can initialise CUDA, so the no-GPU paths they check (device discovery, the job manager's
 * placement) run everywhere instead of depending on the machine; the GPU paths are
 * tests/gpu's (make test-gpu).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "tests/unit/test-list.h"

#define DECLARE_SUITE(name) Suite *rtx_##name##_suite(void);
RTX_TEST_SUITES(DECLARE_SUITE)
#undef DECLARE_SUITE

struct suite_entry {
    const char *name;
    Suite *(*make)(void);
};

static const struct suite_entry suites[] = {
#define SUITE_ENTRY(name) {#name, rtx_##name##_suite},
    RTX_TEST_SUITES(SUITE_ENTRY)
#undef SUITE_ENTRY
};

static int wanted(const char *name, int argc, char **argv) {
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return 1;
    return 0;
}

int main(int argc, char **argv) {
    SRunner *sr = NULL;
    if (setenv("CUDA_VISIBLE_DEVICES", "", 1) != 0) {
        perror("rtx-unit-tests: setenv CUDA_VISIBLE_DEVICES");
        return 2;
    }
    /* daemon modules under test log to stderr; RTX_TEST_LOG=debug|info|... shows their lines */
    const char *level = getenv("RTX_TEST_LOG");
    rtx_log_configure("text", level && level[0] ? level : "error");
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        if (!wanted(suites[i].name, argc, argv)) continue;
        if (!sr)
            sr = srunner_create(suites[i].make());
        else
            srunner_add_suite(sr, suites[i].make());
    }
    if (!sr) {
        fprintf(stderr, "rtx-unit-tests: no such suite\n");
        return 2;
    }
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
