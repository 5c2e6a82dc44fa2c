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
