// bias_gelu:          out = gelu_tanh(x + bias)              x [rows, hidden], bias [hidden] (row_stride 0)
// bias_gelu_backward: du = g * gelu_tanh'(x + bias);  dx = du;  dbias = sum_rows(du) (by the sum op)
//
//   gelu_tanh(u) = 0.5 u (1 + tanh(y)),  y = k (u + c u^3),  k = sqrt(2/pi), c = 0.044715
// Written with s = sigmoid(2y) = (1 + tanh(y)) / 2 and 1 - s = sigmoid(-2y):
//   gelu_tanh(u)  = u s
//   gelu_tanh'(u) = s + 2 u s (1 - s) k (1 + 3 c u^2)
// Neither 1 + tanh(y) nor 1 - tanh(y)^2 is formed, so there is no cancellation for negative u (where eager's
// tanh form loses all relative precision), and it costs one exp and one division: the fp32 math stays under the
// memory time even for bf16.
#include "elementwise.cuh"

namespace {
constexpr double kK = 0.7978845608028654, kC = 0.044715;

// e = exp(-2y) with -2y = u (-2k - 2kc u^2) capped at 87 so that e stays finite in fp32 (s is ~1e-38 there).
__device__ __forceinline__ float exp_m2y(float u) {
  return __expf(fminf(u * (float(-2 * kK) + float(-2 * kK * kC) * u * u), 87.f));
}
__device__ __forceinline__ double exp_m2y(double u) { return exp(fmin(u * (-2 * kK + (-2 * kK * kC) * u * u), 700.0)); }

// a / b with b in [1, 1e38]: MUFU.RCP and one multiply (2 ulp) instead of the IEEE division sequence.
__device__ __forceinline__ float div_fast(float a, float b) { return __fdividef(a, b); }
__device__ __forceinline__ double div_fast(double a, double b) { return a / b; }
}  // namespace

struct BiasGeluOp {
  static constexpr int NIN = 2, NOUT = 1;
  explicit BiasGeluOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[1], const A (&i)[2]) const {
    const A u = i[0] + i[1];
    o[0] = div_fast(u, A(1) + exp_m2y(u));
  }
};

struct BiasGeluBackwardOp {  // in: grad, x, bias
  static constexpr int NIN = 3, NOUT = 1;
  explicit BiasGeluBackwardOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[1], const A (&i)[3]) const {
    const A u = i[1] + i[2];
    const A e = exp_m2y(u);
    const A s = div_fast(A(1), A(1) + e);
    const A s1 = s * e;  // 1 - s
    o[0] = i[0] * (s + A(2) * u * s * s1 * A(kK) * (A(1) + A(3 * kC) * u * u));
  }
};

MYOPS_EW_CUDA_ENTRY(myops_bias_gelu_cuda, BiasGeluOp)
MYOPS_EW_CUDA_ENTRY(myops_bias_gelu_backward_cuda, BiasGeluBackwardOp)
