/* The strict environment reader: see env.h. */
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/env.h"

const char *zc__env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

const char *zc__env_shown(const char *s, char *buf, size_t cap)
{
    size_t o = 0;
    if (!cap)
        return buf;
    for (size_t i = 0; s[i] && o + 8 < cap; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (i == 64) {
            o += (size_t)snprintf(buf + o, cap - o, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = '\0';
    return buf;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool zc__parse_i64(const char *s, size_t len, int64_t lo, int64_t hi, int64_t *out)
{
    size_t i = 0;
    const bool neg = len > 0 && s[0] == '-';
    i += neg;
    if (i == len)
        return false;
    /* Accumulate the magnitude as a negative number: INT64_MIN has one. */
    int64_t v = 0;
    for (; i < len; i++) {
        if (!is_digit(s[i]))
            return false;
        const int d = s[i] - '0';
        if (v < (INT64_MIN + d) / 10)
            return false;
        v = v * 10 - d;
    }
    if (!neg) {
        if (v == INT64_MIN)
            return false;
        v = -v;
    }
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* strtod in the C locale: a program that set LC_NUMERIC to a locale with a
 * decimal comma must not turn "2.5" into a malformed value. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void c_locale_init(void) { c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }

bool zc__parse_seconds(const char *s, size_t len, double lo, double hi, double *out)
{
    /* The grammar first, so strtod never sees what it would accept beyond
     * it (blanks, "inf", "nan", hex): [-]digits[.digits][(e|E)[+-]digits],
     * at least one digit in the mantissa. */
    char buf[96];
    size_t i = 0, nd = 0;
    if (len == 0 || len >= sizeof buf)
        return false;
    if (s[i] == '-')
        i++;
    for (; i < len && is_digit(s[i]); i++)
        nd++;
    if (i < len && s[i] == '.')
        for (i++; i < len && is_digit(s[i]); i++)
            nd++;
    if (!nd)
        return false;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t ne = 0;
        for (; i < len && is_digit(s[i]); i++)
            ne++;
        if (!ne)
            return false;
    }
    if (i != len)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    pthread_once(&c_locale_once, c_locale_init);
    char *end = NULL;
    const double v = c_locale ? strtod_l(buf, &end, c_locale) : strtod(buf, &end);
    if (end != buf + len || !isfinite(v) || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

static void note_set(bool *set, bool v)
{
    if (set)
        *set = v;
}

zc_status zc__env_i64(const char *name, int64_t lo, int64_t hi, const char *note, bool *set,
                      int64_t *out)
{
    const char *v = zc__env(name);
    note_set(set, false);
    if (!v)
        return ZC_OK;
    int64_t x = 0;
    if (!zc__parse_i64(v, strlen(v), lo, hi, &x)) {
        char shown[ZC_ENV_SHOWN_MAX];
        return ZC_ERR(ZC_ERR_CONFIG, "%s='%s'%s%s: want a whole number in [%lld, %lld]", name,
                      zc__env_shown(v, shown, sizeof shown), note ? " " : "", note ? note : "",
                      (long long)lo, (long long)hi);
    }
    note_set(set, true);
    *out = x;
    return ZC_OK;
}

zc_status zc__env_int(const char *name, int lo, int hi, const char *note, bool *set, int *out)
{
    int64_t x = 0;
    bool given = false;
    ZC_CHECK(zc__env_i64(name, lo, hi, note, &given, &x));
    note_set(set, given);
    if (given)
        *out = (int)x;
    return ZC_OK;
}

zc_status zc__env_seconds(const char *name, double lo, double hi, bool *set, double *out)
{
    const char *v = zc__env(name);
    note_set(set, false);
    if (!v)
        return ZC_OK;
    double x = 0;
    if (!zc__parse_seconds(v, strlen(v), lo, hi, &x)) {
        char shown[ZC_ENV_SHOWN_MAX];
        return ZC_ERR(ZC_ERR_CONFIG, "%s='%s': want a finite number of seconds in [%g, %g]",
                      name, zc__env_shown(v, shown, sizeof shown), lo, hi);
    }
    note_set(set, true);
    *out = x;
    return ZC_OK;
}

zc_status zc__env_choice(const char *name, const char *const *choices, int n, unsigned flags,
                         bool *set, int *out)
{
    const char *v = zc__env(name);
    note_set(set, false);
    if (!v)
        return ZC_OK;
    for (int i = 0; i < n; i++)
        if ((flags & ZC_ENV_NOCASE) ? !strcasecmp(v, choices[i]) : !strcmp(v, choices[i])) {
            note_set(set, true);
            *out = i;
            return ZC_OK;
        }
    char list[256] = "", shown[ZC_ENV_SHOWN_MAX];
    for (int i = 0; i < n; i++) {
        const size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s'%s'", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                 choices[i]);
    }
    return ZC_ERR(ZC_ERR_CONFIG, "%s='%s': want %s%s", name, zc__env_shown(v, shown, sizeof shown),
                  list, flags & ZC_ENV_NOCASE ? " (any case)" : "");
}
