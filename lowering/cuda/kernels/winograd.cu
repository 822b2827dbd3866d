/* ------------------------------------------------------------------ Winograd F(2x2, 3x3), F(4x4, 3x3) */
/* The transforms of lowering/cpu/winograd.py (module doc there): U = G w G^T (tr_wino_wt), V = B^T d B
   (tr_wino_in), y = A^T M A (tr_wino_out), and for the weight gradient dM = A dy A^T (tr_wino_in, adj) and
   dw = G^T dU G (tr_wino_dwt); m = 2 or 4, alpha = m + 2. The per-component
   GEMMs between them are tr_gemm launches (lowering/cuda/winograd.py). Layouts: U / dU (alpha^2, K, C),
   V (alpha^2, P, Cin), M / dM (alpha^2, P, Cout), P the tiles of an image chunk, tile t = (image, ty, tx)
   row-major; x / y NHWC, w KRSC. The matrices are winograd.transform(m) rounded to fp32 (the tests compare
   every stage with the NumPy path). Each thread transforms one (tile or filter, channel) pair. */

struct WinoMats {
  int m, a;
  float at[4][6];  /* A^T (m, alpha) */
  float g[6][3];   /* G (alpha, 3) */
  float bt[6][6];  /* B^T (alpha, alpha) */
};

TR_DEV void wino_mats(int m, WinoMats* t) {
  const float at2[2][4] = {{1.0f, 1.0f, 1.0f, 0.0f}, {0.0f, 1.0f, -1.0f, 1.0f}};
  const float g2[4][3] = {{-1.0f, 0.0f, 0.0f}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0.0f, 0.0f, 1.0f}};
  const float bt2[4][4] = {{-1.0f, 0.0f, 1.0f, 0.0f}, {0.0f, 1.0f, 1.0f, 0.0f}, {0.0f, -1.0f, 1.0f, 0.0f},
                           {0.0f, -1.0f, 0.0f, 1.0f}};
  const float at4[4][6] = {{1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f}, {0.0f, -1.0f, 1.0f, 0.5f, -2.0f, 0.0f},
                           {0.0f, 1.0f, 1.0f, 0.25f, 4.0f, 0.0f}, {0.0f, -1.0f, 1.0f, 0.125f, -8.0f, 1.0f}};
  const float g4[6][3] = {{1.0f, 0.0f, 0.0f},
                          {-0.333333343f, 0.333333343f, -0.333333343f},
                          {0.333333343f, 0.333333343f, 0.333333343f},
                          {-1.06666672f, -0.533333361f, -0.266666681f},
                          {0.0666666701f, -0.13333334f, 0.266666681f},
                          {0.0f, 0.0f, 1.0f}};
  const float bt4[6][6] = {{1.0f, -1.5f, -2.0f, 1.5f, 1.0f, 0.0f}, {0.0f, 1.0f, -2.5f, 0.5f, 1.0f, 0.0f},
                           {0.0f, -1.0f, 0.5f, 2.5f, 1.0f, 0.0f},  {0.0f, -2.0f, -1.0f, 2.0f, 1.0f, 0.0f},
                           {0.0f, 0.5f, -1.0f, -0.5f, 1.0f, 0.0f}, {0.0f, 1.0f, -1.5f, -2.0f, 1.5f, 1.0f}};
  t->m = m;
  t->a = m + 2;
  for (int i = 0; i < t->a; i++) {
    for (int j = 0; j < 3; j++) t->g[i][j] = m == 2 ? g2[i][j] : g4[i][j];
    for (int j = 0; j < t->a; j++) t->bt[i][j] = m == 2 ? bt2[i][j] : bt4[i][j];
  }
  for (int i = 0; i < m; i++)
    for (int j = 0; j < t->a; j++) t->at[i][j] = m == 2 ? at2[i][j] : at4[i][j];
}

/* The (tile, channel) pair of grid index i over P x nc: channel c, tile t of the chunk, at image n0 + t / (th tw),
   tile row ty and column tx. */
TR_DEV void wino_pair(i64 i, int nc, int n0, int th, int tw, int* c, i64* t, i64* n, int* ty, int* tx) {
  *c = (int)(i % nc);
  *t = i / nc;
  *tx = (int)(*t % tw);
  i64 r = *t / tw;
  *ty = (int)(r % th);
  *n = n0 + r / th;
}

/* out (r x r) = L X L^T, L (r x q) = lt ? lm^T : lm (row stride 6), X (q x q). */
TR_DEV void wino_sandwich(const float (*lm)[6], int lt, int r, int q, const float (*x)[6], float (*out)[6]) {
  float h[6][6];
  for (int i = 0; i < r; i++)
    for (int j = 0; j < q; j++) {
      float e = 0.0f;
      for (int k = 0; k < q; k++) e += (lt ? lm[k][i] : lm[i][k]) * x[k][j];
      h[i][j] = e;
    }
  for (int i = 0; i < r; i++)
    for (int j = 0; j < r; j++) {
      float e = 0.0f;
      for (int k = 0; k < q; k++) e += h[i][k] * (lt ? lm[k][j] : lm[j][k]);
      out[i][j] = e;
    }
}

