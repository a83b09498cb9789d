/* Reading tests/oracle/fixtures: index.json (jansson) and the little-endian
 * binary files it names. Every size is checked against the index, so a
 * truncated or mismatched file fails the load, never a comparison. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "oracle.h"

#ifndef ORACLE_FIXTURES
#error "ORACLE_FIXTURES must name the fixtures directory"
#endif

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the fixtures are little-endian"
#endif

/* The fixtures directory: ORACLE_FIXTURES in the environment (a freshly
 * generated set, replayed before it is committed), else the committed one. */
static const char *fixtures_dir(void)
{
    const char *d = getenv("ORACLE_FIXTURES");
    return d && *d ? d : ORACLE_FIXTURES;
}

static void *read_file(const char *name, size_t want)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", fixtures_dir(), name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "fixture %s: cannot open", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    cr_assert(size >= 0 && (size_t)size == want, "fixture %s: %ld bytes, the index says %zu",
              path, size, want);
    rewind(f);
    void *buf = malloc(want ? want : 1);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, want, f), want, "fixture %s: short read", path);
    fclose(f);
    return buf;
}

static json_t *get(json_t *o, const char *key, int type, const char *where)
{
    json_t *v = json_object_get(o, key);
    cr_assert(v, "fixtures: %s has no \"%s\"", where, key);
    cr_assert((int)json_typeof(v) == type || (type == JSON_REAL && json_is_integer(v)) ||
                  (type == JSON_TRUE && json_is_boolean(v)),
              "fixtures: %s.%s has the wrong type", where, key);
    return v;
}

static const char *get_str(json_t *o, const char *key, const char *where)
{
    return json_string_value(get(o, key, JSON_STRING, where));
}

static int get_int(json_t *o, const char *key, const char *where)
{
    return (int)json_integer_value(get(o, key, JSON_INTEGER, where));
}

/* An array of `n` numbers (null allowed when nulls is true: NAN). */
static double *get_doubles(json_t *o, const char *key, int n, bool nulls, const char *where)
{
    json_t *a = get(o, key, JSON_ARRAY, where);
    cr_assert_eq((int)json_array_size(a), n, "fixtures: %s.%s has %zu values, not %d", where,
                 key, json_array_size(a), n);
    double *out = calloc((size_t)n, sizeof *out);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (json_is_null(v) && nulls) {
            out[i] = NAN;
            continue;
        }
        cr_assert(json_is_number(v), "fixtures: %s.%s[%d] is not a number", where, key, i);
        out[i] = json_number_value(v);
    }
    return out;
}

