/*
 * test-serving-util.h - what the serving test files (tests/unit/test-serving*.c) share: model
 * repositories written into temporary directories with the "scale" test model (struct serving_fx,
 * which also holds the device set the server runs on), requests with a recording callback
 * (struct call) and the checks of their answers. Private to those files.
 *
 * The test model "scale": y = a * w + b and z = a - b on f32 [batch, 4], with w [4] a weight
 * in model.safetensors. Every op is elementwise, so rows are computed independently and
 * batched results must equal unbatched ones bit for bit.
 */
#ifndef RTX_TEST_SERVING_UTIL_H
#define RTX_TEST_SERVING_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "serving/serving-impl.h"

extern const float scale_w[4];

struct serving_fx {
    char repo[64];
    struct rtx_serving *s;
    struct rtx_devices *devices; /* the CPU only, one thread per backend */
};

/* What a callback saw. `gate`: when set, the callback blocks until it is cleared (so the
 * worker stays busy and later requests wait in the queue). */
struct call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int code;
    char msg[1024];
    int batch_size;
    int64_t queue_ns;
    int n_outputs;
    float y[64 * 4], z[64 * 4];
    char out0[16];
    bool gate, entered;
};

/* Repositories (model directories with config.json, versions with model.rtxg and
 * model.safetensors; `extra` is appended inside config.json's object as ", ..."). */
void rm_tree(const char *dir);
void write_file(const char *path, const void *data, size_t len);
void write_text(const char *path, const char *text);
void write_weights(const char *dir, float factor);
void write_graph(const char *dir, bool with_weight_input);
void write_config(const char *repo, const char *name, int max_batch, const char *extra);
void write_version(const char *repo, const char *name, int version, float factor);
/* config.json of max_batch_size 8: inputs a (a_type) and b, one FP32 output `out` [out_dim]. */
void write_io_config(const char *repo, const char *name, const char *a_type, const char *out,
                     int out_dim);
void write_model(const char *repo, const char *name, int max_batch, const char *extra);
/* The fixture: fx_repo makes the directory and a CPU-only device set (serving_fx_devices replaces
 * it: NULL options mean one thread and a plan cache); fx_stop stops the server, frees the
 * set and removes the directory. */
void serving_fx_devices(struct serving_fx *f, const struct rtx_devices_options *o);
void fx_repo(struct serving_fx *f);
struct rtx_serving_options fx_opts(struct serving_fx *f, enum rtx_model_control c);
void fx_start_opts(struct serving_fx *f, const struct rtx_serving_options *o);
void fx_start(struct serving_fx *f, enum rtx_model_control c);
/* A new repository holding one model `name` (write_model), served with model control c. */
void fx_model(struct serving_fx *f, const char *name, int max_batch, const char *extra,
              enum rtx_model_control c);
void fx_stop(struct serving_fx *f);
/* Requests: on_done records into a struct call. */
void call_init(struct call *c);
void on_done(void *ctx, const struct rtx_infer_result *res);
void call_wait(struct call *c);
void call_wait_entered(struct call *c);
void call_open_gate(struct call *c);
void call_close(struct call *c);
struct rtx_tensor *make_input(int rows, float seed, bool is_b);
/* Submits a scale request of `rows` rows to the newest version of `name`, with the rest of
 * the request (id, deadline, cancel, priority, lane, callback) from tmpl; returns the code of
 * rtx_serving_infer (and its message in err). */
int submit_req(struct rtx_serving *s, const char *name, int rows, float seed,
               const struct rtx_infer_request *tmpl, struct rtx_err *err);
/* submit_req with id "req", the deadline, the cancel flag and on_done recording into c. */
int submit(struct rtx_serving *s, const char *name, int rows, float seed, struct call *c,
           int64_t deadline_ns, const volatile int *cancel, struct rtx_err *err);
/* submit() with a KServe priority, a lane name and a callback of one's own (id "lane"). */
int submit_lane(struct rtx_serving *s, const char *name, int rows, float seed,
                rtx_infer_done_fn done, void *ctx, int64_t deadline_ns, int priority,
                const char *lane, struct rtx_err *err);
/* Holds the only worker of `name` in the callback of a request of `rows` rows and KServe
 * priority `priority` (gate is initialised, gated, and entered on return; call_open_gate
 * releases it). */
void hold_worker(struct rtx_serving *s, const char *name, int rows, int priority,
                 struct call *gate);
void check_scale(const struct call *c, int rows, float seed, float factor);
struct rtx_model_stats get_stats(struct rtx_serving *s, const char *name);
enum rtx_model_state index_state(struct rtx_serving *s, const char *name, char *reason);
void sleep_ms(int ms);

#endif /* RTX_TEST_SERVING_UTIL_H */
