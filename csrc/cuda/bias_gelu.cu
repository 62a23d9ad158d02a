// bias_gelu:          out = gelu_tanh(x + bias)              x [rows, hidden], bias [hidden] (row_stride 0)
// bias_gelu_backward: du = g * gelu_tanh'(x + bias);  dx = du;  dbias = sum_rows(du) (by the sum op)
//   gelu_tanh(u)  = 0.5 u (1 + t),  t = tanh(k (u + c u^3)),  k = sqrt(2/pi), c = 0.044715
//   gelu_tanh'(u) = 0.5 (1 + t) + 0.5 u (1 - t^2) k (1 + 3 c u^2)
#include "elementwise.cuh"

namespace {
constexpr double kK = 0.7978845608028654, kC = 0.044715;

// tanh through one MUFU.EX2 and a division instead of tanhf's longer sequence: bf16 bias_gelu would otherwise be
// arithmetic-bound. Only 1 + t reaches the output, so the absolute error of t (a few fp32 ulps) is what counts.
__device__ __forceinline__ float fast_tanh(float y) { return 1.f - 2.f / (1.f + __expf(2.f * y)); }
__device__ __forceinline__ double fast_tanh(double y) { return tanh(y); }

template <class A> __device__ __forceinline__ A gelu_t(A u) { return fast_tanh(A(kK) * (u + A(kC) * u * u * u)); }
}  // namespace

struct BiasGeluOp {
  static constexpr int NIN = 2, NOUT = 1;
  explicit BiasGeluOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[1], const A (&i)[2]) const {
    const A u = i[0] + i[1];
    o[0] = A(0.5) * u * (A(1) + gelu_t(u));
  }
};

struct BiasGeluBackwardOp {  // in: grad, x, bias
  static constexpr int NIN = 3, NOUT = 1;
  explicit BiasGeluBackwardOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[1], const A (&i)[3]) const {
    const A u = i[1] + i[2];
    const A t = gelu_t(u);
    const A d = A(0.5) * (A(1) + t) + A(0.5) * u * (A(1) - t * t) * A(kK) * (A(1) + A(3 * kC) * u * u);
    o[0] = i[0] * d;
  }
};

MYOPS_EW_CUDA_ENTRY(myops_bias_gelu_cuda, BiasGeluOp)
MYOPS_EW_CUDA_ENTRY(myops_bias_gelu_backward_cuda, BiasGeluBackwardOp)
