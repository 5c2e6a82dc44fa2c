/*
** hash.h: FNV-1a over bytes, 64 bits: the one hash behind dflc's names for what it compiled (the
** cubin cache's file names, compiler/emit.c; build.json's graph and plan fingerprints,
** runtime/compile.c). Not for security: a name, stable across machines and runs.
*/
#ifndef DFL_HASH_H
#define DFL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DFL_HASH_INIT 1469598103934665603ull

static inline uint64_t dfl_hash(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ull; }
  return h;
}

#endif
