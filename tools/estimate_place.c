/* `zeroc estimate --max-memory`: the placement zc_engine_build would choose
 * under per-rank budgets (src/plan/plan.h), made by the engine's own
 * planner (zc_plan_memory), stage by stage.
 *
 * Beside the bytes it prints what moves per step over each link, from the
 * placement and the stage's collectives (docs/placement.md states the
 * counts), and the link expected to bound the step at nominal rates: PCIe
 * 4.0 x16 25 GB/s between device and host, one NVMe drive 3 GB/s (DeepSpeed's
 * measured 3.2-3.7 GB/s for one drive), a 100 Gb/s network (12.5 GB/s). The
 * rates are assumptions, printed with the figures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config/config.h"
#include "plan/plan.h"
#include "estimate_place.h"

static const char *const kind_names[3] = {"device", "cpu", "nvme"};
static const char *const place_names[3] = {"device", "pinned host", "NVMe"};
static const double link_rate[3] = {25e9, 3e9, 12.5e9}; /* device<->host, NVMe, network */
static const char *const link_names[3] = {"device<->host (PCIe)", "host<->NVMe", "network"};

int zc__ep_set_budgets(zc_config *cfg, const char *spec, const char *nvme_path)
{
    char buf[512];
    if (strlen(spec) >= sizeof buf) {
        fprintf(stderr, "zeroc estimate: --max-memory '%s' is too long\n", spec);
        return 2;
    }
    snprintf(buf, sizeof buf, "%s", spec);
    bool seen[3] = {false, false, false};
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        int k = -1;
        for (int i = 0; i < 3 && eq; i++)
            if ((size_t)(eq - tok) == strlen(kind_names[i]) &&
                !strncmp(tok, kind_names[i], (size_t)(eq - tok)))
                k = i;
        if (k < 0 || seen[k] || !eq[1]) {
            fprintf(stderr, "zeroc estimate: --max-memory '%s': expected KIND=SIZE pairs, KIND "
                    "one of device, cpu, nvme, each once (e.g. device=70GiB,cpu=200GiB)\n",
                    spec);
            return 2;
        }
        seen[k] = true;
        char key[64], val[128];
        snprintf(key, sizeof key, "zero_optimization.max_memory.%s", kind_names[k]);
        if (snprintf(val, sizeof val, "\"%s\"", eq + 1) >= (int)sizeof val ||
            strchr(eq + 1, '"') || strchr(eq + 1, '\\')) {
            fprintf(stderr, "zeroc estimate: --max-memory %s: '%s' is not a size\n",
                    kind_names[k], eq + 1);
            return 2;
        }
        if (zc_config_set(cfg, key, val) != ZC_OK) {
            fprintf(stderr, "zeroc estimate: --max-memory: %s\n", zc_last_error());
            return 2;
        }
    }
    if (!seen[0] && !seen[1] && !seen[2]) {
        fprintf(stderr, "zeroc estimate: --max-memory '%s': no budget given\n", spec);
        return 2;
    }
    if (nvme_path) {
        json_t *s = json_string(nvme_path);
        char *text = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        const zc_status rc =
            text ? zc_config_set(cfg, "zero_optimization.offload_optimizer.nvme_path", text)
                 : ZC_ERR_NO_MEMORY;
        free(text);
        json_decref(s);
        if (rc != ZC_OK) {
            fprintf(stderr, "zeroc estimate: --nvme-path: %s\n", zc_last_error());
            return 2;
        }
    }
    int64_t b = 0;
    if (zc__config_budget(cfg, ZC_BUDGET_NVME, &b) != ZC_BUDGET_NONE &&
        !cfg->zero.offload_optimizer.nvme_path && !cfg->zero.offload_param.nvme_path) {
        fprintf(stderr, "zeroc estimate: --max-memory nvme=...: NVMe needs a swap directory: "
                "give --nvme-path DIR (or an nvme_path in --config)\n");
        return 2;
    }
    return 0;
}

