/* What zc_engine_build says of a configuration file: loads it, makes a world
 * of one on the host, registers a small model (two tensors, 2 x 64 x 64
 * elements), builds, and prints two lines - the call that refused it (load,
 * create, build) or "ok", then zc_last_error() (empty when ok). Exit status
 * 0 whatever the verdict (2: bad usage). check_config_vs_build.py compares
 * this with `zeroc config check` on the same file. */
#include <stdio.h>

#include "zeroc/zeroc.h"

static int verdict(const char *phase, const char *message)
{
    printf("%s\n%s\n", phase, message);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CONFIG.json\n", argv[0]);
        return 2;
    }
    zc_config *cfg = NULL;
    if (zc_config_load(&cfg, argv[1]) != ZC_OK)
        return verdict("load", zc_last_error());
    zc_comm *comm = NULL;
    if (zc_comm_local_world(1, &comm) != ZC_OK) {
        zc_config_destroy(cfg);
        return verdict("comm", zc_last_error());
    }
    zc_engine_options o = ZC_ENGINE_OPTIONS_INIT;
    o.device = ZC_DEVICE_HOST;
    zc_engine *e = NULL;
    int rc = 0;
    if (zc_engine_create(&e, cfg, comm, &o) != ZC_OK) {
        rc = verdict("create", zc_last_error());
    } else {
        const int64_t shape[2] = {64, 64};
        if (!zc_param_add(e, "a", shape, 2, 0) || !zc_param_add(e, "b", shape, 2, 0))
            rc = verdict("add", zc_last_error());
        else if (zc_engine_build(e) != ZC_OK)
            rc = verdict("build", zc_last_error());
        else
            rc = verdict("ok", "");
    }
    zc_engine_destroy(e);
    zc_comm_destroy(comm);
    zc_config_destroy(cfg);
    return rc;
}
