/* common.h: what every CPU kernel file shares: fp16/bf16 <-> fp32 conversion (storage is uint16_t; math is fp32,
 * or fp64 for fp64 tensors) and row loading/storing for strided operands. C11, no torch headers. */
#ifndef MYOPS_CPU_COMMON_H
#define MYOPS_CPU_COMMON_H

#include <stdint.h>
#include <string.h>
#include "../myops.h"
#include "vmath.h" /* (MYOPS_CPU_HOT) */

MYOPS_CPU_HOT float myops_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

MYOPS_CPU_HOT uint16_t myops_f32_to_bf16(float f) { /* round to nearest even; NaN stays a (quiet) NaN */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

MYOPS_CPU_HOT float myops_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13); /* inf / nan */
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else { /* subnormal half: value = man * 2^-24 */
    float f = (float)man * 5.9604644775390625e-08f;
    memcpy(&u, &f, 4);
    u |= sign;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

MYOPS_CPU_HOT uint16_t myops_f32_to_f16(float f) { /* round to nearest even, overflow to inf */
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return sign | 0x7e00u;           /* nan */
  if (au >= 0x477ff000u) return sign | 0x7c00u;          /* rounds to >= 65520: inf */
  if (au < 0x38800000u) {                                /* below the smallest normal half, 2^-14 */
    float a;
    memcpy(&a, &au, 4);
    /* adding 0.5 (2^-1) aligns the mantissa so that its low bits are the half subnormal, rounded even */
    float t = a + 0.5f;
    uint32_t tu;
    memcpy(&tu, &t, 4);
    return sign | (uint16_t)(tu - 0x3f000000u);
  }
  const uint32_t mant_odd = (au >> 13) & 1u;
  uint32_t r = au + 0xfffu + mant_odd; /* round to nearest even at bit 13 */
  r -= (112u << 23);
  return sign | (uint16_t)(r >> 13);
}

/* fp16 <-> fp32 over unit-stride runs in hardware (F16C: 8 a vector, round to nearest even, subnormals kept) where
 * the CPU has it, chosen at run time: the bit-level conversions above vectorize poorly, which left fp16 elementwise
 * ops 3-4x behind eager (2-core EPYC VM). The functions carry their own target, so the file builds for any x86-64;
 * myops_f16c() says whether they may run (else the portable loops do). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
__attribute__((target("avx,f16c"), unused)) static void myops_f16c_load8(const uint16_t* s, int64_t n, float* d) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(d + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + k))));
  for (; k < n; ++k) d[k] = _cvtsh_ss(s[k]);
}
__attribute__((target("avx,f16c"), unused)) static void myops_f16c_store8(uint16_t* d, int64_t n, const float* s) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm_storeu_si128((__m128i*)(d + k), _mm256_cvtps_ph(_mm256_loadu_ps(s + k), _MM_FROUND_TO_NEAREST_INT));
  for (; k < n; ++k) d[k] = _cvtss_sh(s[k], _MM_FROUND_TO_NEAREST_INT);
}
/* (16 a vector where AVX-512 is there: the conversions are most of an fp16 elementwise op's instructions) */
__attribute__((target("avx512f,avx,f16c"), unused)) static void myops_f16c_load16(const uint16_t* s, int64_t n,
                                                                                 float* d) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm512_storeu_ps(d + k, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(s + k))));
  myops_f16c_load8(s + k, n - k, d + k);
}
__attribute__((target("avx512f,avx,f16c"), unused)) static void myops_f16c_store16(uint16_t* d, int64_t n,
                                                                                  const float* s) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm256_storeu_si256((__m256i*)(d + k), _mm512_cvtps_ph(_mm512_loadu_ps(s + k), _MM_FROUND_TO_NEAREST_INT));
  myops_f16c_store8(d + k, n - k, s + k);
}
/* 0: no F16C (the portable loops), 1: F16C, 2: F16C and AVX-512. */
static inline int myops_f16c(void) {
  static int known = -1; /* (every thread computes the same value: a benign race, kept atomic) */
  int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    if (v && __builtin_cpu_supports("avx512f")) v = 2;
    __atomic_store_n(&known, v, __ATOMIC_RELAXED);
  }
  return v;
}
static inline void myops_f16c_load(const uint16_t* s, int64_t n, float* d) {
  if (myops_f16c() == 2) myops_f16c_load16(s, n, d);
  else myops_f16c_load8(s, n, d);
}
static inline void myops_f16c_store(uint16_t* d, int64_t n, const float* s) {
  if (myops_f16c() == 2) myops_f16c_store16(d, n, s);
  else myops_f16c_store8(d, n, s);
}
#else
static inline int myops_f16c(void) { return 0; }
static inline void myops_f16c_load(const uint16_t* s, int64_t n, float* d) { (void)s; (void)n; (void)d; }
static inline void myops_f16c_store(uint16_t* d, int64_t n, const float* s) { (void)s; (void)n; (void)d; }
#endif

