/*
 * http-stream.c - a generation in flight on rtxd's HTTP server (daemon/http-impl.h): the
 * engine requests of one HTTP request (one per prompt), their callbacks, and its answer,
 * whole or streamed as Server-Sent Events (chunked over HTTP/1.1, DATA frames over HTTP/2).
 *
 * DESIGN
 * The engine calls on_event and on_done on its thread. They render at once (http-gen-render.c)
 * into g->queued under g->mu and, when g is not already listed, put g on the server's
 * gen_ready list (under h->mu) and wake the loop; the engine never waits for the client. The
 * loop (rtx__http_gen_drain, from on_wake) takes each listed g and moves it on: a whole
 * answer, or an error before anything was streamed, goes out as one response with its status;
 * a stream starts its 200 response (h2o_start_response with our generator) at its first chunk
 * and hands h2o everything queued with h2o_send, then waits for h2o's proceed callback before
 * the next send: what the engine renders meanwhile piles up in g->queued (two buffers swap:
 * h2o reads one while the engine fills the other), so a slow client slows nothing but its own
 * memory. When every engine request ended (the last on_done rendered the end, or an error
 * event is due), the rest goes out with H2O_SEND_STATE_FINAL, copied into the request's pool,
 * which h2o frees when it has written it.
 *
 * A client that goes away (h2o disposes the request, HTTP/1's watch sees the socket closed)
 * cancels the engine requests at once (rtx__http_gen_cancel: the engine frees their blocks
 * within a step) and g is looked at again; what the engine still sends is dropped. Shutdown's
 * grace running out cancels them the same way, but the client is still there: the stream
 * ends with an error event saying so. The model reference is released on the loop once every
 * on_done ran and the engine's last notice was taken off the list (so the engine never
 * touches a freed g); g is freed then too when the answer is complete or its client gone. A
 * stream whose client stopped reading at shutdown would hold the server's drain forever:
 * once the grace is over g leaves the server's pendings and lives on as h2o's generator
 * alone, until h2o's proceed (the end goes out) or stop (the server closes the connection).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "daemon/daemon.h"
#include "daemon/http-gen-impl.h"
#include "daemon/http-impl.h"
#include "formats/formats.h"

struct gen_sub { /* one engine request: one prompt's n choices */
    struct rtx__http_gen *g;
    int prompt_idx;
    struct rtx_gen_handle *handle; /* loop thread only */
};

struct rtx__http_gen {
    h2o_generator_t generator; /* first: h2o's callbacks get its address */
    struct rtx_http *h;
    struct pending *p;       /* in h->inflight until g is freed */
    struct rtx_model *model; /* released when g is freed, after the last on_done */
    struct rtx_http_gen_req *q;
    int n_subs;
    struct gen_sub *subs;
    bool canceled;     /* loop: the engine requests were canceled */
    const char *param; /* loop: the field a refused submit names, or NULL */

    pthread_mutex_t mu; /* guards the fields up to `next_ready` */
    struct rtx_http_gen_view v;
    int running;                /* engine requests whose on_done has not run */
    struct rtx_gen_usage usage; /* summed */
    int status;                 /* the first failure's RTX_E* code; 0 */
    struct rtx_err err;
    bool shutting_down;         /* canceled by the server's shutdown (the error says so) */
    bool gone;                  /* canceled because the client went away: render nothing */
    struct rtx_http_buf queued; /* rendered, not handed to h2o yet */
    bool ended;                 /* every on_done ran; a success's end is in queued (a
                                   stream) or body (a whole answer) */
    struct rtx_http_buf body;   /* the whole answer */
    bool listed;                /* on h->gen_ready (taken off only by the loop's drain) */
    struct rtx__http_gen *next_ready;

    /* loop thread */
    bool started; /* the streamed response started */
    bool sending; /* h2o has `inflight`: wait for proceed */
    bool flushing;
    bool answered; /* the whole answer or the final chunk went to h2o */
    bool detached; /* shutdown stopped waiting for h2o's proceed: g is h2o's generator alone */
    struct rtx_http_buf inflight;
};

/* ------------------------------------------------------------------------------------------
 * Engine side (the engine's thread)
 * ---------------------------------------------------------------------------------------- */

