/*
** power.c: NVML through dlopen (see power.h). The few NVML declarations used are written here, so
** that nothing needs nvml.h at build time (the toolkit does not ship it everywhere); their C ABI has
** not changed since NVML 10.
*/
#include "runtime/cli/power.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/status.h"

typedef int (*nv_init_fn)(void);
typedef int (*nv_handle_pci_fn)(const char *, void **);
typedef int (*nv_handle_idx_fn)(unsigned, void **);
typedef int (*nv_energy_fn)(void *, unsigned long long *);
typedef int (*nv_limit_fn)(void *, unsigned *);
typedef int (*nv_clock_fn)(void *, int, unsigned *);
typedef int (*nv_reasons_fn)(void *, unsigned long long *);
typedef const char *(*nv_str_fn)(int);
enum { F_INIT, F_SHUTDOWN, F_BYPCI, F_BYIDX, F_ENERGY, F_LIMIT, F_CLOCK, F_REASONS };
#define NV_CLOCK_SM 1 /* nvmlClockType_t NVML_CLOCK_SM */

static const char *nv_err(dfl_power *p, int r) {
  nv_str_fn s = p->lib ? (nv_str_fn)dlsym(p->lib, "nvmlErrorString") : NULL;
  return s ? s(r) : "NVML error";
}

int dfl_power_open(dfl_power *p, const char *pci) {
  memset(p, 0, sizeof *p);
  const char *name = getenv("DFL_NVML_LIB");
  if (!name || !*name) name = "libnvidia-ml.so.1";
  p->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!p->lib) {
    snprintf(p->err, sizeof p->err, "cannot load %s (the NVIDIA driver's NVML): %s", name, dlerror());
    return DFL_ERR;
  }
  /* the clock-limit reasons were renamed in NVML 12.2 (ThrottleReasons -> EventReasons); either will do */
  static const char *names[] = {"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetHandleByPciBusId_v2",
                                "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetTotalEnergyConsumption",
                                "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetClockInfo",
                                "nvmlDeviceGetCurrentClocksEventReasons"};
  for (int i = 0; i < 8; i++) {
    p->fn[i] = dlsym(p->lib, names[i]);
    if (!p->fn[i] && i == F_REASONS) p->fn[i] = dlsym(p->lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!p->fn[i]) {
      snprintf(p->err, sizeof p->err, "%s has no %s: not the NVIDIA driver's NVML, or an NVML older than 10", name,
               names[i]);
      dlclose(p->lib);
      p->lib = NULL;
      return DFL_ERR;
    }
  }
  int r = ((nv_init_fn)p->fn[F_INIT])();
  if (r) {
    snprintf(p->err, sizeof p->err, "nvmlInit_v2: %s", nv_err(p, r));
    dlclose(p->lib);
    p->lib = NULL;
    return DFL_ERR;
  }
  r = pci ? ((nv_handle_pci_fn)p->fn[F_BYPCI])(pci, &p->dev) : ((nv_handle_idx_fn)p->fn[F_BYIDX])(0, &p->dev);
  if (r) {
    snprintf(p->err, sizeof p->err, "NVML has no GPU %s: %s", pci ? pci : "0", nv_err(p, r));
    dfl_power_close(p);
    return DFL_ERR;
  }
  return DFL_OK;
}

int dfl_power_read(dfl_power *p, dfl_power_sample *s) {
  memset(s, 0, sizeof *s);
  if (!p->lib || !p->dev) {
    snprintf(p->err, sizeof p->err, "NVML is not open");
    return DFL_ERR;
  }
  int r;
  if ((r = ((nv_energy_fn)p->fn[F_ENERGY])(p->dev, &s->energy_mj)) ||
      (r = ((nv_limit_fn)p->fn[F_LIMIT])(p->dev, &s->limit_mw)) ||
      (r = ((nv_clock_fn)p->fn[F_CLOCK])(p->dev, NV_CLOCK_SM, &s->sm_mhz)) ||
      (r = ((nv_reasons_fn)p->fn[F_REASONS])(p->dev, &s->reasons))) {
    snprintf(p->err, sizeof p->err, "NVML: %s (the energy counter needs a Volta or newer GPU)", nv_err(p, r));
    return DFL_ERR;
  }
  return DFL_OK;
}

void dfl_power_reasons(unsigned long long reasons, char *buf, size_t len) {
  /* nvmlClocksEventReason* bits that slow the clock (idle, application clocks and sync boost do not) */
  static const struct { unsigned long long bit; const char *what; } r[] = {
      {0x4, "software power cap"}, {0x8, "hardware slowdown"}, {0x20, "software thermal slowdown"},
      {0x40, "hardware thermal slowdown"}, {0x80, "hardware power brake"}};
  size_t o = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    if ((reasons & r[i].bit) && o < len) {
      int n = snprintf(buf + o, o < len ? len - o : 0, "%s%s", o ? ", " : "", r[i].what);
      if (n > 0) o += (size_t)n;
    }
  if (!o) snprintf(buf, len, "none");
}

void dfl_power_close(dfl_power *p) {
  if (p->lib) {
    if (p->fn[F_SHUTDOWN]) ((nv_init_fn)p->fn[F_SHUTDOWN])();
    dlclose(p->lib);
  }
  p->lib = p->dev = NULL;
}
