/*
** launch.c: launcher environment parsing and the rank-0 broadcast of the NCCL id (see launch.h).
*/
#include "runtime/pipeline/launch.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "compiler/status.h"

#define BCAST_MAGIC 0x64666c62u   /* "dflb": a stray connection to the port is refused */

static const char *env_get(void *ctx, const char *name) {
  (void)ctx;
  return getenv(name);
}

/* -1: absent; -2: not a non-negative integer */
static int env_int(dfl_getenv_fn get, void *ctx, const char *name) {
  const char *v = get(ctx, name);
  if (!v || !v[0]) return -1;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < 0 || x > 1 << 30) return -2;
  return (int)x;
}

/* First host of a Slurm node list: "gpu[01-04,07],cpu3" -> "gpu01". */
static void slurm_first_host(const char *list, char *out, size_t n) {
  size_t k = 0;
  const char *p = list;
  for (; *p && *p != ',' && *p != '[' && k + 1 < n; p++) out[k++] = *p;
  if (*p == '[') {
    for (p++; *p && *p != '-' && *p != ',' && *p != ']' && k + 1 < n; p++) out[k++] = *p;
  }
  out[k] = 0;
}

int dfl_launch_detect(dfl_launch *l, dfl_getenv_fn get, void *ctx, char *err, size_t errlen) {
  static const struct {
    const char *src, *rank, *size, *local, *local_size;
  } kinds[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
  };
  if (!get) get = env_get;
  memset(l, 0, sizeof *l);
  l->world = 1;
  l->local_world = 1;
  l->source = "single";
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    int r = env_int(get, ctx, kinds[k].rank), w = env_int(get, ctx, kinds[k].size);
    if (r == -1 && w == -1) continue;
    if (r < 0 || w < 1) {
      snprintf(err, errlen, "%s=%s and %s=%s: both must be set to integers (rank >= 0, size >= 1)", kinds[k].rank,
               get(ctx, kinds[k].rank) ? get(ctx, kinds[k].rank) : "(unset)", kinds[k].size,
               get(ctx, kinds[k].size) ? get(ctx, kinds[k].size) : "(unset)");
      return DFL_EFORMAT;
    }
    if (r >= w) {
      snprintf(err, errlen, "%s=%d is not below %s=%d", kinds[k].rank, r, kinds[k].size, w);
      return DFL_EFORMAT;
    }
    int lr = env_int(get, ctx, kinds[k].local), lw = env_int(get, ctx, kinds[k].local_size);
    if (lr == -2 || lw == -2 || lw == 0) {
      snprintf(err, errlen, "%s / %s must be integers (local size >= 1)", kinds[k].local, kinds[k].local_size);
      return DFL_EFORMAT;
    }
    l->rank = r;
    l->world = w;
    l->local_rank = lr >= 0 ? lr : 0;
    l->local_world = lw > 0 ? lw : 1;
    if (l->local_rank >= l->local_world && lw > 0) {
      snprintf(err, errlen, "%s=%d is not below %s=%d", kinds[k].local, l->local_rank, kinds[k].local_size, lw);
      return DFL_EFORMAT;
    }
    if (lw < 0 && l->local_rank >= l->local_world) l->local_world = l->local_rank + 1;
    l->source = kinds[k].src;
    break;
  }
  const char *ma = get(ctx, "MASTER_ADDR");
  int mp = env_int(get, ctx, "MASTER_PORT");
  if (mp == -2 || mp > 65535) {
    snprintf(err, errlen, "MASTER_PORT=%s is not a TCP port (1..65535)", get(ctx, "MASTER_PORT"));
    return DFL_EFORMAT;
  }
  if (ma && ma[0]) snprintf(l->master_addr, sizeof l->master_addr, "%s", ma);
  l->master_port = mp > 0 ? mp : 0;
  if (!strcmp(l->source, "slurm") && !l->master_addr[0]) {
    const char *nl = get(ctx, "SLURM_STEP_NODELIST");
    if (!nl || !nl[0]) nl = get(ctx, "SLURM_NODELIST");
    if (nl && nl[0]) slurm_first_host(nl, l->master_addr, sizeof l->master_addr);
    if (!l->master_port) l->master_port = 29500;
  }
  return DFL_OK;
}

