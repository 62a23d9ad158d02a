/* softmax.h: softmax (log = 0) and log_softmax (log = 1) on the CPU, rows [M, N], fp64 math; formulas in
 * csrc/cuda/softmax.cuh. */
#ifndef MYOPS_CPU_SOFTMAX_H
#define MYOPS_CPU_SOFTMAX_H

#include "rows.h"

static int softmax_rows_forward(const myops_out_operand* y, const myops_operand* x, int64_t M, int64_t N,
                                int dtype, int is_log) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  double* v = (double*)malloc((size_t)(N > 0 ? N : 1) * sizeof(double));
  if (v == NULL) return MYOPS_EARG;
  for (int64_t r = 0; r < M; ++r) {
    myops_load_row(dtype, myops_row(x, r, es), x->col_stride, N, v);
    double m = -INFINITY, s = 0.0;
    int nan = 0;
    for (int64_t i = 0; i < N; ++i) {
      if (v[i] != v[i]) nan = 1;
      else if (v[i] > m) m = v[i];
    }
    if (is_log) {
      for (int64_t i = 0; i < N; ++i) s += exp(v[i] - m);
      const double logs = nan ? NAN : log(s);
      for (int64_t i = 0; i < N; ++i) v[i] = (v[i] - m) - logs;
    } else {
      for (int64_t i = 0; i < N; ++i) s += (v[i] = exp(v[i] - m));  /* one exp per element */
      if (nan) s = NAN;
      for (int64_t i = 0; i < N; ++i) v[i] /= s;
    }
    myops_store_row(dtype, myops_out_row(y, r, es), y->col_stride, N, v);
  }
  free(v);
  return MYOPS_OK;
}

static int softmax_rows_backward(const myops_out_operand* dx, const myops_operand* dy, const myops_operand* y,
                                      int64_t M, int64_t N, int dtype, int is_log) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  for (int64_t r = 0; r < M; ++r) {
    const char* gr = myops_row(dy, r, es);
    const char* yr = myops_row(y, r, es);
    double k = 0.0;
    for (int64_t i = 0; i < N; ++i) {
      const double g = myops_ld(dtype, gr, i * dy->col_stride);
      k += is_log ? g : g * myops_ld(dtype, yr, i * y->col_stride);
    }
    char* dr = myops_out_row(dx, r, es);
    for (int64_t i = 0; i < N; ++i) {
      const double g = myops_ld(dtype, gr, i * dy->col_stride), v = myops_ld(dtype, yr, i * y->col_stride);
      myops_st(dtype, dr, i * dx->col_stride, is_log ? g - exp(v) * k : v * (g - k));
    }
  }
  return MYOPS_OK;
}

#endif /* MYOPS_CPU_SOFTMAX_H */
