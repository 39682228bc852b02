/*
 * http.c - rtxd's KServe v2 HTTP/REST server and Prometheus /metrics (daemon/http.h), on
 * libh2o over a libuv loop (rtxd's main loop, or one of its own on a thread): answers, pending
 * work and completions, connections, shutdown, start and stop. The endpoints and the routing
 * are in http-endpoints.c; the structs both share are in http-impl.h.
 *
 * DESIGN
 * One thread runs the loop; the server's listener, connections, h2o context and timers live on
 * it. h2o parses HTTP/1.1 (and HTTP/2) and hands each complete request (the body is buffered by
 * h2o up to http.max_body_bytes) to on_req, which routes on the normalized path. A larger
 * HTTP/1 body h2o refuses itself, before reading it (from its Content-Length, or once a chunked
 * body outgrows the limit), with a plain-text 413 on the host's fallback path; a filter there
 * rewrites that answer into rtxd's {"error": "..."} JSON, so no body beyond the limit is ever
 * buffered (h2o 2.2 resets an HTTP/2 stream whose body outgrows the limit instead:
 * REFUSED_STREAM, no answer to rewrite). Cheap endpoints answer at once. Work that takes time
 * gets a `struct pending`: inference goes to the serving core, whose completion (a worker
 * thread) renders the answer and appends the pending to a mutex-guarded queue with
 * uv_async_send (under the same mutex, so the loop never closes the async handle while a send
 * is in progress); repository loads and unloads run as uv_work_t on libuv's pool. On the loop,
 * pending_finish() writes the answer if the client is still there. Whether it is: a small
 * object allocated in the h2o request's memory pool points at the pending; h2o frees the pool
 * when the request ends, also when the connection closes early, and its dispose callback then
 * forgets the request and raises the pending's cancel flag, which the core reads. h2o's HTTP/1
 * stops reading a connection while its request is handled, so it would learn of a client that
 * went away only when the answer is written: while HTTP/1 inferences are in flight, a 20 ms
 * timer polls their sockets for the peer's close (POLLRDHUP) and raises the cancel flags of
 * those requests (each pending knows its connection, found by the peer address; a closing
 * connection clears that link).
 *
 * Text generation (http-stream.c) is a pending too (PENDING_GEN) that answers itself: the
 * engine's callbacks render on its thread and list the generation on the server's gen_ready
 * (under the same mutex, woken by the same async), and the loop hands the rendered chunks to
 * h2o as its flow control allows, or the whole answer at the end. Raising a generation's
 * cancel flag (rtx__http_pending_cancel: client gone, connection closed, grace over) also
 * cancels its engine requests at once.
 *
 * Shutdown (rtx_http_shutdown, any thread) wakes the loop, which closes the listener, asks
 * h2o's HTTP/2 connections to send GOAWAY, and waits for the pendings: after grace_ms their
 * cancel flags are raised; they always complete (the core calls every callback once). Then
 * every connection's socket is shut for reading, so h2o sees the end of its stream and closes
 * the connection itself (after writing what it has), then SHUT_RDWR if one lingers. With no
 * connection left the h2o context is disposed and the remaining handles close; when the last
 * close callback ran, rtx_http_shutdown returns (a thread of the server's ends, and its loop
 * must then close with uv_loop_close returning 0).
 */
#include "daemon/http-impl.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"
#include "daemon/log.h"

/* ------------------------------------------------------------------------------------------
 * Answers
 * ---------------------------------------------------------------------------------------- */

static const char *reason_phrase(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Internal Server Error" : "Error";
    }
}

void rtx__http_respond(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len,
                       int64_t header_len) {
    req->res.status = status;
    req->res.reason = reason_phrase(status);
    req->res.content_length = body ? len : 0;
    if (ctype)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype,
                       strlen(ctype));
    if (status == 429 && body) { /* Retry-After, whole seconds rounded up, from the hint */
        int64_t ms = rtx_err_retry_after_ms(body, len);
        char *v = h2o_mem_alloc_pool(&req->pool, 24);
        int n = snprintf(v, 24, "%" PRId64, ms > 0 ? (ms + 999) / 1000 : 1);
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("retry-after"), 0, NULL,
                              v, (size_t)n);
    }
    if (header_len >= 0) {
        char *v = h2o_mem_alloc_pool(&req->pool, 24);
        int n = snprintf(v, 24, "%" PRId64, header_len);
        h2o_add_header_by_str(&req->pool, &req->res.headers,
                              H2O_STRLIT("inference-header-content-length"), 0, NULL, v,
                              (size_t)n);
    }
    h2o_send_inline(req, body ? body : "", body ? len : 0);
}

