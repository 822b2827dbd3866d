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

/* dbeta[c] += sum dy, dgamma[c] += sum dy * (x - mean) * istd */
TR_GLOBAL void tr_bn_bwd_sums(const void* dy, int dtdy, const void* x, int dtx, i64 rows, int C, const float* mean,
                              const float* istd, float* dgamma, float* dbeta) {
  TR_SHARED float sb[8][33];
  TR_SHARED float sg[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  float ab = 0.0f, ag = 0.0f;
  if (c < C) {
    float mu = mean[c], is = istd[c];
    for (i64 r = (i64)blockIdx.y * 8 + threadIdx.y; r < rows; r += (i64)gridDim.y * 8) {
      float d = ldf(dy, dtdy, r * C + c);
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

TR_GLOBAL void tr_bn_apply(const void* x, int dtx, void* y, int dty, i64 rows, int C, const float* gamma,
                           const float* beta, const float* mean, const float* istd) {
  GRID_LOOP(i, rows * C) {
    int c = (int)(i % C);
    float sc = gamma[c] * istd[c];
    float sh = beta[c] - mean[c] * sc;
    stf(y, dty, i, ldf(x, dtx, i) * sc + sh);
  }
}

TR_GLOBAL void tr_bn_affine(const void* x, int dtx, void* y, int dty, i64 rows, int C, const float* scale,
                            const float* bias) {
  GRID_LOOP(i, rows * C) {
    int c = (int)(i % C);
    stf(y, dty, i, ldf(x, dtx, i) * scale[c] + bias[c]);
  }
}

TR_GLOBAL void tr_bn_bwd_dx(const void* dy, int dtdy, const void* x, int dtx, void* dx, int dtdx, i64 rows, int C,
                            const float* gamma, const float* mean, const float* istd, const float* dgamma,
                            const float* dbeta, float inv_m) {
  GRID_LOOP(i, rows * C) {
    int c = (int)(i % C);
    float is = istd[c];
    float xh = (ldf(x, dtx, i) - mean[c]) * is * (dgamma[c] * inv_m);
    float t = ldf(dy, dtdy, i) - dbeta[c] * inv_m;
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

