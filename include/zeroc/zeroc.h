/* zeroc — ZeRO (stages 0–3) for C training loops.
 *
 * This header is the documentation of the public API. Conventions that hold for
 * every function unless its comment says otherwise:
 *   - Fallible calls return zc_status; ZC_OK is 0. On failure nothing observable
 *     has changed, and zc_last_error() holds a message with context.
 *   - Handles are opaque; each create or init call has a destroy call that accepts NULL.
 *   - The library owns memory it hands out (parameter and gradient buffers,
 *     error strings); the caller never frees it.
 *   - An engine handle belongs to one rank and is used by one thread at a time.
 *     Different engines (ranks) may be driven concurrently from different threads.
 *   - Nothing prints unless asked: see zc_log_set_level() / ZC_LOG.
 *   - Environment variables (ZC_*, and the launchers' RANK, WORLD_SIZE, ...) are
 *     parsed as strictly as flags: unset or empty means the default; a set
 *     value must be the whole text, finite and in its stated range (README,
 *     "Environment"). A bad one fails the first call below that reads it with
 *     ZC_ERR_CONFIG and a message naming the variable, its value and what is
 *     accepted - it is never ignored or replaced by a default. Variables read
 *     where no status can carry an error (a log line) are checked by the calls
 *     that begin work: zc_config_create, zc_config_load*, zc_comm_local_world,
 *     zc_comm_init_env and zc_engine_create.
 */
#ifndef ZEROC_ZEROC_H
#define ZEROC_ZEROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define ZC_API
#elif defined(__GNUC__)
#define ZC_API __attribute__((visibility("default")))
#else
#define ZC_API
#endif

#define ZEROC_VERSION_MAJOR 0
#define ZEROC_VERSION_MINOR 1
#define ZEROC_VERSION_PATCH 0

/* ------------------------------------------------------------------------- */
/* Status codes and errors                                                   */
/* ------------------------------------------------------------------------- */

typedef enum zc_status {
    ZC_OK = 0,
    ZC_ERR_INVALID_ARG,     /* a bad argument; nothing was done */
    ZC_ERR_INVALID_STATE,   /* call not allowed now (e.g. param_add after build) */
    ZC_ERR_NO_MEMORY,       /* an allocation failed or would exceed a limit */
    ZC_ERR_CONFIG,          /* configuration is malformed or contradictory */
    ZC_ERR_IO,              /* file or NVMe I/O failed */
    ZC_ERR_COMM,            /* a collective failed or timed out */
    ZC_ERR_DEVICE,          /* the device backend (CUDA) failed */
    ZC_ERR_UNSUPPORTED,     /* feature not available in this build or machine */
    ZC_ERR_LOSS_SCALE,      /* overflow with the loss scale already at its minimum */
    ZC_ERR_INTERNAL,        /* a bug in zeroc: please report it */
    ZC_STATUS__COUNT
} zc_status;

/* Static text naming a status ("invalid argument", ...). Never NULL; unknown
 * codes give "unknown status". Thread-safe. */
ZC_API const char *zc_status_str(zc_status s);

/* The message of the last failure on the calling thread, with context (source
 * location, names, sizes). Empty string if none. Library-owned and valid until
 * the next zeroc call on this thread. Thread-safe (thread-local). */
ZC_API const char *zc_last_error(void);

/* ------------------------------------------------------------------------- */
/* Logging                                                                   */
/* ------------------------------------------------------------------------- */

typedef enum zc_log_level {
    ZC_LOG_OFF = 0,
    ZC_LOG_ERROR,
    ZC_LOG_WARN,
    ZC_LOG_INFO,
    ZC_LOG_DEBUG,
    ZC_LOG_TRACE
} zc_log_level;

/* A log sink receives one formatted line (no trailing newline), its level, the
 * subsystem ("core", "zero3", "config", ...) and the rank (-1 if not known). */
typedef void (*zc_log_sink)(zc_log_level level, const char *subsys, int rank,
                            const char *line, void *user);

/* Sets the level (default: ZC_LOG environment variable — off|error|warn|info|
 * debug|trace, any case — else WARN). ZC_LOG, ZC_LOG_RANKS (0 or all) and
 * ZC_LOG_SUBSYS (a comma-separated list of ckpt, comm, config, core, device,
 * load, offload, optim, zero3) are read once, at the first log line or check; a
 * malformed one keeps its default for logging and fails zc_config_create,
 * zc_config_load*, zc_comm_local_world, zc_comm_init_env and zc_engine_create
 * with ZC_ERR_CONFIG. Thread-safe. */
ZC_API void zc_log_set_level(zc_log_level level);

/* Installs a sink (NULL restores the default sink, which writes to stderr).
 * By default only rank 0 (and rank-less messages) are emitted; ZC_LOG_RANKS=all
 * emits every rank. Call before starting rank threads; not thread-safe. */
ZC_API void zc_log_set_sink(zc_log_sink sink, void *user);

/* ------------------------------------------------------------------------- */
/* Data types                                                                */
/* ------------------------------------------------------------------------- */

typedef enum zc_dtype {
    ZC_DTYPE_INVALID = -1, /* "none": an unset option, or a sentinel answer */
    ZC_DTYPE_F32 = 0,
    ZC_DTYPE_F16,
    ZC_DTYPE_BF16,
    ZC_DTYPE_F64,
    ZC_DTYPE_I32,
    ZC_DTYPE__COUNT
} zc_dtype;

/* Size of one element of dtype in bytes, 0 for an unknown dtype. */
ZC_API size_t zc_dtype_size(zc_dtype dt);
/* "fp32", "fp16", "bf16", "fp64", "int32", or "unknown". */
ZC_API const char *zc_dtype_name(zc_dtype dt);

/* ------------------------------------------------------------------------- */
/* Configuration (DeepSpeed's JSON schema)                                   */
/* ------------------------------------------------------------------------- */

typedef struct zc_config zc_config;

/* Creates a configuration holding DeepSpeed's code defaults (stage 0, fp32,
 * AdamW lr 1e-3, gradient_clipping 1.0, ...). The caller owns *out and frees it
 * with zc_config_destroy. Returns ZC_ERR_NO_MEMORY on allocation failure,
 * ZC_ERR_CONFIG when a logging variable is malformed (zc_log_set_level); *out
 * is NULL on failure. */
ZC_API zc_status zc_config_create(zc_config **out);

/* Frees a configuration. NULL is a no-op. An engine keeps its own copy, so a
 * configuration may be destroyed right after zc_engine_create. */
ZC_API void zc_config_destroy(zc_config *cfg);

/* Sets one key, named by its DeepSpeed path ("zero_optimization.stage",
 * "fp16.enabled", "optimizer.params.betas"), to a value written as JSON text
 * ("2", "true", "[0.9, 0.95]", "\"auto\"", "5e8"): a string is quoted inside
 * the text, so for strings, numbers and booleans the typed setters below are
 * simpler - zc_config_set_string(cfg, "optimizer.type", "AdamW") is
 * zc_config_set(cfg, "optimizer.type", "\"AdamW\""). Aliases and deprecated
 * keys are accepted as in a JSON file (with a warning). On failure (unknown
 * key — the message suggests the nearest one —, wrong type, out of range, text
 * that is not JSON) the configuration is unchanged. Not thread-safe for one
 * cfg. */
ZC_API zc_status zc_config_set(zc_config *cfg, const char *dotted_key, const char *json_value);

/* Typed shorthands for zc_config_set, with the same contract: the value as a
 * C integer, double (finite), bool or string. zc_config_set_string quotes
 * the text itself (UTF-8, not NULL; "auto" is DeepSpeed's "auto"). */
ZC_API zc_status zc_config_set_int(zc_config *cfg, const char *dotted_key, int64_t value);
ZC_API zc_status zc_config_set_double(zc_config *cfg, const char *dotted_key, double value);
ZC_API zc_status zc_config_set_bool(zc_config *cfg, const char *dotted_key, bool value);
ZC_API zc_status zc_config_set_string(zc_config *cfg, const char *dotted_key, const char *value);

/* Flags for zc_config_load_ex. */
#define ZC_CONFIG_LENIENT 0x1u /* unknown nested keys are warnings, not errors */

/* Loads a DeepSpeed JSON file into a new configuration (defaults first, then
 * the file). The file must be a regular file of at most 16 MiB and 65536
 * JSON values (a directory, FIFO or device is refused by what it is, without
 * reading it). On failure
 * *out is NULL and zc_last_error() names the file and every error that fits
 * (JSON path, value, allowed range, what to change). The caller owns *out. */
ZC_API zc_status zc_config_load(zc_config **out, const char *json_path);
ZC_API zc_status zc_config_load_ex(zc_config **out, const char *json_path, unsigned flags);

/* Loads DeepSpeed JSON text held in memory (name is used in messages). */
ZC_API zc_status zc_config_load_string(zc_config **out, const char *json_text,
                                       const char *name, unsigned flags);

/* Values the training program knows, used to resolve "auto" the way the
 * Hugging Face Trainer does for a DeepSpeed template such as
 * examples/ds_config_zero2.json. Start from ZC_PROGRAM_VALUES_INIT (every
 * field "not given": negative numbers, dtype -1), set what the program knows,
 * pass it with zc_config_set_program_values, then zc_engine_create:
 *
 *     zc_program_values pv = ZC_PROGRAM_VALUES_INIT;
 *     pv.micro_batch_per_gpu = 4;   // train_micro_batch_size_per_gpu: "auto"
 *     pv.total_num_steps = 1000;    // scheduler.params.total_num_steps: "auto"
 *     zc_config_set_program_values(cfg, &pv);
 *
 * The batch keys and a decaying schedule's total_num_steps must be resolved;
 * zc_engine_create otherwise fails with one message naming every such key
 * and the field that resolves it (`zeroc config check` lists them as
 * "program_must_provide"). Other "auto" keys fall back to DeepSpeed's
 * defaults. */
typedef struct zc_program_values {
    size_t size;                 /* sizeof(zc_program_values) */
    int64_t micro_batch_per_gpu; /* per_device_train_batch_size */
    int64_t gradient_accumulation_steps;
    int64_t total_num_steps;     /* for WarmupDecayLR / WarmupCosineLR */
    int64_t warmup_num_steps;
    double lr, beta1, beta2, eps, weight_decay;
    double max_grad_norm;        /* gradient_clipping */
    int dtype;                   /* zc_dtype of the parameters, or -1 */
} zc_program_values;

#define ZC_PROGRAM_VALUES_INIT                                                   \
    { sizeof(zc_program_values), -1, -1, -1, -1, -1.0, -1.0, -1.0, -1.0, -1.0, \
      -1.0, -1 }

/* Records what the program knows; "auto" keys are resolved from it when the
 * engine is created (and by zc_config_resolve). Copies *values. Each given
 * field must be finite and inside the range of the key it fills (nan is an
 * error, not "not given"); otherwise returns ZC_ERR_INVALID_ARG naming every
 * bad field, and records nothing. */
ZC_API zc_status zc_config_set_program_values(zc_config *cfg, const zc_program_values *values);

/* Resolves the batch keys for a data-parallel world of `world` ranks with
 * DeepSpeed's rules (a missing one derived from the other two; each > 0; batch
 * == micro * accumulation * world). Returns ZC_ERR_CONFIG with the four numbers
 * in the message when they disagree. Called by zc_engine_create as well. */
ZC_API zc_status zc_config_resolve(zc_config *cfg, int world);

/* Reads a resolved value back as JSON text into buf (NUL-terminated, truncated
 * to cap). Returns ZC_ERR_INVALID_ARG for an unknown key. */
ZC_API zc_status zc_config_get(const zc_config *cfg, const char *dotted_key, char *buf, size_t cap);

/* Learning rate (and, for OneCycle, beta1 when momentum cycling is on; else the
 * optimizer's beta1) after `step` optimizer steps, by DeepSpeed's scheduler
 * formulas; with no scheduler, the optimizer's lr. beta1 may be NULL. */
ZC_API double zc_config_lr_at(const zc_config *cfg, int64_t step, double *beta1);

/* ------------------------------------------------------------------------- */
/* Communicators                                                             */
/* ------------------------------------------------------------------------- */

typedef struct zc_comm zc_comm;

/* Creates `world` in-process ranks (threads of this process share memory):
 * comms[r] is rank r's handle, to be used by exactly one thread. Collectives
 * sum in fp32 in rank order, so results are deterministic. With an engine on
 * a GPU the ranks' collectives run on the engine's streams, ordered by events
 * (the ranks' threads meet, the host never waits for the GPU there). A
 * collective waits at most ZC_COMM_TIMEOUT seconds for the other ranks (default 600; a decimal
 * number in [0.001, 604800], the same on every backend), then fails with
 * ZC_ERR_COMM and breaks the group. Returns ZC_ERR_CONFIG, making nothing,
 * when ZC_COMM_TIMEOUT or a logging variable is malformed. The caller owns the
 * handles and destroys each with zc_comm_destroy after its engine. */
ZC_API zc_status zc_comm_local_world(int world, zc_comm **comms);

