/* An integer beyond 64 bits in a config.
 *
 * jansson refuses such a number as a syntax error, which names a line and a
 * column, not a key. Two ways to name the key:
 * 1. parse again with integers read as reals and let the schema check the
 *    keys zeroc reads (key, value and range, as for any out-of-range value);
 * 2. failing that (the number is past even a double, or sits in a block
 *    zeroc ignores), read the member name written just before the number.
 * The document is refused either way: accepting it through the reals would
 * round every integer above 2^53 of the file without a word. */
#include <ctype.h>
#include <string.h>

#include "config/hints.h"
#include "config/internal.h"

/* The member name whose value ends at text[end), JSON-decoded into a new
 * string (caller json_decref's it), or NULL when the number is not a member
 * value (an array element) or the text around it cannot be read back. */
static json_t *member_before(const char *text, size_t end)
{
    size_t i = end;
    while (i > 0 && (isdigit((unsigned char)text[i - 1]) || strchr("+-.eE", text[i - 1])))
        i--;
    while (i > 0 && isspace((unsigned char)text[i - 1]))
        i--;
    if (i == 0 || text[i - 1] != ':')
        return NULL;
    i--;
    while (i > 0 && isspace((unsigned char)text[i - 1]))
        i--;
    if (i == 0 || text[i - 1] != '"')
        return NULL;
    size_t close = --i;
    /* The opening quote: the first '"' going back that is not escaped (an
     * even number of backslashes before it). */
    while (i > 0) {
        i--;
        if (text[i] != '"')
            continue;
        size_t bs = 0;
        while (i >= bs + 1 && text[i - bs - 1] == '\\')
            bs++;
        if (bs % 2 == 0)
            break;
    }
    if (text[i] != '"' || i == close)
        return NULL;
    json_t *s = json_loadb(text + i, close - i + 1, JSON_DECODE_ANY, NULL);
    if (s && !json_is_string(s)) {
        json_decref(s);
        return NULL;
    }
    return s;
}

void zc__cfg_explain_big_integer(const char *text, size_t len, unsigned flags, zc_cfg_diag *d,
                                 const json_error_t *jerr)
{
    int before = d->nerr;
    zc_cfg_diag inner = {0};
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, NULL);
    zc_config *cfg = NULL;
    if (root && json_is_object(root) && zc_config_create(&cfg) == ZC_OK &&
        zc__cfg_walk_block(cfg, "", root, ZC_ORIGIN_FILE, flags, &inner) == ZC_OK) {
        for (int i = 0; i < inner.n; i++)
            if (inner.v[i].sev == ZC_SEV_ERROR && strstr(inner.v[i].msg, "out of range"))
                zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, inner.v[i].path, "%s",
                             inner.v[i].msg);
    }
    zc_config_destroy(cfg);
    json_decref(root);
    zc__diag_free(&inner);
    if (d->nerr > before)
        return;
    /* jansson's position is just past the refused token. */
    size_t pos = (size_t)jerr->position <= len ? (size_t)jerr->position : len;
    json_t *name = member_before(text, pos);
    size_t digits = 0;
    for (size_t i = pos; i > 0 && isdigit((unsigned char)text[i - 1]); i--)
        digits++;
    /* A top-level key is found by its name alone: its own range is the one
     * to state; otherwise the range every integer of the file must meet. */
    int k = name ? zc__cfg_key_find(json_string_value(name)) : -1;
    if (k >= 0 && (zc__cfg_keys[k].type == ZC_KT_I64 || zc__cfg_keys[k].type == ZC_KT_I32 ||
                   zc__cfg_keys[k].type == ZC_KT_F64)) {
        char range[64];
        zc__cfg_range_text(&zc__cfg_keys[k], range, sizeof range);
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, json_string_value(name),
                     "an integer of %zu digits (line %d, column %d) is out of range %s", digits,
                     jerr->line, jerr->column, range);
    } else if (name)
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, json_string_value(name),
                     "an integer of %zu digits (line %d, column %d) is out of range [%lld, %lld]: "
                     "zeroc reads every integer of a config as 64-bit",
                     digits, jerr->line, jerr->column, (long long)INT64_MIN,
                     (long long)INT64_MAX);
    else
        zc__diag_add(d, ZC_SEV_ERROR, ZC_ERR_CONFIG, "",
                     "invalid JSON at line %d, column %d: %s (integers must fit in 64 bits)",
                     jerr->line, jerr->column, jerr->text);
    json_decref(name);
}
