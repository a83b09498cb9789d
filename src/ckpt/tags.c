/* Tags, the `latest` pointer and the config digest. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/regfile.h"
#include "ckpt/dirwrite.h"
#include "ckpt/format.h"
#include "ckpt/fsio.h"
#include "ckpt/hash.h"
#include "config/config.h"

bool zc__ck_tag_valid(const char *tag)
{
    size_t n = tag ? strlen(tag) : 0;
    /* A leading '.' is reserved for the staging directories (.TAG.partial),
     * so no tag can collide with one, nor be "." or "..". */
    if (n == 0 || n > ZC_CK_TAG_MAX || tag[0] == '.')
        return false;
    return strspn(tag, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

zc_status zc__ck_resolve_tag(const char *dir, const char *tag, char *out)
{
    if (tag) {
        if (!zc__ck_tag_valid(tag))
            return ZC_ERR(ZC_ERR_INVALID_ARG, "checkpoint tag '%s' is not valid: use 1-%d "
                          "characters of [A-Za-z0-9._-], not starting with '.'", tag,
                          ZC_CK_TAG_MAX);
        snprintf(out, ZC_CK_TAG_MAX + 1, "%s", tag);
        return ZC_OK;
    }
    char path[ZC_CK_PATH_MAX];
    ZC_CHECK(zc__ck_join(path, sizeof path, dir, ZC_CK_LATEST));
    int fd;
    char why[ZC_CK_PATH_MAX + 128];
    switch (zc__open_regular(path, 0, "a file holding the tag of the newest checkpoint", &fd,
                             NULL, why, sizeof why)) {
    case ZC_OPEN_OK:
        break;
    case ZC_OPEN_FAILED:
        if (errno == ENOENT)
            return ZC_ERR(ZC_ERR_IO, "%s (no checkpoint saved in %s?)", why, dir);
        return ZC_ERR(ZC_ERR_IO, "%s", why);
    default:
        return ZC_ERR(ZC_ERR_IO, "%s", why);
    }
    char buf[ZC_CK_TAG_MAX + 2];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n <= 0 || (size_t)n > ZC_CK_TAG_MAX + 1 || buf[n - 1] != '\n')
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: must hold one tag and a newline", path);
    buf[n - 1] = '\0';
    if (!zc__ck_tag_valid(buf))
        return ZC_ERR(ZC_ERR_INVALID_ARG, "%s: '%s' is not a valid tag", path, buf);
    memcpy(out, buf, (size_t)n);
    return ZC_OK;
}

uint64_t zc__ck_config_digest(const zc_config *c)
{
    char b[2048];
    const zc_sched_cfg *s = &c->scheduler;
    int n = snprintf(b, sizeof b,
                     "opt %d %.17g %.17g %.17g %.17g %.17g %d %d clip %.17g "
                     "fp16 %d %.17g %" PRId64 " %" PRId64 " %" PRId64 " %d %.17g bf16 %d "
                     "sched %d %.17g %.17g %" PRId64 " %d %" PRId64 " %.17g %.17g "
                     "%.17g %.17g %.17g %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                     " %d %.17g %.17g %.17g %.17g %.17g %" PRId64 " %d",
                     (int)c->optimizer.adamw_type, c->optimizer.lr, c->optimizer.beta1,
                     c->optimizer.beta2, c->optimizer.eps, c->optimizer.weight_decay,
                     (int)c->optimizer.adam_w_mode, (int)c->optimizer.bias_correction,
                     c->gradient_clipping, (int)c->fp16.enabled, c->fp16.loss_scale,
                     c->fp16.initial_scale_power, c->fp16.loss_scale_window, c->fp16.hysteresis,
                     (int)c->fp16.consecutive_hysteresis, c->fp16.min_loss_scale,
                     (int)c->bf16.enabled, (int)s->type, s->warmup_min_lr, s->warmup_max_lr,
                     s->warmup_num_steps, (int)s->warmup_log, s->total_num_steps,
                     s->warmup_min_ratio, s->cos_min_ratio, s->cycle_min_lr, s->cycle_max_lr,
                     s->decay_lr_rate, s->cycle_first_step_size, s->cycle_second_step_size,
                     s->cycle_first_stair_count, s->cycle_second_stair_count, s->decay_step_size,
                     (int)s->cycle_momentum, s->cycle_min_mom, s->cycle_max_mom, s->decay_mom_rate,
                     s->lr_range_test_min_lr, s->lr_range_test_step_rate,
                     s->lr_range_test_step_size, (int)s->lr_range_test_staircase);
    return XXH3_64bits(b, n > 0 && (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}