/* Creates this process's rank from the launcher's environment (torchrun and the
 * deepspeed launcher: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT;
 * Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; Open MPI:
 * OMPI_COMM_WORLD_*). The backend: NCCL when built and a GPU is visible (which
 * loads the CUDA plugin when the NVIDIA driver is present: zc_device_kind),
 * else MPI (host buffers) under mpirun/srun when built; ZC_COMM=local|mpi|nccl
 * forces one (local: a world of one process). Every variable it may depend on
 * is checked before anything starts, whichever backend is picked: ZC_COMM,
 * ZC_COMM_TIMEOUT, ZC_BOOTSTRAP, ZC_BOOTSTRAP_TIMEOUT (seconds, default 300,
 * ZC_COMM_TIMEOUT's range), the logging variables and the launcher's (ranks
 * and sizes whole numbers in range, MASTER_PORT in [1, 65534], MASTER_ADDR
 * printable without blanks). Returns ZC_ERR_UNSUPPORTED when this build has no
 * backend that can reach other processes (or lacks the one ZC_COMM names, or
 * NCCL was chosen and the CUDA plugin cannot be loaded, naming the library),
 * ZC_ERR_CONFIG naming a missing or malformed variable, its value and what is
 * accepted; *out is NULL on failure. */
ZC_API zc_status zc_comm_init_env(zc_comm **out);

/* Rank and world size of a handle (-1 for NULL). */
ZC_API int zc_comm_rank(const zc_comm *comm);
ZC_API int zc_comm_world(const zc_comm *comm);

/* Ranks of the handle's world on this machine, this one included: for
 * sizing a rank's own CPU threads so that the ranks sharing the cores do not
 * oversubscribe them. MPI: the ranks sharing memory with this one; local
 * (zc_comm_local_world): the whole world; 0 when the backend does not know
 * (NCCL); -1 for NULL. */
ZC_API int zc_comm_local_size(const zc_comm *comm);

/* Destroys one rank's handle. NULL is a no-op. For the local backend the shared
 * state goes away with the last rank's handle. */
ZC_API void zc_comm_destroy(zc_comm *comm);

/* ---- Communicators from what the program already has -------------------- */

/* Colour for zc_comm_split: this rank joins no new communicator (MPI's
 * MPI_UNDEFINED, NCCL's NCCL_SPLIT_NOCOLOR). */
#define ZC_COMM_SPLIT_NONE (-1)

/* Splits comm as MPI_Comm_split does: the ranks that pass the same colour
 * (>= 0) form a new communicator of the same backend (threads, MPI through
 * MPI_Comm_split, NCCL through ncclCommSplit), ranked by key, ties broken by
 * their rank in comm; a rank passing ZC_COMM_SPLIT_NONE gets *out = NULL and
 * ZC_OK. Collective over comm (every rank calls it, one thread per rank, no
 * communicator group open); keys may be any int. One program can so run an
 * engine per data-parallel group (colour = rank % TP for Megatron's order)
 * and keep the other groups for its own tensor- or pipeline-parallel
 * traffic. The new handle is independent of comm (destroy either first;
 * zc_comm_destroy it after its engines) and starts bound to the host (an
 * engine binds its device). Collective failures are agreed: the colours
 * and keys are exchanged first, so a colour below -1 on any rank fails every
 * rank with ZC_ERR_INVALID_ARG naming that rank; a failed exchange
 * (ZC_ERR_COMM: a rank never calls it, ZC_COMM_TIMEOUT) or a failed creation
 * (ZC_ERR_NO_MEMORY, ZC_ERR_COMM) fails every rank, *out NULL and nothing
 * made. ZC_ERR_INVALID_ARG at once (nothing exchanged) for a NULL comm or
 * out; ZC_ERR_UNSUPPORTED for a communicator that cannot be split. */
ZC_API zc_status zc_comm_split(zc_comm *comm, int colour, int key, zc_comm **out);

/* A communicator over the program's own MPI communicator. mpi_comm points to
 * an MPI_Comm (pass &comm: an MPI_Comm of the MPI this zeroc was built with,
 * Open MPI unless said otherwise; MPI_COMM_WORLD or one the program split)
 * in an MPI the program initialised itself: zeroc never calls MPI_Init or
 * MPI_Finalize for it. zeroc duplicates it (MPI_Comm_idup, waited for up to
 * ZC_COMM_TIMEOUT) and works on the duplicate, which zc_comm_destroy frees;
 * the caller's MPI_Comm is never freed or changed, and the program's own
 * messages on it cannot mix with zeroc's. Host buffers only (an engine on
 * ZC_DEVICE_HOST), as zc_comm_init_env's MPI communicator; its collectives,
 * timeouts and bitwise rank-order sums are that communicator's (the same
 * bits as zc_comm_local_world's threads). The handle's rank and world are
 * the rank and size in the caller's communicator. Collective over it; the
 * program's MPI must stay initialised until the handle is destroyed, and
 * with MPI_THREAD_SINGLE or FUNNELED every zeroc call on it must come from
 * the thread that initialised MPI. Returns ZC_ERR_UNSUPPORTED in a build
 * without MPI, ZC_ERR_INVALID_STATE when MPI is not initialised (or already
 * finalised), ZC_ERR_INVALID_ARG for a NULL argument or MPI_COMM_NULL,
 * ZC_ERR_COMM when the duplication fails or times out, ZC_ERR_CONFIG for a
 * malformed ZC_COMM_TIMEOUT; *out is NULL on failure. */
ZC_API zc_status zc_comm_from_mpi(const void *mpi_comm, zc_comm **out);

/* A communicator over the program's own NCCL communicator (llm.c's
 * multi_gpu_config.nccl_comm): nccl_comm is an ncclComm_t, rank and world
 * its rank and size there (checked against ncclCommUserRank and
 * ncclCommCount), stream a cudaStream_t for zeroc's collectives (the
 * program's dedicated NCCL stream) or NULL for a stream of zeroc's own;
 * each collective is ordered after the engine's stream and the engine's
 * stream after it with events, as for zc_comm_init_env's NCCL
 * communicator. Borrowed: zeroc never finalises, destroys or aborts the
 * ncclComm_t nor destroys the stream; zc_comm_destroy waits for zeroc's
 * collectives and releases only what zeroc made. The device is the
 * communicator's (ncclCommCuDevice): an engine on it uses ZC_DEVICE_CUDA
 * with that device_index. The program's own collectives on the same
 * communicator must be issued in the same order on every rank, interleaved
 * with zeroc's the same way (NCCL's rule for one communicator); zeroc issues
 * its collectives from the thread that calls it. A collective that exceeds
 * ZC_COMM_TIMEOUT or an asynchronous NCCL error fails the handle for good
 * (ZC_ERR_COMM on every later call) and zeroc stops using the communicator,
 * which it leaves to the program to abort (ncclCommAbort). Not collective.
 * Returns ZC_ERR_UNSUPPORTED in a build without NCCL or when the CUDA plugin
 * cannot be loaded (naming the library), ZC_ERR_INVALID_ARG for a NULL
 * nccl_comm or out, a rank outside 0..world-1 or one NCCL disagrees with,
 * ZC_ERR_DEVICE when the stream or events cannot be made; *out is NULL on
 * failure. */
ZC_API zc_status zc_comm_from_nccl(void *nccl_comm, int rank, int world, void *stream,
                                   zc_comm **out);

/* ------------------------------------------------------------------------- */
/* Engine                                                                    */
/* ------------------------------------------------------------------------- */

typedef struct zc_engine zc_engine;
typedef struct zc_param zc_param;

/* Where the engine works. A build with CUDA keeps its CUDA code (the device
 * backend, the kernels, the NCCL communicator) in libzeroc_cuda.so, installed
 * beside libzeroc, and loads it - with the CUDA runtime and NCCL it links -
 * only when a GPU is first needed: ZC_DEVICE_CUDA, ZC_DEVICE_AUTO and
 * zc_comm_init_env's choice count devices, and do so without loading it when
 * the NVIDIA driver's libcuda.so.1 is absent or the driver itself reports no
 * device (none installed, or every one hidden by CUDA_VISIBLE_DEVICES: its
 * cuInit and cuDeviceGetCount are asked first). ZC_DEVICE_HOST never loads it,
 * so a CPU run maps no CUDA library. When it cannot be loaded (the plugin, the
 * runtime or NCCL missing, or older than the build needs), ZC_DEVICE_CUDA and
 * the NCCL communicator fail with ZC_ERR_UNSUPPORTED naming the missing
 * library and how to get it, and ZC_DEVICE_AUTO picks the host, saying why
 * at WARN when a driver is present. */
typedef enum zc_device_kind {
    ZC_DEVICE_AUTO = 0, /* CUDA when a device is present, else the host */
    ZC_DEVICE_HOST,
    ZC_DEVICE_CUDA
} zc_device_kind;

/* Options that are not part of DeepSpeed's JSON. Start from
 * ZC_ENGINE_OPTIONS_INIT; fields may be added at the end. */
typedef struct zc_engine_options {
    size_t size;            /* sizeof(zc_engine_options) */
    zc_device_kind device;  /* where parameters, gradients and kernels live */
    int device_index;       /* CUDA device ordinal; -1 = the launcher's local rank
                               (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK,
                               MPI_LOCALRANKID, MV2_COMM_WORLD_LOCAL_RANK,
                               SLURM_LOCALID, first set; 0 when none), modulo
                               the visible GPUs only under a per-task
                               CUDA_VISIBLE_DEVICES - the GPU zc_comm_init_env
                               binds NCCL to */
    int64_t bucket_elems;   /* chunk size in elements; <= 0 = reduce_bucket_size */
    zc_dtype param_dtype;   /* working precision; overrides fp16/bf16.enabled
                               when >= 0 (ZC_ENGINE_OPTIONS_INIT leaves
                               ZC_DTYPE_INVALID) */
    void *stream;           /* the caller's compute stream (a cudaStream_t; NULL =
                               the legacy default stream): the stream the backward
                               pass writes gradients on. zc_grad_buffer orders it
                               after the buffer's zero-fill and zc_grad_ready
                               orders the engine's reduction after it, with
                               events (no host wait). Ignored by the host device. */
    int f32_view_chunks;    /* host device, fp16/bf16 parameters: how many chunks
                               may have fp32 views (zc_block_view_f32) at once, and
                               as many fp32 gradient views (zc_block_grad_buffers_f32).
                               Costs 2 x this x 4 bytes x the largest padded chunk,
                               reserved at build; 0 (the default) reserves nothing
                               and the view calls refuse. 0..64; fp32 parameters
                               need no slots (their views are the parameters). */
    /* The activation store (zc_act_save; docs/activations.md), reserved at
     * build from this bound and counted by zc_plan_memory and the pre-flight:
     * act_checkpoints checkpoints held at once in a micro-step (0: the
     * config's activation_checkpointing.number_checkpoints; 0..2^20), each
     * of at most act_checkpoint_bytes bytes (0, the default: no store; at
     * most 2^40). Where they are kept is the config's
     * activation_checkpointing section: device memory, or pinned host memory
     * with cpu_checkpointing, or NVMe with nvme_checkpointing. */
    int64_t act_checkpoints;
    int64_t act_checkpoint_bytes;
    /* activation_checkpointing.partition_activations: the model-parallel
     * group whose ranks each keep 1/size of every checkpoint and gather it
     * back at zc_act_restore (a communicator of the same backend and device
     * as the engine's, every rank of it driving an engine with the same
     * store; borrowed, it must outlive the engine, which binds it to its
     * device). NULL: none, and partition_activations is refused. */
    zc_comm *act_mp_comm;
} zc_engine_options;

#define ZC_ENGINE_OPTIONS_INIT \
    { sizeof(zc_engine_options), ZC_DEVICE_AUTO, -1, 0, ZC_DTYPE_INVALID, NULL, 0, 0, 0, NULL }

/* The CUDA device ordinal that zc_engine_options.device_index resolves to in
 * this process: device_index itself when >= 0, the launcher's local rank
 * rule above for -1 - the GPU zc_engine_create will use. A program that
 * makes its own streams or buffers before creating the engine selects this
 * device (cudaSetDevice) on the rank's thread first, so they live on the
 * engine's GPU and not on device 0. Writes the ordinal to *ordinal (-1 on
 * failure). Counting the devices loads the CUDA plugin when the NVIDIA driver
 * reports any (zc_device_kind). Returns ZC_ERR_UNSUPPORTED without a usable
 * CUDA device (or in a build without CUDA), the message saying why (no
 * driver, the driver reporting no device - naming CUDA_VISIBLE_DEVICES when
 * it is set -, a CUDA library that cannot be loaded, or the runtime's reason),
 * ZC_ERR_INVALID_ARG for a NULL ordinal, an index
 * below -1 or past the visible devices, ZC_ERR_CONFIG for a malformed or
 * too large launcher local rank (naming the variable). */
ZC_API zc_status zc_cuda_device_index(int device_index, int *ordinal);

/* Creates an engine for one rank. Copies cfg (resolving the batch keys for the
 * communicator's world); borrows comm, which must outlive the engine. opts may
 * be NULL. Fails with ZC_ERR_CONFIG for a contradictory configuration (stage
 * outside 0–3, ...) or a value the engine cannot take (the rules `zeroc config
 * check` applies, docs/config.md; mics_shard_size or, at stage 3,
 * zero_hpz_partition_size not dividing the communicator's world),
 * ZC_ERR_INVALID_ARG for NULL handles. It
 * reads ZC_FAULTS, ZC_DEBUG, ZC_CPU_ISA and ZC_CPU_THREADS (a whole number in
 * [1, 256]) and checks the logging variables: a malformed one is ZC_ERR_CONFIG,
 * a ZC_CPU_ISA this CPU or build cannot run ZC_ERR_UNSUPPORTED, on every rank
 * alike. The caller owns *out. */
