// myops::mul(a, b) = a * b, same shape. Backward (ops/mul.py) calls mul again: da = grad * b, db = grad * a.
#include "common.h"

namespace {
myops::EwKernel k_mul("mul");

at::Tensor mul(const at::Tensor& a, const at::Tensor& b) {
  myops::dtype_code(a, "mul", "a");
  myops::check_same_device(a, b, "mul", "a", "b");
  myops::check_same_dtype(a, b, "mul", "a", "b");
  myops::check_same_shape(a, b, "mul", "a", "b");
  at::Tensor out = at::empty(a.sizes(), a.options());
  myops::run_elementwise(k_mul, {out}, {a, b});
  return out;
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) { m.def("mul(Tensor a, Tensor b) -> Tensor"); }
TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("mul", &mul); }
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("mul", &mul); }
#endif
