/* ------------------------------------------------------------------ copies, fills */

TR_GLOBAL void tr_convert(const void* src, int dts, void* dst, int dtd, i64 n) {
  if (is_int_dt(dts) && is_int_dt(dtd)) {
    GRID_LOOP(i, n) sti(dst, dtd, i, ldi(src, dts, i));
  } else {
    GRID_LOOP(i, n) stf(dst, dtd, i, ldf(src, dts, i));
  }
}

TR_GLOBAL void tr_fill(void* dst, int dt, i64 n, float v) {
  GRID_LOOP(i, n) stf(dst, dt, i, v);
}

/* y (rows, cy) = x (rows, cx) zero-padded on the channel axis */
TR_GLOBAL void tr_pad_channels(const void* x, int dtx, void* y, int dty, i64 rows, int cx, int cy) {
  GRID_LOOP(i, rows * cy) {
    i64 r = i / cy; int c = (int)(i % cy);
    stf(y, dty, i, c < cx ? ldf(x, dtx, r * cx + c) : 0.0f);
  }
}

/* dx (rows, cx) = dy (rows, cy)[:, :cx] */
TR_GLOBAL void tr_crop_channels(const void* dy, int dtdy, void* dx, int dtdx, i64 rows, int cx, int cy) {
  GRID_LOOP(i, rows * cx) {
    i64 r = i / cx; int c = (int)(i % cx);
    stf(dx, dtdx, i, ldf(dy, dtdy, r * cy + c));
  }
}

/* ------------------------------------------------------------------ element-wise */

TR_GLOBAL void tr_add(const void* a, int dta, const void* b, int dtb, void* y, int dty, i64 n) {
  GRID_LOOP(i, n) stf(y, dty, i, ldf(a, dta, i) + ldf(b, dtb, i));
}

/* y += alpha * x, alpha a scalar operand */
TR_GLOBAL void tr_axpy(const void* x, int dtx, void* y, int dty, const void* alpha, int dta, i64 n) {
  float a = (float)lds(alpha, dta, 1.0);
  GRID_LOOP(i, n) stf(y, dty, i, ldf(y, dty, i) + a * ldf(x, dtx, i));
}

/* dx = dy * mask * scale (ReLU backward: scale 1; dropout backward: 1/(1-p)) */
TR_GLOBAL void tr_mul_mask(const void* dy, int dtdy, const signed char* mask, void* dx, int dtdx, i64 n, float scale) {
  GRID_LOOP(i, n) {
    float v = ldf(dy, dtdy, i) * (float)mask[i];
    if (scale != 1.0f) v *= scale;
    stf(dx, dtdx, i, v);
  }
}

/* ReLU backward from its output y = relu(x): dx = dy * (y > 0), the same product as tr_mul_mask's
   with the mask of x (y > 0 exactly where x > 0: NaN and -0 give NaN and +0). dx may be dy or y. */
TR_GLOBAL void tr_relu_bwd_y(const void* dy, int dtdy, const void* y, int dty, void* dx, int dtdx, i64 n) {
  GRID_LOOP(i, n) {
    float v = ldf(dy, dtdy, i) * (ldf(y, dty, i) > 0.0f ? 1.0f : 0.0f);
    stf(dx, dtdx, i, v);
  }
}

/* activation codes: 0 relu, 1 tanh, 2 sigmoid, 3 silu, 4 relu6, 5 leaky_relu, 6 hardswish, 7 elu */
TR_DEV float tr_sigmoid(float x) { return 0.5f * tanhf(0.5f * x) + 0.5f; }

TR_DEV float act_f(int act, float x) {
  switch (act) {
    case 0: return (x > 0.0f || tr_isnan(x)) ? x : 0.0f;
    case 1: return tanhf(x);
    case 2: return tr_sigmoid(x);
    case 3: return x * tr_sigmoid(x);
    case 4: return tr_isnan(x) ? x : fminf(fmaxf(x, 0.0f), 6.0f);
    case 5: return x > 0.0f ? x : x * 0.01f;
    case 6: { float t = x + 3.0f; t = tr_isnan(t) ? t : fminf(fmaxf(t, 0.0f), 6.0f); return x * t * (1.0f / 6.0f); }
    default: { float e = expm1f(fminf(x, 0.0f)); return tr_isnan(x) ? x : fmaxf(e, x); }
  }
}

TR_DEV float act_df(int act, float x) {
  switch (act) {
    case 0: return x > 0.0f ? 1.0f : 0.0f;
    case 1: { float t = tanhf(x); return 1.0f - t * t; }
    case 2: { float s = tr_sigmoid(x); return (1.0f - s) * s; }
    case 3: { float s = tr_sigmoid(x); return ((1.0f - s) * x + 1.0f) * s; }
    case 4: return (x > 0.0f && x < 6.0f) ? 1.0f : 0.0f;
    case 5: return x > 0.0f ? 1.0f : 0.01f;
    case 6: return x <= -3.0f ? 0.0f : (x < 3.0f ? x * (1.0f / 3.0f) + 0.5f : 1.0f);
    default: return expf(fminf(x, 0.0f));
  }
}

/* y = f(x); relu also writes mask = (x > 0) as int8 when mask is not null. y may be x. */
TR_GLOBAL void tr_act_fwd(int act, const void* x, int dtx, void* y, int dty, signed char* mask, i64 n) {
  GRID_LOOP(i, n) {
    float v = ldf(x, dtx, i);
    if (mask) mask[i] = v > 0.0f ? 1 : 0;
    stf(y, dty, i, act_f(act, v));
  }
}

/* dx = f'(x) * dy; dx may be x or dy. */
TR_GLOBAL void tr_act_bwd(int act, const void* dy, int dtdy, const void* x, int dtx, void* dx, int dtdx, i64 n) {
  GRID_LOOP(i, n) {
    float g = act_df(act, ldf(x, dtx, i));
    stf(dx, dtdx, i, g * ldf(dy, dtdy, i));
  }
}

/* ema = decay * ema + (1 - decay) * w; nothing when has_nan is set (the optimizer skipped the step) */
TR_GLOBAL void tr_ema(const void* w, int dtw, void* e, int dte, const void* decay, int dtd, const void* has_nan,
                      int dth, i64 n) {
  if (lds(has_nan, dth, 0.0) != 0.0) return;
  float d = (float)lds(decay, dtd, 0.0);
  float od = (float)(1.0 - lds(decay, dtd, 0.0));
  GRID_LOOP(i, n) stf(e, dte, i, ldf(e, dte, i) * d + od * ldf(w, dtw, i));
}

