// myops::geglu(gate, up) = gelu(gate, approximate="tanh") * up; gate and up of the same shape, dtype and device,
// any strides (the halves h[..., :H], h[..., H:] of one [..., 2H] tensor run in place, without a copy).
// myops::geglu_backward(grad, gate, up) -> (grad_gate, grad_up): grad_gate = grad * up * gelu_tanh'(gate),
// grad_up = grad * gelu_tanh(gate).
#include "common.h"

namespace {
myops::EwKernel k_fwd("geglu"), k_bwd("geglu_backward");

void check_gate_up(const at::Tensor& gate, const at::Tensor& up, const char* op) {
  myops::dtype_code(gate, op, "gate");
  myops::check_same_device(gate, up, op, "gate", "up");
  myops::check_same_dtype(gate, up, op, "gate", "up");
  myops::check_same_shape(gate, up, op, "gate", "up");
}

at::Tensor geglu(const at::Tensor& gate, const at::Tensor& up) {
  check_gate_up(gate, up, "geglu");
  at::Tensor out = at::empty(gate.sizes(), gate.options());
  myops::run_elementwise(k_fwd, {out}, {gate, up});
  return out;
}

std::tuple<at::Tensor, at::Tensor> geglu_backward(const at::Tensor& grad, const at::Tensor& gate,
                                                  const at::Tensor& up) {
  check_gate_up(gate, up, "geglu_backward");
  myops::check_same_device(gate, grad, "geglu_backward", "gate", "grad");
  myops::check_same_dtype(gate, grad, "geglu_backward", "gate", "grad");
  myops::check_same_shape(gate, grad, "geglu_backward", "gate", "grad");
  at::Tensor dgate = at::empty(gate.sizes(), gate.options());
  at::Tensor dup = at::empty(gate.sizes(), gate.options());
  myops::run_elementwise(k_bwd, {dgate, dup}, {grad, gate, up});
  return {dgate, dup};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("geglu(Tensor gate, Tensor up) -> Tensor");
  m.def("geglu_backward(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("geglu", &geglu);
  m.impl("geglu_backward", &geglu_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("geglu", &geglu);
  m.impl("geglu_backward", &geglu_backward);
}
#endif
