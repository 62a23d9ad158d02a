// myops::cross_entropy(logits, target, ignore_index=-100, label_smoothing=0., reduction="mean", check_target=True)
//   -> (loss, stats)
//   = F.cross_entropy(logits, target, ignore_index=..., label_smoothing=..., reduction=...) for logits [M, C] or
//   [C] and int64 class indices target [M] or []; stats [*target.shape, 2] = per-row (max, log sum exp(x - max))
//   (fp32, fp64 for fp64) is saved for backward.
//   The logits are read once (online max/sum); no [M, C] temporary exists. A target outside [0, C) (and not
//   ignore_index) never reads out of bounds: with check_target it raises (CPU: validated first; GPU: a small kernel
//   checks the targets before the forward kernel, and the host waits for it alone while the GPU runs the forward;
//   logits that require grad defer that wait to backward, see cross_entropy_autograd), without it (and always while
//   a CUDA graph is being captured, where a wait is not allowed) that row's loss and gradient are NaN and nothing
//   waits.
// myops::cross_entropy_backward(grad, logits, target, stats, ignore_index, label_smoothing, reduction) -> dlogits.
//
// Autograd is the generic autograd_kernel (autograd.h) with a prepare step: it hands the target check from the
// forward to backward (DeferredCheck), as host time counts where the host waits for the GPU. On the H200 machine
// (torch 2.11, [4096, 32000]), one unchecked forward+backward took 173 us of host time through
// torch.library.register_autograd, 116-125 us through a C++ autograd Function and 37-42 us for the two ops called
// directly; the checked bf16 forward+backward (its wait then in the forward) went from 37% to 53-58% of copy
// bandwidth (torch.compile: 51%), fp32 from 55% to 84-91% (compile: 78%).
#include "autograd.h"
#include "batching.h"
#include "common.h"

#include <ATen/TensorSubclassLikeUtils.h>
#include <ATen/ops/zeros_like.h>
#ifdef MYOPS_WITH_CUDA
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif

