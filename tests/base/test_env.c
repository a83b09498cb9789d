/* The strict environment reader (src/base/env.h) and the checked deadline of
 * timed waits (src/base/clock.h): what each accepts and refuses, and what a
 * refusal says. The variables of each module, read through these, are tested
 * at their public calls in tests/core/test_env_vars.c. */
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "base/clock.h"
#include "base/env.h"
#include "helpers.h"

#define VAR "ZC_TEST_ENV_VALUE"

/* Text that is no whole number: junk, blanks, signs and forms strtol or
 * strtod would take, NaN, infinities, fractions, hex. */
static const char *const not_whole[] = {
    "abc", "-", "+1", " 1", "1 ", "1\n", "\t1", "1x", "0x10", "1e3", "1.0", "1.", ".5",
    "nan", "NaN", "inf", "-inf", "Infinity", "1,000", "1_000", "\xd9\xa1" /* Arabic-Indic 1 */,
};

Test(env, whole_numbers_are_exact_and_bounded)
{
    int64_t v = -7;
    cr_assert(zc__parse_i64("0", 1, 0, 10, &v) && v == 0);
    cr_assert(zc__parse_i64("-5", 2, -10, 10, &v) && v == -5);
    cr_assert(zc__parse_i64("007", 3, 0, 10, &v) && v == 7);
    cr_assert(zc__parse_i64("9223372036854775807", 19, 0, INT64_MAX, &v) && v == INT64_MAX);
    cr_assert(zc__parse_i64("-9223372036854775808", 20, INT64_MIN, 0, &v) && v == INT64_MIN);
    for (size_t i = 0; i < sizeof not_whole / sizeof not_whole[0]; i++) {
        v = 42;
        cr_assert(!zc__parse_i64(not_whole[i], strlen(not_whole[i]), INT64_MIN, INT64_MAX, &v),
                  "'%s' was taken", not_whole[i]);
        cr_assert_eq(v, 42, "'%s' changed *out", not_whole[i]);
    }
    /* Huge values and the first numbers past int64, both signs. */
    static const char *const huge[] = {"9223372036854775808", "-9223372036854775809",
                                       "99999999999999999999999999999999", "1e30"};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++)
        cr_assert(!zc__parse_i64(huge[i], strlen(huge[i]), INT64_MIN, INT64_MAX, &v), "%s",
                  huge[i]);
    cr_assert(!zc__parse_i64("", 0, 0, 1, &v));
    cr_assert(!zc__parse_i64("11", 2, 0, 10, &v), "above the range");
    cr_assert(!zc__parse_i64("-1", 2, 0, 10, &v), "below the range");
    /* Only len bytes count: "12" of "123" is 12. */
    cr_assert(zc__parse_i64("123", 2, 0, 100, &v) && v == 12);
}

Test(env, seconds_are_finite_decimals_in_range)
{
    double v = -1;
    static const struct {
        const char *s;
        double want;
    } ok[] = {{"2.5", 2.5}, {"600", 600}, {"0.001", 0.001}, {".5", 0.5}, {"5.", 5},
              {"1e3", 1000}, {"1E+2", 100}, {"2500e-3", 2.5}, {"604800", 604800}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cr_assert(zc__parse_seconds(ok[i].s, strlen(ok[i].s), 0.001, 604800, &v), "%s", ok[i].s);
        cr_assert_eq(v, ok[i].want, "%s gave %g", ok[i].s, v);
    }
    static const char *const bad[] = {
        "", "-", ".", "e5", "1e", "1e+", "inf", "-inf", "INF", "Infinity", "nan", "NaN",
        "-nan", "0x10", "0x1p3", " 1", "1 ", "1s", "1\n", "+1", "1,5", "--1",
        "0", "-1", "-0.5", "0.0009", "1e-999", /* not above zero, below the range */
        "604800.5", "1e30", "1e308", "1e999", "99999999999999999999999999" /* above */};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 42;
        cr_assert(!zc__parse_seconds(bad[i], strlen(bad[i]), 0.001, 604800, &v), "'%s' was taken",
                  bad[i]);
        cr_assert_eq(v, 42, "'%s' changed *out", bad[i]);
    }
    char longer[200];
    memset(longer, '1', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    cr_assert(!zc__parse_seconds(longer, strlen(longer), 0, INFINITY, &v), "a 199-digit number");
}

/* A program that set a locale with a decimal comma reads "2.5" as 2.5. */
Test(env, seconds_ignore_the_program_locale)
{
    static const char *const comma_locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8",
                                                "fr_FR.utf8"};
    const char *got = NULL;
    for (size_t i = 0; i < sizeof comma_locales / sizeof comma_locales[0] && !got; i++)
        got = setlocale(LC_NUMERIC, comma_locales[i]);
    if (!got) {
        cr_log_info("no locale with a decimal comma is installed: only the C locale is checked");
    } else {
        cr_assert_str_eq(localeconv()->decimal_point, ",");
    }
    double v = 0;
    cr_assert(zc__parse_seconds("2.5", 3, 0.001, 10, &v));
    cr_assert_eq(v, 2.5);
    cr_assert(!zc__parse_seconds("2,5", 3, 0.001, 10, &v), "the comma is never a decimal point");
    setlocale(LC_NUMERIC, "C");
}

