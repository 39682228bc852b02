/*
 * backend-cpu.h - the CPU backend (kernels/cpu/backend-cpu.c), the reference implementation of
 * every op: its options and constructor. Everything else about a backend goes through
 * runtime/backend.h.
 */
#ifndef RTX_BACKEND_CPU_H
#define RTX_BACKEND_CPU_H

#include "runtime/backend.h"
#include "runtime/mem-pool.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rtx_cpu_options {
    int n_threads;               /* worker threads for heavy ops; 0: one per online CPU */
    /* Charged with the bytes of each buffer the backend allocates and credited when the
     * buffer is released (NULL: none). Must outlive every buffer the backend made. */
    struct rtx_mem_account *account;
};

/* The CPU backend. */
int rtx_backend_cpu_new(const struct rtx_cpu_options *opt, struct rtx_backend **out,
                        struct rtx_err *err);

#ifdef __cplusplus
}
#endif
#endif /* RTX_BACKEND_CPU_H */
