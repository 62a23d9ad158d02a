// scale_bias_relu:          out = relu(x * scale + bias)          x [rows, hidden], bias [hidden] (row_stride 0)
// scale_bias_relu_backward: dpre = out > 0 ? g : 0;  dx = dpre * scale;  dbias = sum_rows(dpre)
//                           (dx written, dpre summed per row block: elementwise.cuh, ew_sum_launch)
// One rounding at the end: x * scale + bias is a single fp32 fma, where eager rounds twice in half types.
#include "elementwise.cuh"

struct ScaleBiasReluOp {
  static constexpr int NIN = 2, NOUT = 1;
  double scale;
  explicit ScaleBiasReluOp(const double* s) : scale(s[0]) {}
  template <class A> __device__ void operator()(A (&o)[1], const A (&i)[2]) const {
    const A y = i[0] * A(scale) + i[1];
    o[0] = (y > A(0) || y != y) ? y : A(0);
  }
};

struct ScaleBiasReluBackwardOp {  // in: grad, out; out: dx, dpre (summed)
  static constexpr int NIN = 2, NOUT = 2, BCAST = -1;
  double scale;
  explicit ScaleBiasReluBackwardOp(const double* s) : scale(s[0]) {}
  template <class A> __device__ void operator()(A (&o)[2], const A (&i)[2]) const {
    const A d = i[1] > A(0) ? i[0] : A(0);
    o[0] = d * A(scale);
    o[1] = d;
  }
};

MYOPS_EW_CUDA_ENTRY(myops_scale_bias_relu_cuda, ScaleBiasReluOp)
MYOPS_EW_SUM_CUDA_ENTRY(myops_scale_bias_relu_backward_cuda, ScaleBiasReluBackwardOp)
