/* Block structure of the DeepSpeed JSON, deprecated names and the hints for
 * unknown keys ("did you mean", "belongs under"). */
#ifndef ZC_CONFIG_HINTS_H
#define ZC_CONFIG_HINTS_H

#include "config/internal.h"

/* True for a path that names a JSON object of the schema ("fp16",
 * "zero_optimization.offload_param", "bfloat16", ...). */
bool zc__cfg_is_block(const char *path);

/* True for a top-level DeepSpeed feature zeroc does not use (ignored quietly). */
bool zc__cfg_is_ignored_feature(const char *name);

/* Writes "; did you mean X?" or "; it belongs under B (B.x)" for an unknown
 * dotted path, or "" when nothing is close. */
void zc__cfg_hint(const char *path, char *buf, size_t cap);

/* Deprecated names: index or -1; *new_path names the replacement. */
int zc__cfg_deprecated_find(const char *path, const char **new_path);
zc_status zc__cfg_apply_deprecated(zc_config *cfg, int dep, const json_t *v, zc_cfg_diag *d);

/* Walks a block (or the root, path "") given as JSON. */
zc_status zc__cfg_walk_block(zc_config *cfg, const char *path, const json_t *v,
                             zc_cfg_origin origin, unsigned flags, zc_cfg_diag *d);

#endif