/* "0-4, 7, 9-12" of the chunks whose kind is `kind`, into buf. */
static void ranges(const uint8_t *place, const bool *skip, int n, int kind, char *buf,
                   size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < n; k++) {
        if (place[k] != kind || (skip && skip[k]))
            continue;
        int e = k;
        while (e + 1 < n && place[e + 1] == kind && !(skip && skip[e + 1]))
            e++;
        int w = e > k ? snprintf(buf + len, cap - len, "%s%d-%d", len ? ", " : "", k, e)
                      : snprintf(buf + len, cap - len, "%s%d", len ? ", " : "", k);
        if (w < 0 || (size_t)w >= cap - len) {
            snprintf(buf + (cap > 5 ? cap - 5 : 0), cap > 5 ? 5 : cap, "...");
            return;
        }
        len += (size_t)w;
        k = e;
    }
    if (!len)
        snprintf(buf, cap, "none");
}

/* Bytes per step over each link (docs/placement.md): device<->host, the
 * offloaded optimizer chunks' gradient shard down and new parameters up
 * (working precision), and the offloaded parameter shards' copies up for
 * the two gathers of a step; host<->NVMe, the NVMe optimizer chunks' state
 * read and written (master, m, v: 12 bytes an element each way) and the
 * NVMe parameter shards read twice and written once; network, each rank's
 * part of the stage's collectives over padded elements: (W-1)/W of 2 (stages
 * 0-2) or 3 (stage 3) passes of the working precision. On the host path the
 * device<->host figure is memory traffic, not a link. */
static void link_bytes(const zc_plan_chunks *c, int stage, int world, int64_t pesz,
                       double out[3])
{
    out[0] = out[1] = out[2] = 0;
    double padded = 0;
    for (int k = 0; k < c->n; k++) {
        const double shard = (double)c->padded[k] / world;
        const double n_opt = stage == 0 ? (double)c->padded[k] : shard;
        padded += (double)c->padded[k];
        if (c->opt[k] != 0)
            out[0] += 2 * n_opt * (double)pesz;
        if (c->opt[k] == 2)
            out[1] += 2 * 12 * n_opt;
        if (stage == 3 && !c->persistent[k] && c->param[k] != 0)
            out[0] += 2 * shard * (double)pesz;
        if (stage == 3 && !c->persistent[k] && c->param[k] == 2)
            out[1] += 3 * shard * (double)pesz;
    }
    out[2] = (stage == 3 ? 3 : 2) * padded * (double)pesz * (world - 1) / world;
}

static double mib(double b) { return b / 1048576.0; }

/* The keys that pin the plan down: the stage and the budgets in bytes
 * reproduce it exactly (the planner is deterministic). */
static json_t *exact_keys(const zc_memory_plan *p, int stage)
{
    json_t *mm = json_object();
    for (int b = 0; b < 3; b++)
        if (p->budget[b] >= 0)
            json_object_set_new(mm, kind_names[b], json_integer(p->budget[b]));
    return json_pack("{s:{s:i, s:o}}", "zero_optimization", "stage", stage, "max_memory", mm);
}

/* DeepSpeed's own keys closest to the placement, or null where they cannot
 * say it: the slowest kind holding optimizer state, the share offloaded as
 * ratio (DeepSpeed takes ratio < 1 only at stage 3), and at stage 3
 * offload_param nvme with the pinned shards as max_in_cpu, or cpu. They
 * place by DeepSpeed's rules - the first chunks offloaded - so they give this
 * plan where it splits each part two ways in chunk order. */
