/* Where the sum-of-squares kernel (reduce.cu) puts each byte: the index
 * arithmetic of its tiles, shared with a plain-C test
 * (tests/device/test_sumsq_tile.c) that replays the kernel's schedule on the
 * host, checks that every element lands once in the right lane's row in
 * index order, that no shared-memory access has a bank conflict, and that
 * the sum equals the host's bitwise.
 *
 * One warp owns one group: ZC_SUMSQ_FANIN (32) consecutive blocks of
 * ZC_SUMSQ_BLOCK elements, lane r the r-th block (a row). The group goes
 * through shared memory one tile at a time: ZC_SUMSQ_TILE_BYTES of every row
 * (a column strip 32 rows high). Loading a tile, load k of lane l reads the
 * 16-byte vector (k * 32 + l) of the tile in row-major order, so lanes 0-15
 * read 256 consecutive bytes of one row and lanes 16-31 those of the next:
 * every load instruction reads whole 128-byte lines. Rows are
 * ZC_SUMSQ_ROW_PITCH bytes apart in shared memory (16 bytes of padding), so
 * that the 8 lanes of a quarter-warp reading the same vector of 8 different
 * rows hit 8 different groups of 4 banks. Each lane then reads its own row
 * left to right and adds the squares in index order.
 *
 * Plain C: included by kernels/reduce.cu (nvcc) and by the test (gcc). */
#ifndef ZC_KERNELS_SUMSQ_TILE_H
#define ZC_KERNELS_SUMSQ_TILE_H

#include <stddef.h>

#include "device/sumsq_order.h"

/* Bytes of each row per tile, the padded row pitch in shared memory, and the
 * shared memory of one warp's tile. */
#define ZC_SUMSQ_TILE_BYTES 256
#define ZC_SUMSQ_ROW_PITCH (ZC_SUMSQ_TILE_BYTES + 16)
#define ZC_SUMSQ_TILE_SMEM (ZC_SUMSQ_FANIN * ZC_SUMSQ_ROW_PITCH)
/* 16-byte vectors per row of a tile, and loads per lane per tile. */
#define ZC_SUMSQ_VECS_PER_ROW (ZC_SUMSQ_TILE_BYTES / 16)
#define ZC_SUMSQ_LOADS_PER_LANE (ZC_SUMSQ_FANIN * ZC_SUMSQ_VECS_PER_ROW / 32)

/* Tiles per group for elements of esz bytes (4 or 2). */
ZC_SUMSQ_HD static inline unsigned zc__sumsq_tiles(unsigned esz)
{
    return ZC_SUMSQ_BLOCK * esz / ZC_SUMSQ_TILE_BYTES;
}

/* Load k of lane `lane`: its row (block of the group) and 16-byte vector. */
ZC_SUMSQ_HD static inline unsigned zc__sumsq_load_row(unsigned k, unsigned lane)
{
    return (k * 32 + lane) / ZC_SUMSQ_VECS_PER_ROW;
}

ZC_SUMSQ_HD static inline unsigned zc__sumsq_load_vec(unsigned k, unsigned lane)
{
    return (k * 32 + lane) % ZC_SUMSQ_VECS_PER_ROW;
}

/* Byte offset of vector `vec` of row `row` in a warp's shared tile. */
ZC_SUMSQ_HD static inline unsigned zc__sumsq_smem_off(unsigned row, unsigned vec)
{
    return row * ZC_SUMSQ_ROW_PITCH + vec * 16;
}

/* Index of the first element of vector `vec` of row `row` in tile `t` of
 * group g (esz-byte elements). */
ZC_SUMSQ_HD static inline size_t zc__sumsq_elem(size_t g, unsigned row, unsigned t, unsigned vec,
                                                unsigned esz)
{
    return (g * ZC_SUMSQ_FANIN + row) * (size_t)ZC_SUMSQ_BLOCK +
           (size_t)t * (ZC_SUMSQ_TILE_BYTES / esz) + (size_t)vec * (16 / esz);
}

#endif
