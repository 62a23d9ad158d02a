/* rows.h: element access for the CPU row-wise kernels (norms, softmax, cross_entropy). They compute in fp64 for
 * every dtype (a row at a time, as close to the float64 reference as it gets) and round once when storing; softmax,
 * log_softmax and cross_entropy of fp32 and narrower rows work in fp32 with fp64 sums (softmax.h,
 * cross_entropy.c). Element i of a row is at p[i * col_stride]. */
#ifndef MYOPS_CPU_ROWS_H
#define MYOPS_CPU_ROWS_H

#include <math.h>
#include <stdlib.h>
#include "common.h"
#include "vmath.h"

MYOPS_CPU_HOT double myops_ld(int dtype, const void* p, int64_t i) {
  switch (dtype) {
    case MYOPS_F32: return ((const float*)p)[i];
    case MYOPS_F16: return myops_f16_to_f32(((const uint16_t*)p)[i]);
    case MYOPS_BF16: return myops_bf16_to_f32(((const uint16_t*)p)[i]);
    default: return ((const double*)p)[i];
  }
}

/* Stores v rounded to dtype (half types through fp32, as a GPU kernel computing in fp32 would). */
MYOPS_CPU_HOT void myops_st(int dtype, void* p, int64_t i, double v) {
  switch (dtype) {
    case MYOPS_F32: ((float*)p)[i] = (float)v; break;
    case MYOPS_F16: ((uint16_t*)p)[i] = myops_f32_to_f16((float)v); break;
    case MYOPS_BF16: ((uint16_t*)p)[i] = myops_f32_to_bf16((float)v); break;
    default: ((double*)p)[i] = v; break;
  }
}

/* v[i] + u[i] rounded to dtype and back (the value an eager add in dtype would have stored), over a row: the dtype
 * switch once per row (one per element kept the loop from vectorizing: add_rms_norm's CPU forward at 0.43x eager). */
MYOPS_CPU_HOT void myops_add_round_row(int dtype, double* v, const double* u, int64_t n) {
  int64_t i;
  switch (dtype) {
    case MYOPS_F32: for (i = 0; i < n; ++i) v[i] = (float)(v[i] + u[i]); break;
    case MYOPS_F16: for (i = 0; i < n; ++i) v[i] = myops_f16_to_f32(myops_f32_to_f16((float)(v[i] + u[i]))); break;
    case MYOPS_BF16: for (i = 0; i < n; ++i) v[i] = myops_bf16_to_f32(myops_f32_to_bf16((float)(v[i] + u[i]))); break;
    default: for (i = 0; i < n; ++i) v[i] += u[i]; break;
  }
}

/* n elements p[0], p[cs], ... as fp64 into dst, and back (rounded to dtype through fp32 for half types): one
 * dtype switch per row instead of per element, and plain loops the compiler vectorizes. */
MYOPS_CPU_HOT void myops_load_row(int dtype, const void* p, int64_t cs, int64_t n, double* dst) {
  int64_t i;
  switch (dtype) {
    case MYOPS_F32: { const float* s = (const float*)p; for (i = 0; i < n; ++i) dst[i] = s[i * cs]; break; }
    case MYOPS_F16: { /* (through fp32 blocks: myops_load_f16 converts in hardware where it can) */
      const uint16_t* s = (const uint16_t*)p;
      float t[256];
      for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t m = n - i0 < 256 ? n - i0 : 256;
        myops_load_f16(s + i0 * cs, cs, m, t);
        for (i = 0; i < m; ++i) dst[i0 + i] = t[i];
      }
      break;
    }
    case MYOPS_BF16: { const uint16_t* s = (const uint16_t*)p; for (i = 0; i < n; ++i) dst[i] = myops_bf16_to_f32(s[i * cs]); break; }
    default: { const double* s = (const double*)p; for (i = 0; i < n; ++i) dst[i] = s[i * cs]; break; }
  }
}

MYOPS_CPU_HOT void myops_store_row(int dtype, void* p, int64_t cs, int64_t n, const double* src) {
  int64_t i;
  switch (dtype) {
    case MYOPS_F32: { float* d = (float*)p; for (i = 0; i < n; ++i) d[i * cs] = (float)src[i]; break; }
    case MYOPS_F16: {
      uint16_t* d = (uint16_t*)p;
      float t[256];
      for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t m = n - i0 < 256 ? n - i0 : 256;
        for (i = 0; i < m; ++i) t[i] = (float)src[i0 + i];
        myops_store_f16(d + i0 * cs, cs, m, t);
      }
      break;
    }
    case MYOPS_BF16: { uint16_t* d = (uint16_t*)p; for (i = 0; i < n; ++i) d[i * cs] = myops_f32_to_bf16((float)src[i]); break; }
    default: { double* d = (double*)p; for (i = 0; i < n; ++i) d[i * cs] = src[i]; break; }
  }
}

