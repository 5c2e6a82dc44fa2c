/*
** rope.cuh: NeoX rotate-half RoPE on every head. One thread per (row, head, i < hd/2) pair.
** The angle is formed in double: positions reach 1e5 and an f32 angle would be off by ~1e-2 rad.
*/
extern "C" __global__ void dfl_rope(void *out, int dto, const void *x, int dtx, const int *pos, ll rows, int nh,
                                    int hd, double theta, int inverse) {
  int half = hd / 2;
  ll n = rows * nh * half;
  GRID_STRIDE(t, n) {
    int i = (int)(t % half);
    ll rh = t / half, r = rh / nh;
    ll base = rh * hd;
    double ang = (double)pos[r] * pow(theta, -2.0 * i / hd);
    double sn, cs;
    sincos(ang, &sn, &cs);
    float c = (float)cs, s = inverse ? -(float)sn : (float)sn;
    float x1 = ldf(x, dtx, base + i), x2 = ldf(x, dtx, base + i + half);
    stf(out, dto, base + i, x1 * c - x2 * s);
    stf(out, dto, base + i + half, x2 * c + x1 * s);
  }
}
/* Vector path (hd % 16 == 0, 16-byte aligned, bf16/f16/f32): one thread per (row, 8 consecutive
** i, up to 4 heads). The 8 angles are formed (in double, as above: same values) once and serve
** every head of the thread, and the halves move as 16-byte vectors. */
extern "C" __global__ void dfl_rope_v(void *out, int dto, const void *x, int dtx, const int *pos, ll rows, int nh,
                                      int hd, double theta, int inverse) {
  int half = hd / 2, ni = half / 8, nhc = (nh + 3) / 4;
  ll n = rows * ni * nhc;
  GRID_STRIDE(t, n) {
    int hc = (int)(t % nhc), i0 = (int)((t / nhc) % ni) * 8;
    ll r = t / ((ll)nhc * ni);
    float c[8], s[8];
    double p = (double)pos[r];
#pragma unroll
    for (int k = 0; k < 8; k++) {
      double ang = p * pow(theta, -2.0 * (i0 + k) / hd), sn, cs;
      sincos(ang, &sn, &cs);
      c[k] = (float)cs; s[k] = inverse ? -(float)sn : (float)sn;
    }
    int h1 = hc * 4 + 4 < nh ? hc * 4 + 4 : nh;
    for (int h = hc * 4; h < h1; h++) {
      ll base = (r * nh + h) * hd;
      float x1[8], x2[8], o1[8], o2[8];
      ld8(x, dtx, base + i0, x1);
      ld8(x, dtx, base + i0 + half, x2);
#pragma unroll
      for (int k = 0; k < 8; k++) { o1[k] = x1[k] * c[k] - x2[k] * s[k]; o2[k] = x2[k] * c[k] + x1[k] * s[k]; }
      st8(out, dto, base + i0, o1);
      st8(out, dto, base + i0 + half, o2);
    }
  }
}
