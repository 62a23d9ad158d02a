/* cross_entropy on the CPU, logits rows [M, C]: fp64 math for fp64 logits; for fp32 and narrower the row is held in
 * fp32 and its exps are fp32 (vmath.h's myops_expf_u20, see softmax.h), summed as they come in fp32 blocks of fp64
 * totals (rows.h, myops_exp_sumf: the exps vectorize in that loop; one thread, [1024, 1024], forward fp32 402-405 ->
 * 346-348 us, bf16 431-436 -> 381-386, eager 385-412; loss and gradient errors against float64 unchanged, 1.00x /
 * 1.05x eager's; with myops_expf_u20, forward fp32 341 -> 279, bf16 373 -> 325, forward+backward fp32 844 -> 740,
 * bf16 970 -> 858), the other sums and the loss fp64; formulas in csrc/cuda/cross_entropy.cu. loss [M] and stats
 * [M, 2] are fp32 (fp64 for fp64); an out-of-range target (validated by the caller unless it opted out) is clamped
 * for its read and gives that row a NaN log-sum, so a NaN loss and gradient. */
#include "rows.h"

MYOPS_CPU_VEC int myops_cross_entropy_cpu(void* loss, void* stats, myops_operand x, const int64_t* target,
                                          int64_t t_stride, int64_t M, int64_t C, int64_t ignore_index,
                                          double smoothing, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  const int64_t c1 = C > 0 ? C : 1;
  double* v = (double*)malloc((size_t)c1 * 2 * sizeof(double));  /* [C] the row, [C] exp scratch */
  if (v == NULL) return MYOPS_EARG;
  double* e = v + c1;
  float* f = (float*)v;  /* fp32 and narrower: [C] the row (a converted one), in the first half */
  for (int64_t r = 0; r < M; ++r) {
    /* NaN needs no flag: max skips it, and exp(NaN - m) makes the log-sum NaN. sx (the row's sum) only with
     * smoothing. */
    double m, sx = 0.0, ls, xt;
    const int64_t t = target[r * t_stride], tc = t < 0 ? 0 : (t >= C ? C - 1 : t);
    if (dtype != MYOPS_F64) {
      const float* xv = myops_row_f32(&x, r, C, dtype, es, f);  /* (unit-stride fp32: in place) */
      int mid;
      const float mf = myops_maxf_mid(xv, C, &mid);
      m = mf, ls = log(myops_exp_sumf(xv, C, mf, mid)), xt = C > 0 ? xv[tc] : 0.0;
      if (smoothing != 0.0) sx = myops_sumf(xv, C);
    } else {
      myops_load_row(dtype, myops_row(&x, r, es), x.col_stride, C, v);
      m = myops_max(v, C), ls = log(myops_exp_sum(e, v, C, m)), xt = C > 0 ? v[tc] : 0.0;
      if (smoothing != 0.0) sx = myops_sum(v, C);
    }
    myops_st_stat(dtype, stats, 2 * r, m);
    myops_st_stat(dtype, stats, 2 * r + 1, ls);
    if (t == ignore_index) {
      myops_st_stat(dtype, loss, r, 0.0);
    } else {
      const double l = t < 0 || t >= C ? NAN : ls;
      if (l != ls) myops_st_stat(dtype, stats, 2 * r + 1, l);
      /* (the smoothing term only with smoothing: 0 * (m - sum x / C) is NaN for a row holding -inf) */
      const double lo = l + (1.0 - smoothing) * (m - xt);
      myops_st_stat(dtype, loss, r, smoothing != 0.0 ? lo + smoothing * (m - sx / (double)C) : lo);
    }
  }
  free(v);
  return MYOPS_OK;
}

MYOPS_CPU_VEC int myops_cross_entropy_backward_cpu(myops_out_operand dx, myops_operand x, const int64_t* target,
                                                   int64_t t_stride, const void* stats, const void* grad,
                                                   int64_t g_stride, int64_t M, int64_t C, int64_t ignore_index,
                                                   double smoothing, int dtype) {
  const int64_t es = myops_dtype_size(dtype);
  if (es == 0) return MYOPS_EDTYPE;
  double* v = (double*)malloc((size_t)(C > 0 ? C : 1) * sizeof(double));  /* [C] the row, then its gradient */
  if (v == NULL) return MYOPS_EARG;
  const double sc = smoothing / (double)C;
  for (int64_t r = 0; r < M; ++r) {
    const int64_t t = target[r * t_stride];
    if (t == ignore_index) {
      for (int64_t i = 0; i < C; ++i) v[i] = 0.0;
    } else {
      const double g = myops_ld_stat(dtype, grad, r * g_stride), m = myops_ld_stat(dtype, stats, 2 * r);
      const double ls = myops_ld_stat(dtype, stats, 2 * r + 1);
      if (dtype != MYOPS_F64) { /* the row in fp32; unit-stride fp32 rows read and written in place */
        float* f = (float*)v;
        const float* xv = myops_row_f32(&x, r, C, dtype, es, f);
        float* dv = myops_out_row_f32(&dx, r, dtype, es, f);
        const double xt = t >= 0 && t < C ? xv[t] : 0.0;
        const float gf = (float)g, scf = (float)sc, mf = (float)m, lsf = (float)ls;
        for (int64_t i = 0; i < C; ++i) dv[i] = gf * (myops_expf_u20((xv[i] - mf) - lsf) - scf);
        if (t >= 0 && t < C) dv[t] = (float)(g * (myops_exp((xt - m) - ls) - sc - (1.0 - smoothing)));
        myops_put_row_f32(&dx, r, C, dtype, es, dv, f);
        continue;
      }
      myops_load_row(dtype, myops_row(&x, r, es), x.col_stride, C, v);
      const double xt = t >= 0 && t < C ? v[t] : 0.0;
      for (int64_t i = 0; i < C; ++i) v[i] = g * (myops_exp((v[i] - m) - ls) - sc);
      if (t >= 0 && t < C) v[t] = g * (myops_exp((xt - m) - ls) - sc - (1.0 - smoothing));
    }
    myops_store_row(dtype, myops_out_row(&dx, r, es), dx.col_stride, C, v);
  }
  free(v);
  return MYOPS_OK;
}
