
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