void rtx__http_respond_error(h2o_req_t *req, int status, const char *msg) {
    size_t len = 0;
    char *body = rtx__http_error_json(msg, &len);
    if (!body) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        rtx__http_respond(req, 500, "application/json", oom, sizeof oom - 1, -1);
        return;
    }
    rtx__http_respond(req, status, "application/json", body, len, -1);
    rtx_free(body);
}

void rtx__http_respond_errf(h2o_req_t *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void rtx__http_respond_errf(h2o_req_t *req, int status, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rtx__http_respond_error(req, status, msg);
}

void rtx__http_respond_err(h2o_req_t *req, const struct rtx_err *err) {
    rtx__http_respond_error(req, rtx__http_status_from_err(err->code),
                            err->msg[0] ? err->msg : rtx_strerror(err->code));
}

/* The filter on the host's fallback path (h2o's own error answers): a 413 gets rtxd's JSON
 * error body in place of h2o's text; anything else passes unchanged. */
struct body_limit_filter {
    h2o_filter_t super;
    int64_t max_body_bytes; /* http.max_body_bytes, bytes */
};

/* Replaces the body of the answer it is set up for with `body`. */
struct json_body_ostream {
    h2o_ostream_t super;
    h2o_iovec_t body; /* in the request's pool; len 0 once sent */
};

static void json_body_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs,
                           size_t bufcnt, h2o_send_state_t state) {
    struct json_body_ostream *o = (struct json_body_ostream *)self;
    (void)bufs;
    if (bufcnt > 0 && o->body.len > 0) { /* h2o_send_inline's one buffer: the text body */
        h2o_iovec_t b = o->body;
        o->body.len = 0;
        h2o_ostream_send_next(self, req, &b, 1, state);
        return;
    }
    h2o_ostream_send_next(self, req, NULL, 0, state);
}

static void body_limit_setup(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
    const struct body_limit_filter *f = (const struct body_limit_filter *)self;
    if (req->res.status == 413) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the request body is larger than http.max_body_bytes (%" PRId64 " bytes)",
                 f->max_body_bytes);
        size_t len = 0;
        char *json = rtx__http_error_json(msg, &len);
        if (json) { /* out of memory: h2o's text answer goes out as it is */
            struct json_body_ostream *o =
                (struct json_body_ostream *)h2o_add_ostream(req, sizeof *o, slot);
            o->super.do_send = json_body_send;
            o->body = h2o_strdup(&req->pool, json, len);
            rtx_free(json);
            req->res.content_length = len;
            ssize_t ct = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
            if (ct >= 0)
                req->res.headers.entries[ct].value =
                    h2o_iovec_init(H2O_STRLIT("application/json"));
            slot = &o->super.next;
        }
    }
    h2o_setup_next_ostream(req, slot);
}

/* Answers with j (taken) as JSON. */
void rtx__http_respond_json(h2o_req_t *req, int status, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) {
        rtx__http_respond_error(req, 500,
                                "cannot encode the answer as JSON (out of memory, or a name "
                                "that is not UTF-8)");
        return;
    }
    rtx__http_respond(req, status, "application/json", s, strlen(s), -1);
    free(s);
}
/* ------------------------------------------------------------------------------------------
 * Pending work and completions
 * ---------------------------------------------------------------------------------------- */

static void on_req_dispose(void *arg) {
    struct req_link *l = arg;
    if (!l->p) return;
    struct pending *p = l->p;
    p->req = NULL;
    p->link = NULL;
    l->p = NULL;
    rtx__http_pending_cancel(p, false);
}

void rtx__http_pending_cancel(struct pending *p, bool shutdown) {
    p->cancel = 1;
    if (p->kgen) rtx__kserve_gen_cancel(p->kgen);
    if (p->gen) rtx__http_gen_cancel(p->gen, shutdown);
}