ZC_API zc_status zc_engine_create(zc_engine **out, const zc_config *cfg, zc_comm *comm,
                                  const zc_engine_options *opts);

/* Parameter groups: hyper-parameters shared by parameters, like torch param
 * groups. Group 0 exists from creation with the optimizer's weight decay.
 * zc_group_add creates another group and returns its id in *group_id. Before
 * build only. */
ZC_API zc_status zc_group_add(zc_engine *eng, double weight_decay, double lr_scale, int *group_id);

/* Registers a parameter of ndim dimensions (1..8, each > 0) in group `group`,
 * named `name` (copied). Every rank must register the same parameters in the
 * same order. Before build only. On success *out is the parameter handle,
 * owned by the engine (valid until zc_engine_destroy). Fails, registering
 * nothing and setting *out to NULL: ZC_ERR_INVALID_ARG for a NULL out, a NULL
 * or empty name, a name already registered, ndim outside 1..8, a dimension
 * <= 0, a shape (or the engine's parameters in all) past 2^61 elements, an
 * unknown group; ZC_ERR_INVALID_STATE after zc_engine_build; ZC_ERR_NO_MEMORY
 * when the registry cannot grow. */
ZC_API zc_status zc_param_add_status(zc_engine *eng, const char *name, const int64_t *shape,
                                     int ndim, int group, zc_param **out);

/* zc_param_add_status returning the handle itself: NULL on any of its
 * failures, with zc_last_error() saying which (the status is not returned:
 * use zc_param_add_status to tell them apart). Kept for loops written
 * against it. */
ZC_API zc_param *zc_param_add(zc_engine *eng, const char *name, const int64_t *shape, int ndim,
                              int group);

/* Starts a new chunk at the next registered parameter (e.g. one chunk set per
 * transformer block). Before build only. The parameters between two calls
 * are a unit - what zc_block_span returns, as a wrapped module is for FSDP -
 * and stages 2-3 reserve gradient buffers by units at build (two sets of
 * units, see zc_block_grad_buffers); without any call, each chunk is a
 * unit. */
ZC_API zc_status zc_chunk_boundary(zc_engine *eng);

/* Partitions the parameters into chunks and shards and allocates every buffer
 * this rank needs, including the transient gradient, gather and staging
 * buffers (a pool sized from the chunks, the prefetch bucket and
 * stage3_max_live_parameters), so that later calls do not allocate between two
 * collectives (a stage-3 acquire beyond that working set allocates, agreed
 * across ranks: docs/faults.md). Collective: every rank calls it.
 * With zero_optimization.max_memory (a zeroc extension, docs/placement.md)
 * the ranks first agree on the budgets (an "auto" one: the smallest any rank
 * finds on its machine), then every rank chooses the same placement - each
 * chunk's optimizer state and stage-3 parameter shard on the device, in
 * pinned host memory or on NVMe, fastest first within every budget - and logs
 * it at INFO; zc_engine_stats reports it after. When nothing fits, every rank
 * fails with ZC_ERR_NO_MEMORY naming the short budget, by how much and what
 * would fit, before anything large is allocated. ZC_ERR_NO_MEMORY says how
 * much was asked for and for what. With hybrid sharding
 * (zero_optimization.mics_shard_size, zero_hpz_partition_size: docs/config.md)
 * the build first reads the node map (ZC_RANKS_PER_NODE, else the launcher's
 * ranks per node, else the communicator's), agrees it and the hybrid settings
 * across ranks, and splits the communicator into the groups they need
 * (zc_comm_split; owned and destroyed by the engine); a disagreement, a
 * malformed ZC_RANKS_PER_NODE or a hierarchical gather over one node is
 * ZC_ERR_CONFIG on every rank alike. After a failed build the engine can only
 * be destroyed. */
ZC_API zc_status zc_engine_build(zc_engine *eng);

/* Sets the full value of a parameter (numel floats, row-major, host memory).
 * Every rank loads the same parameters with the same values. Sets the fp32
 * master (this rank's shard) and the working-precision copy. After build,
 * outside a micro-step. Not collective. At stage 3 with offload_param the
 * working-precision shard is converted into its home's memory and written
 * home once per chunk - when loads move on to another chunk, or (the last
 * one) at the next zc_param_acquire or zc_step, which agree on the write's
 * outcome across ranks: a failed write there breaks every rank's engine
 * with the same message (docs/offload.md). */
ZC_API zc_status zc_param_load(zc_engine *eng, zc_param *p, const float *full_values);

/* zc_param_load with DeepSpeed's master: the values are first rounded to the
 * working dtype (round to nearest even, the rounding zc_param_load gives the
 * working copy) and the fp32 master is made from the rounded values, as
 * DeepSpeed makes its fp32 master from the module already cast to fp16 or
 * bf16. zc_param_load keeps the caller's unrounded values as the master,
 * which is more exact; use this one where a run must start from the same
 * master as a DeepSpeed run. The working copy is the same either way; for
 * fp32 parameters the two calls are the same. Same contract and errors as
 * zc_param_load; nothing is allocated (the rounding goes through a small
 * buffer on the stack). */
ZC_API zc_status zc_param_load_rounded(zc_engine *eng, zc_param *p, const float *full_values);

/* Copies the full fp32 master value of a parameter into out (numel floats).
 * Collective in stages 1–3 (every rank calls it for the same parameter). */
ZC_API zc_status zc_param_gather_master(zc_engine *eng, zc_param *p, float *out);

/* Returns a pointer to the full parameter in its working dtype, valid until the
 * matching zc_param_release. Stage 3 gathers its chunk (or finds it
 * prefetched): there it is collective, so every rank acquires the same
 * parameters in the same order. With a CUDA device the engine works on its own
 * non-blocking stream; work enqueued on `stream` (a cudaStream_t, NULL = the
 * legacy default stream) after this call returns is ordered after the data is
 * ready, by an event the stream waits on: the host does not wait. Work on any
 * other stream must be ordered after `stream` by the caller.
 * Returns NULL (with zc_last_error) for a parameter unknown to this engine, or
 * in stage 3 when the gather would exceed stage3_max_live_parameters, or when
 * a gather buffer beyond those reserved at build cannot be allocated on some
 * rank: then every rank returns NULL with the same message and the engine is
 * broken (docs/faults.md). */
ZC_API void *zc_param_acquire(zc_engine *eng, zc_param *p, void *stream);

/* zc_param_acquire with a status, like every other fallible call: *out gets
 * the pointer on success and NULL on failure (ZC_ERR_INVALID_ARG for an
 * unknown parameter or a NULL out; the errors of zc_param_acquire otherwise).
 * Same contract, same collective rule in stage 3. */
ZC_API zc_status zc_param_acquire_status(zc_engine *eng, zc_param *p, void *stream, void **out);

/* Introspection. Read-only, thread-safe once registration is over; a NULL or
 * foreign handle gets the sentinel in brackets, never a crash.
 * zc_param_name: the registered name, owned by the engine (NULL).
 * zc_param_numel: the number of elements (-1).
 * zc_param_shape: copies min(ndim, cap) dimensions into shape and returns
 *   ndim (-1; also for cap < 0, or cap > 0 with shape NULL).
 * zc_param_group: its group id (-1).
 * zc_param_dtype: the working dtype of its engine's parameters and gradient
 *   buffers: ZC_DTYPE_F32, ZC_DTYPE_F16 or ZC_DTYPE_BF16 (ZC_DTYPE_INVALID).
 * zc_param_count: parameters registered so far (-1).
 * zc_param_at: the parameter registered index-th, from 0 (NULL out of range).
 * zc_param_find: the parameter of that name (NULL when there is none). */
ZC_API const char *zc_param_name(const zc_param *p);
ZC_API int64_t zc_param_numel(const zc_param *p);
ZC_API int zc_param_shape(const zc_param *p, int64_t *shape, int cap);
ZC_API int zc_param_group(const zc_param *p);
ZC_API zc_dtype zc_param_dtype(const zc_param *p);
ZC_API int zc_param_count(const zc_engine *eng);
ZC_API zc_param *zc_param_at(const zc_engine *eng, int index);
ZC_API zc_param *zc_param_find(const zc_engine *eng, const char *name);

/* Ends a use begun by zc_param_acquire. Stage 3 frees the gathered chunk when
 * none of its parameters is acquired, unless it is persistent. With a CUDA
 * device the engine's later writes of that memory (the optimizer update, a
 * new gather into the reused buffer) wait, by an event, for the work enqueued
 * on `stream` before this call; the caller must have enqueued every read of
 * the parameter on `stream` (or ordered it before `stream`) by then. */
ZC_API zc_status zc_param_release(zc_engine *eng, zc_param *p, void *stream);

/* A buffer of numel elements in the parameter's working dtype, zeroed at the
 * start of each micro-step, that the backward pass writes or accumulates into.
 * What to write: this rank's own gradient of this micro-step's loss, raw -
 * not averaged over the ranks or divided by gradient_accumulation_steps:
 * zeroc averages once, over world x accumulation steps (after DeepSpeed's
 * prescale_gradients and gradient_predivide_factor), summing the window's
 * micro-steps in fp32 - or, with data_types.grad_accum_dtype set to the
 * 16-bit working dtype, as DeepSpeed's default does: each micro-step's
 * gradient times 1 / accumulation steps rounded to that dtype, the running
 * sum rounded to it after every add - and with fp16 the
 * gradient of the loss multiplied by zc_loss_scale(), read before this
 * micro-step's backward pass; zc_step divides by that scale (or, with
 * fp16.deepspeed_unscale_order, by the scaler's value after the step, as
 * DeepSpeed does). In the buffer's dtype (zc_param_dtype: fp32, fp16 or bf16;
 * round to nearest even); a float loop over 16-bit parameters on the host
 * writes fp32 instead through zc_block_grad_buffers_f32.
 * With a CUDA device the zero-fill is enqueued on the engine's stream and
 * zc_engine_options.stream (the caller's compute stream) is made to wait for
 * it, so gradients must be written on that stream (or on a stream the caller
 * orders after it) and only after this call returns, in every micro-step.
 * Returns NULL for an unknown parameter. In stages 2 and 3 the buffer is its
 * chunk's, one of those reserved at build by units (zc_chunk_boundary;
 * without boundaries, chunks; how many: zc_block_grad_buffers): writing the
 * gradients of more chunks than that before the earlier ones are complete
 * (every parameter made ready) returns NULL with ZC_ERR_NO_MEMORY, on every
 * rank alike.
 * Lifetime: the pointer is valid until this parameter's zc_grad_ready; a
 * later call in the next micro-step may return it again, zeroed. Writing it
 * after zc_grad_ready is a bug whose effect depends on the stage: in stages
 * 0-1 it silently changes this rank's already-reduced gradient, in stages 2-3
 * the memory is back in the pool and may hold another chunk's gradient. With
 * ZC_DEBUG=1 in the environment (docs/debug.md) the buffer is a shadow the
 * engine checks instead, at every stage alike: the next zc_step or
 * zc_micro_step_end fails with ZC_ERR_INVALID_STATE naming the parameter and
 * the element, on every rank, and the engine is broken. */
ZC_API void *zc_grad_buffer(zc_engine *eng, zc_param *p);

/* Hands the gradient back for this micro-step. When every parameter of a chunk
 * is ready its reduction starts, a collective: every rank completes chunks in
 * the same order. With a CUDA device the reduction is ordered after the work
 * enqueued on zc_engine_options.stream before this call (an event the
 * engine's stream waits on; the host does not wait), so every write of the
 * chunk's gradients must be enqueued on that stream, or ordered before it by
 * the caller, by the time its last zc_grad_ready is called. With overlap_comm
 * the reduction runs on a communication stream of its own, overlapping the
 * rest of the backward pass. Errors: unknown parameter, ready twice in one
 * micro-step (nothing is changed). */
ZC_API zc_status zc_grad_ready(zc_engine *eng, zc_param *p);

/* ---- Layout: where a chunk's parameters lie ------------------------------ */

/* Guarantee: the working-precision parameters of one chunk lie back to back in
 * registration order, without gaps - a parameter starts right after the last
 * element of the one registered before it in the same chunk - and a chunk's
 * base (its first parameter) is aligned to at least ZC_CHUNK_BASE_ALIGN bytes
 * (a chunk over adopted memory, zc_block_adopt, is where the caller put it).
 * So a block of consecutive parameters of one chunk is one array, as a trainer
 * that keeps its weights in a single buffer expects. A parameter never
 * straddles two chunks; chunks start at each zc_chunk_boundary and wherever
 * the bucket (zc_engine_options.bucket_elems) is full. */
#define ZC_CHUNK_BASE_ALIGN 64

/* The base of the chunk holding p (its first parameter, in the working dtype)
 * and, when elem_offset is not NULL, p's element offset from it. Stages 0-2
 * keep the chunk resident: the pointer is valid until the engine is destroyed
 * (the optimizer step writes it in place). Stage 3 holds the full chunk only
 * while one of its parameters is acquired: p must be acquired (else
 * ZC_ERR_INVALID_STATE) and the pointer is valid until that release. */
