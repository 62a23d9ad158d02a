/* sum: out[m] = sum_k x[m * sM + k * sK], x viewed as [M, K], out [M] contiguous in x's dtype. Accumulated in
 * fp64 for every dtype (cheap on a CPU, and closer to the float64 reference than fp32 pairwise sums). */
#include "common.h"

int myops_sum_cpu(void* out, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  float buf[256];
  for (int64_t m = 0; m < M; ++m) {
    double acc = 0.0;
    if (dtype == MYOPS_F64) {
      const double* p = (const double*)x + m * sM;
      for (int64_t k = 0; k < K; ++k) acc += p[k * sK];
      ((double*)out)[m] = acc;
      continue;
    }
    const char* p = (const char*)x + m * sM * es;
    for (int64_t k0 = 0; k0 < K; k0 += 256) {
      const int64_t n = K - k0 < 256 ? K - k0 : 256;
      myops_load_f32(dtype, p + k0 * sK * es, sK, n, buf);
      for (int64_t k = 0; k < n; ++k) acc += buf[k];
    }
    const float r = (float)acc;
    myops_store_f32(dtype, (char*)out + m * es, 1, 1, &r);
  }
  return MYOPS_OK;
}