struct pending *rtx__http_pending_new(struct rtx_http *h, h2o_req_t *req, enum pending_kind kind) {
    struct pending *p = rtx_calloc(1, sizeof *p);
    if (!p) return NULL;
    struct req_link *l = h2o_mem_alloc_shared(&req->pool, sizeof *l, on_req_dispose);
    l->p = p;
    p->h = h;
    p->kind = kind;
    p->req = req;
    p->link = l;
    p->header_len = -1;
    p->next = h->inflight;
    if (h->inflight) h->inflight->prev = p;
    h->inflight = p;
    h->n_inflight++;
    return p;
}

void rtx__http_check_progress(struct rtx_http *h);

/* Loop thread: unlinks p, answers its client if still there, frees it. */
void rtx__http_pending_finish(struct pending *p) {
    struct rtx_http *h = p->h;
    if (p->prev)
        p->prev->next = p->next;
    else
        h->inflight = p->next;
    if (p->next) p->next->prev = p->prev;
    h->n_inflight--;
    if (p->link) p->link->p = NULL;
    if (p->req && p->kind != PENDING_GEN) { /* a generation answered itself */
        const char *ctype = p->header_len >= 0 ? "application/octet-stream" : "application/json";
        rtx__http_respond(p->req, p->status, p->status == 200 && p->len == 0 ? NULL : ctype,
                          p->body, p->len, p->header_len);
    }
    rtx__http_infer_free(p->q);
    rtx__kserve_gen_unref(p->kgen);
    rtx_free(p->body);
    rtx_free(p->model);
    rtx_free(p->config_json);
    rtx_free(p);
}

/* Sets p's answer to an error. */
void rtx__http_pending_error(struct pending *p, int status, const char *msg) {
    rtx_free(p->body);
    p->status = status;
    p->header_len = -1;
    p->body = rtx__http_error_json(msg, &p->len);
    if (!p->body) {
        p->status = 500;
        p->len = 0;
    }
}

/* The connection of an HTTP/1 request, by the peer address; NULL when not found. */
struct conn *rtx__http_conn_of(struct rtx_http *h, h2o_req_t *req) {
    if (req->version >= 0x200 || !req->conn->callbacks->get_peername) return NULL;
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof sa);
    socklen_t n = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&sa);
    for (struct conn *c = h->conns; c; c = c->next)
        if (c->peer_len > 0 && (socklen_t)c->peer_len == n && memcmp(&c->peer, &sa, n) == 0)
            return c;
    return NULL;
}

/* Raises the cancel flag of HTTP/1 inferences whose client closed its connection. */
void rtx__http_on_watch(uv_timer_t *t) {
    struct rtx_http *h = t->data;
    bool any = false;
    for (struct pending *p = h->inflight; p; p = p->next) {
        if (!p->conn || p->cancel) continue;
        any = true;
        uv_os_fd_t fd;
        if (uv_fileno((uv_handle_t *)&p->conn->tcp, &fd) != 0) continue;
        struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
        if (poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            p->conn = NULL;
            rtx__http_pending_cancel(p, false);
        }
    }
    if (!any) uv_timer_stop(t);
}

/* A worker thread: render, queue for the loop. */
void rtx__http_on_infer_done(void *ctx, const struct rtx_infer_result *res) {
    struct pending *p = ctx;
    if (res->code != 0) {
        rtx__http_pending_error(p, rtx__http_status_from_err(res->code),
                                res->msg[0] ? res->msg : rtx_strerror(res->code));
    } else {
        struct rtx_http_body b;
        struct rtx_err err = {0};
        if (rtx__http_infer_render(p->q, res, &b, &err) != 0) {
            rtx__http_pending_error(p, rtx__http_status_from_err(err.code), err.msg);
        } else {
            p->status = 200;
            p->body = b.data;
            p->len = b.len;
            p->header_len = b.header_len;
        }
    }
    rtx__http_infer_free(p->q); /* releases the inputs and the shared-memory windows */
    p->q = NULL;
    rtx__http_pending_done(p);
}

void rtx__http_pending_done(struct pending *p) {
    struct rtx_http *h = p->h;
    pthread_mutex_lock(&h->mu);
    if (h->done_tail)
        h->done_tail->next_done = p;
    else
        h->done_head = p;
    h->done_tail = p;
    if (!h->wake_closed) uv_async_send(&h->wake);
    pthread_mutex_unlock(&h->mu);
}

