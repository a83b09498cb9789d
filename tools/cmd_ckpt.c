/* zeroc ckpt: look at, export and reshard checkpoints offline.
 *
 *   zeroc ckpt inspect DIR [--tag T] [--json]
 *   zeroc ckpt export DIR OUT.safetensors [--tag T] [--dtype fp32|bf16|fp16]
 *   zeroc ckpt reshard IN OUT --world W [--tag T]
 *   zeroc ckpt import MODEL.safetensors|INDEX.json OUT --world W --config CFG.json
 *                     [--map FILE | --names hf-gpt2] [--tag T]
 *   zeroc ckpt export DIR OUT [--names hf-gpt2 | --map FILE] [--max-shard-size SIZE]
 *
 * import builds W engines as threads with CFG, streams the model into them
 * (zc_load_safetensors) and saves OUT/TAG (default global_step0) as
 * zc_checkpoint_save does; export with names or shards is ckpt_hf.c's.
 * The tool writes only what it creates: export creates OUT with O_EXCL and
 * O_NOFOLLOW (an existing file or link is refused), reshard writes
 * OUT/.TAG.partial, then OUT/TAG and OUT/latest (an existing OUT/TAG is
 * refused; so is a staging directory that is a link or was not made by a
 * zeroc save: ckpt/dirwrite.h). On a failure or on SIGINT/SIGTERM/SIGHUP it
 * removes what it had created and nothing else: the export only while the
 * name is still the file it created (same device and inode), the staging
 * directory only through its own descriptor, opened without following a
 * link and holding the marker. The handler uses only open, openat, fstatat,
 * unlinkat, rmdir and close on precomputed names: async-signal-safe. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/dirwrite.h"
#include "ckpt/format.h"
#include "ckpt/source.h"
#include "ckpt_hf.h"
#include "cliarg.h"
#include "zeroc/zeroc.h"

int zc__cmd_ckpt(int argc, char **argv);

#define WORLD_MAX 65536

/* What the signal handler removes. */
static char sig_file[ZC_CK_PATH_MAX];          /* export: OUT */
static dev_t sig_file_dev;                     /* ... while it is this file */
static ino_t sig_file_ino;
static char sig_out[ZC_CK_PATH_MAX];           /* reshard: OUT */
static char sig_stage[ZC_CK_TAG_MAX + 16];     /* reshard: .TAG.partial in OUT */
static char sig_tag[ZC_CK_TAG_MAX + 1];        /* reshard: TAG in OUT */
static char sig_outdir[ZC_CK_PATH_MAX];        /* reshard: OUT when we created it */
static int sig_world;
/* export with names or shards: every file (and the directory) it created,
 * each removed only while its name is still that file. */
#define CREATED_MAX 1024
static struct {
    char path[4200];
    dev_t dev;
    ino_t ino;
    bool dir;
} created[CREATED_MAX];
static volatile int ncreated;

