/* zeroc report [--json] [--nvme-path DIR]... [--probe-seconds S]
 *
 * What was built and what this machine offers it, as DeepSpeed's ds_report
 * does for DeepSpeed: the version and build options; the host Adam variants
 * built, usable here and selected; the CPU, the cores, the NUMA nodes and
 * hwloc's topology; memory, MemAvailable and the cgroup's limits; whether
 * io_uring works; for each --nvme-path, whether O_DIRECT and io_uring are
 * taken, with a read/write probe of about --probe-seconds (default 2,
 * through zeroc's NVMe store, on a nameless file); the CUDA driver, runtime,
 * cuBLAS and NCCL found at run time, whether the CUDA plugin loads and why
 * not, the GPUs; MPI. Text by default, one JSON object with --json (the
 * sections are its members: report.h). Exit status 0 (a missing piece is
 * reported, not a failure), 2 for a usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliarg.h"
#include "report.h"

#define MAX_PATHS 16

int zc__cmd_report(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f, "usage: zeroc report [--json] [--nvme-path DIR]... [--probe-seconds 0.1..60]\n"
               "  what this build of zeroc has and what this machine offers it (ds_report)\n"
               "  --nvme-path DIR    probe DIR as an nvme_path: O_DIRECT, io_uring, and a\n"
               "                     write then read of about --probe-seconds (default 2)\n"
               "                     through zeroc's NVMe store, on a file with no name\n"
               "  --json             one JSON object instead of text\n");
}

static void print_value(const json_t *v)
{
    if (json_is_string(v))
        printf("%s", json_string_value(v));
    else if (json_is_true(v))
        printf("yes");
    else if (json_is_false(v))
        printf("no");
    else if (json_is_null(v))
        printf("-");
    else if (json_is_integer(v))
        printf("%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        printf("%.4g", json_real_value(v));
}

/* A section as indented "key ..... value" lines, objects and arrays inside
 * it indented further. */
static void print_obj(const json_t *o, int indent)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (json_is_object(v)) {
            printf("%*s%s:\n", indent, "", key);
            print_obj(v, indent + 2);
        } else if (json_is_array(v)) {
            bool scalars = true;
            size_t i;
            const json_t *x;
            json_array_foreach(v, i, x) scalars = scalars && !json_is_object(x);
            if (scalars) {
                printf("%*s%-24s ", indent, "", key);
                json_array_foreach(v, i, x) {
                    printf("%s", i ? " " : "");
                    print_value(x);
                }
                printf("%s\n", json_array_size(v) ? "" : "(none)");
            } else {
                printf("%*s%s:%s\n", indent, "", key, json_array_size(v) ? "" : " (none)");
                json_array_foreach(v, i, x) {
                    printf("%*s[%zu]\n", indent + 2, "", i);
                    print_obj(x, indent + 4);
                }
            }
        } else {
            printf("%*s%-24s ", indent, "", key);
            print_value(v);
            printf("\n");
        }
    }
}

int zc__cmd_report(int argc, char **argv)
{
    bool json = false;
    const char *paths[MAX_PATHS];
    int npaths = 0;
    double probe_s = 2.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if ((!strcmp(a, "--nvme-path") || !strcmp(a, "--probe-seconds")) && i + 1 >= argc) {
            fprintf(stderr, "zeroc report: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--nvme-path")) {
            if (npaths == MAX_PATHS) {
                fprintf(stderr, "zeroc report: at most %d --nvme-path\n", MAX_PATHS);
                return 2;
            }
            paths[npaths++] = argv[++i];
            continue;
        }
        if (!strcmp(a, "--probe-seconds")) {
            char err[ZC_ARG_ERRLEN];
            if (!zc__arg_double(a, argv[++i], 0.1, 60, &probe_s, err, sizeof err)) {
                fprintf(stderr, "zeroc report: %s\n", err);
                return 2;
            }
            continue;
        }
        fprintf(stderr, "zeroc report: unknown argument '%.200s'\n", a);
        usage(stderr);
        return 2;
    }
    json_t *r = json_object();
    json_object_set_new(r, "zeroc", zc__report_build());
    json_object_set_new(r, "host_adam", zc__report_adam());
    json_object_set_new(r, "cpu", zc__report_cpu());
    json_object_set_new(r, "topology", zc__report_topology());
    json_object_set_new(r, "memory", zc__report_memory());
    json_object_set_new(r, "io_uring", zc__report_io_uring());
    json_object_set_new(r, "nvme_paths", zc__report_nvme(paths, npaths, probe_s));
    json_object_set_new(r, "cuda", zc__report_cuda());
    json_object_set_new(r, "mpi", zc__report_mpi());
    if (json) {
        char *s = json_dumps(r, JSON_COMPACT);
        printf("%s\n", s ? s : "{}");
        free(s);
    } else {
        printf("zeroc report (what this build has and what this machine offers it)\n");
        const char *key;
        const json_t *v;
        json_object_foreach(r, key, v) {
            printf("\n%s\n", key);
            if (json_is_array(v)) {
                size_t i;
                const json_t *x;
                if (!json_array_size(v))
                    printf("  (none given: --nvme-path DIR probes one)\n");
                json_array_foreach(v, i, x) {
                    printf("  [%zu]\n", i);
                    print_obj(x, 4);
                }
            } else {
                print_obj(v, 2);
            }
        }
    }
    json_decref(r);
    return 0;
}