static void begin_shutdown(struct rtx_http *h, int grace_ms);

/* Sends coalesce: take the whole queue, then look at the stop request. */
static void on_wake(uv_async_t *a) {
    struct rtx_http *h = a->data;
    pthread_mutex_lock(&h->mu);
    struct pending *p = h->done_head;
    h->done_head = h->done_tail = NULL;
    bool stop = h->stop_requested;
    int grace = h->grace_ms;
    pthread_mutex_unlock(&h->mu);
    while (p) {
        struct pending *next = p->next_done;
        rtx__http_pending_finish(p);
        p = next;
    }
    rtx__http_gen_drain(h);
    if (stop && h->phase == PHASE_RUNNING) begin_shutdown(h, grace);
    rtx__http_check_progress(h);
}
/* ------------------------------------------------------------------------------------------
 * Connections
 * ---------------------------------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *hd) {
    struct conn *c = (struct conn *)hd;
    struct rtx_http *h = c->h;
    for (struct pending *p = h->inflight; p; p = p->next)
        if (p->conn == c) {
            p->conn = NULL;
            rtx__http_pending_cancel(p, false);
        }
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    h->n_conns--;
    rtx_free(c);
    rtx__http_check_progress(h);
}

static void on_unaccepted_closed(uv_handle_t *hd) {
    rtx_free(hd);
}

static void on_accept(uv_stream_t *listener, int status) {
    struct rtx_http *h = listener->data;
    if (status != 0 || h->phase != PHASE_RUNNING) return;
    struct conn *c = rtx_calloc(1, sizeof *c);
    if (!c) return;
    uv_tcp_init(h->loop, &c->tcp);
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, on_unaccepted_closed);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->peer_len = sizeof c->peer;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&c->peer, &c->peer_len) != 0)
        c->peer_len = 0;
    c->h = h;
    c->next = h->conns;
    if (h->conns) h->conns->prev = c;
    h->conns = c;
    h->n_conns++;
    h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)&c->tcp, on_conn_closed);
    h2o_accept(&h->accept_ctx, sock);
}

/* ------------------------------------------------------------------------------------------
 * Shutdown
 * ---------------------------------------------------------------------------------------- */

/* Close callback of the server's own handles (listener, async, timers; data = the server).
 * The last one after PHASE_DONE tells rtx_http_shutdown that the loop is done with us. */
static void on_handle_closed(uv_handle_t *hd) {
    struct rtx_http *h = hd->data;
    if (--h->n_closing > 0 || h->phase != PHASE_DONE) return;
    pthread_mutex_lock(&h->mu);
    h->finished = true;
    pthread_cond_broadcast(&h->finished_cv);
    pthread_mutex_unlock(&h->mu);
}

static void close_handle(struct rtx_http *h, void *handle) {
    h->n_closing++;
    uv_close(handle, on_handle_closed);
}

static void shut_conns(struct rtx_http *h, int how) {
    for (struct conn *c = h->conns; c; c = c->next) {
        uv_os_fd_t fd;
        if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0) shutdown(fd, how);
    }
}

static void on_grace(uv_timer_t *t) {
    struct rtx_http *h = t->data;
    for (struct pending *p = h->inflight; p; p = p->next)
        rtx__http_pending_cancel(p, true);
}

static void on_linger(uv_timer_t *t) {
    shut_conns(t->data, SHUT_RDWR);
}

static void begin_shutdown(struct rtx_http *h, int grace_ms) {
    h->phase = PHASE_DRAINING;
    close_handle(h, &h->listener);
    h2o_context_request_shutdown(&h->ctx);
    if (grace_ms <= 0)
        on_grace(&h->grace_timer);
    else
        uv_timer_start(&h->grace_timer, on_grace, (uint64_t)grace_ms, 0);
}

