/* The keys of the observation blocks: trace (the timeline, a zeroc
 * extension) and comms_logger (DeepSpeed's): the step window's syntax, the
 * op names of prof_ops, and their checks for the loader (config.h). */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "config/internal.h"

/* A whole decimal number of 1 to 16 digits at *p, advancing it. */
static bool number(const char **p, int64_t *out)
{
    const char *s = *p;
    int64_t v = 0;
    int n = 0;
    while (*s >= '0' && *s <= '9' && n < 17) {
        v = v * 10 + (*s - '0');
        s++;
        n++;
    }
    if (n == 0 || n > 16)
        return false;
    *out = v;
    *p = s;
    return true;
}

zc_status zc__config_step_range(const char *text, const char *what, int64_t *first,
                                int64_t *last)
{
    int64_t a = 0, b = 0;
    const char *p = text ? text : "";
    bool ok = number(&p, &a);
    if (ok && *p == '-') {
        p++;
        ok = number(&p, &b);
    } else {
        b = a;
    }
    ok = ok && *p == '\0' && a >= 1 && b >= a && b <= ZC_TRACE_STEPS_MAX;
    if (!ok) {
        /* The text as given, at most 64 bytes, control bytes as '?'. */
        char shown[68];
        size_t n = 0;
        for (const char *q = text ? text : ""; *q && n < 64; q++)
            shown[n++] = (unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f ? '?' : *q;
        shown[n] = '\0';
        return ZC_ERR(ZC_ERR_CONFIG,
                      "%s = '%s': want a window of optimizer steps \"A-B\" or \"A\" (whole "
                      "numbers, 1 <= A <= B <= 2^53; the first step is 1)",
                      what, shown);
    }
    *first = a;
    *last = b;
    return ZC_OK;
}

static const struct {
    const char *name;
    int kind; /* zc_coll_kind, -1: an op zeroc never issues */
} comm_ops[] = {
    {"all_reduce", ZC_COLL_ALL_REDUCE},
    {"inference_all_reduce", ZC_COLL_ALL_REDUCE},
    {"all_reduce_coalesced", ZC_COLL_ALL_REDUCE},
    {"all_gather", ZC_COLL_ALL_GATHER},
    {"all_gather_into_tensor", ZC_COLL_ALL_GATHER},
    {"all_gather_base", ZC_COLL_ALL_GATHER},
    {"allgather_fn", ZC_COLL_ALL_GATHER},
    {"all_gather_coalesced", ZC_COLL_ALL_GATHER},
    {"reduce_scatter", ZC_COLL_REDUCE_SCATTER},
    {"reduce_scatter_tensor", ZC_COLL_REDUCE_SCATTER},
    {"reduce_scatter_base", ZC_COLL_REDUCE_SCATTER},
    {"reduce_scatter_fn", ZC_COLL_REDUCE_SCATTER},
    {"reduce_scatter_coalesced", ZC_COLL_REDUCE_SCATTER},
    {"broadcast", ZC_COLL_BROADCAST},
    {"all_to_all_single", -1},
    {"all_to_all", -1},
    {"send", -1},
    {"recv", -1},
    {"isend", -1},
    {"irecv", -1},
    {"reduce", -1},
    {"gather", -1},
    {"scatter", -1},
    {"barrier", -1},
};

zc_status zc__config_comms_ops(const char *ops, unsigned *mask)
{
    *mask = 0;
    for (const char *q = ops; q && *q;) {
        const char *nl = strchr(q, '\n');
        const size_t len = nl ? (size_t)(nl - q) : strlen(q);
        bool found = false;
        for (size_t i = 0; i < sizeof comm_ops / sizeof comm_ops[0] && !found; i++) {
            if (strlen(comm_ops[i].name) == len && !strncmp(comm_ops[i].name, q, len)) {
                found = true;
                if (comm_ops[i].kind >= 0)
                    *mask |= 1u << comm_ops[i].kind;
            }
        }
        if (!found)
            return ZC_ERR(ZC_ERR_CONFIG,
                          "comms_logger.prof_ops: '%.*s' is not a collective DeepSpeed logs "
                          "(all_reduce, all_gather, all_gather_into_tensor, reduce_scatter, "
                          "reduce_scatter_tensor, broadcast, all_to_all_single, send, recv, "
                          "reduce, gather, scatter, barrier)",
                          (int)(len > 64 ? 64 : len), q);
        q = nl ? nl + 1 : NULL;
    }
    return ZC_OK;
}

void zc__cfg_check_observe(const zc_config *cfg, zc_cfg_diag *d)
{
    int64_t a, b;
    if (cfg->trace.steps && zc__config_step_range(cfg->trace.steps, "trace.steps", &a, &b) !=
                                ZC_OK) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "trace.steps", "%s", zc_last_error());
        zc__error_clear();
    }
    if (cfg->trace.steps && !cfg->trace.path)
        zc__diag_add(d, ZC_SEV_WARN, ZC_OK, "trace.steps",
                     "has no effect without trace.path (or ZC_TRACE): no timeline is written");
    unsigned mask = 0;
    if (zc__config_comms_ops(cfg->comms_logger.prof_ops, &mask) != ZC_OK) {
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "comms_logger.prof_ops", "%s",
                     zc_last_error());
        zc__error_clear();
    }
}
