/* sum: out[m] = sum_k x[m * sM + k * sK], x viewed as [M, K], out [M] contiguous in x's dtype. Accumulated in
 * fp64 for every dtype (cheap on a CPU, and closer to the float64 reference than fp32 pairwise sums).
 * Two loop orders: along k per output when k is the contiguous dim (rows), else blocks of 256 outputs swept
 * together down k (columns: reading a whole column per output would touch a new cache line per element). */
#include "common.h"
#include "vmath.h"

#define MYOPS_SUM_BLOCK 256

/* Four running sums: one add chain would wait out the FP add latency on every element. */
MYOPS_CPU_VEC static void sum_rows(void* out, const char* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype,
                     int64_t es) {
  float buf[MYOPS_SUM_BLOCK];
  for (int64_t m = 0; m < M; ++m) {
    double a[4] = {0.0, 0.0, 0.0, 0.0};
    if (dtype == MYOPS_F64) {
      const double* p = (const double*)x + m * sM;
      int64_t k = 0;
      for (; k + 4 <= K; k += 4)
        for (int u = 0; u < 4; ++u) a[u] += p[(k + u) * sK];
      for (; k < K; ++k) a[0] += p[k * sK];
      ((double*)out)[m] = (a[0] + a[1]) + (a[2] + a[3]);
      continue;
    }
    const char* p = x + m * sM * es;
    for (int64_t k0 = 0; k0 < K; k0 += MYOPS_SUM_BLOCK) {
      const int64_t n = K - k0 < MYOPS_SUM_BLOCK ? K - k0 : MYOPS_SUM_BLOCK;
      myops_load_f32(dtype, p + k0 * sK * es, sK, n, buf);
      int64_t k = 0;
      for (; k + 4 <= n; k += 4)
        for (int u = 0; u < 4; ++u) a[u] += buf[k + u];
      for (; k < n; ++k) a[0] += buf[k];
    }
    const float r = (float)((a[0] + a[1]) + (a[2] + a[3]));
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
