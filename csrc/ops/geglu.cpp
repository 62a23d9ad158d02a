// myops::geglu(gate, up) = gelu_tanh(gate) * up; myops::geglu_backward(grad, gate, up) -> (grad_gate, grad_up) with
// grad_gate = grad * up * gelu_tanh'(gate), grad_up = grad * gelu_tanh(gate). Shared code: glu.h.
#include "batching.h"
#include "glu.h"

namespace {
myops::GluKernels kernels("geglu");

at::Tensor fwd(const at::Tensor& gate, const at::Tensor& up) { return myops::glu_forward(kernels, gate, up); }
std::tuple<at::Tensor, at::Tensor> bwd(const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up) {
  return myops::glu_backward(kernels, grad, gate, up);
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("geglu(Tensor gate, Tensor up) -> Tensor");
  m.def("geglu_backward(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("geglu", &fwd);
  m.impl("geglu_backward", &bwd);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("geglu", &fwd);
  m.impl("geglu_backward", &bwd);
}
#endif
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  m.impl("geglu_backward", myops::autograd_kernel(myops::glu_backward_autograd(myops::Act::GeluTanh)));
  m.impl("geglu", myops::autograd_kernel(myops::glu_autograd("geglu_backward", myops::Act::GeluTanh)));
}
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("geglu", myops::batch_kernel(myops::fold({0, 1})));
  m.impl("geglu_backward", myops::batch_kernel(myops::fold({0, 1, 2})));
}
