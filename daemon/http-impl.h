/*
 * http-impl.h - internals of rtxd's HTTP server shared by its files: the server, pending work
 * and connection structs, and the answers and completions the endpoints use. http.c holds the
 * server (answers, pending work, connections, shutdown, start and stop); http-endpoints.c
 * holds the KServe v2 endpoints and the routing. Only those files include it.
 */
#ifndef RTX_DAEMON_HTTP_IMPL_H
#define RTX_DAEMON_HTTP_IMPL_H

#define H2O_USE_LIBUV 1
#include <h2o.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "daemon/http.h"

#define LINGER_MS 2000 /* after SHUT_RD, connections still open get SHUT_RDWR */
#define WATCH_MS 20    /* period of the check for HTTP/1 clients gone mid-request */

enum phase { PHASE_RUNNING, PHASE_DRAINING, PHASE_CLOSING, PHASE_DONE };

enum pending_kind { PENDING_INFER, PENDING_LOAD, PENDING_UNLOAD, PENDING_GEN };

struct rtx_http;
struct rtx__http_gen;     /* http-stream.c: a generation in flight */
struct rtx_http_gen_req; /* http-gen-impl.h */

/* Lives in the h2o request's pool; dispose runs when h2o frees the request. */
struct req_link {
    struct pending *p;
};

struct pending {
    struct rtx_http *h;
    enum pending_kind kind;
    struct pending *prev, *next; /* in h->inflight (loop thread) */
    struct pending *next_done;   /* in h->done (under h->mu) */
    h2o_req_t *req;              /* NULL once the client went away */
    struct req_link *link;
    struct conn *conn;           /* HTTP/1 inference: its connection, until that closes */
    volatile int cancel;
    struct rtx_http_infer *q; /* PENDING_INFER; freed by the completion */
    struct rtx_kserve_gen *kgen; /* PENDING_INFER on a generative model (the caller's
                                    reference): q is kept to the end */
    const struct rtx_model_info *kgen_model; /* valid while kgen holds its model */
    struct rtx__http_gen *gen; /* PENDING_GEN: answers itself (streamed or whole) */
    uv_work_t work;           /* PENDING_LOAD, PENDING_UNLOAD */
    char *model, *config_json;
    struct rtx_err err;
    int rc;
    /* the answer */
    int status;
    char *body; /* rtx_malloc'ed */
    size_t len;
    int64_t header_len; /* -1: JSON only */
};

struct conn {
    uv_tcp_t tcp; /* first: the close callback gets its address */
    struct rtx_http *h;
    struct conn *prev, *next;
    struct sockaddr_storage peer; /* the client's address, to find the conn of a request */
    int peer_len;
};

struct handler {
    h2o_handler_t super;
    struct rtx_http *h;
};

struct rtx_http {
    struct rtx_daemon *d;
    uv_loop_t *loop;     /* &own_loop, or the caller's */
    uv_loop_t own_loop;  /* run by `thread` when the caller gave no loop */
    bool own_thread;
    uv_thread_t thread;
    bool shut;           /* rtx_http_shutdown completed */
    uv_tcp_t listener;
    uv_async_t wake;
    uv_timer_t grace_timer, linger_timer, watch_timer;
    h2o_globalconf_t config;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;

    pthread_mutex_t mu; /* guards the fields up to finished */
    pthread_cond_t finished_cv;
    struct pending *done_head, *done_tail;
    struct rtx__http_gen *gen_ready; /* generations with news for the loop (http-stream.c) */
    bool stop_requested;
    int grace_ms;
    bool wake_closed;
    bool finished; /* every handle closed: the loop no longer needs this server */

    /* loop thread only */
    enum phase phase;
    int n_closing; /* handles closed whose callback has not run yet */
    struct pending *inflight;
    int n_inflight;
    struct conn *conns;
    int n_conns;
};

/* --- answers (http.c) --- */

/* Answers with status and body (NULL: none); header_len >= 0 adds the binary-tensor
 * Inference-Header-Content-Length header; a 429 gets Retry-After from the body's hint. */
void rtx__http_respond(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len,
                       int64_t header_len);