static json_t *deepspeed_keys(const zc_memory_plan *p, int stage)
{
    const int64_t *oe = p->opt_elems_by_place, *pe = p->param_elems_by_place;
    const int64_t all = oe[0] + oe[1] + oe[2];
    if (oe[0] && oe[1] + oe[2] && stage < 3)
        return json_null(); /* a partial offload below stage 3 */
    if (oe[1] && oe[2])
        return json_null(); /* pinned and NVMe optimizer state at once */
    json_t *zo = json_object();
    json_object_set_new(zo, "stage", json_integer(stage));
    json_t *oo = json_object();
    json_object_set_new(oo, "device", json_string(oe[2] ? "nvme" : oe[1] ? "cpu" : "none"));
    if (oe[0] && oe[1] + oe[2])
        json_object_set_new(oo, "ratio", json_real((double)(oe[1] + oe[2]) / (double)all));
    json_object_set_new(zo, "offload_optimizer", oo);
    if (stage == 3) {
        json_t *op = json_object();
        json_object_set_new(op, "device", json_string(pe[2] ? "nvme" : pe[1] ? "cpu" : "none"));
        if (pe[2])
            json_object_set_new(op, "max_in_cpu", json_integer(pe[1]));
        json_object_set_new(zo, "offload_param", op);
    }
    return json_pack("{s:o}", "zero_optimization", zo);
}

