/*
 * serving.c - the model repository (serving/serving.h): scanning the directory, version
 * policies, load / unload / reload, the housekeeping thread (repository polls, saves of
 * learned costs), the model index, statistics and memory.
 *
 * DESIGN
 * An entry per model name holds its READY versions (the repository's references), its state
 * and, for the poller, a signature of its files. Two locks: `mu` guards the entries and the
 * statistics list and is held only for short lookups and swaps, never while loading, so
 * inference keeps flowing during a load; `op_mu` serializes the slow operations (load,
 * unload, a poll pass, stop) against each other. A reload loads the new versions completely
 * (warm-up included) before it swaps them in under `mu`; only then are the old versions
 * stopped (their queued requests still run) and released, so a failed reload leaves the old
 * versions serving and a successful one never refuses a request in between.
 * The poll signature hashes the size, modification time and inode of config.json,
 * config.pbtxt and of every entry of the version directories (one level into directories
 * such as an ONNX model's model.onnx/), and the list of version directories: any change
 * reloads the model; a model directory that disappears is unloaded.
 * Learned costs (kept by the device set's book, device/device.h, which persists them in the
 * store): a version's first load in this process reads the book's cost for its key (place
 * RTX__COST_DEVICE) into its statistics record, from which its scheduler starts (later loads
 * start from the record, which is newer). A version's cost is put into the book and the book
 * saved when it changed: every COST_SAVE_MS by the housekeeping thread for the loaded
 * versions, and when a version is released (unload, reload, stop), all under op_mu so that an
 * older value never overwrites a newer one. The housekeeping thread always runs (its polls
 * only in poll mode).
 * Lane settings (SIGHUP, rtx_serving_reconfigure) change under `mu` and not `op_mu`, so a
 * long load never holds a reload up: the server's copy and every READY version change
 * together, all or none. A load copies the settings when it begins and, if they changed by
 * the time it swaps its versions in (a generation count under `mu`), gives its versions the
 * new ones first, so no version starts serving with settings older than the server's.
 * Devices: versions run on the daemon's device set (device/device.h); the server listens for
 * device faults and wakes every READY version's workers, so a version stops giving batches to
 * an instance on an unhealthy device at once; such a version is ready (model and server
 * readiness) only while one of its instances is on a healthy device.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "device/device.h"
#include "serving/serving-impl.h"

#define COST_SAVE_MS 10000 /* ms between saves of changed learned costs (as the job manager) */

struct entry {
    char name[128];
    enum rtx_model_state state;
    char reason[1024];
    int n_ready;
    struct rtx_model *ready[RTX__MAX_VERSIONS]; /* ascending versions; one reference each */
    int64_t failed_version;
    uint64_t sig;     /* poll signature at the last load attempt; 0: none */
    bool at_start;    /* loaded at start: counts for rtx_serving_ready */
};

struct rtx_serving {
    char *repo;
    rtx_serving_log_fn log;        /* events (rtx_serving_options.log), may be NULL */
    enum rtx_model_control control;
    int poll_ms;
    struct rtx_limits limits;
    struct rtx_devices *devices;   /* the daemon's; instances run on its devices */
    int cpu_threads;               /* CPU instances' backend threads; 0: the set's */
    bool fault_listening;          /* on_fault is a listener of devices */
    int64_t max_queue;
    struct rtx_sched_config sched; /* under mu: every version's lanes and knobs */
    uint64_t sched_gen;            /* under mu: changes of sched (rtx_serving_reconfigure) */
    int default_lane;              /* index in sched.lanes */
    bool cost_save_all;            /* under op_mu: a put failed, the next save puts all */

    pthread_mutex_t op_mu; /* one load / unload / poll pass / stop at a time */
    pthread_mutex_t mu;    /* guards the fields below */
    pthread_cond_t poll_cv;
    int n_entries, cap_entries;
    struct entry **entries; /* sorted by name */
    struct rtx__stats_rec *stats; /* sorted by (name, version) */
    /* lane counters of versions stopped since start (rtx_serving_lanes adds the live ones) */
    int64_t retired[RTX_SCHED_MAX_LANES][RTX_SCHED_CTR_COUNT];
    bool stopping;
    bool poll_started;             /* the housekeeping thread runs */
    pthread_t poller;
};

/* ------------------------------------------------------------------------------------------
 * Files
 * ---------------------------------------------------------------------------------------- */

