/* scale_bias_relu: out = relu(x * scale + bias); backward: dpre = out > 0 ? g : 0, dx = dpre * scale (stored),
 * dbias += dpre (column sums). */
#include "elementwise.h"

MYOPS_EW_CPU_ENTRY(myops_scale_bias_relu_cpu, 2, 1, {
  const T y = in[0][e] * (T)s[0] + in[1][e];
  out[0][e] = (y > 0 || y != y) ? y : (T)0;
})
MYOPS_EW_SUM_CPU_ENTRY(myops_scale_bias_relu_backward_cpu, 2, 2, {
  const T g = in[0][e];
  const T o = in[1][e]; /* (both loaded: see relu.c) */
  const T d = o > 0 ? g : (T)0;
  out[0][e] = d * (T)s[0];
  out[1][e] = d;
})
