// myops::add_rms_norm(x, residual, weight?, eps) -> (y, s, rstd): s = x + residual (rounded to x's dtype, as the
// eager sum), y = rms_norm(s, weight, eps), in one pass; rstd is saved for the backward pass.
// myops::add_rms_norm_backward(grad_y, grad_s?, s, rstd, weight?, weight_grad, eps) -> (ds, dweight):
// ds = rms_norm's input gradient + grad_s, which is the gradient of both x and residual (eps: see rms_norm.cpp).
#include "autograd.h"
#include "batching.h"
#include "common.h"
#include "norm_ref.h"

namespace {
using FwdCpu = int (*)(myops_out_operand, myops_out_operand, void*, myops_operand, myops_operand, const void*,
                       int64_t, int64_t, double, int);
using FwdCuda = int (*)(myops_out_operand, myops_out_operand, void*, myops_operand, myops_operand, const void*,
                        int64_t, int64_t, double, int, void*);
using BwdCpu = int (*)(myops_out_operand, double*, myops_operand, myops_operand, myops_operand, const void*,
                       int64_t, int64_t, double, int);
using BwdCuda = int (*)(myops_out_operand, void*, myops_operand, myops_operand, myops_operand, const void*,
                        const void*, int64_t, int64_t, double, int, void*);
using WsCuda = int64_t (*)(myops_operand, myops_operand, myops_operand, const void*, int64_t, int64_t, int);
myops::Kernel<FwdCpu> k_fwd_cpu("myops_add_rms_norm_cpu");
myops::Kernel<FwdCuda> k_fwd_cuda("myops_add_rms_norm_cuda");
myops::Kernel<BwdCpu> k_bwd_cpu("myops_add_rms_norm_backward_cpu");
myops::Kernel<BwdCuda> k_bwd_cuda("myops_add_rms_norm_backward_cuda");
myops::Kernel<WsCuda> k_ws_cuda("myops_add_rms_norm_backward_ws_cuda");

at::Tensor checked_weight(const at::Tensor& x, const std::optional<at::Tensor>& weight, const char* op,
                          const char* x_name) {
  TORCH_CHECK(x.dim() >= 1, "myops.", op, ": ", x_name, " must have at least 1 dimension, got a 0-d tensor");
  if (!weight.has_value()) return at::Tensor();
  myops::check_last_dim_vector(x, *weight, op, x_name, "weight");
  return weight->contiguous();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                            const std::optional<at::Tensor>& weight, double eps) {
  const char* op = "add_rms_norm";
  const int dtype = myops::dtype_code(x, op, "x");
  myops::check_like(x, residual, op, "x", "residual");
  const at::Tensor w = checked_weight(x, weight, op, "x");
  TORCH_CHECK(eps >= 0, "myops.add_rms_norm: eps must be >= 0");
  const myops::RowsView xv = myops::rows_view(x), rv = myops::rows_view(residual);
  at::Tensor y = at::empty(x.sizes(), x.options()), s = at::empty(x.sizes(), x.options());
  at::Tensor rstd = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(myops::stat_dtype(x)));
  if (xv.N == 0) rstd.fill_(std::numeric_limits<double>::quiet_NaN());
  if (xv.M == 0 || xv.N == 0) return {y, s, rstd};
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  if (x.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(x.device());
    const int rc = k_fwd_cuda.get()(myops::out_rows(y), myops::out_rows(s), rstd.data_ptr(), xv.op, rv.op, wp, xv.M,
                                    xv.N, eps, dtype, myops::current_stream(x));
    myops::check_status(rc, op, "CUDA");
#endif
    return {y, s, rstd};
  }
  const FwdCpu fn = k_fwd_cpu.get();
  const int64_t es = x.element_size(), ss = rstd.element_size();
  myops::cpu_rows(xv.M, xv.N, op, [&](int64_t b, int64_t e) {
    return fn(myops::shifted(myops::out_rows(y), b, es), myops::shifted(myops::out_rows(s), b, es),
              static_cast<char*>(rstd.data_ptr()) + b * ss, myops::shifted(xv.op, b, es),
              myops::shifted(rv.op, b, es), wp, e - b, xv.N, eps, dtype);
  });
  return {y, s, rstd};
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_backward(const at::Tensor& grad_y,
                                                         const std::optional<at::Tensor>& grad_s,
                                                         const at::Tensor& s, const at::Tensor& rstd,
                                                         const std::optional<at::Tensor>& weight, bool weight_grad,
                                                         double eps) {
  const char* op = "add_rms_norm_backward";
  const int dtype = myops::dtype_code(s, op, "s");
  for (const auto& [g, name] : {std::pair<const at::Tensor*, const char*>{&grad_y, "grad_y"},
                                {grad_s.has_value() ? &*grad_s : &grad_y, "grad_s"}}) {
    myops::check_like(s, *g, op, "s", name);
  }
  const at::Tensor w = checked_weight(s, weight, op, "s");
  TORCH_CHECK(rstd.sizes() == s.sizes().slice(0, s.dim() - 1) && rstd.scalar_type() == myops::stat_dtype(s) &&
                  rstd.device() == s.device(),
              "myops.add_rms_norm_backward: rstd must be the rstd output of add_rms_norm for this s");
  const bool dw = weight_grad && w.defined();
  const myops::RowsView gv = myops::rows_view(grad_y), sv = myops::rows_view(s);
  // no grad_s: a null operand on the GPU; a zero view for the CPU kernel
  const at::Tensor zero = grad_s.has_value() ? at::Tensor() : at::zeros({1}, s.options()).expand(s.sizes());
  myops::RowsView ev = myops::rows_view(grad_s.has_value() ? *grad_s : zero);
  myops_operand ds_gpu = ev.op;
  if (!grad_s.has_value()) ds_gpu = myops_operand{nullptr, 0, 0};
  const at::Tensor rs = rstd.contiguous();
  at::Tensor dx = at::empty(s.sizes(), s.options());
  at::Tensor dweight = at::empty({dw ? sv.N : 0}, s.options());
  if (sv.M == 0 || sv.N == 0) return {dx, dweight.zero_()};
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  at::Tensor ws;
  if (s.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(s.device());
    if (dw) {
      const int64_t rows = k_ws_cuda.get()(gv.op, sv.op, ds_gpu, wp, sv.M, sv.N, dtype);
      TORCH_CHECK(rows > 0, "myops.", op, ": no launch configuration fits this device for N = ", myops::str(sv.N));
      ws = at::empty({rows, sv.N}, s.options().dtype(myops::stat_dtype(s)));
    }
    const int rc = k_bwd_cuda.get()(myops::out_rows(dx), dw ? ws.data_ptr() : nullptr, gv.op, sv.op, ds_gpu,
                                    rs.data_ptr(), wp, sv.M, sv.N, eps, dtype, myops::current_stream(s));
    myops::check_status(rc, op, "CUDA");
    if (dw) dweight = myops::colsum_cuda(ws.unsqueeze(0), s.scalar_type(), op)[0];
#endif
  } else {
    const BwdCpu fn = k_bwd_cpu.get();
    const int64_t es = s.element_size(), parts = myops::cpu_parts(sv.M);
    if (dw) ws = at::zeros({parts, sv.N}, s.options().dtype(at::kDouble));
    myops::cpu_row_parts(sv.M, parts, op, [&](int64_t q, int64_t b, int64_t e) {
      return fn(myops::shifted(myops::out_rows(dx), b, es), dw ? ws.data_ptr<double>() + q * sv.N : nullptr,
                myops::shifted(gv.op, b, es), myops::shifted(sv.op, b, es), myops::shifted(ev.op, b, es), wp, e - b,
                sv.N, eps, dtype);
    });
    if (dw) dweight = ws.sum(0).to(s.scalar_type());
  }
  return {dx, dweight};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor? weight=None, float eps=1e-6) -> (Tensor, Tensor, Tensor)");
  m.def("add_rms_norm_backward(Tensor grad_y, Tensor? grad_s, Tensor s, Tensor rstd, Tensor? weight, "
        "bool weight_grad, float eps) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("add_rms_norm_backward", &add_rms_norm_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("add_rms_norm_backward", &add_rms_norm_backward);
}
#endif
// (ds, dweight) = add_rms_norm_backward(grad_y, grad_s, s, rstd, weight, weight wanted, eps), ds for both x and
// residual; rstd carries no gradient. Gradients are not materialized: an unused s gets no [M, N] zeros (the kernel
// then reads no grad_s), and with y unused the norm contributes nothing.
namespace {
// Forward-mode AD (autograd.h): s = x + residual in x's dtype (the op's s), y the form of norm_ref.h; rstd the op's
// own.
myops::Tensors add_rms_norm_composite(const myops::Args& a) {
  const at::Tensor s = a[0].toTensor().add(a[1].toTensor()), w = myops::tensor_arg(a[2]);
  const at::Tensor xh = myops::norm_ref(s, a[3].toDouble(), false).xh;
  return {w.defined() ? xh.mul(myops::acc(w)) : xh, s, at::Tensor()};
}
// (grad_y, grad_s?, s, rstd, weight?, weight_grad, eps) -> (rms_norm's dx + grad_s, dweight where asked for)
myops::Tensors add_rms_norm_backward_composite(const myops::Args& a) {
  const at::Tensor &gy = a[0].toTensor(), gs = myops::tensor_arg(a[1]), w = myops::tensor_arg(a[4]);
  const myops::NormRef n = myops::norm_ref(a[2].toTensor(), a[6].toDouble(), false);
  const at::Tensor dx = myops::norm_ref_dx(n, gy, w, false);
  return {gs.defined() ? dx.add(myops::acc(gs)) : dx,
          a[5].toBool() && w.defined() ? myops::row_sum(myops::acc(gy).mul(n.xh)) : at::Tensor()};
}
const myops::OpRef add_rms_norm_backward_op("add_rms_norm_backward");
}
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  m.impl("add_rms_norm_backward", myops::backward_op_kernel(add_rms_norm_backward_composite));
  myops::AutogradSpec spec{myops::saving({2}, {1, 2}), [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                             const at::Tensor &gy = g[0], &gs = g[1];
                             if (!gy.defined()) return myops::Tensors{gs, gs};
                             const at::Tensor &w = c.saved[0], &s = c.saved[1], &rstd = c.saved[2];
                             const myops::Tensors r = add_rms_norm_backward_op.call_all(
                                 {gy, myops::optional_arg(gs), s, rstd, myops::optional_arg(w), c.need(2), c.args[3]});
                             return myops::Tensors{r[0], r[0], r[1]};  // (ds for both x and residual)
                           }};
  spec.non_differentiable = {2};
  spec.materialize_grads = false;
  m.impl("add_rms_norm", myops::autograd_kernel(myops::with_composite(std::move(spec), add_rms_norm_composite)));
}
// vmap (batching.h): dweight per sample, the sum over its rows of grad_y * s * rstd (rms_weight_sums). A batched
// weight (an ensemble's) in one call too: the forward's product after the op, the backward's grad_y times the weight
// before it.
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("add_rms_norm", myops::batch_kernel(myops::fold_affine({0, 1}, 2)));
  const myops::RowSums sums = myops::rms_weight_sums(0, 2, 3, 4);
  m.impl("add_rms_norm_backward", myops::batch_kernel(myops::fold_norm_sums({0, 1, 2, 3}, 4, 5, sums)));
}
