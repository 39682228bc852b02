/*
 * rtxctl.c - the operator CLI of rtxd: status, devices, pools, lanes, generation, health,
 * config and drain of a daemon; listing, showing, waiting for and cancelling jobs; submitting
 * graph files with .npy or random inputs; writing job outputs as .npy files; listing, loading,
 * unloading and describing served models; streaming text from generative models. Human tables
 * by default, one JSON object or array per command with --json.
 *
 * DESIGN
 * rtxctl talks to rtxd only through librtx (client/rtx.h). It also links rtxd's runtime
 * library, for .npy files and for random inputs of every dtype; runtime tensors and librtx
 * tensors convert without copying (both are dense row-major buffers). Arguments are parsed
 * completely, and local files read, before the daemon is contacted, so usage errors and
 * --help never need a daemon. Commands are rows of one table with their usage and help
 * text; each command parses its own options.
 *
 * Exit codes (documented in --help and docs/rtxctl.md): 0 ok (a waited job succeeded),
 * 1 the daemon answered with an error, 2 usage error, 3/4/5 a waited job failed / was
 * cancelled / expired, 6 the daemon cannot be reached or is unavailable, 7 timeout, 8 local
 * error (a file cannot be read or written).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/rtxctl/rtxctl-impl.h"

#define DEFAULT_ADDRESS "127.0.0.1:8001"
#define MAX_TIMEOUT_MS 86400000 /* one day */

/* ------------------------------------------------------------------------------------------
 * Messages, allocation, errors and the connection
 * ---------------------------------------------------------------------------------------- */

/* Prints "rtxctl: <message>" to stderr. */
void ctl_msg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("rtxctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Prints a usage error naming the command's help; returns EXIT_USAGE. */
int ctl_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("rtxctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see rtxctl %s--help)\n", cmd ? cmd : "");
    va_end(ap);
    return EXIT_USAGE;
}

/* Allocation that cannot fail quietly: rtxctl is a short-lived command. */
void *ctl_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        ctl_msg("out of memory");
        exit(EXIT_LOCAL);
    }
    return p;
}

void *ctl_realloc(void *p, size_t size) {
    void *q = realloc(p, size ? size : 1);
    if (!q) {
        ctl_msg("out of memory");
        exit(EXIT_LOCAL);
    }
    return q;
}

char *ctl_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(ctl_calloc(n, 1), s, n);
}

/* Reports a failed librtx call (`what` says what was tried) and returns the exit code. */
int ctl_call_failed(struct ctl *ctl, const char *what, const struct rtx_client_err *err) {
    switch (err->code) {
    case RTX_CLIENT_EUNAVAILABLE:
        ctl_msg("%s: cannot reach rtxd at %s, or it is unavailable: %s", what, ctl->address,
                err->msg);
        return EXIT_UNAVAILABLE;
    case RTX_CLIENT_ETIMEDOUT:
        ctl_msg(
            "%s: deadline exceeded: %s (rtxd at %s; calls time out after %d ms, see --timeout)",
            what, err->msg, ctl->address, rtx_client_timeout_ms(ctl->client));
        return EXIT_TIMEOUT;
    default: break;
    }
    if (err->grpc_status >= 0 || err->code == RTX_CLIENT_EPROTO) {
        const char *rid = ctl->client ? rtx_client_last_request_id(ctl->client) : "";
        if (*rid)
            ctl_msg("%s: %s [%s; request %s]", what, err->msg, rtx_client_strerror(err->code),
                    rid);
        else
            ctl_msg("%s: %s [%s]", what, err->msg, rtx_client_strerror(err->code));
        return EXIT_ERROR;
    }
    ctl_msg("%s: %s", what, err->msg);
    return EXIT_LOCAL;
}

