// The Autograd-key kernel of an op with a C++ formula (autograd.h): without grad, back to the dispatcher below
// autograd; with it, the op below autograd and a graph node (OpBackward) whose apply runs the op's formula, built as
// PyTorch's generated kernels build theirs (next edges, saved variables, the outputs' history). Not a
// torch::autograd::Function: functorch's transforms (torch.func.grad, vjp, jacrev) refuse those outright, and take
// these. The one file of the registration layer with torch/csrc/autograd headers.
#include "autograd.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <type_traits>
#include <utility>

namespace myops {
namespace {
using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;
// A node's owning pointer: std::shared_ptr up to torch 2.13, c10::intrusive_ptr from 2.14.
using NodePtr = decltype(std::declval<Node&>().getptr());
template <class T, class... A> NodePtr make_node(A&&... a) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Node>>) return std::make_shared<T>(std::forward<A>(a)...);
  else return c10::make_intrusive<T>(std::forward<A>(a)...);
}

// The call's tensor arguments (of n on the stack from `first`): whether one wants a gradient (grad mode on). None of
// the ops has a forward-mode formula: a tangent raises rather than being dropped.
bool wants_grad(const c10::OperatorHandle& op, torch::jit::Stack::iterator first, torch::jit::Stack::iterator end) {
  bool grad = false;
  const bool grad_mode = at::GradMode::is_enabled();
  for (auto it = first; it != end; ++it) {
    if (!it->isTensor()) continue;
    const at::Tensor& t = it->toTensor();
    TORCH_CHECK_NOT_IMPLEMENTED(!torch::autograd::isFwGradDefined(t), op.schema().name(),
                                ": forward-mode AD (torch.func.jvp, torch.autograd.forward_ad) is not implemented; "
                                "reverse mode (backward, torch.func.grad / vjp) is");
    grad = grad || (grad_mode && t.requires_grad());
  }
  return grad;
}

// The op below autograd: without grad past it altogether, with grad below ADInplaceOrView too, as PyTorch's
// generated kernels call theirs (the graph node is the caller's work).
void call_below(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack, bool grad) {
  if (grad) {
    at::AutoDispatchBelowADInplaceOrView below;
    op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
  } else {
    at::AutoDispatchBelowAutograd below;
    op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
  }
}
// Where the op's outputs start on the stack after the call.
torch::jit::Stack::iterator outputs(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  return stack->end() - static_cast<std::ptrdiff_t>(op.schema().returns().size());
}

