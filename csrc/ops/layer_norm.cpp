// myops::layer_norm(x, weight?, bias?, eps) -> (y, mean, rstd) = F.layer_norm(x, x.shape[-1:], weight, bias, eps),
// computed in fp32 (fp64 for fp64); mean and rstd [x.shape[:-1]] are saved for the backward pass.
// myops::layer_norm_backward(grad, x, mean, rstd, weight?, params_grad, eps) -> (dx, dweight, dbias) (the parameter
// gradients are [0] unless params_grad). eps is the forward's: the exact engines (CPU, and CUDA rows the register
// path does not take) recompute mean and rstd rather than read the rounded ones (the CPU's fp32 path sums about the
// saved mean, falling back to the row alone where that mean is far from the row's or not finite).
#include "autograd.h"
#include "batching.h"
#include "common.h"
#include "norm_ref.h"

namespace {
using FwdCpu = int (*)(myops_out_operand, void*, void*, myops_operand, const void*, const void*, int64_t, int64_t,
                       double, int);
using FwdCuda = int (*)(myops_out_operand, void*, void*, myops_operand, const void*, const void*, int64_t, int64_t,
                        double, int, void*);
using BwdCpu = int (*)(myops_out_operand, double*, myops_operand, myops_operand, const void*, const void*, int64_t,
                       int64_t, double, int);
using BwdCuda = int (*)(myops_out_operand, void*, myops_operand, myops_operand, const void*, const void*,
                        const void*, int64_t, int64_t, double, int, void*);
using WsCuda = int64_t (*)(myops_operand, myops_operand, const void*, int64_t, int64_t, int);
myops::Kernel<FwdCpu> k_fwd_cpu("myops_layer_norm_cpu");
myops::Kernel<FwdCuda> k_fwd_cuda("myops_layer_norm_cuda");
myops::Kernel<BwdCpu> k_bwd_cpu("myops_layer_norm_backward_cpu");
myops::Kernel<BwdCuda> k_bwd_cuda("myops_layer_norm_backward_cuda");
myops::Kernel<WsCuda> k_ws_cuda("myops_layer_norm_backward_ws_cuda");

at::Tensor checked_param(const at::Tensor& x, const std::optional<at::Tensor>& t, const char* op, const char* arg) {
  if (!t.has_value()) return at::Tensor();
  myops::check_last_dim_vector(x, *t, op, "x", arg);
  return t->contiguous();
}

void check_stat(const at::Tensor& x, const at::Tensor& s, const char* name) {
  TORCH_CHECK(s.sizes() == x.sizes().slice(0, x.dim() - 1) && s.scalar_type() == myops::stat_dtype(x) &&
                  s.device() == x.device(),
              "myops.layer_norm_backward: ", name, " must be the ", name, " output of layer_norm for this x");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias, double eps) {
  const int dtype = myops::dtype_code(x, "layer_norm", "x");
  TORCH_CHECK(x.dim() >= 1, "myops.layer_norm: x must have at least 1 dimension, got a 0-d tensor");
  const at::Tensor w = checked_param(x, weight, "layer_norm", "weight");
  const at::Tensor b = checked_param(x, bias, "layer_norm", "bias");
  TORCH_CHECK(eps >= 0, "myops.layer_norm: eps must be >= 0");
  const myops::RowsView v = myops::rows_view(x);
  at::Tensor y = at::empty(x.sizes(), x.options());
  const auto stat_opts = x.options().dtype(myops::stat_dtype(x));
  at::Tensor mean = at::empty(x.sizes().slice(0, x.dim() - 1), stat_opts);
  at::Tensor rstd = at::empty(x.sizes().slice(0, x.dim() - 1), stat_opts);
  if (v.N == 0) {  // statistics of no elements, as in eager
    mean.fill_(std::numeric_limits<double>::quiet_NaN());
    rstd.fill_(std::numeric_limits<double>::quiet_NaN());
  }
  if (v.M == 0 || v.N == 0) return {y, mean, rstd};
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  const void* bp = b.defined() ? b.data_ptr() : nullptr;
  if (x.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(x.device());
    const int rc = k_fwd_cuda.get()(myops::out_rows(y), mean.data_ptr(), rstd.data_ptr(), v.op, wp, bp, v.M, v.N,
                                    eps, dtype, myops::current_stream(x));
    myops::check_status(rc, "layer_norm", "CUDA");
#endif
    return {y, mean, rstd};
  }
  const FwdCpu fn = k_fwd_cpu.get();
  const int64_t es = x.element_size(), ss = rstd.element_size();
  myops::cpu_rows(v.M, v.N, "layer_norm", [&](int64_t r0, int64_t r1) {
    return fn(myops::shifted(myops::out_rows(y), r0, es), static_cast<char*>(mean.data_ptr()) + r0 * ss,
              static_cast<char*>(rstd.data_ptr()) + r0 * ss, myops::shifted(v.op, r0, es), wp, bp, r1 - r0, v.N, eps,
              dtype);
  });
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& grad, const at::Tensor& x,
                                                                   const at::Tensor& mean, const at::Tensor& rstd,
                                                                   const std::optional<at::Tensor>& weight,
                                                                   bool params_grad, double eps) {
  const char* op = "layer_norm_backward";
  const int dtype = myops::dtype_code(x, op, "x");
  TORCH_CHECK(x.dim() >= 1, "myops.layer_norm_backward: x must have at least 1 dimension, got a 0-d tensor");
  myops::check_like(x, grad, op, "x", "grad");
  check_stat(x, mean, "mean");
  check_stat(x, rstd, "rstd");
  const at::Tensor w = checked_param(x, weight, op, "weight");
  const myops::RowsView gv = myops::rows_view(grad), xv = myops::rows_view(x);
  const at::Tensor mu = mean.contiguous(), rs = rstd.contiguous();
  at::Tensor dx = at::empty(x.sizes(), x.options());
  const int64_t pn = params_grad ? xv.N : 0;
  at::Tensor dw = at::empty({pn}, x.options()), db = at::empty({pn}, x.options());
  if (xv.M == 0 || xv.N == 0) return {dx, dw.zero_(), db.zero_()};
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  at::Tensor ws;
  if (x.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(x.device());
    if (params_grad) {
      const int64_t rows = k_ws_cuda.get()(gv.op, xv.op, wp, xv.M, xv.N, dtype);
      TORCH_CHECK(rows > 0, "myops.", op, ": no launch configuration fits this device for N = ", myops::str(xv.N));
      ws = at::empty({2, rows, xv.N}, x.options().dtype(myops::stat_dtype(x)));
    }
    const int rc = k_bwd_cuda.get()(myops::out_rows(dx), params_grad ? ws.data_ptr() : nullptr, gv.op, xv.op,
                                    mu.data_ptr(), rs.data_ptr(), wp, xv.M, xv.N, eps, dtype,
                                    myops::current_stream(x));
    myops::check_status(rc, op, "CUDA");
    if (params_grad) {
      const std::vector<at::Tensor> s = myops::colsum_cuda(ws, x.scalar_type(), op);
      dw = s[0];
      db = s[1];
    }
#endif
    return {dx, dw, db};
  }
  const BwdCpu fn = k_bwd_cpu.get();
  const int64_t es = x.element_size(), parts = myops::cpu_parts(xv.M);
  if (params_grad) ws = at::zeros({parts, 2, xv.N}, x.options().dtype(at::kDouble));
  myops::cpu_row_parts(xv.M, parts, op, [&](int64_t q, int64_t r0, int64_t r1) {
    return fn(myops::shifted(myops::out_rows(dx), r0, es), params_grad ? ws.data_ptr<double>() + q * 2 * xv.N : nullptr,
              myops::shifted(gv.op, r0, es), myops::shifted(xv.op, r0, es),
              static_cast<const char*>(mu.data_ptr()) + r0 * mu.element_size(), wp, r1 - r0, xv.N, eps, dtype);
  });
  if (params_grad) {
    const at::Tensor tot = ws.sum(0);
    dw = tot[0].to(x.scalar_type());
    db = tot[1].to(x.scalar_type());
  }
  return {dx, dw, db};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-5) -> (Tensor, Tensor, Tensor)");
  m.def("layer_norm_backward(Tensor grad, Tensor x, Tensor mean, Tensor rstd, Tensor? weight, bool params_grad, "
        "float eps) -> (Tensor, Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("layer_norm", &layer_norm);
  m.impl("layer_norm_backward", &layer_norm_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("layer_norm", &layer_norm);
  m.impl("layer_norm_backward", &layer_norm_backward);
}
#endif
// (dx, dweight, dbias) = layer_norm_backward(grad, x, mean, rstd, weight, params wanted, eps); mean and rstd carry
// no gradient, and an unused y none (gradients not materialized).
namespace {
// Forward-mode AD (autograd.h): the forms of norm_ref.h; mean and rstd the op's own.
myops::Tensors layer_norm_composite(const myops::Args& a) {
  const at::Tensor w = myops::tensor_arg(a[1]), b = myops::tensor_arg(a[2]);
  at::Tensor y = myops::norm_ref(a[0].toTensor(), a[3].toDouble(), true).xh;
  if (w.defined()) y = y.mul(myops::acc(w));
  return {b.defined() ? y.add(myops::acc(b)) : y, at::Tensor(), at::Tensor()};
}
// (grad, x, mean, rstd, weight?, params_grad, eps) -> (dx, dweight, dbias where asked for)
myops::Tensors layer_norm_backward_composite(const myops::Args& a) {
  const at::Tensor &grad = a[0].toTensor(), w = myops::tensor_arg(a[4]);
  const myops::NormRef n = myops::norm_ref(a[1].toTensor(), a[6].toDouble(), true);
  const at::Tensor dx = myops::norm_ref_dx(n, grad, w, true);
  if (!a[5].toBool()) return {dx, at::Tensor(), at::Tensor()};
  const at::Tensor g = myops::acc(grad);
  return {dx, myops::row_sum(g.mul(n.xh)), myops::row_sum(g)};
}
const myops::OpRef layer_norm_backward_op("layer_norm_backward");
}
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  m.impl("layer_norm_backward", myops::backward_op_kernel(layer_norm_backward_composite));
  myops::AutogradSpec spec{myops::saving({0, 1}, {1, 2}), [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                             if (!g[0].defined()) return myops::Tensors{};
                             const at::Tensor &x = c.saved[0], &w = c.saved[1], &mean = c.saved[2],
                                              &rstd = c.saved[3];
                             return layer_norm_backward_op.call_all(
                                 {g[0], x, mean, rstd, myops::optional_arg(w), c.need(1) || c.need(2), c.args[3]});
                           }};
  spec.non_differentiable = {1, 2};
  spec.materialize_grads = false;
  m.impl("layer_norm", myops::autograd_kernel(myops::with_composite(std::move(spec), layer_norm_composite)));
}
// vmap (batching.h): dweight and dbias per sample, the sums over its rows of grad * (x - mean) * rstd and of grad in
// fp32; 16-bit tensors are promoted inside ATen's kernels (x - mean, the sums' dtype), not copied to fp32. A batched
// weight or bias (an ensemble's) in one call too: the forward's affine after the op, the backward's grad times the
// weight before it.
namespace {
myops::Tensors layer_norm_sample_sums(const myops::Args& a, const at::Tensor&) {
  const at::Tensor &grad = a[0].toTensor(), &x = a[1].toTensor(), &mean = a[2].toTensor(), &rstd = a[3].toTensor();
  const at::Tensor xhat = x.sub(mean.unsqueeze(-1)).mul(rstd.unsqueeze(-1));
  return {myops::sample_col_sums(xhat.mul(grad), x.scalar_type()), myops::sample_col_sums(grad, x.scalar_type())};
}
}  // namespace
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("layer_norm", myops::batch_kernel(myops::fold_affine({0}, 1, 2)));
  m.impl("layer_norm_backward", myops::batch_kernel(myops::fold_norm_sums({0, 1, 2, 3}, 4, 5, layer_norm_sample_sums)));
}
