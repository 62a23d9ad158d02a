// glu.h: what the registrations of swiglu and geglu share (they differ only in their kernels).
//   <op>(gate, up) -> act(gate) * up;  <op>_backward(grad, gate, up) -> (grad_gate, grad_up)
// gate and up: same shape, dtype and device, any strides (the halves h[..., :H], h[..., H:] of one [..., 2H]
// tensor run in place, without a copy).
#pragma once
#include "act.h"
#include "autograd.h"
#include "common.h"

namespace myops {

struct GluKernels {
  explicit GluKernels(const std::string& op) : name(op), fwd(op), bwd(op + "_backward") {}
  std::string name;
  EwKernel fwd, bwd;
};

inline void check_gate_up(const at::Tensor& gate, const at::Tensor& up, const char* op) {
  dtype_code(gate, op, "gate");
  check_like(gate, up, op, "gate", "up");
}

inline at::Tensor glu_forward(GluKernels& k, const at::Tensor& gate, const at::Tensor& up) {
  check_gate_up(gate, up, k.name.c_str());
  at::Tensor out = at::empty_like(gate);  // (laid out as gate: run_elementwise)
  run_elementwise(k.fwd, {out}, {gate, up});
  return out;
}

inline std::tuple<at::Tensor, at::Tensor> glu_backward(GluKernels& k, const at::Tensor& grad, const at::Tensor& gate,
                                                       const at::Tensor& up) {
  const std::string op = k.name + "_backward";
  check_gate_up(gate, up, op.c_str());
  check_like(gate, grad, op.c_str(), "gate", "grad");
  // (both laid out as gate: one layout for run_elementwise's outputs)
  at::Tensor dgate = at::empty_like(gate), dup = at::empty_like(gate);
  run_elementwise(k.bwd, {dgate, dup}, {grad, gate, up});
  return {dgate, dup};
}

// The formula: (dgate, dup) = <op>_backward(grad, gate, up), from the saved inputs; forward-mode AD (autograd.h):
// act(gate) up in ATen, fp32 for 16-bit types (as the kernels).
inline AutogradSpec glu_autograd(const char* backward, Act act) {
  return with_composite(
      {saving({0, 1}, {}),
       [bwd = OpRef(backward)](const AutogradCtx& c, const Tensors& g) {
         return bwd.call_all({g[0], c.saved[0], c.saved[1]});
       }},
      [act](const Args& a) { return Tensors{act_value(acc(a[0].toTensor()), act).mul(acc(a[1].toTensor()))}; });
}

// The backward op's formula (a second derivative of <op>): with g1, g2 the incoming gradients of its outputs
// (grad_gate, grad_up) = (grad up act'(gate), grad act(gate)):
//   d/dgrad = g1 up act' + g2 act,  d/dgate = grad (g1 up act'' + g2 act'),  d/dup = g1 grad act'
// Forward-mode AD (autograd.h): (grad up act'(gate), grad act(gate)) in ATen.
inline AutogradSpec glu_backward_autograd(Act act) {
  const Composite composite = [act](const Args& a) {
    const at::Tensor grad = acc(a[0].toTensor()), gate = acc(a[1].toTensor());
    return Tensors{grad.mul(acc(a[2].toTensor())).mul(act_derivatives(gate, act).first),
                   grad.mul(act_value(gate, act))};
  };
  return with_composite({saving({0, 1, 2}, {}),
                         [act](const AutogradCtx& c, const Tensors& g) {
                           const at::Tensor &grad = c.saved[0], &gate = c.saved[1], &up = c.saved[2];
                           const auto d = act_derivatives(gate, act);
                           Tensors out(3);
                           if (c.need(0)) out[0] = g[0].mul(up).mul(d.first).add(g[1].mul(act_value(gate, act)));
                           if (c.need(1)) out[1] = grad.mul(g[0].mul(up).mul(d.second).add(g[1].mul(d.first)));
                           if (c.need(2)) out[2] = g[0].mul(grad).mul(d.first);
                           return out;
                         }},
                        composite);
}

}  // namespace myops
