/*
** gather.cuh: GATHER (embedding lookup) and SCATTER_ADD (its backward, atomics into an f32
** accumulator the host zeroed). Ids outside [0, V) read/write nothing (rows of zeros).
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
