/* layer_norm on the CPU, rows [M, N]: fp64 math for fp64 rows and the backward of rows under 32 elements, fp32
 * elementwise with fp64-added sums for the others; formulas in csrc/cuda/layer_norm.cu. w, b null when absent;
 * ws null, or [2][N] fp64 receiving this call's rows' dw and db contributions (added to what it holds). */
#include "rows.h"

/* fp16 to fp32 without branches, so that loops of it vectorize (GCC 12 converts _Float16 an element an instruction):
 * the half's exponent and mantissa placed in an fp32's, scaled by 2^112 (the bias difference; a subnormal half, an
 * fp32 denormal here, becomes the normal fp32 it is), inf and NaN given an all-ones exponent, the sign put back. Exact
 * for every half (all 65536 checked against torch's conversion); a NaN keeps its payload unquieted. The multiply reads
 * a denormal operand: where the FPU flushes those (DAZ, torch.set_flush_denormal), subnormal halves would read as 0,
 * so fp16 rows take this only where ln_denormals_kept(). (A form without a denormal operand, the mantissa converted
 * and scaled by 2^-24, measured 0.96-1.04x of the buffers, against this form's 0.77-0.82x.) */
MYOPS_CPU_HOT float ln_f16_to_f32(uint16_t h) {
  const uint32_t e = (uint32_t)(h & 0x7fffu) << 13;
  float f;
  memcpy(&f, &e, 4);
  f *= 0x1p112f;
  uint32_t u;
  memcpy(&u, &f, 4);
  u |= e >= (0x7c00u << 13) ? 0x7f800000u : 0u;
  u |= (uint32_t)(h & 0x8000u) << 16;
  memcpy(&f, &u, 4);
  return f;
}
/* Whether this thread's FPU keeps a denormal operand (no DAZ / flush-to-zero of inputs): ln_f16_to_f32's condition. */
static inline int ln_denormals_kept(void) {
  volatile float tiny = 0x1p-140f; /* (volatile: computed at run time, under the thread's current mode) */
  return tiny * 0x1p112f != 0.f;
}
/* Element k of a row: fp32, or (BF, a compile-time flag at every call: 1 bf16, 2 fp16) unit-stride 16-bit read in
 * place, widened as loaded: the same values as an fp32 copy of the row, so the same results (NaNs' signs and payloads
 * aside: the compiler may order a NaN's operands otherwise), without the copy's passes. */
#define LN_LD(p, k)                                                  \
  (BF == 1   ? myops_bf16_to_f32(((const uint16_t*)(p))[k])          \
   : BF == 2 ? ln_f16_to_f32(((const uint16_t*)(p))[k])              \
             : ((const float*)(p))[k])

/* A row's statistics from its fp32 values: corrected two-pass moments. A first estimate of the mean comes from the
 * deviations from the row's first element, then the deviations d from that estimate c, whose sum corrects it
 * (mean = c + sum(d) / N) and whose squares give the variance (sum(d^2) - sum(d)^2 / N, no cancellation to speak of
 * with c near the mean). The mean is also kept as two floats (hi + lo): x - hi is exact for x near the mean
 * (Sterbenz), so ((x - hi) - lo) keeps the fp64 mean's accuracy where hi alone put up to half an ulp of |mean| into
 * every element. rsd = 1 / sqrt(var + eps) (a NaN variance passes). */
typedef struct {
  double mud, rsd;
  float hi, lo;
} LnStats;
/* The moments of a row about c: its mean mud = c + d and variance var, from s1 = sum(x - c), s2 = sum((x - c)^2). */
typedef struct {
  double mud, var, d;
} LnMoments;
MYOPS_CPU_HOT LnMoments ln_moments(double s1, double s2, int64_t N, float c) {
  LnMoments m;
  /* (1 / N, loop-invariant, off the row's dependent chain: three divisions there took [65536, 33]'s forward from
   * 2468 to 2620 us, one thread; 1500 fuzzed cases bitwise equal either way) */
  const double inv_n = 1.0 / (double)N;
  m.d = s1 * inv_n;
  m.mud = (double)c + m.d;
  m.var = (s2 - s1 * m.d) * inv_n;
  return m;
}
MYOPS_CPU_HOT LnStats ln_finish(LnMoments m, double eps) {
  LnStats st;
  st.mud = m.mud;
  st.hi = (float)st.mud;
  st.lo = (float)(st.mud - (double)st.hi);
  st.rsd = 1.0 / sqrt((m.var < 0 ? 0 : m.var) + eps);
  return st;
}
/* The sums below are of deviations x - c, c near the row's values (its first element, then its estimated mean): each
 * fp32 term is small and x - c exact (Sterbenz), so that the blocks' fp32 rounding (MYOPS_SUMSF_BLOCKED) is relative
 * to the deviations, not to the row's offset from 0 (an fp32 sum of the values themselves lost the mean's accuracy
 * for rows far from 0). x as LN_LD reads it. */
