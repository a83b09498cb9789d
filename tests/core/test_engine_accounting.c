/* Memory and communication accounting against the ZeRO formulas.
 *
 * With bf16 parameters, Psi elements and W ranks, per rank (issue 1):
 *   stage 0: params 2Psi,   grads 2Psi,    master 4Psi,   adam 8Psi
 *   stage 1: params 2Psi,   grads 2Psi,    master 4Psi/W, adam 8Psi/W
 *   stage 2: params 2Psi,   grads 4Psi/W,  master 4Psi/W, adam 8Psi/W
 *   stage 3: params 2Psi/W, grads 4Psi/W,  master 4Psi/W, adam 8Psi/W
 * and per step (persistence threshold 0): stage 0 all-reduce 2Psi; stages 1
 * and 2 reduce-scatter 2Psi + all-gather 2Psi; stage 3 all-gather 4Psi
 * (forward and backward) + reduce-scatter 2Psi.
 *
 * Padding bound: the engine pads each chunk to a multiple of W*64 elements,
 * so it works on Psi_p elements with Psi <= Psi_p < Psi + chunks*W*64. The
 * test computes Psi_p itself from the documented layout (six chunks of known
 * used sizes) and checks the bound, then checks every figure exactly against
 * the formula evaluated at Psi_p (so each lies between the formula at Psi and
 * at Psi + chunks*W*64). Transient buffers are zero once a step is over. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "helpers.h"
#include "t_engine.h"

static int64_t padded_psi(int world)
{
    const int64_t align = 64 * (int64_t)world;
    int64_t s = 0;
    for (int l = 0; l < T_NLAYERS; l++)
        s += (t_layer_numel[l] + align - 1) / align * align;
    return s;
}

static t_run *run_acct(int stage, int world, zc_dtype dt, int accum)
{
    t_run *r = calloc(1, sizeof *r);
    t_run_init(r, stage, world, dt);
    r->steps = 3;
    r->accum = accum;
    r->layerwise = true;
    r->persistence = 0;
    cr_assert(t_engine_run(r), "stage %d world %d: %s", stage, world, t_run_error(r));
    return r;
}

static void free_run(t_run *r)
{
    free(r->master);
    free(r);
}

Test(accounting, bf16_memory_and_comm_match_formulas)
{
    const int64_t psi = t_total_numel();
    for (int W = 1; W <= 4; W++) {
        const int64_t P = padded_psi(W);
        cr_assert(P >= psi && P < psi + T_NLAYERS * W * 64, "padding bound");
        for (int stage = 0; stage <= 3; stage++) {
            t_run *r = run_acct(stage, W, ZC_DTYPE_BF16, 1);
            const int64_t want_params = stage == 3 ? 2 * P / W : 2 * P;
            const int64_t want_grads = stage >= 2 ? 4 * P / W : 2 * P;
            const int64_t want_master = stage == 0 ? 4 * P : 4 * P / W;
            const int64_t want_adam = stage == 0 ? 8 * P : 8 * P / W;
            int64_t want_comm[ZC_COLL__COUNT] = {0};
            if (stage == 0)
                want_comm[ZC_COLL_ALL_REDUCE] = 2 * P;
            else if (stage < 3) {
                want_comm[ZC_COLL_REDUCE_SCATTER] = 2 * P;
                want_comm[ZC_COLL_ALL_GATHER] = 2 * P;
            } else {
                want_comm[ZC_COLL_REDUCE_SCATTER] = 2 * P;
                want_comm[ZC_COLL_ALL_GATHER] = 4 * P;
            }
            for (int rank = 0; rank < W; rank++) {
                const zc_stats *s = &r->stats[rank];
                cr_assert_eq(s->num_params, psi);
                cr_assert_eq(s->padded_params, P);
                cr_assert_eq(s->num_chunks, T_NLAYERS);
                cr_assert_eq(s->stage, stage);
                cr_assert_eq(s->bytes[ZC_MEM_PARAMS], want_params, "W %d stage %d params %lld",
                             W, stage, (long long)s->bytes[ZC_MEM_PARAMS]);
                cr_assert_eq(s->bytes[ZC_MEM_GRADS], want_grads, "W %d stage %d grads %lld", W,
                             stage, (long long)s->bytes[ZC_MEM_GRADS]);
                cr_assert_eq(s->bytes[ZC_MEM_MASTER], want_master);
                cr_assert_eq(s->bytes[ZC_MEM_ADAM], want_adam);
                cr_assert_eq(s->bytes[ZC_MEM_BUFFERS], 0, "W %d stage %d: %lld transient bytes",
                             W, stage, (long long)s->bytes[ZC_MEM_BUFFERS]);
                for (int k = 0; k < ZC_COLL__COUNT; k++)
                    cr_assert_eq(s->comm_bytes_last_step[k], want_comm[k],
                                 "W %d stage %d collective %d: %lld bytes, formula %lld", W,
                                 stage, k, (long long)s->comm_bytes_last_step[k],
                                 (long long)want_comm[k]);
                cr_assert_eq(s->gathers_last_step, stage == 3 ? 2 * T_NLAYERS : 0);
                cr_assert_eq(s->steps, 3);
            }
            /* Every step moves the same volume, not just the last one. */
            for (int st = 0; st < r->steps; st++)
                for (int k = 0; k < ZC_COLL__COUNT; k++)
                    cr_assert_eq(r->step_stats[st].comm_bytes_last_step[k], want_comm[k]);
            free_run(r);
        }
    }
    t_assert_no_leaks();
}

/* With accumulation K > 1, stages 0/1 add a full fp32 accumulator (the user's
 * 16-bit buffer is zeroed every micro-step): grads = 2Psi + 4Psi. They still
 * reduce once per window; stages 2/3 reduce-scatter every micro-step. */
Test(accounting, accumulation_grads_and_comm)
{
    const int W = 2, K = 4;
    const int64_t P = padded_psi(W);
    for (int stage = 0; stage <= 3; stage++) {
        t_run *r = run_acct(stage, W, ZC_DTYPE_BF16, K);
        const zc_stats *s = &r->stats[1];
        cr_assert_eq(s->bytes[ZC_MEM_GRADS], stage >= 2 ? 4 * P / W : 2 * P + 4 * P);
        if (stage == 0)
            cr_assert_eq(s->comm_bytes_last_step[ZC_COLL_ALL_REDUCE], 2 * P);
        else
            cr_assert_eq(s->comm_bytes_last_step[ZC_COLL_REDUCE_SCATTER],
                         stage == 1 ? 2 * P : K * 2 * P);
        if (stage == 3)
            cr_assert_eq(s->comm_bytes_last_step[ZC_COLL_ALL_GATHER], K * 4 * P);
        free_run(r);
    }
    t_assert_no_leaks();
}

/* fp32 parameters keep a working copy next to the fp32 master (one code path
 * for every dtype): params 4Psi, master 4Psi in stage 0. */
Test(accounting, fp32_params)
{
    const int64_t P = padded_psi(1);
    t_run *r = run_acct(0, 1, ZC_DTYPE_F32, 1);
    cr_assert_eq(r->stats[0].bytes[ZC_MEM_PARAMS], 4 * P);
    cr_assert_eq(r->stats[0].bytes[ZC_MEM_GRADS], 4 * P);
    cr_assert_eq(r->stats[0].bytes[ZC_MEM_MASTER], 4 * P);
    cr_assert_eq(r->stats[0].comm_bytes_last_step[ZC_COLL_ALL_REDUCE], 4 * P);
    free_run(r);
    t_assert_no_leaks();
}
