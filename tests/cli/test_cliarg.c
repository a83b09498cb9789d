/* tools/cliarg.c: every number a flag takes is parsed exactly or refused
 * with a message that names the flag, the value and the range. */
#include <criterion/criterion.h>
#include <string.h>

#include "cliarg.h"

static char err[ZC_ARG_ERRLEN];

#define REFUSED_U64(text, lo, hi, flags, why)                                                  \
    do {                                                                                       \
        uint64_t v_ = 12345;                                                                   \
        err[0] = '\0';                                                                         \
        cr_expect(!zc__arg_u64("--x", text, lo, hi, flags, &v_, err, sizeof err),             \
                  "'%s' was accepted", text);                                                  \
        cr_expect_eq(v_, 12345, "'%s' changed the output", text);                             \
        cr_expect(strstr(err, "--x '") == err, "'%s': message does not name the flag: %s", text, \
                  err);                                                                        \
        cr_expect(strstr(err, why), "'%s': expected '%s' in: %s", text, why, err);             \
    } while (0)

static uint64_t u64_ok(const char *text, uint64_t lo, uint64_t hi, unsigned flags)
{
    uint64_t v = 0;
    cr_assert(zc__arg_u64("--x", text, lo, hi, flags, &v, err, sizeof err), "'%s': %s", text,
              err);
    return v;
}

Test(cliarg, whole_numbers_exact)
{
    cr_expect_eq(u64_ok("0", 0, 10, 0), 0);
    cr_expect_eq(u64_ok("17", 0, 100, 0), 17);
    cr_expect_eq(u64_ok("5e8", 0, UINT64_MAX, 0), 500000000);
    cr_expect_eq(u64_ok("2.5e1", 0, 100, 0), 25);
    cr_expect_eq(u64_ok("18446744073709551615", 0, UINT64_MAX, 0), UINT64_MAX);
    /* 2^53 + 1: a trip through double would give 2^53. */
    cr_expect_eq(u64_ok("9007199254740993", 0, UINT64_MAX, 0), 9007199254740993ull);
    cr_expect_eq(u64_ok("1K", 0, UINT64_MAX, ZC_ARG_SUFFIX), 1024);
    cr_expect_eq(u64_ok("1.5K", 0, UINT64_MAX, ZC_ARG_SUFFIX), 1536);
    cr_expect_eq(u64_ok("0.5K", 0, UINT64_MAX, ZC_ARG_SUFFIX), 512);
    cr_expect_eq(u64_ok("16MiB", 0, UINT64_MAX, ZC_ARG_SUFFIX), 16u << 20);
    cr_expect_eq(u64_ok("2GB", 0, UINT64_MAX, ZC_ARG_SUFFIX), 2ull << 30);
    cr_expect_eq(u64_ok("1T", 0, UINT64_MAX, ZC_ARG_SUFFIX), 1ull << 40);
    cr_expect_eq(u64_ok("000000000000000000000000000000000000000000042", 0, 100, 0), 42);
    cr_expect_eq(u64_ok("42.000000000000000000000000000000000000000000", 0, 100, 0), 42);
}

Test(cliarg, hostile_values_refused)
{
    REFUSED_U64("nan", 1, 100, ZC_ARG_SUFFIX, "is not a number");
    REFUSED_U64("inf", 1, 100, ZC_ARG_SUFFIX, "is not a number");
    REFUSED_U64("-inf", 1, 100, 0, "is not a number");
    REFUSED_U64("", 1, 100, 0, "is not a number");
    REFUSED_U64(" 5", 1, 100, 0, "is not a number");
    REFUSED_U64("5 ", 1, 100, 0, "is not a number");
    REFUSED_U64("0x10", 1, 100, 0, "is not a number");
    REFUSED_U64("1e", 1, 100, 0, "is not a number");
    REFUSED_U64("--5", 1, 100, 0, "is not a number");
    REFUSED_U64("5K", 1, 1u << 20, 0, "is not a number"); /* no suffix allowed here */
    REFUSED_U64("5Q", 1, 1u << 20, ZC_ARG_SUFFIX, "is not a number");
    REFUSED_U64("1.5", 1, 100, 0, "is not a whole number");
    REFUSED_U64("1e-5", 0, 100, 0, "is not a whole number");
    REFUSED_U64("1.0000000000000000000000000000000000000000001", 0, 100, 0,
                "is not a whole number");
    REFUSED_U64("1e30", 1, UINT64_MAX, 0, "is out of range");
    REFUSED_U64("1e999999999999", 1, UINT64_MAX, 0, "is out of range");
    REFUSED_U64("18446744073709551616", 0, UINT64_MAX, 0, "is out of range");
    REFUSED_U64("16E", 0, UINT64_MAX, ZC_ARG_SUFFIX, "is not a number");
    REFUSED_U64("17179869184T", 0, UINT64_MAX, ZC_ARG_SUFFIX, "is out of range");
    REFUSED_U64("-1", 0, 100, 0, "is out of range");
    REFUSED_U64("0", 1, 100, 0, "is out of range");
    REFUSED_U64("101", 1, 100, 0, "[1, 100]");
}

