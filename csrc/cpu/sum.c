/* sum: out[m] = sum_k x[m * sM + k * sK], x viewed as [M, K], out [M] contiguous in x's dtype. Accumulated in
 * fp64, except within the row path's blocks of 256 (sum_block) and the column path's groups of 8 rows (a last
 * partial group adds in fp64), which add in fp32 (and so overflow near fp32's range where fp64 would not, as eager's
 * fp32 sums do).
 * Two loop orders: along k per output when k is the contiguous dim (rows), else blocks of 256 outputs swept
 * together down k (columns: reading a whole column per output would touch a new cache line per element). */
#include "common.h"
#include "vmath.h"

#define MYOPS_SUM_BLOCK 256

/* fp64 rows: MYOPS_SUM_LANES running sums, added in a fixed order at the end (one add chain would wait out the FP
 * add latency on every element). */
#define MYOPS_SUM_LANES 16
MYOPS_CPU_HOT double sum_lanes(const double* a) {
  double h[8];
  for (int u = 0; u < 8; ++u) h[u] = a[u] + a[u + 8];
  return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

/* The sum of v [n], n <= MYOPS_SUM_BLOCK, in fp32 over 32 lanes (four vectors of 8: GCC vector extensions, which
 * stay in registers, where a lane array of scalars was kept in memory, a store-to-load chain per add), lane j
 * taking v[32 i + j]; the lanes and the last n % 32 elements are added in a fixed order. Each lane adds at most 8
 * terms and the fold 5 levels: a full block's error stays within about 13 fp32 ulps of the sum of its magnitudes
 * (a row's last, partial block adds up to 31 more terms in turn), and the blocks add up in fp64. 1 thread, [1024, 1024] fp32, 2-core EPYC VM, eager 45-46 us: fp64 lanes, 4 of them
 * 174 us, 16 64 us; this 1x. */
typedef float sum_v8f __attribute__((vector_size(32)));
MYOPS_CPU_HOT double sum_block(const float* v, int64_t n) {
  sum_v8f acc[4] = {{0}, {0}, {0}, {0}};
  int64_t k = 0;
  for (; k + 32 <= n; k += 32)
    for (int u = 0; u < 4; ++u) {
      sum_v8f f;
      memcpy(&f, v + k + 8 * u, sizeof f);
      acc[u] += f;
    }
  const sum_v8f h = (acc[0] + acc[2]) + (acc[1] + acc[3]);
  float t = ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
  for (; k < n; ++k) t += v[k];
  return (double)t;
}

/* part (or null): each output's fp64 sum goes to part[m] instead of out (a part of a K split across threads). */
MYOPS_CPU_VEC static void sum_rows(void* out, double* part, const char* x, int64_t M, int64_t K, int64_t sM, int64_t sK,
                                   int dtype, int64_t es) {
  float buf[MYOPS_SUM_BLOCK];
  for (int64_t m = 0; m < M; ++m) {
    if (dtype == MYOPS_F64) {
      double a[MYOPS_SUM_LANES] = {0.0};
      const double* p = (const double*)x + m * sM;
      int64_t k = 0;
      for (; k + MYOPS_SUM_LANES <= K; k += MYOPS_SUM_LANES)
        for (int u = 0; u < MYOPS_SUM_LANES; ++u) a[u] += p[(k + u) * sK];
      for (; k < K; ++k) a[k % MYOPS_SUM_LANES] += p[k * sK];
      *(part ? part + m : (double*)out + m) = sum_lanes(a);
      continue;
    }
    const char* p = x + m * sM * es;
    double total = 0.0;
    for (int64_t k0 = 0; k0 < K; k0 += MYOPS_SUM_BLOCK) {
      const int64_t n = K - k0 < MYOPS_SUM_BLOCK ? K - k0 : MYOPS_SUM_BLOCK;
      const float* v = buf;
      if (dtype == MYOPS_F32 && sK == 1) v = (const float*)p + k0;  /* (contiguous fp32: no copy) */
      else myops_load_f32(dtype, p + k0 * sK * es, sK, n, buf);
      total += sum_block(v, n);
    }
    if (part) {
      part[m] = total;
      continue;
    }
    const float r = (float)total;
    myops_store_f32(dtype, (char*)out + m * es, 1, 1, &r);
  }
}

/* Columns: each block of 256 outputs sweeps k eight input rows at a time, adding the eight in fp32 (a fixed tree)
 * before fp64: one fp64 add per output and row ran fp32 sum(dim=0) at 0.68x eager (1 thread, [1024, 1024],
 * 2-core EPYC VM: 133 us against 90). fp32 rows of unit stride are read in place. */
#define MYOPS_SUM_COL_ROWS 8
MYOPS_CPU_VEC static void sum_cols(void* out, double* part, const char* x, int64_t M, int64_t K, int64_t sM, int64_t sK,
                                   int dtype, int64_t es) {
  float buf[MYOPS_SUM_COL_ROWS][MYOPS_SUM_BLOCK];
  double acc[MYOPS_SUM_BLOCK];
  for (int64_t m0 = 0; m0 < M; m0 += MYOPS_SUM_BLOCK) {
    const int64_t n = M - m0 < MYOPS_SUM_BLOCK ? M - m0 : MYOPS_SUM_BLOCK;
    for (int64_t i = 0; i < n; ++i) acc[i] = 0.0;
    for (int64_t k0 = 0; k0 < K; k0 += MYOPS_SUM_COL_ROWS) {
      const int64_t nk = K - k0 < MYOPS_SUM_COL_ROWS ? K - k0 : MYOPS_SUM_COL_ROWS;
      if (dtype == MYOPS_F64) {
        for (int64_t kk = 0; kk < nk; ++kk) {
          const double* p = (const double*)x + m0 * sM + (k0 + kk) * sK;
          for (int64_t i = 0; i < n; ++i) acc[i] += p[i * sM];
        }
        continue;
      }
      const float* r[MYOPS_SUM_COL_ROWS];
      for (int64_t kk = 0; kk < nk; ++kk) {
        const char* p = x + (m0 * sM + (k0 + kk) * sK) * es;
        if (dtype == MYOPS_F32 && sM == 1) {
          r[kk] = (const float*)p;
        } else {
          myops_load_f32(dtype, p, sM, n, buf[kk]);
          r[kk] = buf[kk];
        }
      }
      if (nk == MYOPS_SUM_COL_ROWS) {
        for (int64_t i = 0; i < n; ++i)
          acc[i] += (double)(((r[0][i] + r[1][i]) + (r[2][i] + r[3][i])) + ((r[4][i] + r[5][i]) + (r[6][i] + r[7][i])));
      } else {
        for (int64_t kk = 0; kk < nk; ++kk)
          for (int64_t i = 0; i < n; ++i) acc[i] += r[kk][i];
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (part) {
        part[m0 + i] = acc[i];
      } else if (dtype == MYOPS_F64) {
        ((double*)out)[m0 + i] = acc[i];
      } else {
        const float f = (float)acc[i];
        myops_store_f32(dtype, (char*)out + (m0 + i) * es, 1, 1, &f);
      }
    }
  }
}

static int sum_any(void* out, double* part, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  const int by_cols = sK != 1 && K > 1 && (sM == 1 || (sM < sK && M > 1));
  if (by_cols) sum_cols(out, part, (const char*)x, M, K, sM, sK, dtype, es);
  else sum_rows(out, part, (const char*)x, M, K, sM, sK, dtype, es);
  return MYOPS_OK;
}

int myops_sum_cpu(void* out, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype) {
  return sum_any(out, NULL, x, M, K, sM, sK, dtype);
}

/* The fp64 sums over one part of K, part [M]: the caller splits a long K across threads (a multiple of
 * MYOPS_SUM_BLOCK and MYOPS_SUM_COL_ROWS per part keeps each part's blocks those of the whole) and adds the parts in
 * order. */
int myops_sum_part_cpu(double* part, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype) {
  return sum_any(NULL, part, x, M, K, sM, sK, dtype);
}
