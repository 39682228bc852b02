/*
 * serving-names.c - the names of serving's public enums (serving/serving.h): model control
 * modes, model states (Triton's spellings) and failure reasons (/metrics' reason label), one
 * table each with its count checked.
 */
#include <string.h>

#include "serving/serving.h"

static const char *const control_names[RTX_MODEL_CONTROL_COUNT] = {"none", "explicit", "poll"};
static const char *const state_names[RTX_MODEL_STATE_COUNT] = {
    "UNKNOWN", "LOADING", "READY", "UNLOADING", "UNAVAILABLE"};
static const char *const failure_names[RTX_INFER_FAIL_COUNT] = {
    "REJECTED", "CANCELED", "EXPIRED", "BACKEND", "OTHER"};
_Static_assert(sizeof control_names / sizeof control_names[0] == RTX_MODEL_CONTROL_COUNT,
               "control names");
_Static_assert(sizeof state_names / sizeof state_names[0] == RTX_MODEL_STATE_COUNT,
               "state names");
_Static_assert(sizeof failure_names / sizeof failure_names[0] == RTX_INFER_FAIL_COUNT,
               "failure names");

const char *rtx_model_control_name(enum rtx_model_control c) {
    return (unsigned)c < RTX_MODEL_CONTROL_COUNT ? control_names[c] : "?";
}

int rtx_model_control_from_name(const char *name, enum rtx_model_control *out) {
    for (int i = 0; name && i < RTX_MODEL_CONTROL_COUNT; i++)
        if (strcmp(control_names[i], name) == 0) {
            *out = (enum rtx_model_control)i;
            return 0;
        }
    return RTX_EINVAL;
}

const char *rtx_model_state_name(enum rtx_model_state st) {
    return (unsigned)st < RTX_MODEL_STATE_COUNT ? state_names[st] : "?";
}

const char *rtx_infer_failure_name(enum rtx_infer_failure r) {
    return (unsigned)r < RTX_INFER_FAIL_COUNT ? failure_names[r] : "?";
}
