// log_softmax over rows [M, N]; kernels in softmax.cuh.
#include "softmax.cuh"

using namespace myops;

extern "C" int myops_log_softmax_cuda(myops_out_operand y, myops_operand x, int64_t M, int64_t N, int dtype,
                                      void* stream) {
  return softmax::forward<true>(y, x, M, N, dtype, stream);
}

extern "C" int myops_log_softmax_backward_cuda(myops_out_operand dx, myops_operand dy, myops_operand y, int64_t M,
                                               int64_t N, int dtype, void* stream) {
  return softmax::backward<true>(dx, dy, y, M, N, dtype, stream);
}
