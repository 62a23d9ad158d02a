/* mul: out = a * b (same shape). */
#include "elementwise.h"

MYOPS_EW_CPU_ENTRY(myops_mul_cpu, 2, 1, out[0][e] = in[0][e] * in[1][e];)
