/* y (N, Ho, Wo, K) = conv(x (N, H, W, C), w (K, kw, kw, C/G)); grid (ceil(M/64), ceil(K/G/64), G) */
TR_GLOBAL void tr_conv_fwd(const void* x, int dtx, const void* w, int dtw, void* y, int dty, int N, int H, int W,
                           int C, int Ho, int Wo, int K, int kw, int st, int pad, int groups) {
  TR_SHARED float As[16][68];
  TR_SHARED float Bs[16][68];
  int cg = C / groups, kg = K / groups;
  i64 kkc = (i64)kw * kw * cg;
  ConvX A = {x, dtx, H, W, C, Ho, Wo, kw, st, pad, cg};
  Strided B = {w, dtw, 1, kkc, (i64)kg * kkc};
  gemm_tile(A, B, y, dty, (i64)N * Ho * Wo, kg, 0, kkc, K, 1, kg, 1.0f, 0.0f, (const void*)0, 0, 0, (int)blockIdx.z,
            1, 1, 0, (const void*)0, 0, As, Bs);
}

/* dx (N, H, W, C) = [beta * dx +] dL/dx; grid (ceil(N*H*W/64), ceil(C/G/64), G) */
TR_GLOBAL void tr_conv_dgrad(const void* dy, int dtdy, const void* w, int dtw, void* dx, int dtdx, int N, int H,
                             int W, int C, int Ho, int Wo, int K, int kw, int st, int pad, int groups, float beta) {
  TR_SHARED float As[16][68];
  TR_SHARED float Bs[16][68];
  int cg = C / groups, kg = K / groups;
  ConvDy A = {dy, dtdy, H, W, K, Ho, Wo, kw, st, pad, kg};
  ConvW B = {w, dtw, kg, cg, (i64)kw * kw * cg};
  gemm_tile(A, B, dx, dtdx, (i64)N * H * W, cg, 0, (i64)kw * kw * kg, C, 1, cg, 1.0f, beta, (const void*)0, 0, 0,
            (int)blockIdx.z, 1, 0, 0, (const void*)0, 0, As, Bs);
}

/* acc (K, kw, kw, C/G) fp32 += dL/dw over a slice of the N*Ho*Wo rows; grid (ceil(K/G/64), ceil(kkc/64), G*splits) */
TR_GLOBAL void tr_conv_wgrad(const void* dy, int dtdy, const void* x, int dtx, float* acc, int N, int H, int W, int C,
                             int Ho, int Wo, int K, int kw, int st, int pad, int groups, int splits) {
  TR_SHARED float As[16][68];
  TR_SHARED float Bs[16][68];
  int cg = C / groups, kg = K / groups;
  i64 kkc = (i64)kw * kw * cg;
  int g = blockIdx.z / splits, split = blockIdx.z % splits;
  i64 k0, k1;
  split_range((i64)N * Ho * Wo, splits, split, &k0, &k1);
  Strided A = {dy, dtdy, 1, K, kg};
  ConvX B = {x, dtx, H, W, C, Ho, Wo, kw, st, pad, cg};
  gemm_tile(A, B, acc, 0, kg, kkc, k0, k1, kkc, 1, (i64)kg * kkc, 1.0f, 0.0f, (const void*)0, 0, 1, g, 0, 0, 0,
            (const void*)0, 0, As, Bs);
}

/* depthwise (groups = C = K), w (C, kw, kw, 1) */
TR_GLOBAL void tr_dwconv_fwd(const void* x, int dtx, const void* w, int dtw, void* y, int dty, int N, int H, int W,
                             int C, int Ho, int Wo, int kw, int st, int pad) {
  GRID_LOOP(i, (i64)N * Ho * Wo * C) {
    int c = (int)(i % C); i64 t = i / C; int ow = (int)(t % Wo); t /= Wo; int oh = (int)(t % Ho); i64 n = t / Ho;
    float acc = 0.0f;
    for (int r = 0; r < kw; r++) {
      int ih = oh * st + r - pad;
      if (ih < 0 || ih >= H) continue;
      for (int s = 0; s < kw; s++) {
        int iw = ow * st + s - pad;
        if (iw < 0 || iw >= W) continue;
        acc += ldf(x, dtx, ((n * H + ih) * W + iw) * C + c) * ldf(w, dtw, ((i64)c * kw + r) * kw + s);
      }
    }
    stf(y, dty, i, acc);
  }
}

TR_GLOBAL void tr_dwconv_dgrad(const void* dy, int dtdy, const void* w, int dtw, void* dx, int dtdx, int N, int H,
                               int W, int C, int Ho, int Wo, int kw, int st, int pad, float beta) {
  GRID_LOOP(i, (i64)N * H * W * C) {
    int c = (int)(i % C); i64 t = i / C; int iw = (int)(t % W); t /= W; int ih = (int)(t % H); i64 n = t / H;
    float acc = beta != 0.0f ? beta * ldf(dx, dtdx, i) : 0.0f;
    for (int r = 0; r < kw; r++) {
      int ohn = ih + pad - r;
      if (ohn < 0 || ohn % st) continue;
      int oh = ohn / st;
      if (oh >= Ho) continue;
      for (int s = 0; s < kw; s++) {
        int own = iw + pad - s;
        if (own < 0 || own % st) continue;
        int ow = own / st;
        if (ow >= Wo) continue;
        acc += ldf(dy, dtdy, ((n * Ho + oh) * Wo + ow) * C + c) * ldf(w, dtw, ((i64)c * kw + r) * kw + s);
      }
    }
    stf(dx, dtdx, i, acc);
  }
}

/* acc (C, kw, kw) fp32 += per-tap column sums of dy * x; block (32, 8), grid (ceil(C/32), kw*kw, splits) */
TR_GLOBAL void tr_dwconv_wgrad(const void* dy, int dtdy, const void* x, int dtx, float* acc, int N, int H, int W,
                               int C, int Ho, int Wo, int kw, int st, int pad) {
  TR_SHARED float sh[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  int tap = blockIdx.y, r = tap / kw, s = tap % kw;
  i64 M = (i64)N * Ho * Wo;
  float a = 0.0f;
  if (c < C)
    for (i64 m = (i64)blockIdx.z * 8 + threadIdx.y; m < M; m += (i64)gridDim.z * 8) {
      int ow = (int)(m % Wo); i64 t = m / Wo; int oh = (int)(t % Ho); i64 n = t / Ho;
      int ih = oh * st + r - pad, iw = ow * st + s - pad;
      if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
      a += ldf(dy, dtdy, m * C + c) * ldf(x, dtx, ((n * H + ih) * W + iw) * C + c);
    }
  sh[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float v = 0.0f;
    for (int j = 0; j < 8; j++) v += sh[j][threadIdx.x];
    tr_atomic_add(acc + (i64)c * kw * kw + tap, v);
  }
}