// "myops::rms_norm" -> "RmsNormBackward" (the name autograd's errors, anomaly mode and the profiler show, as
// PyTorch's own nodes are named).
std::string node_name(const std::string& op) {
  std::string out;
  bool up = true;
  for (char ch : op.substr(op.rfind(':') + 1)) {
    if (ch == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    up = false;
  }
  return out + "Backward";
}

// One call's node. Its inputs are the gradients of the op's differentiable outputs (grad_out maps them back to
// output positions); its next edges, one per tensor argument (tensor_pos: their argument positions), lead to the
// arguments' gradients.
struct OpBackward final : Node {
  const AutogradSpec* spec = nullptr;
  const std::string* label = nullptr;  // node_name, kept by the kernel
  std::vector<c10::IValue> args;       // the op's non-tensor arguments by position (None where a tensor was)
  std::vector<int> tensor_pos;
  std::vector<int> grad_out;
  size_t n_outs = 0;
  std::vector<std::vector<c10::SymInt>> sizes;  // by argument position (keep_sizes)
  std::vector<SavedVariable> saved;
  c10::IValue extra;  // what spec->prepare returned

  std::string name() const override { return *label; }
  void release_variables() override {
    for (SavedVariable& s : saved) s.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    AutogradCtx c;
    c.saved.reserve(saved.size());
    const NodePtr self = getptr();
    for (const SavedVariable& s : saved) c.saved.push_back(s.unpack(self));
    c.args = args;
    c.sizes = sizes;
    c.extra = extra;
    c.needs.assign(args.size(), false);
    const size_t n = tensor_pos.size();
    for (size_t k = 0; k < n; ++k) c.needs[tensor_pos[k]] = task_should_compute_output(k);
    std::vector<at::Tensor> g(n_outs);
    for (size_t i = 0; i < grads.size(); ++i) {
      at::Tensor t = std::move(grads[i]);
      if (!t.defined() && spec->materialize_grads) t = input_metadata(i).zeros_like();
      g[grad_out[i]] = std::move(t);
    }
    const std::vector<at::Tensor> d = spec->backward(c, g);
    variable_list out(n);
    for (size_t k = 0; k < n; ++k) {
      const size_t p = tensor_pos[k];
      if (p < d.size() && c.needs[p]) out[k] = d[p];
    }
    return out;
  }
};

struct Kernel final : c10::OperatorKernel {
  explicit Kernel(AutogradSpec s) : spec(std::move(s)) {}
  AutogradSpec spec;
  std::once_flag named;
  std::string label;

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);
    if (!wants_grad(op, first, stack->end()))  // (as torch.library's Python kernel does without grad, in C++)
      return call_below(op, ks, stack, false);
    std::call_once(named, [&] { label = node_name(op.schema().name()); });
    const NodePtr ptr = make_node<OpBackward>();
    auto& node = static_cast<OpBackward&>(*ptr);
    node.spec = &spec;
    node.label = &label;
    std::vector<c10::IValue> args(first, stack->end());  // (the call's own, tensors kept)
    if (spec.prepare) {
      node.extra = spec.prepare(args);
      std::copy(args.begin(), args.end(), first);
    }
    node.args = args;
    variable_list tensors;
    std::vector<bool> needs(n, false);
    if (spec.keep_sizes) node.sizes.resize(n);
    for (size_t i = 0; i < n; ++i) {
      c10::IValue& a = node.args[i];
      if (!a.isTensor()) continue;  // (a None optional tensor stays None: not an edge, no gradient)
      const at::Tensor& t = args[i].toTensor();
      node.tensor_pos.push_back(static_cast<int>(i));
      needs[i] = t.requires_grad();
      if (spec.keep_sizes) node.sizes[i] = t.sym_sizes().vec();
      tensors.push_back(t);
      a = c10::IValue();  // (backward keeps only what save returns)
    }
    node.set_next_edges(torch::autograd::collect_next_edges(tensors));
    call_below(op, ks, stack, true);
    std::vector<at::Tensor> outs;
    for (auto it = outputs(op, stack); it != stack->end(); ++it) outs.push_back(it->toTensor());
    node.n_outs = outs.size();
    for (size_t j = 0; j < outs.size(); ++j) {
      bool nd = false;
      for (int i : spec.non_differentiable) nd = nd || static_cast<size_t>(i) == j;
      if (nd) continue;
      node.grad_out.push_back(static_cast<int>(j));
      torch::autograd::set_history(outs[j], ptr);
    }
    if (spec.save) {
      for (const at::Tensor& t : spec.save(args, outs, needs)) {
        bool is_output = false;
        for (const at::Tensor& o : outs) is_output = is_output || (t.defined() && t.is_same(o));
        node.saved.emplace_back(t, is_output);
      }
    }
  }
};

// A backward op's Autograd kernel: the op below autograd, its outputs (when an argument wants a gradient: a
// gradient taken with create_graph, as torch.func.grad always takes it) tied to an Error node that raises if a second
// derivative is asked of it. Without this kernel PyTorch's fallback warned and returned zeros there.
struct BackwardOpKernel final : c10::OperatorKernel {
  std::once_flag named;
  std::string message;
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);
    if (!wants_grad(op, first, stack->end())) return call_below(op, ks, stack, false);
    std::call_once(named, [&] {
      const std::string name = op.schema().name(), suffix = "_backward";
      const bool named_so = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(),
                                                                        suffix) == 0;
      message = name + " is not differentiable: a second derivative (double backward, grad of grad, "
                "torch.func.hessian) of " + (named_so ? name.substr(0, name.size() - suffix.size()) : name) +
                " is not implemented";
    });
    variable_list tensors;
    for (auto it = first; it != stack->end(); ++it)
      if (it->isTensor()) tensors.push_back(it->toTensor());
    const NodePtr node = make_node<torch::autograd::Error>(message, torch::autograd::collect_next_edges(tensors));
    call_below(op, ks, stack, true);
    for (auto it = outputs(op, stack); it != stack->end(); ++it)
      if (it->isTensor() && it->toTensor().defined()) torch::autograd::set_history(it->toTensor(), node);
  }
};
}  // namespace

std::vector<c10::IValue> OpRef::call(std::vector<c10::IValue> args) const {
  Slot& s = *slot_;
  std::call_once(s.once, [&s] {  // (kept for the process, as the registration)
    s.handle = new c10::OperatorHandle(
        c10::Dispatcher::singleton().findSchemaOrThrow((std::string("myops::") + s.name).c_str(), ""));
  });
  torch::jit::Stack stack = std::move(args);
  static_cast<const c10::OperatorHandle*>(s.handle)->callBoxed(stack);
  return stack;
}

std::vector<at::Tensor> OpRef::call_all(std::vector<c10::IValue> args) const {
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : call(std::move(args))) out.push_back(v.toTensor());
  return out;
}

torch::CppFunction autograd_kernel(AutogradSpec spec) {
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(std::move(spec)));
}

torch::CppFunction backward_op_kernel() {
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<BackwardOpKernel>());
}

}  // namespace myops
