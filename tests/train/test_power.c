/*
** test_power: runtime/power.c, the NVML loader behind `dflc bench`'s energy line.
** Everywhere: a library that is not there and one without NVML's symbols (libz) both fail with an
** error naming the library and what is missing, leave the handle closed, and a read of a closed
** handle fails instead of crashing; the reason bits are named (software power cap, thermal, ...),
** and a buffer too small for them is cut, not overrun.
** With NVIDIA's driver (the GPU machine): the enforced power limit is plausible (10..2000 W), the
** energy counter does not run backwards over 300 ms of reads, and a bus id NVML does not know is an
** error naming it.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/status.h"
#include "runtime/cli/power.h"

static int fails;
#define CHECK_FAILED fails++
#include "tests/common/check.h"

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

int main(void) {
  dfl_power p;
  dfl_power_sample s;
  /* a library that is not there */
  setenv("DFL_NVML_LIB", "libdfl-no-such-nvml.so.1", 1);
  CHECK(dfl_power_open(&p, NULL) == DFL_ERR, "opening a missing library succeeded");
  CHECK(strstr(p.err, "libdfl-no-such-nvml.so.1") != NULL, "error does not name the library: %s", p.err);
  CHECK(p.lib == NULL, "handle left open");
  CHECK(dfl_power_read(&p, &s) == DFL_ERR && strstr(p.err, "not open"), "read of a closed handle: %s", p.err);
  dfl_power_close(&p); /* closing twice is harmless */
  /* a library without NVML's symbols */
  setenv("DFL_NVML_LIB", "libz.so.1", 1);
  int r = dfl_power_open(&p, NULL);
  CHECK(r == DFL_ERR, "libz opened as NVML");
  CHECK(strstr(p.err, "libz.so.1") && (strstr(p.err, "nvmlInit_v2") || strstr(p.err, "cannot load")),
        "error does not say what is missing: %s", p.err);
  CHECK(p.lib == NULL, "handle left open");
  unsetenv("DFL_NVML_LIB");
  /* reason bits in words */
  char buf[200];
  dfl_power_reasons(0x4, buf, sizeof buf);
  CHECK(!strcmp(buf, "software power cap"), "0x4: %s", buf);
  dfl_power_reasons(0x1 | 0x2 | 0x10, buf, sizeof buf); /* idle, application clocks, sync boost: not slowing */
  CHECK(!strcmp(buf, "none"), "0x13: %s", buf);
  dfl_power_reasons(0x4 | 0x40, buf, sizeof buf);
  CHECK(!strcmp(buf, "software power cap, hardware thermal slowdown"), "0x44: %s", buf);
  char tiny[8];
  memset(tiny, 'x', sizeof tiny);
  dfl_power_reasons(0xff, tiny, 6);
  CHECK(strlen(tiny) == 5 && tiny[6] == 'x' && tiny[7] == 'x', "small buffer overrun or not terminated: %.8s", tiny);

  /* the real NVML, where the driver is */
  if (dfl_power_open(&p, NULL) != DFL_OK) {
    printf("no NVIDIA driver here (%s): the failure paths above were checked\n", p.err);
  } else {
    dfl_power_sample a, b;
    CHECK(dfl_power_read(&p, &a) == DFL_OK, "read: %s", p.err);
    CHECK(a.limit_mw >= 10000 && a.limit_mw <= 2000000, "power limit %u mW", a.limit_mw);
    unsigned long long prev = a.energy_mj;
    for (int i = 0; i < 6; i++) {
      sleep_ms(50);
      CHECK(dfl_power_read(&p, &b) == DFL_OK, "read: %s", p.err);
      CHECK(b.energy_mj >= prev, "energy ran backwards: %llu -> %llu mJ", prev, b.energy_mj);
      prev = b.energy_mj;
    }
    dfl_power_reasons(b.reasons, buf, sizeof buf);
    printf("NVML: power limit %.0f W, energy %llu mJ over 300 ms, SM clock %u MHz, held back by: %s\n",
           a.limit_mw * 1e-3, b.energy_mj - a.energy_mj, b.sm_mhz, buf);
    dfl_power_close(&p);
    CHECK(dfl_power_open(&p, "0000:ff:1f.7") == DFL_ERR && strstr(p.err, "0000:ff:1f.7"),
          "an unknown bus id: %s", p.err);
    dfl_power_close(&p);
  }
  printf("%s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