/* Connects on first use; returns EXIT_OK or an exit code (message printed). */
int ctl_connect(struct ctl *ctl) {
    if (ctl->client) return EXIT_OK;
    struct rtx_client_err err;
    if (rtx_client_connect(ctl->address, ctl->timeout_ms, &ctl->client, &err) < 0) {
        ctl_msg("cannot use address '%s': %s", ctl->address, err.msg);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* ------------------------------------------------------------------------------------------
 * The command table and help
 * ---------------------------------------------------------------------------------------- */

static const char exit_help[] =
    "Exit status: 0 ok, 1 the daemon answered with an error, 2 usage error, 6 daemon\n"
    "unreachable or unavailable, 7 timeout, 8 local file error.\n";

static const char wait_exit_help[] =
    "Exit status: 0 the job succeeded, 3 it failed, 4 it was cancelled, 5 it expired;\n"
    "1 the daemon answered with an error (an unknown job), 2 usage error, 6 daemon\n"
    "unreachable or unavailable, 7 timeout, 8 local file error.\n";

/* The help of each command: its description and options. */
static const char help_status[] =
    "Shows the daemon's version and build, uptime, whether it drains, the jobs that\n"
    "succeeded and failed since it started, its job store, its devices and the queued and\n"
    "running jobs of each lane. With --json: one object with version, build_id, uptime_ms,\n"
    "draining, jobs_succeeded, jobs_failed, store {...}, devices [...], lanes [...].\n";

static const char help_devices[] =
    "Lists the daemon's devices: index, kind (cpu, cuda), name, CPU threads or CUDA\n"
    "multiprocessors, memory, compute capability, health. A GPU that hit a sticky error\n"
    "while running a job is unhealthy, with the error as detail. With --json: an array of\n"
    "objects (also with workers: the job workers on the device).\n";

static const char help_pools[] =
    "Lists the memory pools of each device jobs run on: a CUDA device's caching pool, its\n"
    "pinned host staging pool (DEVICE/pinned), and the CPU (no caching pool: only the\n"
    "largest job's peak). Columns: bytes allocated to callers, reserved from the device,\n"
    "active (allocated + held back for stream events), peak allocated, fragmentation\n"
    "(1 - largest free block / free bytes), allocation retries after freeing the cache,\n"
    "out-of-memory failures, the cap per pool, health. A row sums the pools of the\n"
    "device's workers. With --json: an array of objects with device, kind, pools,\n"
    "allocated_bytes, reserved_bytes, active_bytes, allocated_peak_bytes,\n"
    "reserved_peak_bytes, fragmentation, alloc_retries, ooms, cap_bytes, free_bytes,\n"
    "allocs, cache_hits, segments, healthy, detail.\n";

static const char help_lanes[] =
    "Lists the SLA lanes of each device's job scheduler (the CPU, then each CUDA device\n"
    "with workers): latency target, weight, depth (queued/bound), running jobs, wait\n"
    "(enqueue to dispatch) p50 and p99, and since start: jobs admitted, rejected (lane\n"
    "full or deadline unmeetable), shed by brownout, expired before running, completed;\n"
    "and whether brownout sheds the lane now. Then each scheduler's executors and brownout\n"
    "state, and the default lane. With --json: {default_lane, schedulers: [{device,\n"
    "executors, healthy, running, brownout_level, brownout_entries, brownout_exits,\n"
    "batch_delay_factor, cost_keys}], lanes: [{device, lane, priority, target_p99_us,\n"
    "weight, max_queued, on_timeout, preemptible, queued, delayed, running, queued_work_us,\n"
    "est_delay_us, pressure, shed, wait_samples, wait_p50_us, wait_p90_us, wait_p99_us,\n"
    "wait_max_us, admitted, rejected_full, rejected_deadline, rejected_shed, expired,\n"
    "dispatched, completed, failed, cancelled, preempted}]}.\n";

static const char exits_health[] =
    "Exit status: 0 serving, 1 not serving (or an error answer), 2 usage error, 6 daemon\n"
    "unreachable, 7 timeout.\n";

static const char help_generation[] =
    "Shows the generation engines of the daemon's ready generative models (or of MODEL):\n"
    "device and architecture, the KV cache (blocks used by sequences, cached for prefix\n"
    "reuse, free; as a bar [#+.]), the prefix cache's hit rate, prompt and generated\n"
    "tokens, requests finished / canceled / failed, each lane's running and waiting\n"
    "sequences with its preemptions and refusals, and time to first token (ttft), inter-\n"
    "token latency (itl), time per output token (tpot) and request latency (e2e): count,\n"
    "mean, p50 and p99 estimated from the daemon's histogram buckets. Counters are since\n"
    "the engine started; rates (tokens/s, steps/s) need two samples: --watch.\n"
    "  --watch INTERVAL   sample again every INTERVAL (\"2\" is 2 s, \"500ms\"), until\n"
    "                     interrupted; on a terminal each sample replaces the last\n"
    "  --count N          with --watch: stop after N samples\n"
    "With --json: {\"models\": [...]} (see docs/rtxctl.md); with --watch one such line per\n"
    "sample, adding time_unix_ms, interval_s and each model's \"rates\" (null on the first).\n"
    "An unknown MODEL exits 1 (not found), as does a model that is not generative.\n";

static const char help_health[] =
    "Asks whether the daemon serves. Prints serving or not_serving (draining, or a failing\n"
    "store) with a detail. With --json: {\"status\": ..., \"detail\": ...}.\n";

static const char help_config[] =
    "Lists every daemon setting: name, value, origin (default, file, env, flag, reload),\n"
    "whether SIGHUP may change it, and its description. With --json: an array of objects\n"
    "with name, value, origin, mutable, description.\n";

static const char help_jobs_list[] =
    "Lists jobs, newest first: id, state, lane, graph, creation time (UTC), run time and\n"
    "labels. Without --all and --limit one page is shown (the daemon's page size, 100);\n"
    "when more jobs exist, the token of the next page is printed on stderr.\n"
    "  --state S          only jobs in state S: queued, running, succeeded, failed,\n"
    "                     cancelled, expired (repeatable, or comma-separated: any of them)\n"
    "  --label K=V        only jobs with this label (repeatable: all of them)\n"
    "  --since DURATION   only jobs created within DURATION: 90s, 15m, 2h, 7d, 1h30m\n"
    "                     (a plain number is seconds)\n"
    "  --after UNIXMS     only jobs created after this time (unix milliseconds)\n"
    "  --limit N          at most N jobs (fetching as many pages as that takes)\n"
    "  --page-token T     start at the page a previous listing pointed to\n"
    "  --all              every page\n"
    "With --json: {\"jobs\": [...], \"next_page_token\": \"...\"} (\"\" after the last "
    "page);\neach job as `jobs show --json` prints it.\n";

static const char synopsis_jobs_list[] =
    "[--state S]... [--label K=V]... [--since DURATION | --after UNIXMS] [--limit N]\n"
    "       [--page-token T] [--all]";

static const char help_jobs_show[] =
    "Shows one job: state and reason, graph, lane, labels, idempotency key, restart policy,\n"
    "times, attempts, run time, peak memory and its outputs (name, shape, bytes, SHA-256).\n"
    "With --json: one object with the fields of rtx.v1.Job (state as a name: queued,\n"
    "running, succeeded, failed, cancelled, expired; times in unix milliseconds, 0 unset).\n";

static const char help_jobs_wait[] =
    "Follows a job until it ends, printing its state when the wait starts and at each\n"
    "change; the exit status tells how it ended. With --json nothing is printed while\n"
    "waiting and the final job is printed as `jobs show --json` does.\n"
    "  --timeout-s N      give up after N seconds (exit 7; the job is not cancelled)\n";

static const char help_jobs_cancel[] =
    "Cancels a job: a queued job is cancelled at once, a running one stops at its next op\n"
    "(follow it with `rtxctl jobs wait JOB`); a job that has ended is left as it is.\n"
    "With --json: the job after the call, as `jobs show --json` prints it.\n";

static const char help_models_list[] =
    "Lists the models of the daemon's model repository (KServe v2 RepositoryIndex): name,\n"
    "the version loaded (or that failed), its state (UNKNOWN, LOADING, READY, UNLOADING,\n"
    "UNAVAILABLE) and why it is unavailable.\n"
    "  --ready            only models that are ready\n"
    "With --json: an array of {name, version (0: none), state, reason}.\n";

static const char help_models_show[] =
    "Describes a ready model version: platform, instances, max batch size and dynamic\n"
    "batching, inputs and outputs (KServe datatype and shape, -1 for any size), and its\n"
    "statistics (requests, inferences, executions, mean latency).\n"
    "  --version N        that version (default: the newest ready one)\n"
    "With --json: one object with those fields (durations in ns).\n";

static const char help_models_load[] =
    "Loads (or reloads) a model from the daemon's repository and returns once it is ready;\n"
    "a failed reload keeps the version that was serving. Needs models.control=explicit.\n"
    "  --config FILE      use this config.json instead of the repository's\n"
    "With --json: {\"model\", \"state\"}.\n";

static const char help_models_unload[] =
    "Unloads a model: new requests fail at once, requests in flight finish, then its\n"
    "memory is freed. Needs models.control=explicit. With --json: {\"model\", \"state\"}.\n";

static const char exits_submit[] =
    "Exit status: 0 submitted (with --wait: the job succeeded), 3 it failed, 4 it was\n"
    "cancelled, 5 it expired; 1 the daemon refused the job (an invalid graph or input),\n"
    "2 usage error, 6 daemon unreachable or unavailable (draining, queue full), 7 timeout,\n"
    "8 a graph, model or .npy file cannot be read, or an output cannot be written.\n";

static const char help_submit[] =
    "Submits a graph file (a serialized rtx.v1.Graph) or an ONNX model (MODEL.onnx,\n"
    "converted by rtxd for the inputs' shapes) as a job and prints its id. Every graph\n"
    "input needs a value: from an .npy file, or random (symbolic dimensions become 1).\n"
    "  --input NAME=FILE.npy   bind graph input NAME (repeatable)\n"
    "  --random-inputs         fill the other inputs with random data as rtxrun does:\n"
    "                          floats in [-1,1), integers in [0,10), random bools;\n"
    "                          dimensions declared -1 become 1\n"
    "  --seed N                seed of --random-inputs (default 0)\n"
    "  --lane L                the scheduling lane (default: the daemon's default lane)\n"
    "  --label K=V             a label (repeatable)\n"
    "  --deadline-ms N         the job expires unless it starts within N ms from now\n"
    "  --idempotency-key K     a second submit with the same key returns the first job\n"
    "  --restart-policy P      rerun or fail: what a daemon restart does if the job runs\n"
    "  --device D              auto (a healthy GPU, else the CPU), cpu, cuda (any healthy\n"
    "                          GPU) or cuda:N (default: the daemon's setting jobs.device)\n"
    "  --wait                  follow the job until it ends (as jobs wait)\n"
    "  --output-dir DIR        wait, then write each output to DIR/NAME.npy\n"
    "With --json: {\"job_id\", \"deduplicated\", \"job\" (the final job, with --wait),\n"
    "\"outputs\" (the files written, with --output-dir)}.\n";

static const char synopsis_submit[] =
    "GRAPH.rtxg|MODEL.onnx [--input NAME=FILE.npy]... [--random-inputs] [--seed N]\n"
    "       [--lane L] [--label K=V]... [--deadline-ms N] [--idempotency-key K]\n"
    "       [--restart-policy rerun|fail] [--device D] [--wait] [--output-dir DIR]";

static const char synopsis_generate[] =
    "MODEL PROMPT [--max-tokens N] [--temperature T] [--top-p P] [--top-k K]\n"
    "       [--seed S] [--stop STR]... [--lane L]";

static const char help_generate[] =
    "Generates text from PROMPT with a generative model (platform rtx_generate) and prints\n"
    "it as it comes, followed by a newline; Ctrl-C cancels the generation (the daemon frees\n"
    "its sequence). Options left out take the model's defaults (generation_config.json).\n"
    "  --max-tokens N      generate at most N tokens\n"
    "  --temperature T     0 decodes greedily; else sample with temperature T (<= 100)\n"
    "  --top-p P           sample from the smallest set of tokens of probability >= P\n"
    "  --top-k K           sample from the K most likely tokens\n"
    "  --seed S            seed of the sampling (the same seed gives the same text)\n"
    "  --stop STR          end the text before STR (repeatable, at most 8)\n"
    "  --lane L            the SLA lane (default: the model's or the daemon's)\n"
    "--timeout MS bounds the whole generation (default: no deadline).\n"
    "With --json: one line {\"text\"} per chunk as it comes, then {\"done\": true,\n"
    "\"finish_reason\" (stop or length), \"usage\" {prompt_tokens, completion_tokens,\n"
    "cached_tokens}, \"chunks\", \"request_id\"}.\n";

static const char exits_generate[] =
    "Exit status: 0 the text is complete, 4 cancelled (Ctrl-C); 1 the daemon refused the\n"
    "request (an unknown model, a bad option, a prompt past the model's context), 2 usage\n"
    "error, 6 daemon unreachable or unavailable, 7 timeout.\n";

static const char help_outputs[] =
    "Fetches the outputs of a succeeded job and writes each to DIR/NAME.npy (DIR is\n"
    "created; '/' and ':' in names become '_'; bf16 is written as float32). Prints the\n"
    "files; with --json an array of {name, dtype, shape, bytes, file}.\n";

static const char help_drain[] =
    "Asks the daemon to drain: it stops accepting jobs, lets running jobs finish within the\n"
    "grace period, keeps queued jobs in its journal for its next start, and exits 0.\n"
    "  --grace-ms N       the grace period in ms (default: the daemon's drain.grace_ms)\n"
    "With --json: {\"running\": N, \"queued\": M} as the drain began.\n";

struct command {
    const char *group; /* "jobs", "models" or NULL */
    const char *name;
    const char *synopsis; /* arguments after the command words */
    const char *summary;
    const char *help; /* the description and options */
    const char *exits;
    int (*run)(struct ctl *ctl, int argc, char **argv);
};

/* One row per command; `rtxctl --help` lists them in this order. */
// clang-format off
static const struct command commands[] = {
    {.name = "status", .synopsis = "",
     .help = help_status, .exits = exit_help, .run = ctl_cmd_status,
     .summary = "version, uptime, devices, lanes, store and job counters"},
    {.name = "devices", .synopsis = "",
     .help = help_devices, .exits = exit_help, .run = ctl_cmd_devices,
     .summary = "the daemon's compute devices"},
    {.name = "pools", .synopsis = "",
     .help = help_pools, .exits = exit_help, .run = ctl_cmd_pools,
     .summary = "memory pool statistics per device"},
    {.name = "lanes", .synopsis = "",
     .help = help_lanes, .exits = exit_help, .run = ctl_cmd_lanes,
     .summary = "SLA lanes of the job schedulers"},
    {.name = "generation", .synopsis = "[MODEL] [--watch INTERVAL [--count N]]",
     .help = help_generation, .exits = exit_help, .run = ctl_cmd_generation,
     .summary = "generation engines: KV cache, tokens, lanes, latency"},
    {.name = "health", .synopsis = "",
     .help = help_health, .exits = exits_health, .run = ctl_cmd_health,
     .summary = "whether the daemon serves"},
    {.name = "config", .synopsis = "",
     .help = help_config, .exits = exit_help, .run = ctl_cmd_config,
     .summary = "every daemon setting with its value and origin"},
    {.group = "jobs", .name = "list", .synopsis = synopsis_jobs_list,
     .help = help_jobs_list, .exits = exit_help, .run = ctl_cmd_jobs_list,
     .summary = "jobs, newest first, with filters and pages"},
    {.group = "jobs", .name = "show", .synopsis = "JOB",
     .help = help_jobs_show, .exits = exit_help, .run = ctl_cmd_jobs_show,
     .summary = "one job in detail"},
    {.group = "jobs", .name = "wait", .synopsis = "JOB [--timeout-s N]",
     .help = help_jobs_wait, .exits = wait_exit_help, .run = ctl_cmd_jobs_wait,
     .summary = "follow a job until it ends"},
    {.group = "jobs", .name = "cancel", .synopsis = "JOB",
     .help = help_jobs_cancel, .exits = exit_help, .run = ctl_cmd_jobs_cancel,
     .summary = "cancel a queued or running job"},
    {.group = "models", .name = "list", .synopsis = "[--ready]",
     .help = help_models_list, .exits = exit_help, .run = ctl_cmd_models_list,
     .summary = "the models of the daemon's repository"},
    {.group = "models", .name = "show", .synopsis = "MODEL [--version N]",
     .help = help_models_show, .exits = exit_help, .run = ctl_cmd_models_show,
     .summary = "one model: inputs, outputs, batching, stats"},
    {.group = "models", .name = "load", .synopsis = "MODEL [--config FILE]",
     .help = help_models_load, .exits = exit_help, .run = ctl_cmd_models_load,
     .summary = "load or reload a model"},
    {.group = "models", .name = "unload", .synopsis = "MODEL",
     .help = help_models_unload, .exits = exit_help, .run = ctl_cmd_models_unload,
     .summary = "unload a model"},
    {.name = "submit", .synopsis = synopsis_submit,
     .help = help_submit, .exits = exits_submit, .run = ctl_cmd_submit,
     .summary = "submit a graph file with .npy or random inputs"},
    {.name = "outputs", .synopsis = "JOB --dir DIR",
     .help = help_outputs, .exits = exit_help, .run = ctl_cmd_outputs,
     .summary = "write a succeeded job's outputs as .npy files"},
    {.name = "generate", .synopsis = synopsis_generate,
     .help = help_generate, .exits = exits_generate, .run = ctl_cmd_generate,
     .summary = "stream text from a generative model"},
    {.name = "drain", .synopsis = "[--grace-ms N]",
     .help = help_drain, .exits = exit_help, .run = ctl_cmd_drain,
     .summary = "stop accepting jobs, finish running ones, exit"},
};
// clang-format on

#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static const char global_usage[] =
    "usage: rtxctl [--address HOST:PORT] [--timeout MS] [--json] COMMAND [ARGS]\n";

static void print_top_help(FILE *f) {
    fputs(global_usage, f);
    fputs("Operates an rtxd daemon through its gRPC API (rtx.v1.Jobs, rtx.v1.Admin and, for\n"
          "models, inference.GRPCInferenceService).\n\n"
          "Commands:\n",
          f);
    for (int i = 0; i < N_COMMANDS; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s%s", commands[i].group ? commands[i].group : "",
                 commands[i].group ? " " : "", commands[i].name);
        fprintf(f, "  %-14s %s\n", name, commands[i].summary);
    }
    fputs("\nGlobal options (before or after the command):\n"
          "  --address HOST:PORT  the daemon (default: $RTXCTL_ADDRESS, else " DEFAULT_ADDRESS
          ")\n"
          "  --timeout MS         deadline of each call in milliseconds (default 10000)\n"
          "  --json               print one JSON object or array instead of tables\n"
          "  --help, -h           this help; `rtxctl COMMAND --help` describes a command\n"
          "\nExit status (the same for every command):\n"
          "  0  success (jobs wait, submit --wait: the job succeeded)\n"
          "  1  the daemon answered with an error (an unknown job, an invalid graph, ...)\n"
          "  2  usage error\n"
          "  3  the waited job failed, 4 it was cancelled, 5 it expired\n"
          "  6  the daemon cannot be reached, or it is unavailable (draining, queue full)\n"
          "  7  timeout: a call's deadline (--timeout) or jobs wait --timeout-s\n"
          "  8  local error: a graph or .npy file cannot be read, an output not written\n",
          f);
}

static void print_command_help(const struct command *c) {
    printf("usage: rtxctl [global options] %s%s%s%s%s\n", c->group ? c->group : "",
           c->group ? " " : "", c->name, *c->synopsis ? " " : "", c->synopsis);
    fputs(c->help, stdout);
    fputs("Global options: --address HOST:PORT, --timeout MS, --json (see rtxctl --help).\n",
          stdout);
    fputs(c->exits, stdout);
}

static void print_group_help(const char *group) {
    printf("usage: rtxctl [global options] %s SUBCOMMAND [ARGS]\n", group);
    printf("Subcommands (rtxctl %s SUBCOMMAND --help describes each):\n", group);
    for (int i = 0; i < N_COMMANDS; i++)
        if (commands[i].group && strcmp(commands[i].group, group) == 0)
            printf("  %s %s %s\n      %s\n", group, commands[i].name, commands[i].synopsis,
                   commands[i].summary);
    fputs(exit_help, stdout);
    if (strcmp(group, "jobs") == 0)
        fputs("jobs wait exits 0 when the job succeeded, 3 failed, 4 cancelled, 5 expired.\n",
              stdout);
}

/* ------------------------------------------------------------------------------------------
 * Main
 * ---------------------------------------------------------------------------------------- */

/* Takes the global options out of argv (they may stand anywhere); the rest goes to *rest. */
static int parse_globals(int argc, char **argv, struct ctl *ctl, char **rest, int *n_rest) {
    *n_rest = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int m;
        if (strcmp(a, "--") == 0) {
            while (++i < argc)
                rest[(*n_rest)++] = argv[i];
            break;
        }
        if (strcmp(a, "--json") == 0) {
            ctl->json = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            ctl->help = true;
        } else if ((m = ctl_opt_value(NULL, "--address", argc, argv, &i, &v)) != 0) {
            if (m < 0) return EXIT_USAGE;
            if (!*v) return ctl_usage_error(NULL, "--address needs HOST:PORT");
            ctl->address = v;
        } else if ((m = ctl_opt_value(NULL, "--timeout", argc, argv, &i, &v)) != 0) {
            int64_t t = 0;
            if (m < 0) return EXIT_USAGE;
            if (!ctl_parse_i64(v, 1, MAX_TIMEOUT_MS, &t))
                return ctl_usage_error(NULL, "--timeout wants milliseconds (1..%d), got '%s'",
                                       MAX_TIMEOUT_MS, v);
            ctl->timeout_ms = (int)t;
        } else {
            rest[(*n_rest)++] = argv[i];
        }
    }
    return EXIT_OK;
}

