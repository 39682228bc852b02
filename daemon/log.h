/*
 * log.h - structured logs: one line per event, text or JSON, with a level, a UTC timestamp, a
 * message and key=value fields, and the request id of the request being served on this thread
 * (set by the RPC layer) on every line logged while serving it. Thread-safe; lines are written
 * whole with one write(2) to stderr.
 */
#ifndef RTX_DAEMON_LOG_H
#define RTX_DAEMON_LOG_H

#include <stdbool.h>

enum rtx_log_level { RTX_LOG_DEBUG, RTX_LOG_INFO, RTX_LOG_WARN, RTX_LOG_ERROR };

/* format "text" or "json", level "debug".."error", or "off" (nothing, not even errors: for
 * tests that provoke errors on purpose; the log.level setting offers debug..error only);
 * returns 0 or RTX_EINVAL. May be called again at run time (SIGHUP). */
int rtx_log_configure(const char *format, const char *level);
bool rtx_log_enabled(enum rtx_log_level level);

/* The request id attached to this thread's lines ("" or NULL clears it). */
void rtx_log_set_request_id(const char *id);
const char *rtx_log_request_id(void);

/* Logs msg with fields given as alternating key, value strings, ending with NULL:
 *   rtx_log(RTX_LOG_INFO, "job finished", "job", id, "state", "succeeded", NULL);
 * Text: 2026-11-29T20:30:00.123Z info job finished job=j... state=succeeded req=...
 * JSON: {"ts":"...","level":"info","msg":"job finished","job":"j...","state":"...","req":"..."} */
void rtx_log(enum rtx_log_level level, const char *msg, ...) __attribute__((sentinel));
/* As rtx_log, with the fields in an array: key, value, ..., NULL (a NULL value prints as an
 * empty one). For modules that report through a callback (serving/serving.h). */
void rtx_log_fields(enum rtx_log_level level, const char *msg, const char *const *fields);
/* printf-style message without fields. */
void rtx_logf(enum rtx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* RTX_DAEMON_LOG_H */
