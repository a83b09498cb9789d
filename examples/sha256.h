/* A small SHA-256 (FIPS 180-4) so the example needs no crypto library: it
 * fingerprints the trained parameters, and equal fingerprints across ZeRO
 * stages are how the example demonstrates bitwise stage equivalence. */
#ifndef ZC_EXAMPLES_SHA256_H
#define ZC_EXAMPLES_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t len;      /* bytes hashed so far */
    uint8_t buf[64];
    size_t fill;       /* bytes waiting in buf */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
/* Writes the digest as 64 lowercase hex digits and a NUL into hex[65]. */
void sha256_final_hex(sha256_ctx *c, char hex[65]);

#endif
