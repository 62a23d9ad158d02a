// The Autograd-key kernel of an op with a C++ formula (autograd.h): without grad, back to the dispatcher below
// autograd; with it, a torch::autograd::Function whose forward calls the op below autograd and whose backward runs
// the op's formula. The one file of the registration layer with torch/csrc/autograd/custom_function.h (about 10 s
// of compile).
#include "autograd.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>
#include <utility>

namespace myops {
namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs of one call besides its saved tensors: the formula, the non-tensor arguments by position, and
// the positions of the tensor arguments (in the order of Generic's inputs).
struct CallState : torch::CustomClassHolder {
  const AutogradSpec* spec = nullptr;
  std::vector<c10::IValue> args;
  std::vector<int> tensor_pos;
  std::vector<std::vector<c10::SymInt>> sizes;  // by argument position
};

struct Generic : torch::autograd::Function<Generic> {
  // tensors: the op's tensor arguments (not the None optional ones), at state->tensor_pos
  static variable_list forward(AutogradContext* ctx, const c10::OperatorHandle* op,
                               c10::intrusive_ptr<CallState> state, at::TensorList tensors) {
    at::AutoDispatchBelowADInplaceOrView below;
    const AutogradSpec& spec = *state->spec;
    std::vector<c10::IValue> args = state->args;
    std::vector<bool> needs(args.size(), false);
    if (spec.keep_sizes) state->sizes.resize(args.size());
    for (size_t k = 0; k < tensors.size(); ++k) {
      const int p = state->tensor_pos[k];
      args[p] = tensors[k];
      needs[p] = ctx->needs_input_grad(k);
      if (spec.keep_sizes) state->sizes[p] = tensors[k].sym_sizes().vec();
    }
    torch::jit::Stack stack = args;
    op->callBoxed(stack);
    std::vector<at::Tensor> outs;
    outs.reserve(stack.size());
    for (const c10::IValue& v : stack) outs.push_back(v.toTensor());
    if (spec.save) ctx->save_for_backward(spec.save(args, outs, needs));
    if (!spec.non_differentiable.empty()) {
      variable_list nd;
      for (int i : spec.non_differentiable) nd.push_back(outs[i]);
      ctx->mark_non_differentiable(nd);
    }
    ctx->set_materialize_grads(spec.materialize_grads);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return variable_list(outs.begin(), outs.end());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto state = c10::static_intrusive_pointer_cast<CallState>(ctx->saved_data["state"].toCapsule());
    AutogradCtx c;
    c.saved = ctx->get_saved_variables();
    c.args = state->args;
    c.sizes = state->sizes;
    c.needs.assign(state->args.size(), false);
    const size_t n = state->tensor_pos.size();
    for (size_t k = 0; k < n; ++k) c.needs[state->tensor_pos[k]] = ctx->needs_input_grad(k);
    const std::vector<at::Tensor> g = state->spec->backward(c, grads);
    variable_list out(2 + n);  // (op and state: no gradient)
    for (size_t k = 0; k < n; ++k) {
      const size_t p = state->tensor_pos[k];
      if (p < g.size() && c.needs[p]) out[2 + k] = g[p];
    }
    return out;
  }
};

struct Kernel final : c10::OperatorKernel {
  explicit Kernel(AutogradSpec s) : spec(std::move(s)) {}
  AutogradSpec spec;
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);
    bool grad = false;
    if (at::GradMode::is_enabled())
      for (auto it = first; it != stack->end() && !grad; ++it) grad = it->isTensor() && it->toTensor().requires_grad();
    if (!grad) {  // (as torch.library's Python kernel does without grad, in C++)
      at::AutoDispatchBelowAutograd below;
      op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
      return;
    }
    auto state = c10::make_intrusive<CallState>();
    state->spec = &spec;
    state->args.assign(first, stack->end());
    stack->erase(first, stack->end());
    variable_list tensors;
    for (size_t i = 0; i < n; ++i) {
      c10::IValue& a = state->args[i];
      if (a.isTensor()) {
        state->tensor_pos.push_back(static_cast<int>(i));
        tensors.push_back(a.toTensor());
        a = c10::IValue();  // (backward keeps only what save returns)
      }  // (a None optional tensor stays None: not an input of the graph, no gradient)
    }
    // (as a TensorList: apply takes a std::vector argument for a non-tensor)
    for (const at::Tensor& o : Generic::apply(&op, std::move(state), at::TensorList(tensors))) stack->push_back(o);
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

}  // namespace myops
