// gelu.cuh: gelu(u, approximate="tanh") and its derivative, shared by bias_gelu and geglu.
//
//   gelu_tanh(u) = 0.5 u (1 + tanh(y)),  y = k (u + c u^3),  k = sqrt(2/pi), c = 0.044715
// Written with s = sigmoid(2y) = (1 + tanh(y)) / 2 and 1 - s = sigmoid(-2y) = s e, e = exp(-2y):
//   gelu_tanh(u)  = u s = u / (1 + e)
//   gelu_tanh'(u) = s + 2 u s (1 - s) k (1 + 3 c u^2)
// Neither 1 + tanh(y) nor 1 - tanh(y)^2 is formed, so there is no cancellation for negative u (where eager's
// tanh form loses all relative precision), and it costs one exp and one division: the fp32 math stays under the
// memory time even for bf16.
#pragma once
#include "common.cuh"

namespace myops {

constexpr double kGeluK = 0.7978845608028654, kGeluC = 0.044715;

// e = exp(-2y) with -2y = u (-2k - 2kc u^2) capped at 87 so that e stays finite in fp32 and below div_fast's 2^126
// (s is ~1e-38 there); fp64 caps at 700.
__device__ __forceinline__ float gelu_exp_m2y(float u) {
  return exp_fast(fminf(u * (float(-2 * kGeluK) + float(-2 * kGeluK * kGeluC) * u * u), 87.f));
}
__device__ __forceinline__ double gelu_exp_m2y(double u) {
  return exp(fmin(u * (-2 * kGeluK + (-2 * kGeluK * kGeluC) * u * u), 700.0));
}

// gelu_tanh(u) = u / (1 + e): one division.
template <class A> __device__ __forceinline__ A gelu_tanh(A u) { return div_fast(u, A(1) + gelu_exp_m2y(u)); }

// s = sigmoid(2y) and s1 = 1 - s, for the derivative (and gelu_tanh(u) = u s where both are needed).
template <class A> __device__ __forceinline__ void gelu_tanh_sigmoid(A u, A& s, A& s1) {
  const A e = gelu_exp_m2y(u);
  s = div_fast(A(1), A(1) + e);
  s1 = s * e;
}

// gelu_tanh'(u) from gelu_tanh_sigmoid's s and s1.
template <class A> __device__ __forceinline__ A gelu_tanh_grad(A u, A s, A s1) {
  return s + A(2) * u * s * s1 * A(kGeluK) * (A(1) + A(3 * kGeluC) * u * u);
}

}  // namespace myops