namespace {
using FwdCpu = int (*)(void*, void*, myops_operand, const int64_t*, int64_t, int64_t, int64_t, int64_t, double, int);
using FwdCuda = int (*)(void*, int, void*, void*, int64_t*, int64_t, int64_t*, myops_operand, const int64_t*, int64_t,
                        int64_t, int64_t, int64_t, double, int, void*);
using BwdCpu = int (*)(myops_out_operand, myops_operand, const int64_t*, int64_t, const void*, const void*, int64_t,
                       int64_t, int64_t, int64_t, double, int);
using BwdCuda = int (*)(myops_out_operand, myops_operand, const int64_t*, int64_t, const void*, const void*, int64_t,
                        int64_t, int64_t, int64_t, double, int, void*);
myops::Kernel<FwdCpu> k_fwd_cpu("myops_cross_entropy_cpu");
myops::Kernel<FwdCuda> k_fwd_cuda("myops_cross_entropy_cuda");
myops::Kernel<BwdCpu> k_bwd_cpu("myops_cross_entropy_backward_cpu");
myops::Kernel<BwdCuda> k_bwd_cuda("myops_cross_entropy_backward_cuda");
// (out, in, target, t_stride, M, ignore_index, mean, dtype, stream): the backward's factor from the loss's gradient
// (csrc/cuda/cross_entropy.cu)
using ScalarCuda = int (*)(void*, const void*, const int64_t*, int64_t, int64_t, int64_t, int, int, void*);
myops::Kernel<ScalarCuda> k_grad_scale_cuda("myops_cross_entropy_grad_scale_cuda");
// (M) -> the elements of the loss's reduction workspace, after the forward's M row losses and after the backward's
// factor (csrc/cuda/cross_entropy.cu)
using PartsCuda = int64_t (*)(int64_t);
myops::Kernel<PartsCuda> k_parts_cuda("myops_cross_entropy_parts_cuda");
// the target check alone, and its wait (csrc/cuda/cross_entropy.cu): the deferred check of the autograd below
using CheckCuda = int (*)(int64_t*, int64_t, int64_t*, void**, const int64_t*, int64_t, int64_t, int64_t, int64_t,
                          void*);
using CheckWaitCuda = int (*)(void*, const int64_t*, int64_t, int64_t*);
myops::Kernel<CheckCuda> k_check_cuda("myops_cross_entropy_check_cuda");
myops::Kernel<CheckWaitCuda> k_check_wait_cuda("myops_cross_entropy_check_wait_cuda");
// The check's scratch: one slot per CTA of the check kernel (at most kCheckSlots), pinned host memory that the check
// kernel writes through its device mapping.
constexpr int64_t kCheckSlots = 1024;
at::Tensor check_scratch() {
  return at::empty({kCheckSlots}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
}

[[noreturn]] void raise_bad_target(const at::Tensor& t1, int64_t row, int64_t C, int64_t ignore_index,
                                   const char* when = "") {
  TORCH_CHECK(false, "myops.cross_entropy: target contains class index ", myops::str(t1[row].item<int64_t>()),
              " outside [0, ", myops::str(C), ") (and it is not ignore_index ", myops::str(ignore_index), ")", when);
}

enum class Reduction { None, Mean, Sum };

Reduction parse_reduction(c10::string_view r, const char* op) {
  if (r == "mean") return Reduction::Mean;
  if (r == "sum") return Reduction::Sum;
  TORCH_CHECK(r == "none", "myops.", op, ": reduction must be \"mean\", \"sum\" or \"none\", got \"", std::string(r),
              "\"");
  return Reduction::None;
}

void check_args(const at::Tensor& logits, const at::Tensor& target, double smoothing, const char* op) {
  myops::dtype_code(logits, op, "logits");
  TORCH_CHECK(logits.dim() == 1 || logits.dim() == 2, "myops.", op, ": logits must have shape [M, C] or [C], got ",
              myops::str(logits.sizes()));
  TORCH_CHECK(target.scalar_type() == at::kLong, "myops.", op,
              ": target must be an int64 tensor of class indices, got ", target.scalar_type());
  TORCH_CHECK(target.dim() == logits.dim() - 1 && (target.dim() == 0 || target.size(0) == logits.size(0)), "myops.",
              op, ": target must have shape ", myops::str(logits.sizes().slice(0, logits.dim() - 1)),
              " (one class index per row of logits), got ", myops::str(target.sizes()));
  myops::check_same_device(logits, target, op, "logits", "target");
  TORCH_CHECK(logits.size(-1) >= 1, "myops.", op, ": logits must have at least one class");
  TORCH_CHECK(smoothing >= 0.0 && smoothing <= 1.0, "myops.", op, ": label_smoothing must be in [0, 1]");
}

// CPU targets t1 [M]: raises for the least row whose target is outside [0, C) and not ignore_index, and returns the
// count of rows not ignored (the mean's divisor). One host loop where ATen ops took about 20 us at small M.
int64_t check_cpu_targets(const at::Tensor& t1, int64_t C, int64_t ignore_index, bool check) {
  const int64_t* t = t1.data_ptr<int64_t>();
  const int64_t M = t1.numel(), s = t1.stride(0);
  int64_t kept = 0;
  for (int64_t i = 0; i < M; ++i) {
    const int64_t v = t[i * s];
    if (v == ignore_index) continue;
    if (check && (v < 0 || v >= C)) raise_bad_target(t1, i, C, ignore_index);
    ++kept;
  }
  return kept;
}

std::tuple<at::Tensor, at::Tensor> cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                                 int64_t ignore_index, double smoothing, c10::string_view reduction,
                                                 bool check_target) {
  const char* op = "cross_entropy";
  check_args(logits, target, smoothing, op);
  const Reduction red = parse_reduction(reduction, op);
  const int dtype = myops::dtype_code(logits, op, "logits");
  const at::Tensor x2 = logits.dim() == 1 ? logits.unsqueeze(0) : logits;
  const at::Tensor t1 = target.reshape({-1});
  const int64_t M = x2.size(0), C = x2.size(1);
  const int64_t kept = logits.is_cuda() ? -1 : check_cpu_targets(t1, C, ignore_index, check_target);
  int64_t bad_row = 0;  // GPU: 1 + the least row whose target is bad, or 0
  const auto stat_opts = logits.options().dtype(myops::stat_dtype(logits));
  // reduction sum/mean on the GPU: the forward launcher reduces rows into loss before it waits for the check (rows:
  // M losses, then that reduction's workspace)
  const bool gpu_sum = red != Reduction::None && logits.is_cuda();
  int64_t ws = 0;
#ifdef MYOPS_WITH_CUDA
  if (gpu_sum && M > 0) ws = k_parts_cuda.get()(M);
#endif
  at::Tensor rows = at::empty({M + ws}, stat_opts), stats = at::empty({M, 2}, stat_opts);
  at::Tensor loss = gpu_sum ? at::empty({}, logits.options()) : at::Tensor();
  if (M > 0) {
    const myops::RowsView v = myops::rows_view(x2);
    if (logits.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
      const c10::cuda::OptionalCUDAGuard guard(logits.device());
      at::Tensor check_host;
      if (check_target && c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None)
        check_host = check_scratch();
      const int rc = k_fwd_cuda.get()(
          loss.defined() ? loss.data_ptr() : nullptr, red == Reduction::Mean, rows.data_ptr(), stats.data_ptr(),
          check_host.defined() ? check_host.data_ptr<int64_t>() : nullptr, kCheckSlots, &bad_row, v.op,
          t1.data_ptr<int64_t>(), t1.stride(0), M, C, ignore_index, smoothing, dtype, myops::current_stream(logits));
      myops::check_status(rc, op, "CUDA");
#endif
    } else {
      const FwdCpu fn = k_fwd_cpu.get();
      const int64_t es = logits.element_size(), ss = rows.element_size();
      myops::cpu_rows(M, C, op, [&](int64_t b, int64_t e) {
        return fn(static_cast<char*>(rows.data_ptr()) + b * ss, static_cast<char*>(stats.data_ptr()) + 2 * b * ss,
                  myops::shifted(v.op, b, es), t1.data_ptr<int64_t>() + b * t1.stride(0), t1.stride(0), e - b, C,
                  ignore_index, smoothing, dtype);
      });
    }
  }
  if (red == Reduction::None) {
    loss = rows.reshape(target.sizes()).to(logits.scalar_type());
  } else if (!logits.is_cuda() || M == 0) {  // (M = 0 on the GPU: no launch; the sum of nothing and 0 / 0)
    at::Tensor total = rows.sum();
    if (red == Reduction::Mean) total = total.div(kept >= 0 ? static_cast<double>(kept) : 0.0);  // (0 / 0: NaN)
    loss = total.to(logits.scalar_type());
  }
  if (bad_row > 0) raise_bad_target(t1, bad_row - 1, C, ignore_index);
  std::vector<int64_t> stats_shape(target.sizes().begin(), target.sizes().end());
  stats_shape.push_back(2);
  return {loss, stats.reshape(stats_shape)};
}

at::Tensor cross_entropy_backward(const at::Tensor& grad, const at::Tensor& logits, const at::Tensor& target,
                                  const at::Tensor& stats, int64_t ignore_index, double smoothing,
                                  c10::string_view reduction) {
  const char* op = "cross_entropy_backward";
  check_args(logits, target, smoothing, op);
  const Reduction red = parse_reduction(reduction, op);
  const int dtype = myops::dtype_code(logits, op, "logits");
  myops::check_same_device(logits, grad, op, "logits", "grad");
  TORCH_CHECK(grad.sizes() == (red == Reduction::None ? target.sizes() : at::IntArrayRef{}), "myops.", op,
              ": grad must have the shape of the loss");
  TORCH_CHECK(stats.numel() == 2 * target.numel() && stats.dim() == target.dim() + 1 &&
                  stats.scalar_type() == myops::stat_dtype(logits) && stats.device() == logits.device(),
              "myops.", op, ": stats must be the stats output of cross_entropy for these logits");
  const at::Tensor x2 = logits.dim() == 1 ? logits.unsqueeze(0) : logits;
  const at::Tensor t1 = target.reshape({-1}), l1 = stats.reshape({-1, 2}).contiguous();
  const int64_t M = x2.size(0), C = x2.size(1);
  // g: the per-row factor, [M] (reduction "none") or its first element (acc type; on the GPU the count's workspace
  // follows it)
  at::Tensor g;
  if (red != Reduction::None && logits.is_cuda() && M > 0) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(logits.device());
    g = at::empty({1 + k_parts_cuda.get()(M)}, logits.options().dtype(myops::stat_dtype(logits)));
    const at::Tensor g0 = grad.to(logits.scalar_type());
    const int rc = k_grad_scale_cuda.get()(g.data_ptr(), g0.data_ptr(), t1.data_ptr<int64_t>(), t1.stride(0), M,
                                           ignore_index, red == Reduction::Mean, dtype, myops::current_stream(logits));
    myops::check_status(rc, op, "CUDA");
#endif
  } else {
    g = grad.to(myops::stat_dtype(logits)).reshape({-1});
    if (red == Reduction::Mean)  // (GPU: here only for M = 0)
      g = g.div(logits.is_cuda() ? 0.0 : static_cast<double>(check_cpu_targets(t1, C, ignore_index, false)));
    g = g.contiguous();
  }
  const int64_t g_stride = red == Reduction::None ? 1 : 0;
  at::Tensor dx = at::empty(x2.sizes(), x2.options());
  if (M > 0) {
    const myops::RowsView v = myops::rows_view(x2);
    if (logits.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
      const c10::cuda::OptionalCUDAGuard guard(logits.device());
      const int rc = k_bwd_cuda.get()(myops::out_rows(dx), v.op, t1.data_ptr<int64_t>(), t1.stride(0), l1.data_ptr(),
                                      g.data_ptr(), g_stride, M, C, ignore_index, smoothing, dtype,
                                      myops::current_stream(logits));
      myops::check_status(rc, op, "CUDA");
#endif
    } else {
      const BwdCpu fn = k_bwd_cpu.get();
      const int64_t es = logits.element_size(), ss = l1.element_size();
      myops::cpu_rows(M, C, op, [&](int64_t b, int64_t e) {
        return fn(myops::shifted(myops::out_rows(dx), b, es), myops::shifted(v.op, b, es),
                  t1.data_ptr<int64_t>() + b * t1.stride(0), t1.stride(0),
                  static_cast<const char*>(l1.data_ptr()) + 2 * b * ss,
                  static_cast<const char*>(g.data_ptr()) + b * g_stride * ss, g_stride, e - b, C, ignore_index,
                  smoothing, dtype);
      });
    }
  }
  return logits.dim() == 1 ? dx.squeeze(0) : dx;
}
// The dispatcher's handle of the backward op (fake, functionalization and the device kernels run as for a direct
// call).
const auto& backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("myops::cross_entropy_backward", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, int64_t, double, c10::string_view)>();
  return op;
}

