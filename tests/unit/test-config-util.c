/*
 * test-config-util.c - the helpers that the configuration's test files share (declared, with
 * what each does, in test-config-util.h).
 */
#include "tests/unit/test-config-util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"

char tmp_dir[] = "/tmp/rtx-test-config-XXXXXX";
char ini_path[256];

static void clear_env(void) {
    static const char *const names[] = {
        "RTXD_CONFIG",
        "RTXD_SERVER_LISTEN",
        "RTXD_SERVER_CQ_THREADS",
        "RTXD_SERVER_MAX_MESSAGE_BYTES",
        "RTXD_STORE_PATH",
        "RTXD_STORE_RETENTION_MAX_AGE_S",
        "RTXD_STORE_RETENTION_MAX_BYTES",
        "RTXD_JOBS_WORKERS",
        "RTXD_JOBS_CPU_THREADS",
        "RTXD_JOBS_LANES",
        "RTXD_JOBS_DEFAULT_LANE",
        "RTXD_JOBS_RESTART_POLICY",
        "RTXD_JOBS_MAX_GRAPH_NODES",
        "RTXD_JOBS_MAX_TENSOR_BYTES",
        "RTXD_JOBS_MAX_QUEUED",
        "RTXD_DRAIN_GRACE_MS",
        "RTXD_LOG_FORMAT",
        "RTXD_LOG_LEVEL",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
}

void setup(void) {
    clear_env();
    strcpy(tmp_dir, "/tmp/rtx-test-config-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
    snprintf(ini_path, sizeof ini_path, "%s/rtxd.ini", tmp_dir);
    rtx_log_configure("text", "error"); /* reload warnings stay quiet unless captured */
}

void teardown(void) {
    unlink(ini_path);
    rmdir(tmp_dir);
    clear_env();
    rtx_log_configure("text", "info");
    rtx_alloc_fail_after(0);
}

/* args_of(&a, "--x=1", "--y", "2", NULL): argv with "rtxd" as argv[0]. */
struct args *args_of(struct args *a, ...) {
    va_list ap;
    va_start(ap, a);
    a->argc = 0;
    a->argv[a->argc++] = "rtxd";
    for (char *s; (s = va_arg(ap, char *)) != NULL;) {
        ck_assert_int_lt(a->argc, MAX_ARGS);
        a->argv[a->argc++] = s;
    }
    a->argv[a->argc] = NULL;
    va_end(ap);
    return a;
}

int load(struct rtx_config *cfg, struct args *a, struct rtx_err *err) {
    return rtx_config_load(cfg, &a->argc, a->argv, err);
}

/* The listed view of one setting. */
struct rtx_setting_view view_of(const struct rtx_config *cfg, const char *name) {
    struct rtx_setting_view *v, out;
    int n;
    ck_assert_int_eq(rtx_config_list(cfg, &v, &n), 0);
    for (int i = 0; i < n; i++) {
        if (strcmp(v[i].name, name) == 0) {
            out = v[i];
            rtx_free(v);
            return out;
        }
    }
    rtx_free(v);
    ck_abort_msg("no setting %s", name);
    return out;
}

void assert_origin(const struct rtx_config *cfg, const char *name, const char *origin) {
    struct rtx_setting_view v = view_of(cfg, name);
    ck_assert_msg(strcmp(v.origin, origin) == 0, "%s: origin %s, want %s", name, v.origin, origin);
}

/* Text written by rtx_config_print (free() it). */
char *print_config(const struct rtx_config *cfg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    rtx_config_print(cfg, f);
    fclose(f);
    return buf;
}