/* A first estimate of a row's mean, from the deviations from its first element (one pass). */
MYOPS_CPU_HOT float ln_center(const void* x, int64_t N, int BF) {
  const float k0 = N > 0 ? LN_LD(x, 0) : 0.f; /* (k: the sums' element index) */
  double myops_sum_result_;
  MYOPS_SUMF_BLOCKED(N, LN_LD(x, k) - k0);
  return (float)((double)k0 + myops_sum_result_ * (1.0 / (double)N));
}
/* The row's moments about c: sum(x - c) and sum((x - c)^2) in one pass, each in its own blocks. (One helper for both
 * passes, the squares skipped by a flag, made the bf16 forward about 2x slower on the 2-core Zen 4 VM, [4096, 4096]:
 * 6.5-7.0 -> 12.6-13.9 ms; hence ln_center's loop of its own.) */
MYOPS_CPU_HOT LnMoments ln_moments_row(const void* x, int64_t N, float c, int BF) {
  double s[2];
#define LN_DEV (LN_LD(x, k) - c)
  MYOPS_SUMSF_BLOCKED(N, 2, (MYOPS_SUMF_TERM(0, LN_DEV), MYOPS_SUMF_TERM(1, LN_DEV * LN_DEV)), s);
#undef LN_DEV
  return ln_moments(s[0], s[1], N, c);
}
MYOPS_CPU_HOT LnStats ln_stats_row(const void* x, int64_t N, double eps, int BF) {
  return ln_finish(ln_moments_row(x, N, ln_center(x, N, BF), BF), eps);
}
/* y[i] = f(xhat) with xhat = (x - hi) - lo (LN_LD's x, BF in scope), STORE(i, value) writing it, for each case of w
 * and b present, each its own loop (one loop testing w and b per element ran slower: see softmax.h's exps). */
#define LN_FWD_ROWS(STORE)                                                                                  \
  do {                                                                                                      \
    if (w && b) for (int64_t i = 0; i < N; ++i) STORE(i, ((LN_LD(xv, i) - hi) - lo) * rs * wf[i] + bf[i]); \
    else if (w) for (int64_t i = 0; i < N; ++i) STORE(i, ((LN_LD(xv, i) - hi) - lo) * rs * wf[i]);         \
    else if (b) for (int64_t i = 0; i < N; ++i) STORE(i, ((LN_LD(xv, i) - hi) - lo) * rs + bf[i]);         \
    else for (int64_t i = 0; i < N; ++i) STORE(i, ((LN_LD(xv, i) - hi) - lo) * rs);                        \
  } while (0)
/* Rows stored in fp32 or narrower: elementwise in fp32 (sixteen lanes a vector; the fp64 form took 1.5-1.6x eager's
 * time), the row's sums in fp32 blocks added in fp64 (rows.h). */
MYOPS_CPU_VEC static int layer_norm_f32(myops_out_operand y, void* mean, void* rstd, myops_operand x, const void* w,
                                        const void* b, int64_t M, int64_t N, double eps, int dtype, int64_t es) {
  const int64_t n1 = N > 0 ? N : 1;
  float* v = (float*)malloc((size_t)n1 * 3 * sizeof(float));
  if (v == NULL) return MYOPS_EARG;
  float *wf = v + n1, *bf = v + 2 * n1;  /* weight, bias as fp32 */
  if (w) myops_load_f32(dtype, w, 1, N, wf);
  if (b) myops_load_f32(dtype, b, 1, N, bf);
  const int BF = 0; /* (LN_LD's: fp32 rows) */
  for (int64_t r = 0; r < M; ++r) {
    const float* xv = myops_row_f32(&x, r, N, dtype, es, v);
    float* yv = myops_out_row_f32(&y, r, dtype, es, v);
    const LnStats st = ln_stats_row(xv, N, eps, BF);
    const float hi = st.hi, lo = st.lo, rs = (float)st.rsd;
    myops_st_stat(dtype, mean, r, st.mud);
    myops_st_stat(dtype, rstd, r, st.rsd);
#define LN_ST(i, v_) (yv[i] = (v_))
    LN_FWD_ROWS(LN_ST);
#undef LN_ST
    myops_put_row_f32(&y, r, N, dtype, es, yv, v);
  }
  free(v);
  return MYOPS_OK;
}

