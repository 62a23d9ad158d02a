// bias_gelu:          out = gelu_tanh(x + bias)              x [rows, hidden], bias [hidden] (row_stride 0)
// bias_gelu_backward: du = g * gelu_tanh'(x + bias);  dx = du;  dbias = sum_rows(du)
//                     (dx written, du summed per row block: elementwise.cuh, ew_sum_launch)
// gelu_tanh and its derivative in the cancellation-free sigmoid form: gelu.cuh.
#include "elementwise.cuh"
#include "gelu.cuh"

struct BiasGeluOp {
  static constexpr int NIN = 2, NOUT = 1;
  explicit BiasGeluOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[1], const A (&i)[2]) const {
    o[0] = myops::gelu_tanh(i[0] + i[1]);
  }
};

struct BiasGeluBackwardOp {  // in: grad, x, bias; out: dx, dx (summed)
  static constexpr int NIN = 3, NOUT = 2, BCAST = 2;  // bias: broadcast over rows
  explicit BiasGeluBackwardOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[2], const A (&i)[3]) const {
    const A u = i[1] + i[2];
    A s, s1;
    myops::gelu_tanh_sigmoid(u, s, s1);
    o[0] = i[0] * myops::gelu_tanh_grad(u, s, s1);
    o[1] = o[0];
  }
};

MYOPS_EW_CUDA_ENTRY(myops_bias_gelu_cuda, BiasGeluOp)
MYOPS_EW_SUM_CUDA_ENTRY(myops_bias_gelu_backward_cuda, BiasGeluBackwardOp)
