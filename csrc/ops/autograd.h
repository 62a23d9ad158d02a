// autograd.h: an op's autograd formula in C++, for its Autograd-key kernel (light headers; autograd.cpp holds the
// torch::autograd machinery, compiled once).
//
// Why not torch.library.register_autograd: it puts a Python kernel at the Autograd key, which every call passes
// through, with grad or without, in eager code and in a compiled graph's calls alike. On the 2-core CPU VM (torch
// 2.14.1) relu of one element took 17.0 us that way against 4.1 us for the op below autograd (torch.relu 4.0); this
// kernel returns to the dispatcher in C++ when no argument needs a gradient, and builds the graph node in C++ when
// one does.
//
// An op registers its formula with
//   TORCH_LIBRARY_IMPL(myops, Autograd, m) { m.impl("relu", myops::autograd_kernel({save, backward})); }
// where, for the op's arguments `args` (as the dispatcher passed them: a None optional tensor is None) and its
// outputs `outs`:
//   save(args, outs, needs)      -> the tensors backward reads (any of args' or outs' tensors; undefined for none)
//   backward(ctx, grads)         -> one gradient per argument (undefined: none), from the outputs' gradients grads
//                                   (undefined for an output that got none, unless materialize_grads)
// ctx.saved are save's tensors, ctx.args the non-tensor arguments (a tensor argument's slot holds None), ctx.needs
// which arguments want a gradient, ctx.sizes the tensor arguments' sizes (with keep_sizes), ctx.extra what prepare
// returned. `non_differentiable` lists outputs that carry no gradient (statistics).
// Forward-mode AD (torch.func.jvp, jacfwd, hessian = jacfwd(jacrev), torch.autograd.forward_ad): an op with a
// `composite` (the op as differentiable ATen ops) takes it on a call whose argument carries a tangent. The op runs
// below autograd first (its checks, and the outputs composite leaves undefined: statistics); composite's outputs
// replace the others, their tangents and graph PyTorch's own formulas' (so that a second derivative, forward over
// reverse or reverse over forward, runs through ATen). An op without a composite raises (every myops op and backward
// op has one).
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/library.h>

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace myops {

struct AutogradCtx {
  std::vector<at::Tensor> saved;   // save's tensors
  std::vector<c10::IValue> args;   // the op's non-tensor arguments by position (None where a tensor was)
  std::vector<bool> needs;         // per argument: it is a tensor that wants a gradient
  std::vector<std::vector<c10::SymInt>> sizes;  // per argument: a tensor's sizes (symbolic while traced), if kept
  c10::IValue extra;                            // what prepare returned
  bool need(size_t i) const { return i < needs.size() && needs[i]; }
};

// Per output, its value as differentiable ATen ops of the op's arguments (undefined: the op's own output).
using Composite = std::function<std::vector<at::Tensor>(const std::vector<c10::IValue>& args)>;

struct AutogradSpec {
  std::function<std::vector<at::Tensor>(const std::vector<c10::IValue>& args, const std::vector<at::Tensor>& outs,
                                        const std::vector<bool>& needs)>
      save;
  std::function<std::vector<at::Tensor>(const AutogradCtx& ctx, const std::vector<at::Tensor>& grads)> backward;
  std::vector<int> non_differentiable = {};  // output indices
  bool materialize_grads = true;             // false: an unused output's gradient stays undefined
  bool keep_sizes = false;                   // backward reads ctx.sizes
  // Optional, on calls with grad alone: runs before the op on its arguments, which it may change, and returns what
  // backward finds in ctx.extra (cross_entropy: its target check, queued here and read in backward).
  std::function<c10::IValue(std::vector<c10::IValue>& args)> prepare = nullptr;
  Composite composite = nullptr;  // optional: forward-mode AD (above)
};

using Tensors = std::vector<at::Tensor>;
using Args = std::vector<c10::IValue>;

// An argument as a tensor (undefined for None); a tensor as an optional argument (None for undefined).
inline at::Tensor tensor_arg(const c10::IValue& v) { return v.isTensor() ? v.toTensor() : at::Tensor(); }
inline c10::IValue optional_arg(const at::Tensor& t) { return t.defined() ? c10::IValue(t) : c10::IValue(); }
// A composite's working copy of a floating tensor: fp32 for 16-bit types (as the kernels compute), else itself.
inline at::Tensor acc(const at::Tensor& t) {
  return t.defined() && t.is_floating_point() && t.element_size() == 2 ? t.to(at::kFloat) : t;
}
// The sum of t over all but the last dim ([N]): a composite's per-feature (weight, bias) gradient.
inline at::Tensor row_sum(const at::Tensor& t) { return t.sum_to_size_symint({t.sym_size(-1)}); }
// An op's outputs (every one a tensor) as tensors.
inline std::vector<at::Tensor> tensors_of(const std::vector<c10::IValue>& outs) {
  std::vector<at::Tensor> t;
  for (const c10::IValue& v : outs) t.push_back(v.toTensor());
  return t;
}
// spec with its composite (forward-mode AD, above).
inline AutogradSpec with_composite(AutogradSpec spec, Composite composite) {
  spec.composite = std::move(composite);
  return spec;
}
// A save function keeping the arguments at positions `args`, then the outputs at `outs`.
inline std::function<Tensors(const Args&, const Tensors&, const std::vector<bool>&)> saving(std::vector<int> args,
                                                                                           std::vector<int> outs) {
  return [args, outs](const Args& a, const Tensors& o, const std::vector<bool>&) {
    Tensors t;
    for (int i : args) t.push_back(tensor_arg(a[i]));
    for (int i : outs) t.push_back(o[i]);
    return t;
  };
}

// The boxed Autograd-key kernel for an op with formula `spec`.
torch::CppFunction autograd_kernel(AutogradSpec spec);
// The Autograd-key kernel of a backward op without a formula of its own (the norms', cross_entropy's): its
// composite (the backward as ATen ops, the statistics recomputed from x) gives a second derivative, forward over
// reverse (a tangent takes the composite) or reverse over reverse (the composite recomputed and differentiated when
// the second backward runs); the op's values stay the kernels'.
torch::CppFunction backward_op_kernel(Composite composite);

// A myops op called through the dispatcher from a formula (so that fake tensors, functionalization and the device
// kernels see it as a direct call): OpRef("relu_backward").call({grad, out}) -> its outputs.
class OpRef {
 public:
  explicit OpRef(const char* name) : slot_(std::make_shared<Slot>()) { slot_->name = name; }
  std::vector<c10::IValue> call(std::vector<c10::IValue> args) const;
  at::Tensor call1(std::vector<c10::IValue> args) const { return call(std::move(args)).at(0).toTensor(); }
  std::vector<at::Tensor> call_all(std::vector<c10::IValue> args) const;  // an op of tensor outputs: all of them

 private:
  struct Slot {  // (shared by copies; the op is looked up on first use, once, as ops register at load time)
    const char* name = nullptr;
    std::once_flag once;
    const void* handle = nullptr;  // a c10::OperatorHandle
  };
  std::shared_ptr<Slot> slot_;
};

}  // namespace myops
