/* The checkpoint checksum, XXH3-64 (internal): xxHash's header, with its x86
 * dispatcher where the library has one. The dispatcher picks the widest
 * vector unit the CPU has (SSE2, AVX2, AVX-512) at the first call; the plain
 * functions are built for the baseline SSE2. XXH3 is defined bit for bit
 * whatever the vector width, so every build and every CPU computes the same
 * checksums; the dispatched ones hash about twice as fast where AVX2 is
 * there (bench/RESULTS.md, "Checkpoints"). */
#ifndef ZC_CKPT_HASH_H
#define ZC_CKPT_HASH_H

#include <xxhash.h>

#include "zc_build_config.h"

#if ZC_HAVE_XXH_DISPATCH
/* Replaces XXH3_64bits and XXH3_64bits_update with their _dispatch forms. */
#include <xxh_x86dispatch.h>
#endif

#endif