/* layer_norm_f32's rows when x and y are unit-stride bf16, read and written in place (LN_LD; widened as read, rounded
 * as stored): the same results (LN_LD's note) without the rows' conversion passes. Its own function: the same
 * loops beside layer_norm_f32's in one function slowed the fp32 rows by 1.15-1.27x (one thread, [1024, 4096] and [256,
 * 16384]). One thread, minimum of 200 calls alternating (cpu_ab.py), us: bf16 [1024, 4096] 1147-1187 -> 840-864, [256,
 * 16384] 1075 -> 823 (100 calls); short rows gain little: [16384, 256] 1894 -> 1978, [4096, 33] 372 -> 352. */
MYOPS_CPU_VEC static int layer_norm_bf16(myops_out_operand y, void* mean, void* rstd, myops_operand x, const void* w,
                                         const void* b, int64_t M, int64_t N, double eps) {
  const int BF = 1;  /* (LN_LD's) */
  const int64_t n1 = N > 0 ? N : 1;
  float* wf = (float*)malloc((size_t)n1 * 2 * sizeof(float));
  if (wf == NULL) return MYOPS_EARG;
  float* bf = wf + n1;  /* weight, bias as fp32 */
  if (w) myops_load_f32(MYOPS_BF16, w, 1, N, wf);
  if (b) myops_load_f32(MYOPS_BF16, b, 1, N, bf);
  for (int64_t r = 0; r < M; ++r) {
    const uint16_t* xv = (const uint16_t*)myops_row(&x, r, 2);
    uint16_t* yv = (uint16_t*)myops_out_row(&y, r, 2);
    const LnStats st = ln_stats_row(xv, N, eps, BF);
    const float hi = st.hi, lo = st.lo, rs = (float)st.rsd;
    myops_st_stat(MYOPS_BF16, mean, r, st.mud);
    myops_st_stat(MYOPS_BF16, rstd, r, st.rsd);
#define LN_ST(i, v_) (yv[i] = myops_f32_to_bf16(v_))
    LN_FWD_ROWS(LN_ST);
#undef LN_ST
  }
  free(wf);
  return MYOPS_OK;
}

MYOPS_CPU_VEC int myops_layer_norm_cpu(myops_out_operand y, void* mean, void* rstd, myops_operand x,
                                       const void* w, const void* b, int64_t M, int64_t N, double eps, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  if (dtype == MYOPS_BF16 && x.col_stride == 1 && y.col_stride == 1)
    return layer_norm_bf16(y, mean, rstd, x, w, b, M, N, eps);
  if (dtype != MYOPS_F64) return layer_norm_f32(y, mean, rstd, x, w, b, M, N, eps, dtype, es);
  const int64_t n1 = N > 0 ? N : 1;
  double* v = (double*)malloc((size_t)n1 * 3 * sizeof(double));
  if (v == NULL) return MYOPS_EARG;
  double *wd = v + n1, *bd = v + 2 * n1;  /* weight, bias as fp64 */
  myops_load_param(dtype, w, N, wd);
  myops_load_param(dtype, b, N, bd);
  for (int64_t r = 0; r < M; ++r) {
    myops_load_row(dtype, myops_row(&x, r, es), x.col_stride, N, v);
    const double mu = myops_sum(v, N) / (double)N;
    const double rs = 1.0 / sqrt(myops_sum_sq_dev(v, N, mu) / (double)N + eps);
    myops_st_stat(dtype, mean, r, mu);
    myops_st_stat(dtype, rstd, r, rs);
    if (w && b) for (int64_t i = 0; i < N; ++i) v[i] = (v[i] - mu) * rs * wd[i] + bd[i];
    else if (w) for (int64_t i = 0; i < N; ++i) v[i] = (v[i] - mu) * rs * wd[i];
    else if (b) for (int64_t i = 0; i < N; ++i) v[i] = (v[i] - mu) * rs + bd[i];
    else for (int64_t i = 0; i < N; ++i) v[i] = (v[i] - mu) * rs;
    myops_store_row(dtype, myops_out_row(&y, r, es), y.col_stride, N, v);
  }
  free(v);
  return MYOPS_OK;
}

