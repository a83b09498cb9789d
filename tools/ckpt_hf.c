/* zeroc ckpt import, and export with Hugging Face names and shards
 * (ckpt_hf.h). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/export.h"
#include "ckpt/source.h"
#include "ckpt_hf.h"
#include "hf_names.h"
#include "load/load.h"

#define NAME_MAX_BYTES 1024

bool ckpt_names_open(ckpt_names *nm, const char *map_file, const char *names, const char *cmd)
{
    memset(nm, 0, sizeof *nm);
    if (map_file && names) {
        fprintf(stderr, "zeroc ckpt %s: --map and --names exclude each other\n", cmd);
        return false;
    }
    if (names) {
        if (strcmp(names, "hf-gpt2")) {
            fprintf(stderr, "zeroc ckpt %s: --names '%s': the one built-in map is hf-gpt2\n",
                    cmd, names);
            return false;
        }
        nm->hf_gpt2 = true;
        return true;
    }
    if (!map_file)
        return true;
    json_error_t je;
    json_t *root = json_load_file(map_file, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        fprintf(stderr, "zeroc ckpt %s: --map %s: %s\n", cmd, map_file,
                root ? "not a JSON object of tensor names" : je.text);
        json_decref(root);
        return false;
    }
    nm->table = calloc(json_object_size(root) + 1, sizeof *nm->table);
    nm->json = root;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        zc_load_name *e = &nm->table[nm->n];
        e->file_name = key;
        if (json_is_string(v)) {
            e->param_name = json_string_value(v);
        } else if (json_is_object(v) && json_is_string(json_object_get(v, "param")) &&
                   (!json_object_get(v, "transposed") ||
                    json_is_boolean(json_object_get(v, "transposed")))) {
            e->param_name = json_string_value(json_object_get(v, "param"));
            e->transposed = json_is_true(json_object_get(v, "transposed"));
        } else if (!json_is_null(v)) {
            fprintf(stderr, "zeroc ckpt %s: --map %s: '%s' maps to neither a parameter name, "
                    "null (skip) nor {\"param\": NAME, \"transposed\": BOOL}\n", cmd, map_file,
                    key);
            ckpt_names_close(nm);
            return false;
        }
        nm->n++;
    }
    return true;
}

void ckpt_names_close(ckpt_names *nm)
{
    free(nm->table);
    json_decref(nm->json);
    memset(nm, 0, sizeof *nm);
}

static void load_options(const ckpt_names *nm, zc_load_options *o)
{
    *o = (zc_load_options)ZC_LOAD_OPTIONS_INIT;
    o->names = nm->table;
    o->n_names = nm->n;
    o->map = nm->hf_gpt2 ? zc__hf_gpt2_import : NULL;
}

/* The parameter a file tensor becomes, as zc_load_safetensors will map it:
 * the table, then the map, then its own name. false: skipped. */
static bool param_of(const ckpt_names *nm, const zc_st_tensor *t, char *name, bool *tr)
{
    *tr = false;
    for (int i = 0; i < nm->n; i++)
        if (!strcmp(nm->table[i].file_name, t->name)) {
            if (!nm->table[i].param_name)
                return false;
            snprintf(name, NAME_MAX_BYTES, "%s", nm->table[i].param_name);
            *tr = nm->table[i].transposed;
            return true;
        }
    if (nm->hf_gpt2) {
        const zc_load_map_result r =
            zc__hf_gpt2_import(NULL, t->name, t->shape, t->ndim, name, NAME_MAX_BYTES, tr);
        if (r == ZC_LOAD_SKIP)
            return false;
        if (r == ZC_LOAD_MAPPED)
            return true;
    }
    snprintf(name, NAME_MAX_BYTES, "%s", t->name);
    return true;
}

/* ---- import ------------------------------------------------------------ */

typedef struct import_job {
    const char *model, *out, *tag;
    zc_config *cfg;
    zc_comm **comms;
    const zc_st_set *set;
    char (*names)[NAME_MAX_BYTES];
    bool *take, *tr;
    zc_load_options lo;
    int rank;
    zc_status rc;
    char msg[1024];
    zc_load_stats st;
} import_job;