static void note_created(const char *path)
{
    struct stat st;
    if (ncreated >= CREATED_MAX || fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    const int i = ncreated;
    snprintf(created[i].path, sizeof created[i].path, "%s", path);
    created[i].dev = st.st_dev;
    created[i].ino = st.st_ino;
    created[i].dir = S_ISDIR(st.st_mode);
    ncreated = i + 1;
}

static void remove_created(void)
{
    for (int i = ncreated - 1; i >= 0; i--) {
        struct stat st;
        if (fstatat(AT_FDCWD, created[i].path, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            st.st_dev != created[i].dev || st.st_ino != created[i].ino)
            continue;
        if (created[i].dir)
            rmdir(created[i].path);
        else if (S_ISREG(st.st_mode))
            unlink(created[i].path);
    }
    ncreated = 0;
}

static size_t cat(char *d, size_t cap, size_t at, const char *s)
{
    while (*s && at + 1 < cap)
        d[at++] = *s++;
    d[at] = '\0';
    return at;
}

/* The staging directory of an interrupted reshard: the names a reshard
 * writes, through the directory's descriptor, only when it is a directory
 * (not a link) holding the marker of a zeroc save. Without the marker it is
 * removed only when empty (interrupted between its creation and the
 * marker's: AT_REMOVEDIR removes nothing else). Once the staging directory
 * has been renamed to OUT/TAG the checkpoint is complete and stays; only the
 * marker the rename carried along is taken out of it. */
static void remove_stage(void)
{
    static const char *const tails[] = {".bin", ".bin.tmp", ".idx", ".idx.tmp"};
    int dfd = open(sig_out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    int sfd = openat(dfd, sig_stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (sfd < 0 && errno == ENOENT) {
        int tfd = !sig_tag[0] ? -1 : openat(dfd, sig_tag, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (tfd >= 0) {
            if (fstatat(tfd, ZC_CK_STAGING_MARK, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(st.st_mode))
                unlinkat(tfd, ZC_CK_STAGING_MARK, 0);
            close(tfd);
        }
        unlinkat(dfd, ZC_CK_LATEST ".tmp", 0);
        close(dfd);
        return;
    }
    if (sfd < 0 || fstatat(sfd, ZC_CK_STAGING_MARK, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode)) {
        if (sfd >= 0) {
            close(sfd);
            unlinkat(dfd, sig_stage, AT_REMOVEDIR);
        }
        close(dfd);
        return;
    }
    char p[64];
    for (int r = 0; r < sig_world; r++) {
        char num[6] = "00000";
        for (int i = 4, v = r; i >= 0; i--, v /= 10)
            num[i] = (char)('0' + v % 10);
        for (int t = 0; t < 4; t++) {
            size_t n = cat(p, sizeof p, 0, "rank_");
            n = cat(p, sizeof p, n, num);
            cat(p, sizeof p, n, tails[t]);
            unlinkat(sfd, p, 0);
        }
    }
    unlinkat(sfd, ZC_CK_MANIFEST, 0);
    unlinkat(sfd, ZC_CK_MANIFEST ".tmp", 0);
    unlinkat(sfd, ZC_CK_STAGING_MARK, 0);
    close(sfd);
    unlinkat(dfd, sig_stage, AT_REMOVEDIR);
    /* Between the checkpoint's rename and `latest`: the temporary pointer
     * (a link there is removed itself, never its target). */
    unlinkat(dfd, ZC_CK_LATEST ".tmp", 0);
    close(dfd);
}

/* The export's output, while the name is still the file it created. */
static void remove_output(void)
{
    struct stat st;
    if (fstatat(AT_FDCWD, sig_file, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        st.st_dev == sig_file_dev && st.st_ino == sig_file_ino)
        unlink(sig_file);
}

/* After a failure: the library removed what it staged itself. */
static void cleanup(void)
{
    if (sig_file[0])
        remove_output();
    remove_created();
    if (sig_outdir[0])
        rmdir(sig_outdir); /* only if empty: a completed checkpoint stays */
}

static void on_signal(int sig)
{
    if (sig_stage[0])
        remove_stage();
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static int usage(FILE *f)
{
    fprintf(f, "usage: zeroc ckpt inspect DIR [--tag T] [--json]\n"
               "       zeroc ckpt export DIR OUT.safetensors [--tag T] [--dtype fp32|bf16|fp16]\n"
               "                         [--names hf-gpt2 | --map FILE] [--max-shard-size SIZE]\n"
               "       zeroc ckpt reshard IN OUT --world W [--tag T]\n"
               "       zeroc ckpt import MODEL.safetensors|INDEX.json OUT --world W --config "
               "CFG.json\n"
               "                         [--names hf-gpt2 | --map FILE] [--tag T]\n"
               "DIR holds checkpoints saved by zc_checkpoint_save; without --tag the one named "
               "by DIR/latest.\n"
               "export --max-shard-size SIZE (e.g. 5G): OUT is a new directory of Hugging Face's "
               "sharded layout,\n"
               "  model-0000i-of-0000K.safetensors and model.safetensors.index.json.\n"
               "--names hf-gpt2: the GPT example's parameters under GPT2LMHeadModel's names "
               "(Conv1D weights\n"
               "  transposed); --map FILE: a JSON object {\"file tensor\": \"parameter\" | "
               "null |\n"
               "  {\"param\": \"parameter\", \"transposed\": true}} (null: skipped on "
               "import).\n"
               "import writes OUT/TAG (default global_step0), which zc_checkpoint_load and "
               "train_gpt --resume\n"
               "  take; its engines hold what CFG places in host memory (stage 3 with NVMe "
               "offload: little).\n");
    return f == stdout ? 0 : 2;
}

static int fail(const char *what)
{
    fprintf(stderr, "zeroc ckpt %s: %s\n", what, zc_last_error());
    return 1;
}

/* Splits argv into up to npos positional arguments and the flags. */
typedef struct opts {
    const char *pos[3];
    int npos;
    const char *tag, *dtype, *world, *config, *map, *names, *max_shard;
    bool json;
} opts;

static bool parse(int argc, char **argv, opts *o, const char *cmd)
{
    memset(o, 0, sizeof *o);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--tag")              ? &o->tag
                            : !strcmp(a, "--dtype")          ? &o->dtype
                            : !strcmp(a, "--world")          ? &o->world
                            : !strcmp(a, "--config")         ? &o->config
                            : !strcmp(a, "--map")            ? &o->map
                            : !strcmp(a, "--names")          ? &o->names
                            : !strcmp(a, "--max-shard-size") ? &o->max_shard
                                                             : NULL;
        if (slot) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zeroc ckpt %s: %s needs a value\n", cmd, a);
                return false;
            }
            *slot = argv[++i];
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "zeroc ckpt %s: unknown option '%s'\n", cmd, a);
            return false;
        } else if (o->npos < 3) {
            o->pos[o->npos++] = a;
        } else {
            fprintf(stderr, "zeroc ckpt %s: too many arguments ('%s')\n", cmd, a);
            return false;
        }
    }
    return true;
}

static void print_shape(const zc_ck_param *p)
{
    printf("[");
    for (int d = 0; d < p->ndim; d++)
        printf("%s%lld", d ? ", " : "", (long long)p->shape[d]);
    printf("]");
}

static int inspect(const opts *o)
{
    if (o->npos != 1 || o->dtype || o->world || o->config || o->map || o->names || o->max_shard)
        return usage(stderr);
    zc_ck_source s;
    if (zc__ck_source_open(&s, o->pos[0], o->tag) != ZC_OK)
        return fail("inspect");
    const zc_ck_manifest *m = &s.m;
    if (o->json) {
        /* What was validated, written again: not the file read a second
         * time (it may have changed since). */
        fflush(stdout);
        zc_status rc = zc__ck_manifest_write(m, STDOUT_FILENO, "standard output");
        zc__ck_source_close(&s);
        return rc == ZC_OK ? 0 : fail("inspect");
    }
    int64_t elems = 0;
    for (int i = 0; i < m->nparams; i++)
        elems += m->params[i].numel;
    uint64_t bytes = 0;
    for (int f = 0; f < m->nfiles; f++)
        bytes += m->files[f].bytes;
    printf("checkpoint   %s (format %s version %d)\n", s.dir, ZC_CK_FORMAT, m->version);
    printf("step         %lld (%lld skipped, %lld optimizer updates; next lr %.6g)\n",
           (long long)m->steps, (long long)m->skipped, (long long)m->adam_steps, m->lr);
    printf("saved by     %d ranks, ZeRO stage %d, %s parameters\n", m->world, m->stage,
           zc_dtype_name(m->dtype));
    printf("loss scaler  %s, scale %.17g, hysteresis left %lld, iteration %lld, last overflow "
           "%lld\n",
           m->scaler.dynamic ? "dynamic" : "static/none", m->scaler.scale,
           (long long)m->scaler.cur_hysteresis, (long long)m->scaler.cur_iter,
           (long long)m->scaler.last_overflow_iter);
    printf("config       digest %016llx\n", (unsigned long long)m->config_digest);
    printf("model        %d tensors, %lld elements, %d chunks\n", m->nparams, (long long)elems,
           m->nchunks);
    printf("files        %d, %llu bytes (%s master, %s exp_avg, %s exp_avg_sq; %lld "
           "entries)\n",
           m->nfiles, (unsigned long long)bytes, zc_dtype_name(m->kdt[ZC_CK_MASTER]),
           zc_dtype_name(m->kdt[ZC_CK_EXP_AVG]), zc_dtype_name(m->kdt[ZC_CK_EXP_AVG_SQ]),
           (long long)m->nentries);
    for (int f = 0; f < m->nfiles; f++)
        printf("  %s  %llu bytes\n", m->files[f].name, (unsigned long long)m->files[f].bytes);
    printf("tensors\n");
    for (int i = 0; i < m->nparams; i++) {
        const zc_ck_param *p = &m->params[i];
        printf("  %-40s %s ", p->name, zc_dtype_name(m->kdt[ZC_CK_MASTER]));
        print_shape(p);
        printf("  group %d  chunk %d+%lld\n", p->group, p->chunk, (long long)p->offset);
    }
    zc__ck_source_close(&s);
    return 0;
}

static int export_cmd(const opts *o)
{
    if (o->npos != 2 || o->world || o->json || o->config)
        return usage(stderr);
    zc_dtype dt = ZC_DTYPE_F32;
    if (o->dtype) {
        if (!strcmp(o->dtype, "fp32"))
            dt = ZC_DTYPE_F32;
        else if (!strcmp(o->dtype, "bf16"))
            dt = ZC_DTYPE_BF16;
        else if (!strcmp(o->dtype, "fp16"))
            dt = ZC_DTYPE_F16;
        else {
            fprintf(stderr, "zeroc ckpt export: --dtype '%s': use fp32, bf16 or fp16\n",
                    o->dtype);
            return 2;
        }
    }
    const char *out = o->pos[1];
    if (strlen(out) >= sizeof sig_file) {
        fprintf(stderr, "zeroc ckpt export: output path is too long\n");
        return 2;
    }
    if (o->map || o->names || o->max_shard) {
        uint64_t max_shard = 0;
        char err[ZC_ARG_ERRLEN];
        if (o->max_shard && !zc__arg_u64("--max-shard-size", o->max_shard, 1,
                                         (uint64_t)1 << 50, ZC_ARG_SUFFIX, &max_shard, err,
                                         sizeof err)) {
            fprintf(stderr, "zeroc ckpt export: %s\n", err);
            return 2;
        }
        ckpt_names nm;
        if (!ckpt_names_open(&nm, o->map, o->names, "export"))
            return 2;
        install_handlers();
        int r = ckpt_export_run(o->pos[0], o->tag, out, dt, &nm, max_shard, note_created);
        if (r != 0)
            cleanup();
        ncreated = 0;
        ckpt_names_close(&nm);
        return r;
    }
    install_handlers();
    int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "zeroc ckpt export: %s: cannot create (%s)%s\n", out, strerror(errno),
                errno == EEXIST ? "; the tool does not overwrite files" : "");
        if (fd >= 0) {
            close(fd);
            unlink(out);
        }
        return 1;
    }
    sig_file_dev = st.st_dev;
    sig_file_ino = st.st_ino;
    snprintf(sig_file, sizeof sig_file, "%s", out);
    zc_status rc = zc_checkpoint_export_fd(o->pos[0], o->tag, fd, dt);
    /* fail() prints the library's last error: set one for these too. */
    if (rc == ZC_OK && fsync(fd) != 0)
        rc = ZC_ERR(ZC_ERR_IO, "%s: fsync: %s", out, strerror(errno));
    if (close(fd) != 0 && rc == ZC_OK)
        rc = ZC_ERR(ZC_ERR_IO, "%s: close: %s", out, strerror(errno));
    if (rc != ZC_OK) {
        int r = fail("export");
        cleanup();
        return r;
    }
    sig_file[0] = '\0';
    return 0;
}

static int reshard(const opts *o)
{
    if (o->npos != 2 || o->dtype || o->json || !o->world || o->config || o->map || o->names ||
        o->max_shard)
        return usage(stderr);
    int world = 0;
    char err[256];
    if (!zc__arg_int("--world", o->world, 1, WORLD_MAX, &world, err, sizeof err)) {
        fprintf(stderr, "zeroc ckpt reshard: %s\n", err);
        return 2;
    }
    const char *in = o->pos[0], *out = o->pos[1];
    char tag[ZC_CK_TAG_MAX + 1];
    /* The tag is known before anything is written, so the handler knows
     * the staging directory's name. */
    if (zc__ck_resolve_tag(in, o->tag, tag) != ZC_OK)
        return fail("reshard");
    if (strlen(out) + strlen(tag) + 32 >= sizeof sig_out) {
        fprintf(stderr, "zeroc ckpt reshard: output path is too long\n");
        return 2;
    }
    install_handlers();
    if (mkdir(out, 0755) == 0)
        snprintf(sig_outdir, sizeof sig_outdir, "%s", out);
    else if (errno != EEXIST) {
        fprintf(stderr, "zeroc ckpt reshard: %s: cannot create (%s)\n", out, strerror(errno));
        return 1;
    }
    snprintf(sig_out, sizeof sig_out, "%s", out);
    /* OUT/TAG is ours to take the marker out of only when the reshard makes
     * it: an existing one is refused by the reshard and never touched. */
    struct stat tst;
    char tpath[ZC_CK_PATH_MAX];
    snprintf(tpath, sizeof tpath, "%s/%s", out, tag);
    if (fstatat(AT_FDCWD, tpath, &tst, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
        snprintf(sig_tag, sizeof sig_tag, "%s", tag);
    snprintf(sig_stage, sizeof sig_stage, ".%s.partial", tag);
    sig_world = world;
    zc_status rc = zc_checkpoint_reshard(in, tag, out, world);
    if (rc != ZC_OK) {
        int r = fail("reshard");
        cleanup();
        return r;
    }
    sig_stage[0] = sig_outdir[0] = '\0';
    printf("resharded %s/%s for %d ranks into %s/%s\n", in, tag, world, out, tag);
    return 0;
}

/* The staging directory of a save into OUT/TAG is the handler's to remove
 * (as reshard's), OUT itself when the command made it. */
static bool stage_for_signals(const char *out, const char *tag, int world, const char *cmd)
{
    if (strlen(out) + strlen(tag) + 32 >= sizeof sig_out) {
        fprintf(stderr, "zeroc ckpt %s: output path is too long\n", cmd);
        return false;
    }
    install_handlers();
    if (mkdir(out, 0755) == 0)
        snprintf(sig_outdir, sizeof sig_outdir, "%s", out);
    else if (errno != EEXIST) {
        fprintf(stderr, "zeroc ckpt %s: %s: cannot create (%s)\n", cmd, out, strerror(errno));
        return false;
    }
    snprintf(sig_out, sizeof sig_out, "%s", out);
    struct stat tst;
    char tpath[ZC_CK_PATH_MAX];
    snprintf(tpath, sizeof tpath, "%s/%s", out, tag);
    if (fstatat(AT_FDCWD, tpath, &tst, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
        snprintf(sig_tag, sizeof sig_tag, "%s", tag);
    snprintf(sig_stage, sizeof sig_stage, ".%s.partial", tag);
    sig_world = world;
    return true;
}

static int import_cmd(const opts *o)
{
    if (o->npos != 2 || o->dtype || o->json || !o->world || !o->config || o->max_shard)
        return usage(stderr);
    int world = 0;
    char err[256];
    if (!zc__arg_int("--world", o->world, 1, 4096, &world, err, sizeof err)) {
        fprintf(stderr, "zeroc ckpt import: %s\n", err);
        return 2;
    }
    const char *tag = o->tag ? o->tag : "global_step0";
    if (!zc__ck_tag_valid(tag)) {
        fprintf(stderr, "zeroc ckpt import: --tag '%s': a tag is 1-128 characters of "
                "[A-Za-z0-9._-], not starting with '.'\n", tag);
        return 2;
    }
    ckpt_names nm;
    if (!ckpt_names_open(&nm, o->map, o->names, "import"))
        return 2;
    if (!stage_for_signals(o->pos[1], tag, world, "import")) {
        ckpt_names_close(&nm);
        return 1;
    }
    int r = ckpt_import_run(o->pos[0], o->pos[1], tag, world, o->config, &nm);
    if (r != 0)
        cleanup();
    sig_stage[0] = sig_outdir[0] = '\0';
    ckpt_names_close(&nm);
    return r;
}

int zc__cmd_ckpt(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return usage(argc < 2 ? stderr : stdout);
    opts o;
    const char *cmd = argv[1];
    if (!parse(argc, argv, &o, cmd))
        return 2;
    if (!strcmp(cmd, "inspect"))
        return inspect(&o);
    if (!strcmp(cmd, "export"))
        return export_cmd(&o);
    if (!strcmp(cmd, "reshard"))
        return reshard(&o);
    if (!strcmp(cmd, "import"))
        return import_cmd(&o);
    fprintf(stderr, "zeroc ckpt: unknown command '%s'\n", cmd);
    return usage(stderr);
}
