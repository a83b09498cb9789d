/* Memory sizes as accelerate's max_memory writes them ("44GiB", "500MB",
 * "1.5TB"), for zero_optimization.max_memory and `zeroc estimate
 * --max-memory`. The rules are accelerate's convert_file_size_to_int, with
 * terabytes added: a binary unit (KiB, MiB, GiB, TiB: 2^10..2^40) or a
 * decimal one (KB, MB, GB, TB: 10^3..10^12), case-insensitive, after a
 * finite non-negative number; a decimal unit written with a lower-case final
 * "b" ("500Mb") is bits, as accelerate reads it, so a byte count is the value
 * / 8. A plain string of digits is bytes. The result is rounded down to a
 * whole byte and must fit int64. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config.h"

static const struct {
    const char *unit;
    double mult;
    bool decimal;
} units[] = {
    {"kib", 1024.0, false},      {"mib", 1048576.0, false},
    {"gib", 1073741824.0, false}, {"tib", 1099511627776.0, false},
    {"kb", 1e3, true},           {"mb", 1e6, true},
    {"gb", 1e9, true},           {"tb", 1e12, true},
};

bool zc__parse_size(const char *s, int64_t *out, char *err, size_t cap)
{
    const size_t len = s ? strlen(s) : 0;
    size_t num = len;
    double mult = 1.0;
    bool bits = false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        const size_t ul = strlen(units[i].unit);
        if (len > ul && !strcasecmp(s + len - ul, units[i].unit)) {
            num = len - ul;
            mult = units[i].mult;
            bits = units[i].decimal && s[len - 1] == 'b';
            break;
        }
    }
    /* The number: digits with at most one point and an optional exponent,
     * nothing else (no sign, no space, no "inf" or hex that strtod takes). */
    char buf[64];
    bool digits = false, bad = false;
    for (size_t i = 0; i < num; i++) {
        const char ch = s[i];
        const bool sign = i > 0 && (s[i - 1] == 'e' || s[i - 1] == 'E') &&
                          (ch == '+' || ch == '-');
        digits = digits || isdigit((unsigned char)ch);
        bad = bad || !(isdigit((unsigned char)ch) || ch == '.' || ch == 'e' || ch == 'E' || sign);
    }
    if (!digits || bad || num >= sizeof buf || !isdigit((unsigned char)s[0])) {
        snprintf(err, cap, "'%s' is not a size: write a number of bytes or a number with a "
                 "unit (KiB, MiB, GiB, TiB = 2^10..2^40 bytes; KB, MB, GB, TB = 10^3..10^12), "
                 "e.g. \"44GiB\", \"500MB\", \"1.5TB\"", s ? s : "");
        return false;
    }
    memcpy(buf, s, num);
    buf[num] = 0;
    char *end = NULL;
    const double v = strtod(buf, &end);
    if (end != buf + num || !isfinite(v) || v < 0) {
        snprintf(err, cap, "'%s' is not a size: the number '%s' does not parse", s, buf);
        return false;
    }
    const double bytes = floor(v * mult / (bits ? 8.0 : 1.0));
    /* 2^63 is the first double past int64. */
    if (!(bytes < 9223372036854775808.0)) {
        snprintf(err, cap, "'%s' is more than 2^63 - 1 bytes", s);
        return false;
    }
    *out = (int64_t)bytes;
    return true;
}