ZC_API zc_status zc_param_chunk_base(zc_engine *eng, const zc_param *p, void **base,
                                     int64_t *elem_offset);

/* ---- Blocks: the calls above over several parameters at once ------------ */

/* A block is a list of parameters of one engine (a transformer block's dozen
 * tensors). Each block call is its per-parameter calls in the block's order -
 * the same effect, the same collectives in the same order - so a loop that
 * switches to blocks trains bitwise the same; in addition it is
 * all-or-nothing where a per-parameter loop would stop half-way (below). */
typedef struct zc_block zc_block;

/* Creates a block over params[0..n-1] (n >= 1, each of eng, none twice),
 * visited in that order. Before or after build. The caller owns *out and
 * frees it with zc_block_destroy (before or after the engine; using it after
 * the engine is gone is undefined). ZC_ERR_INVALID_ARG for a NULL, foreign or
 * repeated handle; *out is NULL on failure. */
ZC_API zc_status zc_block_create(zc_engine *eng, zc_param *const *params, int n,
                                 zc_block **out);

/* Creates the block of the parameters between two chunk boundaries: `first`
 * and the parameters registered after it, up to (not including) the next one
 * registered after a zc_chunk_boundary call, or the last one. Automatic chunk
 * splits (bucket size) do not end it, so it may span several chunks. Same
 * ownership and failures as zc_block_create. */
ZC_API zc_status zc_block_span(zc_engine *eng, zc_param *first, zc_block **out);

/* Number of parameters of a block (-1 for NULL or a bad handle), and its i-th
 * parameter (NULL when i is out of range). */
ZC_API int zc_block_size(const zc_block *b);
ZC_API zc_param *zc_block_param(const zc_block *b, int i);

/* The number of elements of a block's parameters together (the sum of their
 * zc_param_numel): the `count` that zc_block_load and zc_block_gather_master
 * take, and the floats of their array. Before or after build; read-only, as
 * the calls above. ZC_ERR_INVALID_ARG for a NULL or bad block or a NULL count,
 * leaving *count unchanged. */
ZC_API zc_status zc_block_numel(const zc_block *b, size_t *count);

/* Frees a block (not its parameters). NULL is a no-op. */
ZC_API void zc_block_destroy(zc_block *b);

/* zc_param_acquire of every parameter of the block, in order: ptrs[i]
 * (ptrs may be NULL, else it holds zc_block_size(b) pointers) receives the
 * i-th pointer, valid until zc_block_release (or the parameter's own
 * release). Collective in stage 3, like the per-parameter call. On failure
 * the parameters acquired by this call are released again and its status
 * (that of the failing zc_param_acquire, e.g. ZC_ERR_NO_MEMORY beyond
 * stage3_max_live_parameters) is returned. */
ZC_API zc_status zc_block_acquire(zc_engine *eng, zc_block *b, void *stream, void **ptrs);

/* zc_param_release of every parameter of the block, in order. Fails with
 * ZC_ERR_INVALID_STATE, releasing nothing, when some parameter is not
 * acquired. */
ZC_API zc_status zc_block_release(zc_engine *eng, zc_block *b, void *stream);

/* zc_grad_buffer of every parameter of the block: bufs[i] (zc_block_size(b)
 * pointers) receives the i-th buffer, under zc_grad_buffer's contract
 * (zeroed per micro-step, stream order, valid until that parameter's
 * zc_grad_ready). Stages 2 and 3 hold a gradient buffer per chunk, and a
 * block needs one for each of its chunks that has none yet - a block may
 * span any number of chunks (at most 2^24 elements each). The build reserves
 * them by units, the parameters between two zc_chunk_boundary calls (each
 * chunk without boundaries): two sets, each with room for the chunks of
 * any k units together, at most one slot per chunk. At stage 2 k is as many
 * units as fit in the reduction bucket (reduce_bucket_size, capped at 2^24
 * elements unless zc_engine_options.bucket_elems says more), at least one,
 * so that the bucket rather than the pool decides how often the ranks meet
 * (a model whose gradients fit in the bucket reduces once per micro-step);
 * at stage 3 k is one. Memory: about 2 x k units' padded elements in the
 * working dtype (at least 2 x the largest unit; the whole model's gradients
 * when they fit in the bucket at stage 2), counted by zc_plan_memory, the
 * build's pre-flight and `zeroc estimate`; a smaller reduce_bucket_size
 * trades meetings for memory, as in DeepSpeed. So a loop
 * that registers each block after a zc_chunk_boundary and makes each block
 * ready before the next takes its buffers always gets them, also with a tied
 * embedding's buffer held through the backward pass; with overlap_comm the
 * next block takes the other set's buffers while the previous block is still
 * being reduced.
 * When the free buffers cannot hold the block's chunks (a list crossing
 * units, more buffers held) the call fails with ZC_ERR_NO_MEMORY, on every
 * rank alike, before taking any. ZC_ERR_INVALID_STATE, nothing taken, when
 * a parameter was already made ready in this micro-step. */
ZC_API zc_status zc_block_grad_buffers(zc_engine *eng, zc_block *b, void **bufs);

/* zc_grad_ready of every parameter of the block, in order (a chunk's
 * reduction starts as its last parameter is made ready, as per parameter).
 * Fails with ZC_ERR_INVALID_STATE, changing nothing, when some parameter was
 * already made ready in this micro-step; a failed reduction breaks the
 * engine as zc_grad_ready's does. */
ZC_API zc_status zc_block_grad_ready(zc_engine *eng, zc_block *b);

/* Adopting storage. Registers the block's parameters over the caller's
 * memory, which zeroc then uses in place as their working-precision values:
 * zc_param_acquire returns pointers into it (pointer identity), zc_step
 * writes the updated parameters into it, and the values it holds at
 * zc_engine_build become the parameters' initial values (the fp32 master
 * included; zc_param_load still works and writes into it). The parameters
 * must be consecutive in registration order; the block becomes exactly one
 * chunk (a chunk boundary before and after it, whatever the bucket), so
 * parameter i lies at its layout offset (the guarantee above: the caller's
 * arrays, back to back). `memory` must hold zc_block_adopt_bytes(b) bytes:
 * the parameters plus zeroc's padding of the chunk to a multiple of
 * world x 64 elements, which zeroc zeroes and uses (stages 1-2 all-gather the
 * padded chunk in place). The caller keeps ownership and must keep the
 * memory alive and unmoved until zc_engine_destroy; zc_stats does not count
 * it under ZC_MEM_PARAMS. Only the working copy is adopted: the fp32 master
 * and Adam state stay where the configuration puts them (device, or
 * offload_optimizer cpu / nvme). By stage: 0-2 use it in place on the host
 * device; stage 3 refuses with ZC_ERR_UNSUPPORTED (it holds only a shard of
 * the working parameters: load with zc_param_load and use zc_block_base
 * while acquired), as does a CUDA device. Before build only
 * (ZC_ERR_INVALID_STATE). ZC_ERR_INVALID_ARG for memory that is NULL, not
 * aligned to the element size or too small (the message says how many
 * bytes), parameters not consecutive or already adopted. A single parameter
 * is adopted as a block of one. */
ZC_API zc_status zc_block_adopt(zc_engine *eng, zc_block *b, void *memory, size_t bytes);

/* The bytes zc_block_adopt needs for block b (its parameters in the working
 * dtype, padded as its chunk will be). Before or after build. */
ZC_API zc_status zc_block_adopt_bytes(zc_engine *eng, const zc_block *b, size_t *bytes);

/* The address of the block's first parameter, when its parameters are
 * consecutive in registration order and lie in one chunk (ZC_ERR_INVALID_ARG
 * otherwise): then the block is one array of the sum of their numel elements
 * (the layout guarantee above). Valid as zc_param_chunk_base's pointer: in
 * stage 3 only while the block (its first parameter) is acquired. */
ZC_API zc_status zc_block_base(zc_engine *eng, const zc_block *b, void **base);

/* ---- Blocks: loading and gathering values in one array ------------------ */

/* A block's values as one array of floats: the block's parameters' full
 * values back to back, in the block's order (parameter i's numel values
 * row-major, then parameter i+1's). `count` is the array's length in floats
 * and must equal the sum of the parameters' numel.
 *
 * zc_block_load is zc_param_load of every parameter of the block, in order,
 * from that array: the same effect, bitwise, and the same contract (after
 * build, between optimizer steps, every rank loads the same values; not
 * collective; with offload_param the shards are written home as by
 * zc_param_load, the write's outcome agreed at the next zc_param_acquire or
 * zc_step). Checked before anything is loaded, so they change nothing:
 * ZC_ERR_INVALID_ARG for a bad block, NULL values or a wrong count (the
 * message gives both counts), ZC_ERR_INVALID_STATE inside an accumulation
 * window. A failure after that (a device or offload I/O error of one
 * parameter's load) returns that load's status, naming the parameter; the
 * parameters before it are loaded. */
ZC_API zc_status zc_block_load(zc_engine *eng, zc_block *b, const float *values, size_t count);
/* zc_block_load with zc_param_load_rounded's master (the values rounded to
 * the working dtype first): zc_param_load_rounded of every parameter of the
 * block, in order, with zc_block_load's contract. */
ZC_API zc_status zc_block_load_rounded(zc_engine *eng, zc_block *b, const float *values,
                                       size_t count);

/* zc_param_gather_master of every parameter of the block, in order, into out
 * (count floats, the layout above): the same values, bitwise, and the same
 * contract - collective in stages 1-3 (every rank calls it for the same
 * block), host memory out, not counted in the step's communication stats.
 * Each chunk is read and gathered once for each run of consecutive block
 * parameters in it (a zc_block_span block: once per chunk). The argument
 * errors of zc_block_load are checked before any collective; a failed read
 * of an offloaded master or a failed gather breaks every rank's engine with
 * the same message, as zc_param_gather_master's does (docs/faults.md). */
ZC_API zc_status zc_block_gather_master(zc_engine *eng, zc_block *b, float *out, size_t count);

/* ---- fp32 views: float loops over 16-bit parameters (host path) ---------- */

/* A CPU trainer with float kernels can train fp16/bf16 parameters without
 * widening and narrowing them itself. With zc_engine_options.f32_view_chunks
 * = N > 0 the build reserves N fp32 slots of the largest padded chunk for
 * parameter views and N for gradient views: memory 2 x N x 4 x (largest
 * padded chunk) bytes (zc_stats: ZC_MEM_RESERVED while idle, ZC_MEM_BUFFERS
 * while in use). A chunk whose parameters have a view (or a gradient view)
 * holds one slot until its last such parameter is released (made ready), so
 * N bounds the chunks viewed at once: 2 covers a block plus a tied embedding.
 * With fp32 parameters no slot is used: the views are the parameters and the
 * gradient buffers themselves, so the same float loop runs in every
 * precision. Host device only: with a CUDA device both calls return
 * ZC_ERR_UNSUPPORTED (widen in your kernels). Not collective; like the
 * gradient pool, running out of slots follows the call sequence, so every
 * rank fails alike. */

/* Fills views[i] (zc_block_size(b) pointers) with the fp32 values of the
 * block's i-th parameter: the working-precision values widened (exactly)
 * into the chunk's view slot, or for fp32 parameters the acquired pointer.
 * Every parameter must be acquired (zc_block_acquire); the view is valid
 * until the parameter's last outstanding acquire is released. It is a copy:
 * zc_step refreshes it (a block held across the step sees the update), a
 * later call widens again (after zc_param_load), and writing it changes no
 * parameter. Errors, with nothing changed: ZC_ERR_INVALID_STATE naming a
 * parameter that is not acquired; ZC_ERR_UNSUPPORTED on a CUDA device;
 * ZC_ERR_NO_MEMORY when f32_view_chunks is 0 or its slots are all held by
 * other chunks; ZC_ERR_INVALID_ARG for a bad block or NULL views. */
ZC_API zc_status zc_block_view_f32(zc_engine *eng, zc_block *b, float **views);

/* zc_block_grad_buffers in fp32: bufs[i] receives a zeroed fp32 buffer of
 * the i-th parameter's numel elements, which zc_grad_ready (or
 * zc_block_grad_ready) narrows, rounding to nearest even, into the
 * parameter's working-precision gradient buffer (overwriting it: do not also
 * write that buffer). Same lifetime as zc_grad_buffer's pointer: valid until
 * the parameter's zc_grad_ready, zeroed for each micro-step; a second call
 * in the same micro-step returns the same buffer, contents kept. For fp32
 * parameters bufs[i] is the gradient buffer itself. The 16-bit buffers are
 * taken as zc_block_grad_buffers takes them (its errors, stages 2-3 pool
 * included), and then the fp32 slots: ZC_ERR_NO_MEMORY, nothing taken, when
 * f32_view_chunks is 0 or too few slots are free; ZC_ERR_INVALID_STATE when
 * a parameter was already made ready in this micro-step; ZC_ERR_UNSUPPORTED
 * on a CUDA device. With ZC_DEBUG=1 every chunk has an fp32 slot of its own
 * (no pool to run out of) and a write into bufs[i] after the parameter's
 * zc_grad_ready fails the next zc_step or zc_micro_step_end on every rank
 * (docs/debug.md). */
