
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

