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

/* ------------------------------------------------------------------ output statistics (conv -> BN) */
/* The batch-norm statistics a conv forward writes for the BN after it (lowering/cpu/conv_stats.py):
   per channel c of x (rows x C) sum[c] = sum_r x[r, c] and sq[c] = sum_r (x[r, c] - mean[c])^2, deterministic
   (no atomics: the bits depend on the shapes and the launch geometry only). A part is {count, mean, M2} per
   channel, float64, (3, C). tr_colstats_part reduces the rows [r0, r0 + rows) into gridDim.y parts, every value
   shifted by the pivot x[r0, c] and summed in float64 in a fixed order; tr_colstats_merge merges parts with Chan,
   Golub and LeVeque's pairwise update (1979) in a fixed tree, into one part or, rounded once, into fp32 outputs. */

/* (n, mean, m2) <- the merge of itself and the part (nb, mb, m2b); a part of no values changes nothing */
TR_DEV void tr_chan_merge(double* n, double* mean, double* m2, double nb, double mb, double m2b) {
  if (nb == 0.0) return;
  double tot = *n + nb, d = mb - *mean;
  *mean += d * (nb / tot);
  *m2 += m2b + d * d * (*n * (nb / tot));
  *n = tot;
}

/* block (32, 8), grid (ceil(C/32), parts): part[part0 + blockIdx.y] of the rows blockIdx.y * 8 + threadIdx.y
   + k * gridDim.y * 8 of [r0, r0 + rows); a part that gets no rows has count 0 */
TR_GLOBAL void tr_colstats_part(const void* x, int dtx, i64 r0, i64 rows, int C, double* part, int part0) {
  TR_SHARED double sn[8][33];
  TR_SHARED double s1[8][33];
  TR_SHARED double s2[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  double an = 0.0, a1 = 0.0, a2 = 0.0, pv = 0.0;
  if (c < C && rows > 0) {
    pv = (double)ldf(x, dtx, r0 * C + c);
    for (i64 r = (i64)blockIdx.y * 8 + threadIdx.y; r < rows; r += (i64)gridDim.y * 8) {
      double d = (double)ldf(x, dtx, (r0 + r) * C + c) - pv;
      an += 1.0;
      a1 += d;
      a2 += d * d;
    }
  }
  sn[threadIdx.y][threadIdx.x] = an;
  s1[threadIdx.y][threadIdx.x] = a1;
  s2[threadIdx.y][threadIdx.x] = a2;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double n = 0.0, t1 = 0.0, t2 = 0.0;
    for (int j = 0; j < 8; j++) { n += sn[j][threadIdx.x]; t1 += s1[j][threadIdx.x]; t2 += s2[j][threadIdx.x]; }
    double* p = part + (i64)(part0 + (int)blockIdx.y) * 3 * C;
    double m2 = n > 0.0 ? t2 - t1 * (t1 / n) : 0.0;
    p[c] = n;
    p[C + c] = n > 0.0 ? pv + t1 / n : 0.0;
    p[2 * C + c] = m2 < 0.0 ? 0.0 : m2;
  }
}

/* The merge of the parts [first, first + parts) into the part dst (when not null) or into sum[c] = count * mean
   and sq[c] = M2 (fp32, rounded once); block (32, 8), grid ceil(C/32): thread y merges the parts y, y + 8, ...
   in order, then thread 0 the 8 results in order. dst must not be one of the parts merged. */
TR_GLOBAL void tr_colstats_merge(const double* part, int first, int parts, int C, double* dst, float* sum,
                                 float* sq) {
  TR_SHARED double sn[8][33];
  TR_SHARED double sm[8][33];
  TR_SHARED double s2[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  double n = 0.0, mean = 0.0, m2 = 0.0;
  if (c < C)
    for (int j = threadIdx.y; j < parts; j += 8) {
      const double* p = part + (i64)(first + j) * 3 * C;
      tr_chan_merge(&n, &mean, &m2, p[c], p[C + c], p[2 * C + c]);
    }
  sn[threadIdx.y][threadIdx.x] = n;
  sm[threadIdx.y][threadIdx.x] = mean;
  s2[threadIdx.y][threadIdx.x] = m2;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    n = mean = m2 = 0.0;
    for (int j = 0; j < 8; j++)
      tr_chan_merge(&n, &mean, &m2, sn[j][threadIdx.x], sm[j][threadIdx.x], s2[j][threadIdx.x]);
    if (dst) {
      dst[c] = n;
      dst[C + c] = mean;
      dst[2 * C + c] = m2;
    } else {
      sum[c] = (float)(mean * n);
      sq[c] = (float)m2;
    }
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

/* A BN forward given its input's statistics (a conv's sum and centered sq_sum over m rows): mean[c] = sum[c] / m
   (one rounding from double) and var_acc[c] = sq[c] clamped at 0 (NaN kept), the centered sum tr_bn_finalize reads */
TR_GLOBAL void tr_bn_given_stats(const float* sum, const float* sq, float* mean, float* var_acc, int C, double m) {
  GRID_LOOP(c, C) {
    float q = sq[c];
    mean[c] = (float)((double)sum[c] / m);
    var_acc[c] = q < 0.0f ? 0.0f : q;
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

