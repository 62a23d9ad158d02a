/* layer_norm on the CPU, rows [M, N]: fp64 math for fp64 rows and the backward of rows under 32 elements, fp32
 * elementwise with fp64-added sums for the others; formulas in csrc/cuda/layer_norm.cu. w, b null when absent;
 * ws null, or [2][N] fp64 receiving this call's rows' dw and db contributions (added to what it holds). */
#include "rows.h"

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
MYOPS_CPU_HOT LnStats ln_stats_f32(const float* xv, int64_t N, double eps) {
  const float k = N > 0 ? xv[0] : 0.f;
  const float c = (float)((double)k + myops_sum_devf_blocked(xv, N, k) / (double)N);
  double s1, s2;
  myops_dev_moments_f(xv, N, c, &s1, &s2);
  LnStats st;
  st.mud = (double)c + s1 / (double)N;
  const double var = (s2 - s1 * s1 / (double)N) / (double)N;
  st.hi = (float)st.mud;
  st.lo = (float)(st.mud - (double)st.hi);
  st.rsd = 1.0 / sqrt((var < 0 ? 0 : var) + eps);
  return st;
}

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
  for (int64_t r = 0; r < M; ++r) {
    const float* xv = myops_row_f32(&x, r, N, dtype, es, v);
    float* yv = myops_out_row_f32(&y, r, dtype, es, v);
    const LnStats st = ln_stats_f32(xv, N, eps);
    const float hi = st.hi, lo = st.lo, rs = (float)st.rsd;
    myops_st_stat(dtype, mean, r, st.mud);
    myops_st_stat(dtype, rstd, r, st.rsd);
    if (w && b) for (int64_t i = 0; i < N; ++i) yv[i] = ((xv[i] - hi) - lo) * rs * wf[i] + bf[i];
    else if (w) for (int64_t i = 0; i < N; ++i) yv[i] = ((xv[i] - hi) - lo) * rs * wf[i];
    else if (b) for (int64_t i = 0; i < N; ++i) yv[i] = ((xv[i] - hi) - lo) * rs + bf[i];
    else for (int64_t i = 0; i < N; ++i) yv[i] = ((xv[i] - hi) - lo) * rs;
    myops_put_row_f32(&y, r, N, dtype, es, yv, v);
  }
  free(v);
  return MYOPS_OK;
}

MYOPS_CPU_VEC int myops_layer_norm_cpu(myops_out_operand y, void* mean, void* rstd, myops_operand x,
                                       const void* w, const void* b, int64_t M, int64_t N, double eps, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
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
 * its statistics as the forward's (ln_stats_f32), its row sums in fp32 blocks added in fp64, dw and db added
 * in fp64. Shorter rows keep the fp64 form below. The tests' rule (2x eager's error plus a floor), 600-900 random
 * calls per N of 1-17 rows, x scale 0.1-100, offset 0-1000, dy offset 0 or 100, with this form on every row: fp32
 * broke it at N = 2 (1 of 900 calls; session 24 saw 81 of 3000 rows) and came within 1.96x at N = 4; from N = 8 to
 * 65536 every error stayed under the floor, and so did every bf16 and fp16 one from N = 2. One thread, [1024, 1024],
 * backward alone, fp64 -> fp32 form: fp32 573-769 -> 409-479 us, bf16 615-771 -> 449-459. */
#ifndef MYOPS_LN_BWD_F32_MIN_N
#define MYOPS_LN_BWD_F32_MIN_N 32
#endif
MYOPS_CPU_VEC static int layer_norm_bwd_f32(myops_out_operand dx, double* ws, myops_operand dy, myops_operand x,
                                            const void* w, int64_t M, int64_t N, double eps, int dtype, int64_t es) {
  float* buf = (float*)malloc((size_t)N * 4 * sizeof(float));
  if (buf == NULL) return MYOPS_EARG;
  float *xb = buf, *gb = buf + N, *h = buf + 2 * N, *wf = buf + 3 * N;  /* x, dy (then dx) rows; xhat; weight */
  if (w) myops_load_f32(dtype, w, 1, N, wf);
  for (int64_t r = 0; r < M; ++r) {
    const float* xv = myops_row_f32(&x, r, N, dtype, es, xb);
    const float* gv = myops_row_f32(&dy, r, N, dtype, es, gb);
    const LnStats st = ln_stats_f32(xv, N, eps);
    const float hi = st.hi, lo = st.lo, rs = (float)st.rsd;
    for (int64_t i = 0; i < N; ++i) h[i] = ((xv[i] - hi) - lo) * rs;
    if (ws) {
      for (int64_t i = 0; i < N; ++i) ws[i] += (double)(gv[i] * h[i]);
      for (int64_t i = 0; i < N; ++i) ws[N + i] += (double)gv[i];
    }
    double sg, sgx;
    if (w) MYOPS_SUMF2_BLOCKED(N, gv[k] * wf[k], gv[k] * wf[k] * h[k], sg, sgx);
    else MYOPS_SUMF2_BLOCKED(N, gv[k], gv[k] * h[k], sg, sgx);
    const float mg = (float)(sg / (double)N), mgx = (float)(sgx / (double)N);
    float* dv = myops_out_row_f32(&dx, r, dtype, es, gb);  /* (gb: in place of dy, element by element) */
    if (w) for (int64_t i = 0; i < N; ++i) dv[i] = rs * ((gv[i] * wf[i] - mg) - h[i] * mgx);
    else for (int64_t i = 0; i < N; ++i) dv[i] = rs * ((gv[i] - mg) - h[i] * mgx);
    myops_put_row_f32(&dx, r, N, dtype, es, dv, gb);
  }
  free(buf);
  return MYOPS_OK;
}

/* The backward pass recomputes mean and rstd from x in fp64 instead of reading the forward's, which are rounded to
 * fp32: for short rows the terms of dx cancel (N = 2: dx = r * (g - mean(g)) * eps * r^2, a difference of terms of
 * size r * g), and x - mean(fp32) alone then cost up to 7x eager's error. */
MYOPS_CPU_VEC int myops_layer_norm_backward_cpu(myops_out_operand dx, double* ws, myops_operand dy,
                                                myops_operand x, const void* w, int64_t M, int64_t N, double eps,
                                                int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  if (dtype != MYOPS_F64 && N >= MYOPS_LN_BWD_F32_MIN_N)
    return layer_norm_bwd_f32(dx, ws, dy, x, w, M, N, eps, dtype, es);
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
