// myops::swiglu(gate, up) = silu(gate) * up; gate and up of the same shape, dtype and device, any strides (the
// halves h[..., :H], h[..., H:] of one [..., 2H] tensor run in place, without a copy).
// myops::swiglu_backward(grad, gate, up) -> (grad_gate, grad_up): grad_gate = grad * up * silu'(gate),
// grad_up = grad * silu(gate).
#include "common.h"

namespace {
myops::EwKernel k_fwd("swiglu"), k_bwd("swiglu_backward");

void check_gate_up(const at::Tensor& gate, const at::Tensor& up, const char* op) {
  myops::dtype_code(gate, op, "gate");
  myops::check_same_device(gate, up, op, "gate", "up");
  myops::check_same_dtype(gate, up, op, "gate", "up");
  myops::check_same_shape(gate, up, op, "gate", "up");
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  check_gate_up(gate, up, "swiglu");
  at::Tensor out = at::empty(gate.sizes(), gate.options());
  myops::run_elementwise(k_fwd, {out}, {gate, up});
  return out;
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& grad, const at::Tensor& gate,
                                                   const at::Tensor& up) {
  check_gate_up(gate, up, "swiglu_backward");
  myops::check_same_device(gate, grad, "swiglu_backward", "gate", "grad");
  myops::check_same_dtype(gate, grad, "swiglu_backward", "gate", "grad");
  myops::check_same_shape(gate, grad, "swiglu_backward", "gate", "grad");
  at::Tensor dgate = at::empty(gate.sizes(), gate.options());
  at::Tensor dup = at::empty(gate.sizes(), gate.options());
  myops::run_elementwise(k_bwd, {dgate, dup}, {grad, gate, up});
  return {dgate, dup};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("swiglu(Tensor gate, Tensor up) -> Tensor");
  m.def("swiglu_backward(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("swiglu", &swiglu);
  m.impl("swiglu_backward", &swiglu_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("swiglu", &swiglu);
  m.impl("swiglu_backward", &swiglu_backward);
}
#endif