Test(cliarg, message_is_safe_to_print)
{
    uint64_t v;
    char big[5000];
    memset(big, '9', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_expect(!zc__arg_u64("--n", big, 1, 10, 0, &v, err, sizeof err));
    cr_expect(strlen(err) < sizeof err - 1, "message not bounded: %zu", strlen(err));
    cr_expect(strstr(err, "..."), "long value not shortened: %s", err);
    cr_expect(!zc__arg_u64("--n", "1\n\x1b[2J", 1, 10, 0, &v, err, sizeof err));
    cr_expect(!strchr(err, '\n') && !strchr(err, '\x1b'), "control bytes printed: %s", err);
    cr_expect(strstr(err, "\\x0a"), "newline not escaped: %s", err);
}

Test(cliarg, signed_and_int)
{
    int64_t v = 0;
    cr_expect(zc__arg_i64("--x", "-9223372036854775808", INT64_MIN, INT64_MAX, 0, &v, err,
                          sizeof err));
    cr_expect_eq(v, INT64_MIN);
    cr_expect(!zc__arg_i64("--x", "9223372036854775808", INT64_MIN, INT64_MAX, 0, &v, err,
                           sizeof err));
    int i = 7;
    cr_expect(!zc__arg_int("--batch", "2147483648", 1, 65536, &i, err, sizeof err));
    cr_expect_eq(i, 7);
    cr_expect(strstr(err, "--batch '2147483648' is out of range"), "%s", err);
    cr_expect(!zc__arg_int("--world", "4294967297", 1, 64, &i, err, sizeof err));
    cr_expect_eq(i, 7);
    cr_expect(zc__arg_int("--world", "-0", 0, 64, &i, err, sizeof err) && i == 0);
}

Test(cliarg, doubles)
{
    double d = 3;
    cr_expect(zc__arg_double("--lr", "1e-3", 0, 1e9, &d, err, sizeof err) && d == 1e-3);
    const char *bad[] = {"nan", "inf", "-inf", "infinity", "0x1p3", " 1", "1 ", "", "1e",
                         "1e999", "1e-999", "-1", "++1"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        d = 3;
        cr_expect(!zc__arg_double("--lr", bad[k], 0, 1e9, &d, err, sizeof err), "'%s'", bad[k]);
        cr_expect_eq(d, 3);
        cr_expect(strstr(err, "--lr '"), "%s", err);
    }
}

Test(cliarg, lists)
{
    uint64_t v[4] = {9, 9, 9, 9};
    int n = -1;
    cr_expect(zc__arg_u64_list("--n", "1K,2,3M", 1, UINT64_MAX, ZC_ARG_SUFFIX, v, 4, &n, err,
                               sizeof err));
    cr_expect(n == 3 && v[0] == 1024 && v[1] == 2 && v[2] == 3u << 20);
    const char *bad[] = {"", ",", "1,", ",1", "1,,2", "1,2,3,4,5", "1,nan", "1, 2"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        uint64_t w[4] = {9, 9, 9, 9};
        n = -1;
        cr_expect(!zc__arg_u64_list("--n", bad[k], 1, 100, 0, w, 4, &n, err, sizeof err), "'%s'",
                  bad[k]);
        cr_expect(n == -1 && w[0] == 9 && w[3] == 9, "'%s' changed the output", bad[k]);
        cr_expect(strstr(err, "--n '"), "%s", err);
    }
}

Test(cliarg, checked_arithmetic)
{
    uint64_t r;
    cr_expect(!zc__mul_u64(UINT64_C(1) << 62, 4, &r));
    cr_expect(zc__mul_u64(UINT64_C(1) << 31, 4, &r) && r == UINT64_C(1) << 33);
    cr_expect(!zc__add_u64(UINT64_MAX, 1, &r));
}
