/* add_rms_norm on the CPU: kernels in rms_norm.h. */
#include "rms_norm.h"

int myops_add_rms_norm_cpu(myops_out_operand y, myops_out_operand s, void* rstd, myops_operand x,
                           myops_operand residual, const void* w, int64_t M, int64_t N, double eps, int dtype) {
  return myops_rms_forward_cpu(&y, &s, rstd, &x, &residual, w, M, N, eps, dtype);
}

int myops_add_rms_norm_backward_cpu(myops_out_operand dx, double* ws, myops_operand dy, myops_operand s,
                                    myops_operand ds_out, const void* w, int64_t M, int64_t N, double eps,
                                    int dtype) {
  return myops_rms_backward_cpu(&dx, ws, &dy, &s, &ds_out, w, M, N, eps, dtype);
}
