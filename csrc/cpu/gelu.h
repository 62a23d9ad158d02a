/* gelu.h: gelu(u, approximate="tanh") pieces shared by bias_gelu.c and geglu.c; the C twin of cuda/gelu.cuh.
 *   gelu_tanh(u) = 0.5 u (1 + tanh(y)), y = k (u + c u^3), k = sqrt(2/pi), c = 0.044715
 * computed through s = sigmoid(2y), 1 - s = s e with e = exp(-2y):
 *   gelu_tanh(u) = u s = u / (1 + e),   gelu_tanh'(u) = s + 2 u s (1 - s) k (1 + 3 c u^2)   (no cancellation
 * for u < 0). Macros over T (float or double), like the elementwise bodies that use them; MYOPS_EXP and MYOPS_FMIN
 * (vmath.h) pick T's precision. */
#ifndef MYOPS_CPU_GELU_H
#define MYOPS_CPU_GELU_H

#include "vmath.h"

#define MYOPS_GELU_K 0.7978845608028654
#define MYOPS_GELU_C 0.044715
/* exp(-2y) with -2y capped where exp would overflow (float: 87, double: 700) */
#define MYOPS_GELU_E(T, u) \
  MYOPS_EXP(MYOPS_FMIN((T)-2 * (T)MYOPS_GELU_K * ((u) + (T)MYOPS_GELU_C * (u) * (u) * (u)), sizeof(T) == 4 ? (T)87 : (T)700))
/* gelu_tanh'(u) from s = sigmoid(2y) and s1 = 1 - s */
#define MYOPS_GELU_GRAD(T, u, s, s1) \
  ((s) + (T)2 * (u) * (s) * (s1) * (T)MYOPS_GELU_K * ((T)1 + (T)(3 * MYOPS_GELU_C) * (u) * (u)))

#endif /* MYOPS_CPU_GELU_H */
