/*
 * shm.h - the registry of clients' system (POSIX) shared-memory regions, as the KServe v2
 * system shared-memory extension defines it: a client creates a region with shm_open, registers
 * it by name with its key, offset and size, and then names it in inference requests
 * (parameters shared_memory_region, shared_memory_offset, shared_memory_byte_size) for inputs
 * read from it and outputs written into it, without copying the tensor through the RPC. The
 * gRPC service and the HTTP server share one registry.
 *
 * DESIGN
 * A region is mapped once, at registration (shm_open of its key + mmap of offset..offset+size,
 * read-write), and the mapping is reference counted: a request that uses a region holds a
 * reference (struct rtx_shm_ref) until its answer is written, so an unregister during an
 * inference unmaps only when that request is done. Every access is bounds-checked against the
 * registered size.
 */
#ifndef RTX_DAEMON_SHM_H
#define RTX_DAEMON_SHM_H

#include <stdint.h>

#include "runtime/runtime.h"

struct rtx_shm;     /* the registry */
struct rtx_shm_ref; /* a held mapping */

int rtx_shm_new(struct rtx_shm **out, struct rtx_err *err);
/* Unregisters every region and frees the registry (mappings held by refs stay until their
 * release). NULL: no-op. */
void rtx_shm_free(struct rtx_shm *r);

/* Registers region `name` over key (shm_open name, e.g. "/input_data") from byte offset, size
 * byte_size. RTX_EINVAL: empty name or key, byte_size 0, a name already registered (the
 * message says so); RTX_EIO: the key cannot be opened or mapped (message with strerror), or
 * offset + byte_size lies past the end of the object. */
int rtx_shm_register(struct rtx_shm *r, const char *name, const char *key, uint64_t offset,
                     uint64_t byte_size, struct rtx_err *err);
/* Unregisters `name`, or every region when name is NULL or "". RTX_ENOTFOUND for a name that
 * is not registered. */
int rtx_shm_unregister(struct rtx_shm *r, const char *name, struct rtx_err *err);

struct rtx_shm_status {
    char name[128];
    char key[256];
    uint64_t offset, byte_size; /* bytes */
};
/* Status of `name`, or of every region when name is NULL or "" (*out rtx_malloc'ed, sorted by
 * name). RTX_ENOTFOUND for a name that is not registered. */
int rtx_shm_list(struct rtx_shm *r, const char *name, struct rtx_shm_status **out, int *n,
                 struct rtx_err *err);

/* The address of byte_size bytes at `offset` inside region `name` (offset is relative to the
 * registered region), with a reference that keeps the mapping alive: RTX_ENOTFOUND for an
 * unknown region, RTX_EINVAL when offset + byte_size exceeds the region (the message gives
 * both). */
int rtx_shm_map(struct rtx_shm *r, const char *name, uint64_t offset, uint64_t byte_size,
                void **addr, struct rtx_shm_ref **ref, struct rtx_err *err);
void rtx_shm_ref_release(struct rtx_shm_ref *ref); /* NULL: no-op */

#endif /* RTX_DAEMON_SHM_H */