/* u (alpha^2, K, C) = G w[k, :, :, c] G^T, w (K, 3, 3, C) rotated by 180 degrees when flip (input gradient). */
TR_GLOBAL void tr_wino_wt(const void* w, int dtw, float* u, int K, int C, int m, int flip) {
  WinoMats t;
  wino_mats(m, &t);
  int a = t.a;
  GRID_LOOP(i, (i64)K * C) {
    int c = (int)(i % C);
    i64 k = i / C;
    float f[3][3], h[6][3];
    for (int r = 0; r < 3; r++)
      for (int s = 0; s < 3; s++) {
        int rr = flip ? 2 - r : r, ss = flip ? 2 - s : s;
        f[r][s] = ldf(w, dtw, ((k * 3 + rr) * 3 + ss) * C + c);
      }
    for (int p = 0; p < a; p++)
      for (int s = 0; s < 3; s++) h[p][s] = t.g[p][0] * f[0][s] + t.g[p][1] * f[1][s] + t.g[p][2] * f[2][s];
    for (int p = 0; p < a; p++)
      for (int q = 0; q < a; q++)
        u[((i64)(p * a + q) * K + k) * C + c] = h[p][0] * t.g[q][0] + h[p][1] * t.g[q][1] + h[p][2] * t.g[q][2];
  }
}

/* dw (K, 3, 3, C) = G^T du[:, k, c] G (the adjoint of tr_wino_wt without rotation); fp32 sums, one rounding. */
TR_GLOBAL void tr_wino_dwt(const float* du, void* dw, int dtdw, int K, int C, int m) {
  WinoMats t;
  wino_mats(m, &t);
  int a = t.a;
  GRID_LOOP(i, (i64)K * C) {
    int c = (int)(i % C);
    i64 k = i / C;
    float h[3][6];
    for (int r = 0; r < 3; r++)
      for (int q = 0; q < a; q++) {
        float v = 0.0f;
        for (int p = 0; p < a; p++) v += t.g[p][r] * du[((i64)(p * a + q) * K + k) * C + c];
        h[r][q] = v;
      }
    for (int r = 0; r < 3; r++)
      for (int s = 0; s < 3; s++) {
        float v = 0.0f;
        for (int q = 0; q < a; q++) v += h[r][q] * t.g[q][s];
        stf(dw, dtdw, ((k * 3 + r) * 3 + s) * C + c, v);
      }
  }
}

/* v (alpha^2, P, nc) = B^T d B, d the alpha x alpha tile of x (N, H, W, nc) at (m ty - pad, m tx - pad), zero
   outside x, for the P = nimg th tw tiles of images n0 ...; adj (the weight gradient's dM, x = dy, H x W = Ho x Wo,
   pad 0): A d A^T of the m x m tile at (m ty, m tx) instead. */
TR_GLOBAL void tr_wino_in(const void* x, int dtx, float* v, int n0, int nimg, int H, int W, int nc, int pad, int th,
                          int tw, int m, int adj) {
  WinoMats t;
  wino_mats(m, &t);
  int a = t.a, size = adj ? m : a;
  i64 P = (i64)nimg * th * tw;
  GRID_LOOP(i, P * nc) {
    int c, ty, tx;
    i64 tile, n;
    wino_pair(i, nc, n0, th, tw, &c, &tile, &n, &ty, &tx);
    float d[6][6], e[6][6];
    for (int r = 0; r < size; r++)
      for (int s = 0; s < size; s++) {
        int ih = m * ty - pad + r, iw = m * tx - pad + s;
        d[r][s] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? ldf(x, dtx, ((n * H + ih) * W + iw) * nc + c) : 0.0f;
      }
    wino_sandwich(adj ? t.at : t.bt, adj, a, size, d, e);
    for (int p = 0; p < a; p++)
      for (int q = 0; q < a; q++) v[((i64)(p * a + q) * P + tile) * nc + c] = e[p][q];
  }
}

/* y (N, Ho, Wo, Cout) [= beta y +] A^T M A for the tiles of images n0 ... (the parts inside Ho x Wo). */
TR_GLOBAL void tr_wino_out(const float* mm, void* y, int dty, int n0, int nimg, int Ho, int Wo, int Cout, int th,
                           int tw, int m, float beta) {
  WinoMats t;
  wino_mats(m, &t);
  int a = t.a;
  i64 P = (i64)nimg * th * tw;
  GRID_LOOP(i, P * Cout) {
    int c, ty, tx;
    i64 tile, n;
    wino_pair(i, Cout, n0, th, tw, &c, &tile, &n, &ty, &tx);
    float d[6][6], e[6][6];
    for (int p = 0; p < a; p++)
      for (int q = 0; q < a; q++) d[p][q] = mm[((i64)(p * a + q) * P + tile) * Cout + c];
    wino_sandwich(t.at, 0, m, a, d, e);
    for (int u = 0; u < m && m * ty + u < Ho; u++)
      for (int vv = 0; vv < m && m * tx + vv < Wo; vv++) {
        i64 o = ((n * Ho + m * ty + u) * Wo + m * tx + vv) * Cout + c;
        stf(y, dty, o, beta != 0.0f ? e[u][vv] + beta * ldf(y, dty, o) : e[u][vv]);
      }
  }
}
