/* Strict command-line number parsing (see cliarg.h). */
#include "cliarg.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "regfile.h"

__extension__ typedef unsigned __int128 u128; /* exact products of up to 38 digits */

typedef enum pstat { P_OK, P_SYNTAX, P_FRACTION, P_RANGE } pstat;

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* The value as the user wrote it, made safe to print: at most 64 bytes, bytes
 * outside printable ASCII as \xNN, so a hostile argument can neither flood
 * the terminal nor send it control sequences. */
static const char *shown(const char *s, size_t len, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
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

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char *why(pstat st)
{
    switch (st) {
    case P_SYNTAX: return "is not a number";
    case P_FRACTION: return "is not a whole number";
    default: return "is out of range";
    }
}

/* Digit k (0-based) of the mantissa written as int_digits followed by
 * frac_digits (the dot removed). */
static int digit_at(const char *ip, size_t ni, const char *fp, size_t k)
{
    return (k < ni ? ip[k] : fp[k - ni]) - '0';
}

/* Exact parse of [+-]digits[.digits][(e|E)[+-]digits][suffix] in s[0..len):
 * the magnitude goes to *mag (when it fits in 64 bits) and the sign to *neg.
 * No floating point: the value is M x 10^e x 2^shift with M the significant
 * digits, and it is whole iff that product is an integer. */
static pstat parse_exact(const char *s, size_t len, unsigned flags, bool *neg, uint64_t *mag)
{
    const char *p = s, *end = s + len;
    *neg = false;
    if (p < end && (*p == '-' || *p == '+'))
        *neg = *p++ == '-';
    const char *ip = p;
    while (p < end && is_digit(*p))
        p++;
    size_t ni = (size_t)(p - ip);
    const char *fp = p;
    size_t nf = 0;
    if (p < end && *p == '.') {
        fp = ++p;
        while (p < end && is_digit(*p))
            p++;
        nf = (size_t)(p - fp);
    }
    if (ni + nf == 0)
        return P_SYNTAX;
    long exp10 = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        bool eneg = false;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p >= end || !is_digit(*p))
            return P_SYNTAX;
        long e = 0;
        for (; p < end && is_digit(*p); p++)
            if (e < 1000000) /* saturate: anything this large is out of range anyway */
                e = e * 10 + (*p - '0');
        exp10 = eneg ? -e : e;
    }
    unsigned shift = 0;
    if ((flags & ZC_ARG_SUFFIX) && p < end) {
        switch (*p) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        case 't': case 'T': shift = 40; break;
        default: break;
        }
        if (shift) {
            p++;
            if (p < end && *p == 'i')
                p++;
        }
        if (p < end && *p == 'B')
            p++;
    }
    if (p != end)
        return P_SYNTAX;

    /* Significant digits a..b (first and last non-zero). */
    size_t nd = ni + nf, a = 0, b;
    while (a < nd && digit_at(ip, ni, fp, a) == 0)
        a++;
    if (a == nd) {
        *mag = 0;
        return P_OK;
    }
    b = nd - 1;
    while (digit_at(ip, ni, fp, b) == 0)
        b--;
    /* Decimal exponent of the leading digit; 10^20 > 2^64 already. */
    long top = (long)ni - 1 - (long)a + exp10;
    if (top >= 20)
        return P_RANGE;
    if (b - a + 1 > 38)
        /* More significant digits than 128 bits hold, with the value below
         * 10^20: only a fraction has that many (or an absurd spelling of a
         * whole number, which is refused rather than mis-read). */
        return P_FRACTION;
    u128 m = 0;
    for (size_t k = a; k <= b; k++)
        m = m * 10 + (u128)digit_at(ip, ni, fp, k);
    long e = top - (long)(b - a); /* exponent of the last significant digit */
    u128 v;
    if (e >= 0) {
        v = m;
        for (long i = 0; i < e; i++)
            v *= 10; /* m x 10^e < 10^20: fits */
        v <<= shift; /* < 2^67 x 2^40 */
    } else {
        /* m x 2^shift / (2^d 5^d) is whole iff 5^d | m and 2^d | m 2^shift. */
        long d = -e;
        if (d > 55) /* 5^55 > 10^38 > m */
            return P_FRACTION;
        u128 p5 = 1;
        for (long i = 0; i < d; i++)
            p5 *= 5;
        if (m % p5)
            return P_FRACTION;
        m /= p5;
        if ((long)shift >= d) {
            unsigned sh = (unsigned)(shift - (unsigned long)d);
            if (m > ((~(u128)0) >> sh))
                return P_RANGE;
            v = m << sh;
        } else {
            unsigned sh = (unsigned)((unsigned long)d - shift);
            if (sh >= 128 || (m & ((((u128)1) << sh) - 1)))
                return P_FRACTION;
            v = m >> sh;
        }
    }
    if (v > UINT64_MAX)
        return P_RANGE;
    *mag = (uint64_t)v;
    return P_OK;
}

static const char *suffix_hint(unsigned flags)
{
    return (flags & ZC_ARG_SUFFIX) ? " (K, M, G, T suffixes allowed)" : "";
}

