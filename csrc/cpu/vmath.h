/* vmath.h: what lets the CPU kernels' loops vectorize.
 *
 * MYOPS_CPU_VEC, on a kernel's loop function, compiles it three times (x86-64 Linux, GCC 12 or later): AVX-512
 * (x86-64-v4), AVX2 + FMA (x86-64-v3) and the baseline (SSE2); the loader's ifunc resolver picks one per process
 * from the CPU it runs on. The default build targets SSE2, two doubles a vector; on a Zen 4 core the v4 clone
 * runs the same loop on eight. The clones compute the same bits: the build is ISO C (-std=c11 implies
 * -ffp-contract=off, so no clone fuses a multiply-add the others round twice), the sums keep a fixed order, and the
 * math below is plain arithmetic, not a library call whose vector and scalar versions may differ.
 * MYOPS_CFLAGS=-DMYOPS_CPU_NO_CLONES at build time leaves one baseline copy (to time or test it alone).
 *
 * myops_exp / myops_expf: exp without a libm call, so a loop over them vectorizes (glibc's exp is a scalar call;
 * it was most of the CPU softmax's time).
 *   exp(x) = 2^k * exp(r),  k = round(x / ln2),  r = x - k ln2 (ln2 in two parts: k * LN2_HI is exact),
 *   |r| <= ln2 / 2;  exp(r) by its Taylor series to r^13 (double; truncation < 5e-18 relative) or r^7 (float;
 *   < 6e-9), in Horner form (within about one ulp, like glibc's and Sleef's);  2^k = 2^k1 * 2^k2 with
 *   k1 = floor(k / 2), so that underflow to subnormals and zero and overflow to inf come out as IEEE says.
 * k is read off the low mantissa bits of x / ln2 + 1.5 * 2^52 (round to nearest, no float-to-int conversion, which
 * is undefined for NaN). NaN passes through the clamps (the comparisons are false), and comes out NaN.
 */
#ifndef MYOPS_CPU_VMATH_H
#define MYOPS_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* GCC 12 introduced arch=x86-64-vN in target_clones; clang took it later (llvm-project#55830) and crashed on it
 * before, so other compilers build the baseline alone. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !defined(MYOPS_CPU_NO_CLONES)
#define MYOPS_CPU_VEC __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MYOPS_CPU_VEC
#endif
/* Every helper that a MYOPS_CPU_VEC function calls: always inlined, so that each clone compiles it for its own ISA.
 * GCC otherwise outlined some of them (whole, or a .part of them) once, for the baseline, depending on what else was
 * inlined around them: layer_norm's fp32 moments, the fp64 row loads and stores, and (when the row maximum grew)
 * softmax's whole fp32 row forward ran at SSE2 width inside the AVX-512 clone, 3.5x slower. `nm` on a kernel object
 * lists what stays out of line: only the f16 conversions, which pick F16C at run time (common.h). */
#define MYOPS_CPU_HOT static inline __attribute__((always_inline))

MYOPS_CPU_HOT double myops_exp(double x) {
  x = x < -746.0 ? -746.0 : x; /* below: exp(x) rounds to 0 */
  x = x > 710.0 ? 710.0 : x;   /* above: inf */
  const double shift = 0x1.8p52;
  double kd = x * 0x1.71547652b82fep0 + shift;
  uint64_t u;
  memcpy(&u, &kd, 8);
  kd -= shift;
  const double r = (x - kd * 0x1.62e42fefa3800p-1) - kd * 0x1.ef35793c7673p-45;
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  u &= (UINT64_C(1) << 52) - 1;             /* 2^51 + k */
  const uint64_t k1 = (u >> 1);              /* 2^50 + floor(k / 2) */
  const uint64_t k2 = u - k1;                /* 2^50 + k - floor(k / 2) */
  const uint64_t b1 = (k1 - (UINT64_C(1) << 50) + 1023) << 52, b2 = (k2 - (UINT64_C(1) << 50) + 1023) << 52;
  double s1, s2;
  memcpy(&s1, &b1, 8);
  memcpy(&s2, &b2, 8);
  return p * s1 * s2;
}

/* U20: a degree-5 minimax polynomial of exp on [-ln2/2, ln2/2] (fit here by reweighted least squares; ATen's
 * exp_u20, the exp of eager's CPU softmax kernels, has nearly the same coefficients) instead of the series to r^7:
 * within about 2.2 ulp instead of 1.1 over [-87, 88], with the same range reduction and scaling. */
