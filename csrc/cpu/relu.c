/* relu: out = max(x, 0) with NaN propagating; relu_backward: dx = out > 0 ? g : 0. */
#include "elementwise.h"

MYOPS_EW_CPU_ENTRY(myops_relu_cpu, 1, 1, { const T x = in[0][e]; out[0][e] = (x > 0 || x != x) ? x : (T)0; })
MYOPS_EW_CPU_ENTRY(myops_relu_backward_cpu, 2, 1, out[0][e] = in[1][e] > 0 ? in[0][e] : (T)0;)
