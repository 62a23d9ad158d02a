/* rms_norm.h: rms_norm and add_rms_norm on the CPU (rows [M, N]; fp64 math for fp64 rows and the backward of rows
 * under 32 elements, fp32 elementwise with fp64-added sums for the others). See csrc/cuda/rms_norm.cuh for the
 * formulas. res / ds_out are null for plain rms_norm; w null means no weight; ws [N] (fp64) receives this call's
 * rows' dw contributions (added to what it holds). */
#ifndef MYOPS_CPU_RMS_NORM_H
#define MYOPS_CPU_RMS_NORM_H

#include "rows.h"

/* Rows stored in fp32 or narrower, read as fp32 rows (unit-stride fp32 ones in place): s = x + r is the fp32 sum
 * rounded to the dtype (for two floats the same as rounding their exact fp64 sum), its squares are summed in fp64,
 * and y = s * (rs w) is formed in fp64 and rounded once to fp32 (then to the dtype): the fp64 path's values, in three
 * passes over fp32 rows instead of seven over fp64 buffers. */
MYOPS_CPU_HOT void myops_round_row_f32(int dtype, float* v, int64_t n) { /* to the dtype's values, kept as fp32 */
  int64_t i;
  if (dtype == MYOPS_BF16) for (i = 0; i < n; ++i) v[i] = myops_bf16_to_f32(myops_f32_to_bf16(v[i]));
  else if (dtype == MYOPS_F16) for (i = 0; i < n; ++i) v[i] = myops_f16_to_f32(myops_f32_to_f16(v[i]));
}
MYOPS_CPU_HOT int myops_rms_forward_f32(const myops_out_operand* y, const myops_out_operand* s_out, void* rstd,
                                        const myops_operand* x, const myops_operand* res, const double* wd, int64_t M,
                                        int64_t N, double eps, int dtype, int64_t es, float* buf) {
  float *xb = buf, *rb = buf + N, *sb = buf + 2 * N, *yb = buf + 3 * N;  /* [N] each */
  for (int64_t r = 0; r < M; ++r) {
    const float* v = myops_row_f32(x, r, N, dtype, es, xb);
    if (res) {
      const float* u = myops_row_f32(res, r, N, dtype, es, rb);
      float* sv = myops_out_row_f32(s_out, r, dtype, es, sb);
      for (int64_t i = 0; i < N; ++i) sv[i] = v[i] + u[i];
      myops_round_row_f32(dtype, sv, N);
      myops_put_row_f32(s_out, r, N, dtype, es, sv, sb);
      v = sv;
    }
    double myops_sum_result_;
    MYOPS_ROW_SUM(N, (double)v[k] * (double)v[k]);
    const double rs = 1.0 / sqrt(myops_sum_result_ / (double)N + eps);
    if (rstd) myops_st_stat(dtype, rstd, r, rs);
    float* yv = myops_out_row_f32(y, r, dtype, es, yb);
    if (wd) for (int64_t i = 0; i < N; ++i) yv[i] = (float)(v[i] * (rs * wd[i]));
    else for (int64_t i = 0; i < N; ++i) yv[i] = (float)(v[i] * rs);
    myops_put_row_f32(y, r, N, dtype, es, yv, yb);
  }
  return MYOPS_OK;
}

MYOPS_CPU_VEC static int myops_rms_forward_cpu(const myops_out_operand* y, const myops_out_operand* s_out, void* rstd,
                                 const myops_operand* x, const myops_operand* res, const void* w, int64_t M,
                                 int64_t N, double eps, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  const int64_t n1 = N > 0 ? N : 1;
  double* v = (double*)malloc((size_t)n1 * 3 * sizeof(double));  /* (fp32 rows: 4 of them in the first 2 n1) */
  if (v == NULL) return MYOPS_EARG;
  double *u = v + n1, *wd = v + 2 * n1;  /* the residual row; the weight as fp64 */
  myops_load_param(dtype, w, N, wd);
  if (dtype != MYOPS_F64) {
    const int rc = myops_rms_forward_f32(y, s_out, rstd, x, res, w ? wd : NULL, M, N, eps, dtype, es, (float*)v);
    free(v);
    return rc;
  }
  for (int64_t r = 0; r < M; ++r) {
    myops_load_row(dtype, myops_row(x, r, es), x->col_stride, N, v);
    if (res) {
      myops_load_row(dtype, myops_row(res, r, es), res->col_stride, N, u);
      myops_add_round_row(dtype, v, u, N);
      myops_store_row(dtype, myops_out_row(s_out, r, es), s_out->col_stride, N, v);
    }
    const double rs = 1.0 / sqrt(myops_sum_sq(v, N) / (double)N + eps);
    if (rstd) myops_st_stat(dtype, rstd, r, rs);
    if (w) for (int64_t i = 0; i < N; ++i) v[i] *= rs * wd[i];
    else for (int64_t i = 0; i < N; ++i) v[i] *= rs;
    myops_store_row(dtype, myops_out_row(y, r, es), y->col_stride, N, v);
  }
  free(v);
  return MYOPS_OK;
}