Test(env, unset_and_empty_mean_not_given)
{
    bool set = true;
    int64_t v = 99;
    double d = 99;
    int c = 99;
    static const char *const choices[] = {"a", "b"};
    unsetenv(VAR);
    cr_assert_null(zc__env(VAR));
    cr_assert_eq(zc__env_i64(VAR, 0, 1, NULL, &set, &v), ZC_OK);
    cr_assert(!set);
    cr_assert_eq(v, 99);
    setenv(VAR, "", 1);
    cr_assert_null(zc__env(VAR));
    cr_assert_eq(zc__env_seconds(VAR, 1, 2, &set, &d), ZC_OK);
    cr_assert(!set);
    cr_assert_eq(d, 99);
    cr_assert_eq(zc__env_choice(VAR, choices, 2, 0, &set, &c), ZC_OK);
    cr_assert(!set);
    cr_assert_eq(c, 99);
    unsetenv(VAR);
}

Test(env, refusals_name_the_variable_the_value_and_the_range)
{
    int64_t v = 5;
    bool set = true;
    setenv(VAR, "-3", 1);
    cr_assert_eq(zc__env_i64(VAR, 1, 256, "(set by a test)", &set, &v), ZC_ERR_CONFIG);
    cr_assert(!set);
    cr_assert_eq(v, 5);
    cr_assert(strstr(zc_last_error(),
                     VAR "='-3' (set by a test): want a whole number in [1, 256]"),
              "%s", zc_last_error());

    double d = 7;
    setenv(VAR, "inf", 1);
    cr_assert_eq(zc__env_seconds(VAR, 0.001, 604800, &set, &d), ZC_ERR_CONFIG);
    cr_assert_eq(d, 7);
    cr_assert(strstr(zc_last_error(),
                     VAR "='inf': want a finite number of seconds in [0.001, 604800]"),
              "%s", zc_last_error());

    static const char *const choices[] = {"off", "on", "auto"};
    int c = 1;
    setenv(VAR, "ON", 1);
    cr_assert_eq(zc__env_choice(VAR, choices, 3, 0, &set, &c), ZC_ERR_CONFIG);
    cr_assert(strstr(zc_last_error(), VAR "='ON': want 'off', 'on' or 'auto'"), "%s",
              zc_last_error());
    cr_assert_eq(zc__env_choice(VAR, choices, 3, ZC_ENV_NOCASE, &set, &c), ZC_OK);
    cr_assert(set);
    cr_assert_eq(c, 1);

    /* In range and whole: taken. */
    setenv(VAR, "256", 1);
    cr_assert_eq(zc__env_i64(VAR, 1, 256, NULL, &set, &v), ZC_OK);
    cr_assert(set);
    cr_assert_eq(v, 256);
    unsetenv(VAR);
}

/* A hostile value can neither flood the message nor put control bytes in it. */
Test(env, values_are_shown_safely)
{
    char big[10000];
    memset(big, '9', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[3] = '\x1b';
    setenv(VAR, big, 1);
    int64_t v = 0;
    cr_assert_eq(zc__env_i64(VAR, 0, 10, NULL, NULL, &v), ZC_ERR_CONFIG);
    const char *m = zc_last_error();
    cr_assert(strstr(m, VAR "='999\\x1b999"), "%s", m);
    cr_assert(strstr(m, "...': want a whole number in [0, 10]"), "%s", m);
    cr_assert_lt(strlen(m), 400u);
    for (const char *p = m; *p; p++)
        cr_assert((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f, "byte %#x in '%s'",
                  (unsigned char)*p, m);
    unsetenv(VAR);
}

static double ts_s(struct timespec t) { return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec; }

/* zc__deadline_in: never in the past for a long wait, never later than asked
 * for a short one, and tv_nsec always valid. Before it, the local backend
 * added (time_t)inf to the clock: undefined, in practice a deadline in the
 * past or none at all. */
Test(env, deadlines_are_checked)
{
    const double now = zc__now_s();
    static const double far[] = {INFINITY, 1e30, 1e19, 4.7e18};
    for (size_t i = 0; i < sizeof far / sizeof far[0]; i++) {
        struct timespec t = zc__deadline_in(far[i]);
        cr_assert_eq((int64_t)t.tv_sec, INT64_MAX, "%g s", far[i]);
        cr_assert(t.tv_nsec >= 0 && t.tv_nsec < 1000000000L);
    }
    static const double none[] = {NAN, -1, -INFINITY, 0};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        struct timespec t = zc__deadline_in(none[i]);
        cr_assert(ts_s(t) >= now && ts_s(t) < now + 3600, "%g s gave %f (now %f)", none[i],
                  ts_s(t), now);
    }
    for (double s = 0.001; s < 700000; s *= 7.3) {
        struct timespec t = zc__deadline_in(s);
        cr_assert(t.tv_nsec >= 0 && t.tv_nsec < 1000000000L, "%g s", s);
        /* Between now + s and now + s plus an hour of scheduling delay:
         * the sum, not a wrapped or truncated one. */
        cr_assert(ts_s(t) >= now + s - 1e-6 && ts_s(t) < now + s + 3600, "%g s gave %f (now %f)",
                  s, ts_s(t), now);
    }
}
