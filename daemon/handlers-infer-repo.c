/*
 * handlers-infer-repo.c - the inference.GRPCInferenceService methods that manage rather than
 * infer: the model repository (RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload),
 * system and CUDA shared memory (status, register, unregister), TraceSetting and LogSettings.
 * The helpers they share with the other handlers are in handlers-infer.c
 * (handlers-infer-impl.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/handlers-infer-impl.h"
#include "daemon/log.h"

/* ------------------------------------------------------------------------------------------
 * Repository
 * ---------------------------------------------------------------------------------------- */

void rtx__infer_repository_index(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                 struct rtx_server_reply *rep) {
    Inference__RepositoryIndexRequest *in =
        rtx__infer_unpack(&inference__repository_index_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_serving *s = rtx__infer_serving(d, rep);
    struct rtx_model_index_entry *e = NULL;
    int n = 0;
    struct rtx_err err = {0};
    if (s && rtx_serving_index(s, in->ready, &e, &n, &err) == 0) {
        struct arena a = {0};
        Inference__RepositoryIndexResponse__ModelIndex **mi =
            rtx__infer_arena_alloc(&a, (size_t)n * sizeof *mi);
        for (int i = 0; mi && i < n; i++) {
            Inference__RepositoryIndexResponse__ModelIndex *x =
                rtx__infer_arena_alloc(&a, sizeof *x);
            if (!x) break;
            inference__repository_index_response__model_index__init(x);
            x->name = e[i].name;
            x->version =
                e[i].version > 0 ? rtx__infer_arena_printf(&a, "%" PRId64, e[i].version) : "";
            x->state = (char *)rtx_model_state_name(e[i].state);
            x->reason = e[i].reason;
            mi[i] = x;
        }
        Inference__RepositoryIndexResponse out = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
        out.n_models = (size_t)n;
        out.models = mi;
        rtx__infer_pack(d, &a, &out.base, rep);
        rtx__infer_arena_free(&a);
        rtx_free(e);
    } else if (s) {
        rtx_server_reply_err(rep, &err);
    }
    inference__repository_index_request__free_unpacked(in, NULL);
}

/* Repository parameters other than `allowed` are refused by name. */
static bool repo_params_ok(size_t n, Inference__RepositoryModelLoadRequest__ParametersEntry **p,
                           const char *allowed, const char *what, struct rtx_server_reply *rep) {
    for (size_t i = 0; i < n; i++) {
        if (allowed && strcmp(p[i]->key, allowed) == 0) continue;
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                "%s: parameter '%s' is not supported by rtxd%s%s", what, p[i]->key,
                                allowed ? "; only " : "", allowed ? allowed : "");
        return false;
    }
    return true;
}

void rtx__infer_repository_model_load(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                      struct rtx_server_reply *rep) {
    Inference__RepositoryModelLoadRequest *in =
        rtx__infer_unpack(&inference__repository_model_load_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_serving *s = rtx__infer_serving(d, rep);
    const char *config = NULL;
    bool ok = s != NULL;
    if (ok && !in->model_name[0]) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT, "the model name is empty");
        ok = false;
    }
    if (ok) ok = repo_params_ok(in->n_parameters, in->parameters, "config", "load", rep);
    for (size_t i = 0; ok && i < in->n_parameters; i++) {
        const Inference__ModelRepositoryParameter *p = in->parameters[i]->value;
        if (!p || p->parameter_choice_case !=
                      INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM) {
            rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT,
                                    "load: parameter 'config' must be a string (the model's "
                                    "config.json)");
            ok = false;
        } else {
            config = p->string_param;
        }
    }
    if (ok) {
        struct rtx_err err = {0};
        if (rtx_serving_load(s, in->model_name, config, &err) != 0) {
            rtx_server_reply_err(rep, &err);
        } else {
            Inference__RepositoryModelLoadResponse out =
                INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
            rtx_server_reply_pack(rep, &out.base, 0);
        }
    }
    inference__repository_model_load_request__free_unpacked(in, NULL);
}