/* Rows of at least MYOPS_LN_BWD_F32_MIN_N (32) elements stored in fp32 or narrower: the backward elementwise in fp32,
 * its statistics recomputed from x as the forward computes them, but summed about the forward's saved mean [M] (fp32;
 * ln_bwd_sums: the bits may differ from the forward's by the sums' rounding), its row sums in fp32 blocks added in
 * fp64, dw and db in fp32 over blocks of rows added in fp64. Shorter rows keep the fp64 form below. The tests' rule (2x
 * eager's error plus a floor), 600-900 random calls per N of 1-17 rows, x scale 0.1-100, offset 0-1000, dy offset 0 or
 * 100, with this form on every row: fp32 broke it at N = 2 (1 of 900 calls; session 24 saw 81 of 3000 rows) and came
 * within 1.96x at N = 4; from N = 8 to 65536 every error stayed under the floor, and so did every bf16 and fp16 one
 * from N = 2. One thread, [1024, 1024], backward alone, fp64 -> fp32 form: fp32 573-769 -> 409-479 us, bf16 615-771 ->
 * 449-459. Session 39 (the kernel alone, one thread, [1024, 1024], minimum of 200 calls alternating with the former
 * build, with / without dw and db): the dw and db terms summed in fp32 over 32 rows 432 / 318 -> 350 / 279 us (bf16 422
 * / 323 -> 341 / 312); the statistics about the saved mean and two passes -> 288 / 191 (288 / 233); eager's backward,
 * through torch, about 350-430. */
#ifndef MYOPS_LN_BWD_F32_MIN_N
#define MYOPS_LN_BWD_F32_MIN_N 32
#endif
#ifndef MYOPS_LN_BWD_WS_ROWS
#define MYOPS_LN_BWD_WS_ROWS 32
#endif
/* The two-pass backward of a row, about c: its saved mean where that is near its mean (else ln_center's estimate,
 * a pass more). Pass 1 (ln_bwd_sums) sums, about c, in fp32 blocks added in fp64 (MYOPS_SUMSF_BLOCKED):
 * s[0] = sum(x - c), s[1] = sum((x - c)^2) (the moments of ln_moments_row bit for bit), s[2] = sum(gw) and
 * s[3] = sum(gw (x - c)), gw = g * w (W) or g. Then sum(gw * xhat) = rs (s[3] - d s[2]), d = mean - c: no
 * cancellation, d being within a standard deviation (in practice within half an ulp of the mean). Pass 2
 * (ln_bwd_dx) forms xhat, dx and (WS) this block's dw and db terms; BF: x, dy and dx as LN_LD reads them.
 * The three-pass form (statistics, then xhat with the row's sums, then dx) took 1.3-1.4x eager's time on fp32 rows. */
