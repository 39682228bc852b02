/*
 * client-example.c - the librtx example of docs/client.md: build a small graph, submit it to
 * rtxd with an input, follow the job to its end and print its output.
 *
 *     client-example [HOST:PORT]        (default 127.0.0.1:8001)
 *
 * The graph computes y = relu(x @ w + b) for x f32 [batch, 3], w [3, 2] and b [2]. Built by
 * `make` with nothing but -Iclient and -lrtx, as a program outside this repository would be.
 */
#include <stdio.h>

#include <rtx.h>

static void on_state(void *ctx, const struct rtx_client_job *job) {
    (void)ctx;
    printf("job %s: %s\n", job->id, rtx_client_job_state_name(job->state));
}

int main(int argc, char **argv) {
    const char *address = argc > 1 ? argv[1] : "127.0.0.1:8001";
    struct rtx_client_err err;
    struct rtx_client *client = NULL;
    struct rtx_client_graph *g = NULL;
    struct rtx_client_job *job = NULL;
    struct rtx_client_tensor *outs = NULL;
    int n_outs = 0, status = 1;

    /* The graph: one input, two weights, a gemm and a relu. */
    static const float w[6] = {1, -1, 0, 2, 1, 1};   /* [3, 2], row-major */
    static const float b[2] = {0.5f, -3.0f};
    const struct rtx_client_tensor wt = {.name = "w", .dtype = RTX_CLIENT_DTYPE_F32, .ndim = 2,
                                         .dims = {3, 2}, .data = (void *)w, .bytes = sizeof w};
    const struct rtx_client_tensor bt = {.name = "b", .dtype = RTX_CLIENT_DTYPE_F32, .ndim = 1,
                                         .dims = {2}, .data = (void *)b, .bytes = sizeof b};
    const int64_t x_dims[2] = {-1, 3};               /* -1: the batch size, bound per job */
    const char *fc_in[] = {"x", "w", "b"}, *fc_out[] = {"h"};
    const char *act_in[] = {"h"}, *act_out[] = {"y"};
    if (rtx_client_graph_new("example", &g, &err) < 0 ||
        rtx_client_graph_add_input(g, "x", RTX_CLIENT_DTYPE_F32, 2, x_dims, &err) < 0 ||
        rtx_client_graph_add_initializer(g, &wt, &err) < 0 ||
        rtx_client_graph_add_initializer(g, &bt, &err) < 0 ||
        rtx_client_graph_add_node(g, "gemm", "fc", fc_in, 3, fc_out, 1, &err) < 0 ||
        rtx_client_graph_add_node(g, "relu", "act", act_in, 1, act_out, 1, &err) < 0 ||
        rtx_client_graph_add_output(g, "y", &err) < 0) {
        fprintf(stderr, "building the graph: %s\n", err.msg);
        goto out;
    }

    /* Connect (lazily: the first call reaches the daemon) with a 10 s deadline per call. */
    if (rtx_client_connect(address, 10000, &client, &err) < 0) {
        fprintf(stderr, "connect: %s\n", err.msg);
        goto out;
    }

    /* Submit with the input x [2, 3]; the data is sent without being copied first. */
    static const float x[6] = {1, 2, 3, -1, 0, 4};
    const struct rtx_client_tensor xt = {.name = "x", .dtype = RTX_CLIENT_DTYPE_F32, .ndim = 2,
                                         .dims = {2, 3}, .data = (void *)x, .bytes = sizeof x};
    const struct rtx_client_label labels[] = {{"app", "client-example"}};
    const struct rtx_client_submit_options opt = {.labels = labels, .n_labels = 1};
    char id[RTX_CLIENT_JOB_ID_MAX];
    if (rtx_client_submit(client, g, &xt, 1, &opt, id, NULL, &err) < 0) {
        fprintf(stderr, "submit: %s (%s)\n", err.msg, rtx_client_strerror(err.code));
        goto out;
    }
    printf("submitted %s\n", id);

    /* Follow the job until it ends (60 s at most), then fetch its outputs. */
    if (rtx_client_wait_job(client, id, 60000, on_state, NULL, &job, &err) < 0) {
        fprintf(stderr, "wait: %s\n", err.msg);
        goto out;
    }
    if (job->state != RTX_CLIENT_JOB_SUCCEEDED) {
        fprintf(stderr, "job %s ended %s: %s\n", id, rtx_client_job_state_name(job->state),
                job->reason);
        goto out;
    }
    if (rtx_client_get_outputs(client, id, &outs, &n_outs, &err) < 0) {
        fprintf(stderr, "outputs: %s\n", err.msg);
        goto out;
    }
    for (int i = 0; i < n_outs; i++) {
        const float *v = outs[i].data;
        printf("%s %s[%lld,%lld] =", outs[i].name, rtx_client_dtype_name(outs[i].dtype),
               (long long)outs[i].dims[0], (long long)outs[i].dims[1]);
        for (size_t k = 0; k < outs[i].bytes / sizeof *v; k++)
            printf(" %g", v[k]);
        printf("\n");
    }
    status = 0;
out:
    rtx_client_tensors_free(outs, n_outs);
    rtx_client_job_free(job);
    rtx_client_close(client);
    rtx_client_graph_free(g);
    return status;
}