/* Answers with rtxd's {"error": msg} JSON. */
void rtx__http_respond_error(h2o_req_t *req, int status, const char *msg);
void rtx__http_respond_errf(h2o_req_t *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Answers with the HTTP status mapped from err->code and err->msg. */
void rtx__http_respond_err(h2o_req_t *req, const struct rtx_err *err);
/* Answers with j (taken) as JSON. */
void rtx__http_respond_json(h2o_req_t *req, int status, json_t *j);

/* --- pending work and completions (http.c) --- */

/* A pending for req, linked into h->inflight; NULL when out of memory. Loop thread. */
struct pending *rtx__http_pending_new(struct rtx_http *h, h2o_req_t *req, enum pending_kind kind);
/* Loop thread: unlinks p, answers its client if still there, frees it. */
void rtx__http_pending_finish(struct pending *p);
/* Sets p's answer to an error. */
void rtx__http_pending_error(struct pending *p, int status, const char *msg);
/* Loop thread: raises p's cancel flag (its client went away, or shutdown is true: the server's
 * grace ran out) and cancels a generation's engine requests at once. */
void rtx__http_pending_cancel(struct pending *p, bool shutdown);
/* The connection of an HTTP/1 request, by the peer address; NULL when not found. */
struct conn *rtx__http_conn_of(struct rtx_http *h, h2o_req_t *req);
/* The watch timer's callback: raises the cancel flag of HTTP/1 inferences whose client closed
 * its connection. */
void rtx__http_on_watch(uv_timer_t *t);
/* The serving core's completion of an inference (a worker thread): renders the answer and
 * queues the pending for the loop. */
void rtx__http_on_infer_done(void *ctx, const struct rtx_infer_result *res);
/* Any thread: queues p, its answer set, for the loop to finish. */
void rtx__http_pending_done(struct pending *p);
/* Loop thread: the client of p went away (or, shutdown, the grace is over): raises its
 * cancel flag and cancels its generation at once. */
void rtx__http_pending_cancel(struct pending *p, bool shutdown);

/* --- generative models (http-infer-gen.c) --- */

/* Starts inference request p->q on generative model m: one answer with the whole text,
 * rendered on the engine's thread when the generation ends. On 0 the generation took over
 * the model reference and will complete p (rtx__http_pending_done); on error the caller
 * keeps both and answers. Loop thread. */
int rtx__http_infer_gen(struct pending *p, struct rtx_model *m, int64_t deadline_ns,
                        struct rtx_err *err);
/* Loop thread: moves the shutdown on when what it waits for is done. */
void rtx__http_check_progress(struct rtx_http *h);

/* --- generation (http-stream.c, http-openai.c) --- */

/* Starts generating q (taken) on model m (the caller's reference, taken) for req: submits one
 * engine request per prompt and answers when they end (a whole answer) or as they go (an
 * event stream); an error before anything was sent is answered in q's API shape. lane: the
 * x-rtx-lane header (NULL: none); q->lane, the body's, wins. Loop thread. */
void rtx__http_gen_start(struct rtx_http *h, h2o_req_t *req, struct rtx_model *m,
                         struct rtx_http_gen_req *q, const char *lane);
/* Loop thread: cancels g's engine requests (the client went away, or shutdown: the error
 * event then says that the server is shutting down) and has the loop look at g again. */
void rtx__http_gen_cancel(struct rtx__http_gen *g, bool shutdown);
/* Loop thread (on_wake): takes the generations with news and moves each on. */
void rtx__http_gen_drain(struct rtx_http *h);
/* Answers an error in api's shape (OpenAI's or Triton's generate). */
void rtx__http_gen_respond_error(h2o_req_t *req, int api, int status, const char *msg,
                                 const char *param);

/* --- endpoints and routing (http-endpoints.c) --- */

/* h2o's handler for every request: routes on the normalized path. */
int rtx__http_on_req(h2o_handler_t *self, h2o_req_t *req);
/* Whether the method is `want` (GET also takes HEAD); else answers 405 and returns false. */
bool rtx__http_method_is(h2o_req_t *req, const char *want);

/* --- OpenAI and Triton generate endpoints (http-openai.c) --- */

/* /v1/...: completions, chat/completions, models, models/{id}. seg: the path's segments
 * after "v1" (n of them). */
void rtx__http_route_openai(struct rtx_http *h, h2o_req_t *req, int n, const char *const *seg);
/* POST /v2/models/{m}[/versions/{v}]/generate or /generate_stream. */
void rtx__http_post_generate(struct rtx_http *h, h2o_req_t *req, const char *name,
                             int64_t version, bool stream);

#endif /* RTX_DAEMON_HTTP_IMPL_H */