/* Puts g on the loop's list unless it is there; call without g->mu. */
static void notify(struct rtx__http_gen *g, bool need) {
    if (!need) return;
    struct rtx_http *h = g->h;
    pthread_mutex_lock(&h->mu);
    g->next_ready = h->gen_ready;
    h->gen_ready = g;
    if (!h->wake_closed) uv_async_send(&h->wake);
    pthread_mutex_unlock(&h->mu);
}

/* Under g->mu: whether g must be listed now (and marks it listed). */
static bool list_locked(struct rtx__http_gen *g) {
    if (g->listed) return false;
    g->listed = true;
    return true;
}

static void on_event(void *ctx, const struct rtx_gen_event *ev) {
    struct gen_sub *s = ctx;
    struct rtx__http_gen *g = s->g;
    pthread_mutex_lock(&g->mu);
    bool need = false;
    if (g->status == 0 && !g->gone) {
        size_t before = g->queued.len;
        int rc = rtx__http_gen_render_event(&g->v, s->prompt_idx, ev, &g->queued, &g->err);
        if (rc) { /* the loop cancels the rest */
            g->status = rc;
            need = list_locked(g);
        } else if (g->queued.len > before) {
            need = list_locked(g);
        }
    }
    pthread_mutex_unlock(&g->mu);
    notify(g, need);
}

static void on_done(void *ctx, int status, const struct rtx_err *err,
                    const struct rtx_gen_usage *usage) {
    struct gen_sub *s = ctx;
    struct rtx__http_gen *g = s->g;
    pthread_mutex_lock(&g->mu);
    if (usage) {
        g->usage.prompt_tokens += usage->prompt_tokens;
        g->usage.completion_tokens += usage->completion_tokens;
        g->usage.cached_tokens += usage->cached_tokens;
    }
    if (status != 0 && g->status == 0) {
        g->status = status;
        if (err && err->msg[0])
            g->err = *err;
        else
            rtx_err_set(&g->err, status, "%s", rtx_strerror(status));
    }
    bool need = false;
    if (--g->running == 0) {
        if (g->status == 0)
            rtx__http_gen_render_end(&g->v, &g->usage, g->q->sse ? &g->queued : &g->body, &g->err);
        if (g->err.code && g->status == 0) g->status = g->err.code;
        g->ended = true;
        need = list_locked(g);
    }
    pthread_mutex_unlock(&g->mu);
    notify(g, need); /* after this the engine never touches g */
}

/* ------------------------------------------------------------------------------------------
 * Loop side
 * ---------------------------------------------------------------------------------------- */

void rtx__http_gen_respond_error(h2o_req_t *req, int api, int status, const char *msg,
                                 const char *param) {
    size_t len = 0;
    char *body = rtx__http_gen_error_body(api, status, msg, param, &len);
    if (!body) {
        rtx__http_respond_error(req, 500, "out of memory");
        return;
    }
    rtx__http_respond(req, status, "application/json", body, len, -1);
    rtx_free(body);
}

/* The HTTP status and message of g's failure. */
static int failure(struct rtx__http_gen *g, const char **msg) {
    *msg = g->err.msg[0] ? g->err.msg : rtx_strerror(g->status);
    if (g->status == RTX_ECANCELED && g->shutting_down) {
        *msg = "rtxd is shutting down: the generation was ended";
        return 503;
    }
    return rtx__http_status_from_err(g->status);
}

static void gen_free(struct rtx__http_gen *g) {
    struct rtx_http *h = g->h;
    if (g->p) { /* NULL when detached */
        g->p->gen = NULL;
        rtx__http_pending_finish(g->p);
    }
    for (int i = 0; i < g->n_subs; i++)
        rtx_gen_handle_unref(g->subs[i].handle);
    rtx_free(g->subs);
    rtx__http_gen_view_free(&g->v);
    rtx__http_gen_req_free(g->q);
    rtx__http_buf_free(&g->queued);
    rtx__http_buf_free(&g->body);
    rtx__http_buf_free(&g->inflight);
    pthread_mutex_destroy(&g->mu);
    rtx_model_unref(g->model);
    rtx_free(g);
    rtx__http_check_progress(h);
}