#ifdef MYOPS_WITH_CUDA
// A target check that the forward queued without waiting for it, read when backward runs (see
// cross_entropy_autograd). It owns the check's event until then: released by resolve(), else (a graph freed without
// backward) by the destructor, which first waits for the check to be done writing `host`.
struct DeferredCheck : torch::CustomClassHolder {
  at::Tensor host;  // [kCheckSlots] pinned: the check kernel's slots
  void* event = nullptr;
  int64_t used = 0, bad_row = 0;  // bad_row after resolve(): 1 + the least bad row, or 0
  // Queues the check of target's rows against [0, C) on the current stream of its device.
  DeferredCheck(const at::Tensor& t1, int64_t C, int64_t ignore_index) : host(check_scratch()) {
    const c10::cuda::OptionalCUDAGuard guard(t1.device());
    const int rc = k_check_cuda.get()(host.data_ptr<int64_t>(), kCheckSlots, &used, &event, t1.data_ptr<int64_t>(),
                                      t1.stride(0), t1.numel(), C, ignore_index, myops::current_stream(t1));
    if (rc) resolve();  // (waits for whatever was queued before it reports the launch's error)
    myops::check_status(rc, "cross_entropy", "CUDA");
  }
  void resolve() {
    void* e = event;
    event = nullptr;
    if (e != nullptr)
      myops::check_status(k_check_wait_cuda.get()(e, host.data_ptr<int64_t>(), used, &bad_row), "cross_entropy",
                          "CUDA");
  }
  ~DeferredCheck() override {
    try {
      resolve();
    } catch (...) {  // (a destructor does not throw; the check's result is dropped with its graph)
    }
  }
};
#endif

