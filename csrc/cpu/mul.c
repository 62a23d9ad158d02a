/* mul: out = a * b (same shape); mul_backward: (da, db) = (g * b, g * a). */
#include "elementwise.h"

MYOPS_EW_CPU_ENTRY(myops_mul_cpu, 2, 1, out[0][e] = in[0][e] * in[1][e];)
MYOPS_EW_CPU_ENTRY(myops_mul_backward_cpu, 3, 2, {
  out[0][e] = in[0][e] * in[2][e];
  out[1][e] = in[0][e] * in[1][e];
})
