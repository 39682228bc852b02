/*
 * echo-server.c - the baseline for bench-jobs: a bare gRPC-core server with one unary method,
 * "/bench.Echo/Echo", that answers every request with the request's own bytes.
 *
 * Usage: rtx-echo-server [ADDRESS]   (default 127.0.0.1:0; port 0 picks a free port)
 * Prints "port N" on stdout once it serves, and stops cleanly on SIGTERM or SIGINT.
 *
 * DESIGN
 * The same server pattern as rtxd (GRPC.md): one completion queue polled by one thread, the
 * method registered with GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER so the request arrives with
 * the call, a pool of calls requested up front, and a unary reply sent as one batch (initial
 * metadata, message, close, status). A call slot is re-requested as soon as its reply
 * completes, so the number of requested calls stays constant. The completion-queue wait has a
 * short timeout so the loop notices a stop signal; shutdown cancels what is in flight and
 * drains the queue before destroying it.
 */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 64    /* calls requested at any time */
#define POLL_MS 100 /* how often the loop checks for a stop signal */

enum slot_state { SLOT_REQUESTED, SLOT_REPLYING };

struct slot {
    enum slot_state state;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array request_md;
    grpc_byte_buffer *payload; /* the request, sent back as the reply */
    int cancelled;             /* RECV_CLOSE_ON_SERVER's result */
};

struct server {
    grpc_server *server;
    grpc_completion_queue *cq;
    void *method;
    struct slot slots[SLOTS];
    int outstanding; /* slots with a batch or request in flight */
};

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static int request_call(struct server *s, struct slot *sl) {
    memset(sl, 0, sizeof *sl);
    grpc_metadata_array_init(&sl->request_md);
    sl->state = SLOT_REQUESTED;
    grpc_call_error e =
        grpc_server_request_registered_call(s->server, s->method, &sl->call, &sl->deadline,
                                            &sl->request_md, &sl->payload, s->cq, s->cq, sl);
    if (e != GRPC_CALL_OK) {
        grpc_metadata_array_destroy(&sl->request_md);
        return -1;
    }
    s->outstanding++;
    return 0;
}

static void release_call(struct slot *sl) {
    if (sl->payload) grpc_byte_buffer_destroy(sl->payload);
    sl->payload = NULL;
    grpc_metadata_array_destroy(&sl->request_md);
    if (sl->call) grpc_call_unref(sl->call);
    sl->call = NULL;
}

/* A call arrived: echo its payload in one batch. */
static int reply(struct server *s, struct slot *sl) {
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = sl->payload;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = &sl->cancelled;
    ops[3].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[3].data.send_status_from_server.status = GRPC_STATUS_OK;
    int n = sl->payload ? 4 : 3; /* no payload: a client that sent no message */
    if (!sl->payload) ops[1] = ops[3];
    sl->state = SLOT_REPLYING;
    if (grpc_call_start_batch(sl->call, ops, (size_t)n, sl, NULL) != GRPC_CALL_OK) return -1;
    s->outstanding++;
    return 0;
}

static void on_event(struct server *s, grpc_event ev) {
    struct slot *sl = ev.tag;
    s->outstanding--;
    if (sl->state == SLOT_REQUESTED) {
        if (!ev.success) { /* the server is shutting down */
            grpc_metadata_array_destroy(&sl->request_md);
            return;
        }
        if (reply(s, sl) != 0) {
            release_call(sl);
            if (!stop_requested) request_call(s, sl);
        }
        return;
    }
    release_call(sl);
    if (!stop_requested) request_call(s, sl);
}

/* Stops serving: no new calls, in-flight ones cancelled, the queue drained and destroyed. */
static void shutdown_server(struct server *s) {
    static int shutdown_tag;
    grpc_server_shutdown_and_notify(s->server, s->cq, &shutdown_tag);
    grpc_server_cancel_all_calls(s->server);
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE) break;
        if (ev.tag == &shutdown_tag) break;
        on_event(s, ev);
    }
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type == GRPC_OP_COMPLETE && ev.tag != &shutdown_tag) on_event(s, ev);
    }
    grpc_completion_queue_destroy(s->cq);
}

int main(int argc, char **argv) {
    const char *addr = argc > 1 ? argv[1] : "127.0.0.1:0";
    static struct server s;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    grpc_init();
    grpc_arg arg = {.type = GRPC_ARG_INTEGER,
                    .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                    .value.integer = 64 << 20};
    grpc_channel_args args = {.num_args = 1, .args = &arg};
    s.server = grpc_server_create(&args, NULL);
    s.cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s.server, s.cq, NULL);
    s.method = grpc_server_register_method(s.server, "/bench.Echo/Echo", NULL,
                                           GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s.server, addr, creds);
    grpc_server_credentials_release(creds);
    if (port == 0 || !s.method) {
        fprintf(stderr, "rtx-echo-server: cannot listen on %s\n", addr);
        grpc_server_destroy(s.server);
        grpc_completion_queue_shutdown(s.cq);
        while (grpc_completion_queue_next(s.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(s.cq);
        grpc_shutdown();
        return 1;
    }
    grpc_server_start(s.server);
    for (int i = 0; i < SLOTS; i++) {
        if (request_call(&s, &s.slots[i]) != 0) {
            fprintf(stderr, "rtx-echo-server: cannot request calls\n");
            break;
        }
    }
    printf("port %d\n", port);
    fflush(stdout);

    while (!stop_requested) {
        gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                          gpr_time_from_millis(POLL_MS, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(s.cq, until, NULL);
        if (ev.type == GRPC_OP_COMPLETE) on_event(&s, ev);
    }
    shutdown_server(&s);
    grpc_shutdown();
    return 0;
}
