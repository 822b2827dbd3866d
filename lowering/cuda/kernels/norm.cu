/* ------------------------------------------------------------------ column sums (BN, bias) */
/* block (32, 8), grid (ceil(C/32), splits); out[c] += partial sums (atomic, pre-zeroed) */

TR_GLOBAL void tr_colsum(const void* x, int dtx, i64 rows, int C, float* out) {
  TR_SHARED float sh[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < C)
    for (i64 r = (i64)blockIdx.y * 8 + threadIdx.y; r < rows; r += (i64)gridDim.y * 8) acc += ldf(x, dtx, r * C + c);
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int j = 0; j < 8; j++) s += sh[j][threadIdx.x];
    tr_atomic_add(out + c, s);
  }
}

/* out[c] += sum over rows of (x - mean[c])^2 */
TR_GLOBAL void tr_colsum_sq(const void* x, int dtx, i64 rows, int C, const float* mean, float* out) {
  TR_SHARED float sh[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < C) {
    float mu = mean[c];
    for (i64 r = (i64)blockIdx.y * 8 + threadIdx.y; r < rows; r += (i64)gridDim.y * 8) {
      float t = ldf(x, dtx, r * C + c) - mu;
      acc += t * t;
    }
  }
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int j = 0; j < 8; j++) s += sh[j][threadIdx.x];
    tr_atomic_add(out + c, s);
  }
}

/* The gradient a BN backward reads: dy, or through the ReLU after the BN (fused epilogue) the
   product the ReLU backward writes: dy * mask (gate an INT8 mask, dtg 2) or dy * (y > 0) (gate the
   ReLU output); gate null: dy. Exact in either storage dtype (a factor of 0 or 1). */
TR_DEV float tr_gated(const void* dy, int dtdy, const void* gate, int dtg, i64 i) {
  float d = ldf(dy, dtdy, i);
  if (!gate) return d;
  if (dtg == 2) return d * (float)((const signed char*)gate)[i];
  return d * (ldf(gate, dtg, i) > 0.0f ? 1.0f : 0.0f);
}

/* v as it reads back after a store in dtype dt (the fp16 rounding of an AMP activation) */
TR_DEV float tr_stored(float v, int dt) { return dt == 1 ? h2f(f2h(v)) : v; }

/* dbeta[c] += sum d, dgamma[c] += sum d * (x - mean) * istd, d = tr_gated(dy) */
TR_GLOBAL void tr_bn_bwd_sums(const void* dy, int dtdy, const void* gate, int dtg, const void* x, int dtx, i64 rows,
                              int C, const float* mean, const float* istd, float* dgamma, float* dbeta) {
  TR_SHARED float sb[8][33];
  TR_SHARED float sg[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  float ab = 0.0f, ag = 0.0f;
  if (c < C) {
    float mu = mean[c], is = istd[c];
    for (i64 r = (i64)blockIdx.y * 8 + threadIdx.y; r < rows; r += (i64)gridDim.y * 8) {
      float d = tr_gated(dy, dtdy, gate, dtg, r * C + c);
      float xh = (ldf(x, dtx, r * C + c) - mu) * is;
      ab += d;
      ag += xh * d;
    }
  }
  sb[threadIdx.y][threadIdx.x] = ab;
  sg[threadIdx.y][threadIdx.x] = ag;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float b = 0.0f, q = 0.0f;
    for (int j = 0; j < 8; j++) { b += sb[j][threadIdx.x]; q += sg[j][threadIdx.x]; }
    tr_atomic_add(dbeta + c, b);
    tr_atomic_add(dgamma + c, q);
  }
}

/* ------------------------------------------------------------------ batch norm */

TR_GLOBAL void tr_scale_vec(float* v, int n, float s) {
  GRID_LOOP(i, n) v[i] *= s;
}

/* var_istd holds sum (x-mean)^2 on entry; on exit 1/sqrt(var + eps). Running statistics in place. */
TR_GLOBAL void tr_bn_finalize(const float* mean, float* var_istd, float* rm, float* rv, int C, float inv_m,
                              double unbias, const void* eps, int dte, double eps_val, const void* mom, int dtm,
                              double mom_val) {
  double mo = lds(mom, dtm, mom_val);
  float e = (float)lds(eps, dte, eps_val);
  float keep = (float)(1.0 - mo), mof = (float)mo, mu_unb = (float)(mo * unbias);
  GRID_LOOP(c, C) {
    float var = var_istd[c] * inv_m;
    rm[c] = rm[c] * keep + mof * mean[c];
    rv[c] = rv[c] * keep + mu_unb * var;
    var_istd[c] = 1.0f / sqrtf(var + e);
  }
}

/* y = bn(x); relu: y = relu(bn(x) + skip) (skip may be null), the INT8 mask of the pre-activation
   > 0 when mask is not null. The BN output and the sum are rounded to y's dtype where the unfused
   kernels (this one, tr_add, tr_act_fwd) store them, so the fused kernel gives their values. */
TR_GLOBAL void tr_bn_apply(const void* x, int dtx, void* y, int dty, i64 rows, int C, const float* gamma,
                           const float* beta, const float* mean, const float* istd, int relu, const void* skip,
                           int dts, signed char* mask) {
  GRID_LOOP(i, rows * C) {
    int c = (int)(i % C);
    float sc = gamma[c] * istd[c];
    float sh = beta[c] - mean[c] * sc;
    float v = ldf(x, dtx, i) * sc + sh;
    if (relu) {
      v = tr_stored(v, dty);
      if (skip) v = tr_stored(ldf(skip, dts, i) + v, dty);
      if (mask) mask[i] = v > 0.0f ? 1 : 0;
      v = (v > 0.0f || tr_isnan(v)) ? v : 0.0f;
    }
    stf(y, dty, i, v);
  }
}

TR_GLOBAL void tr_bn_affine(const void* x, int dtx, void* y, int dty, i64 rows, int C, const float* scale,
                            const float* bias) {
  GRID_LOOP(i, rows * C) {
    int c = (int)(i % C);
    stf(y, dty, i, ldf(x, dtx, i) * scale[c] + bias[c]);
  }
}

/* dx from d = tr_gated(dy); dskip = d when not null (a residual join's other gradient; may be dy) */
TR_GLOBAL void tr_bn_bwd_dx(const void* dy, int dtdy, const void* gate, int dtg, const void* x, int dtx, void* dx,
                            int dtdx, void* dskip, int dtsk, i64 rows, int C, const float* gamma, const float* mean,
                            const float* istd, const float* dgamma, const float* dbeta, float inv_m) {
  GRID_LOOP(i, rows * C) {
    int c = (int)(i % C);
    float is = istd[c];
    float xh = (ldf(x, dtx, i) - mean[c]) * is * (dgamma[c] * inv_m);
    float d = tr_gated(dy, dtdy, gate, dtg, i);
    if (dskip) stf(dskip, dtsk, i, d);
    float t = d - dbeta[c] * inv_m;
    stf(dx, dtdx, i, (t - xh) * (gamma[c] * is));
  }
}

TR_GLOBAL void tr_bn_eq_params(const float* gamma, const float* beta, const float* rm, const float* rv,
                               float* eq_scale, float* eq_bias, int C, const void* eps, int dte, double eps_val) {
  float e = (float)lds(eps, dte, eps_val);
  GRID_LOOP(c, C) {
    float s = gamma[c] / sqrtf(rv[c] + e);
    eq_scale[c] = s;
    eq_bias[c] = beta[c] - rm[c] * s;
  }
}