static void *import_rank(void *arg)
{
    import_job *j = arg;
    zc_engine *e = NULL;
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_HOST;
    zc_status rc = zc_engine_create(&e, j->cfg, j->comms[j->rank], &eo);
    for (int64_t t = 0; t < j->set->ntensors && rc == ZC_OK; t++) {
        if (!j->take[t])
            continue;
        const zc_st_tensor *x = &j->set->tensors[t];
        int64_t shape[ZC_ST_MAX_NDIM];
        for (int d = 0; d < x->ndim; d++)
            shape[d] = x->shape[j->tr[t] ? x->ndim - 1 - d : d];
        /* A 0-dimensional tensor is one element. */
        const int64_t one = 1;
        if (!zc_param_add(e, j->names[t], x->ndim ? shape : &one, x->ndim ? x->ndim : 1, 0))
            rc = ZC_ERR_INVALID_ARG;
    }
    if (rc == ZC_OK)
        rc = zc_engine_build(e);
    j->st.size = sizeof j->st;
    if (rc == ZC_OK)
        rc = zc_load_safetensors(e, j->model, &j->lo, &j->st);
    if (rc == ZC_OK)
        rc = zc_checkpoint_save(e, j->out, j->tag);
    j->rc = rc;
    if (rc != ZC_OK)
        snprintf(j->msg, sizeof j->msg, "%s", zc_last_error());
    zc_engine_destroy(e);
    return NULL;
}

int ckpt_import_run(const char *model, const char *out, const char *tag, int world,
                    const char *config, const ckpt_names *nm)
{
    zc_config *cfg = NULL;
    if (zc_config_load(&cfg, config) != ZC_OK) {
        fprintf(stderr, "zeroc ckpt import: --config %s: %s\n", config, zc_last_error());
        return 1;
    }
    zc_st_set set;
    if (zc__st_set_open(&set, model) != ZC_OK) {
        fprintf(stderr, "zeroc ckpt import: %s\n", zc_last_error());
        zc_config_destroy(cfg);
        return 1;
    }
    const size_t nt = (size_t)(set.ntensors ? set.ntensors : 1);
    char(*names)[NAME_MAX_BYTES] = calloc(nt, NAME_MAX_BYTES);
    bool *take = calloc(nt, sizeof *take), *tr = calloc(nt, sizeof *tr);
    zc_comm **comms = calloc((size_t)world, sizeof *comms);
    import_job *jobs = calloc((size_t)world, sizeof *jobs);
    pthread_t *th = calloc((size_t)world, sizeof *th);
    int status = 1, params = 0;
    if (!names || !take || !tr || !comms || !jobs || !th) {
        fprintf(stderr, "zeroc ckpt import: out of memory for %lld tensors\n",
                (long long)set.ntensors);
        goto out;
    }
    for (int64_t t = 0; t < set.ntensors; t++) {
        take[t] = param_of(nm, &set.tensors[t], names[t], &tr[t]);
        params += take[t];
    }
    if (zc_comm_local_world(world, comms) != ZC_OK) {
        fprintf(stderr, "zeroc ckpt import: %s\n", zc_last_error());
        goto out;
    }
    for (int r = 0; r < world; r++) {
        jobs[r] = (import_job){.model = model, .out = out, .tag = tag, .cfg = cfg,
                               .comms = comms, .set = &set, .names = names, .take = take,
                               .tr = tr, .rank = r};
        load_options(nm, &jobs[r].lo);
        jobs[r].lo.allow_extra = false;
    }
    int started = 0;
    for (; started < world; started++)
        if (pthread_create(&th[started], NULL, import_rank, &jobs[started]) != 0)
            break;
    for (int r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    if (started < world) {
        /* The others time out in their first collective. */
        fprintf(stderr, "zeroc ckpt import: cannot start rank thread %d\n", started);
        goto out;
    }
    for (int r = 0; r < world; r++)
        if (jobs[r].rc != ZC_OK) {
            fprintf(stderr, "zeroc ckpt import: rank %d: %s\n", r, jobs[r].msg);
            goto out;
        }
    int64_t bytes = 0;
    for (int r = 0; r < world; r++)
        bytes += jobs[r].st.bytes_read;
    printf("imported %s (%lld tensors, %d parameters) for %d ranks into %s/%s; the ranks read "
           "%.1f MiB of %.1f MiB\n", model, (long long)set.ntensors, params, world, out, tag,
           (double)bytes / 1048576.0, (double)jobs[0].st.file_bytes / 1048576.0);
    status = 0;
out:
    for (int r = 0; comms && r < world; r++)
        zc_comm_destroy(comms[r]);
    free(th);
    free(jobs);
    free(comms);
    free(names);
    free(take);
    free(tr);
    zc__st_set_free(&set);
    zc_config_destroy(cfg);
    return status;
}

/* ---- export ------------------------------------------------------------ */

/* The file name of manifest parameter i: the map inverted (the table's
 * entry that names it, or hf-gpt2's name), else its own. */
static void export_name(const ckpt_names *nm, const char *param, char *out, bool *tr)
{
    *tr = false;
    for (int i = 0; i < nm->n; i++)
        if (nm->table[i].param_name && !strcmp(nm->table[i].param_name, param)) {
            snprintf(out, NAME_MAX_BYTES, "%s", nm->table[i].file_name);
            *tr = nm->table[i].transposed;
            return;
        }
    if (nm->hf_gpt2 && zc__hf_gpt2_export(param, out, NAME_MAX_BYTES, tr))
        return;
    snprintf(out, NAME_MAX_BYTES, "%s", param);
}

static int create_file(const char *path, void (*note)(const char *))
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "zeroc ckpt export: %s: cannot create (%s)%s\n", path, strerror(errno),
                errno == EEXIST ? "; the tool does not overwrite files" : "");
        return -1;
    }
    note(path);
    return fd;
}