/* Advances the shutdown as far as the pendings and connections allow. */
void rtx__http_check_progress(struct rtx_http *h) {
    if (h->phase == PHASE_DRAINING && h->n_inflight == 0) {
        h->phase = PHASE_CLOSING;
        uv_timer_stop(&h->grace_timer);
        shut_conns(h, SHUT_RD);
        uv_timer_start(&h->linger_timer, on_linger, LINGER_MS, 0);
    }
    if (h->phase == PHASE_CLOSING && h->n_conns == 0) {
        h->phase = PHASE_DONE;
        uv_timer_stop(&h->linger_timer);
        /* h2o_context_request_shutdown armed HTTP/2's straggler timer; nothing is left */
        if (h2o_timeout_is_linked(&h->ctx.http2._graceful_shutdown_timeout))
            h2o_timeout_unlink(&h->ctx.http2._graceful_shutdown_timeout);
        h2o_context_dispose(&h->ctx);
        pthread_mutex_lock(&h->mu);
        h->wake_closed = true;
        close_handle(h, &h->wake);
        pthread_mutex_unlock(&h->mu);
        close_handle(h, &h->grace_timer);
        close_handle(h, &h->linger_timer);
        close_handle(h, &h->watch_timer);
    }
}

/* h2o keeps per-thread free lists of memory it recycles (socket buffers, up to 16 memory-pool
 * chunks) and never releases them; once this thread ends they would be lost (LeakSanitizer
 * reports them). Called on the loop thread after the last h2o object is gone: socket buffers
 * are taken off their (public) prototype's list; pool chunks, whose list is private to h2o,
 * are drawn into a pool of our own by allocations of a quarter chunk (h2o 2.2's largest
 * in-chunk size is under a quarter: 4 allocations per chunk, 16 chunks) and freed from its
 * chunk list, whose `next` link is each chunk's first member in every h2o release. */
struct pool_chunk {
    struct pool_chunk *next;
};

static void h2o_thread_caches_release(void) {
    h2o_mem_recycle_t *a = &h2o_socket_buffer_prototype.allocator;
    while (a->cnt > 0)
        free(h2o_mem_alloc_recycle(a, 1));
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    for (int i = 0; i < 16 * 4; i++)
        h2o_mem_alloc_pool(&pool, 1000);
    struct pool_chunk *c = (struct pool_chunk *)pool.chunks;
    while (c) {
        struct pool_chunk *next = c->next;
        free(c);
        c = next;
    }
    pool.chunks = NULL;
    h2o_mem_clear_pool(&pool); /* anything allocated outside the chunks */
}

static void loop_thread(void *arg) {
    struct rtx_http *h = arg;
    uv_run(h->loop, UV_RUN_DEFAULT);
    h2o_thread_caches_release();
}

/* ------------------------------------------------------------------------------------------
 * Start and stop
 * ---------------------------------------------------------------------------------------- */

/* "host:port" or "[v6]:port" into addr. */
static int parse_listen(const char *listen, struct sockaddr_storage *addr, struct rtx_err *err) {
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || !colon[1])
        return rtx_err_set(err, RTX_EINVAL, "http.listen '%s': expected host:port", listen);
    size_t hl = (size_t)(colon - listen);
    if (hl >= sizeof host)
        return rtx_err_set(err, RTX_EINVAL, "http.listen '%s': host too long", listen);
    memcpy(host, listen, hl);
    host[hl] = '\0';
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535)
        return rtx_err_set(err, RTX_EINVAL, "http.listen '%s': bad port '%s'", listen,
                           colon + 1);
    if (strcmp(host, "localhost") == 0) snprintf(host, sizeof host, "127.0.0.1");
    if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        if (uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)addr) == 0) return 0;
    } else if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)addr) == 0) {
        return 0;
    }
    return rtx_err_set(err, RTX_EINVAL,
                       "http.listen '%s': '%s' is not a numeric IPv4 address or [IPv6] address",
                       listen, host);
}

static void server_free(struct rtx_http *h) {
    h2o_config_dispose(&h->config);
    pthread_cond_destroy(&h->finished_cv);
    pthread_mutex_destroy(&h->mu);
    rtx_free(h);
}

/* Undoes a start that failed after the handles were initialized (the loop does not run
 * yet): closes them and lets their callbacks run (an own loop runs dry and is closed; the
 * caller's loop turns without waiting until they have run). */
static void start_undo(struct rtx_http *h) {
    h2o_context_dispose(&h->ctx);
    close_handle(h, &h->listener);
    close_handle(h, &h->wake);
    close_handle(h, &h->grace_timer);
    close_handle(h, &h->linger_timer);
    close_handle(h, &h->watch_timer);
    if (h->own_thread) {
        uv_run(h->loop, UV_RUN_DEFAULT);
        uv_loop_close(h->loop);
    } else {
        while (h->n_closing > 0)
            uv_run(h->loop, UV_RUN_NOWAIT);
    }
    server_free(h);
}