ZC_API zc_status zc_block_grad_buffers_f32(zc_engine *eng, zc_block *b, float **bufs);

/* ---- Tied parameters -------------------------------------------------------
 *
 * A parameter used twice in the forward pass - an LM head tied to the token
 * embedding - receives gradient twice in backward: from the head at the
 * start, from the embedding lookup at the end. zeroc needs no call for it:
 * take its gradient buffer (zc_grad_buffer / zc_block_grad_buffers[_f32])
 * at the first use, accumulate both contributions into it (the buffer is
 * zeroed once per micro-step and kept until zc_grad_ready), and make it
 * ready once, after its last use - so its chunk is reduced last. Keep the
 * tied parameter in a chunk of its own (zc_chunk_boundary before and after
 * it, with its own block), so making the blocks between its two uses ready
 * does not wait on it; in stages 2-3 its chunk then holds one of the
 * reserved gradient buffers through the whole backward pass, and the
 * reserve's second set still holds any block's (make each block ready before
 * the next takes its buffers). Making it ready at its first use, or twice, is wrong:
 * the second contribution would be lost (zc_grad_ready fails the second
 * time with ZC_ERR_INVALID_STATE). For a stage-3 model the tied parameter is
 * acquired again for the head's backward, as any parameter. */

/* Ends a micro-step that is not the last of the accumulation window; every
 * parameter must have been made ready. zc_step ends the last one itself. */
ZC_API zc_status zc_micro_step_end(zc_engine *eng);

/* What zc_step did. */
typedef struct zc_step_info {
    int64_t step;        /* optimizer steps taken, skipped ones included */
    bool skipped;        /* overflow: no parameter or optimizer state changed */
    double grad_norm;    /* global L2 norm of the averaged, unscaled gradient;
                            -1 when it is not finite, which is every skipped
                            step (DeepSpeed's norm is -1 for inf/nan too).
                            With fp16.deepspeed_unscale_order, at stages 0
                            and 3 a step on which the loss scale grows
                            reports it over the grown scale (half the
                            gradient's), as DeepSpeed's stage 3 and its
                            FP16_Optimizer do; stages 1-2 report the
                            gradient's, as DeepSpeed's stages 1-2 do */
    double loss_scale;   /* the scale this step's gradients were made with
                            (zc_loss_scale() before the step; 1 for fp32/bf16) */
    double lr;           /* learning rate applied (or that would have been) */
} zc_step_info;

/* Ends the accumulation window: finishes reductions, agrees on overflow across
 * ranks, computes the global norm, clips, runs Adam on this rank's shards,
 * publishes the updated parameters, advances the loss scaler and (unless the
 * step was skipped) the scheduler. Collective. Fails with ZC_ERR_INVALID_STATE
 * naming a parameter whose gradient is missing (nothing changed), and with
 * ZC_ERR_LOSS_SCALE when an overflow happens at the minimum loss scale: the
 * window's gradients are dropped and nothing else changes - info (when not
 * NULL) is filled as for a skipped step (skipped true, grad_norm -1, the loss
 * scale and the lr it would have used, step the count before this call), and
 * neither the step counter, the loss scaler nor the scheduler advances; and
 * with
 * ZC_ERR_INVALID_STATE when the step counter (or the loss scaler's iteration)
 * is at its limit, 2^62 (nothing changed; a checkpoint loads only with
 * counters at most that). info may be NULL. It ends the gradient_accumulation_steps-th micro-step; the
 * earlier ones end with zc_micro_step_end (ZC_ERR_INVALID_STATE otherwise).
 * A failed collective (ZC_ERR_COMM: timeout, mismatch, abort) here or in any
 * other call leaves the ranks at different points, so from then on every call
 * on this engine returns ZC_ERR_COMM: destroy it and its communicator.
 * Rank-local work that fails once the update has begun (Adam on some shards)
 * is agreed with the other ranks: every rank returns the same status and
 * message naming the failed rank, and the engine is broken on every rank
 * (later calls return that status and reason), so a step is never applied
 * twice. A failure before the update changes nothing.
 * With zero_optimization.offload_optimizer.device "nvme" the update reads and
 * writes the optimizer state: a one-off EIO is retried and changes nothing;
 * a persistent one or ENOSPC fails zc_step with ZC_ERR_IO naming the rank,
 * chunk, file and offset, on every rank, and breaks the engine as above (the
 * step is not all-or-nothing: part of the state may be written; restore a
 * checkpoint). */
ZC_API zc_status zc_step(zc_engine *eng, zc_step_info *info);

/* Current loss scale (1 without fp16). The loss must be multiplied by it
 * before backward. */
ZC_API double zc_loss_scale(const zc_engine *eng);

/* ---- Evaluation passes (docs/loop.md) ----------------------------------- */

/* A validation or sampling pass runs the forward pass alone: it acquires and
 * releases parameters and computes no gradient. Marked with zc_pass_begin /
 * zc_pass_end, it may run before the first step, between two steps, between
 * two micro-steps or between a micro-step's forward and backward passes, and
 * the training is bitwise what it would be without it (parameters,
 * optimizer state, gradients, loss scaler and counters; the step figures of
 * zc_stats, zc_offload_stats and the wall_clock_breakdown timers leave it
 * out and zc_engine_pass_stats reports it). Unmarked, its acquires count as
 * the training's: at stage 3 they land in the recorded acquire order, and
 * every later step finds that order changed (logged at WARN, prefetch off
 * until it is recorded again).
 *
 * Stage 3 keeps one acquire trace per kind of pass: the first evaluation
 * pass records its own order and later ones prefetch along it, gathering
 * ahead and reading offloaded shards ahead as training does, without any
 * gradient bookkeeping. An evaluation pass whose activations are a prefix
 * of the recorded ones (fewer batches) or continue them (more) is not an
 * order change; only a different chunk at a recorded position is (WARN,
 * counted in zc_stats.trace_invalidations). Both traces hold the same number
 * of activations, reserved at build (4 x parameters x
 * gradient_accumulation_steps, at least 64); an evaluation pass longer than
 * that whose record repeats (one forward, batch after batch) is predicted
 * past it from its period, another prefetches over the record only. Stages
 * 0-2 need no trace: the marks only check the calls.
 *
 * Every rank marks the same passes at the same points, as it acquires the
 * same parameters (the acquires of a stage-3 pass are collective); the marks
 * themselves communicate nothing and allocate nothing. */
typedef enum zc_pass_kind {
    ZC_PASS_TRAIN = 0, /* forward and backward: the default, never marked */
    ZC_PASS_EVAL = 1   /* forward only, between zc_pass_begin and zc_pass_end */
} zc_pass_kind;

/* Opens a pass of `kind` (ZC_PASS_EVAL). At stage 3 what was gathered or
 * read ahead for the training and is not held is dropped first (it is
 * gathered again when training goes on; results do not depend on it).
 * Errors, nothing changed: ZC_ERR_INVALID_ARG for ZC_PASS_TRAIN or an
 * unknown kind; ZC_ERR_INVALID_STATE when a pass is already open (passes do
 * not nest) or a parameter is acquired (named: release it first). Until
 * zc_pass_end the calls that compute gradients or change parameters -
 * zc_grad_buffer, zc_grad_ready, zc_block_grad_buffers[_f32],
 * zc_block_grad_ready, zc_micro_step_end, zc_step, zc_param_load,
 * zc_block_load and zc_checkpoint_load - fail with ZC_ERR_INVALID_STATE naming the call and
 * change nothing. */
ZC_API zc_status zc_pass_begin(zc_engine *eng, zc_pass_kind kind);

/* Closes the open evaluation pass: at stage 3 its trace is complete (the
 * next evaluation pass prefetches along it) and what it gathered ahead and
 * holds no more is dropped, so training goes on as before the pass.
 * ZC_ERR_INVALID_STATE, the pass left open, when no pass is open or a
 * parameter is still acquired (named). */
ZC_API zc_status zc_pass_end(zc_engine *eng);

/* The kind of the open pass: ZC_PASS_EVAL between zc_pass_begin and
 * zc_pass_end, else ZC_PASS_TRAIN (also for NULL or a bad handle). */
ZC_API zc_pass_kind zc_pass_current(const zc_engine *eng);

/* Figures of the last completed evaluation pass (zeros before the first),
 * this rank's. Stages 0-2 gather nothing: only `evals` counts there. */
typedef struct zc_pass_stats {
    size_t size;                   /* sizeof(zc_pass_stats), set by caller */
    int64_t evals;                 /* evaluation passes completed since build */
    int64_t gathers;               /* stage-3 chunk gathers in the last one */
    int64_t all_gather_bytes;      /* their payload (as zc_stats.comm_bytes_last_step) */
    int64_t prefetch_hits;         /* chunk activations that found the chunk gathered
                                      (ahead, or kept for reuse) or its shard read
                                      started, as zc_offload_stats counts them */
    int64_t prefetch_misses;       /* activations that gathered on demand */
    int64_t io_wait_acquires;      /* acquires that waited for a parameter read */
    double io_wait_s;              /* the time they waited */
    int64_t param_nvme_read_bytes; /* parameter shards read (offload_param nvme) */
    int64_t param_reads;           /* ... in that many reads */
    int64_t max_live_elems;        /* peak gathered + in-flight elements */
} zc_pass_stats;

/* Fills *out (out->size must be set; ZC_ERR_INVALID_ARG otherwise). Not
 * collective; not thread-safe with calls on the same engine. */
ZC_API zc_status zc_engine_pass_stats(const zc_engine *eng, zc_pass_stats *out);

/* ---- Activation checkpoints (docs/activations.md) ---------------------- */

/* Activation checkpointing keeps only each block's input in forward and
 * recomputes the block in backward; the activation store keeps those inputs
 * for the engine's lifetime of a micro-step, where the config's
 * activation_checkpointing section says (ZeRO-R): device memory, pinned host
 * memory (cpu_checkpointing) or NVMe swap files (nvme_checkpointing, a zeroc
 * extension). Its memory is reserved at zc_engine_build from the bound of
 * zc_engine_options.act_checkpoints x act_checkpoint_bytes (ZC_MEM_ACTIVATIONS
 * in zc_stats; counted by zc_plan_memory, the pre-flight, max_memory and
 * `zeroc estimate`), so saving and restoring never allocate.
 *
 * Order. A micro-step saves checkpoints (forward) and restores them last
 * saved first (backward), as a stack: the n-th checkpoint held at once uses
 * the n-th slot. While a checkpoint goes home it is copied out at once (on a
 * GPU on the store's own copy stream, from a device staging slot); the
 * restores read the next checkpoints ahead of their call in that reverse
 * order (an NVMe home into its pinned buffers; the last ones saved are
 * still in them and come back without a read). Saves and restores may
 * interleave as a stack does (a pipeline schedule); a micro-step's end
 * (zc_micro_step_end, zc_step) forgets what was not restored. */

/* Names one saved checkpoint. 0 is never one. */
typedef uint64_t zc_act_id;

/* Copies `bytes` (1..act_checkpoint_bytes) at src (device memory, or host
 * memory on the host device) into the store as the next checkpoint of this
 * micro-step, and writes its name to *id. Ordered on `stream` (a
 * cudaStream_t, NULL = the legacy default stream): the copy reads src after
 * the work enqueued on it before this call, and src may be written again by
 * work enqueued on `stream` after the call returns (the store copies into
 * its own device memory first on a GPU). Not collective: every rank saves
 * its own activations; with an NVMe home the write runs on after the call
 * returns and a failed one is reported by the next zc_act_restore, agreed
 * across ranks. With partition_activations each rank keeps its 1/size part
 * of src: bytes must then be a multiple of 4 x the model-parallel size.
 * Errors, with nothing saved and nothing changed: ZC_ERR_INVALID_ARG for a
 * NULL src or id, bytes 0 or beyond act_checkpoint_bytes (the message says
 * both) or not divisible as above; ZC_ERR_INVALID_STATE before build,
 * without a store (act_checkpoint_bytes or the count is 0), inside an
 * evaluation pass (no backward restores it), or when the micro-step already
 * holds act_checkpoints checkpoints; a broken engine's status otherwise. */
ZC_API zc_status zc_act_save(zc_engine *eng, const void *src, size_t bytes, void *stream,
                             zc_act_id *id);

/* Copies checkpoint `id` back into dst (bytes, exactly what it was saved
 * with; device memory, or host memory on the host device), ordered on
 * `stream` as zc_act_save is: work enqueued on it after the call reads the
 * data. It must be the last checkpoint saved and not yet restored in this
 * micro-step; afterwards it is gone (its slot serves the next save) and the
 * store starts reading the next ones ahead. Errors, with nothing changed:
 * ZC_ERR_INVALID_ARG for a NULL dst, a bytes that differs from the saved
 * size, or an id that names no checkpoint saved by this engine;
 * ZC_ERR_INVALID_STATE (naming the checkpoints) for an id restored already,
 * one saved in an earlier micro-step, or one restored out of order (another
 * one was saved after it and is not restored yet), or without a store.
 * Collective when the checkpoints are on NVMe or partitioned: every rank
 * restores in the same order, the outcome of the read is agreed across the
 * engine's ranks before it returns, and a failed read or write on any rank
 * returns ZC_ERR_IO on every rank with the same message (naming the rank,
 * the slot and the file) and breaks every engine; with
 * partition_activations the parts are all-gathered over act_mp_comm. */