MYOPS_CPU_HOT void ln_bwd_sums(const void* restrict xv, const void* restrict gv, const float* restrict wf, int64_t N,
                               float c, int W, int BF, double s[4]) {
#define LN_BWD_TERMS                                \
  do {                                              \
    const float d_ = LN_LD(xv, k) - c;              \
    const float g_ = LN_LD(gv, k);                  \
    const float gw_ = W ? g_ * wf[k] : g_;          \
    MYOPS_SUMF_TERM(0, d_);                         \
    MYOPS_SUMF_TERM(1, d_ * d_);                    \
    MYOPS_SUMF_TERM(2, gw_);                        \
    MYOPS_SUMF_TERM(3, gw_ * d_);                   \
  } while (0)
  MYOPS_SUMSF_BLOCKED(N, 4, LN_BWD_TERMS, s);
#undef LN_BWD_TERMS
}
/* A row's constants for pass 2: xhat = ((x - hi) - lo) rs, mg = mean(gw), mgx = mean(gw xhat). */
typedef struct {
  float hi, lo, rs, mg, mgx;
} LnBwdRow;
MYOPS_CPU_HOT LnBwdRow ln_bwd_row(LnMoments m, const double s[4], int64_t N, double eps) {
  const LnStats st = ln_finish(m, eps);
  const double inv_n = 1.0 / (double)N;
  LnBwdRow k;
  k.hi = st.hi;
  k.lo = st.lo;
  k.rs = (float)st.rsd;
  k.mg = (float)(s[2] * inv_n);
  k.mgx = (float)((double)k.rs * (s[3] - m.d * s[2]) * inv_n);
  return k;
}
MYOPS_CPU_HOT void ln_bwd_dx(const void* restrict xv, const void* restrict gv, const float* restrict wf,
                             void* restrict dv, float* restrict dwf, float* restrict dbf, int64_t N, LnBwdRow k,
                             int BF, int W, int WS) {
  const float hi = k.hi, lo = k.lo, rs = k.rs, mg = k.mg, mgx = k.mgx;
  for (int64_t i = 0; i < N; ++i) {
    const float g = LN_LD(gv, i);
    const float hv = ((LN_LD(xv, i) - hi) - lo) * rs;
    const float gw = W ? g * wf[i] : g;
    const float d = rs * ((gw - mg) - hv * mgx);
    if (BF == 1) ((uint16_t*)dv)[i] = myops_f32_to_bf16(d);
    else ((float*)dv)[i] = d;  /* (fp16 dx too: an fp32 row that F16C stores; rounded here, 1.04-1.18x slower) */
    if (WS) {
      dwf[i] += g * hv;
      dbf[i] += g;
    }
  }
}
/* (w, ws: the weight and the dw/db workspace present; F(..., W, WS) for the four cases) */
#define LN_BWD_CASES(F, ...)                  \
  do {                                        \
    if (w && ws) F(__VA_ARGS__, 1, 1);        \
    else if (w) F(__VA_ARGS__, 1, 0);         \
    else if (ws) F(__VA_ARGS__, 0, 1);        \
    else F(__VA_ARGS__, 0, 0);                \
  } while (0)
/* Row r's dx into dv from its fp32 rows xv and gv (dw and db terms into dwf, dbf where ws). The sums about the saved
 * mean c0; where that mean is not within a standard deviation of the row's (it did not come from this row's forward)
 * or not finite, about the row's own first estimate instead (ln_center: one pass more). */
MYOPS_CPU_HOT void ln_bwd_row_f32(const float* xv, const float* gv, float* dv, const float* wf, float* dwf, float* dbf,
                                  const void* w, const double* ws, int64_t N, float c0, double eps) {
  double s[4] = {0, 0, 0, 0};
  LnMoments m = {0, 0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    const float c = pass == 0 ? c0 : ln_center(xv, N, 0);
    if (pass == 0 && !isfinite(c)) continue;
    if (w) ln_bwd_sums(xv, gv, wf, N, c, 1, 0, s);
    else ln_bwd_sums(xv, gv, wf, N, c, 0, 0, s);
    m = ln_moments(s[0], s[1], N, c);
    if (isfinite(m.mud) && m.d * m.d <= m.var) break;
  }
  LN_BWD_CASES(ln_bwd_dx, xv, gv, wf, dv, dwf, dbf, N, ln_bwd_row(m, s, N, eps), 0);
}
/* The backward's scratch, [6][N] fp32 (declared in the function, freed by it): the x and dy rows (xb, gb), the dx row
 * (h), the weight (wf, loaded as fp32), this block of rows' dw and db terms (dwf, dbf, summed in fp32). */
#define LN_BWD_SCRATCH(DT)                                               \
  float* buf = (float*)malloc((size_t)N * 6 * sizeof(float));           \
  if (buf == NULL) return MYOPS_EARG;                                   \
  float *xb = buf, *gb = buf + N, *h = buf + 2 * N, *wf = buf + 3 * N;  \
  float *dwf = buf + 4 * N, *dbf = buf + 5 * N;                         \
  if (w) myops_load_f32(DT, w, 1, N, wf)