static bool finish_file(int fd, const char *path, zc_status rc)
{
    if (rc == ZC_OK && fsync(fd) != 0)
        rc = ZC_ERR(ZC_ERR_IO, "%s: fsync: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == ZC_OK)
        rc = ZC_ERR(ZC_ERR_IO, "%s: close: %s", path, strerror(errno));
    if (rc != ZC_OK)
        fprintf(stderr, "zeroc ckpt export: %s\n", zc_last_error());
    return rc == ZC_OK;
}

int ckpt_export_run(const char *dir, const char *tag, const char *out, zc_dtype dt,
                    const ckpt_names *nm, uint64_t max_shard, void (*note)(const char *))
{
    zc_ck_source s;
    if (zc__ck_source_open(&s, dir, tag) != ZC_OK) {
        fprintf(stderr, "zeroc ckpt export: %s\n", zc_last_error());
        return 1;
    }
    const int n = s.m.nparams;
    zc_ck_export_item *items = calloc((size_t)(n ? n : 1), sizeof *items);
    char(*names)[NAME_MAX_BYTES] = calloc((size_t)(n ? n : 1), NAME_MAX_BYTES);
    int status = 1;
    json_t *index = NULL;
    if (!items || !names) {
        fprintf(stderr, "zeroc ckpt export: out of memory for %d tensors\n", n);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        export_name(nm, s.m.params[i].name, names[i], &items[i].transposed);
        items[i].param = i;
        items[i].name = names[i];
    }
    if (!max_shard) {
        const int fd = create_file(out, note);
        if (fd >= 0 && finish_file(fd, out, zc__ck_export_items(&s, items, n, dt, fd)))
            status = 0;
        goto out;
    }
    /* Shards in order, each filled while its tensors' bytes stay within
     * max_shard (a larger tensor is a shard of its own), as Hugging Face's
     * save_pretrained cuts them. */
    const uint64_t esz = zc_dtype_size(dt);
    int shards = 0, *first = calloc((size_t)n + 2, sizeof *first);
    uint64_t total = 0, cur = 0;
    for (int i = 0; first && i < n; i++) {
        const uint64_t b = (uint64_t)s.m.params[i].numel * esz;
        if (i == 0 || cur + b > max_shard) {
            first[shards++] = i;
            cur = 0;
        }
        cur += b;
        total += b;
    }
    if (!first)
        goto out;
    first[shards] = n;
    if (mkdir(out, 0755) != 0) {
        fprintf(stderr, "zeroc ckpt export: %s: cannot create the directory (%s)%s\n", out,
                strerror(errno), errno == EEXIST ? "; the tool does not overwrite" : "");
        free(first);
        goto out;
    }
    note(out);
    index = json_object();
    json_t *meta = json_object(), *map = json_object();
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(index, "metadata", meta);
    json_object_set_new(index, "weight_map", map);
    bool ok = true;
    for (int k = 0; k < shards && ok; k++) {
        char file[64], path[4200];
        snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", k + 1, shards);
        snprintf(path, sizeof path, "%s/%s", out, file);
        const int fd = create_file(path, note);
        ok = fd >= 0 && finish_file(fd, path, zc__ck_export_items(&s, items + first[k],
                                                                 first[k + 1] - first[k], dt,
                                                                 fd));
        for (int i = first[k]; ok && i < first[k + 1]; i++)
            json_object_set_new(map, names[i], json_string(file));
    }
    free(first);
    if (ok) {
        char path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", out);
        char *text = json_dumps(index, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        const int fd = text ? create_file(path, note) : -1;
        zc_status rc = ZC_OK;
        if (fd >= 0) {
            const size_t len = strlen(text);
            if (write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1)
                rc = ZC_ERR(ZC_ERR_IO, "%s: write: %s", path, strerror(errno));
        }
        free(text);
        ok = fd >= 0 && finish_file(fd, path, rc);
        if (ok)
            printf("exported %d tensors of %s into %d shards of at most %llu bytes in %s\n", n,
                   s.dir, shards, (unsigned long long)max_shard, out);
    }
    status = ok ? 0 : 1;
out:
    json_decref(index);
    free(items);
    free(names);
    zc__ck_source_close(&s);
    return status;
}
