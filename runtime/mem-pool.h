/*
 * mem-pool.h - a caching allocator for device (and pinned host) memory, in the manner of
 * PyTorch's CUDA caching allocator, written in plain C against a device interface so the same
 * code serves every device and is unit-tested on the CPU.
 *
 * DESIGN
 * A pool obtains "segments" from the device through rtx_mem_pool_device_i and carves them
 * into "blocks" handed to callers. Sizes are rounded up to RTX_MEM_POOL_ROUND bytes. Requests
 * of at most RTX_MEM_POOL_SMALL_MAX bytes come from the small pool (2 MiB segments); larger
 * ones from the large pool (20 MiB segments below 10 MiB, own segments rounded to 2 MiB from
 * 10 MiB up). Free blocks sit in one ordered tree per pool kind keyed by (stream, size,
 * address): an allocation takes the smallest free block of its stream that fits (best fit)
 * and splits off the rest; a release merges the block with free neighbours of its segment.
 * Blocks belong to the stream they were allocated on. A block used on other streams
 * (rtx_mem_pool_record_stream) is, when released, held back until events recorded on those
 * streams complete. When the device (or the pool's cap) refuses a segment, the pool returns
 * its unused segments to the device and tries once more before failing with RTX_ENOMEM.
 * A pool may charge its segments to a memory account (struct rtx_mem_account: a consumer's
 * share of a device's budget, kept by the device layer); a refused charge is handled exactly
 * as the device refusing the segment.
 * docs/memory-pool.md gives the reasons for each threshold and defines every statistic.
 *
 * A pinned host staging pool is the same allocator over a host interface: the CUDA glue
 * passes cudaHostAlloc/cudaFreeHost as alloc/free and CUDA events for the event slots;
 * rtx_mem_pool_host_interface() is the plain-CPU equivalent (aligned heap memory, events that
 * are complete at once) for CPU use and tests.
 */
#ifndef RTX_MEM_POOL_H
#define RTX_MEM_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RTX_MEM_POOL_ROUND ((size_t)512)                 /* bytes: every block size rounds up */
#define RTX_MEM_POOL_SMALL_MAX ((size_t)1 << 20)         /* bytes: largest small-pool request */
#define RTX_MEM_POOL_SMALL_SEGMENT ((size_t)2 << 20)     /* bytes: a small-pool segment */
#define RTX_MEM_POOL_LARGE_SEGMENT ((size_t)20 << 20)    /* bytes: shared large-pool segment */
#define RTX_MEM_POOL_LARGE_OWN_MIN ((size_t)10 << 20)    /* bytes: requests with own segment */
#define RTX_MEM_POOL_LARGE_ROUND ((size_t)2 << 20)       /* bytes: own-segment granularity */
/* Splitting: a small-pool block is split when at least RTX_MEM_POOL_ROUND bytes remain, a
 * large-pool block only when more than RTX_MEM_POOL_SMALL_MAX bytes remain (a smaller rest
 * could never serve a large-pool request). */

/* The device the pool draws from. Every slot receives the interface's ctx. Streams and
 * events are opaque pointers; the NULL stream is the device's default stream. The pool calls
 * these with its mutex held, so they must not call back into the pool. */
struct rtx_mem_pool_device_i {
    /* Allocates bytes of memory into *ptr: 0, RTX_ENOMEM when the device is out of memory
     * (the pool then frees its cache and retries), or another negative code (RTX_EGPU) for a
     * device error, which the pool passes on without retrying. */
    int (*alloc)(void *ctx, size_t bytes, void **ptr);
    /* Returns memory from alloc to the device. */
    void (*free)(void *ctx, void *ptr);
    /* Creates an event into *event: 0 or a negative code. */
    int (*event_create)(void *ctx, void **event);
    /* Records the event on a stream (marks the point the stream's queued work has reached):
     * 0 or a negative code. */
    int (*event_record)(void *ctx, void *event, void *stream);
    /* 1 when the work before the event's last record has completed, 0 when not yet, a
     * negative code on a device error (the pool then keeps waiting). */
    int (*event_query)(void *ctx, void *event);
    /* Destroys an event from event_create. */
    void (*event_destroy)(void *ctx, void *event);
    /* Optional (may be NULL): waits until all work on the device has completed; 0 or a
     * negative code. Lets the pool reuse held-back blocks at once when it is out of memory
     * or when recording an event fails. */
    int (*synchronize)(void *ctx);
};