/* A model directory name rtxd serves: 1..127 bytes, no '/', not hidden. */
static bool valid_name(const char *n) {
    size_t len = n ? strlen(n) : 0;
    return len > 0 && len < 128 && n[0] != '.' && !strchr(n, '/');
}

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* A version directory name: digits, no leading zero, value >= 1. */
static int64_t version_of(const char *n) {
    if (!n[0] || n[0] == '0' || strlen(n) > 18) return 0;
    int64_t v = 0;
    for (const char *p = n; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The version directories of a model, ascending (at most cap). */
static int list_versions(const char *mdir, int64_t *out, int cap) {
    DIR *d = opendir(mdir);
    if (!d) return -errno;
    int n = 0;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d)) && n < cap) {
        int64_t v = version_of(e->d_name);
        snprintf(path, sizeof path, "%s/%s", mdir, e->d_name);
        if (v > 0 && is_dir(path)) out[n++] = v;
    }
    closedir(d);
    qsort(out, (size_t)n, sizeof *out, cmp_i64);
    return n;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The model directories of the repository, sorted (rtx_malloc'ed names). */
static int list_models(const char *repo, char ***names, int *n, struct rtx_err *err) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(repo);
    if (!d) return rtx_err_set(err, RTX_EIO, "model repository %s: %s", repo, strerror(errno));
    int cap = 0, rc = 0;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d))) {
        if (!valid_name(e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", repo, e->d_name);
        if (!is_dir(path)) continue;
        if (*n == cap) {
            int nc = cap ? cap * 2 : 16;
            char **g = rtx_realloc(*names, sizeof *g * (size_t)nc);
            if (!g) {
                rc = rtx_err_set(err, RTX_ENOMEM, "out of memory listing %s", repo);
                break;
            }
            *names = g;
            cap = nc;
        }
        if (!((*names)[*n] = rtx_strdup(e->d_name))) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory listing %s", repo);
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (rc) {
        for (int i = 0; i < *n; i++)
            rtx_free((*names)[i]);
        rtx_free(*names);
        *names = NULL;
        *n = 0;
        return rc;
    }
    if (*n) qsort(*names, (size_t)*n, sizeof **names, cmp_str);
    return 0;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++)
        rtx_free(names[i]);
    rtx_free(names);
}

static uint64_t fnv(uint64_t h, const void *p, size_t len) {
    const uint8_t *b = p;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t sig_file(uint64_t h, const char *path) {
    struct stat sb;
    int64_t f[4] = {-1, 0, 0, 0};
    if (stat(path, &sb) == 0) {
        f[0] = (int64_t)sb.st_size;
        f[1] = (int64_t)sb.st_mtim.tv_sec;
        f[2] = (int64_t)sb.st_mtim.tv_nsec;
        f[3] = (int64_t)sb.st_ino;
    }
    return fnv(h, f, sizeof f);
}

/* The signature of a version directory's entries, in any order: each one's name and stat,
 * and, for a directory (an ONNX model's model.onnx/), its own entries. */
static uint64_t sig_dir(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    uint64_t sum = 0;
    struct dirent *e;
    char path[4800];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        uint64_t h = sig_file(fnv(0xcbf29ce484222325ull, e->d_name, strlen(e->d_name)), path);
        if (depth > 0 && is_dir(path)) h = fnv(h, &(uint64_t){sig_dir(path, depth - 1)}, 8);
        sum += h; /* readdir's order does not count */
    }
    closedir(d);
    return sum;
}

/* The poll signature of a model directory (never 0). */
static uint64_t model_signature(const char *repo, const char *name) {
    char mdir[4400], path[4600];
    snprintf(mdir, sizeof mdir, "%s/%s", repo, name);
    snprintf(path, sizeof path, "%s/config.json", mdir);
    uint64_t h = sig_file(0xcbf29ce484222325ull, path);
    snprintf(path, sizeof path, "%s/config.pbtxt", mdir);
    h = sig_file(h, path);
    int64_t vs[RTX__MAX_VERSIONS];
    int n = list_versions(mdir, vs, RTX__MAX_VERSIONS);
    for (int i = 0; i < n; i++) {
        h = fnv(h, &vs[i], sizeof vs[i]);
        snprintf(path, sizeof path, "%s/%lld", mdir, (long long)vs[i]);
        uint64_t v = sig_dir(path, 1);
        h = fnv(h, &v, sizeof v);
    }
    return h ? h : 1;
}

/* ------------------------------------------------------------------------------------------
 * Entries and statistics records (under s->mu)
 * ---------------------------------------------------------------------------------------- */

static struct entry *find_entry(struct rtx_serving *s, const char *name) {
    for (int i = 0; i < s->n_entries; i++)
        if (strcmp(s->entries[i]->name, name) == 0) return s->entries[i];
    return NULL;
}

static struct entry *add_entry(struct rtx_serving *s, const char *name) {
    if (s->n_entries == s->cap_entries) {
        int nc = s->cap_entries ? s->cap_entries * 2 : 16;
        struct entry **g = rtx_realloc(s->entries, sizeof *g * (size_t)nc);
        if (!g) return NULL;
        s->entries = g;
        s->cap_entries = nc;
    }
    struct entry *e = rtx_calloc(1, sizeof *e);
    if (!e) return NULL;
    snprintf(e->name, sizeof e->name, "%s", name);
    int i = s->n_entries;
    while (i > 0 && strcmp(s->entries[i - 1]->name, name) > 0) {
        s->entries[i] = s->entries[i - 1];
        i--;
    }
    s->entries[i] = e;
    s->n_entries++;
    return e;
}

static struct rtx__stats_rec *stats_rec(struct rtx_serving *s, const char *name, int64_t version) {
    struct rtx__stats_rec **pp = &s->stats;
    while (*pp) {
        int c = strcmp((*pp)->st.name, name);
        if (c == 0 && (*pp)->st.version == version) return *pp;
        if (c > 0 || (c == 0 && (*pp)->st.version > version)) break;
        pp = &(*pp)->next;
    }
    struct rtx__stats_rec *r = rtx_calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    snprintf(r->st.name, sizeof r->st.name, "%s", name);
    r->st.version = version;
    r->next = *pp;
    *pp = r;
    return r;
}

/* ------------------------------------------------------------------------------------------
 * Learned costs, through the device set's book (under s->op_mu)
 * ---------------------------------------------------------------------------------------- */

/* Puts m's learned cost into the book when a run time was learned since it was last taken,
 * or when `all` (and it has one). A put that fails (out of memory: the book does not have the
 * cost) is logged and makes the next periodic save put every loaded version's cost again. A
 * failed store write needs no such pass: the book keeps its rows dirty and its next save
 * writes them. */
static void cost_take(struct rtx_serving *s, struct rtx_model *m, bool all) {
    bool changed = rtx__model_cost_changed(m);
    uint64_t key;
    int64_t ema = 0, samples = 0;
    if (!(changed || all) || rtx__model_cost(m, &key, &ema, &samples) != 0) return;
    struct rtx_err err = {0};
    if (rtx_devices_cost_put(s->devices, RTX__COST_DEVICE, key, ema, samples, &err) != 0) {
        s->cost_save_all = true;
        rtx__serving_log(s->log, RTX_SERVING_LOG_ERROR, "cannot save learned inference costs",
                         "error", err.msg, NULL);
    }
}

/* Writes the book's changed costs to the store (with the job manager's, when it has some
 * not written yet). A failure is logged; the next save retries. */
static void cost_write(struct rtx_serving *s) {
    struct rtx_err err = {0};
    if (rtx_devices_costs_save(s->devices, &err) != 0)
        rtx__serving_log(s->log, RTX_SERVING_LOG_ERROR, "cannot save learned inference costs",
                         "error", err.msg, NULL);
}

/* The periodic save: the changed costs of every loaded version (all of them after a failed
 * put). */
static void costs_save_loaded(struct rtx_serving *s) {
    pthread_mutex_lock(&s->mu);
    int n = 0, k = 0;
    for (int i = 0; i < s->n_entries; i++)
        n += s->entries[i]->n_ready;
    struct rtx_model **ms = n > 0 ? rtx_malloc((size_t)n * sizeof *ms) : NULL;
    for (int i = 0; ms && i < s->n_entries; i++)
        for (int v = 0; v < s->entries[i]->n_ready; v++)
            ms[k++] = rtx__model_ref(s->entries[i]->ready[v]);
    pthread_mutex_unlock(&s->mu);
    bool all = s->cost_save_all;
    s->cost_save_all = n > 0 && !ms;
    if (s->cost_save_all)
        rtx__serving_log(s->log, RTX_SERVING_LOG_ERROR, "cannot save learned inference costs",
                         "error", "out of memory", NULL);
    for (int i = 0; i < k; i++) {
        cost_take(s, ms[i], all);
        rtx_model_unref(ms[i]);
    }
    rtx_free(ms);
    cost_write(s);
}

/* At a version's first load in this process (its statistics record holds no cost yet): the
 * record gets the book's learned cost for the version, so its scheduler starts from it. */
static void cost_seed(struct rtx_serving *s, struct rtx__stats_rec *rec, const char *name,
                      int64_t version) {
    pthread_mutex_lock(&rec->mu);
    bool have = rec->cost_ema_ns > 0;
    pthread_mutex_unlock(&rec->mu);
    int64_t ema, samples;
    if (have || !rtx_devices_cost_get(s->devices, RTX__COST_DEVICE,
                                      rtx__model_cost_key(name, version), &ema, &samples))
        return;
    if (ema <= 0 || samples < 1) return; /* nothing the scheduler could use */
    pthread_mutex_lock(&rec->mu);
    rec->cost_ema_ns = ema;
    rec->cost_samples = samples;
    pthread_mutex_unlock(&rec->mu);
}

/* ------------------------------------------------------------------------------------------
 * Load and unload (under s->op_mu)
 * ---------------------------------------------------------------------------------------- */

/* Which versions the policy picks among those present. */
static int pick_versions(const struct rtx__model_config *c, const int64_t *have, int n_have,
                         int64_t *out, const char *mdir, struct rtx_err *err) {
    int n = 0;
    if (n_have == 0)
        return rtx_err_set(err, RTX_ENOTFOUND, "%s: no version directory (1, 2, ...)", mdir);
    switch (c->policy) {
    case RTX__POLICY_LATEST:
        for (int i = n_have - c->latest_n < 0 ? 0 : n_have - c->latest_n; i < n_have; i++)
            out[n++] = have[i];
        break;
    case RTX__POLICY_ALL:
        for (int i = 0; i < n_have; i++)
            out[n++] = have[i];
        break;
    case RTX__POLICY_SPECIFIC:
        for (int k = 0; k < c->n_versions; k++) {
            bool found = false;
            for (int i = 0; i < n_have && !found; i++)
                found = have[i] == c->versions[k];
            if (!found)
                return rtx_err_set(err, RTX_ENOTFOUND,
                                   "%s: version %lld (version_policy.specific) has no directory",
                                   mdir, (long long)c->versions[k]);
            out[n++] = c->versions[k];
        }
        qsort(out, (size_t)n, sizeof *out, cmp_i64);
        break;
    }
    return n;
}

static void set_state(struct rtx_serving *s, struct entry *e, enum rtx_model_state st,
                      const char *reason) {
    pthread_mutex_lock(&s->mu);
    e->state = st;
    snprintf(e->reason, sizeof e->reason, "%s", reason ? reason : "");
    pthread_mutex_unlock(&s->mu);
}

/* Stops and releases versions taken out of an entry; their lane counters are kept and their
 * changed learned costs saved. */
static void release_versions(struct rtx_serving *s, struct rtx_model **ms, int n,
                             bool fail_queued) {
    struct rtx_sched_stats *st = n > 0 ? rtx_malloc(sizeof *st) : NULL;
    for (int i = 0; i < n; i++) {
        rtx__model_stop(ms[i], fail_queued);
        cost_take(s, ms[i], false);
        if (st) {
            rtx__model_lanes(ms[i], rtx_mono_ns(), st);
            pthread_mutex_lock(&s->mu);
            for (int l = 0; l < st->n_lanes && l < RTX_SCHED_MAX_LANES; l++)
                for (int c = 0; c < RTX_SCHED_CTR_COUNT; c++)
                    s->retired[l][c] += st->lanes[l].counters[c];
            pthread_mutex_unlock(&s->mu);
        }
        rtx_model_unref(ms[i]);
    }
    rtx_free(st);
    cost_write(s);
}

/* Versions loaded with lane settings that a SIGHUP changed meanwhile take the new ones
 * before they serve. Under s->mu. A version that cannot (out of memory) serves with the
 * settings it was loaded with; that is logged. */
static void catch_up_lanes(struct rtx_serving *s, const char *name, struct rtx_model **loaded,
                           int n_loaded) {
    for (int i = 0; i < n_loaded; i++) {
        struct rtx_err err = {0};
        if (rtx__model_reconfigure(loaded[i], &s->sched, &err) != 0)
            rtx__serving_log(s->log, RTX_SERVING_LOG_ERROR,
                             "a new version keeps the lane settings it was loaded with", "model",
                             name, "error", err.msg, NULL);
    }
}

static int do_load(struct rtx_serving *s, const char *name, const char *config_json,
                   bool at_start, struct rtx_err *err) {
    char mdir[4400], vdir[4600];
    if (!valid_name(name))
        return rtx_err_set(err, RTX_ENOTFOUND, "'%.128s' is not a model name", name ? name : "");
    snprintf(mdir, sizeof mdir, "%s/%s", s->repo, name);
    if (!is_dir(mdir))
        return rtx_err_set(err, RTX_ENOTFOUND, "model '%s' is not in the repository %s", name,
                           s->repo);
    uint64_t sig = model_signature(s->repo, name);
    pthread_mutex_lock(&s->mu);
    struct entry *e = find_entry(s, name);
    if (!e) e = add_entry(s, name);
    if (e) {
        e->sig = sig;
        e->at_start |= at_start;
        if (e->n_ready == 0) {
            e->state = RTX_MODEL_LOADING;
            e->reason[0] = '\0';
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (!e) return rtx_err_set(err, RTX_ENOMEM, "out of memory loading '%s'", name);
    pthread_mutex_lock(&s->mu);
    struct rtx_sched_config sched = s->sched; /* a SIGHUP may change it while we load */
    uint64_t sched_gen = s->sched_gen;
    pthread_mutex_unlock(&s->mu);

    struct rtx__model_config *cfg = rtx_calloc(1, sizeof *cfg);
    struct rtx_model *loaded[RTX__MAX_VERSIONS];
    int n_loaded = 0, rc = 0;
    int64_t have[RTX__MAX_VERSIONS], want[RTX__MAX_VERSIONS], failed = 0;
    if (!cfg) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory loading '%s'", name);
        goto done;
    }
    if ((rc = rtx__model_config_read(mdir, name, config_json, s->log, cfg, err))) goto done;
    int n_have = list_versions(mdir, have, RTX__MAX_VERSIONS);
    if (n_have < 0) {
        rc = rtx_err_set(err, RTX_EIO, "%s: %s", mdir, strerror(-n_have));
        goto done;
    }
    int n_want = pick_versions(cfg, have, n_have, want, mdir, err);
    if (n_want < 0) {
        rc = n_want;
        goto done;
    }
    for (int i = 0; i < n_want; i++) {
        pthread_mutex_lock(&s->mu);
        struct rtx__stats_rec *rec = stats_rec(s, name, want[i]);
        pthread_mutex_unlock(&s->mu);
        if (!rec) {
            rc = rtx_err_set(err, RTX_ENOMEM, "out of memory loading '%s'", name);
            failed = want[i];
            break;
        }
        cost_seed(s, rec, name, want[i]);
        snprintf(vdir, sizeof vdir, "%s/%lld", mdir, (long long)want[i]);
        struct rtx__model_load_opts o = {
            .dir = vdir, .cfg = cfg, .version = want[i], .limits = &s->limits,
            .devices = s->devices, .cpu_threads = s->cpu_threads, .max_queue = s->max_queue,
            .stats = rec, .sched = &sched, .default_lane = s->default_lane, .log = s->log,
        };
        if ((rc = rtx__model_load(&o, &loaded[n_loaded], err))) {
            failed = want[i];
            break;
        }
        n_loaded++;
    }
done:
    rtx_free(cfg);
    if (rc) {
        release_versions(s, loaded, n_loaded, true);
        pthread_mutex_lock(&s->mu);
        bool serving = e->n_ready > 0;
        if (!serving) {
            e->state = RTX_MODEL_UNAVAILABLE;
            snprintf(e->reason, sizeof e->reason, "%.*s", (int)(sizeof e->reason) - 1, err ? err->msg : rtx_strerror(rc));
            e->failed_version = failed;
        }
        pthread_mutex_unlock(&s->mu);
        if (err && serving) rtx_err_prefix(err, "reload of '%s' failed, the loaded version "
                                           "keeps serving", name);
        rtx__serving_log(s->log, RTX_SERVING_LOG_ERROR,
                         serving ? "model reload failed" : "model load failed", "model", name,
                         "error", err ? err->msg : rtx_strerror(rc), NULL);
        return rc;
    }
    struct rtx_model *old[RTX__MAX_VERSIONS];
    pthread_mutex_lock(&s->mu);
    if (s->sched_gen != sched_gen) catch_up_lanes(s, name, loaded, n_loaded);
    int n_old = e->n_ready;
    memcpy(old, e->ready, sizeof old[0] * (size_t)n_old);
    memcpy(e->ready, loaded, sizeof loaded[0] * (size_t)n_loaded);
    e->n_ready = n_loaded;
    for (int i = 0; i < n_loaded; i++)
        stats_rec(s, name, rtx_model_info(loaded[i])->version)->used = true; /* exists */
    e->state = RTX_MODEL_READY;
    e->reason[0] = '\0';
    e->failed_version = 0;
    pthread_mutex_unlock(&s->mu);
    release_versions(s, old, n_old, false);
    const struct rtx_model_info *info = rtx_model_info(loaded[n_loaded - 1]);
    char vs[32], ni[16];
    snprintf(vs, sizeof vs, "%lld", (long long)info->version);
    snprintf(ni, sizeof ni, "%d", info->instances);
    rtx__serving_log(s->log, RTX_SERVING_LOG_INFO, n_old ? "model reloaded" : "model loaded",
                     "model", name, "version", vs, "instances", ni, "kind", info->instance_kind,
                     NULL);
    return 0;
}

/* Takes every version out of the entry and releases it (queued requests run first). */
static int do_unload(struct rtx_serving *s, const char *name, struct rtx_err *err) {
    pthread_mutex_lock(&s->mu);
    struct entry *e = valid_name(name) ? find_entry(s, name) : NULL;
    struct rtx_model *old[RTX__MAX_VERSIONS];
    int n_old = 0;
    if (e) {
        n_old = e->n_ready;
        memcpy(old, e->ready, sizeof old[0] * (size_t)n_old);
        e->n_ready = 0;
        e->state = RTX_MODEL_UNLOADING;
        e->reason[0] = '\0';
    }
    pthread_mutex_unlock(&s->mu);
    if (!e) {
        char mdir[4400];
        snprintf(mdir, sizeof mdir, "%s/%s", s->repo, name ? name : "");
        if (valid_name(name) && is_dir(mdir)) return 0; /* in the repository, never loaded */
        return rtx_err_set(err, RTX_ENOTFOUND, "unknown model '%.128s'", name ? name : "");
    }
    release_versions(s, old, n_old, false);
    set_state(s, e, RTX_MODEL_UNAVAILABLE, "unloaded");
    if (n_old)
        rtx__serving_log(s->log, RTX_SERVING_LOG_INFO, "model unloaded", "model", name, NULL);
    return 0;
}

int rtx_serving_load(struct rtx_serving *s, const char *name, const char *config_json,
                     struct rtx_err *err) {
    if (!s) return rtx_err_set(err, RTX_EINVAL, "load: no server");
    if (s->control != RTX_MODEL_CONTROL_EXPLICIT)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "explicit model load is not allowed in model control mode %s",
                           rtx_model_control_name(s->control));
    pthread_mutex_lock(&s->op_mu);
    int rc = s->stopping ? rtx_err_set(err, RTX_EUNAVAILABLE, "server shutting down")
                         : do_load(s, name, config_json, false, err);
    pthread_mutex_unlock(&s->op_mu);
    return rc;
}

int rtx_serving_unload(struct rtx_serving *s, const char *name, struct rtx_err *err) {
    if (!s) return rtx_err_set(err, RTX_EINVAL, "unload: no server");
    if (s->control != RTX_MODEL_CONTROL_EXPLICIT)
        return rtx_err_set(err, RTX_EUNSUPPORTED,
                           "explicit model unload is not allowed in model control mode %s",
                           rtx_model_control_name(s->control));
    pthread_mutex_lock(&s->op_mu);
    int rc = s->stopping ? rtx_err_set(err, RTX_EUNAVAILABLE, "server shutting down")
                         : do_unload(s, name, err);
    pthread_mutex_unlock(&s->op_mu);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Poll mode
 * ---------------------------------------------------------------------------------------- */

/* One pass: loads new and changed models, unloads removed ones. Under op_mu. */
static void poll_pass(struct rtx_serving *s) {
    char **names = NULL;
    int n = 0;
    struct rtx_err err = {0};
    if (list_models(s->repo, &names, &n, &err) != 0) {
        rtx__serving_log(s->log, RTX_SERVING_LOG_ERROR, "model repository poll failed", "error",
                         err.msg, NULL);
        return;
    }
    for (int i = 0; i < n; i++) {
        uint64_t sig = model_signature(s->repo, names[i]);
        pthread_mutex_lock(&s->mu);
        struct entry *e = find_entry(s, names[i]);
        bool changed = !e || e->sig != sig;
        pthread_mutex_unlock(&s->mu);
        if (changed) do_load(s, names[i], NULL, false, &err);
    }
    /* entries whose directory went away */
    char gone[128];
    for (;;) {
        gone[0] = '\0';
        pthread_mutex_lock(&s->mu);
        for (int k = 0; k < s->n_entries && !gone[0]; k++) {
            struct entry *e = s->entries[k];
            bool present = false;
            for (int i = 0; i < n && !present; i++)
                present = strcmp(names[i], e->name) == 0;
            if (!present && (e->n_ready > 0 || e->sig != 0)) {
                snprintf(gone, sizeof gone, "%s", e->name);
                e->sig = 0;
            }
        }
        pthread_mutex_unlock(&s->mu);
        if (!gone[0]) break;
        do_unload(s, gone, &err);
    }
    free_names(names, n);
}

/* The housekeeping thread: a poll pass every poll_ms (poll mode) and a save of the changed
 * learned costs every COST_SAVE_MS. */
static void *poll_main(void *arg) {
    struct rtx_serving *s = arg;
    rtx_thread_name("rtx-models-poll");
    const int64_t poll_ns = (int64_t)s->poll_ms * 1000000, save_ns = COST_SAVE_MS * 1000000LL;
    bool polls = s->control == RTX_MODEL_CONTROL_POLL;
    int64_t next_poll = polls ? rtx_mono_ns() + poll_ns : INT64_MAX;
    int64_t next_save = rtx_mono_ns() + save_ns;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        int64_t until = next_poll < next_save ? next_poll : next_save;
        struct timespec ts = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
        pthread_cond_timedwait(&s->poll_cv, &s->mu, &ts);
        int64_t now = rtx_mono_ns();
        bool poll = now >= next_poll, save = now >= next_save;
        if (s->stopping || (!poll && !save)) continue;
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&s->op_mu);
        pthread_mutex_lock(&s->mu);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (poll && !stopping) poll_pass(s);
        if (save && !stopping) costs_save_loaded(s);
        pthread_mutex_unlock(&s->op_mu);
        if (poll) next_poll = rtx_mono_ns() + poll_ns;
        if (save) next_save = rtx_mono_ns() + save_ns;
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Start and stop
 * ---------------------------------------------------------------------------------------- */

/* A device became unhealthy (device/device.h's fault listener, called without any device
 * lock): wakes the workers of every READY version, so those on it stop taking batches and,
 * where no instance is left on a healthy device, fail what is queued at once. */
static void on_fault(void *ctx, struct rtx_device *d, const char *why) {
    struct rtx_serving *s = ctx;
    (void)d;
    (void)why;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_entries; i++)
        for (int k = 0; k < s->entries[i]->n_ready; k++)
            rtx__model_wake(s->entries[i]->ready[k]);
    pthread_mutex_unlock(&s->mu);
}

static void serving_free(struct rtx_serving *s) {
    if (s->fault_listening) rtx_devices_off_fault(s->devices, on_fault, s);
    for (int i = 0; i < s->n_entries; i++)
        rtx_free(s->entries[i]);
    rtx_free(s->entries);
    while (s->stats) {
        struct rtx__stats_rec *r = s->stats;
        s->stats = r->next;
        pthread_mutex_destroy(&r->mu);
        rtx_free(r);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->op_mu);
    pthread_cond_destroy(&s->poll_cv);
    rtx_free(s->repo);
    rtx_free(s);
}

int rtx_serving_start(const struct rtx_serving_options *opt, struct rtx_serving **out,
                      struct rtx_err *err) {
    *out = NULL;
    if (!opt || !opt->repository)
        return rtx_err_set(err, RTX_EINVAL, "serving: no options or no repository");
    if ((unsigned)opt->control >= RTX_MODEL_CONTROL_COUNT)
        return rtx_err_set(err, RTX_EINVAL, "serving: bad model control mode %d",
                           (int)opt->control);
    if (opt->control == RTX_MODEL_CONTROL_POLL && opt->poll_ms < 1)
        return rtx_err_set(err, RTX_EINVAL, "serving: poll_ms must be >= 1");
    if (!opt->devices) return rtx_err_set(err, RTX_EINVAL, "serving: no device set");
    if (opt->max_queue < 1) return rtx_err_set(err, RTX_EINVAL, "serving: max_queue must be >= 1");
    if (opt->n_startup_models < 0 || (opt->n_startup_models > 0 && !opt->startup_models))
        return rtx_err_set(err, RTX_EINVAL, "serving: bad startup model list");
    struct rtx_sched_config sc;
    if (opt->sched)
        sc = *opt->sched;
    else
        rtx_sched_config_init(&sc);
    int rc = rtx_sched_config_check(&sc, err);
    if (rc) {
        rtx_err_prefix(err, "serving");
        return rc;
    }
    int default_lane = sc.n_lanes - 1;
    if (opt->default_lane && opt->default_lane[0]) {
        default_lane = -1;
        for (int i = 0; i < sc.n_lanes && default_lane < 0; i++)
            if (strcmp(sc.lanes[i].name, opt->default_lane) == 0) default_lane = i;
        if (default_lane < 0)
            return rtx_err_set(err, RTX_EINVAL, "serving: default lane '%.64s' is not a lane",
                               opt->default_lane);
    }
    errno = 0;
    if (opt->repository[0] && !is_dir(opt->repository))
        return rtx_err_set(err, RTX_EIO, "model repository %s: %s", opt->repository,
                           errno ? strerror(errno) : "not a directory");
    struct rtx_serving *s = rtx_calloc(1, sizeof *s);
    if (!s || !(s->repo = rtx_strdup(opt->repository))) {
        rtx_free(s);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory starting serving");
    }
    s->control = opt->control;
    s->poll_ms = opt->poll_ms;
    s->limits = opt->limits.max_nodes ? opt->limits : rtx_limits_default();
    s->devices = opt->devices;
    s->cpu_threads = opt->cpu_threads > 0 ? opt->cpu_threads : 0;
    s->max_queue = opt->max_queue;
    s->sched = sc;
    s->default_lane = default_lane;
    s->log = opt->log;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->op_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->poll_cv, &ca);
    pthread_condattr_destroy(&ca);
    if ((rc = rtx_devices_on_fault(s->devices, on_fault, s, err))) {
        serving_free(s);
        return rc;
    }
    s->fault_listening = true;
    if (!s->repo[0]) {
        *out = s;
        return 0;
    }
    char **names = NULL;
    int n = 0;
    rc = list_models(s->repo, &names, &n, err);
    if (rc) {
        serving_free(s);
        return rc;
    }
    bool all = s->control != RTX_MODEL_CONTROL_EXPLICIT;
    for (int k = 0; k < opt->n_startup_models && !all; k++)
        all = opt->startup_models[k] && strcmp(opt->startup_models[k], "*") == 0;
    pthread_mutex_lock(&s->op_mu);
    struct rtx_err lerr = {0};
    if (all) {
        for (int i = 0; i < n; i++)
            do_load(s, names[i], NULL, true, &lerr);
    } else {
        for (int k = 0; k < opt->n_startup_models; k++) {
            const char *m = opt->startup_models[k] ? opt->startup_models[k] : "";
            if (do_load(s, m, NULL, true, &lerr) == RTX_ENOTFOUND) {
                /* not in the repository: listed UNAVAILABLE, and the server is not ready */
                pthread_mutex_lock(&s->mu);
                struct entry *e = valid_name(m) ? (find_entry(s, m) ? find_entry(s, m)
                                                                    : add_entry(s, m))
                                                : NULL;
                if (e) {
                    e->state = RTX_MODEL_UNAVAILABLE;
                    e->at_start = true;
                    snprintf(e->reason, sizeof e->reason, "%.*s", (int)(sizeof e->reason) - 1, lerr.msg);
                }
                pthread_mutex_unlock(&s->mu);
                rtx__serving_log(s->log, RTX_SERVING_LOG_ERROR, "startup model not loaded",
                                 "model", m, "error", lerr.msg, NULL);
            }
        }
    }
    pthread_mutex_unlock(&s->op_mu);
    free_names(names, n);
    if (pthread_create(&s->poller, NULL, poll_main, s) != 0) {
        rtx_serving_stop(s);
        return rtx_err_set(err, RTX_ENOMEM, "cannot start the repository housekeeping thread");
    }
    s->poll_started = true;
    *out = s;
    return 0;
}

