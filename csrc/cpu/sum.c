/* sum: out[m] = sum_k x[m * sM + k * sK], x viewed as [M, K], out [M] contiguous in x's dtype. Accumulated in
 * fp64 for every dtype (cheap on a CPU, and closer to the float64 reference than fp32 pairwise sums).
 * Two loop orders: along k per output when k is the contiguous dim (rows), else blocks of 256 outputs swept
 * together down k (columns: reading a whole column per output would touch a new cache line per element). */
#include "common.h"
#include "vmath.h"

#define MYOPS_SUM_BLOCK 256

/* MYOPS_SUM_LANES running sums, added in a fixed order at the end: one add chain would wait out the FP add latency
 * on every element, and 16 independent fp64 sums fill two AVX-512 (four AVX2) adders' pipelines. Four sums ran the
 * fp32 row sum at about a quarter of eager's speed (1 thread, [1024, 1024], 2-core EPYC VM: 174 us against 45). */
#define MYOPS_SUM_LANES 16
static inline double sum_lanes(const double* a) {
  double h[8];
  for (int u = 0; u < 8; ++u) h[u] = a[u] + a[u + 8];
  return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

MYOPS_CPU_VEC static void sum_rows(void* out, const char* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype,
                     int64_t es) {
  float buf[MYOPS_SUM_BLOCK];
  for (int64_t m = 0; m < M; ++m) {
    double a[MYOPS_SUM_LANES] = {0.0};
    if (dtype == MYOPS_F64) {
      const double* p = (const double*)x + m * sM;
      int64_t k = 0;
      for (; k + MYOPS_SUM_LANES <= K; k += MYOPS_SUM_LANES)
        for (int u = 0; u < MYOPS_SUM_LANES; ++u) a[u] += p[(k + u) * sK];
      for (; k < K; ++k) a[k % MYOPS_SUM_LANES] += p[k * sK];
      ((double*)out)[m] = sum_lanes(a);
      continue;
    }
    const char* p = x + m * sM * es;
    for (int64_t k0 = 0; k0 < K; k0 += MYOPS_SUM_BLOCK) {
      const int64_t n = K - k0 < MYOPS_SUM_BLOCK ? K - k0 : MYOPS_SUM_BLOCK;
      const float* v = buf;
      if (dtype == MYOPS_F32 && sK == 1) v = (const float*)p + k0;  /* (contiguous fp32: no copy) */
      else myops_load_f32(dtype, p + k0 * sK * es, sK, n, buf);
      int64_t k = 0;
      for (; k + MYOPS_SUM_LANES <= n; k += MYOPS_SUM_LANES)
        for (int u = 0; u < MYOPS_SUM_LANES; ++u) a[u] += v[k + u];
      for (; k < n; ++k) a[k % MYOPS_SUM_LANES] += v[k];
    }
    const float r = (float)sum_lanes(a);
    myops_store_f32(dtype, (char*)out + m * es, 1, 1, &r);
  }
}

MYOPS_CPU_VEC static void sum_cols(void* out, const char* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype,
                     int64_t es) {
  float buf[MYOPS_SUM_BLOCK];
  double acc[MYOPS_SUM_BLOCK];
  for (int64_t m0 = 0; m0 < M; m0 += MYOPS_SUM_BLOCK) {
    const int64_t n = M - m0 < MYOPS_SUM_BLOCK ? M - m0 : MYOPS_SUM_BLOCK;
    for (int64_t i = 0; i < n; ++i) acc[i] = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      const char* p = x + (m0 * sM + k * sK) * es;
      if (dtype == MYOPS_F64) {
        for (int64_t i = 0; i < n; ++i) acc[i] += ((const double*)p)[i * sM];
      } else {
        myops_load_f32(dtype, p, sM, n, buf);
        for (int64_t i = 0; i < n; ++i) acc[i] += buf[i];
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (dtype == MYOPS_F64) {
        ((double*)out)[m0 + i] = acc[i];
      } else {
        const float r = (float)acc[i];
        myops_store_f32(dtype, (char*)out + (m0 + i) * es, 1, 1, &r);
      }
    }
  }
}

int myops_sum_cpu(void* out, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  const int by_cols = sK != 1 && K > 1 && (sM == 1 || (sM < sK && M > 1));
  if (by_cols) sum_cols(out, (const char*)x, M, K, sM, sK, dtype, es);
  else sum_rows(out, (const char*)x, M, K, sM, sK, dtype, es);
  return MYOPS_OK;
}
