/* ------------------------------------------------------------------ softmax cross-entropy */
/* One block of 256 threads: 8 groups of 32 lanes, a group per row; deterministic sums. */

#define SM_GROUPS 8
#define SM_LANES 32

TR_DEV float group_reduce(float v, float* sh, int op) {  /* op 0 sum, 1 max */
  int gi = threadIdx.x / SM_LANES, lane = threadIdx.x % SM_LANES;
  float* row = sh + gi * SM_LANES;
  row[lane] = v;
  __syncthreads();
  for (int s = SM_LANES / 2; s > 0; s >>= 1) {
    if (lane < s) {
      float a = row[lane], b = row[lane + s];
      row[lane] = op == 0 ? a + b : ((a > b || tr_isnan(a)) ? a : b);
    }
    __syncthreads();
  }
  float r = row[0];
  __syncthreads();
  return r;
}

TR_GLOBAL void tr_softmax_ce_fwd(const void* z, int dtz, const void* labels, int dtl, float* probs, int n, int K,
                                 void* loss, int dtloss, void* top1, int dt1, void* top5, int dt5, void* pred,
                                 int dtp, const void* bs, int dtbs, const void* ls, int dtls, void* inv_batch,
                                 int dtinv) {
  TR_SHARED float red[SM_GROUPS * SM_LANES];
  TR_SHARED int idx[SM_GROUPS * SM_LANES];
  TR_SHARED double acc_loss[SM_GROUPS];
  TR_SHARED float acc_1[SM_GROUPS];
  TR_SHARED float acc_5[SM_GROUPS];
  TR_SHARED int bad_label[SM_GROUPS];
  int gi = threadIdx.x / SM_LANES, lane = threadIdx.x % SM_LANES;
  i64 b = bs ? (i64)lds(bs, dtbs, 0.0) : n;
  if (b < 0) b = 0;
  if (b > n) b = n;
  float lsm = (float)lds(ls, dtls, 0.0);
  if (lane == 0) { acc_loss[gi] = 0.0; acc_1[gi] = 0.0f; acc_5[gi] = 0.0f; bad_label[gi] = 0; }
  for (int base = 0; base < n; base += SM_GROUPS) {
    int r = base + gi;
    bool live = r < n;
    const i64 off = (i64)r * K;
    /* pass 1: max and first arg-max, sum of z, count of NaN / Inf logits */
    float mx = -tr_inf(), sz = 0.0f, nf = 0.0f;
    int am = K;
    if (live)
      for (int c = lane; c < K; c += SM_LANES) {
        float v = ldf(z, dtz, off + c);
        sz += v;
        if (tr_isnan(v) || fabsf(v) == tr_inf()) nf += 1.0f;
        if (v > mx || (tr_isnan(v) && !tr_isnan(mx))) { mx = v; am = c; }
      }
    /* (max, index) reduction: larger value, then smaller index */
    float* row = red + gi * SM_LANES;
    int* irow = idx + gi * SM_LANES;
    row[lane] = mx;
    irow[lane] = am;
    __syncthreads();
    for (int s = SM_LANES / 2; s > 0; s >>= 1) {
      if (lane < s) {
        float a = row[lane], bb = row[lane + s];
        int ia = irow[lane], ib = irow[lane + s];
        bool take = (bb > a) || (bb == a && ib < ia) || (tr_isnan(bb) && !tr_isnan(a)) || (tr_isnan(bb) && tr_isnan(a) && ib < ia);
        if (take) { row[lane] = bb; irow[lane] = ib; }
      }
      __syncthreads();
    }
    float zmax = row[0];
    int argmax = irow[0];
    __syncthreads();
    float zsum = group_reduce(sz, red, 0);
    bool finite = group_reduce(nf, red, 0) == 0.0f;  /* a row with a NaN / Inf logit is a miss (CPU's rule) */
    /* pass 2: sum of exp, count of logits above the label's */
    i64 y = live ? ldi(labels, dtl, r) : 0;
    bool ylive = live && y >= 0 && y < K;
    float zy = ylive ? ldf(z, dtz, off + y) : 0.0f;
    float se = 0.0f, gt = 0.0f;
    if (live)
      for (int c = lane; c < K; c += SM_LANES) {
        float v = ldf(z, dtz, off + c);
        se += expf(v - zmax);
        if (v > zy) gt += 1.0f;
      }
    float esum = group_reduce(se, red, 0);
    float above = group_reduce(gt, red, 0);
    /* pass 3: probabilities */
    if (live)
      for (int c = lane; c < K; c += SM_LANES) probs[off + c] = expf(ldf(z, dtz, off + c) - zmax) / esum;
    if (live && lane == 0) {
      if (pred) sti(pred, dtp, r, argmax < K ? argmax : 0);
      if (r < b) {
        if (!ylive) {
          bad_label[gi] = 1;
        } else {
          float lse = zmax + logf(esum);
          float lb = lse - (1.0f - lsm) * zy;
          if (lsm != 0.0f) lb = lb - lsm * (zsum / (float)K);  /* not 0 * -inf for a -inf logit */
          acc_loss[gi] += (double)lb;
          float hit1 = finite && argmax == y ? 1.0f : 0.0f;
          acc_1[gi] += hit1;
          acc_5[gi] += K >= 5 ? (finite && above < 5.0f ? 1.0f : 0.0f) : hit1;
        }
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double l = 0.0, c1 = 0.0, c5 = 0.0;
    int badl = 0;
    for (int g = 0; g < SM_GROUPS; g++) { l += acc_loss[g]; c1 += acc_1[g]; c5 += acc_5[g]; badl |= bad_label[g]; }
    double inv = b ? 1.0 / (double)b : 0.0;
    if (inv_batch) stf(inv_batch, dtinv, 0, (float)inv);
    stf(loss, dtloss, 0, badl ? tr_nan() : (float)(l * inv));
    stf(top1, dt1, 0, (float)(c1 * inv));
    stf(top5, dt5, 0, (float)(c5 * inv));
  }
}

TR_GLOBAL void tr_softmax_ce_bwd(const float* probs, const void* labels, int dtl, void* dz, int dtd, int n, int K,
                                 const void* lscale, int dtsc, const void* bs, int dtbs, const void* ls, int dtls,
                                 const void* inv_batch, int dtinv) {
  i64 b = n;
  if (bs) {
    b = (i64)lds(bs, dtbs, 0.0);
  } else if (inv_batch) {
    double ib = lds(inv_batch, dtinv, 0.0);
    b = ib > 0 ? (i64)floor(1.0 / ib + 0.5) : 0;
  }
  if (b < 0) b = 0;
  if (b > n) b = n;
  double lsm = lds(ls, dtls, 0.0);
  float c = b ? (float)(lds(lscale, dtsc, 1.0) / (double)b) : 0.0f;
  float base = (float)(lsm / (double)K), hit = (float)(1.0 - lsm);
  GRID_LOOP(i, (i64)n * K) {
    i64 r = i / K; i64 col = i % K;
    float t = 0.0f;
    if (r < b) {
      t = probs[i] - base;
      if (ldi(labels, dtl, r) == col) t -= hit;
    }
    stf(dz, dtd, i, t * c);
  }
}

