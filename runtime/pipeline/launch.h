/*
** launch.h: who am I in a multi-process job, and the NCCL bootstrap.
**
** Rank, world size and local rank come from whichever launcher started the process, checked in
** this order (the first complete set wins):
**   OpenMPI (mpirun):  OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (/ _LOCAL_SIZE)
**   torchrun:          RANK / WORLD_SIZE / LOCAL_RANK (/ LOCAL_WORLD_SIZE), MASTER_ADDR, MASTER_PORT
**   Slurm (srun):      SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID; MASTER_ADDR/PORT if set, else
**                      the first host of SLURM_STEP_NODELIST (or SLURM_NODELIST) and port 29500
**   none:              a single process, rank 0 of 1.
** MASTER_ADDR / MASTER_PORT are read under every launcher when present.
**
** The NCCL unique id (128 bytes) must reach every rank before ncclCommInitRank. dfl_launch_bcast
** moves it: under OpenMPI through MPI_Bcast (libmpi.so.40 opened with dlopen, nothing linked)
** unless MASTER_ADDR is set; otherwise rank 0 listens on MASTER_ADDR:MASTER_PORT (TCP) and hands
** the bytes to each of the other world-1 ranks, which connect with retries until a timeout. It is
** a bootstrap exchange of one small message, not a data transport: NCCL carries all tensors.
*/
#ifndef DFL_LAUNCH_H
#define DFL_LAUNCH_H

#include <stddef.h>

typedef struct dfl_launch {
  int rank, world;
  int local_rank, local_world;
  char master_addr[256];
  int master_port;          /* 0 = not given */
  const char *source;       /* "openmpi", "torchrun", "slurm" or "single" */
} dfl_launch;

/* Environment lookup: getenv, or a test's table. */
typedef const char *(*dfl_getenv_fn)(void *ctx, const char *name);

/* Fill *l from the environment (get = NULL: getenv). Inconsistent values (rank >= world, non
** numbers) are errors naming the variable: DFL_EFORMAT with a message in err. */
int dfl_launch_detect(dfl_launch *l, dfl_getenv_fn get, void *ctx, char *err, size_t errlen);

/* Broadcast `n` bytes from rank 0 to every rank (see above). timeout_ms bounds the wait of the
** other ranks for rank 0 (and of rank 0 for the others). */
int dfl_launch_bcast(const dfl_launch *l, void *buf, size_t n, int timeout_ms, char *err, size_t errlen);

/* MPI_Finalize when dfl_launch_bcast called MPI_Init (mpirun reports a process that exits
** without it as failed); a no-op otherwise. Call once, when the job's collectives are done. */
void dfl_launch_finalize(void);

/* The TCP exchange alone (tests call it directly with threads on 127.0.0.1). */
int dfl_launch_bcast_tcp(const dfl_launch *l, void *buf, size_t n, int timeout_ms, char *err, size_t errlen);

#endif