/* Sums over a row buffer with MYOPS_ROW_SUM_LANES (16) independent fp64 accumulators in a fixed order. A single running
 * sum is a chain of dependent adds (one per FP-add latency, and the compiler may not reorder it without
 * -ffast-math); 8 accumulators (the former form) vectorize into one AVX-512 register, still one chain of vaddpd; 16
 * make two such chains (four in AVX2), paced more by the adder's throughput than by its latency. The lanes are fixed
 * by the C code, so every clone (vmath.h) adds in the same order. fp64 either way: the order moves a sum by fp64
 * roundings, far below the output's. One thread, [1024, 1024], us, 8 -> 16 -> 32 lanes (the AVX-512 clone; the AVX2
 * one built alone): fp32 softmax backward 167 -> 123 -> 130 (AVX2 183 -> 185 -> 194; eager 114-118), log_softmax
 * backward 375 -> 340 -> 341 (639 -> 624 -> 655), layer_norm backward 920 -> 619 -> 583 (1221 -> 972 -> 1294); bf16
 * softmax forward 516 -> 497 -> 466 (880 -> 880 -> 924). 32 lanes lost up to 20% in AVX2 and in the baseline (SSE2)
 * clone, which at 16 runs 0-10% slower than at 8 (CPUs without AVX2 only). MYOPS_CFLAGS=-DMYOPS_ROW_SUM_LANES=N (a
 * power of two) for an A/B; it moves the sums' bits. */
#ifndef MYOPS_ROW_SUM_LANES
#define MYOPS_ROW_SUM_LANES 16
#endif
#define MYOPS_ROW_SUM(n, term)                                       \
  do {                                                               \
    double acc_[MYOPS_ROW_SUM_LANES] = {0};                          \
    int64_t i = 0;                                                   \
    for (; i + MYOPS_ROW_SUM_LANES <= (n); i += MYOPS_ROW_SUM_LANES) \
      for (int j_ = 0; j_ < MYOPS_ROW_SUM_LANES; ++j_) {             \
        const int64_t k = i + j_;                                    \
        acc_[j_] += (term);                                          \
      }                                                              \
    for (int64_t k = i; k < (n); ++k) acc_[k - i] += (term);         \
    for (int h_ = MYOPS_ROW_SUM_LANES / 2; h_ >= 1; h_ /= 2)         \
      for (int j_ = 0; j_ < h_; ++j_) acc_[j_] += acc_[j_ + h_];     \
    myops_sum_result_ = acc_[0];                                     \
  } while (0)

MYOPS_CPU_HOT double myops_sum(const double* v, int64_t n) {
  double myops_sum_result_;
  MYOPS_ROW_SUM(n, v[k]);
  return myops_sum_result_;
}
MYOPS_CPU_HOT double myops_sumf(const float* v, int64_t n) { /* an fp32 row summed in fp64 */
  double myops_sum_result_;
  MYOPS_ROW_SUM(n, (double)v[k]);
  return myops_sum_result_;
}
MYOPS_CPU_HOT double myops_sum_sq(const double* v, int64_t n) {
  double myops_sum_result_;
  MYOPS_ROW_SUM(n, v[k] * v[k]);
  return myops_sum_result_;
}
MYOPS_CPU_HOT double myops_dot(const double* a, const double* b, int64_t n) {
  double myops_sum_result_;
  MYOPS_ROW_SUM(n, a[k] * b[k]);
  return myops_sum_result_;
}
MYOPS_CPU_HOT double myops_sum_sq_dev(const double* v, int64_t n, double mu) {
  double myops_sum_result_;
  MYOPS_ROW_SUM(n, (v[k] - mu) * (v[k] - mu));
  return myops_sum_result_;
}

/* Sums of fp32 terms at fp32 vector width: 32 running fp32 sums over blocks of 1024 elements (a fixed-order tree
 * at each block's end), each block's total added in fp64, so that fp32 rounding stays inside a block (at most 32
 * terms per running sum) while the adds run 16 lanes a vector instead of fp64's 8. The order is fixed, so the
 * result does not depend on the vector width.
 * MYOPS_SUMSF_BLOCKED: K (1-4) such sums in one pass, each in its own lanes, blocks and order (the same bits as K
 * passes): ADD, a statement or expression of element k, adds its terms by MYOPS_SUMF_TERM(q, term) into sum q < K (q
 * a literal); res[q] receives the totals. MYOPS_SUMF_BLOCKED: one sum, into myops_sum_result_. Each sum keeps its own
 * named array: one [K][32] array measured 3-5% slower in layer_norm's forward and backward (the bits the same).
 * The tree at a block's end: its five steps written out (MYOPS_SUMF_TREE_STEP, each of a constant width), where a
 * loop over the widths left GCC 12 a vector loop of variable trip count whose scalar tail added lane after lane
 * through the stack, a chain of store-to-load round trips paid once per block: per row on short rows. cpu_ab, one
 * thread, 2-core EPYC VM, us, the same bits (session 58): layer_norm forward [65536, 33] fp32 5419 -> 2663, bf16
 * 5423 -> 2844, [16384, 256] fp32 1408 -> 1129, its backward [65536, 33] 4346 -> 3185; log_softmax [65536, 33] fp32
 * 4184 -> 3342, bf16 4860 -> 3945, [16384, 256] bf16 2218 -> 1959; softmax bf16 [65536, 33] 4600 -> 3564; softmax's
 * backward fp32 [65536, 33] 2001 -> 1004; rows of 4096 level (0.88-1.01x). Three or four sums (layer_norm's
 * backward: four) on rows of over 512 keep the loop: written out there, [1024, 4096] read 1.03-1.07x in three of four
 * runs. */
