/*
 * config.h - rtxd's settings: one declarative table (daemon/config.c) of every setting with
 * its type, default, bounds, whether SIGHUP may change it, and a description. Values come from
 * the embedded defaults, then an INI file (inih), then RTXD_* environment variables, then
 * command-line flags; each setting remembers where its value came from.
 *
 * Setting names are "section.key"; the INI file uses [section] key = value, the environment
 * RTXD_SECTION_KEY (upper case, '.' -> '_'), the command line --section.key=value or
 * --section.key value.
 *
 * Lanes and the scheduler's knobs are not in the table: the file's [lane.NAME] and
 * [scheduler] sections go to rtx_sched_config_set (docs/scheduler.md), and jobs.lanes selects
 * and orders the lanes. jobs.lanes left at its default lists realtime, interactive, batch and
 * then every lane a [lane.NAME] section adds; set explicitly, it must list every lane a
 * section adds. A reload changes the lanes' settings and the [scheduler] knobs that a running
 * scheduler can take (all but executors, max_running and cost_keys), but not the set of lanes.
 */
#ifndef RTX_DAEMON_CONFIG_H
#define RTX_DAEMON_CONFIG_H

#include <stdio.h>

#include "runtime/runtime.h"
#include "scheduler/sched.h"

/* Settings in the table (daemon/config.c), one origin slot each in struct rtx_config. */
#define RTX_CONFIG_N_SETTINGS 33

/* The effective settings. Strings are owned by the struct. */
struct rtx_config {
    /* [server] */
    char *listen;                  /* gRPC address, default "127.0.0.1:8001" */
    int cq_threads;                /* completion-queue threads, default 2 */
    int64_t max_message_bytes;     /* gRPC receive/send limit, default 64 MiB */
    /* [http] */
    char *http_listen;             /* KServe v2 HTTP and /metrics address, default
                                    * "127.0.0.1:8000"; "" = no HTTP server */
    int64_t http_max_body_bytes;   /* largest HTTP request body, default 64 MiB */
    /* [store] */
    char *store_path;              /* default "./var/rtxd.db" */
    int64_t retention_max_age_s;   /* default 7 days; 0 keeps outputs forever (mutable) */
    int64_t retention_max_bytes;   /* default 1 GiB; 0 = unlimited (mutable) */
    char *store_sync;              /* "full" (default) or "normal" */
    /* [jobs] */
    int workers;                   /* job worker threads, default 1 */
    int cpu_threads;               /* CPU backend threads per worker, 0 = all CPUs / workers;
                                    * rtx_config_load resolves 0 to max(1, online CPUs /
                                    * workers), so consumers always see a number >= 1 */
    char *lanes;                   /* comma-separated lane names, "realtime,interactive,batch" */
    char *default_lane;            /* default "batch" */
    char *restart_policy;          /* "rerun" or "fail", default "rerun" (mutable) */
    int64_t max_graph_nodes;       /* default 100000 */
    int64_t max_tensor_bytes;      /* default 1 GiB */
    int64_t max_queued;            /* jobs queued at most before Submit is refused, 100000 */
    char *device;                  /* device of a job that names none: "auto" (default: a
                                    * healthy GPU when there is one, else the CPU), "cpu" or
                                    * "cuda" */
    int gpu_workers_per_device;    /* job workers per healthy CUDA device, default 1; 0: none */
    /* [device] (device/device.h: one device set shared by jobs and serving) */
    double memory_fraction;        /* of each device's memory its budget holds, default 0.9 */
    int64_t memory_cap_bytes;      /* bytes: most any device's budget holds, 0 = none */
    double jobs_reserve;           /* of each budget reserved for jobs, default 0.25 */
    int plan_cache;                /* plans kept per device, default 16; 0: none */
    int64_t plan_cache_bytes;      /* bytes those plans may hold per device, default 1 GiB;
                                    * 0: no bound but plan_cache */
    /* [models] */
    char *models_repository;       /* model repository directory, default "" (none) */
    char *models_control;          /* "none" (default), "explicit" or "poll" */
    int models_poll_ms;            /* repository scan period in poll mode, default 5000 */
    char *models_startup;          /* explicit mode: models loaded at start, "a,b" or "*" */
    int64_t models_max_queue;      /* requests waiting per model version, default 10000 */
    int models_cpu_threads;        /* CPU backend threads per instance, 0 = online CPUs */
    /* [drain] */
    int drain_grace_ms;            /* default 30000 (mutable) */
    /* [log] */
    char *log_format;              /* "text" or "json" (mutable) */
    char *log_level;               /* "debug", "info", "warn", "error" (mutable) */
    /* [scheduler] and [lane.NAME] sections of the file (scheduler/sched.h parses them): the
     * lanes of jobs.lanes in its order with their settings, and the scheduler's knobs. A
     * reload takes the new mutable ones (rtx_sched_setting.is_mutable) while the set of lanes
     * stays the same; the caller puts them to the running schedulers */
    struct rtx_sched_config sched;
    /* where the file came from: --config PATH, RTXD_CONFIG, or none */
    char *config_path;
    /* where each setting's value came from, in table order (rtx_config_list shows it as a
     * string); kept by rtx_config_load and rtx_config_reload, not for consumers */
    unsigned char origin[RTX_CONFIG_N_SETTINGS];
    /* per setting of rtx_sched_config_list(&sched): a reload changed it (origin "reload") */
    bool sched_reloaded[RTX_SCHED_SETTINGS_MAX];
};

