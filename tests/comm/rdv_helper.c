/* One rank of a rendezvous test: a separate process, started by
 * tests/comm/test_bootstrap.c with posix_spawn (tests never fork).
 *
 *   zc_rdv_helper SEED
 *
 * Reads its rank from the launcher environment (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT, ...) exactly as zc_comm_init_env does, runs the rendezvous on
 * MASTER_PORT+1 with a 128-byte blob that rank 0 fills from SEED, and checks
 * that it received rank 0's bytes. Exit: 0 ok, 2 the rendezvous failed (the
 * message is on stderr), 3 wrong bytes, 4 bad usage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/bootstrap.h"
#include "comm/rendezvous.h"

static uint8_t expected(unsigned long seed, size_t i)
{
    return (uint8_t)((seed * 2654435761u + i * 131u) >> 3);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 4;
    unsigned long seed = strtoul(argv[1], NULL, 10);
    zc_launch_env env;
    if (zc__launch_env_read(&env, true) != ZC_OK) {
        fprintf(stderr, "%s\n", zc_last_error());
        return 2;
    }
    double timeout_s = 0;
    if (zc__bootstrap_timeout(&timeout_s) != ZC_OK) {
        fprintf(stderr, "%s\n", zc_last_error());
        return 2;
    }
    uint8_t blob[128] = {0};
    if (env.rank == 0)
        for (size_t i = 0; i < sizeof blob; i++)
            blob[i] = expected(seed, i);
    zc_rdv_opts o = {.addr = env.master_addr, .port = env.master_port + 1, .rank = env.rank,
                     .world = env.world, .timeout_s = timeout_s};
    if (zc__rendezvous(&o, blob, sizeof blob) != ZC_OK) {
        fprintf(stderr, "%s\n", zc_last_error());
        return 2;
    }
    for (size_t i = 0; i < sizeof blob; i++)
        if (blob[i] != expected(seed, i)) {
            fprintf(stderr, "rank %d: byte %zu is %u, want %u\n", env.rank, i, blob[i],
                    expected(seed, i));
            return 3;
        }
    return 0;
}
