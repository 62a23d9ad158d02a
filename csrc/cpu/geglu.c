/* geglu: out = gelu_tanh(gate) * up; backward: dgate = g * up * gelu_tanh'(gate), dup = g * gelu_tanh(gate).
 * gelu_tanh and its derivative in the cancellation-free sigmoid form, as in cuda/geglu.cu: gelu.h. */
#include "gelu.h"
#include "elementwise.h"

MYOPS_EW_CPU_ENTRY(myops_geglu_cpu, 2, 1, {
  const T x = in[0][e];
  out[0][e] = x / ((T)1 + MYOPS_GELU_E(T, x)) * in[1][e];
})
MYOPS_EW_CPU_ENTRY(myops_geglu_backward_cpu, 3, 2, {
  const T x = in[1][e];
  const T ex = MYOPS_GELU_E(T, x);
  const T s = (T)1 / ((T)1 + ex);
  out[0][e] = in[0][e] * in[2][e] * MYOPS_GELU_GRAD(T, x, s, s * ex);
  out[1][e] = in[0][e] * (x * s); /* gelu_tanh(x) = x s */
})