static void cancel_all(struct rtx__http_gen *g) {
    if (g->canceled) return;
    g->canceled = true;
    for (int i = 0; i < g->n_subs; i++)
        if (g->subs[i].handle) rtx_gen_cancel(g->subs[i].handle);
}

static void on_proceed(h2o_generator_t *self, h2o_req_t *req);
static void on_stop(h2o_generator_t *self, h2o_req_t *req);

/* Starts the event stream's response. */
static void start_stream(struct rtx__http_gen *g, h2o_req_t *req) {
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/event-stream; charset=utf-8"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
                   H2O_STRLIT("no-cache"));
    g->generator.proceed = on_proceed;
    g->generator.stop = on_stop;
    h2o_start_response(req, &g->generator);
    g->started = true;
}

/* Hands h2o what is queued for req, unless it still has the last send; the end goes out
 * final. */
static void flush(struct rtx__http_gen *g, h2o_req_t *req) {
    if (g->flushing) return; /* proceed called from inside h2o_send */
    g->flushing = true;
    while (!g->sending && !g->answered) {
        pthread_mutex_lock(&g->mu);
        g->inflight.len = 0;
        struct rtx_http_buf t = g->queued;
        g->queued = g->inflight;
        g->inflight = t;
        bool ended = g->ended;
        int status = g->status;
        pthread_mutex_unlock(&g->mu);
        if (status != 0 && !ended) cancel_all(g); /* a rendering failure */
        if (!g->q->sse || (status != 0 && ended && !g->started)) {
            if (!ended) break;
            g->answered = true;
            const char *msg = NULL;
            if (status != 0) {
                int st = failure(g, &msg);
                rtx__http_gen_respond_error(req, g->q->api, st, msg, g->param);
            } else
                rtx__http_respond(req, 200, "application/json", g->body.data, g->body.len, -1);
            break;
        }
        if (ended && status != 0) {
            const char *msg = NULL;
            int st = failure(g, &msg);
            if (rtx__http_gen_error_event(g->q->api, st, msg, &g->inflight)) g->inflight.len = 0;
        }
        if (!ended && g->inflight.len == 0) break;
        if (!g->started) start_stream(g, req);
        if (ended) {
            g->answered = true;
            h2o_iovec_t b = h2o_strdup(&req->pool, g->inflight.data, g->inflight.len);
            h2o_send(req, &b, b.len ? 1 : 0, H2O_SEND_STATE_FINAL);
            break;
        }
        g->sending = true;
        h2o_iovec_t b = h2o_iovec_init(g->inflight.data, g->inflight.len);
        h2o_send(req, &b, 1, H2O_SEND_STATE_IN_PROGRESS);
    }
    g->flushing = false;
}

/* Shutdown's grace is over and h2o still holds the last send of a client that does not read:
 * the server stops waiting for g (its connection is closed soon), g lives on as h2o's
 * generator until h2o's proceed (the end goes out) or stop. */
static void detach(struct rtx__http_gen *g) {
    g->p->gen = NULL;
    rtx__http_pending_finish(g->p);
    g->p = NULL;
    g->detached = true;
    rtx__http_check_progress(g->h);
}

/* Moves g on; frees it when it is done. taken: the loop took g off the list. */
static void pump(struct rtx__http_gen *g, bool taken) {
    pthread_mutex_lock(&g->mu);
    if (taken) g->listed = false;
    pthread_mutex_unlock(&g->mu);
    if (g->p && g->p->req) flush(g, g->p->req);
    pthread_mutex_lock(&g->mu);
    bool quiet = g->ended && !g->listed; /* the engine is done with g */
    bool shutting_down = g->shutting_down;
    if (!g->p || !g->p->req) g->queued.len = 0; /* nobody to read it */
    pthread_mutex_unlock(&g->mu);
    if (!quiet) return;
    rtx_model_unref(g->model); /* every on_done ran */
    g->model = NULL;
    if ((g->answered || !g->p || !g->p->req) && !g->sending)
        gen_free(g);
    else if (shutting_down && g->sending)
        detach(g);
}

static void on_proceed(h2o_generator_t *self, h2o_req_t *req) {
    struct rtx__http_gen *g = (struct rtx__http_gen *)self;
    g->sending = false;
    if (g->detached) {
        flush(g, req); /* the end, final */
        gen_free(g);
        return;
    }
    if (g->flushing) return; /* flush's loop goes on */
    pump(g, false);
}

