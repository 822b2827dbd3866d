/* ------------------------------------------------------------------ pooling (NHWC) */

TR_GLOBAL void tr_maxpool_fwd(const void* x, int dtx, void* y, int dty, signed char* mask, int N, int H, int W,
                              int C, int Ho, int Wo, int k, int s, int p) {
  GRID_LOOP(i, (i64)N * Ho * Wo * C) {
    int c = (int)(i % C); i64 t = i / C; int ow = (int)(t % Wo); t /= Wo; int oh = (int)(t % Ho); i64 n = t / Ho;
    float best = -tr_inf();
    bool nan = false;
    for (int a = 0; a < k; a++) {
      int ih = oh * s + a - p;
      if (ih < 0 || ih >= H) continue;
      for (int b = 0; b < k; b++) {
        int iw = ow * s + b - p;
        if (iw < 0 || iw >= W) continue;
        float v = ldf(x, dtx, ((n * H + ih) * W + iw) * C + c);
        if (tr_isnan(v)) nan = true; else if (v > best) best = v;
      }
    }
    int arg = 0;
    if (!nan) {
      bool found = false;
      for (int a = 0; a < k && !found; a++) {
        int ih = oh * s + a - p;
        if (ih < 0 || ih >= H) continue;
        for (int b = 0; b < k; b++) {
          int iw = ow * s + b - p;
          if (iw < 0 || iw >= W) continue;
          if (ldf(x, dtx, ((n * H + ih) * W + iw) * C + c) == best) { arg = a * k + b; found = true; break; }
        }
      }
    }
    stf(y, dty, i, nan ? tr_nan() : best);
    mask[i] = (signed char)arg;
  }
}

/* dx[n, ih, iw, c] = sum over the windows covering it whose winning tap is this pixel (tap order) */
TR_GLOBAL void tr_maxpool_bwd(const void* dy, int dtdy, const signed char* mask, void* dx, int dtdx, int N, int H,
                              int W, int C, int Ho, int Wo, int k, int s, int p) {
  GRID_LOOP(i, (i64)N * H * W * C) {
    int c = (int)(i % C); i64 t = i / C; int iw = (int)(t % W); t /= W; int ih = (int)(t % H); i64 n = t / H;
    float acc = 0.0f;
    for (int a = 0; a < k; a++) {
      int ohn = ih + p - a;
      if (ohn < 0 || ohn % s) continue;
      int oh = ohn / s;
      if (oh >= Ho) continue;
      for (int b = 0; b < k; b++) {
        int own = iw + p - b;
        if (own < 0 || own % s) continue;
        int ow = own / s;
        if (ow >= Wo) continue;
        i64 o = ((n * Ho + oh) * Wo + ow) * C + c;
        if (mask[o] == a * k + b) acc += ldf(dy, dtdy, o);
      }
    }
    stf(dx, dtdx, i, acc);
  }
}

TR_GLOBAL void tr_avgpool_fwd(const void* x, int dtx, void* y, int dty, int N, int H, int W, int C, int Ho, int Wo,
                              int k, int s, int p, float inv_kk) {
  GRID_LOOP(i, (i64)N * Ho * Wo * C) {
    int c = (int)(i % C); i64 t = i / C; int ow = (int)(t % Wo); t /= Wo; int oh = (int)(t % Ho); i64 n = t / Ho;
    float acc = 0.0f;
    for (int a = 0; a < k; a++) {
      int ih = oh * s + a - p;
      if (ih < 0 || ih >= H) continue;
      for (int b = 0; b < k; b++) {
        int iw = ow * s + b - p;
        if (iw < 0 || iw >= W) continue;
        acc += ldf(x, dtx, ((n * H + ih) * W + iw) * C + c);
      }
    }
    stf(y, dty, i, acc * inv_kk);
  }
}

TR_GLOBAL void tr_avgpool_bwd(const void* dy, int dtdy, void* dx, int dtdx, int N, int H, int W, int C, int Ho,
                              int Wo, int k, int s, int p, float inv_kk) {
  GRID_LOOP(i, (i64)N * H * W * C) {
    int c = (int)(i % C); i64 t = i / C; int iw = (int)(t % W); t /= W; int ih = (int)(t % H); i64 n = t / H;
    float acc = 0.0f;
    for (int a = 0; a < k; a++) {
      int ohn = ih + p - a;
      if (ohn < 0 || ohn % s) continue;
      int oh = ohn / s;
      if (oh >= Ho) continue;
      for (int b = 0; b < k; b++) {
        int own = iw + p - b;
        if (own < 0 || own % s) continue;
        int ow = own / s;
        if (ow >= Wo) continue;
        acc += ldf(dy, dtdy, ((n * Ho + oh) * Wo + ow) * C + c);
      }
    }
    stf(dx, dtdx, i, acc * inv_kk);
  }
}

TR_GLOBAL void tr_gap_fwd(const void* x, int dtx, void* y, int dty, int N, int HW, int C, float inv_hw) {
  GRID_LOOP(i, (i64)N * C) {
    int c = (int)(i % C); i64 n = i / C;
    float acc = 0.0f;
    for (int q = 0; q < HW; q++) acc += ldf(x, dtx, (n * HW + q) * C + c);
    stf(y, dty, i, acc * inv_hw);
  }
}

TR_GLOBAL void tr_gap_bwd(const void* dy, int dtdy, void* dx, int dtdx, int N, int HW, int C, float inv_hw) {
  GRID_LOOP(i, (i64)N * HW * C) {
    int c = (int)(i % C); i64 n = i / ((i64)HW * C);
    stf(dx, dtdx, i, ldf(dy, dtdy, n * C + c) * inv_hw);
  }
}

