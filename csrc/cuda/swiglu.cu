// swiglu:          out = silu(gate) * up                           gate, up: same shape (any strides)
// swiglu_backward: dgate = g * up * silu'(gate);  dup = g * silu(gate)
//
//   silu(x) = x s,  s = sigmoid(x),  silu'(x) = s (1 + x (1 - s))
// From e = exp(-|x|) in (0, 1], which never overflows (no inf / inf or 0 * inf for any finite x):
//   x >= 0:  s = 1 / (1 + e),  1 - s = e / (1 + e)
//   x <  0:  s = e / (1 + e),  1 - s = 1 / (1 + e)
// Neither is formed by a subtraction (1 - s keeps its relative precision for large x, s for very negative x), and
// it costs one exp and one division by a number in [1, 2] (inside div_fast's range).
#include "elementwise.cuh"

namespace {
// exp(-|x|); NaN stays NaN.
template <class A> __device__ __forceinline__ A exp_neg_abs(A x) { return myops::exp_fast(x < A(0) ? x : -x); }
}  // namespace

struct SwigluOp {  // in: gate, up
  static constexpr int NIN = 2, NOUT = 1;
  explicit SwigluOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[1], const A (&i)[2]) const {
    const A x = i[0];
    const A e = exp_neg_abs(x);
    o[0] = myops::div_fast(x < A(0) ? x * e : x, A(1) + e) * i[1];  // silu(x) = x s in one division
  }
};

struct SwigluBackwardOp {  // in: grad, gate, up; out: dgate, dup
  static constexpr int NIN = 3, NOUT = 2;
  explicit SwigluBackwardOp(const double*) {}
  template <class A> __device__ void operator()(A (&o)[2], const A (&i)[3]) const {
    const A x = i[1];
    const A e = exp_neg_abs(x);
    const A r = myops::div_fast(A(1), A(1) + e);
    const A er = e * r;
    const bool neg = x < A(0);
    const A s = neg ? er : r;   // sigmoid(x)
    const A s1 = neg ? r : er;  // 1 - sigmoid(x)
    o[0] = i[0] * i[2] * (s * (A(1) + x * s1));
    o[1] = i[0] * (x * s);
  }
};

MYOPS_EW_CUDA_ENTRY(myops_swiglu_cuda, SwigluOp)
MYOPS_EW_CUDA_ENTRY(myops_swiglu_backward_cuda, SwigluBackwardOp)
