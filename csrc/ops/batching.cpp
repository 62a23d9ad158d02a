// The FuncTorchBatched-key kernel of an op with a C++ vmap rule (batching.h), built as functorch's generated
// plumbing builds PyTorch's own: with the Batched key excluded, the call's tensors unwrapped at the vmap level, the
// rule (or the op once per sample), the outputs wrapped at that level with the batch dim first. The one file of the
// registration layer with a functorch header.
//
// The level: the highest of the call's batched tensors' levels. functorch's plumbing asks its layer stack instead
// (ATen/functorch/DynamicLayer.h, whose header needs nlohmann/json.hpp, which torch's wheels (2.11, 2.14) do not
// ship). The two differ only where the innermost vmap batches none of the arguments: functorch's kernel then passes
// the call on to the next vmap level down, which unwraps and wraps what this kernel does at that level
// (tests/test_batching.py, test_nested_vmap).
#include "batching.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/ops/addcmul.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <iterator>
#include <utility>

namespace myops {

bool Batch::any_batched(const std::vector<int>& idx) const {
  for (int i : idx)
    if (batched(i)) return true;
  return false;
}

at::Tensor Batch::front(int i) const {
  const at::Tensor t = tensor_arg(args.at(i));
  if (!t.defined()) return t;
  if (batched(i)) return *dims[i] == 0 ? t : t.movedim(*dims[i], 0);
  std::vector<c10::SymInt> shape{size};
  for (const c10::SymInt& s : t.sym_sizes()) shape.push_back(s);
  return t.expand_symint(shape);
}

Tensors Batch::call_tensors(Args a) const { return tensors_of(call(std::move(a))); }

at::Tensor sample_col_sums(const at::Tensor& t, at::ScalarType dtype) {
  if (t.dim() <= 2) return t.to(dtype);
  const at::ScalarType acc = t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return t.flatten(1, -2).sum(1, false, acc).to(dtype);  // (16-bit t summed in fp32 without an fp32 copy)
}

RowSums rms_weight_sums(int grad, int x, int rstd, int weight) {
  return [=](const Args& a, const at::Tensor&) -> Tensors {
    const at::Tensor &g = a[grad].toTensor(), &xs = a[x].toTensor(), &rs = a[rstd].toTensor();
    if (a[weight].isNone()) return {xs.new_empty_symint({xs.sym_size(0), 0})};
    return {sample_col_sums(g.mul(rs.unsqueeze(-1)).mul(xs), xs.scalar_type())};
  };
}

namespace {
// The call's arguments with those at `rows` batch-first (fold's and fold_row_sums' call).
Args rows_first(const Batch& b, const std::vector<int>& rows) {
  Args a = b.args;
  for (int i : rows) a[i] = optional_arg(b.front(i));
  return a;
}
// Whether a batched per-column parameter p ([B, N] batch-first) fits x ([B, ..., N]) as the op's checks would have it
// (its shape, dtype and device): taken out of the op's call, it is not checked there; a rule that finds it unfit
// runs the op per sample instead, where the op raises its own error.
bool col_param_ok(const at::Tensor& p, const at::Tensor& x) {
  return x.dim() >= 2 && p.dim() == 2 && p.sym_size(1) == x.sym_size(-1) && p.scalar_type() == x.scalar_type() &&
         p.device() == x.device();
}
// A per-column parameter batch-first ([B, N]; undefined stays so) as [B, 1, ..., 1, N] against y [B, ..., N].
at::Tensor per_sample_cols(const at::Tensor& p, const at::Tensor& y) {
  if (!p.defined()) return p;
  std::vector<c10::SymInt> shape(y.dim(), c10::SymInt(1));
  shape.front() = p.sym_size(0);
  shape.back() = p.sym_size(-1);
  return p.reshape_symint(shape);
}
}  // namespace

BatchRule fold(std::vector<int> rows, std::vector<int> params) {
  return [rows = std::move(rows), params = std::move(params)](const Batch& b) -> std::optional<Tensors> {
    if (b.any_batched(params)) return std::nullopt;
    return b.call_tensors(rows_first(b, rows));
  };
}

BatchRule fold_affine(std::vector<int> rows, int weight, int bias) {
  return [rows = std::move(rows), weight, bias](const Batch& b) -> std::optional<Tensors> {
    Args a = rows_first(b, rows);
    const bool wb = b.batched(weight), bb = bias >= 0 && b.batched(bias);
    if (!wb && !bb) return b.call_tensors(std::move(a));
    const at::Tensor w = wb ? b.front(weight) : at::Tensor(), sh = bias >= 0 ? b.front(bias) : at::Tensor();
    const at::Tensor& x = a[rows.front()].toTensor();
    if ((w.defined() && !col_param_ok(w, x)) || (sh.defined() && !col_param_ok(sh, x))) return std::nullopt;
    if (wb) a[weight] = c10::IValue();
    if (bias >= 0) a[bias] = c10::IValue();
    Tensors out = b.call_tensors(std::move(a));
    at::Tensor& y = out[0];
    const at::Tensor wv = per_sample_cols(w, y), bv = per_sample_cols(sh, y);
    y = !wv.defined() ? y.add(bv) : bv.defined() ? at::addcmul(bv, y, wv) : y.mul(wv);
    return out;
  };
}

namespace {
// fold_row_sums, and with grad >= 0 fold_norm_sums' batched weight (params = {weight}); on the CPU a batch of cpu_max
// elements or more (cpu_max > 0) runs per sample.
BatchRule row_sums_rule(std::vector<int> rows, std::vector<int> params, int flag, RowSums sums, int grad,
                        int64_t cpu_max) {
  return [rows = std::move(rows), params = std::move(params), flag, sums = std::move(sums), grad,
          cpu_max](const Batch& b) -> std::optional<Tensors> {
    const bool weighted = b.any_batched(params);
    if (weighted && grad < 0) return std::nullopt;
    Args a = rows_first(b, rows);
    const at::Tensor& x0 = a[rows.front()].toTensor();
    if (cpu_max > 0 && x0.is_cpu() && x0.sym_numel().sym_ge(cpu_max).guard_bool(__FILE__, __LINE__))
      return std::nullopt;  // (under torch.compile a guard on the comparison alone, not on the size)
    const bool want = flag < 0 || b.args[flag].toBool();
    if (flag >= 0) a[flag] = false;  // (the op's own sums would be over the whole batch)
    Args c = a;
    if (weighted) {  // (the weight's own dims batch-first; a keeps it for sums)
      const at::Tensor w = b.front(params[0]), g = a[grad].toTensor();
      if (!col_param_ok(w, g)) return std::nullopt;
      a[params[0]] = w;
      c[grad] = g.mul(per_sample_cols(w, g));
      c[params[0]] = c10::IValue();
    }
    Tensors out = b.call_tensors(std::move(c));
    if (want) {
      const Tensors s = sums(a, out[0]);
      TORCH_INTERNAL_ASSERT(s.size() + 1 == out.size());
      for (size_t k = 0; k < s.size(); ++k) out[k + 1] = s[k];
    } else {
      for (size_t k = 1; k < out.size(); ++k) out[k] = out[0].new_empty_symint({b.size, 0});
    }
    return out;
  };
}
}  // namespace

BatchRule fold_row_sums(std::vector<int> rows, std::vector<int> params, int flag, RowSums sums) {
  return row_sums_rule(std::move(rows), std::move(params), flag, std::move(sums), -1, 0);
}

// (on the CPU a batch of 2^22 elements or more runs per sample: the norms' sums' batch-wide temporaries then leave the
//  cache. 2-core Xeon VM, fp32 layer_norm, vmap(grad), one call against per sample: over an ensemble's weight and
//  bias, 8 x [256, 1024] 24.6 against 32.0 ms, 32 x [256, 1024] 328-338 against 232-248; per-sample gradients (x
//  batched), 32 x [256, 1024] 214 ms against a Python loop's 105)
BatchRule fold_norm_sums(std::vector<int> rows, int weight, int flag, RowSums sums) {
  const int grad = rows.front();
  return row_sums_rule(std::move(rows), {weight}, flag, std::move(sums), grad, int64_t{1} << 22);
}

namespace {

// The op once per sample, each output stacked along a new dim 0 (PyTorch's fallback, without its warning). An
// empty batch: the outputs' shapes from one sample of zeros.
Tensors per_sample(const Batch& b) {
  const int64_t n = b.size.guard_int(__FILE__, __LINE__);
  auto sample = [&](int64_t s) {
    Args a = b.args;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!b.batched(static_cast<int>(i))) continue;
      const at::Tensor& t = a[i].toTensor();
      if (n > 0) {
        a[i] = t.select(*b.dims[i], s);
      } else {
        std::vector<int64_t> shape = t.sizes().vec();
        shape.erase(shape.begin() + *b.dims[i]);
        a[i] = at::zeros(shape, t.options());
      }
    }
    return b.call_tensors(std::move(a));
  };
  if (n == 0) {
    Tensors out = sample(0);
    for (at::Tensor& o : out) {
      std::vector<int64_t> shape{0};
      for (int64_t s : o.sizes()) shape.push_back(s);
      o = o.new_empty(shape);
    }
    return out;
  }
  std::vector<Tensors> outs;
  for (int64_t s = 0; s < n; ++s) outs.push_back(sample(s));
  Tensors res;
  for (size_t k = 0; k < outs[0].size(); ++k) {
    Tensors parts;
    for (const Tensors& o : outs) parts.push_back(o[k]);
    res.push_back(at::stack(parts));
  }
  return res;
}