static int run(struct ctl *ctl, int n, char **rest) {
    if (n > 0 && strcmp(rest[0], "help") == 0) {
        ctl->help = true;
        rest++;
        n--;
    }
    if (n == 0) {
        if (ctl->help) {
            print_top_help(stdout);
            return EXIT_OK;
        }
        print_top_help(stderr);
        ctl_msg("no command given");
        return EXIT_USAGE;
    }
    bool is_group = false;
    for (int i = 0; i < N_COMMANDS; i++)
        if (commands[i].group && strcmp(commands[i].group, rest[0]) == 0) is_group = true;
    if (is_group && (n == 1 || (rest[1][0] == '-' && ctl->help))) {
        if (ctl->help) {
            print_group_help(rest[0]);
            return EXIT_OK;
        }
        char cmd[64];
        snprintf(cmd, sizeof cmd, "%s ", rest[0]);
        return ctl_usage_error(cmd, "%s needs a subcommand", rest[0]);
    }
    for (int i = 0; i < N_COMMANDS; i++) {
        const struct command *c = &commands[i];
        bool match =
            is_group ? c->group && strcmp(c->group, rest[0]) == 0 && strcmp(c->name, rest[1]) == 0
                     : !c->group && strcmp(c->name, rest[0]) == 0;
        if (!match) continue;
        if (ctl->help) {
            print_command_help(c);
            return EXIT_OK;
        }
        int skip = is_group ? 2 : 1;
        return c->run(ctl, n - skip, rest + skip);
    }
    if (is_group) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "%s ", rest[0]);
        return ctl_usage_error(cmd, "unknown subcommand '%s %s'", rest[0], rest[1]);
    }
    if (rest[0][0] == '-') return ctl_usage_error(NULL, "unknown option '%s'", rest[0]);
    return ctl_usage_error(NULL, "unknown command '%s'", rest[0]);
}

int main(int argc, char **argv) {
    const char *env = getenv("RTXCTL_ADDRESS");
    struct ctl ctl = {.address = env && *env ? env : DEFAULT_ADDRESS};
    char **rest = ctl_calloc((size_t)argc, sizeof *rest);
    int n_rest = 0;
    int rc = parse_globals(argc, argv, &ctl, rest, &n_rest);
    if (rc == EXIT_OK) rc = run(&ctl, n_rest, rest);
    if (fflush(stdout) != 0 && rc == EXIT_OK) {
        ctl_msg("writing to stdout: %s", strerror(errno));
        rc = EXIT_LOCAL;
    }
    rtx_client_close(ctl.client);
    free(rest);
    return rc;
}
