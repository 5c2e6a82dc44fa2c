/*
** gather.cuh: GATHER (embedding lookup) and SCATTER_ADD (its backward, atomics into an f32
** accumulator the host zeroed). Ids outside [0, V) read/write nothing (rows of zeros). Then the
** block-row copies of a drafter's first layer (BLOCK_ROWS, BLOCK_EXPAND and its backward) and of its
** last (BLOCK_DROP, BLOCK_UNDROP).
*/
extern "C" __global__ void dfl_gather(void *out, int dto, const void *table, int dtt, const int *ids, ll R, int H,
                                      int V) {
  GRID_STRIDE(t, R * H) {
    ll r = t / H; int h = (int)(t % H);
    int id = ids[r];
    stf(out, dto, t, (id >= 0 && id < V) ? ldf(table, dtt, (ll)id * H + h) : 0.f);
  }
}
extern "C" __global__ void dfl_scatter_add(float *acc, const void *dout, int dtd, const int *ids, ll R, int H, int V) {
  GRID_STRIDE(t, R * H) {
    ll r = t / H; int h = (int)(t % H);
    int id = ids[r];
    if (id >= 0 && id < V) atomicAdd(&acc[(ll)id * H + h], ldf(dout, dtd, t));
  }
}

/* BLOCK_ROWS (mode 0), BLOCK_EXPAND (1), BLOCK_DROP (2) and BLOCK_UNDROP (3), graph.h: row copies.
** Output row r is input row r < R ? r*B : 1 (0), r % B ? R : r / B (1), r/(B-1)*B + r%(B-1) + 1 (2),
** or r % B ? r/B*(B-1) + r%B - 1 : none, a row of zeros (3). A block per row at a time, its threads
** over the row in units of u bytes (16, 4 or 2: what the row's bytes and both pointers allow). */
extern "C" __global__ void __launch_bounds__(256) dfl_block_copy(void *out, const void *in, int nrows, ll rowb, int B,
                                                                 int R, int mode, int u) {
  const int per = (int)(rowb / u);
  for (int r = blockIdx.x; r < nrows; r += gridDim.x) {
    const int src = mode == 0 ? (r < R ? r * B : 1) : mode == 1 ? (r % B ? R : r / B)
                  : mode == 2 ? r / (B - 1) * B + r % (B - 1) + 1 : (r % B ? r / B * (B - 1) + r % B - 1 : -1);
    const char *s = (const char *)in + (ll)(src < 0 ? 0 : src) * rowb;
    char *o = (char *)out + (ll)r * rowb;
    for (int k = threadIdx.x; k < per; k += blockDim.x) {
      if (u == 16) ((uint4 *)o)[k] = src < 0 ? make_uint4(0, 0, 0, 0) : ((const uint4 *)s)[k];
      else if (u == 4) ((unsigned *)o)[k] = src < 0 ? 0u : ((const unsigned *)s)[k];
      else ((unsigned short *)o)[k] = src < 0 ? (unsigned short)0 : ((const unsigned short *)s)[k];
    }
  }
}

/* BLOCK_EXPAND_BWD, first pass: part[p][c] = the sum of d[q][c] over part p's rows q (rpp of them)
** with q % B != 0. A CTA per (column slice, part): 32 column threads of 8 columns (v: 16-byte
** loads) or 1, times 8 row lanes; a lane adds its rows in order, then the lanes are added in order,
** so the sums repeat bit for bit. */
#define DFL_BLK_LANES 8
extern "C" __global__ void __launch_bounds__(256) dfl_block_colsum(float *part, const void *d, int dt, int Q, int C,
                                                                   int B, int rpp, int v) {
  __shared__ float red[DFL_BLK_LANES][256];
  const int ct = threadIdx.x & 31, lane = threadIdx.x >> 5, p = blockIdx.y, w = v ? 8 : 1;
  const int c0 = (blockIdx.x * 32 + ct) * w, q0 = p * rpp, q1 = min(q0 + rpp, Q);
  float acc[8];
#pragma unroll
  for (int k = 0; k < 8; k++) acc[k] = 0.f;
  if (c0 < C)
    for (int q = q0 + lane; q < q1; q += 4 * DFL_BLK_LANES) {
      float x[4][8]; /* four rows' loads in flight before their adds */
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int qq = q + j * DFL_BLK_LANES;
        const int use = qq < q1 && qq % B != 0;
        if (use && v) ld8(d, dt, (ll)qq * C + c0, x[j]);
        else {
#pragma unroll
          for (int k = 0; k < 8; k++) x[j][k] = 0.f;
          if (use) x[j][0] = ldf(d, dt, (ll)qq * C + c0);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += x[j][k];
    }
  for (int k = 0; k < w; k++) red[lane][ct * w + k] = acc[k];
  __syncthreads();
  for (int t = threadIdx.x; t < 32 * w; t += blockDim.x) {
    const int c = blockIdx.x * 32 * w + t;
    if (c >= C) continue;
    float s = 0.f;
    for (int l = 0; l < DFL_BLK_LANES; l++) s += red[l][t];
    part[(ll)p * C + c] = s;
  }
}

/* BLOCK_EXPAND_BWD, second pass: rows R and R + 1 of ds, the parts added in order (m), as m rounded
** to ds's dtype and the remainder. */
extern "C" __global__ void dfl_block_colfin(void *ds, int dt, const float *part, int P, int R, int C) {
  GRID_STRIDE(c, C) {
    float m = 0.f;
    for (int p = 0; p < P; p++) m += part[(ll)p * C + c];
    const float hi = dfl_round_to(m, dt);
    stf(ds, dt, (ll)R * C + c, hi);
    stf(ds, dt, (ll)(R + 1) * C + c, m - hi);
  }
}