ZC_API zc_status zc_act_restore(zc_engine *eng, zc_act_id id, void *dst, size_t bytes,
                                void *stream);

/* Where the activation store keeps its checkpoints (zc_act_stats.home). */
typedef enum zc_act_home_kind {
    ZC_ACT_ON_NONE = -1, /* no store */
    ZC_ACT_ON_DEVICE = 0,
    ZC_ACT_ON_PINNED,    /* cpu_checkpointing */
    ZC_ACT_ON_NVME       /* nvme_checkpointing */
} zc_act_home_kind;

typedef struct zc_act_stats {
    size_t size;                /* sizeof(zc_act_stats), set by the caller */
    zc_act_home_kind home;
    int64_t slots;              /* checkpoints a micro-step may hold (the bound) */
    int64_t slot_bytes;         /* the largest checkpoint */
    int64_t part_bytes;         /* what this rank keeps of one (partition_activations:
                                   slot_bytes / model-parallel size, else slot_bytes) */
    int parts;                  /* model-parallel ranks a checkpoint is split over (1) */
    int64_t held;               /* checkpoints held now */
    int64_t peak_held;          /* the most held at once since build */
    int64_t saves, restores;    /* since build */
    int64_t saved_bytes, restored_bytes; /* whole checkpoints, since build */
    int64_t nvme_write_bytes, nvme_read_bytes; /* swap-file traffic (whole requests) */
    int64_t restore_hits;       /* restores whose data was in host or device memory
                                   already: kept there, still in a buffer, or read
                                   ahead to the end */
    int64_t restore_misses;     /* restores that waited for a read */
    double save_s;              /* wall time inside zc_act_save: copying out (on the
                                   host path the copy itself), waiting for a buffer */
    double restore_s;           /* wall time inside zc_act_restore, the wait for reads
                                   included: with save_s, the transfer the step sees */
    double restore_wait_s;      /* of which waiting for swap-file reads */
} zc_act_stats;

/* Fills *out (out->size must be set; ZC_ERR_INVALID_ARG otherwise) with this
 * rank's store; an engine without a store reports home ZC_ACT_ON_NONE and
 * zeros. Not collective; not thread-safe with calls on the same engine. */
ZC_API zc_status zc_engine_act_stats(const zc_engine *eng, zc_act_stats *out);

/* ---- Checkpoints (docs/checkpoint.md) ----------------------------------- */

/* Saves the training state to DIR/TAG (tag NULL: "global_step<N>"): each
 * rank writes the master, exp_avg and exp_avg_sq it holds, each in the dtype
 * the engine stores it in (fp32, or bf16 under the bf16 state keys:
 * bf16.bf16_master_weights_and_grads, bf16_optimizer_states, exp_avg_dtype,
 * exp_avg_sq_dtype; the manifest records each kind's), straight from its
 * optimizer home (an NVMe home streams chunk by chunk) to rank_NNNNN.bin,
 * and rank 0 writes manifest.json (step, loss scaler,
 * scheduler position, config digest, world size, stage, layout, tensor
 * names, shapes, offsets and per-tensor XXH3 checksums), then points
 * DIR/latest at TAG. Collective, between optimizer steps (else
 * ZC_ERR_INVALID_STATE). Crash-safe: files are written under temporary
 * names, fsync'd and renamed, the checkpoint appears by one directory rename
 * and `latest` moves last, so a crash leaves the previous checkpoint
 * loadable. DIR is created if missing (one level); an existing DIR/TAG is
 * refused (ZC_ERR_IO). A tag is 1-128 characters of [A-Za-z0-9._-], not
 * starting with '.'. On an I/O failure on any rank every rank returns the
 * same status and message, nothing under DIR/TAG or DIR/latest has changed,
 * and the engine trains on. Ranks of several processes need DIR on a file
 * system they share. The first save or load maps 32 MiB of I/O buffers that
 * the engine keeps for the next ones until zc_engine_destroy (counted as
 * pinned host memory, ZC_MEM_OTHER, in zc_engine_stats). */
ZC_API zc_status zc_checkpoint_save(zc_engine *eng, const char *dir, const char *tag);

/* Restores what zc_checkpoint_save wrote to DIR/TAG (tag NULL: the tag in
 * DIR/latest): the optimizer state, the working parameters derived from the
 * master, the step counters and scheduler position, and fp16's loss scaler,
 * so training continues bitwise as if it had not stopped (same world size
 * and state dtypes). Each of master, exp_avg and exp_avg_sq loads bitwise
 * into the same dtype and widens exactly from a saved bf16 into the
 * engine's fp32; a saved fp32 kind into the engine's bf16 is refused
 * (ZC_ERR_INVALID_ARG naming the kind, both dtypes and the engine's key to
 * change), since rounding would change the saved values.
 * Tensors are matched by name and element range, so a checkpoint saved with
 * another world size, stage or chunk size loads directly. Collective,
 * between optimizer steps, with no parameter acquired (ZC_ERR_INVALID_STATE).
 * Before anything is changed every rank checks what needs no payload: a
 * missing or truncated file (every shard file is opened and its size
 * checked), a manifest that fails the validation every reader shares
 * (ZC_ERR_INVALID_ARG naming the field: docs/checkpoint.md lists it; step
 * counters above 2^62, chunks that disagree with the parameters, a tensor
 * name twice), another model's checkpoint (a name or shape differs), fp16
 * against another precision, fp32 state into bf16 state, or a newer format
 * version fails with a message
 * naming the file and the tensor, the same on every rank, and the engine
 * unchanged. Then each rank reads the entries it needs once, straight into
 * its state, checking each entry's checksum as it is read: a damaged entry
 * (checksum mismatch) or a read error, like an I/O error of an NVMe home,
 * fails every rank with the same message naming the file and the tensor and
 * breaks the engine on every rank (its state was partly overwritten: load a
 * good checkpoint into fresh engines). Checkpoints of format version 1 are
 * verified whole before anything changes. A config whose optimizer or
 * scheduler settings differ from the saved digest is a warning: the engine's
 * settings apply. */
ZC_API zc_status zc_checkpoint_load(zc_engine *eng, const char *dir, const char *tag);

/* Writes the full model of checkpoint DIR/TAG (tag NULL: latest) as a
 * safetensors file to fd (an empty file the caller opened for writing and
 * keeps owning): every parameter under its registered name and shape, in
 * registration order, converted from the master to dtype (ZC_DTYPE_F32,
 * ZC_DTYPE_BF16 or ZC_DTYPE_F16, rounded to nearest even; a bf16 master is
 * widened exactly, or copied as it is for ZC_DTYPE_BF16), with metadata
 * {"format": "pt"}. The manifest is validated as by zc_checkpoint_load (a
 * tensor name given twice is refused: safetensors names each tensor once)
 * and checksums are verified as by it. Reads one tensor at a time. Not collective (no engine). On failure the file
 * holds a partial write: the caller removes it. */
ZC_API zc_status zc_checkpoint_export_fd(const char *dir, const char *tag, int fd,
                                         zc_dtype dtype);

/* Rewrites checkpoint IN_DIR/TAG (tag NULL: the tag in IN_DIR/latest) for
 * `world` ranks into OUT_DIR/TAG, under that same tag (the directory's name,
 * whatever the manifest's "tag" field says; OUT_DIR must exist;
 * OUT_DIR/latest is set), with the shard files a world of that size reads its
 * own ranges from; values are copied bitwise, each kind in its saved dtype.
 * Same crash safety as zc_checkpoint_save, and the same refusals: an existing OUT_DIR/TAG, a staging OUT_DIR/.TAG.partial that is a
 * link or was not made by a zeroc save. The input is verified as it is read,
 * and the output's manifest is read back through the loader's validation
 * (and each shard file's size checked) before OUT_DIR/TAG and
 * OUT_DIR/latest appear. */
ZC_API zc_status zc_checkpoint_reshard(const char *in_dir, const char *tag, const char *out_dir,
                                       int world);

/* ---- Importing pretrained weights (docs/loading.md) --------------------- */

/* How a tensor of a safetensors file maps to a parameter of the engine:
 * file_name is the tensor's name in the file, param_name the parameter's
 * (NULL: the tensor is known and not loaded, e.g. a tied "lm_head.weight" or
 * an attention mask buffer); transposed marks a 2-D tensor stored as the
 * parameter's transpose (the file's [cols, rows] for a [rows, cols]
 * parameter), as Hugging Face's GPT-2 stores its Conv1D weights. */
typedef struct zc_load_name {
    const char *file_name;
    const char *param_name;
    bool transposed;
} zc_load_name;

/* What a name-map callback decided for one tensor of the file. */
typedef enum zc_load_map_result {
    ZC_LOAD_UNMAPPED = 0, /* no mapping: the exact name is tried next */
    ZC_LOAD_MAPPED,       /* into the parameter written to `param` */
    ZC_LOAD_SKIP          /* known and not loaded (a tied copy, a buffer) */
} zc_load_map_result;

/* A name-map callback: called once per tensor of the file that the table
 * does not name, with its name and shape (as the file stores it); for
 * ZC_LOAD_MAPPED it writes the parameter's name into param (cap bytes, NUL
 * included) and sets *transposed. Called on every rank, from the thread that
 * called zc_load_safetensors; it must decide the same on every rank. */
typedef zc_load_map_result (*zc_load_map_fn)(void *user, const char *file_name,
                                             const int64_t *shape, int ndim, char *param,
                                             size_t cap, bool *transposed);

/* Options of zc_load_safetensors. Start from ZC_LOAD_OPTIONS_INIT; fields may
 * be added at the end. A tensor's parameter is looked up in `names` first
 * (n_names entries), then by `map`, then by its exact name. */
typedef struct zc_load_options {
    size_t size;               /* sizeof(zc_load_options) */
    const zc_load_name *names; /* a table, or NULL */
    int n_names;
    zc_load_map_fn map;        /* a callback, or NULL */
    void *map_user;            /* its first argument */
    bool allow_extra;          /* tensors that map to no parameter are skipped
                                  (default: refused, naming the tensor) */
    size_t ring_bytes;         /* the staging ring the file is read through:
                                  the import's only host memory beyond the
                                  engine's own (0: 32 MiB; else a multiple of
                                  1 MiB in [4 MiB, 1 GiB]) */
    bool buffered;             /* read through the page cache instead of with
                                  O_DIRECT (a file system that refuses O_DIRECT
                                  is read buffered anyway) */
} zc_load_options;

#define ZC_LOAD_OPTIONS_INIT { sizeof(zc_load_options), NULL, 0, NULL, NULL, false, 0, false }

/* What one rank's import did (zc_load_safetensors' optional out-param,
 * filled when the call succeeds; untouched otherwise). */
typedef struct zc_load_stats {
    size_t size;               /* sizeof(zc_load_stats), set by the caller */
    int files;                 /* safetensors files of the set */
    int64_t file_bytes;        /* their sizes together */
    int64_t header_bytes;      /* bytes of headers (and the index) this rank read */
    int64_t bytes_read;        /* every byte this rank read, headers included:
                                  about file_bytes / world plus the headers */
    int64_t tensors;           /* tensors loaded into parameters */
    int64_t skipped;           /* tensors skipped (ZC_LOAD_SKIP, allow_extra) */
    int64_t ring_bytes;        /* the staging ring's host memory */
    bool direct;               /* the payload was read with O_DIRECT */
    double seconds;            /* the call's wall time on this rank */
} zc_load_stats;

/* Loads pretrained weights into the engine's parameters: one .safetensors
 * file, or a Hugging Face sharded set named by its index
 * (model.safetensors.index.json: {"weight_map": {tensor: file}}, the files
 * beside it). F32, BF16 and F16 tensors become the fp32 master exactly and
 * the working copy as zc_param_load makes it from the same fp32 values, so
 * the engine's state is bitwise what zc_param_load of those values gives, at
 * every stage, precision and offload setting; Adam's moments and the step
 * counters are left as they are. Collective, after zc_engine_build, between
 * optimizer steps, with no parameter acquired (else ZC_ERR_INVALID_STATE).
 *
 * Each rank reads only the bytes behind the elements its optimizer shard
 * holds (at stage 0 a 1/W slice of each chunk, the master then all-gathered),
 * so the ranks together read the file once (plus each rank the headers); the
 * working copies are completed by all-gathers. The payload is read with
 * large aligned O_DIRECT reads kept in flight (io_uring, as the NVMe store
 * does) into a staging ring of opts->ring_bytes and converted from there
 * into the state's homes (device, pinned host or NVMe: the NVMe home writes
 * the master alone): the import allocates nothing else on the host, except
 * on a GPU a host bounce of one shard for state in device memory. opts and
 * stats may be NULL.
 *
 * Refused before anything is written, with the engine unchanged and the same
 * status and message on every rank (ZC_ERR_INVALID_ARG, or ZC_ERR_IO for a
 * file that cannot be opened or read, naming the file and the tensor): a
 * header that is not one JSON object or is larger than the file or than
 * 100 MB, a tensor entry without a known dtype, shape and data_offsets, an
 * unsupported dtype of a tensor to load, offsets outside the data, overlapping
 * or leaving a gap, a truncated file or trailing bytes, an index naming a
 * tensor its file lacks or a file outside its directory, a tensor in two
 * files, a parameter no tensor maps to (missing), a tensor that maps to no
 * parameter (unless allow_extra), two tensors for one parameter, a shape or
 * element count that differs (transposed: the swapped 2-D shape), a bad
 * option. A read error or a failed write into a home after that breaks every
 * rank's engine with the same message, saying the parameters are partly
 * loaded. */