void rtx__infer_repository_model_unload(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                        struct rtx_server_reply *rep) {
    Inference__RepositoryModelUnloadRequest *in =
        rtx__infer_unpack(&inference__repository_model_unload_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_serving *s = rtx__infer_serving(d, rep);
    /* unload_dependents: rtxd has no ensembles, so there are no dependents to unload */
    bool ok = s != NULL;
    if (ok && !in->model_name[0]) {
        rtx_server_reply_status(rep, GRPC_STATUS_INVALID_ARGUMENT, "the model name is empty");
        ok = false;
    }
    if (ok)
        ok = repo_params_ok(
            in->n_parameters,
            (Inference__RepositoryModelLoadRequest__ParametersEntry **)in->parameters,
            "unload_dependents", "unload", rep);
    if (ok) {
        struct rtx_err err = {0};
        if (rtx_serving_unload(s, in->model_name, &err) != 0) {
            rtx_server_reply_err(rep, &err);
        } else {
            Inference__RepositoryModelUnloadResponse out =
                INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
            rtx_server_reply_pack(rep, &out.base, 0);
        }
    }
    inference__repository_model_unload_request__free_unpacked(in, NULL);
}
/* ------------------------------------------------------------------------------------------
 * Shared memory, trace and log settings
 * ---------------------------------------------------------------------------------------- */

static struct rtx_shm *shm_registry(struct rtx_daemon *d, struct rtx_server_reply *rep) {
    if (!d->shm)
        rtx_server_reply_status(rep, GRPC_STATUS_UNAVAILABLE,
                                "the shared-memory registry is not available");
    return d->shm;
}

void rtx__infer_system_shm_status(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                  struct rtx_server_reply *rep) {
    Inference__SystemSharedMemoryStatusRequest *in = rtx__infer_unpack(
        &inference__system_shared_memory_status_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_shm *r = shm_registry(d, rep);
    struct rtx_shm_status *st = NULL;
    int n = 0;
    struct rtx_err err = {0};
    if (r && rtx_shm_list(r, in->name, &st, &n, &err) == 0) {
        struct arena a = {0};
        Inference__SystemSharedMemoryStatusResponse__RegionsEntry **e =
            rtx__infer_arena_alloc(&a, (size_t)n * sizeof *e);
        for (int i = 0; e && i < n; i++) {
            Inference__SystemSharedMemoryStatusResponse__RegionsEntry *x =
                rtx__infer_arena_alloc(&a, sizeof *x);
            Inference__SystemSharedMemoryStatusResponse__RegionStatus *v =
                rtx__infer_arena_alloc(&a, sizeof *v);
            if (!x || !v) break;
            inference__system_shared_memory_status_response__regions_entry__init(x);
            inference__system_shared_memory_status_response__region_status__init(v);
            v->name = st[i].name;
            v->key = st[i].key;
            v->offset = st[i].offset;
            v->byte_size = st[i].byte_size;
            x->key = st[i].name;
            x->value = v;
            e[i] = x;
        }
        Inference__SystemSharedMemoryStatusResponse out =
            INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__INIT;
        out.n_regions = (size_t)n;
        out.regions = e;
        rtx__infer_pack(d, &a, &out.base, rep);
        rtx__infer_arena_free(&a);
        rtx_free(st);
    } else if (r) {
        rtx_server_reply_err(rep, &err);
    }
    inference__system_shared_memory_status_request__free_unpacked(in, NULL);
}

void rtx__infer_system_shm_register(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                    struct rtx_server_reply *rep) {
    Inference__SystemSharedMemoryRegisterRequest *in = rtx__infer_unpack(
        &inference__system_shared_memory_register_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_shm *r = shm_registry(d, rep);
    struct rtx_err err = {0};
    if (r) {
        if (rtx_shm_register(r, in->name, in->key, in->offset, in->byte_size, &err) != 0) {
            rtx_server_reply_err(rep, &err);
        } else {
            Inference__SystemSharedMemoryRegisterResponse out =
                INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
            rtx_server_reply_pack(rep, &out.base, 0);
        }
    }
    inference__system_shared_memory_register_request__free_unpacked(in, NULL);
}

void rtx__infer_system_shm_unregister(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                      struct rtx_server_reply *rep) {
    Inference__SystemSharedMemoryUnregisterRequest *in = rtx__infer_unpack(
        &inference__system_shared_memory_unregister_request__descriptor, req, len, rep);
    if (!in) return;
    struct rtx_shm *r = shm_registry(d, rep);
    struct rtx_err err = {0};
    if (r) {
        if (rtx_shm_unregister(r, in->name, &err) != 0) {
            rtx_server_reply_err(rep, &err);
        } else {
            Inference__SystemSharedMemoryUnregisterResponse out =
                INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
            rtx_server_reply_pack(rep, &out.base, 0);
        }
    }
    inference__system_shared_memory_unregister_request__free_unpacked(in, NULL);
}

static void unsupported(struct rtx_server_reply *rep, const char *what) {
    rtx_server_reply_status(rep, GRPC_STATUS_UNIMPLEMENTED, "%s", what);
}

#define CUDA_SHM_MSG                                                                              \
    "CUDA shared memory is not supported by rtxd: register system (POSIX) shared memory instead"

void rtx__infer_cuda_shm_status(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                struct rtx_server_reply *rep) {
    unsupported(rep, CUDA_SHM_MSG);
}

void rtx__infer_cuda_shm_register(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                  struct rtx_server_reply *rep) {
    unsupported(rep, CUDA_SHM_MSG);
}

void rtx__infer_cuda_shm_unregister(struct rtx_daemon *d, const uint8_t *req, size_t len,
                                    struct rtx_server_reply *rep) {
    unsupported(rep, CUDA_SHM_MSG);
}

void rtx__infer_trace_setting(struct rtx_daemon *d, const uint8_t *req, size_t len,
                              struct rtx_server_reply *rep) {
    unsupported(rep, "request tracing is not supported by rtxd (its logs carry each request's "
                     "x-request-id)");
}

void rtx__infer_log_settings(struct rtx_daemon *d, const uint8_t *req, size_t len,
                             struct rtx_server_reply *rep) {
    unsupported(rep, "log settings are not changed through this service: set log.level and "
                     "log.format in rtxd's config and send SIGHUP");
}