static void on_stop(h2o_generator_t *self, h2o_req_t *req) {
    struct rtx__http_gen *g = (struct rtx__http_gen *)self;
    (void)req;
    g->sending = false; /* the request is being disposed: its pool's dispose follows */
    if (g->detached) gen_free(g);
}

void rtx__http_gen_cancel(struct rtx__http_gen *g, bool shutdown) {
    pthread_mutex_lock(&g->mu);
    if (shutdown)
        g->shutting_down = true;
    else
        g->gone = true;
    pthread_mutex_unlock(&g->mu);
    cancel_all(g);
    /* look at g again from the loop (not from inside h2o's dispose) */
    pthread_mutex_lock(&g->mu);
    bool need = list_locked(g);
    pthread_mutex_unlock(&g->mu);
    notify(g, need);
}

void rtx__http_gen_drain(struct rtx_http *h) {
    pthread_mutex_lock(&h->mu);
    struct rtx__http_gen *g = h->gen_ready;
    h->gen_ready = NULL;
    pthread_mutex_unlock(&h->mu);
    while (g) {
        struct rtx__http_gen *next = g->next_ready;
        pump(g, true);
        g = next;
    }
}

/* ------------------------------------------------------------------------------------------
 * Start
 * ---------------------------------------------------------------------------------------- */

void rtx__http_gen_start(struct rtx_http *h, h2o_req_t *req, struct rtx_model *m,
                         struct rtx_http_gen_req *q, const char *lane) {
    struct rtx_err err = {0};
    struct rtx_gen_engine *e = rtx_model_generator(m);
    const struct rtx_model_info *mi = rtx_model_info(m);
    struct rtx__http_gen *g = rtx_calloc(1, sizeof *g);
    struct pending *p = g ? rtx__http_pending_new(h, req, PENDING_GEN) : NULL;
    if (!g || !p || !(g->subs = rtx_calloc((size_t)q->n_prompts, sizeof *g->subs)) ||
        rtx__http_gen_view_init(&g->v, q, rtx_gen_model_tokenizer(rtx_gen_engine_model(e)),
                                q->model ? q->model : mi->name, mi->version, &err) != 0) {
        if (g) {
            rtx__http_gen_view_free(&g->v);
            rtx_free(g->subs);
        }
        if (p) rtx__http_pending_finish(p); /* answers nothing: PENDING_GEN */
        rtx_free(g);
        rtx__http_gen_respond_error(req, q->api, 500, "out of memory", NULL);
        rtx__http_gen_req_free(q);
        rtx_model_unref(m);
        return;
    }
    pthread_mutex_init(&g->mu, NULL);
    g->h = h;
    g->p = p;
    p->gen = g;
    g->model = m;
    g->q = q;
    g->n_subs = q->n_prompts;
    g->running = q->n_prompts;
    p->conn = rtx__http_conn_of(h, req);
    if (p->conn && !uv_is_active((uv_handle_t *)&h->watch_timer))
        uv_timer_start(&h->watch_timer, rtx__http_on_watch, WATCH_MS, WATCH_MS);
    for (int i = 0; i < q->n_prompts; i++) {
        g->subs[i].g = g;
        g->subs[i].prompt_idx = i;
        struct rtx_gen_request r = {
            .prompt = q->prompts[i].ids,
            .n_prompt = q->prompts[i].n_ids,
            .params = q->params,
            .lane = q->lane ? q->lane : lane,
            .on_event = on_event,
            .on_done = on_done,
            .ctx = &g->subs[i],
        };
        int rc = rtx_gen_submit(e, &r, &g->subs[i].handle, &err);
        if (rc == 0) continue;
        if (rc == RTX_ENOTFOUND) { /* an unknown lane */
            rc = err.code = RTX_EINVAL;
            g->param = "lane";
        }
        cancel_all(g); /* the ones submitted end with on_done */
        pthread_mutex_lock(&g->mu);
        if (g->status == 0) {
            g->status = rc;
            g->err = err;
        }
        g->running -= q->n_prompts - i;
        g->ended = g->running == 0;
        pthread_mutex_unlock(&g->mu);
        break;
    }
    pump(g, false);
}
