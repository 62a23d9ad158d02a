// myops::swiglu(gate, up) = silu(gate) * up; myops::swiglu_backward(grad, gate, up) -> (grad_gate, grad_up) with
// grad_gate = grad * up * silu'(gate), grad_up = grad * silu(gate). Shared code: glu.h.
#include "batching.h"
#include "glu.h"

namespace {
myops::GluKernels kernels("swiglu");

at::Tensor fwd(const at::Tensor& gate, const at::Tensor& up) { return myops::glu_forward(kernels, gate, up); }
std::tuple<at::Tensor, at::Tensor> bwd(const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up) {
  return myops::glu_backward(kernels, grad, gate, up);
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("swiglu(Tensor gate, Tensor up) -> Tensor");
  m.def("swiglu_backward(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("swiglu", &fwd);
  m.impl("swiglu_backward", &bwd);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("swiglu", &fwd);
  m.impl("swiglu_backward", &bwd);
}
#endif
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  m.impl("swiglu_backward", myops::autograd_kernel(myops::glu_backward_autograd(myops::Act::Silu)));
  m.impl("swiglu", myops::autograd_kernel(myops::glu_autograd("swiglu_backward", myops::Act::Silu)));
}
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("swiglu", myops::batch_kernel(myops::fold({0, 1})));
  m.impl("swiglu_backward", myops::batch_kernel(myops::fold({0, 1, 2})));
}
