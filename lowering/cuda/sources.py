"""CUDA C++ sources of the GPU backend: one NVRTC module holding every kernel.

:data:`SOURCE` is compiled once per process (``cupy.RawModule``, ``-std=c++17``, for the
device's architecture) by :class:`tr_mlir.lowering.cuda.backend.CupyDevice`, and, on a machine
without a GPU, by NVRTC alone (:func:`tr_mlir.lowering.cuda.emulator.nvrtc_compile`, tests) and
by the host C++ compiler under a thread-emulation shim (:mod:`tr_mlir.lowering.cuda.emulator`),
which runs the very same kernels on the CPU against the NumPy reference kernels.

Conventions (kept so that one text compiles for both):

* every kernel is ``TR_GLOBAL void tr_<name>(...)`` with scalar parameters ``int``,
  ``long long`` (``i64``), ``float``, ``double`` or pointers; :func:`signatures` parses them, and
  the launchers check every launch against them;
* arrays of run-time dtype are ``(const void* p, int dt)`` pairs read and written through
  :c:func:`ldf` / :c:func:`stf` (dtype codes :data:`DTYPE_CODES`); scalar operands (learning
  rate, loss scale, NaN flag, Adam step, batch size, ...) are such pointers into the arena, read
  by the kernel (a null pointer means "absent": the documented default), so a captured graph
  stays valid when the host changes them;
* fp16 is stored as ``unsigned short`` and converted with the PTX ``cvt`` instructions (no
  ``cuda_fp16.h``, so NVRTC needs no include path); all arithmetic and accumulation is fp32;
* no warp intrinsics and no dynamic shared memory: block-level cooperation is ``__shared__``
  arrays and ``__syncthreads()`` only (``TR_SHARED``), which the CPU shim emulates;
* ``atomicAdd`` on fp32 is used for column sums (BN statistics, bias and weight gradients)
  into pre-zeroed fp32 accumulators; everything else writes each output element from one thread.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.float32): 0,
    np.dtype(np.float16): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int32): 3,
    np.dtype(np.uint8): 4,
    np.dtype(np.bool_): 4,
    np.dtype(np.int64): 5,
}
"""NumPy dtype -> the ``dt`` code the kernels take."""

BLOCK = 256
"""Threads per block of the element-wise and GEMM kernels."""

GEMM_TILE = 64
"""Output tile (rows and columns) of one GEMM block; the reduction step is 16."""

_DEVICE_PRELUDE = r"""
#define TR_DEV __device__ __forceinline__
#define TR_FUNCTOR __device__
#define TR_GLOBAL extern "C" __global__
#define TR_SHARED __shared__
typedef unsigned short f16_t;
TR_DEV float h2f(f16_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
TR_DEV f16_t f2h(float f) { f16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
TR_DEV unsigned long long tr_mulhi64(unsigned long long a, unsigned long long b) { return __umul64hi(a, b); }
TR_DEV float tr_inf() { return __int_as_float(0x7f800000); }
TR_DEV float tr_nan() { return __int_as_float(0x7fffffff); }
TR_DEV void tr_atomic_add(float* p, float v) { atomicAdd(p, v); }
"""

KERNELS_CU = r"""
typedef long long i64;
typedef unsigned long long u64;

/* dtype codes: 0 f32, 1 f16, 2 i8, 3 i32, 4 u8/bool, 5 i64 */
TR_DEV float ldf(const void* p, int dt, i64 i) {
  switch (dt) {
    case 0: return ((const float*)p)[i];
    case 1: return h2f(((const f16_t*)p)[i]);
    case 2: return (float)((const signed char*)p)[i];
    case 3: return (float)((const int*)p)[i];
    case 4: return (float)((const unsigned char*)p)[i];
    default: return (float)((const i64*)p)[i];
  }
}
TR_DEV i64 ldi(const void* p, int dt, i64 i) {
  switch (dt) {
    case 0: return (i64)((const float*)p)[i];
    case 1: return (i64)h2f(((const f16_t*)p)[i]);
    case 2: return (i64)((const signed char*)p)[i];
    case 3: return (i64)((const int*)p)[i];
    case 4: return (i64)((const unsigned char*)p)[i];
    default: return ((const i64*)p)[i];
  }
}
TR_DEV void stf(void* p, int dt, i64 i, float v) {
  switch (dt) {
    case 0: ((float*)p)[i] = v; break;
    case 1: ((f16_t*)p)[i] = f2h(v); break;
    case 2: ((signed char*)p)[i] = (signed char)v; break;
    case 3: ((int*)p)[i] = (int)v; break;
    case 4: ((unsigned char*)p)[i] = (unsigned char)v; break;
    default: ((i64*)p)[i] = (i64)v;
  }
}
TR_DEV void sti(void* p, int dt, i64 i, i64 v) {
  switch (dt) {
    case 0: ((float*)p)[i] = (float)v; break;
    case 1: ((f16_t*)p)[i] = f2h((float)v); break;
    case 2: ((signed char*)p)[i] = (signed char)v; break;
    case 3: ((int*)p)[i] = (int)v; break;
    case 4: ((unsigned char*)p)[i] = (unsigned char)v; break;
    default: ((i64*)p)[i] = v;
  }
}
TR_DEV bool is_int_dt(int dt) { return dt >= 2; }
/* A scalar operand: element 0 of (p, dt), or dflt when p is null. */
TR_DEV double lds(const void* p, int dt, double dflt) {
  if (!p) return dflt;
  if (dt == 0) return (double)((const float*)p)[0];
  if (dt == 1) return (double)h2f(((const f16_t*)p)[0]);
  return (double)ldi(p, dt, 0);
}
TR_DEV bool tr_isnan(float v) { return v != v; }
TR_DEV bool tr_finite(float v) { return (v - v) == 0.0f; }

#define TR_TID ((i64)blockIdx.x * blockDim.x + threadIdx.x)
#define TR_STRIDE ((i64)gridDim.x * blockDim.x)
#define GRID_LOOP(i, n) for (i64 i = TR_TID; i < (n); i += TR_STRIDE)

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

/* ema = decay * ema + (1 - decay) * w */
TR_GLOBAL void tr_ema(const void* w, int dtw, void* e, int dte, const void* decay, int dtd, i64 n) {
  float d = (float)lds(decay, dtd, 0.0);
  float od = (float)(1.0 - lds(decay, dtd, 0.0));
  GRID_LOOP(i, n) stf(e, dte, i, ldf(e, dte, i) * d + od * ldf(w, dtw, i));
}

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
    /* pass 1: max and first arg-max, sum of z */
    float mx = -tr_inf(), sz = 0.0f;
    int am = K;
    if (live)
      for (int c = lane; c < K; c += SM_LANES) {
        float v = ldf(z, dtz, off + c);
        sz += v;
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
          float lb = lse - (1.0f - lsm) * zy - lsm * (zsum / (float)K);
          acc_loss[gi] += (double)lb;
          float hit1 = argmax == y ? 1.0f : 0.0f;
          acc_1[gi] += hit1;
          acc_5[gi] += K >= 5 ? (above < 5.0f ? 1.0f : 0.0f) : hit1;
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

/* ------------------------------------------------------------------ dropout (NumPy's Philox4x64-10) */

TR_DEV void philox_round(u64* ctr, const u64* key) {
  u64 lo0 = 0xD2E7470EE14C6C93ULL * ctr[0], hi0 = tr_mulhi64(0xD2E7470EE14C6C93ULL, ctr[0]);
  u64 lo1 = 0xCA5A826395121157ULL * ctr[2], hi1 = tr_mulhi64(0xCA5A826395121157ULL, ctr[2]);
  u64 c1 = ctr[1], c3 = ctr[3];
  ctr[0] = hi1 ^ c1 ^ key[0];
  ctr[1] = lo1;
  ctr[2] = hi0 ^ c3 ^ key[1];
  ctr[3] = lo0;
}

/* 32-bit draw number i of numpy.random.Philox(key=seed, counter=calls << 64) */
TR_DEV unsigned int philox_u32(u64 seed, u64 calls, i64 i) {
  u64 q = (u64)i >> 1;
  u64 ctr[4] = {(q >> 2) + 1, calls, 0, 0};
  u64 key[2] = {seed, 0};
  for (int r = 0; r < 10; r++) {
    if (r) { key[0] += 0x9E3779B97F4A7C15ULL; key[1] += 0xBB67AE8584CAA73BULL; }
    philox_round(ctr, key);
  }
  u64 word = ctr[q & 3];
  return (i & 1) ? (unsigned int)(word >> 32) : (unsigned int)(word & 0xffffffffULL);
}

TR_GLOBAL void tr_dropout_fwd(const void* x, int dtx, void* y, int dty, signed char* mask, i64 n, const int* rng,
                              float p, float scale) {
  u64 seed = (u64)(unsigned int)rng[0], calls = (u64)(unsigned int)rng[1];
  GRID_LOOP(i, n) {
    float u = (float)(philox_u32(seed, calls, i) >> 8) * (1.0f / 16777216.0f);
    bool keep = u >= p;
    mask[i] = keep ? 1 : 0;
    stf(y, dty, i, (ldf(x, dtx, i) * (keep ? 1.0f : 0.0f)) * scale);
  }
}

TR_GLOBAL void tr_dropout_advance(int* rng) {
  if (TR_TID == 0) rng[1] = (int)(((unsigned int)rng[1] + 1u) & 0x7FFFFFFFu);
}

/* ------------------------------------------------------------------ GEMM and implicit-GEMM conv */
/* C(m, n) = alpha * sum_k A(m, k) B(k, n) [+ beta * C] [+ bias(n)], fp32 accumulation.
   64 x 64 output tile per block of 256 threads (4 x 4 per thread), reduction step 16. mode 1:
   atomically add alpha * AB into an fp32 C (split-K partial sums). */

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
                      int b_kfast, float (*As)[68], float (*Bs)[68]) {
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
        stf(Cp, dtc, o, v);
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
                       float beta, const void* bias, int dtbias, int mode, int splits, int a_kfast, int b_kfast) {
  TR_SHARED float As[16][68];
  TR_SHARED float Bs[16][68];
  int g = blockIdx.z / splits, split = blockIdx.z % splits;
  i64 k0, k1;
  split_range(K, splits, split, &k0, &k1);
  Strided A = {a, dta, sa0, sa1, sab};
  Strided B = {b, dtb, sb0, sb1, sbb};
  gemm_tile(A, B, c, dtc, M, N, k0, k1, cs0, cs1, csb, alpha, beta, bias, dtbias, mode, g, a_kfast, b_kfast, As, Bs);
}

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
            1, 1, As, Bs);
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
            (int)blockIdx.z, 1, 0, As, Bs);
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
  gemm_tile(A, B, acc, 0, kg, kkc, k0, k1, kkc, 1, (i64)kg * kkc, 1.0f, 0.0f, (const void*)0, 0, 1, g, 0, 0, As, Bs);
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
"""
"""The kernels (after a prelude: :data:`_DEVICE_PRELUDE` on the GPU, the emulator's shim on a CPU)."""

SOURCE = _DEVICE_PRELUDE + KERNELS_CU
"""The NVRTC source of the module."""

NVRTC_OPTIONS = ("-std=c++17",)
"""Options of every compile (the architecture is added per device)."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its kind (``ptr``, ``i32``, ``i64``, ``f32``, ``f64``), name and
    declared C type."""

    kind: str
    name: str
    ctype: str


_SIG = re.compile(r"TR_GLOBAL\s+void\s+(\w+)\s*\(([^)]*)\)", re.S)


def _kind(ctype: str) -> str:
    if "*" in ctype:
        return "ptr"
    words = ctype.replace("const", " ").split()
    if words in (["i64"], ["long", "long"]):
        return "i64"
    if words == ["int"]:
        return "i32"
    if words == ["float"]:
        return "f32"
    if words == ["double"]:
        return "f64"
    raise ValueError(f"kernel parameter type {ctype!r} is not one of pointer, int, i64, float, double")


@functools.lru_cache(maxsize=1)
def signatures() -> dict[str, tuple[Param, ...]]:
    """Kernel name -> its parameters, parsed from :data:`KERNELS_CU` (every ``TR_GLOBAL`` kernel)."""
    out: dict[str, tuple[Param, ...]] = {}
    for name, params in _SIG.findall(KERNELS_CU):
        ps = []
        for p in params.split(","):
            p = " ".join(p.split())
            m = re.match(r"(.*?)(\w+)$", p)
            assert m is not None, p
            ctype = m.group(1).strip()
            ps.append(Param(_kind(ctype), m.group(2), ctype))
        out[name] = tuple(ps)
    return out


def _function_bodies() -> dict[str, str]:
    """Name -> body text of every function definition in :data:`KERNELS_CU` (comments removed,
    brace-matched)."""
    text = re.sub(r"/\*.*?\*/", " ", KERNELS_CU, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^#.*$", " ", text, flags=re.M)
    bodies: dict[str, str] = {}
    for m in re.finditer(r"(\w+)\s*\([^;{}]*\)\s*(?:const\s*)?\{", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            ch = text[i]
            depth += ch == "{"
            depth -= ch == "}"
            i += 1
        name = m.group(1)
        if name in ("if", "for", "while", "switch"):
            continue
        bodies[name] = bodies.get(name, "") + text[m.end():i]
    return bodies


@functools.lru_cache(maxsize=1)
def barrier_kernels() -> frozenset[str]:
    """Kernels that call ``__syncthreads()``, directly or through a helper (the CPU emulator runs
    their threads as cooperating fibers; the others one thread after the other)."""
    bodies = _function_bodies()
    uses = {n for n, b in bodies.items() if "__syncthreads" in b}
    changed = True
    while changed:
        changed = False
        for n, b in bodies.items():
            if n not in uses and any(re.search(rf"\b{u}\b", b) for u in uses):
                uses.add(n)
                changed = True
    return frozenset(n for n in signatures() if n in uses)
