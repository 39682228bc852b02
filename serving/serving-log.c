/*
 * serving-log.c - rtx__serving_log: an event of the serving core (load, unload, errors) handed
 * to the repository's log callback as key/value fields. A leaf of serving/: serving.c and
 * model.c both report through it, so neither calls the other to log.
 */
#include <stdarg.h>

#include "serving/serving-impl.h"

void rtx__serving_log(rtx_serving_log_fn fn, enum rtx_serving_log_level level, const char *msg,
                      ...) {
    if (!fn) return;
    const char *fields[2 * 8 + 1];
    int n = 0;
    va_list ap;
    va_start(ap, msg);
    for (const char *key; n < 2 * 8 && (key = va_arg(ap, const char *)) != NULL; n += 2) {
        fields[n] = key;
        fields[n + 1] = va_arg(ap, const char *);
    }
    va_end(ap);
    fields[n] = NULL;
    fn(level, msg, fields);
}