static void load_case(o_fixtures *F, json_t *jc, o_case *C)
{
    const char *where = json_string_value(json_object_get(jc, "name"));
    cr_assert(where, "fixtures: a case has no name");
    C->name = where;
    C->expect = get_str(jc, "expect", where);
    json_t *per = get(jc, "zeroc_stage_expect", JSON_OBJECT, where);
    for (int st = 0; st < 4; st++) {
        char key[2] = {(char)('0' + st), 0};
        json_t *v = json_object_get(per, key);
        C->expect_at[st] = json_is_string(v) ? json_string_value(v) : C->expect;
        cr_assert(!strcmp(C->expect_at[st], C->expect) || !strcmp(C->expect_at[st], "D3"),
                  "fixtures: %s: zeroc stage %d expects \"%s\"", where, st, C->expect_at[st]);
    }
    C->dtype = get_str(jc, "dtype", where);
    C->ds_stage = get_int(jc, "ds_stage", where);
    C->world = get_int(jc, "world", where);
    C->accum = get_int(jc, "accum", where);
    C->steps = get_int(jc, "steps", where);
    C->ds_optimizer = get_str(jc, "ds_optimizer", where);
    cr_assert(C->world >= 1 && C->world <= O_MAX_WORLD && C->accum >= 1 && C->steps >= 1,
              "fixtures: %s: world %d accum %d steps %d", where, C->world, C->accum, C->steps);
    json_t *dsc = get(jc, "ds_config", JSON_OBJECT, where);
    C->config_json = json_dumps(dsc, JSON_COMPACT);
    json_t *bc = json_object_get(json_object_get(json_object_get(dsc, "optimizer"), "params"),
                                 "bias_correction");
    C->bias_correction = !json_is_false(bc);
    C->zeroc_extra = get(jc, "zeroc_extra", JSON_OBJECT, where);
    json_t *tw = json_object_get(jc, "twin");
    C->twin = json_is_string(tw) ? json_string_value(tw) : NULL;
    C->twin_bitwise_equal = json_is_true(json_object_get(jc, "twin_bitwise_equal"));
    json_t *kt = json_object_get(jc, "key_unset_twin");
    C->key_unset_twin = json_is_string(kt) ? json_string_value(kt) : NULL;
    C->key_unset_twin_bitwise_equal =
        json_is_true(json_object_get(jc, "key_unset_twin_bitwise_equal"));
    json_t *kr = json_object_get(jc, "d3_key_run");
    C->d3_key = NULL;
    if (json_is_object(kr)) {
        C->d3_key = get_str(kr, "grad_accum_dtype", where);
        cr_assert(!strcmp(C->d3_key, C->dtype) && C->accum > 1,
                  "fixtures: %s: d3_key_run names %s", where, C->d3_key);
        json_t *kper = get(kr, "zeroc_stage_expect", JSON_OBJECT, where);
        for (int zs = 0; zs < 4; zs++) {
            char key[2] = {(char)('0' + zs), 0};
            json_t *v = json_object_get(kper, key);
            C->d3_key_expect_at[zs] = json_is_string(v) ? json_string_value(v) : "match";
            cr_assert(!strcmp(C->d3_key_expect_at[zs], "match") ||
                          !strcmp(C->d3_key_expect_at[zs], "D3"),
                      "fixtures: %s: d3_key_run, zeroc stage %d expects \"%s\"", where, zs,
                      C->d3_key_expect_at[zs]);
        }
    } else {
        cr_assert(json_is_null(kr) || !kr, "fixtures: %s: d3_key_run is neither null nor an "
                  "object", where);
    }
    C->init_kind = get_str(jc, "init", where);
    if (!strcmp(C->init_kind, "grid"))
        C->init = F->init_grid;
    else if (!strcmp(C->init_kind, "unrounded"))
        C->init = F->init_unrounded;
    else
        cr_assert_fail("fixtures: %s: unknown init \"%s\"", where, C->init_kind);

    const size_t n = (size_t)F->n, S = (size_t)C->steps;
    C->grads = read_file(get_str(jc, "grads", where),
                         S * (size_t)C->accum * (size_t)C->world * n);
    /* grad_exp[step][micro][rank] */
    json_t *ge = get(jc, "grad_exp", JSON_ARRAY, where);
    cr_assert_eq((int)json_array_size(ge), C->steps, "fixtures: %s.grad_exp", where);
    C->grad_exp = calloc(S * (size_t)C->accum * (size_t)C->world, sizeof(int));
    for (int t = 0; t < C->steps; t++) {
        json_t *gm = json_array_get(ge, (size_t)t);
        cr_assert(json_is_array(gm) && (int)json_array_size(gm) == C->accum,
                  "fixtures: %s.grad_exp[%d]", where, t);
        for (int m = 0; m < C->accum; m++) {
            json_t *gr = json_array_get(gm, (size_t)m);
            cr_assert(json_is_array(gr) && (int)json_array_size(gr) == C->world,
                      "fixtures: %s.grad_exp[%d][%d]", where, t, m);
            for (int r = 0; r < C->world; r++) {
                json_t *v = json_array_get(gr, (size_t)r);
                cr_assert(json_is_integer(v) && json_integer_value(v) >= -40 &&
                              json_integer_value(v) <= 0,
                          "fixtures: %s.grad_exp[%d][%d][%d]", where, t, m, r);
                C->grad_exp[((size_t)t * (size_t)C->accum + (size_t)m) * (size_t)C->world +
                            (size_t)r] = (int)json_integer_value(v);
            }
        }
    }

    json_t *inj = get(jc, "inject", JSON_ARRAY, where);
    C->ninject = (int)json_array_size(inj);
    C->inject = calloc((size_t)C->ninject + 1, sizeof *C->inject);
    for (int i = 0; i < C->ninject; i++) {
        json_t *e = json_array_get(inj, (size_t)i);
        o_inject *o = &C->inject[i];
        o->step = get_int(e, "step", where);
        o->micro = get_int(e, "micro", where);
        o->rank = get_int(e, "rank", where);
        o->elem = get_int(e, "elem", where);
        const char *v = get_str(e, "value", where);
        o->value = !strcmp(v, "inf") ? INFINITY : !strcmp(v, "-inf") ? -INFINITY : NAN;
        cr_assert(!strcmp(v, "inf") || !strcmp(v, "-inf") || !strcmp(v, "nan"),
                  "fixtures: %s: inject value \"%s\"", where, v);
        cr_assert(o->step >= 0 && o->step < C->steps && o->micro >= 0 && o->micro < C->accum &&
                      o->rank >= 0 && o->rank < C->world && o->elem >= 0 && o->elem < F->n,
                  "fixtures: %s: inject %d out of range", where, i);
    }

    C->has_master0 = json_is_true(get(jc, "masters_has_step0", JSON_TRUE, where));
    const size_t rows = S + (C->has_master0 ? 1 : 0);
    float *m = read_file(get_str(jc, "masters", where), rows * n * sizeof(float));
    if (C->has_master0) {
        C->master0 = m;
        C->masters = m + n;
    } else {
        C->master0 = malloc(n * sizeof(float));
        memcpy(C->master0, C->init, n * sizeof(float));
        C->masters = m;
    }
    C->loss_scale = get_doubles(jc, "loss_scale", C->steps, false, where);
    C->lr = get_doubles(jc, "lr", C->steps, false, where);
    C->grad_norm = get_doubles(jc, "grad_norm", C->steps, true, where);
    C->beta1 = get_doubles(jc, "beta1", C->steps, false, where);
    json_t *sk = get(jc, "skipped", JSON_ARRAY, where);
    cr_assert_eq((int)json_array_size(sk), C->steps, "fixtures: %s.skipped", where);
    C->skipped = calloc(S, sizeof(bool));
    for (size_t t = 0; t < S; t++)
        C->skipped[t] = json_is_true(json_array_get(sk, t));
}