/* Element size in bytes of a dtype code, or 0 if unknown. */
MYOPS_CPU_HOT int64_t myops_dtype_size(int dtype) {
  switch (dtype) {
    case MYOPS_F32: return 4;
    case MYOPS_F16: case MYOPS_BF16: return 2;
    case MYOPS_F64: return 8;
    default: return 0;
  }
}

/* fp16 runs p[0], p[cs], ... to and from fp32: unit strides in hardware where the CPU can. Not inlined (the
 * portable loop, strided operands only now, need not be copied into every clone of every kernel). */
__attribute__((noinline, unused)) static void myops_load_f16(const uint16_t* s, int64_t cs, int64_t n, float* d) {
  if (cs == 1 && myops_f16c()) {
    myops_f16c_load(s, n, d);
    return;
  }
  for (int64_t k = 0; k < n; ++k) d[k] = myops_f16_to_f32(s[k * cs]);
}
__attribute__((noinline, unused)) static void myops_store_f16(uint16_t* d, int64_t cs, int64_t n, const float* s) {
  if (cs == 1 && myops_f16c()) {
    myops_f16c_store(d, n, s);
    return;
  }
  for (int64_t k = 0; k < n; ++k) d[k * cs] = myops_f32_to_f16(s[k]);
}

/* Loads n elements p[0], p[cs], ... into fp32 (any dtype but fp64). cs = 0 (a broadcast operand: the gradient of
 * x.sum(), an expanded bias) converts its one element once: fp16 went through the bit-level conversion per element
 * (no F16C off unit stride), which left `op(x).sum().backward()` at 2-3x eager's time in fp16. */
MYOPS_CPU_HOT void myops_load_f32(int dtype, const void* p, int64_t cs, int64_t n, float* dst) {
  int64_t k;
  const int64_t n0 = n;
  if (cs == 0 && n > 1) n = 1; /* (then filled) */
  switch (dtype) {
    case MYOPS_F32: { const float* s = (const float*)p; for (k = 0; k < n; ++k) dst[k] = s[k * cs]; break; }
    case MYOPS_F16: myops_load_f16((const uint16_t*)p, cs, n, dst); break;
    case MYOPS_BF16: { const uint16_t* s = (const uint16_t*)p; for (k = 0; k < n; ++k) dst[k] = myops_bf16_to_f32(s[k * cs]); break; }
    default: break;
  }
  for (k = n; k < n0; ++k) dst[k] = dst[0];
}

MYOPS_CPU_HOT void myops_store_f32(int dtype, void* p, int64_t cs, int64_t n, const float* src) {
  int64_t k;
  switch (dtype) {
    case MYOPS_F32: { float* d = (float*)p; for (k = 0; k < n; ++k) d[k * cs] = src[k]; break; }
    case MYOPS_F16: myops_store_f16((uint16_t*)p, cs, n, src); break;
    case MYOPS_BF16: { uint16_t* d = (uint16_t*)p; for (k = 0; k < n; ++k) d[k * cs] = myops_f32_to_bf16(src[k]); break; }
    default: break;
  }
}

#endif /* MYOPS_CPU_COMMON_H */
