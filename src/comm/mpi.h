/* The MPI communicator (internal; built when meson finds MPI, -Dmpi=auto).
 *
 * One rank per process, host buffers only (the bound device must be the
 * host). Every collective is deterministic whatever algorithm the MPI
 * library would pick, because MPI never adds anything: it only moves bytes,
 * and the sums are done here, in rank order, by the host device's
 * reduce_sum - the very function the local communicator uses (fp32 through
 * an equivalent loop: the same adds per element in the same order) - so results
 * are bitwise equal to the local communicator's for the same world size:
 *
 *   all_reduce(n):      rank r owns elements [n*r/W, n*(r+1)/W) (the local
 *                       communicator's split). Each rank sends slice k of its
 *                       buffer to rank k (MPI_Isend/MPI_Irecv, W-1 pairs),
 *                       sums the W contributions of its own slice in rank
 *                       order (fp32, rounded once for 16-bit), then sends
 *                       its summed slice to every rank. Bytes sent per rank:
 *                       2(W-1)/W * n elements, the volume of a ring
 *                       all-reduce, but W-1 messages per phase (a direct
 *                       exchange: fine for the few ranks of a node, more
 *                       latency than a ring for many); the extra costs over
 *                       MPI_Allreduce are one copy of the own slice into
 *                       scratch and the summing pass on one core.
 *   reduce_scatter(m):  the same first phase and sum: (W-1)/W of the input
 *                       sent, as a ring.
 *   all_gather:         each rank sends its part to every rank (no
 *                       arithmetic); all_to_all the same exchange with block
 *                       k of the send to rank k; broadcast and barrier are
 *                       MPI_Ibcast and MPI_Ibarrier.
 *   MAX (fp32/fp64/int32 flags): like SUM, the rank-order loop of the local
 *                       communicator (NaN wins).
 * Messages are tagged with the collective's sequence number and phase.
 * Scratch: one buffer per collective in flight, W slices of the reduced
 * range (about the payload size), kept and reused between calls.
 *
 * Non-blocking: every call posts non-blocking MPI requests and polls them
 * with MPI_Testsome against a deadline of ZC_COMM_TIMEOUT seconds (default
 * 600): a spin of 50 us after each sign of progress, then naps of an
 * eighth of the time waited, 50 us to 1 ms (base/backoff.h), so a rank
 * waiting for a late peer leaves its core to it.
 * Outside a group a call returns when its result is ready; between
 * group_start and group_end the exchanges of every collective are posted at
 * once and finished at group_end, so they overlap each other (and, on the
 * rank, whatever the caller does before group_end). Collectives are started
 * in call order on every rank, which MPI requires of non-blocking
 * collectives on one communicator.
 *
 * A collective not finished by its deadline fails with ZC_ERR_COMM naming
 * the rank, the collective, its sequence number and size, and breaks the
 * communicator for good (requests still posted cannot be taken back safely
 * while the peer may yet match them): every later call
 * returns ZC_ERR_COMM. The process should then exit non-zero; mpirun ends the
 * rest of the job. MPI errors are returned (MPI_ERRORS_RETURN on the
 * communicator's own duplicate of MPI_COMM_WORLD), never fatal.
 *
 * MPI itself: initialised (MPI_THREAD_SERIALIZED) by the first MPI
 * communicator unless the program did it, and finalised by zeroc when the
 * last one is destroyed if zeroc initialised it - unless one was broken,
 * since MPI_Finalize would wait for the collective that never finished.
 * MPI cannot be initialised twice in a process: create every MPI
 * communicator before destroying the last. One thread at a time per
 * communicator (as NCCL); counts are limited to INT_MAX elements per call
 * (W * recv_count for reduce_scatter), which engine chunks stay far below. */
#ifndef ZC_COMM_MPI_H
#define ZC_COMM_MPI_H

#include <stddef.h>

#include "comm/bootstrap.h"
#include "comm/comm.h"

/* Creates this process's rank over MPI_COMM_WORLD. env (may be NULL: take
 * rank and world from MPI) is the launcher's view; MPI's rank and size must
 * agree with it (ZC_ERR_CONFIG otherwise, e.g. torchrun variables in a
 * process MPI sees as a singleton). local_rank/local_world come from MPI's
 * shared-memory split. Errors: ZC_ERR_CONFIG (malformed ZC_COMM_TIMEOUT,
 * disagreement with env), ZC_ERR_COMM (MPI failed or was already finalised),
 * ZC_ERR_NO_MEMORY. */
zc_status zc__comm_mpi_create(const zc_launch_env *env, zc_comm **out);

/* Broadcasts rank 0's `len` bytes at blob to every process of
 * MPI_COMM_WORLD (e.g. an ncclUniqueId), within timeout_s seconds. MPI's rank
 * and size must equal env's. MPI is initialised for the call when needed and
 * finalised again if zeroc initialised it and holds no MPI communicator. */
zc_status zc__mpi_bcast_blob(const zc_launch_env *env, void *blob, size_t len, double timeout_s);

#endif