/* exp(r) for x = k ln2 + r, and in *u the pattern of x / ln2 + 1.5 2^23, whose low 23 bits are 2^22 + k. */
MYOPS_CPU_HOT float myops_expf_core_(float x, int u20, uint32_t* u) {
  const float shift = 0x1.8p23f;
  float kd = x * 0x1.715476p0f + shift;
  memcpy(u, &kd, 4);
  kd -= shift;
  const float r = (x - kd * 0x1.62e4p-1f) - kd * 0x1.7f7d1cp-20f;
  float p;
  if (u20) {
    p = 0x1.0fa806p-7f; /* 0.00829029 */
    p = p * r + 0x1.573a5ap-5f; /* 0.0418979 */
    p = p * r + 0x1.555a6cp-3f; /* 0.166676 */
    p = p * r + 0x1.fffdc6p-2f; /* 0.499992 */
    p = p * r + 0x1.fffff6p-1f; /* 0.99999970 */
    p = p * r + 1.0f;
  } else {
    p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
  }
  return p;
}
MYOPS_CPU_HOT float myops_expf_(float x, int u20) {
  x = x < -104.0f ? -104.0f : x;
  x = x > 89.0f ? 89.0f : x;
  uint32_t u;
  const float p = myops_expf_core_(x, u20, &u);
  u &= (UINT32_C(1) << 23) - 1;              /* 2^22 + k */
  const uint32_t k1 = u >> 1, k2 = u - k1;   /* 2^21 + floor(k / 2), 2^21 + the rest */
  const uint32_t b1 = (k1 - (UINT32_C(1) << 21) + 127) << 23, b2 = (k2 - (UINT32_C(1) << 21) + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, 4);
  memcpy(&s2, &b2, 4);
  return p * s1 * s2;
}
MYOPS_CPU_HOT float myops_expf(float x) { return myops_expf_(x, 0); }
/* myops_expf_u20 for |x| <= 87 alone (the caller checks: myops_within_87f): the same bits, with 2^k as one factor
 * (k in [-126, 126]: a normal float), where the two factors of 2^k above keep results below 2^-126 and near overflow
 * right; either way the result is p 2^k rounded once (p 2^k1 is exact). log_softmax's backward, whose exps of
 * log-probabilities are most of its time: cpu_ab, one thread, us (2-core EPYC VM), fp32 [1024, 4096] 1391-1480 ->
 * 1239-1335, [1024, 1024] 274 -> 226; bf16 1730 -> 1492, 401 -> 344; fp16 1591 -> 1393, 346 -> 283; rows of 33 and
 * 16384 level; max difference 0. */
MYOPS_CPU_HOT float myops_expf_u20_mid(float x) {
  uint32_t u;
  const float p = myops_expf_core_(x, 1, &u);
  const uint32_t b = (u - (UINT32_C(1) << 22) + 127) << 23; /* (u's bits above the low 9 shift out) */
  float s;
  memcpy(&s, &b, 4);
  return p * s;
}
/* Whether |v[i]| <= 87 for every i (not for inf or NaN): the largest magnitude's bit pattern, an integer max
 * (a float min / max reduction does not vectorize without -ffast-math). */
MYOPS_CPU_HOT int myops_within_87f(const float* v, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    memcpy(&u, v + i, 4);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  return m <= 0x42ae0000u; /* 87.0f */
}
/* The same for bf16 v (the high 16 bits of the fp32 pattern). */
MYOPS_CPU_HOT int myops_within_87_bf16(const uint16_t* v, int64_t n) {
  uint16_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t u = v[i] & 0x7fffu;
    m = u > m ? u : m;
  }
  return m <= 0x42aeu;
}
/* For the fp32 work of softmax, log_softmax, cross_entropy and swiglu (where the outputs' rounding hides the
 * difference): one thread, 2^20 arguments, AVX-512: 258 -> 211 us. */
MYOPS_CPU_HOT float myops_expf_u20(float x) { return myops_expf_(x, 1); }

/* exp and fmin for the elementwise bodies, which are written once over T (float or double). MYOPS_FMIN(a, b) is
 * fmin for b not NaN (a NaN gives b, as fmin does), written as x86's minps so that it vectorizes. */
#define MYOPS_EXP(x) _Generic((x), float: myops_expf, default: myops_exp)(x)
#define MYOPS_EXP_U20(x) _Generic((x), float: myops_expf_u20, default: myops_exp)(x) /* (fp64: the full series) */
MYOPS_CPU_HOT float myops_fminf_(float a, float b) { return a < b ? a : b; }
MYOPS_CPU_HOT double myops_fmin_(double a, double b) { return a < b ? a : b; }
#define MYOPS_FMIN(a, b) _Generic((a), float: myops_fminf_, default: myops_fmin_)(a, b)

#endif /* MYOPS_CPU_VMATH_H */