struct BatchKernel final : c10::OperatorKernel {
  explicit BatchKernel(BatchRule r) : rule(std::move(r)) {}
  BatchRule rule;

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
    const size_t n = op.schema().arguments().size();
    const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);
    auto batched = [&](size_t i) -> at::functorch::BatchedTensorImpl* {
      const c10::IValue& v = first[static_cast<std::ptrdiff_t>(i)];
      return v.isTensor() ? at::functorch::maybeGetBatchedImpl(v.toTensor()) : nullptr;
    };
    int64_t level = -1;
    for (size_t i = 0; i < n; ++i)
      if (const auto* impl = batched(i)) level = std::max(level, impl->level());
    TORCH_INTERNAL_ASSERT(level >= 0, op.schema().name(), ": reached vmap's kernel with no batched tensor");
    Batch b;
    b.dims.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const auto* impl = batched(i);
      if (impl == nullptr || impl->level() != level) continue;
      b.size = impl->value().sym_size(impl->bdim());
      b.dims[i] = impl->bdim();
      first[static_cast<std::ptrdiff_t>(i)] = impl->value();
    }
    b.args.assign(std::make_move_iterator(first), std::make_move_iterator(stack->end()));
    torch::jit::drop(*stack, n);
    b.call = [&op](Args a) {
      op.callBoxed(&a);
      return a;
    };
    std::optional<Tensors> outs = rule(b);
    const Tensors res = outs.has_value() ? std::move(*outs) : per_sample(b);
    TORCH_INTERNAL_ASSERT(res.size() == op.schema().returns().size());
    for (const at::Tensor& t : res) stack->push_back(at::functorch::makeBatched(t, 0, level));
  }
};

}  // namespace

torch::CppFunction batch_kernel(BatchRule rule) {
  return torch::CppFunction::makeFromBoxedFunctor(std::make_unique<BatchKernel>(std::move(rule)));
}

}  // namespace myops