void rtx_serving_stop(struct rtx_serving *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->poll_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->poll_started) pthread_join(s->poller, NULL);
    pthread_mutex_lock(&s->op_mu);
    for (int i = 0; i < s->n_entries; i++) {
        struct entry *e = s->entries[i];
        pthread_mutex_lock(&s->mu);
        struct rtx_model *old[RTX__MAX_VERSIONS];
        int n_old = e->n_ready;
        memcpy(old, e->ready, sizeof old[0] * (size_t)n_old);
        e->n_ready = 0;
        pthread_mutex_unlock(&s->mu);
        release_versions(s, old, n_old, true);
    }
    pthread_mutex_unlock(&s->op_mu);
    serving_free(s);
}

/* ------------------------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------------------------- */

/* The version asked for among an entry's READY ones (under s->mu), or NULL. */
static struct rtx_model *pick_ready(const struct entry *e, int64_t version) {
    if (e->n_ready == 0) return NULL;
    if (version <= 0) return e->ready[e->n_ready - 1];
    for (int i = 0; i < e->n_ready; i++)
        if (rtx_model_info(e->ready[i])->version == version) return e->ready[i];
    return NULL;
}

int rtx_serving_model_get(struct rtx_serving *s, const char *name, int64_t version,
                          struct rtx_model **out, struct rtx_err *err) {
    *out = NULL;
    if (!s || !name) return rtx_err_set(err, RTX_EINVAL, "model get: no server or name");
    pthread_mutex_lock(&s->mu);
    struct entry *e = s->stopping ? NULL : find_entry(s, name);
    int rc = 0;
    if (s->stopping) {
        rc = rtx_err_set(err, RTX_EUNAVAILABLE, "server shutting down");
    } else if (!e) {
        rc = rtx_err_set(err, RTX_ENOTFOUND, "unknown model '%.128s'", name);
    } else {
        struct rtx_model *m = pick_ready(e, version);
        if (m)
            *out = rtx__model_ref(m);
        else if (e->n_ready > 0)
            rc = rtx_err_set(err, RTX_ENOTFOUND, "model '%s' has no version %lld loaded", name,
                             (long long)version);
        else
            rc = rtx_err_set(err, RTX_EUNAVAILABLE, "model '%s' is %s%s%s", name,
                             rtx_model_state_name(e->state), e->reason[0] ? ": " : "",
                             e->reason);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

bool rtx_serving_model_ready(struct rtx_serving *s, const char *name, int64_t version) {
    if (!s || !name) return false;
    pthread_mutex_lock(&s->mu);
    struct entry *e = find_entry(s, name);
    struct rtx_model *m = s->stopping || !e ? NULL : pick_ready(e, version);
    bool ok = m && rtx__model_healthy(m, NULL, 0) == 0;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

bool rtx_serving_ready(struct rtx_serving *s) {
    if (!s) return false;
    pthread_mutex_lock(&s->mu);
    bool ok = !s->stopping;
    for (int i = 0; i < s->n_entries && ok; i++)
        if (s->entries[i]->at_start &&
            (s->entries[i]->n_ready == 0 || rtx__model_healthy(pick_ready(s->entries[i], 0),
                                                               NULL, 0)))
            ok = false;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

int rtx_serving_index(struct rtx_serving *s, bool ready_only,
                      struct rtx_model_index_entry **entries, int *n, struct rtx_err *err) {
    *entries = NULL;
    *n = 0;
    if (!s) return rtx_err_set(err, RTX_EINVAL, "index: no server");
    char **names = NULL;
    int nn = 0, rc = 0;
    if (s->repo[0] && (rc = list_models(s->repo, &names, &nn, err))) return rc;
    pthread_mutex_lock(&s->mu);
    int cap = nn + s->n_entries;
    struct rtx_model_index_entry *out = rtx_calloc((size_t)cap + 1, sizeof *out);
    if (!out) {
        pthread_mutex_unlock(&s->mu);
        free_names(names, nn);
        return rtx_err_set(err, RTX_ENOMEM, "out of memory listing models");
    }
    int m = 0, i = 0, k = 0;
    while (i < nn || k < s->n_entries) { /* merge two sorted lists */
        int c = i == nn ? 1 : k == s->n_entries ? -1 : strcmp(names[i], s->entries[k]->name);
        struct rtx_model_index_entry x = {0};
        if (c < 0) { /* in the directory, never loaded */
            snprintf(x.name, sizeof x.name, "%s", names[i++]);
            x.state = RTX_MODEL_UNKNOWN;
        } else {
            const struct entry *e = s->entries[k++];
            if (c == 0) i++;
            snprintf(x.name, sizeof x.name, "%s", e->name);
            x.state = e->n_ready > 0 ? RTX_MODEL_READY : e->state;
            x.version = e->n_ready > 0 ? rtx_model_info(e->ready[e->n_ready - 1])->version
                                       : e->failed_version;
            if (x.state == RTX_MODEL_UNAVAILABLE)
                snprintf(x.reason, sizeof x.reason, "%s", e->reason);
        }
        if (!ready_only || x.state == RTX_MODEL_READY) out[m++] = x;
    }
    pthread_mutex_unlock(&s->mu);
    free_names(names, nn);
    *entries = out;
    *n = m;
    return 0;
}

int rtx_serving_stats(struct rtx_serving *s, const char *name, int64_t version,
                      struct rtx_model_stats **out, int *n, struct rtx_err *err) {
    *out = NULL;
    *n = 0;
    if (!s) return rtx_err_set(err, RTX_EINVAL, "stats: no server");
    bool all = !name || !name[0];
    pthread_mutex_lock(&s->mu);
    int cap = 0;
    bool known = all || find_entry(s, name) != NULL;
    for (struct rtx__stats_rec *r = s->stats; r; r = r->next)
        if (r->used && (all || (strcmp(r->st.name, name) == 0 &&
                                (version <= 0 || r->st.version == version))))
            cap++;
    struct rtx_model_stats *st = rtx_calloc((size_t)cap + 1, sizeof *st);
    int rc = 0;
    if (!known) {
        rc = rtx_err_set(err, RTX_ENOTFOUND, "unknown model '%.128s'", name);
    } else if (!all && version > 0 && cap == 0) {
        rc = rtx_err_set(err, RTX_ENOTFOUND, "model '%s' has no version %lld", name,
                         (long long)version);
    } else if (!st) {
        rc = rtx_err_set(err, RTX_ENOMEM, "out of memory reading statistics");
    } else {
        int m = 0;
        for (struct rtx__stats_rec *r = s->stats; r; r = r->next) {
            if (!r->used || !(all || (strcmp(r->st.name, name) == 0 &&
                                      (version <= 0 || r->st.version == version))))
                continue;
            pthread_mutex_lock(&r->mu);
            st[m] = r->st;
            pthread_mutex_unlock(&r->mu);
            const struct entry *e = find_entry(s, r->st.name);
            st[m].pending = 0;
            for (int i = 0; e && i < e->n_ready; i++)
                if (rtx_model_info(e->ready[i])->version == r->st.version)
                    st[m].pending = rtx__model_pending(e->ready[i]);
            m++;
        }
        *out = st;
        *n = m;
        st = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    rtx_free(st);
    return rc;
}

void rtx_serving_memory(struct rtx_serving *s, struct rtx_serving_memory *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    int nd = rtx_devices_count(s->devices) - 1; /* CUDA devices: slots after the CPU's */
    out->n_devices = nd < 16 ? nd : 16;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_entries; i++)
        for (int k = 0; k < s->entries[i]->n_ready; k++)
            rtx__model_memory(s->entries[i]->ready[k], &out->host_bytes, out->n_devices,
                              out->device_bytes);
    pthread_mutex_unlock(&s->mu);
}

/* The READY versions, each with a reference, in entry order (*n of them; rtx_malloc'ed, NULL
 * when none or out of memory: *n < 0). Under s->mu. */
static struct rtx_model **ready_versions(struct rtx_serving *s, int *n) {
    int k = 0;
    for (int i = 0; i < s->n_entries; i++)
        k += s->entries[i]->n_ready;
    *n = 0;
    if (k == 0) return NULL;
    struct rtx_model **ms = rtx_malloc((size_t)k * sizeof *ms);
    if (!ms) {
        *n = -1;
        return NULL;
    }
    for (int i = 0; i < s->n_entries; i++)
        for (int v = 0; v < s->entries[i]->n_ready; v++)
            ms[(*n)++] = rtx__model_ref(s->entries[i]->ready[v]);
    return ms;
}

int rtx_serving_reconfigure(struct rtx_serving *s, const struct rtx_sched_config *sched,
                            struct rtx_err *err) {
    if (!s || !sched) return rtx_err_set(err, RTX_EINVAL, "serving: no server or no lanes");
    int rc = rtx_sched_config_check(sched, err);
    if (rc) return rtx_err_prefix(err, "serving");
    pthread_mutex_lock(&s->mu);
    bool same = sched->n_lanes == s->sched.n_lanes;
    for (int l = 0; same && l < sched->n_lanes; l++)
        same = strcmp(sched->lanes[l].name, s->sched.lanes[l].name) == 0;
    int n = 0, done = 0;
    struct rtx_model **ms = same ? ready_versions(s, &n) : NULL;
    if (!same)
        rc = rtx_err_set(err, RTX_EINVAL,
                         "serving: the lanes differ from the running ones "
                         "(names and order change only at restart)");
    else if (n < 0)
        rc = rtx_err_set(err, RTX_ENOMEM, "serving: out of memory listing the versions");
    for (; rc == 0 && done < n; done++)
        rc = rtx__model_reconfigure(ms[done], sched, err);
    if (rc == 0) {
        s->sched = *sched;
        s->sched_gen++;
    } else {
        /* the versions already changed go back; their storage only grew, so this succeeds */
        for (int i = 0; i < done - 1; i++)
            rtx__model_reconfigure(ms[i], &s->sched, NULL);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++)
        rtx_model_unref(ms[i]);
    rtx_free(ms);
    return rc;
}

void rtx_serving_lanes(struct rtx_serving *s, struct rtx_sched_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    struct rtx_sched_stats *st = rtx_malloc(sizeof *st);
    int64_t now = rtx_mono_ns();
    out->batch_delay_factor = 1.0;
    pthread_mutex_lock(&s->mu); /* s->sched changes on a reload */
    out->n_lanes = s->sched.n_lanes;
    for (int l = 0; l < out->n_lanes; l++)
        out->lanes[l].config = s->sched.lanes[l];
    for (int i = 0; i < out->n_lanes; i++)
        for (int c = 0; c < RTX_SCHED_CTR_COUNT; c++)
            out->lanes[i].counters[c] = s->retired[i][c];
    for (int i = 0; st && i < s->n_entries; i++) {
        for (int k = 0; k < s->entries[i]->n_ready; k++) {
            rtx__model_lanes(s->entries[i]->ready[k], now, st);
            out->executors += st->executors;
            out->running += st->running;
            if (st->brownout_level > out->brownout_level) out->brownout_level = st->brownout_level;
            out->brownout_entries += st->brownout_entries;
            out->brownout_exits += st->brownout_exits;
            if (st->batch_delay_factor < out->batch_delay_factor)
                out->batch_delay_factor = st->batch_delay_factor;
            out->cost_keys += st->cost_keys;
            out->cost_keys_dropped += st->cost_keys_dropped;
            for (int l = 0; l < st->n_lanes && l < out->n_lanes; l++) {
                struct rtx_sched_lane_stats *a = &out->lanes[l];
                const struct rtx_sched_lane_stats *b = &st->lanes[l];
                a->queued += b->queued;
                a->delayed += b->delayed;
                a->running += b->running;
                a->queued_work_ns += b->queued_work_ns;
                if (b->est_delay_ns > a->est_delay_ns) a->est_delay_ns = b->est_delay_ns;
                if (b->pressure > a->pressure) a->pressure = b->pressure;
                a->shed = a->shed || b->shed;
                for (int c = 0; c < RTX_SCHED_CTR_COUNT; c++)
                    a->counters[c] += b->counters[c];
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    rtx_free(st);
}