/* The backward of rows of at least MYOPS_RMS_BWD_F32_MIN_N (32) elements stored in fp32 or narrower, in fp32: rstd
 * from the squares summed in fp32 blocks added in fp64, g w and dx in fp32, the row sum of g w s likewise, dw added
 * in fp64. Shorter rows keep the fp64 form below. The tests' rule (2x eager's error plus a floor), 400-600 random
 * calls per N of 1-17 rows (x scale 0.1-100, offset 0-1000, dy offset 0 or 100) with this form on every row: fp32
 * broke it at N = 1 (rms_norm 8 and 4 of 600 for dx and dw, add_rms_norm 9, 9, 4) and N = 2 (rms_norm 1); from
 * N = 4 to 4096 every error stayed under the floor, and every bf16 and fp16 one from N = 1. One thread,
 * [1024, 1024], backward alone, fp64 -> fp32 form: fp32 511-576 -> 223-232 us, bf16 496-502 -> 332-335. */
#ifndef MYOPS_RMS_BWD_F32_MIN_N
#define MYOPS_RMS_BWD_F32_MIN_N 32
#endif
MYOPS_CPU_HOT int myops_rms_backward_f32(const myops_out_operand* dx, double* ws, const myops_operand* dy,
                                         const myops_operand* s, const myops_operand* ds_out, const void* w,
                                         int64_t M, int64_t N, double eps, int dtype, int64_t es) {
  float* buf = (float*)malloc((size_t)N * 4 * sizeof(float));
  if (buf == NULL) return MYOPS_EARG;
  float *gb = buf, *sb = buf + N, *eb = buf + 2 * N, *wf = buf + 3 * N;  /* dy (then dx), s, ds_out rows; weight */
  if (w) myops_load_f32(dtype, w, 1, N, wf);
  for (int64_t r = 0; r < M; ++r) {
    const float* gv = myops_row_f32(dy, r, N, dtype, es, gb);
    const float* v = myops_row_f32(s, r, N, dtype, es, sb);
    double myops_sum_result_;
    MYOPS_SUMF_BLOCKED(N, v[k] * v[k]);
    const double rsd = 1.0 / sqrt(myops_sum_result_ / (double)N + eps);
    const float rs = (float)rsd;
    if (ws) for (int64_t i = 0; i < N; ++i) ws[i] += (double)(gv[i] * v[i] * rs);
    if (w) MYOPS_SUMF_BLOCKED(N, gv[k] * wf[k] * v[k]);
    else MYOPS_SUMF_BLOCKED(N, gv[k] * v[k]);
    const float kk = (float)(myops_sum_result_ / (double)N * rsd * rsd);
    float* d = myops_out_row_f32(dx, r, dtype, es, gb);  /* (gb: in place of dy, element by element) */
    if (w) for (int64_t i = 0; i < N; ++i) d[i] = rs * (gv[i] * wf[i] - v[i] * kk);
    else for (int64_t i = 0; i < N; ++i) d[i] = rs * (gv[i] - v[i] * kk);
    if (ds_out) {
      const float* u = myops_row_f32(ds_out, r, N, dtype, es, eb);
      for (int64_t i = 0; i < N; ++i) d[i] += u[i];
    }
    myops_put_row_f32(dx, r, N, dtype, es, d, gb);
  }
  free(buf);
  return MYOPS_OK;
}

/* The backward pass recomputes rstd from s in fp64 instead of reading the forward's: that one is rounded to fp32,
 * and where the terms of ds cancel (N = 1: ds = g * rstd^3 * eps, computed as a difference of two terms of size
 * g * rstd) its rounding error, amplified by (mean(s^2) + eps) / eps, came out at up to 10x eager's error. */
MYOPS_CPU_VEC static int myops_rms_backward_cpu(const myops_out_operand* dx, double* ws, const myops_operand* dy,
                                  const myops_operand* s, const myops_operand* ds_out, const void* w, int64_t M,
                                  int64_t N, double eps, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  if (dtype != MYOPS_F64 && N >= MYOPS_RMS_BWD_F32_MIN_N)
    return myops_rms_backward_f32(dx, ws, dy, s, ds_out, w, M, N, eps, dtype, es);
  const int64_t n1 = N > 0 ? N : 1;
  double* g = (double*)malloc((size_t)n1 * 4 * sizeof(double));
  if (g == NULL) return MYOPS_EARG;
  double *v = g + n1, *e = g + 2 * n1, *wd = g + 3 * n1;  /* dy (then dx), s, ds_out rows; the weight */
  myops_load_param(dtype, w, N, wd);
  for (int64_t r = 0; r < M; ++r) {
    myops_load_row(dtype, myops_row(dy, r, es), dy->col_stride, N, g);
    myops_load_row(dtype, myops_row(s, r, es), s->col_stride, N, v);
    const double rs = 1.0 / sqrt(myops_sum_sq(v, N) / (double)N + eps);
    if (ws) for (int64_t i = 0; i < N; ++i) ws[i] += g[i] * v[i] * rs;  /* null when the weight needs no grad */
    if (w) for (int64_t i = 0; i < N; ++i) g[i] *= wd[i];              /* g * w from here on */
    const double k = myops_dot(g, v, N) / (double)N * rs * rs;
    for (int64_t i = 0; i < N; ++i) g[i] = rs * (g[i] - v[i] * k);
    if (ds_out) {
      myops_load_row(dtype, myops_row(ds_out, r, es), ds_out->col_stride, N, e);
      for (int64_t i = 0; i < N; ++i) g[i] += e[i];
    }
    myops_store_row(dtype, myops_out_row(dx, r, es), dx->col_stride, N, g);
  }
  free(g);
  return MYOPS_OK;
}

#endif /* MYOPS_CPU_RMS_NORM_H */