int rtx_http_start(const struct rtx_http_options *opt, struct rtx_http **out, int *bound_port,
                   struct rtx_err *err) {
    *out = NULL;
    if (!opt || !opt->listen || !opt->daemon || opt->max_body_bytes <= 0)
        return rtx_err_set(err, RTX_EINVAL, "rtx_http_start: listen, daemon and a positive "
                                            "max_body_bytes are required");
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    int rc = parse_listen(opt->listen, &addr, err);
    if (rc) return rc;
    struct rtx_http *h = rtx_calloc(1, sizeof *h);
    if (!h) return rtx_err_set(err, RTX_ENOMEM, "out of memory");
    h->d = opt->daemon;
    h->own_thread = opt->loop == NULL;
    h->loop = h->own_thread ? &h->own_loop : opt->loop;
    if (h->own_thread && (rc = uv_loop_init(h->loop)) != 0) {
        rtx_free(h);
        return rtx_err_set(err, RTX_EIO, "http: uv_loop_init: %s", uv_strerror(rc));
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->finished_cv, NULL);
    h2o_config_init(&h->config);
    h->config.max_request_entity_size = (size_t)opt->max_body_bytes;
    h->config.server_name = h2o_iovec_init(H2O_STRLIT("rtxd"));
    h2o_hostconf_t *host =
        h2o_config_register_host(&h->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    struct handler *hd = (struct handler *)h2o_create_handler(path, sizeof *hd);
    hd->super.on_req = rtx__http_on_req;
    hd->h = h;
    struct body_limit_filter *bl =
        (struct body_limit_filter *)h2o_create_filter(&host->fallback_path, sizeof *bl);
    bl->super.on_setup_ostream = body_limit_setup;
    bl->max_body_bytes = opt->max_body_bytes;
    h2o_context_init(&h->ctx, h->loop, &h->config);
    h->accept_ctx.ctx = &h->ctx;
    h->accept_ctx.hosts = h->config.hosts;

    uv_async_init(h->loop, &h->wake, on_wake);
    h->wake.data = h;
    uv_timer_init(h->loop, &h->grace_timer);
    h->grace_timer.data = h;
    uv_timer_init(h->loop, &h->linger_timer);
    h->linger_timer.data = h;
    uv_timer_init(h->loop, &h->watch_timer);
    h->watch_timer.data = h;
    uv_tcp_init(h->loop, &h->listener);
    h->listener.data = h;
    rc = uv_tcp_bind(&h->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&h->listener, 256, on_accept);
    if (rc != 0) {
        rtx_err_set(err, RTX_EIO, "http: cannot listen on %s: %s", opt->listen,
                    uv_strerror(rc));
        start_undo(h);
        return RTX_EIO;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    memset(&bound, 0, sizeof bound);
    uv_tcp_getsockname(&h->listener, (struct sockaddr *)&bound, &blen);
    int port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    if (h->own_thread && (rc = uv_thread_create(&h->thread, loop_thread, h)) != 0) {
        rtx_err_set(err, RTX_EIO, "http: cannot start the loop thread: %s", uv_strerror(rc));
        start_undo(h);
        return RTX_EIO;
    }
    if (bound_port) *bound_port = port;
    *out = h;
    return 0;
}

void rtx_http_shutdown(struct rtx_http *h, int grace_ms) {
    if (!h || h->shut) return;
    pthread_mutex_lock(&h->mu);
    if (!h->stop_requested) {
        h->stop_requested = true;
        h->grace_ms = grace_ms;
    }
    if (!h->wake_closed) uv_async_send(&h->wake);
    while (!h->finished)
        pthread_cond_wait(&h->finished_cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (h->own_thread) {
        uv_thread_join(&h->thread);
        int rc = uv_loop_close(h->loop);
        if (rc != 0)
            rtx_log(RTX_LOG_ERROR, "http: uv_loop_close", "error", uv_strerror(rc), NULL);
    }
    h->shut = true;
}

void rtx_http_free(struct rtx_http *h) {
    if (!h) return;
    rtx_http_shutdown(h, 0);
    server_free(h);
}
