/* ------------------------------------------------------------------ step scalars */

/* flag = 1 when any element is NaN/Inf (clip > 0: clamp in place, only NaN sets the flag).
   The flag is cleared by a fill before the first range. */
TR_GLOBAL void tr_check_nan(void* g, int dtg, i64 n, void* flag, int dtf, float clip) {
  bool bad = false;
  GRID_LOOP(i, n) {
    float v = ldf(g, dtg, i);
    if (clip > 0.0f) {
      if (tr_isnan(v)) bad = true;
      else { float c = fminf(fmaxf(v, -clip), clip); if (c != v) stf(g, dtg, i, c); }
    } else if (!tr_finite(v)) {
      bad = true;
    }
  }
  if (bad) stf(flag, dtf, 0, 1.0f);
}

TR_GLOBAL void tr_grad_scaling(const void* has_nan, int dth, void* scale, int dts) {
  if (TR_TID != 0) return;
  if (lds(has_nan, dth, 0.0) != 0.0) {
    double s = lds(scale, dts, 1.0) * 0.5;
    stf(scale, dts, 0, (float)(s > 1.0 ? s : 1.0));
  }
}

TR_GLOBAL void tr_accum_metrics(const void* bs, int dtb, const void* loss, int dtl, const void* top1, int dt1,
                                const void* top5, int dt5, void* al, int dtal, void* a1, int dta1, void* a5, int dta5) {
  if (TR_TID != 0) return;
  double b = lds(bs, dtb, 0.0);
  stf(al, dtal, 0, (float)(lds(al, dtal, 0.0) + lds(loss, dtl, 0.0) * b));
  stf(a1, dta1, 0, (float)(lds(a1, dta1, 0.0) + lds(top1, dt1, 0.0) * b));
  stf(a5, dta5, 0, (float)(lds(a5, dta5, 0.0) + lds(top5, dt5, 0.0) * b));
}

TR_GLOBAL void tr_scalar_increment(void* step, int dts, const void* has_nan, int dth) {
  if (TR_TID != 0) return;
  if (lds(has_nan, dth, 0.0) != 0.0) return;
  if (is_int_dt(dts)) sti(step, dts, 0, ldi(step, dts, 0) + 1);
  else stf(step, dts, 0, ldf(step, dts, 0) + 1.0f);
}

TR_GLOBAL void tr_adam_bias_correction(const void* step, int dts, const void* b1, int dt1, const void* b2, int dt2,
                                       void* bc1, int dtc1, void* bc2, int dtc2) {
  if (TR_TID != 0) return;
  double t = lds(step, dts, 0.0);
  double v1 = t > 0 ? 1.0 / (1.0 - pow(lds(b1, dt1, 0.9), t)) : 1.0;
  double v2 = t > 0 ? 1.0 / (1.0 - pow(lds(b2, dt2, 0.999), t)) : 1.0;
  stf(bc1, dtc1, 0, (float)v1);
  stf(bc2, dtc2, 0, (float)v2);
}