// d loss / d logits by cross_entropy_backward; stats is not differentiable, and an unused loss gets no gradient
// (gradients are not materialized: no zero-filled [M, 2] gradient for stats, no backward kernel for nothing).
// With check_target, logits on the GPU that require grad (eager autograd; not while a CUDA graph is captured, and
// not for fake, functional or functorch-wrapped tensors, which a compiled graph's tracing and torch.func pass) defer
// the check's wait to backward (prepare): the forward queues the check ahead of its kernels and returns without
// waiting for the GPU, and backward queues its kernels, then reads the check and raises for a bad target. Waiting
// in the forward left the GPU idle for the host's whole way from that wait through autograd to the backward's launch
// (H100, [4096, 32000] forward+backward, % of copy: bf16 62.7 checked against 94.5 unchecked, fp32 77.5 against
// 98.8; torch.compile 66.0 / 90.7).
// The composites (forward-mode AD and second derivatives, autograd.h) in ATen ops, fp32 for 16-bit logits: a row's
// loss lse(x) - (1 - s) x[t] - s mean(x) (s: label_smoothing), 0 where the target is ignore_index and NaN where it
// lies outside [0, C) (as the kernels without check_target: the index read is clamped, nothing reads out of
// bounds); dlogits = softmax(x) - q per row, q the smoothed one-hot target ((1 - s) onehot + s / C).
struct CeRef {
  at::Tensor x, t, valid, f;  // acc logits [..., C]; the index read [..., 1]; not ignored, a row's factor [...]
};
CeRef ce_ref(const at::Tensor& logits, const at::Tensor& target, int64_t ignore_index) {
  const at::Tensor x = myops::acc(logits);
  const at::Tensor in = target.ge(0).logical_and(target.lt(x.size(-1))), valid = target.ne(ignore_index);
  // f: 1, 0 where ignored, NaN where out of range (a factor: the values and their derivatives NaN there)
  const at::Tensor f = valid.to(x.scalar_type())
                           .masked_fill(valid.logical_and(in.logical_not()), std::numeric_limits<double>::quiet_NaN());
  return {x, target.mul(in).unsqueeze(-1), valid, f};
}
// Each dlogits row's share of the incoming gradient: its own ("none"), all of it ("sum"), or that over the rows not
// ignored ("mean").
at::Tensor ce_scale(const at::Tensor& grad, const CeRef& c, const std::string& r) {
  return r == "none" ? grad.unsqueeze(-1) : r == "sum" ? grad : grad.div(c.valid.sum());
}
myops::Tensors cross_entropy_composite(const myops::Args& a) {
  const CeRef c = ce_ref(a[0].toTensor(), a[1].toTensor(), a[2].toInt());
  const double s = a[3].toDouble();
  const std::string& r = a[4].toStringRef();
  at::Tensor row = c.x.logsumexp({-1}).sub(c.x.gather(-1, c.t).squeeze(-1).mul(1.0 - s)).sub(c.x.mean({-1}).mul(s));
  row = row.mul(c.f);
  return {r == "none" ? row : r == "sum" ? row.sum() : row.sum().div(c.valid.sum()), at::Tensor()};
}
myops::Tensors cross_entropy_backward_composite(const myops::Args& a) {
  const CeRef c = ce_ref(a[1].toTensor(), a[2].toTensor(), a[4].toInt());
  const double s = a[5].toDouble();
  const at::Tensor q = at::zeros_like(c.x).scatter(-1, c.t, 1.0 - s).add(s / static_cast<double>(c.x.size(-1)));
  const at::Tensor d = c.x.softmax(-1).sub(q).mul(c.f.unsqueeze(-1));
  return {d.mul(ce_scale(myops::acc(a[0].toTensor()), c, a[6].toStringRef()))};
}

