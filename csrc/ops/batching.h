// batching.h: an op's vmap rule in C++, its kernel at the FuncTorchBatched key (light headers; batching.cpp holds
// functorch's plumbing, compiled once).
//
// Without a rule, torch.func.vmap (and what builds on it: per-sample gradients as vmap(grad(f)), jacrev's and
// jacfwd's batched products) runs an op through PyTorch's fallback, once per sample. The ops take every leading dim
// of their row-shaped arguments as more rows, so most rules move the vmapped dim to the front and call the op once
// (fold). Why not torch.library.register_vmap: its Python kernel cost each op call under vmap 0.2-0.6 ms of host
// time on the 2-core CPU VM (torch 2.14.1; pytree work, the rule's Python): vmap(grad) of one op (two op calls), fp32
// batch 4 of [2, 64], took 1.1-2.2 ms that way against 0.76-1.08 ms in C++ (PyTorch's own ops: 0.75-1.25).
//
// An op registers its rule with
//   TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) { m.impl("relu", myops::batch_kernel(myops::fold({0}))); }
// The kernel unwraps the call's tensors at the current vmap level into a Batch (the arguments, each one's vmapped
// dim, the batch size) and runs the rule, whose outputs carry the batch dim first. A rule returns nullopt where it
// cannot take the batch in one call (a 0-d sample; a batched parameter of an op whose rule has no way around it):
// the op then runs once per sample, as PyTorch's fallback would, without its warning. The norms take a batched
// weight or bias (vmap over an ensemble's parameters) in one call: fold_affine and fold_norm_sums.
#pragma once
#include "autograd.h"

#include <optional>

namespace myops {

struct Batch {
  Args args;                                 // the call's arguments (every one, defaults filled in), unwrapped
  std::vector<std::optional<int64_t>> dims;  // per argument: the vmapped dim of a batched tensor
  c10::SymInt size;                          // the batch size
  std::function<Args(Args)> call;            // the op below this vmap level: its outputs

  bool batched(int i) const { return i < static_cast<int>(dims.size()) && dims[i].has_value(); }
  bool any_batched(const std::vector<int>& idx) const;
  // args[i] with its vmapped dim first; an unbatched tensor expanded (a view) to [size, ...]; None: undefined.
  at::Tensor front(int i) const;
  Tensors call_tensors(Args a) const;  // the op on a: its outputs (every one a tensor)
};

// The outputs, each with the batch dim first; nullopt: run the op once per sample.
using BatchRule = std::function<std::optional<Tensors>(const Batch& b)>;

// The boxed FuncTorchBatched-key kernel for an op with rule `rule`.
torch::CppFunction batch_kernel(BatchRule rule);

// The op once over the batch: the arguments at `rows` (row-shaped: x, grad, saved statistics) batch-first, unbatched
// ones expanded; those at `params` (per column: weight, bias) must be unbatched, else per sample.
BatchRule fold(std::vector<int> rows, std::vector<int> params = {});

// fold for a norm whose first output is scaled by the weight at `weight` and shifted by the bias at `bias` (-1:
// none), per column. Where one of them is batched, the op runs once over the batch without them (without the bias
// alone where only the bias is batched) and the first output becomes y * w + b per sample, in one rounding
// (addcmul); PyTorch's vmap of F.layer_norm does the same in two. Else fold(rows, {weight, bias}).
BatchRule fold_affine(std::vector<int> rows, int weight, int bias = -1);

// A backward op whose outputs after the first sum over rows (weight and bias gradients), which vmap keeps per sample:
// fold's call (with the argument at `flag`, when >= 0, that asks for those sums passed false) for its first output
// dx, and the sums from sums(a, dx) on the call's batch-first arguments a ([size, N] each), or, where args[flag] is
// false, empty [size, 0] ones as the op gives. A batched parameter at `params`: per sample.
using RowSums = std::function<Tensors(const Args& a, const at::Tensor& dx)>;
BatchRule fold_row_sums(std::vector<int> rows, std::vector<int> params, int flag, RowSums sums);

// fold_row_sums for a norm's backward op, whose grad is its first argument (rows.front()) and whose weight is at
// `weight`. A batched weight is taken in one call too: the call gets grad * w per sample (rounded to grad's dtype) and
// no weight, as the norms' dx depends on the two only through that product; sums still get the weight and the grad as
// given. On the CPU, batches of 2^22 elements and more run per sample instead (measured faster there: the sums'
// batch-wide temporaries).
BatchRule fold_norm_sums(std::vector<int> rows, int weight, int flag, RowSums sums);

// The rms norms' sums for fold_norm_sums: dweight per sample, [B, N] sums over a sample's rows of grad * x * rstd in
// fp32 (16-bit tensors promoted inside ATen's kernels, not copied), or [B, 0] where the weight is None; the
// arguments' indices in the op's schema.
RowSums rms_weight_sums(int grad, int x, int rstd, int weight);

// Per-sample column sums of a batch-first [B, ..., N] tensor in the ops' accumulation type (fp32; fp64 for fp64), as
// `dtype`: [B, N].
at::Tensor sample_col_sums(const at::Tensor& t, at::ScalarType dtype);

}  // namespace myops
