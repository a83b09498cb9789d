/* Checks shared by the Lion and Adagrad tests (tests/optim only): bitwise
 * comparison of two runs, and the reference fixtures of
 * scripts/make_optim_fixtures.py. */
#ifndef ZC_TESTS_OPTIM_EW_CHECK_H
#define ZC_TESTS_OPTIM_EW_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "zeroc/zeroc.h"

/* Asserts a[i] and b[i] have the same bits for every i < n, except that a
 * NaN meets any NaN (which of two NaN operands an addition passes on is not
 * fixed by C, so NaN payloads may differ between the scalar reference and
 * the vector code). dt: F32, F16 or BF16. Returns how many elements were NaN
 * on both sides with different bits. */
size_t ew_assert_same(const void *a, const void *b, size_t n, zc_dtype dt, const char *what,
                      const char *field);

/* The fixture file `name` (lion.json, adagrad.json) from
 * $ZC_OPTIM_FIXTURES; fails the test when it cannot be read. Free with
 * json_decref. */
json_t *ew_fixture_load(const char *name);

/* A number of a case (fails the test when missing). */
double ew_fixture_num(const json_t *c, const char *key);

/* Array `key` of a case into out[n] (step < 0: a plain array; else row
 * `step` of an array of arrays). */
void ew_fixture_array(const json_t *c, const char *key, int step, double *out, size_t n);

/* Asserts |got[i] - want[i]| <= rel * peak[i] for every i, after raising
 * peak[i] (in/out: the caller starts it at |initial value|) to |want[i]|:
 * relative to the largest magnitude the reference value has had so far in
 * its trajectory. fp32 rounding errors are relative to the terms a value is
 * computed from, and a value that cancels (Lion's m = b2 m + (1 - b2) g
 * falling from 7.7e-4 to 2.4e-5) keeps in later steps the absolute error of
 * its larger past; relative to the small result alone, exact fp32
 * arithmetic would miss 1e-6. Returns the largest ratio seen. */
double ew_assert_close(const float *got, const double *want, double *peak, size_t n, double rel,
                       const char *what);

#endif