#define MYOPS_SUMF_TERM(q, term) (acc##q##_[j_] += (term))
/* (One step of MYOPS_SUMSF_BLOCKED's tree, on its acc0_ .. acc3_: inside that macro only.) */
#define MYOPS_SUMF_TREE_STEP(K, S)                 \
  do {                                             \
    for (int j_ = 0; j_ < (S); ++j_) {             \
      acc0_[j_] += acc0_[j_ + (S)];                \
      if ((K) > 1) acc1_[j_] += acc1_[j_ + (S)];   \
      if ((K) > 2) acc2_[j_] += acc2_[j_ + (S)];   \
      if ((K) > 3) acc3_[j_] += acc3_[j_ + (S)];   \
    }                                              \
  } while (0)
#define MYOPS_SUMSF_BLOCKED(n, K, ADD, res)                                               \
  do {                                                                                   \
    _Static_assert((K) >= 1 && (K) <= 4, "one to four sums");                            \
    double tot_[4] = {0, 0, 0, 0};                                                       \
    const int64_t n_ = (n);  /* (once, before the names below exist) */                 \
    for (int64_t b_ = 0; b_ < n_; b_ += 1024) {                                          \
      const int64_t e_ = b_ + 1024 < n_ ? b_ + 1024 : n_;                                \
      float acc0_[32], acc1_[32], acc2_[32], acc3_[32];  /* (those past K: dead code) */ \
      for (int j_ = 0; j_ < 32; ++j_) acc0_[j_] = acc1_[j_] = acc2_[j_] = acc3_[j_] = 0.f; \
      int64_t i = b_;                                                                    \
      for (; i + 32 <= e_; i += 32)                                                      \
        for (int j_ = 0; j_ < 32; ++j_) {                                                \
          const int64_t k = i + j_;                                                      \
          ADD;                                                                           \
        }                                                                                \
      for (int64_t k = i; k < e_; ++k) {                                                 \
        const int64_t j_ = k - i;                                                        \
        ADD;                                                                             \
      }                                                                                  \
      if ((K) <= 2 || n_ <= 512) { /* (see above) */                                     \
        MYOPS_SUMF_TREE_STEP(K, 16);                                                     \
        MYOPS_SUMF_TREE_STEP(K, 8);                                                      \
        MYOPS_SUMF_TREE_STEP(K, 4);                                                      \
        MYOPS_SUMF_TREE_STEP(K, 2);                                                      \
        MYOPS_SUMF_TREE_STEP(K, 1);                                                      \
      } else                                                                             \
        for (int s_ = 16; s_ > 0; s_ >>= 1) MYOPS_SUMF_TREE_STEP(K, s_);                 \
      tot_[0] += (double)acc0_[0];                                                       \
      tot_[1] += (double)acc1_[0];                                                       \
      tot_[2] += (double)acc2_[0];                                                       \
      tot_[3] += (double)acc3_[0];                                                       \
    }                                                                                    \
    for (int q_ = 0; q_ < (K); ++q_) (res)[q_] = tot_[q_];                               \
  } while (0)
#define MYOPS_SUMF_BLOCKED(n, term) MYOPS_SUMSF_BLOCKED(n, 1, MYOPS_SUMF_TERM(0, term), &myops_sum_result_)

/* max over v[0, n), NaN skipped (-inf for n = 0 or all NaN). The order does not matter for a maximum; the pragma
 * says so (-fopenmp-simd), where GCC would otherwise keep `v > m ? v : m` scalar for NaN's sake. */