ZC_API zc_status zc_load_safetensors(zc_engine *eng, const char *path,
                                     const zc_load_options *opts, zc_load_stats *stats);

/* One tensor of a safetensors file or set, as zc_load_list reports it. */
typedef struct zc_load_tensor {
    const char *name;          /* valid during the callback */
    const char *dtype;         /* as the file names it: "F32", "BF16", "I64", ... */
    int ndim;                  /* 0..8 */
    int64_t shape[8];
    int64_t numel;
    const char *file;          /* the file that holds it (a part of a set) */
} zc_load_tensor;

/* Lists the tensors of a safetensors file or Hugging Face set (the paths
 * zc_load_safetensors takes), in the set's order (file by file, by offset),
 * after the header checks zc_load_safetensors makes (the same refusals,
 * ZC_ERR_INVALID_ARG or ZC_ERR_IO naming the file and the tensor): what a
 * program registers its parameters from. fn is called once per tensor; a
 * non-zero return stops the listing (the call then returns ZC_OK). Reads
 * the headers only. Not collective, no engine; thread-safe. */
ZC_API zc_status zc_load_list(const char *path,
                              int (*fn)(void *user, const zc_load_tensor *tensor), void *user);

/* Memory categories of zc_stats. */
typedef enum zc_mem_category {
    ZC_MEM_PARAMS = 0, /* working-precision parameters (full or shard) */
    ZC_MEM_GRADS,      /* gradient accumulators and shards */
    ZC_MEM_MASTER,     /* fp32 master weights */
    ZC_MEM_ADAM,       /* Adam m and v */
    ZC_MEM_BUFFERS,    /* transient chunk, bucket and gather buffers in use */
    ZC_MEM_OTHER,      /* bookkeeping */
    ZC_MEM_RESERVED,   /* buffer pool reserved by zc_engine_build and idle now
                          (a pool slot in use counts under ZC_MEM_BUFFERS) */
    ZC_MEM_ACTIVATIONS, /* the activation store's checkpoints: its slots (device,
                          pinned host or NVMe), its pinned NVMe buffers and
                          device staging (zc_act_save) */
    ZC_MEM__COUNT
} zc_mem_category;

/* Where bytes live, for zc_stats.bytes_by_kind. On the host path (no GPU)
 * the engine's "device" buffers (working parameters, gradients, device-
 * resident optimizer state, buffer pools) are host memory standing for a
 * GPU's and count as ZC_KIND_DEVICE, as they would on a GPU; ZC_KIND_HOST is
 * then the rest of the pageable host memory (bookkeeping). */
typedef enum zc_mem_kind_stat {
    ZC_KIND_DEVICE = 0, /* device (GPU) memory */
    ZC_KIND_PINNED,     /* pinned host memory (offload pool, swap buffers) */
    ZC_KIND_HOST,       /* pageable host memory */
    ZC_KIND_NVME,       /* bytes of NVMe swap files */
    ZC_KIND__COUNT
} zc_mem_kind_stat;

/* Collective kinds of zc_stats. */
typedef enum zc_coll_kind {
    ZC_COLL_ALL_REDUCE = 0,
    ZC_COLL_REDUCE_SCATTER,
    ZC_COLL_ALL_GATHER,
    ZC_COLL_BROADCAST,
    ZC_COLL__COUNT
} zc_coll_kind;

/* The kinds of memory a chunk's optimizer state or (stage 3) parameter shard
 * can live in, fastest first: device memory (on the host path, the host
 * memory that stands for it), pinned host memory, NVMe swap files. Where
 * each chunk goes is decided by the offload keys (offload_optimizer with
 * ratio, offload_param with max_in_cpu) or, with zero_optimization.max_memory
 * (a zeroc extension, docs/placement.md), by the memory planner from per-rank
 * budgets: device first, then pinned host, then NVMe, chunk by chunk. */
typedef enum zc_place_kind {
    ZC_PLACE_ON_DEVICE = 0,
    ZC_PLACE_ON_PINNED,
    ZC_PLACE_ON_NVME,
    ZC_PLACE_ON__COUNT
} zc_place_kind;

/* The budgets of zero_optimization.max_memory, in the order of its keys. */
typedef enum zc_budget_index {
    ZC_BUDGET_INDEX_DEVICE = 0,
    ZC_BUDGET_INDEX_CPU,     /* all host memory: pinned and pageable */
    ZC_BUDGET_INDEX_NVME,
    ZC_BUDGET_INDEX__COUNT
} zc_budget_index;

/* The links a rank's collective bytes travel (zc_stats). */
typedef enum zc_link {
    ZC_LINK_INTRA_NODE = 0, /* to ranks on this rank's node */
    ZC_LINK_INTER_NODE,     /* to ranks on other nodes */
    ZC_LINK__COUNT
} zc_link;

typedef struct zc_stats {
    size_t size;                           /* sizeof(zc_stats), set by caller */
    int rank, world, stage;
    int64_t num_params;                    /* registered elements */
    int64_t padded_params;                 /* elements after chunk padding */
    int64_t num_chunks;
    int64_t bytes[ZC_MEM__COUNT];          /* allocated now, by category */
    int64_t peak_bytes[ZC_MEM__COUNT];     /* high-water mark, by category */
    int64_t comm_bytes_last_step[ZC_COLL__COUNT]; /* payload of the last step: full
                                              buffer reduced or gathered, in
                                              the communicated dtype (padded
                                              chunks; the fp64 norm partials
                                              and zc_param_gather_master are
                                              not counted; over the group each
                                              ran in, so MiCS's all-reduce
                                              across replicas counts its fp32
                                              shard and a hierarchical gather
                                              both of its steps) */
    int64_t gathers_last_step;             /* stage 3 chunk gathers in the last step */
    int64_t max_live_elems_last_step;      /* stage 3 peak gathered elements */
    int64_t trace_invalidations;           /* stage 3 acquire-order changes seen */
    int64_t steps, skipped_steps;
    int64_t bytes_by_kind[ZC_KIND__COUNT]; /* allocated now, by where it lives
                                              (sum over categories) */
    int64_t bytes_by_kind_cat[ZC_KIND__COUNT][ZC_MEM__COUNT]; /* by kind and category */
    int64_t peak_bytes_by_kind[ZC_KIND__COUNT]; /* high-water mark of bytes_by_kind since
                                              create (the progress lines'
                                              MaxMemAllocated) */
    /* The placement (after build; zeros before): chunks, and this rank's
     * elements, whose optimizer state (fp32 master, Adam m and v) and, at
     * stage 3, parameter shard live in each zc_place_kind. A persistent
     * stage-3 chunk counts as a device shard; below stage 3 every parameter
     * is on the device. */
    int64_t opt_chunks_by_place[ZC_PLACE_ON__COUNT], opt_elems_by_place[ZC_PLACE_ON__COUNT];
    int64_t param_chunks_by_place[ZC_PLACE_ON__COUNT],
        param_elems_by_place[ZC_PLACE_ON__COUNT];
    /* The budgets the placement was chosen under, agreed across ranks (an
     * "auto" one: the smallest any rank found), by zc_budget_index; -1
     * each without zero_optimization.max_memory. */
    int64_t budget[ZC_BUDGET_INDEX__COUNT];
    /* Bytes this rank sent in the last step's collectives (those of
     * comm_bytes_last_step), by zc_link: to ranks on its node and on other
     * nodes. The model is a direct exchange between a collective's ranks -
     * what the thread and MPI communicators send: an all-gather or
     * reduce-scatter of n elements per rank sends n to every peer, an
     * all-reduce of n sends peer k its slice [n*k/G, n*(k+1)/G) and then this
     * rank's slice to every peer (G the group's ranks); NCCL's rings and
     * trees send the same total per rank, routed differently. A rank's node
     * is its rank in the job divided by the ranks per node: ZC_RANKS_PER_NODE,
     * else the launcher's (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE,
     * SLURM_NTASKS_PER_NODE, ...), else the communicator's (MPI: the ranks
     * that share memory; threads: one node). */
    int64_t comm_bytes_last_step_by_link[ZC_LINK__COUNT];
    int ranks_per_node, nodes;             /* that node map: N, and the nodes of the world */
    /* Hybrid sharding (docs/config.md): the ranks a chunk is sharded over
     * (zero_optimization.mics_shard_size, else world), this rank's shard
     * index among them, the replicas of each shard (world / that), and
     * zero_optimization.zero_hpz_partition_size in effect (0: none). */
    int shard_world, shard_rank, replicas, hpz_partition_size;
} zc_stats;

/* Fills *out (out->size must be set). Thread-safe with respect to other
 * engines; not with concurrent calls on this engine. */
ZC_API zc_status zc_engine_stats(const zc_engine *eng, zc_stats *out);

/* ---- Scalar all-reduce: the loop's own numbers across ranks ------------- */

/* What zc_all_reduce_f64 computes over the ranks, element by element. */
typedef enum zc_reduce_op {
    ZC_REDUCE_SUM = 0, /* in rank order: ((v0 + v1) + v2) + ... */
    ZC_REDUCE_MAX,     /* NaN if any rank's value is NaN */
    ZC_REDUCE_MIN      /* NaN if any rank's value is NaN */
} zc_reduce_op;

/* The most values one zc_all_reduce_f64 call takes. */
#define ZC_ALL_REDUCE_F64_MAX 64

/* Reduces `count` doubles (1..ZC_ALL_REDUCE_F64_MAX) across the engine's
 * ranks, in place: afterwards values[i] is op over every rank's values[i],
 * bitwise the same on every rank and under every launcher and backend (local
 * threads, MPI, NCCL): the ranks exchange their values and each computes the
 * result on the host in rank order, so a sum does not depend on a reduction
 * tree. For a training loop's own numbers - the mean loss over ranks (sum,
 * then divide by zc_comm_world), token counts, evaluation metrics - not for
 * tensors. Collective: every rank calls it at the same point of its call
 * sequence (among the other collectives) with the same count and op; after
 * zc_engine_build, at any point (between micro-steps too); it changes no
 * training state and is not counted in zc_stats' communication.
 * Failures are agreed like the engine's other collectives: a NULL values, a
 * count out of range or an unknown op on any rank, or ranks passing
 * different counts or ops, fail the call on every rank with
 * ZC_ERR_INVALID_ARG and the same message (naming the rank), values
 * unchanged and the engine still usable; a failed exchange (ZC_ERR_COMM: a
 * rank that never calls it times out) breaks the engine on every rank, as
 * any failed collective does. */
ZC_API zc_status zc_all_reduce_f64(zc_engine *eng, double *values, int count, zc_reduce_op op);

/* ---- Planning memory before anything is allocated ------------------------ */

/* One tensor of a model to plan, in registration order: what zc_param_add
 * and zc_chunk_boundary would be called with. */
typedef struct zc_plan_tensor {
    const int64_t *shape;  /* ndim dimensions, each > 0 */
    int ndim;              /* 1..8 */
    bool boundary;         /* zc_chunk_boundary is called just before it */
} zc_plan_tensor;

typedef struct zc_memory_plan {
    size_t size;                           /* sizeof(zc_memory_plan), set by caller */
    int64_t bytes_by_kind[ZC_KIND__COUNT]; /* one rank's bytes by where they live */
    int64_t bytes_by_kind_cat[ZC_KIND__COUNT][ZC_MEM__COUNT]; /* ... and by category (an
                                              idle pool counts as ZC_MEM_RESERVED) */
    int64_t num_params;                    /* elements of the tensors */
    int64_t padded_params;                 /* after chunk padding */
    int64_t num_chunks;
    int64_t grad_buffer_bytes;             /* of which stages 2-3's gradient pool:
                                              two sets of units' gradient buffers
                                              (see zc_block_grad_buffers), 0 below
                                              stage 2 */
    zc_dtype dtype;                        /* the working precision planned */
    bool host_device;                      /* planned for the host path: the
                                              engine's "device" buffers are
                                              pageable host memory, reported as
                                              ZC_KIND_DEVICE as zc_stats does */
    /* The placement planned, as zc_stats reports it after build: chunks and
     * elements of optimizer state and (stage 3) parameter shards by
     * zc_place_kind - chosen from zero_optimization.max_memory when it is
     * given (placed true), else the offload keys' rules. */
    int64_t opt_chunks_by_place[ZC_PLACE_ON__COUNT], opt_elems_by_place[ZC_PLACE_ON__COUNT];
    int64_t param_chunks_by_place[ZC_PLACE_ON__COUNT],
        param_elems_by_place[ZC_PLACE_ON__COUNT];
    bool placed;
    int stage;                             /* the stage planned (with "stage": "auto",
                                              the lowest that fits the budgets) */
    int64_t budget[ZC_BUDGET_INDEX__COUNT]; /* held to, by zc_budget_index (-1: none) */
    int64_t budget_used[ZC_BUDGET_INDEX__COUNT]; /* the plan's bytes against each
                                              (device: the device kind, or the
                                              host path's stand-in; cpu: pinned
                                              and pageable host; nvme) */
} zc_memory_plan;

