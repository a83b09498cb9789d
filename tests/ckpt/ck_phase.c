/* Checkpoint test phases (ck_phase.h). */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_phase.h"
#include "core/engine.h"

static void rank_main(void *arg, zc_comm *comm, int r)
{
    ck_phase *ph = arg;
    t_ctx x;
    ph->load_rc[r] = ph->save_rc[r] = ZC_OK;
    if (t_ctx_open(&x, ph->run, r, comm) != ZC_OK) {
        snprintf(ph->err[r], sizeof ph->err[r], "open: %s", ph->run->err[r]);
        goto out;
    }
    ph->io_after_open[r] = x.eng->faults.seen[ZC_FAULT_IO];
    if (ph->hook)
        ph->hook(&x, r, CK_AFTER_OPEN, ph->hook_arg);
    if (ph->load_dir) {
        ph->load_rc[r] = zc_checkpoint_load(x.eng, ph->load_dir, ph->load_tag);
        snprintf(ph->load_msg[r], sizeof ph->load_msg[r], "%s",
                 ph->load_rc[r] ? zc_last_error() : "");
        ph->io_after_load[r] = x.eng->faults.seen[ZC_FAULT_IO];
        if (ph->hook)
            ph->hook(&x, r, CK_AFTER_LOAD, ph->hook_arg);
        if (r == 0)
            ph->scale_after_load = zc_loss_scale(x.eng);
        ph->broken[r] = x.eng->state == ZC_ENG_BROKEN;
        if (ph->broken[r]) {
            zc_step_info info;
            ph->after_rc[r] = zc_step(x.eng, &info);
            snprintf(ph->after_msg[r], sizeof ph->after_msg[r], "%s", zc_last_error());
            goto out;
        }
    }
    for (int s = ph->first; s < ph->first + ph->n; s++) {
        zc_step_info info;
        if (t_train_step(&x, s, &info) != ZC_OK) {
            snprintf(ph->err[r], sizeof ph->err[r], "step %d: %s", s, ph->run->err[r]);
            goto out;
        }
        if (r == 0 && s < T_MAX_STEPS)
            ph->info[s] = info;
    }
    if (ph->save_dir) {
        ph->save_rc[r] = zc_checkpoint_save(x.eng, ph->save_dir, ph->save_tag);
        snprintf(ph->save_msg[r], sizeof ph->save_msg[r], "%s",
                 ph->save_rc[r] ? zc_last_error() : "");
    }
    if (r == 0)
        ph->cur_hysteresis = x.eng->scaler.cur_hysteresis;
    if (t_gather(&x, ph->master) != ZC_OK)
        snprintf(ph->err[r], sizeof ph->err[r], "gather: %s", ph->run->err[r]);
out:
    t_ctx_close(&x);
}

bool ck_phase_run(ck_phase *ph)
{
    if (!ph->master)
        ph->master = calloc((size_t)t_total_numel(), sizeof(float));
    if (ph->fail_pinned_alloc > 0)
        zc__mem_fail_after(ZC_MEMKIND_PINNED, ph->fail_pinned_alloc);
    const bool ran = t_on_ranks(ph->run->world, rank_main, ph, ph->err[0], sizeof ph->err[0]);
    if (ph->fail_pinned_alloc > 0)
        zc__mem_fail_after(ZC_MEMKIND_PINNED, 0);
    return ran && ck_phase_error(ph)[0] == '\0';
}

const char *ck_phase_error(const ck_phase *ph)
{
    for (int r = 0; r < T_MAX_WORLD; r++)
        if (ph->err[r][0])
            return ph->err[r];
    return "";
}

bool ck_saved_make(ck_saved *s, const t_run *run, int n, const char *tag)
{
    memset(s, 0, sizeof *s);
    s->run = *run;
    s->phase = (ck_phase){.run = &s->run, .first = 0, .n = n, .save_tag = tag};
    s->dir = ck_tmpdir();
    if (!s->dir) {
        snprintf(s->phase.err[0], sizeof s->phase.err[0], "ck_tmpdir failed");
        return false;
    }
    s->phase.save_dir = s->dir;
    if (!ck_phase_run(&s->phase))
        return false;
    for (int r = 0; r < s->run.world; r++)
        if (s->phase.save_rc[r] != ZC_OK) {
            char msg[sizeof s->phase.err[r] - 32];
            snprintf(msg, sizeof msg, "%s", s->phase.save_msg[r]);
            snprintf(s->phase.err[r], sizeof s->phase.err[r], "rank %d: save: %s", r, msg);
            return false;
        }
    return true;
}

void ck_saved_free(ck_saved *s)
{
    free(s->phase.master);
    s->phase.master = NULL;
    ck_rm_tree(s->dir);
    free(s->dir);
    s->dir = NULL;
}

char *ck_tmpdir(void)
{
    char *d = strdup("/tmp/zc_ckpt_test_XXXXXX");
    if (d && !mkdtemp(d)) {
        free(d);
        return NULL;
    }
    return d;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

void ck_rm_tree(const char *dir)
{
    if (dir)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
