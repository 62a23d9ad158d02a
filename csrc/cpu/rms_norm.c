/* rms_norm on the CPU: kernels in rms_norm.h. */
#include "rms_norm.h"

int myops_rms_norm_cpu(myops_out_operand y, void* rstd, myops_operand x, const void* w, int64_t M, int64_t N,
                       double eps, int dtype) {
  return myops_rms_forward_cpu(&y, NULL, rstd, &x, NULL, w, M, N, eps, dtype);
}

int myops_rms_norm_backward_cpu(myops_out_operand dx, double* ws, myops_operand dy, myops_operand x, const void* w,
                                int64_t M, int64_t N, double eps, int dtype) {
  return myops_rms_backward_cpu(&dx, ws, &dy, &x, NULL, w, M, N, eps, dtype);
}