/* The memory zc_engine_build would allocate on one rank of `world` ranks
 * that register tensors[0..n-1] (with their zc_chunk_boundary calls) under
 * cfg and opts (NULL: ZC_ENGINE_OPTIONS_INIT), computed without allocating
 * it by the planner that the build's own pre-flight and `zeroc estimate` use
 * (docs/estimate.md): parameters, gradients, optimizer state and the homes
 * offload_optimizer and offload_param give them (pinned buffers, NVMe swap
 * files), and the buffer pools. opts->device ZC_DEVICE_HOST plans the host
 * path, ZC_DEVICE_CUDA a GPU (its staging buffers included; no device is
 * opened), ZC_DEVICE_AUTO what zc_engine_create would pick. Counted too:
 * the engine's bookkeeping in device memory (ZC_MEM_OTHER: status records,
 * norm partials), and hybrid sharding's memory (zero_optimization
 * mics_shard_size: chunks sharded over its groups, stage 1's fp32 shard for
 * the replicas; zero_hpz_partition_size: the secondary partition; the
 * hierarchical gather's scratch, for the ranks per node of
 * ZC_RANKS_PER_NODE or the launcher). Not counted: bookkeeping in host memory (ZC_MEM_OTHER of
 * ZC_KIND_HOST: chunk and segment tables, about 100 bytes per tensor and
 * chunk), adopted memory (zc_block_adopt), the
 * application's own buffers and activations. ZC_CHUNK_CAP is honoured as the
 * engine does. Fills *out; on failure leaves it unchanged and returns
 * ZC_ERR_INVALID_ARG (NULL or short out, world < 1, a bad tensor),
 * ZC_ERR_CONFIG (a configuration zc_engine_create or zc_engine_build would
 * refuse, e.g. offload at stage 0) or ZC_ERR_NO_MEMORY (sizes overflowing 64
 * bits, no memory for the plan's own tables, or - with
 * zero_optimization.max_memory - no placement within the budgets, the message
 * naming the short budget as the build would). With max_memory the plan is
 * the placement the build would choose under those budgets ("auto" read from
 * this machine, the world taken as the node's ranks; a GPU's "auto" device
 * budget cannot be read without opening it: ZC_ERR_CONFIG). Thread-safe; not
 * collective. */
ZC_API zc_status zc_plan_memory(const zc_config *cfg, int world, const zc_plan_tensor *tensors,
                                int n, const zc_engine_options *opts, zc_memory_plan *out);

/* Phases of a step timed with `wall_clock_breakdown: true`, in host wall
 * time. A step's window opens at its first zc_param_acquire, zc_grad_buffer
 * or zc_grad_ready (or the block calls, which make them) and closes when
 * zc_step returns having taken the step; every moment in between belongs to
 * exactly one phase, so the phases add up to the window:
 *   forward   from the window's opening (and, with accumulation, from
 *             zc_micro_step_end) to the micro-step's first gradient buffer
 *             request: the caller's forward pass;
 *   backward  from that request to the end of the micro-step: the caller's
 *             backward pass;
 *   reduce    inside zc_grad_ready, reducing a chunk whose gradients are all
 *             ready (all-reduce or reduce-scatter, accumulation);
 *   gather    stage 3's gathers and prefetches inside zc_param_acquire, and
 *             the publish all-gather of stages 1-3 at the end of zc_step
 *             (0 in stage 0), less the waits for parameter shard reads;
 *   optimizer the rest of zc_step: norm, overflow check, clipping, Adam
 *             (fetching and putting back offloaded state), the loss scaler;
 *   io_wait   waiting for NVMe: inside zc_step, for the reads and writes of
 *             the optimizer state (offload_optimizer nvme); at stage 3 with
 *             offload_param nvme, for the parameter shards' reads inside
 *             zc_param_acquire and the step's publish (the exposed part of
 *             the prefetch). 0 without NVMe offload. The swapped gradient
 *             of an accumulation window is read and written inside
 *             zc_grad_ready, and counts as reduce.
 * An evaluation pass marked with zc_pass_begin is left out; an unmarked
 * one between two steps that acquires parameters opens the next window
 * early and counts as its forward. On CUDA the asynchronous work
 * is charged to whichever phase waits for it. */
typedef enum zc_timer_phase {
    ZC_TIMER_FORWARD = 0,
    ZC_TIMER_BACKWARD,
    ZC_TIMER_REDUCE,
    ZC_TIMER_GATHER,
    ZC_TIMER_OPTIMIZER,
    ZC_TIMER_IO_WAIT,
    ZC_TIMER__COUNT
} zc_timer_phase;

typedef struct zc_timers {
    size_t size;                  /* sizeof(zc_timers), set by caller */
    bool enabled;                 /* wall_clock_breakdown is on; else all zero */
    int64_t step;                 /* the step `last` describes (0: none timed yet) */
    double last[ZC_TIMER__COUNT]; /* seconds per phase in that step */
    double last_total;            /* its window: the sum of last[] */
    double sum[ZC_TIMER__COUNT];  /* seconds per phase over every timed step */
    double sum_total;
    int64_t timed_steps;          /* windows closed since build */
} zc_timers;

/* Fills *out (out->size must be set) with the step timings of
 * wall_clock_breakdown; ZC_ERR_INVALID_ARG for a NULL or short out. With the
 * key off it succeeds with enabled false and zeros. Not thread-safe with
 * calls on the same engine. */
ZC_API zc_status zc_engine_timers(const zc_engine *eng, zc_timers *out);
/* Static text: "forward", "backward", "reduce", "gather", "optimizer",
 * "io_wait"; "unknown" outside the enum. */
ZC_API const char *zc_timer_name(zc_timer_phase phase);

/* Offload and prefetch figures of the last completed optimizer step (all
 * zero before the first one). NVMe bytes count whole I/O requests (each
 * shard or state extent rounded up to the 4 KiB swap alignment). */
typedef struct zc_offload_stats {
    size_t size;                    /* sizeof(zc_offload_stats), set by caller */
    int64_t param_nvme_read_bytes;  /* parameter shards read (offload_param nvme) */
    int64_t param_nvme_write_bytes; /* updated parameter shards written home */
    int64_t optim_nvme_read_bytes;  /* optimizer state (and swapped fp32 gradient
                                       shards) read (offload_optimizer nvme) */
    int64_t optim_nvme_write_bytes; /* ... and written */
    int64_t param_reads;            /* parameter shard reads from NVMe */
    int64_t prefetch_hits;          /* stage 3 chunk activations that found the
                                       chunk gathered, kept or its read started */
    int64_t prefetch_misses;        /* activations that gathered on demand */
    int64_t io_wait_acquires;       /* zc_param_acquire calls that waited for a
                                       parameter read */
    double io_wait_s;               /* the time they waited: the exposed I/O */
    int64_t max_live_elems;         /* peak gathered + in-flight elements
                                       (= zc_stats.max_live_elems_last_step) */
} zc_offload_stats;

/* Fills *out (out->size must be set; ZC_ERR_INVALID_ARG otherwise) with the
 * figures of the last completed zc_step. Not collective; the values are this
 * rank's. Thread-safe with respect to other engines only. */
ZC_API zc_status zc_engine_offload_stats(const zc_engine *eng, zc_offload_stats *out);

/* ---- Where the time goes: the timeline, the comms logger, throughput ---- */

/* The timeline (docs/trace.md). With the config section "trace" ({"path":
 * "trace.json", "steps": "10-12"}, a zeroc extension) or the environment
 * variables ZC_TRACE (the path) and ZC_TRACE_STEPS (the window), each rank
 * records the spans of the traced optimizer steps - the step's phases, each
 * stage-3 acquire, every collective, NVMe request and host<->device copy of
 * the offload, each Adam piece, the agreements - into a buffer preallocated
 * by zc_engine_build (trace.max_events records; a smaller one than the
 * window needs is refused there, naming the key and the size needed) and
 * writes them at the end of the window's last step, in the Chrome
 * trace-event JSON format (Perfetto, chrome://tracing): the path itself with
 * one rank, else one file per rank ("{rank}" in the path is replaced by the
 * rank; without it ".rank<R>" goes before the extension). The files are
 * created by zc_engine_build (never over an existing file) and removed by
 * zc_engine_destroy when the run ended before the window began. Recording
 * never allocates; with the section absent every hook is a branch. */

/* The comms logger's figures (DeepSpeed's comms_logger: enabled, verbose,
 * prof_all, prof_ops, debug), by zc_coll_kind, over every collective logged
 * since build. bytes is nccl-tests' size S of each operation: the buffer of
 * an all-reduce or broadcast, the full buffer (over the communicator's
 * ranks) of a reduce-scatter or all-gather; payload_bytes the part that
 * zc_stats.comm_bytes_last_step counts (the model's; not the norm partials
 * or the agreements' status records). A collective issued inside a
 * communicator group is timed with the group's launch, its share by bytes.
 * Bandwidths as nccl-tests defines them: algbw = bytes / latency_s, busbw =
 * algbw x 2(n-1)/n (all-reduce), (n-1)/n (reduce-scatter, all-gather), 1
 * (broadcast); bytes per second; n the ranks of the communicator each
 * collective ran on - the world, or under hybrid sharding its group's (then
 * busbw weighs each collective's factor by its bytes, and the summary
 * table has a row per group size). */
typedef struct zc_comms_stats {
    size_t size;                     /* sizeof(zc_comms_stats), set by caller */
    bool enabled;                    /* comms_logger.enabled; else all zero */
    int world;
    int64_t ops[ZC_COLL__COUNT];
    int64_t bytes[ZC_COLL__COUNT];
    int64_t payload_bytes[ZC_COLL__COUNT];
    double latency_s[ZC_COLL__COUNT];
    double algbw[ZC_COLL__COUNT], busbw[ZC_COLL__COUNT];
} zc_comms_stats;

/* Fills *out (out->size must be set; ZC_ERR_INVALID_ARG otherwise). This
 * rank's figures; not collective. Not thread-safe with calls on the same
 * engine. */
ZC_API zc_status zc_engine_comms_stats(const zc_engine *eng, zc_comms_stats *out);
/* DeepSpeed's summary table (deepspeed.comm.log_summary()): per collective
 * kind ("all_gather", and "all_gather_coalesced" for a group's) and, with
 * comms_logger.debug, per calling function, one row per message size (and
 * per group size under hybrid sharding: "1.00 MiB (2 ranks)"): count,
 * total and mean latency (ms), algbw and busbw (GB/s), as text with a
 * newline after each line, into buf (cap bytes, NUL-terminated, cut at a
 * whole line when short; buf may be NULL with cap 0). *len (may be NULL)
 * receives the bytes the whole table needs, its NUL included. The engine
 * also logs the table at INFO ("comm") when it is destroyed, and with
 * comms_logger.verbose a line per operation. Not collective. */
ZC_API zc_status zc_engine_comms_summary(const zc_engine *eng, char *buf, size_t cap,
                                         size_t *len);

/* What a step of the program computes, for the throughput of the progress
 * lines (steps_per_print): tokens (or samples) and model FLOPs per optimizer
 * step over all ranks, and the peak the FLOP/s are a fraction of (MFU). */
typedef struct zc_workload {
    size_t size;                /* sizeof(zc_workload), set by caller */
    double tokens_per_step;     /* all ranks' tokens per optimizer step; 0: not stated */
    double flops_per_step;      /* all ranks' FLOPs per optimizer step (forward and
                                   backward, e.g. 6 x params x tokens); 0: not stated */
    double peak_flops;          /* one rank's peak FLOP/s; 0: the device's when known
                                   (the host path: zc_host_peak_flops), else no MFU */
} zc_workload;

/* States the program's work per step: from the next progress line on, the
 * line adds tokens/s, and with flops_per_step the achieved TFLOP/s per rank
 * and MFU = achieved / peak. Values must be finite and >= 0
 * (ZC_ERR_INVALID_ARG naming the field otherwise, nothing changed). Not
 * collective. */
ZC_API zc_status zc_engine_set_workload(zc_engine *eng, const zc_workload *w);

/* An estimate of this machine's peak FLOP/s on the host path, for MFU: the
 * cores this process may run on x their highest clock
 * (/sys/devices/system/cpu/.../cpuinfo_max_freq, else /proc/cpuinfo) x the
 * fp32 FLOPs one core issues per cycle with the widest vector unit the CPU
 * has (two fused multiply-add pipes: 64 with AVX-512, 32 with AVX2 and
 * FMA, 8 without). *flops > 0 and `how` (cap bytes, may be NULL) says how
 * it was computed; ZC_ERR_UNSUPPORTED when the clock cannot be read. */
ZC_API zc_status zc_host_peak_flops(double *flops, char *how, size_t cap);

/* Destroys the engine and frees everything it allocated. NULL is a no-op. Not
 * collective. */
ZC_API void zc_engine_destroy(zc_engine *eng);

#ifdef __cplusplus
}
#endif

#endif /* ZEROC_ZEROC_H */
