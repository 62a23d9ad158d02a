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
#include <torch/csrc/autograd/autograd.h>
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

// The call's tensor arguments (of n on the stack from `first`): whether one wants a gradient (grad mode on), and
// whether one carries a forward-mode tangent (*tangent; null: the op has no composite, and a tangent raises rather
// than being dropped).
bool wants_grad(const c10::OperatorHandle& op, torch::jit::Stack::iterator first, torch::jit::Stack::iterator end,
                bool* tangent = nullptr) {
  bool grad = false;
  const bool grad_mode = at::GradMode::is_enabled();
  for (auto it = first; it != end; ++it) {
    if (!it->isTensor()) continue;
    const at::Tensor& t = it->toTensor();
    if (torch::autograd::isFwGradDefined(t)) {
      TORCH_CHECK_NOT_IMPLEMENTED(tangent, op.schema().name(),
                                  ": forward-mode AD (torch.func.jvp, torch.autograd.forward_ad) is not implemented; "
                                  "reverse mode (backward, torch.func.grad / vjp) is");
      *tangent = true;
    }
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

// A node's view of the call's arguments: each tensor in args replaced by None and its position added to tensor_pos;
// returns the tensors (the node's next edges, in that order).
variable_list take_tensor_args(std::vector<c10::IValue>& args, std::vector<int>& tensor_pos) {
  variable_list tensors;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;  // (a None optional tensor stays None: not an edge, no gradient)
    tensor_pos.push_back(static_cast<int>(i));
    tensors.push_back(args[i].toTensor());
    args[i] = c10::IValue();
  }
  return tensors;
}

// A call with a tangent (autograd.h): the op below autograd, then composite's outputs in place of its own.
void call_composite(const Composite& composite, const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                    torch::jit::Stack* stack, torch::jit::Stack::iterator first) {
  const std::vector<c10::IValue> args(first, stack->end());
  call_below(op, ks, stack, false);
  const std::vector<at::Tensor> c = composite(args);
  auto out = outputs(op, stack);
  for (size_t j = 0; j < c.size() && out + static_cast<std::ptrdiff_t>(j) != stack->end(); ++j) {
    if (!c[j].defined()) continue;
    const at::ScalarType t = out[j].toTensor().scalar_type();  // (the op's dtype: composite may compute in fp32)
    out[j] = c[j].scalar_type() == t ? c[j] : c[j].to(t);
  }
}

struct Kernel final : c10::OperatorKernel {
  explicit Kernel(AutogradSpec s) : spec(std::move(s)) {}
  AutogradSpec spec;
  std::once_flag named;
  std::string label;

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);
    bool tangent = false;
    const bool grad = wants_grad(op, first, stack->end(), spec.composite ? &tangent : nullptr);
    if (tangent) return call_composite(spec.composite, op, ks, stack, first);
    if (!grad)  // (as torch.library's Python kernel does without grad, in C++)
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
    node.args = args;  // (backward keeps only what save returns)
    const variable_list tensors = take_tensor_args(node.args, node.tensor_pos);
    std::vector<bool> needs(n, false);
    if (spec.keep_sizes) node.sizes.resize(n);
    for (size_t k = 0; k < tensors.size(); ++k) {
      const int i = node.tensor_pos[k];
      needs[i] = tensors[k].requires_grad();
      if (spec.keep_sizes) node.sizes[i] = tensors[k].sym_sizes().vec();
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

// A backward op's second derivative (reverse over reverse: a gradient of a gradient taken with create_graph, as
// torch.func.grad always takes it): the node recomputes the op's composite (its ATen form) from the saved arguments
// under grad mode and differentiates that (a reentrant torch::autograd::grad, as activation checkpointing runs), so
// the values stay the kernels' and the ATen form runs only when a second derivative is asked for.
struct CompositeBackward final : Node {
  const Composite* composite = nullptr;
  const std::string* label = nullptr;
  std::vector<c10::IValue> args;  // the op's non-tensor arguments by position (None where a tensor was)
  std::vector<int> tensor_pos;
  std::vector<SavedVariable> saved;  // the tensor arguments
  std::vector<int> grad_out;         // the output behind each of this node's inputs

  std::string name() const override { return *label; }
  void release_variables() override {
    for (SavedVariable& s : saved) s.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const size_t n = tensor_pos.size();
    variable_list out(n);
    std::vector<c10::IValue> a = args;
    variable_list inputs;
    std::vector<size_t> which;
    const NodePtr self = getptr();
    variable_list outs, gouts;
    {
      const at::AutoGradMode grad_mode(true);
      for (size_t k = 0; k < n; ++k) {
        at::Tensor t = saved[k].unpack(self);
        if (task_should_compute_output(k)) {
          // An alias that the composite alone uses: the engine captures its gradient without running on into the
          // argument's history (where it would also reach another argument: x = s of add_rms_norm leads to its
          // weight), while a gradient taken with create_graph keeps that history.
          t = t.view_as(t);
          inputs.push_back(t);
          which.push_back(k);
        }
        a[tensor_pos[k]] = t;
      }
      const std::vector<at::Tensor> c = (*composite)(a);
      for (size_t i = 0; i < grads.size(); ++i) {
        const at::Tensor& y = c.at(grad_out[i]);
        if (!grads[i].defined() || !y.defined() || !y.requires_grad()) continue;
        outs.push_back(y);
        gouts.push_back(grads[i].to(y.scalar_type()));  // (the composite may compute in fp32)
      }
    }
    if (inputs.empty() || outs.empty()) return out;
    // (with create_graph the gradients' own graph runs back through the composite's: keep it)
    const bool create = at::GradMode::is_enabled();
    const variable_list d = torch::autograd::grad(outs, inputs, gouts, /*retain_graph=*/create, /*create_graph=*/create,
                                                  /*allow_unused=*/true);
    for (size_t j = 0; j < which.size(); ++j) out[which[j]] = d[j];
    return out;
  }
};

// A backward op's Autograd kernel: the op below autograd; a call with a tangent takes its composite (forward-mode AD
// through the backward: the Hessian as jacfwd of jacrev), one that wants a gradient ties its outputs to a
// CompositeBackward node.
struct BackwardOpKernel final : c10::OperatorKernel {
  explicit BackwardOpKernel(Composite c) : composite(std::move(c)) {}
  Composite composite;
  std::once_flag named;
  std::string label;
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);
    bool tangent = false;
    const bool grad = wants_grad(op, first, stack->end(), &tangent);
    if (tangent) return call_composite(composite, op, ks, stack, first);
    if (!grad) return call_below(op, ks, stack, false);
    std::call_once(named, [&] { label = node_name(op.schema().name()); });
    const NodePtr ptr = make_node<CompositeBackward>();
    auto& node = static_cast<CompositeBackward&>(*ptr);
    node.composite = &composite;
    node.label = &label;
    node.args.assign(first, stack->end());
    const variable_list tensors = take_tensor_args(node.args, node.tensor_pos);
    for (const at::Tensor& t : tensors) node.saved.emplace_back(t, false);
    node.set_next_edges(torch::autograd::collect_next_edges(tensors));
    call_below(op, ks, stack, true);
    int j = 0;
    for (auto it = outputs(op, stack); it != stack->end(); ++it, ++j) {
      if (!it->isTensor() || !it->toTensor().defined()) continue;
      node.grad_out.push_back(j);
      torch::autograd::set_history(it->toTensor(), ptr);
    }
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
  return tensors_of(call(std::move(args)));
}

torch::CppFunction autograd_kernel(AutogradSpec spec) {
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(std::move(spec)));
}

torch::CppFunction backward_op_kernel(Composite composite) {
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<BackwardOpKernel>(std::move(composite)));
}

}  // namespace myops