MYOPS_CPU_VEC static int layer_norm_bwd_f32(myops_out_operand dx, double* ws, myops_operand dy, myops_operand x,
                                            const float* mean, const void* w, int64_t M, int64_t N, double eps,
                                            int dtype, int64_t es) {
  LN_BWD_SCRATCH(dtype); /* (declares xb, gb, h, wf, dwf, dbf in buf; MYOPS_EARG without memory) */
  for (int64_t r = 0; r < M; ++r) {
    /* dw and db: each column's terms of MYOPS_LN_BWD_WS_ROWS rows summed in fp32 (in row order), each block's sums
     * added into ws in fp64. Adding every row's terms into ws in fp64 (a conversion and a read-modify-write of 16
     * bytes per element) took half of this kernel's time (perf, 2 threads, fp32 [2048, 1024]). */
    const int64_t k = r % MYOPS_LN_BWD_WS_ROWS;
    if (ws && k == 0)
      for (int64_t i = 0; i < 2 * N; ++i) dwf[i] = 0.f;
    const float* xv = myops_row_f32(&x, r, N, dtype, es, xb);
    const float* gv = myops_row_f32(&dy, r, N, dtype, es, gb);
    float* dv = myops_out_row_f32(&dx, r, dtype, es, h);
    ln_bwd_row_f32(xv, gv, dv, wf, dwf, dbf, w, ws, N, mean[r], eps);
    myops_put_row_f32(&dx, r, N, dtype, es, dv, h);
    if (ws && (k == MYOPS_LN_BWD_WS_ROWS - 1 || r == M - 1))
      for (int64_t i = 0; i < 2 * N; ++i) ws[i] += (double)dwf[i];
  }
  free(buf);
  return MYOPS_OK;
}
/* layer_norm_bwd_f32's rows when x, dy and dx are unit-stride bf16 or fp16: read in place (ln_bwd_sums' and ln_bwd_dx's
 * BF: widened as read), bf16 dx rounded as stored, fp16 dx through an fp32 row that F16C stores, while the saved mean
 * serves; a row it does not serve goes through fp32 buffers (ln_bwd_row_f32, from the row's own centre: NAN skips the
 * saved mean's pass that has just failed, which a review timed at 8% on rows whose mean is 1000 off). The same results
 * either way (NaNs aside). Its own function, as layer_norm_bf16's (in one function with layer_norm_bwd_f32's rows, fp32
 * ran 4-7% slower). One thread, with dw and db, minimum of 100 calls alternating (benchmarks/cpu_ab.py), us: bf16
 * [1024, 4096] 2591-2967 -> 1453-1792, [4096, 1024] 2109 -> 1219, [256, 16384] 1832 -> 1318. The op's backward without
 * dw and db, 2 threads, [1024, 4096]: 1368 -> 1107 us (eager 1149-1186); with them 1836 -> 1384 (1892-1904). Converting
 * a block of 1024 at a time into fp32 buffers that stay in L1 (instead of whole rows) gained nothing (0.97x). fp16
 * reads x and dy by ln_f16_to_f32 (GCC 12 converts _Float16 an element an instruction) where ln_denormals_kept():
 * 0.76-0.92x the buffers' time at [1024, 4096] (2349-2757 -> 1987-2167 us), 0.82-0.96x at [256, 16384]; the op's
 * backward without dw and db, 2 threads, [1024, 4096], 1438 -> 1368-1392 (eager 981-1059). */
MYOPS_CPU_VEC static int layer_norm_bwd_half(myops_out_operand dx, double* ws, myops_operand dy, myops_operand x,
                                             const float* mean, const void* w, int64_t M, int64_t N, double eps,
                                             int dtype) {
  LN_BWD_SCRATCH(dtype); /* (as layer_norm_bwd_f32's) */
  const int f16 = dtype == MYOPS_F16;
  for (int64_t r = 0; r < M; ++r) {
    const int64_t k = r % MYOPS_LN_BWD_WS_ROWS;  /* (dw and db as layer_norm_bwd_f32's) */
    if (ws && k == 0)
      for (int64_t i = 0; i < 2 * N; ++i) dwf[i] = 0.f;
    const void* xp = myops_row(&x, r, 2);
    const void* gp = myops_row(&dy, r, 2);
    void* dp = myops_out_row(&dx, r, 2);
    const float c = mean[r];
    double s[4] = {0, 0, 0, 0};
    LnMoments m = {0, 0, 0};
    if (isfinite(c)) {
      if (f16 && w) ln_bwd_sums(xp, gp, wf, N, c, 1, 2, s);
      else if (f16) ln_bwd_sums(xp, gp, wf, N, c, 0, 2, s);
      else if (w) ln_bwd_sums(xp, gp, wf, N, c, 1, 1, s);
      else ln_bwd_sums(xp, gp, wf, N, c, 0, 1, s);
      m = ln_moments(s[0], s[1], N, c);
    }
    if (isfinite(c) && isfinite(m.mud) && m.d * m.d <= m.var) {
      const LnBwdRow kr = ln_bwd_row(m, s, N, eps);
      if (f16) {
        LN_BWD_CASES(ln_bwd_dx, xp, gp, wf, h, dwf, dbf, N, kr, 2);
        myops_store_f32(dtype, dp, 1, N, h);
      } else {
        LN_BWD_CASES(ln_bwd_dx, xp, gp, wf, dp, dwf, dbf, N, kr, 1);
      }
    } else {
      myops_load_f32(dtype, xp, 1, N, xb);
      myops_load_f32(dtype, gp, 1, N, gb);
      ln_bwd_row_f32(xb, gb, h, wf, dwf, dbf, w, ws, N, NAN, eps);
      myops_store_f32(dtype, dp, 1, N, h);
    }
    if (ws && (k == MYOPS_LN_BWD_WS_ROWS - 1 || r == M - 1))
      for (int64_t i = 0; i < 2 * N; ++i) ws[i] += (double)dwf[i];
  }
  free(buf);
  return MYOPS_OK;
}
#undef LN_BWD_CASES
#undef LN_BWD_SCRATCH

