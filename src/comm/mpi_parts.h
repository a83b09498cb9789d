/* What the MPI communicator (mpi.c) uses from its two other files
 * (internal): MPI's process-wide lifetime (mpi_lib.c) and the rank-order
 * arithmetic of its reductions (mpi_sum.c). mpi.h is the contract. */
#ifndef ZC_COMM_MPI_PARTS_H
#define ZC_COMM_MPI_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "base/error.h"
#include "comm/bootstrap.h"
#include "zeroc/zeroc.h"

/* ---- mpi_lib.c ----------------------------------------------------------- */

/* ZC_ERR_COMM "<what>: <MPI's text for code>". */
zc_status zc__mpi_errstr(int code, const char *what);
/* One more user of MPI in this process: MPI_Init_thread (SERIALIZED) when
 * nobody initialised it; ZC_ERR_COMM when MPI was finalised already. */
zc_status zc__mpi_ref(void);
/* One user less: the last one finalises MPI when zeroc initialised it and
 * every user was healthy (!healthy: a collective never finished, so MPI is
 * never finalised in this process). */
void zc__mpi_unref(int healthy);
/* ZC_ERR_CONFIG naming `what` when the launcher's env (NULL: none) gives
 * another rank or world than MPI's. */
zc_status zc__mpi_check_env(const zc_launch_env *env, int rank, int world, const char *what);

/* ---- mpi.c and mpi_split.c ---------------------------------------------- */

/* The communicator over mc, which it takes (with one zc__mpi_ref the caller
 * holds): its shared-memory split gives local_rank/local_world; node_ranks
 * <= 0 takes that split's size. Collective over mc. On failure mc is freed
 * and the reference dropped. `what` names the public call in messages. */
zc_status zc__mpi_wrap(MPI_Comm mc, double timeout, int world_rank, int node_ranks,
                       const char *what, zc_comm **out);
/* The communicator's own duplicate, for MPI_Comm_split. */
MPI_Comm zc__mpi_handle(const zc_comm *c);
/* Its reserved split exchange: ZC_SPLIT_REC * (world + 1) words. */
int32_t *zc__mpi_split_records(zc_comm *c);
/* zc_comm_split on MPI (mpi_split.c): the mpi_ops' split. */
zc_status zc__mpi_split(zc_comm *c, int colour, int key, zc_comm **out);

/* ---- mpi_sum.c ----------------------------------------------------------- */

/* all_reduce's split: rank k owns [n*k/W, n*(k+1)/W), the local
 * communicator's. los has W+1 entries. */
void zc__mpi_ranges(size_t n, int W, size_t *los);
/* d[i] += s[i] (d and s do not overlap). */
void zc__mpi_add_f32(float *restrict d, const float *restrict s, size_t n);
/* d[i] = a[i] + b[i]; d may be a or b. */
void zc__mpi_add2_f32(float *d, const float *a, const float *b, size_t n);
/* Whether [a, a + bytes) and [b, b + bytes) overlap. */
int zc__mpi_overlaps(const void *a, const void *b, size_t bytes);
/* The local communicator's MAX over the W contributions of n elements of dt
 * in scratch (rank-major) into dst: rank order, the first maximum kept, a
 * NaN replaces whatever came before. */
void zc__mpi_max_rank_order(void *dst, const void *scratch, size_t n, int W, zc_dtype dt);

#endif
