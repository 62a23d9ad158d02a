// softmax over rows [M, N]; kernels in softmax.cuh.
#include "softmax.cuh"

using namespace myops;

extern "C" int myops_softmax_cuda(myops_out_operand y, myops_operand x, int64_t M, int64_t N, int dtype,
                                void* stream) {
  return softmax::forward<false>(y, x, M, N, dtype, stream);
}

extern "C" int myops_softmax_backward_cuda(myops_out_operand dx, myops_operand dy, myops_operand y, int64_t M,
                                         int64_t N, int dtype, void* stream) {
  return softmax::backward<false>(dx, dy, y, M, N, dtype, stream);
}

// softmax::mis_rows for the registration layer (softmax's and log_softmax's: one geometry): 1 where rows [M, N] of
// dtype take the misaligned kernels once their operands are laid out as fresh tensors', else 0.
extern "C" int myops_softmax_mis_rows_cuda(int64_t M, int64_t N, int dtype, int bwd) {
  return softmax::mis_rows(M, N, dtype, bwd != 0) ? 1 : 0;
}
