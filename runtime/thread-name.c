/*
 * thread-name.c - names for rtxd's threads (rtx_thread_name, runtime/runtime.h), so that a
 * profile by thread (bench/thread_profile.py, top -H) tells the gRPC completion queues, the
 * job workers, the model instances and the CPU backend's pool apart.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "runtime/runtime.h"

void rtx_thread_name(const char *fmt, ...) {
    char name[16]; /* the kernel's TASK_COMM_LEN, with the NUL */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap); /* cuts to 15 bytes */
    va_end(ap);
    pthread_setname_np(pthread_self(), name); /* a failure leaves the inherited name */
}