/* --- TCP bootstrap --- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int io_all(int fd, void *buf, size_t n, int writing, double deadline) {
  char *p = buf;
  while (n > 0) {
    struct pollfd pf = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
    int left = (int)(deadline - now_ms());
    if (left <= 0 || poll(&pf, 1, left) <= 0) return -1;
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k <= 0) {
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

int dfl_launch_bcast_tcp(const dfl_launch *l, void *buf, size_t n, int timeout_ms, char *err, size_t errlen) {
  if (l->world <= 1) return DFL_OK;
  if (!l->master_addr[0] || !l->master_port) {
    snprintf(err, errlen, "rank %d of %d: MASTER_ADDR and MASTER_PORT must name rank 0's host and a free port "
             "(torchrun sets them; with srun/mpirun export them)", l->rank, l->world);
    return DFL_EFORMAT;
  }
  double deadline = now_ms() + timeout_ms;
  uint32_t hdr[2] = {htonl(BCAST_MAGIC), htonl((uint32_t)n)};
  char port[16];
  snprintf(port, sizeof port, "%d", l->master_port);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (l->rank == 0) {
    /* Listen on every interface: MASTER_ADDR is how the others reach this host, which may be a
    ** name that does not resolve to a local address here (NAT, aliases). */
    hints.ai_flags = AI_PASSIVE;
    hints.ai_family = AF_INET;
    int rc = getaddrinfo(NULL, port, &hints, &ai);
    if (rc) {
      snprintf(err, errlen, "rank 0: port %s: %s", port, gai_strerror(rc));
      return DFL_EIO;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
      snprintf(err, errlen, "rank 0: cannot listen on port %d: %s (is MASTER_PORT free?)", l->master_port,
               strerror(errno));
      if (fd >= 0) close(fd);
      freeaddrinfo(ai);
      return DFL_EIO;
    }
    freeaddrinfo(ai);
    int served = 0, result = DFL_OK;
    while (served < l->world - 1) {
      struct pollfd pf = {fd, POLLIN, 0};
      int left = (int)(deadline - now_ms());
      if (left <= 0 || poll(&pf, 1, left) <= 0) {
        snprintf(err, errlen, "rank 0: only %d of %d ranks connected to port %d within %d ms", served, l->world - 1,
                 l->master_port, timeout_ms);
        result = DFL_EIO;
        break;
      }
      int c = accept(fd, NULL, NULL);
      if (c < 0) continue;
      uint32_t got[2];
      /* The peer says hello first (magic + length), so strays are told apart from ranks. */
      if (io_all(c, got, sizeof got, 0, deadline) == 0 && got[0] == hdr[0] && got[1] == hdr[1] &&
          io_all(c, buf, n, 1, deadline) == 0)
        served++;
      close(c);
    }
    close(fd);
    return result;
  }
  int rc = getaddrinfo(l->master_addr, port, &hints, &ai);
  if (rc) {
    snprintf(err, errlen, "rank %d: MASTER_ADDR %s: %s", l->rank, l->master_addr, gai_strerror(rc));
    return DFL_EIO;
  }
  int result = DFL_EIO;
  while (now_ms() < deadline) {
    int fd = socket(ai->ai_family, ai->ai_socktype, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 && io_all(fd, hdr, sizeof hdr, 1, deadline) == 0 &&
        io_all(fd, buf, n, 0, deadline) == 0) {
      close(fd);
      result = DFL_OK;
      break;
    }
    if (fd >= 0) close(fd);
    usleep(50 * 1000);   /* rank 0 not listening yet: retry */
  }
  freeaddrinfo(ai);
  if (result)
    snprintf(err, errlen, "rank %d: could not fetch the bootstrap id from %s:%d within %d ms (is rank 0 up?)",
             l->rank, l->master_addr, l->master_port, timeout_ms);
  return result;
}

/* --- MPI through dlopen (OpenMPI's ABI: MPI_COMM_WORLD and MPI_BYTE are addresses of globals) --- */
static void *mpi_lib;        /* stays loaded once opened */
static int mpi_we_init;      /* this process called MPI_Init here: dfl_launch_finalize owes MPI_Finalize */

static int bcast_mpi(const dfl_launch *l, void *buf, size_t n, char *err, size_t errlen) {
  void *h = mpi_lib ? mpi_lib : dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    snprintf(err, errlen, "OpenMPI launch but libmpi.so.40 cannot be loaded (%s); export MASTER_ADDR and "
             "MASTER_PORT to use the TCP bootstrap instead", dlerror());
    return DFL_EIO;
  }
  int (*initialized)(int *) = (int (*)(int *))dlsym(h, "MPI_Initialized");
  int (*init)(int *, char ***) = (int (*)(int *, char ***))dlsym(h, "MPI_Init");
  int (*bcast)(void *, int, void *, int, void *) = (int (*)(void *, int, void *, int, void *))dlsym(h, "MPI_Bcast");
  void *world = dlsym(h, "ompi_mpi_comm_world"), *byte = dlsym(h, "ompi_mpi_byte");
  int flag = 0;
  if (!initialized || !init || !bcast || !world || !byte) {
    snprintf(err, errlen, "libmpi.so.40 is not OpenMPI (missing symbols)");
    return DFL_EIO;
  }
  mpi_lib = h;
  if (initialized(&flag) == 0 && !flag) {
    if (init(NULL, NULL) != 0) {
      snprintf(err, errlen, "rank %d: MPI_Init failed", l->rank);
      return DFL_EIO;
    }
    mpi_we_init = 1;
  }
  if (bcast(buf, (int)n, byte, 0, world) != 0) {
    snprintf(err, errlen, "rank %d: MPI_Bcast failed", l->rank);
    return DFL_EIO;
  }
  /* The library stays loaded: MPI_Finalize belongs to whoever called MPI_Init (dfl_launch_finalize). */
  return DFL_OK;
}

void dfl_launch_finalize(void) {
  if (!mpi_we_init) return;
  int (*fin)(void) = (int (*)(void))dlsym(mpi_lib, "MPI_Finalize");
  if (fin) fin();
  mpi_we_init = 0;
}

int dfl_launch_bcast(const dfl_launch *l, void *buf, size_t n, int timeout_ms, char *err, size_t errlen) {
  if (l->world <= 1) return DFL_OK;
  if (!strcmp(l->source, "openmpi") && !l->master_addr[0]) return bcast_mpi(l, buf, n, err, errlen);
  return dfl_launch_bcast_tcp(l, buf, n, timeout_ms, err, errlen);
}
