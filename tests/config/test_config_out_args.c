/* The loaders' out-parameter contract (include/zeroc/zeroc.h): on failure
 * *out is NULL, whatever else is NULL - zc_config_load(&c, NULL) left c as
 * it was, so a caller that then called zc_config_destroy(c) freed garbage. */
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "zeroc/zeroc.h"

static zc_config *const junk = (zc_config *)0x1;

Test(config_out_args, a_null_path_or_text_sets_out_to_null)
{
    zc_config *c = junk;
    cr_assert_eq(zc_config_load(&c, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_null(c);
    cr_assert(strstr(zc_last_error(), "zc_config_load: json_path is NULL"), "%s",
              zc_last_error());
    c = junk;
    cr_assert_eq(zc_config_load_ex(&c, NULL, ZC_CONFIG_LENIENT), ZC_ERR_INVALID_ARG);
    cr_assert_null(c);
    c = junk;
    cr_assert_eq(zc_config_load_string(&c, NULL, "x", 0), ZC_ERR_INVALID_ARG);
    cr_assert_null(c);
    cr_assert(strstr(zc_last_error(), "json_text is NULL"), "%s", zc_last_error());
    zc_config_destroy(c); /* what a caller does next: NULL is a no-op */
    /* A NULL out is refused without touching anything. */
    cr_assert_eq(zc_config_load(NULL, "x.json"), ZC_ERR_INVALID_ARG);
    cr_assert(strstr(zc_last_error(), "out is NULL"), "%s", zc_last_error());
    cr_assert_eq(zc_config_load_string(NULL, "{}", "x", 0), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_config_create(NULL), ZC_ERR_INVALID_ARG);
    /* And a missing file: NULL too. */
    c = junk;
    cr_assert_neq(zc_config_load(&c, "/nonexistent/zeroc/config.json"), ZC_OK);
    cr_assert_null(c);
    t_assert_no_leaks();
}