/* One setting as Admin.Config and --print-config show it. */
struct rtx_setting_view {
    char name[80];                 /* "server.listen", "lane.realtime.weight" */
    char value[256];
    const char *origin;            /* "default", "file", "env", "flag", "reload" */
    bool is_mutable;
    const char *description;
};

/* Fills cfg from defaults, the file (--config PATH or RTXD_CONFIG; none is fine), the
 * environment and argv (flags other than settings are left for the caller: *argc/argv are
 * compacted to the unknown arguments, argv[0] kept; --config PATH is consumed here, "--" ends
 * the settings and it and everything after it are left). Errors name the setting and the source:
 * unknown setting, bad number, out of bounds, bad enum value. On failure cfg is zeroed (safe to
 * rtx_config_free) and argv is left as it was. On success the apply hooks of the table run
 * (log.format and log.level: rtx_log_configure); rtx_config_reload runs the hooks of the
 * settings it changes. */
int rtx_config_load(struct rtx_config *cfg, int *argc, char **argv, struct rtx_err *err);
/* Re-reads the file and the environment (SIGHUP) and applies the mutable settings that
 * changed (origin "reload"); *changed (may be NULL) gets their count. Immutable settings that
 * differ keep their value, and each is logged as a warning. Lane and [scheduler] settings
 * count too: the mutable ones that changed are taken (one info line, "lanes reconfigured",
 * lists them as NAME=OLD->NEW), unless the set of lanes changed (jobs.lanes, a [lane.NAME]
 * section added or removed): then no lane setting is taken, a warning says so, and the rest
 * of the reload applies. cfg->sched is then what the running schedulers should take
 * (rtx_jobs_reconfigure, rtx_serving_reconfigure). Returns 0, or an error with cfg unchanged
 * when the file is invalid (a bad lane value too). */
int rtx_config_reload(struct rtx_config *cfg, int *changed, struct rtx_err *err);
void rtx_config_free(struct rtx_config *cfg);
/* Every setting, in table order, then the [scheduler] and [lane.NAME] ones as
 * "scheduler.KEY" and "lane.NAME.KEY" (mutable but executors, max_running and cost_keys;
 * origin "reload" once a reload changed it, else "default" when the value is the built-in
 * one and "file" otherwise); *views is rtx_malloc'ed (rtx_free it). */
int rtx_config_list(const struct rtx_config *cfg, struct rtx_setting_view **views, int *n);
/* Writes every setting as an INI file with origins as comments (rtxd --print-config), the
 * [scheduler] and [lane.NAME] sections last; the file loads back to the same settings. */
void rtx_config_print(const struct rtx_config *cfg, FILE *out);
/* Usage text for the settings (rtxd --help). */
void rtx_config_usage(FILE *out);

#endif /* RTX_DAEMON_CONFIG_H */