static int one_stage(const zc_config *base, const ep_model *m, int world, int dtype, bool host,
                     int stage, bool json)
{
    zc_config *cfg = NULL;
    if (zc__config_clone(base, &cfg) != ZC_OK) {
        fprintf(stderr, "zeroc estimate: %s\n", zc_last_error());
        return 1;
    }
    zc_plan_tensor *t = calloc((size_t)m->n, sizeof *t);
    if (!t || zc_config_set_int(cfg, "zero_optimization.stage", stage) != ZC_OK) {
        free(t);
        zc_config_destroy(cfg);
        fprintf(stderr, "zeroc estimate: out of memory\n");
        return 1;
    }
    for (int i = 0; i < m->n; i++)
        t[i] = (zc_plan_tensor){.shape = &m->numel[i], .ndim = 1,
                                .boundary = m->boundary && m->boundary[i]};
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = host ? ZC_DEVICE_HOST : ZC_DEVICE_CUDA;
    eo.param_dtype = (zc_dtype)dtype;
    zc_memory_plan p = {.size = sizeof p};
    zc_plan_chunks c = {0};
    const zc_status prc = zc__plan_memory_placed(cfg, world, t, m->n, &eo, &p, &c);
    free(t);
    zc_config_destroy(cfg);
    if (prc != ZC_OK) {
        if (json) {
            json_t *j = json_pack("{s:i, s:b, s:s}", "stage", stage, "fits", 0, "error",
                                  zc_last_error());
            char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
            if (s)
                printf("%s\n", s);
            free(s);
            json_decref(j);
        } else {
            printf("## stage %d: does not fit\n%s\n\n", stage, zc_last_error());
        }
        return prc == ZC_ERR_NO_MEMORY ? 1 : 2;
    }
    const int64_t pesz = dtype == ZC_DTYPE_F32 ? 4 : 2;
    double lb[3];
    link_bytes(&c, stage, world, pesz, lb);
    int bound = 0;
    for (int l = 1; l < 3; l++)
        if (lb[l] / link_rate[l] > lb[bound] / link_rate[bound])
            bound = l;
    json_t *keys = json_pack("{s:o, s:o}", "exact", exact_keys(&p, stage), "deepspeed",
                             deepspeed_keys(&p, stage));
    if (json) {
        json_t *pl = json_object();
        for (int part = 0; part < 2; part++) {
            if (part == 1 && stage != 3)
                continue;
            json_t *pk = json_object();
            for (int k = 0; k < 3; k++) {
                char r[4096];
                ranges(part ? c.param : c.opt, part ? c.persistent : NULL, c.n, k, r, sizeof r);
                const int64_t *ch = part ? p.param_chunks_by_place : p.opt_chunks_by_place;
                const int64_t *el = part ? p.param_elems_by_place : p.opt_elems_by_place;
                json_object_set_new(pk, place_names[k],
                                    json_pack("{s:I, s:I, s:s}", "chunks", (json_int_t)ch[k],
                                              "elements", (json_int_t)el[k], "ranges", r));
            }
            json_object_set_new(pl, part ? "parameters" : "optimizer", pk);
        }
        json_t *bud = json_object();
        for (int b = 0; b < 3; b++)
            json_object_set_new(bud, kind_names[b],
                                json_pack("{s:I, s:I}", "budget", (json_int_t)p.budget[b],
                                          "used", (json_int_t)p.budget_used[b]));
        json_t *links = json_pack("{s:f, s:f, s:f, s:s}", "device_host", lb[0], "host_nvme",
                                  lb[1], "network", lb[2], "bound", link_names[bound]);
        /* keys is kept (O) here and released below with the text path's. */
        json_t *j = json_pack("{s:i, s:b, s:i, s:o, s:o, s:o, s:O}", "stage", stage, "fits", 1,
                              "chunks", c.n, "budgets", bud, "placement", pl, "link_bytes_per_step",
                              links, "explicit_config", keys);
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("## stage %d: fits (%d chunks)\n", stage, c.n);
        for (int b = 0; b < 3; b++)
            printf("  %-6s %10.1f of %10.1f MiB\n", kind_names[b], mib((double)p.budget_used[b]),
                   mib((double)p.budget[b]));
        for (int part = 0; part < 2; part++) {
            if (part == 1 && stage != 3)
                continue;
            printf("  %s:\n", part ? "parameter shards (persistent chunks stay gathered on "
                                     "the device and are not listed)"
                                   : "optimizer state (master, Adam m and v)");
            for (int k = 0; k < 3; k++) {
                char r[4096];
                ranges(part ? c.param : c.opt, part ? c.persistent : NULL, c.n, k, r, sizeof r);
                const int64_t *el = part ? p.param_elems_by_place : p.opt_elems_by_place;
                const double b = (double)el[k] * (part ? (double)pesz : 12.0);
                printf("    %-11s %10.1f MiB  chunks %s\n", place_names[k], mib(b), r);
            }
        }
        printf("  per step: device<->host %.1f MiB, host<->NVMe %.1f MiB, network %.1f MiB; "
               "expected bound: %s (at PCIe 25 GB/s, NVMe 3 GB/s, network 12.5 GB/s)\n",
               mib(lb[0]), mib(lb[1]), mib(lb[2]), link_names[bound]);
        char *s = json_dumps(json_object_get(keys, "exact"), JSON_COMPACT);
        char *d = json_dumps(json_object_get(keys, "deepspeed"), JSON_COMPACT | JSON_ENCODE_ANY);
        printf("  pin it down: %s\n", s ? s : "?");
        printf("  closest DeepSpeed keys (place the first chunks, as DeepSpeed does): %s\n\n",
               d && strcmp(d, "null") ? d : "none (a split they cannot express)");
        free(s);
        free(d);
    }
    json_decref(keys);
    zc__plan_chunks_free(&c);
    return 0;
}

int zc__ep_print(const zc_config *cfg, const ep_model *m, int world, int dtype, bool host,
                 bool only_cfg_stage, bool json)
{
    if (!json)
        printf("# placement under zero_optimization.max_memory (per rank), world %d, %s%s\n\n",
               world, dtype == ZC_DTYPE_F32 ? "fp32" : dtype == ZC_DTYPE_F16 ? "fp16" : "bf16",
               host ? ", host path (its \"device\" is host memory)" : "");
    int fits = 0;
    /* A configuration's "stage": "auto" is every stage the engine could take. */
    only_cfg_stage = only_cfg_stage && !zc__config_stage_auto(cfg);
    for (int stage = only_cfg_stage ? 0 : 1; stage <= 3; stage++) {
        if (only_cfg_stage && stage != cfg->zero.stage)
            continue;
        const int rc = one_stage(cfg, m, world, dtype, host, stage, json);
        if (rc == 2)
            return 1;
        fits += rc == 0;
    }
    return fits ? 0 : 1;
}