void o_load(o_fixtures *F)
{
    memset(F, 0, sizeof *F);
    char path[4096];
    snprintf(path, sizeof path, "%s/index.json", fixtures_dir());
    json_error_t err;
    F->root = json_load_file(path, 0, &err);
    cr_assert(F->root, "fixtures: %s: %s (line %d)", path, err.text, err.line);
    cr_assert_eq(get_int(F->root, "format_version", "index"), 1, "fixtures: format_version");
    json_t *ds = get(F->root, "deepspeed", JSON_OBJECT, "index");
    F->ds_version = get_str(ds, "version", "index.deepspeed");
    F->torch_version = get_str(F->root, "torch", "index");

    json_t *ps = get(F->root, "params", JSON_ARRAY, "index");
    F->nparams = (int)json_array_size(ps);
    cr_assert(F->nparams >= 1 && F->nparams <= O_MAX_PARAMS, "fixtures: %d params", F->nparams);
    F->n = 0;
    for (int i = 0; i < F->nparams; i++) {
        json_t *p = json_array_get(ps, (size_t)i);
        F->names[i] = get_str(p, "name", "index.params");
        json_t *sh = get(p, "shape", JSON_ARRAY, F->names[i]);
        F->ndim[i] = (int)json_array_size(sh);
        cr_assert(F->ndim[i] >= 1 && F->ndim[i] <= 8);
        F->numel[i] = 1;
        for (int d = 0; d < F->ndim[i]; d++) {
            F->shape[i][d] = json_integer_value(json_array_get(sh, (size_t)d));
            cr_assert(F->shape[i][d] > 0);
            F->numel[i] *= F->shape[i][d];
        }
        F->n += F->numel[i];
    }
    cr_assert_eq(get_int(F->root, "numel", "index"), F->n, "fixtures: numel");

    json_t *inits = get(F->root, "init_files", JSON_OBJECT, "index");
    F->init_grid = read_file(get_str(inits, "grid", "index.init_files"),
                             (size_t)F->n * sizeof(float));
    F->init_unrounded = read_file(get_str(inits, "unrounded", "index.init_files"),
                                  (size_t)F->n * sizeof(float));

    json_t *cs = get(F->root, "cases", JSON_ARRAY, "index");
    F->ncases = (int)json_array_size(cs);
    cr_assert(F->ncases > 0, "fixtures: no case");
    F->cases = calloc((size_t)F->ncases, sizeof *F->cases);
    for (int i = 0; i < F->ncases; i++)
        load_case(F, json_array_get(cs, (size_t)i), &F->cases[i]);
}

void o_free(o_fixtures *F)
{
    for (int i = 0; i < F->ncases; i++) {
        o_case *C = &F->cases[i];
        free(C->config_json);
        free(C->grads);
        free(C->grad_exp);
        free(C->inject);
        free(C->has_master0 ? C->master0 : C->masters);
        if (!C->has_master0)
            free(C->master0);
        free(C->loss_scale);
        free(C->lr);
        free(C->grad_norm);
        free(C->beta1);
        free(C->skipped);
    }
    free(F->cases);
    free(F->init_grid);
    free(F->init_unrounded);
    json_decref(F->root);
    memset(F, 0, sizeof *F);
}

const o_case *o_find(const o_fixtures *F, const char *name)
{
    for (int i = 0; i < F->ncases; i++)
        if (!strcmp(F->cases[i].name, name))
            return &F->cases[i];
    return NULL;
}

double o_ulp_dist(float zc, float ds)
{
    if (isnan(zc) || isnan(ds))
        return isnan(zc) && isnan(ds) ? 0.0 : INFINITY;
    return (double)t_ulp_diff_f32(zc, ds);
}

o_worst o_step_worst(const float *zc, const float *ds, int64_t n)
{
    o_worst w = {0, -1, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        double d = o_ulp_dist(zc[i], ds[i]);
        if (d > w.dist || w.elem < 0) {
            w.dist = d;
            w.elem = i;
            w.zc = zc[i];
            w.ds = ds[i];
        }
    }
    return w;
}