myops::AutogradSpec cross_entropy_autograd() {
  myops::AutogradSpec spec;
  spec.composite = cross_entropy_composite;  // (stats: the op's own; its call below autograd checked the targets)
  spec.save = myops::saving({0, 1}, {1});  // logits, target, stats
  spec.non_differentiable = {1};
  spec.materialize_grads = false;
  spec.prepare = [](std::vector<c10::IValue>& args) -> c10::IValue {
#ifdef MYOPS_WITH_CUDA
    const at::Tensor& logits = args[0].toTensor();
    const at::Tensor& target = args[1].toTensor();
    if (args[5].toBool() && logits.is_cuda() && logits.requires_grad() && !at::isTensorSubclassLike(logits) &&
        !at::isTensorSubclassLike(target)) {
      const double smoothing = args[3].toDouble();
      check_args(logits, target, smoothing, "cross_entropy");  // (before anything is queued)
      const c10::cuda::OptionalCUDAGuard guard(logits.device());
      if (c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None) {
        args[5] = false;  // (the op runs unchecked; backward reads the check)
        return c10::IValue::make_capsule(
            c10::make_intrusive<DeferredCheck>(target.reshape({-1}), logits.size(-1), args[2].toInt()));
      }
    }
#endif
    (void)args;
    return c10::IValue();
  };
  // The gradient's kernels are queued before the host waits for the check, so that the GPU runs them while the
  // host waits, instead of idling from the forward's end until the host is back from the wait and has queued them.
  // A bad target's row reads a clamped column (NaN there, as in the forward), and the error below discards it.
  spec.backward = [](const myops::AutogradCtx& c, const myops::Tensors& g) {
    myops::Tensors out(6);
    const int64_t ignore_index = c.args[2].toInt();
    if (g[0].defined())
      out[0] = backward_op().call(g[0], c.saved[0], c.saved[1], c.saved[2], ignore_index, c.args[3].toDouble(),
                                  c.args[4].toStringRef());
#ifdef MYOPS_WITH_CUDA
    if (c.extra.isCapsule()) {
      auto check = c10::static_intrusive_pointer_cast<DeferredCheck>(c.extra.toCapsule());
      check->resolve();
      if (check->bad_row > 0)
        raise_bad_target(c.saved[1].reshape({-1}), check->bad_row - 1, c.saved[0].size(-1), ignore_index,
                         " (the forward's check, read when backward ran: the logits require grad)");
    }
#endif
    return out;
  };
  return spec;
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("cross_entropy(Tensor logits, Tensor target, int ignore_index=-100, float label_smoothing=0.0, "
        "str reduction=\"mean\", bool check_target=True) -> (Tensor, Tensor)");
  m.def("cross_entropy_backward(Tensor grad, Tensor logits, Tensor target, Tensor stats, int ignore_index, "
        "float label_smoothing, str reduction) -> Tensor");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("cross_entropy", &cross_entropy);
  m.impl("cross_entropy_backward", &cross_entropy_backward);
}
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  m.impl("cross_entropy", myops::autograd_kernel(cross_entropy_autograd()));
  m.impl("cross_entropy_backward", myops::backward_op_kernel(cross_entropy_backward_composite));
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("cross_entropy", &cross_entropy);
  m.impl("cross_entropy_backward", &cross_entropy_backward);
}
#endif
// vmap (batching.h): the batch's rows in one call with reduction "none", then each sample's reduction. The forward
// sums a sample's rows' losses in fp32 (fp64 for fp64), taken unrounded from stats as max + log-sum-exp - x[target]
// (0 where the target is ignore_index, NaN where "none" gave NaN: a target out of range, unchecked); only label
// smoothing takes the "none" output, rounded to the logits' dtype. "mean" divides by the sample's count of rows whose
// target is not ignore_index (NaN where there is none, 0 / 0 as F.cross_entropy's). Backward gives each row its
// sample's gradient factor. Logits of other ranks, an unknown reduction or no classes: per sample (the op raises).
namespace {
bool ce_folds(const myops::Batch& b, int logits, const std::string& reduction) {
  const at::Tensor& lg = b.args[logits].toTensor();
  const int64_t rank = lg.dim() - (b.batched(logits) ? 1 : 0);
  return (reduction == "mean" || reduction == "sum" || reduction == "none") && (rank == 1 || rank == 2) &&
         lg.sym_size(-1) > 0;
}
// Per sample: the count of its rows whose target is not ignore_index. t: [B] or [B, M].
at::Tensor ce_counts(const at::Tensor& t, int64_t ignore_index) {
  return t.reshape_symint({t.sym_size(0), -1}).ne(ignore_index).sum(1);
}
std::optional<myops::Tensors> ce_batch(const myops::Batch& b) {
  const std::string reduction = b.args[4].toStringRef();
  if (!ce_folds(b, 0, reduction)) return std::nullopt;
  const int64_t ignore_index = b.args[2].toInt();
  const double smoothing = b.args[3].toDouble();
  const at::Tensor lg = b.front(0), t = b.front(1);
  const c10::SymInt classes = lg.sym_size(-1);
  const at::Tensor x = lg.reshape_symint({-1, classes}), tr = t.reshape({-1});
  const myops::Tensors out = b.call_tensors({x, tr, ignore_index, smoothing, std::string("none"), b.args[5]});
  at::Tensor loss = out[0];
  const at::Tensor& stats = out[1];
  if (reduction == "none") {
    loss = loss.view_symint(t.sym_sizes());
  } else {
    at::Tensor rows;
    if (smoothing == 0) {
      const at::Tensor xt = x.gather(1, tr.clamp(0, c10::Scalar(classes - 1)).unsqueeze(1)).squeeze(1);
      rows = stats.select(1, 0)
                 .add(stats.select(1, 1))
                 .sub(xt.to(stats.scalar_type()))
                 .masked_fill(tr.eq(ignore_index), 0.0)
                 .masked_fill(loss.isnan(), std::numeric_limits<double>::quiet_NaN());
    } else {
      rows = myops::acc(loss);
    }
    at::Tensor total = rows.view_symint({t.sym_size(0), -1}).sum(1);
    if (reduction == "mean") total = total.div(ce_counts(t, ignore_index));
    loss = total.to(loss.scalar_type());
  }
  std::vector<c10::SymInt> shape(t.sym_sizes().begin(), t.sym_sizes().end());
  shape.emplace_back(2);
  return myops::Tensors{loss, stats.view_symint(shape)};
}
std::optional<myops::Tensors> ce_backward_batch(const myops::Batch& b) {
  const std::string reduction = b.args[6].toStringRef();
  if (!ce_folds(b, 1, reduction)) return std::nullopt;
  const int64_t ignore_index = b.args[4].toInt();
  at::Tensor g = b.front(0);
  const at::Tensor lg = b.front(1), t = b.front(2), st = b.front(3);
  if (reduction != "none") {
    g = myops::acc(g);
    if (reduction == "mean") g = g.div(ce_counts(t, ignore_index));
    g = g.unsqueeze(1).expand_symint({t.sym_size(0), t.dim() == 2 ? t.sym_size(1) : c10::SymInt(1)});
  }
  const at::Tensor dl = b.call_tensors({g.reshape({-1}), lg.reshape_symint({-1, lg.sym_size(-1)}), t.reshape({-1}),
                                        st.reshape({-1, 2}), b.args[4], b.args[5], std::string("none")})[0];
  return myops::Tensors{dl.view_symint(lg.sym_sizes())};
}
}  // namespace
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("cross_entropy", myops::batch_kernel(ce_batch));
  m.impl("cross_entropy_backward", myops::batch_kernel(ce_backward_batch));
}
