/* A safetensors set: one file, or a Hugging Face index and the files it
 * names (load.h).
 *
 * The index (model.safetensors.index.json) is {"metadata": {...},
 * "weight_map": {tensor: file}}; its files lie beside it and are named by a
 * plain file name (a '/' or a name of "." or ".." would reach outside the
 * directory: refused). The weight map must agree with the files: a tensor
 * it names must be in that file, and no tensor may appear in two files.
 * Tensors of a listed file that the map leaves out are part of the set, as
 * Hugging Face's loader takes every tensor of every file it opens. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/regfile.h"
#include "load/st_internal.h"

#define INDEX_MAX ((uint64_t)64 << 20) /* bytes of an index file */

void zc__st_set_free(zc_st_set *set)
{
    for (int64_t i = 0; set->tensors && i < set->ntensors; i++)
        free(set->tensors[i].name);
    for (int f = 0; set->files && f < set->nfiles; f++)
        free(set->files[f].path);
    free(set->tensors);
    free(set->files);
    free(set->index_path);
    memset(set, 0, sizeof *set);
}

int64_t zc__st_find(const zc_st_set *set, const char *name)
{
    for (int64_t i = 0; i < set->ntensors; i++)
        if (!strcmp(set->tensors[i].name, name))
            return i;
    return -1;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static zc_status add_file(zc_st_set *set, const char *path)
{
    zc_st_file *f = realloc(set->files, (size_t)(set->nfiles + 1) * sizeof *f);
    if (!f)
        return ZC_ERR(ZC_ERR_NO_MEMORY, "safetensors: a table of %d files", set->nfiles + 1);
    set->files = f;
    memset(&f[set->nfiles], 0, sizeof *f);
    if (!(f[set->nfiles].path = strdup(path)))
        return ZC_ERR(ZC_ERR_NO_MEMORY, "safetensors: file names");
    set->nfiles++;
    return ZC_OK;
}

/* The whole index file, parsed. */
static zc_status read_index(const char *path, json_t **out, uint64_t *bytes)
{
    char err[600];
    int fd = -1;
    struct stat st;
    if (zc__open_regular(path, 0, "a safetensors index (JSON)", &fd, &st, err, sizeof err) !=
        ZC_OPEN_OK)
        return ZC_ERR(ZC_ERR_IO, "%s", err);
    *bytes = (uint64_t)st.st_size;
    if (*bytes > INDEX_MAX) {
        close(fd);
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: %" PRIu64 " bytes, more than an index may hold "
                      "(%" PRIu64 ")", path, *bytes, INDEX_MAX);
    }
    char *text = malloc((size_t)*bytes + 1);
    size_t got = 0;
    while (text && got < *bytes) {
        ssize_t r = read(fd, text + got, (size_t)*bytes - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!text || got != *bytes) {
        free(text);
        return text ? ZC_ERR(ZC_ERR_IO, "%s: cannot read it whole", path)
                    : ZC_ERR(ZC_ERR_NO_MEMORY, "%s: %" PRIu64 " bytes", path, *bytes);
    }
    json_error_t je;
    *out = json_loadb(text, got, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!*out)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: not JSON: %s (line %d)", path, je.text, je.line);
    return ZC_OK;
}

/* A part's name: a plain file name in the index's directory. */
static bool plain_name(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..") && strlen(s) < 256;
}

static zc_status open_index(zc_st_set *set, const char *path)
{
    json_t *root = NULL;
    ZC_CHECK(read_index(path, &root, &set->index_bytes));
    zc_status rc = ZC_OK;
    const json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map) || !json_object_size(map)) {
        rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s: not a safetensors index: it needs a \"weight_map\" "
                    "object of tensor names to file names", path);
        goto out;
    }
    /* The directory the parts lie in. */
    const char *slash = strrchr(path, '/');
    const size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)map, key, v)
    {
        if (!json_is_string(v) || !plain_name(json_string_value(v))) {
            rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s': its file must be a plain file "
                        "name beside the index (no '/', not '.' or '..')", path, key);
            goto out;
        }
        char part[4096];
        if ((size_t)snprintf(part, sizeof part, "%.*s%s", (int)dlen, path,
                             json_string_value(v)) >= sizeof part) {
            rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s: the path of '%s' is too long", path,
                        json_string_value(v));
            goto out;
        }
        bool known = false;
        for (int f = 0; f < set->nfiles && !known; f++)
            known = !strcmp(set->files[f].path, part);
        if (!known)
            ZC_CHECK_GOTO(add_file(set, part), rc, out);
    }
    for (int f = 0; f < set->nfiles; f++)
        ZC_CHECK_GOTO(zc__st_read_header(set, f), rc, out);
    /* The map and the files agree. */
    json_object_foreach((json_t *)map, key, v)
    {
        const int64_t t = zc__st_find(set, key);
        const char *want = json_string_value(v);
        const char *have = t < 0 ? NULL : strrchr(set->files[set->tensors[t].file].path, '/');
        have = have ? have + 1 : t < 0 ? NULL : set->files[set->tensors[t].file].path;
        if (t < 0 || strcmp(have, want)) {
            rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s: the weight map puts tensor '%s' in %s, which "
                        "does not hold it%s%s", path, key, want, have ? "; it is in " : "",
                        have ? have : "");
            goto out;
        }
    }
out:
    json_decref(root);
    return rc;
}

zc_status zc__st_set_open(zc_st_set *set, const char *path)
{
    memset(set, 0, sizeof *set);
    if (!path || !*path)
        return ZC_ERR(ZC_ERR_INVALID_ARG, "safetensors: the path is NULL or empty");
    zc_status rc;
    if (ends_with(path, ".json")) {
        rc = (set->index_path = strdup(path)) ? open_index(set, path)
                                              : ZC_ERR(ZC_ERR_NO_MEMORY, "safetensors: path");
    } else {
        rc = add_file(set, path);
        if (rc == ZC_OK)
            rc = zc__st_read_header(set, 0);
    }
    /* A tensor twice: in two files of the set (one file's header cannot
     * name it twice: its JSON keys are unique). */
    for (int64_t i = 0; rc == ZC_OK && set->nfiles > 1 && i < set->ntensors; i++)
        for (int64_t j = i + 1; j < set->ntensors; j++)
            if (!strcmp(set->tensors[i].name, set->tensors[j].name)) {
                rc = ZC_ERR(ZC_ERR_INVALID_ARG, "%s: tensor '%s' is in %s and in %s", path,
                            set->tensors[i].name, set->files[set->tensors[i].file].path,
                            set->files[set->tensors[j].file].path);
                break;
            }
    if (rc != ZC_OK)
        zc__st_set_free(set);
    return rc;
}
