// rms_norm: y = x / sqrt(mean(x^2, -1) + eps) * w over rows [M, N]; kernels in rms_norm.cuh.
#include "rms_norm.cuh"

using namespace myops;

extern "C" int myops_rms_norm_cuda(myops_out_operand y, void* rstd, myops_operand x, const void* w, int64_t M,
                                   int64_t N, double eps, int dtype, void* stream) {
  return rms::forward<false>(y, {}, rstd, x, {}, w, M, N, eps, dtype, stream);
}

extern "C" int64_t myops_rms_norm_backward_ws_cuda(myops_operand dy, myops_operand x, const void* w, int64_t M,
                                                   int64_t N, int dtype) {
  return rms::backward_ws_rows(dy, x, {}, w, M, N, dtype, false);
}

extern "C" int myops_rms_norm_backward_cuda(myops_out_operand dx, void* ws, myops_operand dy, myops_operand x,
                                            const void* rstd, const void* w, int64_t M, int64_t N, double eps,
                                            int dtype, void* stream) {
  return rms::backward<false>(dx, ws, dy, x, {}, rstd, w, M, N, eps, dtype, stream);
}
