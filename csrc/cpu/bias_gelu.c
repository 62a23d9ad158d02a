/* bias_gelu: out = gelu_tanh(x + bias); backward: dx = g * gelu_tanh'(x + bias) (dbias = sum of dx over rows).
 *   gelu_tanh(u) = 0.5 u (1 + tanh(y)), y = k (u + c u^3), k = sqrt(2/pi), c = 0.044715
 * computed, as in cuda/bias_gelu.cu, through s = sigmoid(2y), 1 - s = s e with e = exp(-2y):
 *   gelu_tanh(u) = u s,   gelu_tanh'(u) = s + 2 u s (1 - s) k (1 + 3 c u^2)   (no cancellation for u < 0) */
#include <tgmath.h>
#include "elementwise.h"

#define MYOPS_GELU_K 0.7978845608028654
#define MYOPS_GELU_C 0.044715
/* exp(-2y) with -2y capped where exp would overflow (float: 87, double: 700) */
#define MYOPS_GELU_E(T, u) \
  exp(fmin((T)-2 * (T)MYOPS_GELU_K * ((u) + (T)MYOPS_GELU_C * (u) * (u) * (u)), sizeof(T) == 4 ? (T)87 : (T)700))

MYOPS_EW_CPU_ENTRY(myops_bias_gelu_cpu, 2, 1, {
  const T u = in[0][e] + in[1][e];
  out[0][e] = u / ((T)1 + MYOPS_GELU_E(T, u));
})
MYOPS_EW_CPU_ENTRY(myops_bias_gelu_backward_cpu, 3, 1, {
  const T u = in[1][e] + in[2][e];
  const T ex = MYOPS_GELU_E(T, u);
  const T s = (T)1 / ((T)1 + ex);
  out[0][e] = in[0][e] * (s + (T)2 * u * s * (s * ex) * (T)MYOPS_GELU_K * ((T)1 + (T)(3 * MYOPS_GELU_C) * u * u));
})