enum rtx_mem_pool_kind {
    RTX_MEM_POOL_SMALL, /* requests <= RTX_MEM_POOL_SMALL_MAX bytes */
    RTX_MEM_POOL_LARGE, /* larger requests */
    RTX_MEM_POOL_KIND_COUNT
};

/* "small", "large"; "?" when out of range. */
const char *rtx_mem_pool_kind_name(enum rtx_mem_pool_kind kind);

/* A memory account: who pays for the memory a pool (or a backend) obtains from a device.
 * The device layer (device/device.h) gives each consumer of a device one, so one budget is
 * shared by every pool on the device; the runtime knows only this interface. Both slots are
 * called with the pool's mutex held and must not call back into the pool. */
struct rtx_mem_account {
    /* Charges bytes: 0, or RTX_ENOMEM with err saying whose share is exhausted. */
    int (*charge)(struct rtx_mem_account *a, size_t bytes, struct rtx_err *err);
    /* Gives back bytes an earlier charge took. */
    void (*credit)(struct rtx_mem_account *a, size_t bytes);
};

struct rtx_mem_pool_config {
    const char *name;       /* for messages and statistics, e.g. "cuda:0" (copied; may be NULL) */
    size_t cap_bytes;       /* bytes: most the pool may reserve from the device; 0 = no cap */
    /* Charged for each segment before it is obtained from the device and credited after it
     * is returned (NULL: none). Must outlive the pool. */
    struct rtx_mem_account *account;
};

/* Statistics of one pool kind, or of the whole pool. Peaks are since creation or the last
 * rtx_mem_pool_reset_peaks. */
struct rtx_mem_pool_kind_stats {
    size_t bytes_requested;     /* bytes: sizes callers asked for, live allocations */
    size_t bytes_allocated;     /* bytes: rounded block sizes held by callers */
    size_t bytes_allocated_peak;
    size_t bytes_active;        /* bytes: allocated + released blocks held back for events */
    size_t bytes_reserved;      /* bytes: segments obtained from the device */
    size_t bytes_reserved_peak;
    size_t bytes_free;          /* bytes: cached in free blocks (reserved - active) */
    size_t bytes_free_largest;  /* bytes: the largest free block */
    double fragmentation;       /* 1 - bytes_free_largest / bytes_free; 0 when none is free */
    size_t n_active_blocks;     /* blocks held by callers or held back for events */
    size_t n_free_blocks;       /* blocks in the free trees */
    size_t n_segments;          /* segments held */
    uint64_t n_allocs;          /* successful rtx_mem_pool_alloc calls */
    uint64_t n_frees;           /* successful rtx_mem_pool_release calls of a block */
    uint64_t n_cache_hits;      /* allocations served without a new segment */
    uint64_t n_segment_allocs;  /* segments obtained from the device */
    uint64_t n_segment_frees;   /* segments returned to the device */
    uint64_t n_retries;         /* out-of-memory retries after freeing the cache */
    uint64_t n_ooms;            /* allocations failed with RTX_ENOMEM for device memory */
};

struct rtx_mem_pool_stats {
    struct rtx_mem_pool_kind_stats kind[RTX_MEM_POOL_KIND_COUNT];
    struct rtx_mem_pool_kind_stats total; /* the whole pool (its peaks are the pool's own) */
    size_t cap_bytes;                     /* bytes; 0 = no cap */
};

struct rtx_mem_pool;

/* Creates a pool over dev (the interface must outlive the pool; ctx is passed to every
 * slot). cfg may be NULL for no name and no cap. Returns 0, RTX_EINVAL for a missing
 * required slot (all but synchronize are required) or RTX_ENOMEM. */
