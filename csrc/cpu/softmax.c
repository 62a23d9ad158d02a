/* softmax on the CPU: kernels in softmax.h. */
#include "softmax.h"

int myops_softmax_cpu(myops_out_operand y, myops_operand x, int64_t M, int64_t N, int dtype) {
  return softmax_rows_forward(&y, &x, M, N, dtype, 0);
}

int myops_softmax_backward_cpu(myops_out_operand dx, myops_operand dy, myops_operand y, int64_t M, int64_t N,
                             int dtype) {
  return softmax_rows_backward(&dx, &dy, &y, M, N, dtype, 0);
}

/* Over a dim that is not innermost: [A, D, B] in memory order, columns [c0, c1) of the A * B (softmax_cols_*). */
int myops_softmax_cols_cpu(void* y, const void* x, int64_t D, int64_t B, int64_t c0, int64_t c1, int dtype) {
  return softmax_cols_forward(y, x, D, B, c0, c1, dtype, 0);
}

int myops_softmax_backward_cols_cpu(void* dx, const void* dy, const void* y, int64_t D, int64_t B, int64_t c0,
                                 int64_t c1, int dtype) {
  return softmax_cols_backward(dx, dy, y, D, B, c0, c1, dtype, 0);
}
