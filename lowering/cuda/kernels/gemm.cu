/* ------------------------------------------------------------------ GEMM and implicit-GEMM conv */
/* C(m, n) = alpha * sum_k A(m, k) B(k, n) [+ beta * C] [+ bias(n)], fp32 accumulation.
   64 x 64 output tile per block of 256 threads (4 x 4 per thread), reduction step 16. mode 1:
   atomically add alpha * AB into an fp32 C (split-K partial sums). The ReLU epilogues of a fused
   FC (memplan-fuse-fc-relu), mode 0 only: relu = 1 applies tr_act_fwd's ReLU after the bias;
   gate (C's layout) multiplies the stored value by (gate > 0) as tr_relu_bwd_y does. Rounding
   to an fp16 C commutes with the ReLU, so the results are the unfused kernels' bits. */

struct Strided {
  const void* p; int dt; i64 s0, s1, sb;
  TR_FUNCTOR float operator()(int g, i64 i, i64 j) const { return ldf(p, dt, g * sb + i * s0 + j * s1); }
};

/* (m, kk) of the im2col matrix of x: m = (n, oh, ow), kk = (r, s, c) with c fastest. */
struct ConvX {
  const void* p; int dt; int H, W, C, Ho, Wo, kw, st, pad, cg;
  TR_FUNCTOR float operator()(int g, i64 m, i64 kk) const {
    int ow = (int)(m % Wo); i64 t = m / Wo; int oh = (int)(t % Ho); i64 n = t / Ho;
    int c = (int)(kk % cg); int rs = (int)(kk / cg); int s = rs % kw; int r = rs / kw;
    int ih = oh * st + r - pad, iw = ow * st + s - pad;
    if (ih < 0 || ih >= H || iw < 0 || iw >= W) return 0.0f;
    return ldf(p, dt, ((n * H + ih) * W + iw) * C + (i64)g * cg + c);
  }
};

/* dgrad A(m', kk'): m' = (n, ih, iw), kk' = (r, s, j) with j fastest: dy at the output reading it. */
struct ConvDy {
  const void* p; int dt; int H, W, K, Ho, Wo, kw, st, pad, kg;
  TR_FUNCTOR float operator()(int g, i64 m, i64 kk) const {
    int iw = (int)(m % W); i64 t = m / W; int ih = (int)(t % H); i64 n = t / H;
    int j = (int)(kk % kg); int rs = (int)(kk / kg); int s = rs % kw; int r = rs / kw;
    int ohn = ih + pad - r, own = iw + pad - s;
    if (ohn < 0 || own < 0 || ohn % st || own % st) return 0.0f;
    int oh = ohn / st, ow = own / st;
    if (oh >= Ho || ow >= Wo) return 0.0f;
    return ldf(p, dt, ((n * Ho + oh) * Wo + ow) * K + (i64)g * kg + j);
  }
};

/* dgrad B(kk', c) = w[g*kg + j, r, s, c] */
struct ConvW {
  const void* p; int dt; int kg, cg; i64 kkc;
  TR_FUNCTOR float operator()(int g, i64 kk, i64 c) const {
    int j = (int)(kk % kg); i64 rs = kk / kg;
    return ldf(p, dt, ((i64)g * kg + j) * kkc + rs * cg + c);
  }
};

template <class LA, class LB>
TR_DEV void gemm_tile(const LA& A, const LB& B, void* Cp, int dtc, i64 M, i64 N, i64 k0, i64 k1, i64 cs0, i64 cs1,
                      i64 csb, float alpha, float beta, const void* bias, int dtb, int mode, int g, int a_kfast,
                      int b_kfast, int relu, const void* gate, int dtgate, float (*As)[68], float (*Bs)[68]) {
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  i64 m0 = (i64)blockIdx.x * 64, n0 = (i64)blockIdx.y * 64;
  float acc[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (i64 kt = k0; kt < k1; kt += 16) {
    for (int q = 0; q < 4; q++) {
      int e = threadIdx.x + 256 * q;
      int mi = a_kfast ? e / 16 : e % 64, ki = a_kfast ? e % 16 : e / 64;
      i64 m = m0 + mi, k = kt + ki;
      As[ki][mi] = (m < M && k < k1) ? A(g, m, k) : 0.0f;
      int ni = b_kfast ? e / 16 : e % 64, kj = b_kfast ? e % 16 : e / 64;
      i64 nn = n0 + ni, kb = kt + kj;
      Bs[kj][ni] = (nn < N && kb < k1) ? B(g, kb, nn) : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < 16; kk++) {
      float a[4], b[4];
      for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
      for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; i++) {
    i64 m = m0 + ty + 16 * i;
    if (m >= M) continue;
    for (int j = 0; j < 4; j++) {
      i64 nn = n0 + tx + 16 * j;
      if (nn >= N) continue;
      i64 o = (i64)g * csb + m * cs0 + nn * cs1;
      float v = alpha * acc[i][j];
      if (mode == 1) {
        tr_atomic_add((float*)Cp + o, v);
      } else {
        if (beta != 0.0f) v += beta * ldf(Cp, dtc, o);
        if (bias) v += ldf(bias, dtb, nn);
        if (relu) v = (v > 0.0f || tr_isnan(v)) ? v : 0.0f;
        stf(Cp, dtc, o, v);
        /* the gate multiplies the stored (rounded) value, as tr_relu_bwd_y does: an fp16 C that
           overflows to Inf gives Inf * 0 = NaN where the gate is 0, as unfused */
        if (gate) stf(Cp, dtc, o, ldf(Cp, dtc, o) * (ldf(gate, dtgate, o) > 0.0f ? 1.0f : 0.0f));
      }
    }
  }
}

TR_DEV void split_range(i64 K, int splits, int split, i64* k0, i64* k1) {
  i64 chunk = (K + splits - 1) / splits;
  chunk = (chunk + 15) / 16 * 16;
  *k0 = (i64)split * chunk;
  *k1 = *k0 + chunk < K ? *k0 + chunk : K;
}

/* grid (ceil(M/64), ceil(N/64), batch * splits) */
TR_GLOBAL void tr_gemm(const void* a, int dta, i64 sa0, i64 sa1, i64 sab, const void* b, int dtb, i64 sb0, i64 sb1,
                       i64 sbb, void* c, int dtc, i64 cs0, i64 cs1, i64 csb, i64 M, i64 N, i64 K, float alpha,
                       float beta, const void* bias, int dtbias, int mode, int splits, int a_kfast, int b_kfast,
                       int relu, const void* gate, int dtgate) {
  TR_SHARED float As[16][68];
  TR_SHARED float Bs[16][68];
  int g = blockIdx.z / splits, split = blockIdx.z % splits;
  i64 k0, k1;
  split_range(K, splits, split, &k0, &k1);
  Strided A = {a, dta, sa0, sa1, sab};
  Strided B = {b, dtb, sb0, sb1, sbb};
  gemm_tile(A, B, c, dtc, M, N, k0, k1, cs0, cs1, csb, alpha, beta, bias, dtbias, mode, g, a_kfast, b_kfast, relu, gate,
            dtgate, As, Bs);
}

