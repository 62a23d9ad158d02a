/* bias_gelu: out = gelu_tanh(x + bias); backward: dx = g * gelu_tanh'(x + bias) (stored),
 * dbias += dx (column sums).
 * gelu_tanh and its derivative in the cancellation-free sigmoid form, as in cuda/bias_gelu.cu: gelu.h. */
#include "gelu.h"
#include "elementwise.h"

MYOPS_EW_CPU_ENTRY(myops_bias_gelu_cpu, 2, 1, {
  const T u = in[0][e] + in[1][e];
  out[0][e] = u / ((T)1 + MYOPS_GELU_E(T, u));
})
MYOPS_EW_SUM_CPU_ENTRY(myops_bias_gelu_backward_cpu, 3, 2, {
  const T u = in[1][e] + in[2][e];
  const T ex = MYOPS_GELU_E(T, u);
  const T s = (T)1 / ((T)1 + ex);
  out[0][e] = in[0][e] * MYOPS_GELU_GRAD(T, u, s, s * ex);
  out[1][e] = out[0][e];
})
