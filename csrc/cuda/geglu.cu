// geglu:          out = gelu_tanh(gate) * up                      gate, up: same shape (any strides)
// geglu_backward: dgate = g * up * gelu_tanh'(gate);  dup = g * gelu_tanh(gate)
// gelu_tanh and its derivative in the cancellation-free sigmoid form: gelu.cuh (shared with bias_gelu).
#include "elementwise.cuh"
#include "gelu.cuh"

struct GegluOp {  // in: gate, up
  static constexpr int NIN = 2, NOUT = 1;
  explicit GegluOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[1], const A (&i)[2]) const {
    o[0] = myops::gelu_tanh(i[0]) * i[1];
  }
};

struct GegluBackwardOp {  // in: grad, gate, up; out: dgate, dup
  static constexpr int NIN = 3, NOUT = 2;
  explicit GegluBackwardOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[2], const A (&i)[3]) const {
    const A x = i[1];
    A s, s1;
    myops::gelu_tanh_sigmoid(x, s, s1);
    o[0] = i[0] * i[2] * myops::gelu_tanh_grad(x, s, s1);
    o[1] = i[0] * (x * s);  // gelu_tanh(x) = x s
  }
};

MYOPS_EW_CUDA_ENTRY(myops_geglu_cuda, GegluOp)
MYOPS_EW_CUDA_ENTRY(myops_geglu_backward_cuda, GegluBackwardOp)