/* The backward pass recomputes mean and rstd from x instead of reading the forward's, which are rounded to fp32
 * (in fp64 below; layer_norm_bwd_f32's rows in fp32 blocks added in fp64, about the saved mean): for short rows the
 * terms of dx cancel (N = 2: dx = r * (g - mean(g)) * eps * r^2, a difference of terms of size r * g), and
 * x - mean(fp32) alone then cost up to 7x eager's error. dx must not overlap dy or x (ln_bwd_dx's restrict; the
 * registration layer allocates it). */
MYOPS_CPU_VEC int myops_layer_norm_backward_cpu(myops_out_operand dx, double* ws, myops_operand dy,
                                                myops_operand x, const void* mean, const void* w, int64_t M,
                                                int64_t N, double eps, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  if ((dtype == MYOPS_BF16 || (dtype == MYOPS_F16 && ln_denormals_kept())) && N >= MYOPS_LN_BWD_F32_MIN_N &&
      x.col_stride == 1 && dy.col_stride == 1 && dx.col_stride == 1)
    return layer_norm_bwd_half(dx, ws, dy, x, (const float*)mean, w, M, N, eps, dtype);
  if (dtype != MYOPS_F64 && N >= MYOPS_LN_BWD_F32_MIN_N)
    return layer_norm_bwd_f32(dx, ws, dy, x, (const float*)mean, w, M, N, eps, dtype, es);
  const int64_t n1 = N > 0 ? N : 1;
  double* g = (double*)malloc((size_t)n1 * 3 * sizeof(double));
  if (g == NULL) return MYOPS_EARG;
  double *xh = g + n1, *wd = g + 2 * n1;  /* dy (then dx), x (then xhat) rows; the weight */
  myops_load_param(dtype, w, N, wd);
  for (int64_t r = 0; r < M; ++r) {
    myops_load_row(dtype, myops_row(&dy, r, es), dy.col_stride, N, g);
    myops_load_row(dtype, myops_row(&x, r, es), x.col_stride, N, xh);
    const double mu = myops_sum(xh, N) / (double)N;
    const double rs = 1.0 / sqrt(myops_sum_sq_dev(xh, N, mu) / (double)N + eps);
    for (int64_t i = 0; i < N; ++i) xh[i] = (xh[i] - mu) * rs;
    if (ws) {
      for (int64_t i = 0; i < N; ++i) ws[i] += g[i] * xh[i];
      for (int64_t i = 0; i < N; ++i) ws[N + i] += g[i];
    }
    if (w) for (int64_t i = 0; i < N; ++i) g[i] *= wd[i];  /* g * w from here on */
    const double mg = myops_sum(g, N) / (double)N, mgx = myops_dot(g, xh, N) / (double)N;
    for (int64_t i = 0; i < N; ++i) g[i] = rs * (g[i] - mg - xh[i] * mgx);
    myops_store_row(dtype, myops_out_row(&dx, r, es), dx.col_stride, N, g);
  }
  free(g);
  return MYOPS_OK;
}
#undef LN_FWD_ROWS
#undef LN_LD
