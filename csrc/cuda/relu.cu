// relu:          out = max(x, 0), NaN propagates (as torch.relu).
// relu_backward: dx = out > 0 ? g : 0, from the forward's output (as torch's threshold_backward).
#include "elementwise.cuh"

struct ReluOp {
  static constexpr int NIN = 1, NOUT = 1;
  explicit ReluOp(const double*) {}
  template <class C> __device__ void operator()(C (&o)[1], const C (&i)[1]) const {
    o[0] = (i[0] > C(0) || i[0] != i[0]) ? i[0] : C(0);
  }
};

struct ReluBackwardOp {  // in: grad, out
  static constexpr int NIN = 2, NOUT = 1;
  explicit ReluBackwardOp(const double*) {}
  template <class C> __device__ void operator()(C (&o)[1], const C (&i)[2]) const {
    o[0] = i[1] > C(0) ? i[0] : C(0);
  }
};

MYOPS_EW_CUDA_ENTRY(myops_relu_cuda, ReluOp)
MYOPS_EW_CUDA_ENTRY(myops_relu_backward_cuda, ReluBackwardOp)
