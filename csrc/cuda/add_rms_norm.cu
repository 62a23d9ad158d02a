// add_rms_norm: s = x + residual; y = rms_norm(s) in one pass over rows [M, N]; kernels in rms_norm.cuh.
#include "rms_norm.cuh"

using namespace myops;

extern "C" int myops_add_rms_norm_cuda(myops_out_operand y, myops_out_operand s, void* rstd, myops_operand x,
                                       myops_operand residual, const void* w, int64_t M, int64_t N, double eps,
                                       int dtype, void* stream) {
  return rms::forward<true>(y, s, rstd, x, residual, w, M, N, eps, dtype, stream);
}

extern "C" int64_t myops_add_rms_norm_backward_ws_cuda(myops_operand dy, myops_operand s, myops_operand ds_out,
                                                       const void* w, int64_t M, int64_t N, int dtype) {
  return rms::backward_ws_rows(dy, s, ds_out, w, M, N, dtype, true);
}

// dx (= d residual) = rms_norm backward through s, plus ds_out (the gradient of the s output).
extern "C" int myops_add_rms_norm_backward_cuda(myops_out_operand dx, void* ws, myops_operand dy, myops_operand s,
                                                myops_operand ds_out, const void* rstd, const void* w, int64_t M,
                                                int64_t N, double eps, int dtype, void* stream) {
  return rms::backward<true>(dx, ws, dy, s, ds_out, rstd, w, M, N, eps, dtype, stream);
}