MYOPS_CPU_HOT double myops_max(const double* v, int64_t n) {
  double m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

MYOPS_CPU_HOT float myops_maxf(const float* v, int64_t n) { /* the same for fp32 */
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
/* The same, and in *mid whether every exp(v[i] - max) may take myops_expf_u20_mid (vmath.h): v[i] - max >= -87 for
 * the row's least element (the rounded difference, as the exps see it; NaN passed over: its exp is NaN either way;
 * a max of +-inf: no). */
MYOPS_CPU_HOT float myops_maxf_mid(const float* v, int64_t n, int* mid) {
  float m = -INFINITY, lo = INFINITY;
#pragma omp simd reduction(max : m) reduction(min : lo)
  for (int64_t i = 0; i < n; ++i) {
    m = v[i] > m ? v[i] : m;
    lo = v[i] < lo ? v[i] : lo;
  }
  *mid = lo - m >= -87.0f;
  return m;
}

/* e[i] = exp(v[i] - m) (e may be v); returns their sum (MYOPS_ROW_SUM's lanes in a fixed order, so the result does
 * not depend on the vector width). Two passes over the row, which is in L1 or L2: fused into one loop, the fp64 sums
 * kept GCC from vectorizing the exp. */
MYOPS_CPU_HOT double myops_exp_sum(double* e, const double* v, int64_t n, double m) {
  for (int64_t i = 0; i < n; ++i) e[i] = myops_exp(v[i] - m);
  double myops_sum_result_;
  MYOPS_ROW_SUM(n, e[k]);
  return myops_sum_result_;
}

/* The sum of exp(v[i] - m) over an fp32 row, the exps summed as they come in fp32 blocks (MYOPS_SUMF_BLOCKED, each
 * block's total in fp64), which vectorizes, where fp64 sums in the same loop did not (myops_exp_sum): the log-sums
 * of log_softmax and cross_entropy, whose outputs' rounding absorbs the blocks' (softmax.h). */
MYOPS_CPU_HOT double myops_exp_sumf(const float* v, int64_t n, float m, int mid) {
  double myops_sum_result_;
  if (mid)  /* (two loops: a choice inside one, even loop-invariant, computed both exps) */
    MYOPS_SUMF_BLOCKED(n, myops_expf_u20_mid(v[k] - m));
  else
    MYOPS_SUMF_BLOCKED(n, myops_expf_u20(v[k] - m));
  return myops_sum_result_;
}

/* A per-column parameter vector (weight, bias; contiguous) as fp64, or null when absent: loaded once per call
 * instead of converted per element of every row. */
MYOPS_CPU_HOT void myops_load_param(int dtype, const void* p, int64_t n, double* dst) {
  if (p != NULL) myops_load_row(dtype, p, 1, n, dst);
}

/* Row r of an operand, as a byte pointer. */
MYOPS_CPU_HOT const char* myops_row(const myops_operand* o, int64_t r, int64_t es) {
  return (const char*)o->ptr + r * o->row_stride * es;
}
MYOPS_CPU_HOT char* myops_out_row(const myops_out_operand* o, int64_t r, int64_t es) {
  return (char*)o->ptr + r * o->row_stride * es;
}

/* fp32 views of rows for the kernels that work in fp32: a unit-stride fp32 row is used in place (copying it took a
 * fifth of layer_norm's forward, `memmove` in perf), any other row goes through buf.
 *   myops_row_f32: row r of o, read (buf [n] receives the converted row when needed);
 *   myops_out_row_f32: where to write row r of o; myops_put_row_f32 then stores it if that was buf. */
MYOPS_CPU_HOT const float* myops_row_f32(const myops_operand* o, int64_t r, int64_t n, int dtype, int64_t es,
                                         float* buf) {
  const char* p = myops_row(o, r, es);
  if (dtype == MYOPS_F32 && o->col_stride == 1) return (const float*)p;
  myops_load_f32(dtype, p, o->col_stride, n, buf);
  return buf;
}
MYOPS_CPU_HOT float* myops_out_row_f32(const myops_out_operand* o, int64_t r, int dtype, int64_t es, float* buf) {
  return dtype == MYOPS_F32 && o->col_stride == 1 ? (float*)myops_out_row(o, r, es) : buf;
}
MYOPS_CPU_HOT void myops_put_row_f32(const myops_out_operand* o, int64_t r, int64_t n, int dtype, int64_t es,
                                     const float* dst, const float* buf) {
  if (dst == buf) myops_store_f32(dtype, myops_out_row(o, r, es), o->col_stride, n, buf);
}

/* Saved per-row statistics are fp32, or fp64 for fp64 tensors (like the CUDA kernels' acc_t). */
MYOPS_CPU_HOT double myops_ld_stat(int dtype, const void* p, int64_t i) {
  return dtype == MYOPS_F64 ? ((const double*)p)[i] : ((const float*)p)[i];
}
MYOPS_CPU_HOT void myops_st_stat(int dtype, void* p, int64_t i, double v) {
  if (dtype == MYOPS_F64) ((double*)p)[i] = v;
  else ((float*)p)[i] = (float)v;
}

#endif /* MYOPS_CPU_ROWS_H */
