/* cross_entropy on the CPU, logits rows [M, C], fp64 math; formulas in csrc/cuda/cross_entropy.cu. loss
 * [M] and stats [M, 2] are fp32 (fp64 for fp64); an out-of-range target (validated by the caller unless it opted out)
 * is clamped for its read and gives that row a NaN log-sum, so a NaN loss and gradient. */
#include "rows.h"

int myops_cross_entropy_cpu(void* loss, void* stats, myops_operand x, const int64_t* target, int64_t t_stride,
                            int64_t M, int64_t C, int64_t ignore_index, double smoothing, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  double* v = (double*)malloc((size_t)(C > 0 ? C : 1) * sizeof(double));
  if (v == NULL) return MYOPS_EARG;
  for (int64_t r = 0; r < M; ++r) {
    myops_load_row(dtype, myops_row(&x, r, es), x.col_stride, C, v);
    double m = -INFINITY, s = 0.0, sx = 0.0;
    int nan = 0;
    for (int64_t i = 0; i < C; ++i) {
      if (v[i] != v[i]) nan = 1;
      else if (v[i] > m) m = v[i];
      sx += v[i];
    }
    for (int64_t i = 0; i < C; ++i) s += exp(v[i] - m);
    const double ls = nan ? NAN : log(s);
    myops_st_stat(dtype, stats, 2 * r, m);
    myops_st_stat(dtype, stats, 2 * r + 1, ls);
    const int64_t t = target[r * t_stride];
    if (t == ignore_index) {
      myops_st_stat(dtype, loss, r, 0.0);
    } else {
      const double xt = v[t < 0 ? 0 : (t >= C ? C - 1 : t)];
      const double l = t < 0 || t >= C ? NAN : ls;
      if (l != ls) myops_st_stat(dtype, stats, 2 * r + 1, l);
      myops_st_stat(dtype, loss, r, l + (1.0 - smoothing) * (m - xt) + smoothing * (m - sx / (double)C));
    }
  }
  free(v);
  return MYOPS_OK;
}

int myops_cross_entropy_backward_cpu(myops_out_operand dx, myops_operand x, const int64_t* target, int64_t t_stride,
                                     const void* stats, const void* grad, int64_t g_stride, int64_t M, int64_t C,
                                     int64_t ignore_index, double smoothing, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  for (int64_t r = 0; r < M; ++r) {
    const char* xr = myops_row(&x, r, es);
    char* dr = myops_out_row(&dx, r, es);
    const int64_t t = target[r * t_stride];
    if (t == ignore_index) {
      for (int64_t i = 0; i < C; ++i) myops_st(dtype, dr, i * dx.col_stride, 0.0);
      continue;
    }
    const double g = myops_ld_stat(dtype, grad, r * g_stride), m = myops_ld_stat(dtype, stats, 2 * r);
    const double ls = myops_ld_stat(dtype, stats, 2 * r + 1);
    for (int64_t i = 0; i < C; ++i) {
      const double p = exp((myops_ld(dtype, xr, i * x.col_stride) - m) - ls);
      myops_st(dtype, dr, i * dx.col_stride, g * (p - smoothing / (double)C - (i == t ? 1.0 - smoothing : 0.0)));
    }
  }
  return MYOPS_OK;
}
