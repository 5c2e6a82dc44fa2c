/*
** power.h: a GPU's energy counter, power limit, clock and clock-limit reasons through NVML, which
** is loaded at run time (dlopen of the driver's libnvidia-ml.so.1: nothing links it, and machines
** without a driver only lose this report). On an H200 the training step runs at the board's power
** cap (docs/performance.md, sessions 7-8): its time is then its energy over the cap, so `dflc bench`
** reports joules per step beside milliseconds.
*/
#ifndef DFL_POWER_H
#define DFL_POWER_H

#include <stddef.h>

typedef struct dfl_power {
  void *lib;        /* the dlopen handle; NULL: not open */
  void *dev;        /* nvmlDevice_t */
  void *fn[8];      /* the NVML entry points used (power.c) */
  char err[200];    /* why the last call failed */
} dfl_power;

typedef struct dfl_power_sample {
  unsigned long long energy_mj; /* since the driver was loaded */
  unsigned limit_mw;            /* the enforced power limit */
  unsigned sm_mhz;              /* SM clock now */
  unsigned long long reasons;   /* clock-limit reasons now (NVML's bits; dfl_power_reasons names them) */
} dfl_power_sample;

/* Opens NVML on the GPU with this PCI bus id (as cudaDeviceGetPCIBusId writes it), or NVML's device
** 0 when pci is NULL. The library is libnvidia-ml.so.1 unless DFL_NVML_LIB names another. Returns
** DFL_OK, or an error with p->err saying what is missing. */
int dfl_power_open(dfl_power *p, const char *pci);
int dfl_power_read(dfl_power *p, dfl_power_sample *s);
/* The reasons that slow the clock, in words ("software power cap, hardware thermal slowdown");
** "none" when no bit that slows it is set. */
void dfl_power_reasons(unsigned long long reasons, char *buf, size_t len);
void dfl_power_close(dfl_power *p);

#endif
