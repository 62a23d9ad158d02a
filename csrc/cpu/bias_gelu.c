/* bias_gelu: out = gelu_tanh(x + bias); backward: dx = g * gelu_tanh'(x + bias) (dbias = sum of dx over rows).
 *   gelu_tanh(u) = 0.5 u (1 + tanh(k (u + c u^3))), k = sqrt(2/pi), c = 0.044715 */
#include <tgmath.h>
#include "elementwise.h"

#define MYOPS_GELU_K 0.7978845608028654
#define MYOPS_GELU_C 0.044715

MYOPS_EW_CPU_ENTRY(myops_bias_gelu_cpu, 2, 1, {
  const T u = in[0][e] + in[1][e];
  out[0][e] = (T)0.5 * u * ((T)1 + tanh((T)MYOPS_GELU_K * (u + (T)MYOPS_GELU_C * u * u * u)));
})
MYOPS_EW_CPU_ENTRY(myops_bias_gelu_backward_cpu, 3, 1, {
  const T u = in[1][e] + in[2][e];
  const T t = tanh((T)MYOPS_GELU_K * (u + (T)MYOPS_GELU_C * u * u * u));
  out[0][e] = in[0][e] * ((T)0.5 * ((T)1 + t) +
                          (T)0.5 * u * ((T)1 - t * t) * (T)MYOPS_GELU_K * ((T)1 + (T)(3 * MYOPS_GELU_C) * u * u));
})