int rtx_mem_pool_new(const struct rtx_mem_pool_device_i *dev, void *ctx,
                     const struct rtx_mem_pool_config *cfg, struct rtx_mem_pool **out,
                     struct rtx_err *err);
/* Returns every segment to the device (waiting with synchronize when set) and frees the
 * pool. Blocks still held by callers become invalid. NULL is a no-op. */
void rtx_mem_pool_free(struct rtx_mem_pool *pool);

/* Allocates at least `bytes` (0 counts as 1) for use on `stream` into *ptr. The block is
 * aligned as the device's allocations, to at least RTX_MEM_POOL_ROUND within a segment.
 * Returns 0; RTX_ENOMEM when neither the cache nor the device (within the cap and the
 * account) can supply it even after the cache was released, with the account's refusal
 * (when it refused), the request size and the pool's allocated, reserved and cap figures in
 * err, or when the pool's own bookkeeping cannot be allocated;
 * another negative code for a device error; RTX_EINVAL when ptr is NULL. On failure *ptr is
 * NULL and the pool is unchanged apart from its statistics and released cache. */
int rtx_mem_pool_alloc(struct rtx_mem_pool *pool, size_t bytes, void *stream, void **ptr,
                       struct rtx_err *err);

/* Returns a block from rtx_mem_pool_alloc to the pool. The block becomes reusable by its own
 * stream at once, or, when rtx_mem_pool_record_stream named other streams, once the events
 * recorded now on those streams have completed. Never allocates. Returns 0 (also for NULL),
 * RTX_EINVAL for a pointer the pool did not hand out, or the device's code when recording an
 * event fails and synchronize is missing or fails too: the block then stays allocated and
 * the caller may release it again. */
int rtx_mem_pool_release(struct rtx_mem_pool *pool, void *ptr, struct rtx_err *err);

/* Declares that the block at ptr is used by work queued on `stream` as well, so a release
 * waits for that work. Creates the event now, so the release itself cannot fail for lack of
 * memory. The block's own stream and repeated streams are no-ops. Returns 0, RTX_EINVAL for
 * an unknown pointer, RTX_ENOMEM, or the device's code from event_create. */
int rtx_mem_pool_record_stream(struct rtx_mem_pool *pool, void *ptr, void *stream,
                               struct rtx_err *err);

/* Reuses held-back blocks whose events completed (all of them after synchronize, when set)
 * and returns every segment with no block in use to the device. */
void rtx_mem_pool_empty_cache(struct rtx_mem_pool *pool);

/* Sets the most bytes the pool may reserve (0: no cap). A cap under the current reserve
 * frees nothing by itself; later segment requests fail until the reserve falls under it. */
void rtx_mem_pool_set_cap(struct rtx_mem_pool *pool, size_t cap_bytes);

/* Copies the statistics (a consistent snapshot; O(free blocks) for the largest free block). */
void rtx_mem_pool_get_stats(struct rtx_mem_pool *pool, struct rtx_mem_pool_stats *out);
/* Sets every peak to the current value. */
void rtx_mem_pool_reset_peaks(struct rtx_mem_pool *pool);

/* Verifies the pool's invariants: blocks tile their segments, no two free neighbours,
 * the free trees are ordered and hold exactly the free blocks, the statistics match the
 * blocks. O(blocks); for tests and debugging. Returns 0 or RTX_EINTERNAL naming the fault. */
int rtx_mem_pool_check(struct rtx_mem_pool *pool, struct rtx_err *err);

/* A host interface for CPU use and tests: alloc/free over rtx_malloc_aligned (64-byte
 * aligned; a failure reads as RTX_ENOMEM), events that are complete as soon as recorded
 * (host work is synchronous), no synchronize. ctx is unused (pass NULL). */
const struct rtx_mem_pool_device_i *rtx_mem_pool_host_interface(void);

#ifdef __cplusplus
}
#endif
#endif /* RTX_MEM_POOL_H */
