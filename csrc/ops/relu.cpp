// myops::relu(x) = max(x, 0);  myops::relu_backward(grad, out) = out > 0 ? grad : 0.
#include "common.h"

namespace {
myops::EwKernel k_relu("relu"), k_relu_backward("relu_backward");

at::Tensor relu(const at::Tensor& x) {
  myops::dtype_code(x, "relu", "x");
  at::Tensor out = at::empty(x.sizes(), x.options());
  myops::run_elementwise(k_relu, {out}, {x});
  return out;
}

at::Tensor relu_backward(const at::Tensor& grad, const at::Tensor& out) {
  myops::dtype_code(grad, "relu_backward", "grad");
  myops::check_like(grad, out, "relu_backward", "grad", "out");
  at::Tensor dx = at::empty(grad.sizes(), grad.options());
  myops::run_elementwise(k_relu_backward, {dx}, {grad, out});
  return dx;
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("relu(Tensor x) -> Tensor");
  m.def("relu_backward(Tensor grad, Tensor out) -> Tensor");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("relu", &relu);
  m.impl("relu_backward", &relu_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("relu", &relu);
  m.impl("relu_backward", &relu_backward);
}
#endif