static bool u64_range(const char *flag, const char *s, size_t len, uint64_t lo, uint64_t hi,
                      unsigned flags, uint64_t *out, char *err, size_t errlen, const char *what)
{
    bool neg;
    uint64_t v = 0;
    pstat st = parse_exact(s, len, flags, &neg, &v);
    if (st == P_OK && neg && v)
        st = P_RANGE;
    if (st == P_OK && (v < lo || v > hi))
        st = P_RANGE;
    if (st != P_OK) {
        char b[600];
        set_err(err, errlen, "%s '%s'%s %s: expected a whole number in [%" PRIu64 ", %" PRIu64 "]%s",
                flag, shown(s, len, b, sizeof b), what, why(st), lo, hi, suffix_hint(flags));
        return false;
    }
    *out = v;
    return true;
}

bool zc__arg_u64(const char *flag, const char *text, uint64_t lo, uint64_t hi, unsigned flags,
                 uint64_t *out, char *err, size_t errlen)
{
    if (!text)
        text = "";
    return u64_range(flag, text, strlen(text), lo, hi, flags, out, err, errlen, "");
}

bool zc__arg_i64(const char *flag, const char *text, int64_t lo, int64_t hi, unsigned flags,
                 int64_t *out, char *err, size_t errlen)
{
    if (!text)
        text = "";
    bool neg;
    uint64_t mag = 0;
    int64_t v = 0;
    pstat st = parse_exact(text, strlen(text), flags, &neg, &mag);
    if (st == P_OK) {
        if (!neg && mag <= (uint64_t)INT64_MAX)
            v = (int64_t)mag;
        else if (neg && mag <= (uint64_t)INT64_MAX + 1)
            v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
        else
            st = P_RANGE;
    }
    if (st == P_OK && (v < lo || v > hi))
        st = P_RANGE;
    if (st != P_OK) {
        char b[600];
        set_err(err, errlen, "%s '%s' %s: expected a whole number in [%" PRId64 ", %" PRId64 "]%s",
                flag, shown(text, strlen(text), b, sizeof b), why(st), lo, hi, suffix_hint(flags));
        return false;
    }
    *out = v;
    return true;
}

bool zc__arg_int(const char *flag, const char *text, int lo, int hi, int *out, char *err,
                 size_t errlen)
{
    int64_t v;
    if (!zc__arg_i64(flag, text, lo, hi, 0, &v, err, errlen))
        return false;
    *out = (int)v; /* in [lo, hi], so it fits */
    return true;
}

bool zc__arg_double(const char *flag, const char *text, double lo, double hi, double *out,
                    char *err, size_t errlen)
{
    if (!text)
        text = "";
    char b[600];
    const char *p = text;
    if (*p == '+' || *p == '-')
        p++;
    /* strtod also takes leading blanks, hex floats, "inf" and "nan": the
     * first character after the sign must be a digit or a dot, and no 'x'. */
    bool ok = (is_digit(*p) || *p == '.') && !strpbrk(text, "xX");
    char *end = NULL;
    errno = 0;
    double v = ok ? strtod(text, &end) : 0;
    if (!ok || end == text || *end) {
        set_err(err, errlen, "%s '%s' is not a number: expected a number in [%g, %g]", flag,
                shown(text, strlen(text), b, sizeof b), lo, hi);
        return false;
    }
    /* ERANGE: too large for a double, or so small it lost its value. */
    if (errno == ERANGE || !isfinite(v) || !(v >= lo && v <= hi)) {
        set_err(err, errlen, "%s '%s' is out of range: expected a number in [%g, %g]", flag,
                shown(text, strlen(text), b, sizeof b), lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool zc__arg_u64_list(const char *flag, const char *text, uint64_t lo, uint64_t hi,
                      unsigned flags, uint64_t *out, int max, int *n, char *err, size_t errlen)
{
    if (!text)
        text = "";
    uint64_t tmp[64];
    int k = 0;
    const char *s = text;
    if (max > 64)
        max = 64;
    for (;;) {
        const char *c = strchr(s, ',');
        size_t len = c ? (size_t)(c - s) : strlen(s);
        if (k == max) {
            char b[600];
            set_err(err, errlen, "%s '%s' has more than %d items", flag,
                    shown(text, strlen(text), b, sizeof b), max);
            return false;
        }
        if (!u64_range(flag, s, len, lo, hi, flags, &tmp[k], err, errlen,
                       c || k ? " (an item of the list)" : ""))
            return false;
        k++;
        if (!c)
            break;
        s = c + 1;
    }
    memcpy(out, tmp, (size_t)k * sizeof *out);
    *n = k;
    return true;
}

bool zc__mem_available(uint64_t *bytes)
{
    char why[128];
    FILE *f = zc__fopen_regular("/proc/meminfo", NULL, why, sizeof why);
    char line[256];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        unsigned long long kib;
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1 && kib <= UINT64_MAX / 1024) {
            *bytes = (uint64_t)kib * 1024;
            found = true;
        }
    }
    if (f)
        fclose(f);
    if (found)
        return true;
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0)
        return false;
    return zc__mul_u64((uint64_t)pages, (uint64_t)psz, bytes);
}
