/* softmax.h: softmax (log = 0) and log_softmax (log = 1) on the CPU, rows [M, N], fp64 math (exp to fp32 precision
 * for rows of fp32 and narrower: vmath.h); formulas in csrc/cuda/softmax.cuh. */
#ifndef MYOPS_CPU_SOFTMAX_H
#define MYOPS_CPU_SOFTMAX_H

#include "rows.h"

MYOPS_CPU_VEC static int softmax_rows_forward(const myops_out_operand* y, const myops_operand* x, int64_t M,
                                              int64_t N, int dtype, int is_log) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  const int64_t n1 = N > 0 ? N : 1;
  double* v = (double*)malloc((size_t)n1 * 2 * sizeof(double));  /* [N] the row, [N] exp scratch */
  if (v == NULL) return MYOPS_EARG;
  double* e = v + n1;
  const int lowp = dtype != MYOPS_F64;
  for (int64_t r = 0; r < M; ++r) {
    myops_load_row(dtype, myops_row(x, r, es), x->col_stride, N, v);
    /* NaN needs no flag: max skips it, exp(NaN - m) is NaN, and so is the sum every output divides by. */
    const double m = myops_max(v, N);
    if (is_log) {
      const double ls = log(myops_exp_sum(e, v, N, m, lowp));
      for (int64_t i = 0; i < N; ++i) v[i] = (v[i] - m) - ls;
    } else {
      const double s = myops_exp_sum(v, v, N, m, lowp);  /* one exp per element */
      for (int64_t i = 0; i < N; ++i) v[i] /= s;
    }
    myops_store_row(dtype, myops_out_row(y, r, es), y->col_stride, N, v);
  }
  free(v);
  return MYOPS_OK;
}

MYOPS_CPU_VEC static int softmax_rows_backward(const myops_out_operand* dx, const myops_operand* dy,
                                               const myops_operand* y, int64_t M, int64_t N, int dtype, int is_log) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  const int64_t n1 = N > 0 ? N : 1;
  double* g = (double*)malloc((size_t)n1 * 2 * sizeof(double));  /* [N] dy (then dx), [N] y */
  if (g == NULL) return MYOPS_EARG;
  double* v = g + n1;
  for (int64_t r = 0; r < M; ++r) {
    myops_load_row(dtype, myops_row(dy, r, es), dy->col_stride, N, g);
    myops_load_row(dtype, myops_row(y, r, es), y->col_stride, N, v);
    if (is_log) {
      const double k = myops_sum(g, N);
      if (dtype == MYOPS_F64) for (int64_t i = 0; i < N; ++i) g[i] -= myops_exp(v[i]) * k;
      else for (int64_t i = 0; i < N; ++i) g[i] -= myops_exp_lowp(v[i]) * k;
    } else {
      const double k = myops_dot(g, v, N);
      for (int64_t i = 0; i < N; ++i) g[i] = v[i] * (g[i] - k);
    }
    myops_store_row(dtype, myops_out_row(dx, r, es), dx->col_stride, N, g);
  }
  free(g);
  return MYOPS_OK;
}

#endif /* MYOPS_CPU_SOFTMAX_H */
