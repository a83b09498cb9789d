#include "ew_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "base/dtype.h"

static bool is_nan_bits(const void *p, zc_dtype dt, size_t i)
{
    if (dt == ZC_DTYPE_F32)
        return isnan(((const float *)p)[i]);
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == ZC_DTYPE_F16 ? (h & 0x7fff) > 0x7c00 : (h & 0x7fff) > 0x7f80;
}

size_t ew_assert_same(const void *a, const void *b, size_t n, zc_dtype dt, const char *what,
                      const char *field)
{
    const size_t sz = zc_dtype_size(dt);
    size_t nan_differ = 0;
    for (size_t i = 0; i < n; i++) {
        if (!memcmp((const char *)a + i * sz, (const char *)b + i * sz, sz))
            continue;
        if (is_nan_bits(a, dt, i) && is_nan_bits(b, dt, i)) {
            nan_differ++;
            continue;
        }
        if (dt == ZC_DTYPE_F32)
            cr_assert_fail("%s: %s[%zu] = %a, reference %a", what, field, i,
                           (double)((const float *)b)[i], (double)((const float *)a)[i]);
        cr_assert_fail("%s: %s[%zu] = 0x%04x, reference 0x%04x", what, field, i,
                       ((const uint16_t *)b)[i], ((const uint16_t *)a)[i]);
    }
    return nan_differ;
}

json_t *ew_fixture_load(const char *name)
{
    const char *dir = getenv("ZC_OPTIM_FIXTURES");
    cr_assert(dir, "ZC_OPTIM_FIXTURES is not set (tests/optim/meson.build sets it)");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    cr_assert(root, "%s: %s (line %d); regenerate with scripts/make_optim_fixtures.py", path,
              err.text, err.line);
    cr_assert(json_is_array(json_object_get(root, "cases")), "%s: no cases", path);
    return root;
}

double ew_fixture_num(const json_t *c, const char *key)
{
    const json_t *v = json_object_get(c, key);
    cr_assert(json_is_number(v), "fixture case %s: no number %s",
              json_string_value(json_object_get(c, "name")), key);
    return json_number_value(v);
}

void ew_fixture_array(const json_t *c, const char *key, int step, double *out, size_t n)
{
    const json_t *a = json_object_get(c, key);
    if (step >= 0)
        a = json_array_get(a, (size_t)step);
    cr_assert(json_is_array(a) && json_array_size(a) == n, "fixture case %s: %s[%d] is not %zu numbers",
              json_string_value(json_object_get(c, "name")), key, step, n);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        cr_assert(json_is_number(v));
        out[i] = json_number_value(v);
    }
}

double ew_assert_close(const float *got, const double *want, double *peak, size_t n, double rel,
                       const char *what)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        peak[i] = fmax(peak[i], fabs(want[i]));
        double scale = peak[i];
        double err = fabs((double)got[i] - want[i]);
        double r = scale > 0 ? err / scale : err;
        worst = r > worst ? r : worst;
        if (!(err <= rel * scale))
            cr_assert_fail("%s[%zu] = %.9g, reference %.17g (largest so far %.17g): "
                           "%.3g relative, limit %.1g",
                           what, i, (double)got[i], want[i], peak[i], r, rel);
    }
    return worst;
}
