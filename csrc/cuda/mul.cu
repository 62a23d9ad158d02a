// mul: out = a * b (same shape). Backward reuses mul itself: da = g * b, db = g * a.
#include "elementwise.cuh"

struct MulOp {
  static constexpr int NIN = 2, NOUT = 1;
  explicit MulOp(const double*) {}
  template <class C> __device__ void operator()(C (&o)[1], const C (&i)[2]) const { o[0] = i[0] * i[1]; }
};

MYOPS_EW_CUDA_ENTRY(myops_mul_cuda, MulOp)
