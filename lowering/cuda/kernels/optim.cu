/* ------------------------------------------------------------------ optimizers */

TR_DEV float inv_scale(const void* ls, int dtl) {
  double s = lds(ls, dtl, 1.0);
  return (float)(s != 0.0 ? 1.0 / s : 1.0);
}

/* SGD family over a flat span (torch.optim.SGD): m null = plain SGD. Skipped when has_nan. */
TR_GLOBAL void tr_sgd(float* w, const float* g, float* m, i64 n, const void* lr, int dtlr, const void* wd, int dtwd,
                      const void* mom, int dtmo, const void* ls, int dtls, const void* hn, int dthn, int nesterov) {
  if (lds(hn, dthn, 0.0) != 0.0) return;
  float lr_ = (float)lds(lr, dtlr, 0.0), wd_ = (float)lds(wd, dtwd, 0.0), mu = (float)lds(mom, dtmo, 0.0);
  float inv = inv_scale(ls, dtls);
  GRID_LOOP(i, n) {
    float d = g[i] * inv;
    float wi = w[i];
    if (wd_ != 0.0f) d += wd_ * wi;
    if (m) {
      float mi = m[i] * mu + d;
      m[i] = mi;
      d = nesterov ? d + mu * mi : mi;
    }
    w[i] = wi - d * lr_;
  }
}

/* Adam / AdamW (decoupled) over a flat span, torch's bias corrections from step (float64), or
   from bc1 = 1/(1-b1^t), bc2 = 1/(1-b2^t) when step is null. */
TR_GLOBAL void tr_adam(float* w, const float* g, float* m, float* v, i64 n, const void* lr, int dtlr,
                       const void* b1, int dtb1, const void* b2, int dtb2, const void* eps, int dte,
                       const void* wd, int dtwd, const void* step, int dtst, const void* ls, int dtls,
                       const void* hn, int dthn, const void* bc1, int dtc1, const void* bc2, int dtc2, int decoupled) {
  if (lds(hn, dthn, 0.0) != 0.0) return;
  double lr_ = lds(lr, dtlr, 0.0), beta1 = lds(b1, dtb1, 0.9), beta2 = lds(b2, dtb2, 0.999);
  double step_size, bc2s;
  if (step) {
    double t = lds(step, dtst, 1.0);
    if (t < 1.0) t = 1.0;
    step_size = lr_ / (1.0 - pow(beta1, t));
    bc2s = sqrt(1.0 - pow(beta2, t));
  } else {
    step_size = lr_ * lds(bc1, dtc1, 1.0);
    bc2s = sqrt(1.0 / lds(bc2, dtc2, 1.0));
  }
  float wdf = (float)lds(wd, dtwd, 0.0), epsf = (float)lds(eps, dte, 1e-8);
  float decay = (float)(1.0 - lr_ * lds(wd, dtwd, 0.0));
  float ob1 = (float)(1.0 - beta1), b2f = (float)beta2, ob2 = (float)(1.0 - beta2);
  float ibc2 = (float)(1.0 / bc2s), ss = (float)step_size;
  float inv = inv_scale(ls, dtls);
  GRID_LOOP(i, n) {
    float d = g[i] * inv;
    float wi = w[i];
    if (wdf != 0.0f && decoupled) wi *= decay;
    else if (wdf != 0.0f) d += wdf * wi;
    float mi = m[i];
    mi += ob1 * (d - mi);
    float vi = v[i] * b2f + (d * d) * ob2;
    m[i] = mi;
    v[i] = vi;
    float den = sqrtf(vi) * ibc2 + epsf;
    w[i] = wi - (mi / den) * ss;
  }
}

/* Block-wide sum of per-thread double partials (blockDim.x <= 1024). */
TR_DEV double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

TR_DEV double lars_eta(double wn2, double gn2, double inv, double tc, double wd, double eps) {
  double wn = sqrt(wn2), gn = sqrt(gn2) * inv;
  if (wn >= 1e-12 && gn >= 1e-12) { double e = tc * wn / (gn + wd * wn + eps); return e < 100.0 ? e : 100.0; }
  return 1.0;
}

TR_DEV void lars_apply_range(float* w, const float* g, float* m, i64 n, i64 start, i64 step, float eta, float lr_,
                             float mu, float wd_, float inv, int nesterov) {
  float k = (float)((double)lr_ * (double)eta);
  for (i64 i = start; i < n; i += step) {
    float wi = w[i];
    float d = g[i] * inv;
    if (wd_ != 0.0f) d += wd_ * wi;
    d *= k;
    float mi = m[i] * mu + d;
    m[i] = mi;
    w[i] = nesterov ? wi - (d + mu * mi) : wi - mi;
  }
}

/* One LARS tensor (one block): trust ratio from |w|, |g| (facts 12.4), then the momentum update. */
TR_GLOBAL void tr_lars_segment(float* w, const float* g, float* m, i64 n, const void* lr, int dtlr, const void* mom,
                               int dtmo, const void* wd, int dtwd, const void* tc, int dttc, const void* eps, int dte,
                               const void* ls, int dtls, const void* hn, int dthn, int nesterov) {
  TR_SHARED double sh[1024];
  if (lds(hn, dthn, 0.0) != 0.0) return;
  double inv = inv_scale(ls, dtls);
  double sw = 0.0, sg = 0.0;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) { double a = w[i], b = g[i]; sw += a * a; sg += b * b; }
  double wn2 = block_sum(sw, sh);
  double gn2 = block_sum(sg, sh);
  double eta = lars_eta(wn2, gn2, inv, lds(tc, dttc, 0.001), lds(wd, dtwd, 0.0), lds(eps, dte, 0.0));
  lars_apply_range(w, g, m, n, threadIdx.x, blockDim.x, (float)eta, (float)lds(lr, dtlr, 0.0),
                   (float)lds(mom, dtmo, 0.0), (float)lds(wd, dtwd, 0.0), (float)inv, nesterov);
}

/* The seed's per-tensor trust ratio into out[0] (one block; 1 when has_nan). */
TR_GLOBAL void tr_lars_trust(const void* w, int dtw, const void* g, int dtg, i64 n, const void* tc, int dttc,
                             const void* wd, int dtwd, const void* eps, int dte, const void* ls, int dtls,
                             const void* hn, int dthn, void* out, int dto) {
  TR_SHARED double sh[1024];
  double sw = 0.0, sg = 0.0;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) { double a = ldf(w, dtw, i), b = ldf(g, dtg, i); sw += a * a; sg += b * b; }
  double wn2 = block_sum(sw, sh);
  double gn2 = block_sum(sg, sh);
  if (threadIdx.x == 0) {
    double eta = lds(hn, dthn, 0.0) != 0.0 ? 1.0 :
        lars_eta(wn2, gn2, inv_scale(ls, dtls), lds(tc, dttc, 0.001), lds(wd, dtwd, 0.0), lds(eps, dte, 0.0));
    stf(out, dto, 0, (float)eta);
  }
}

TR_GLOBAL void tr_lars_apply(float* w, const float* g, float* m, i64 n, const void* trust, int dtt, const void* lr,
                             int dtlr, const void* mom, int dtmo, const void* wd, int dtwd, const void* ls, int dtls,
                             const void* hn, int dthn, int nesterov) {
  if (lds(hn, dthn, 0.0) != 0.0) return;
  lars_apply_range(w, g, m, n, TR_TID, TR_STRIDE, (float)lds(trust, dtt, 1.0), (float)lds(lr, dtlr, 0.0),
                   (float)lds(mom, dtmo, 0.0), (float)lds(wd, dtwd, 0.0), inv_scale(ls, dtls), nesterov);
}

