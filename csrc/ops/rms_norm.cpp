// myops::rms_norm(x, weight?, eps) -> (y, rstd): y = x / sqrt(mean(x^2, -1) + eps) * weight, computed in fp32
// (fp64 for fp64); rstd [x.shape[:-1]] (fp32, fp64 for fp64) is saved for the backward pass.
// myops::rms_norm_backward(grad, x, rstd, weight?, weight_grad, eps) -> (dx, dweight) (dweight: [0] if not asked
// for). eps is the forward's: the exact engines (CPU, and CUDA rows the register path does not take) recompute rstd
// in fp64 rather than read the rounded one.
#include "autograd.h"
#include "batching.h"
#include "common.h"
#include "norm_ref.h"

namespace {
using FwdCpu = int (*)(myops_out_operand, void*, myops_operand, const void*, int64_t, int64_t, double, int);
using FwdCuda = int (*)(myops_out_operand, void*, myops_operand, const void*, int64_t, int64_t, double, int, void*);
using BwdCpu = int (*)(myops_out_operand, double*, myops_operand, myops_operand, const void*, int64_t, int64_t,
                       double, int);
using BwdCuda = int (*)(myops_out_operand, void*, myops_operand, myops_operand, const void*, const void*, int64_t,
                        int64_t, double, int, void*);
using WsCuda = int64_t (*)(myops_operand, myops_operand, const void*, int64_t, int64_t, int);
myops::Kernel<FwdCpu> k_fwd_cpu("myops_rms_norm_cpu");
myops::Kernel<FwdCuda> k_fwd_cuda("myops_rms_norm_cuda");
myops::Kernel<BwdCpu> k_bwd_cpu("myops_rms_norm_backward_cpu");
myops::Kernel<BwdCuda> k_bwd_cuda("myops_rms_norm_backward_cuda");
myops::Kernel<WsCuda> k_ws_cuda("myops_rms_norm_backward_ws_cuda");

at::Tensor checked_weight(const at::Tensor& x, const std::optional<at::Tensor>& weight, const char* op) {
  TORCH_CHECK(x.dim() >= 1, "myops.", op, ": x must have at least 1 dimension, got a 0-d tensor");
  if (!weight.has_value()) return at::Tensor();
  myops::check_last_dim_vector(x, *weight, op, "x", "weight");
  return weight->contiguous();
}

std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                            double eps) {
  const int dtype = myops::dtype_code(x, "rms_norm", "x");
  const at::Tensor w = checked_weight(x, weight, "rms_norm");
  TORCH_CHECK(eps >= 0, "myops.rms_norm: eps must be >= 0");
  const myops::RowsView v = myops::rows_view(x);
  at::Tensor y = at::empty(x.sizes(), x.options());
  at::Tensor rstd = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(myops::stat_dtype(x)));
  if (v.N == 0) rstd.fill_(std::numeric_limits<double>::quiet_NaN());  // mean of no elements, as in eager
  if (v.M == 0 || v.N == 0) return {y, rstd};
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  if (x.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(x.device());
    const int rc = k_fwd_cuda.get()(myops::out_rows(y), rstd.data_ptr(), v.op, wp, v.M, v.N, eps, dtype,
                                    myops::current_stream(x));
    myops::check_status(rc, "rms_norm", "CUDA");
#endif
    return {y, rstd};
  }
  const FwdCpu fn = k_fwd_cpu.get();
  const int64_t es = x.element_size(), ss = rstd.element_size();
  myops::cpu_rows(v.M, v.N, "rms_norm", [&](int64_t b, int64_t e) {
    return fn(myops::shifted(myops::out_rows(y), b, es), static_cast<char*>(rstd.data_ptr()) + b * ss,
              myops::shifted(v.op, b, es), wp, e - b, v.N, eps, dtype);
  });
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& grad, const at::Tensor& x,
                                                     const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                                                     bool weight_grad, double eps) {
  const char* op = "rms_norm_backward";
  const int dtype = myops::dtype_code(x, op, "x");
  myops::check_like(x, grad, op, "x", "grad");
  const at::Tensor w = checked_weight(x, weight, op);
  TORCH_CHECK(rstd.sizes() == x.sizes().slice(0, x.dim() - 1) && rstd.scalar_type() == myops::stat_dtype(x) &&
                  rstd.device() == x.device(),
              "myops.rms_norm_backward: rstd must be the rstd output of rms_norm for this x");
  const bool dw = weight_grad && w.defined();
  const myops::RowsView gv = myops::rows_view(grad), xv = myops::rows_view(x);
  const at::Tensor rs = rstd.contiguous();
  at::Tensor dx = at::empty(x.sizes(), x.options());
  at::Tensor dweight = at::empty({dw ? xv.N : 0}, x.options());
  if (xv.M == 0 || xv.N == 0) return {dx, dweight.zero_()};
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  at::Tensor ws;
  if (x.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(x.device());
    if (dw) {
      const int64_t rows = k_ws_cuda.get()(gv.op, xv.op, wp, xv.M, xv.N, dtype);
      TORCH_CHECK(rows > 0, "myops.", op, ": no launch configuration fits this device for N = ", myops::str(xv.N));
      ws = at::empty({rows, xv.N}, x.options().dtype(myops::stat_dtype(x)));
    }
    const int rc = k_bwd_cuda.get()(myops::out_rows(dx), dw ? ws.data_ptr() : nullptr, gv.op, xv.op, rs.data_ptr(),
                                    wp, xv.M, xv.N, eps, dtype, myops::current_stream(x));
    myops::check_status(rc, op, "CUDA");
    if (dw) dweight = myops::colsum_cuda(ws.unsqueeze(0), x.scalar_type(), op)[0];
#endif
  } else {
    const BwdCpu fn = k_bwd_cpu.get();
    const int64_t es = x.element_size(), parts = myops::cpu_parts(xv.M);
    if (dw) ws = at::zeros({parts, xv.N}, x.options().dtype(at::kDouble));
    myops::cpu_row_parts(xv.M, parts, op, [&](int64_t q, int64_t b, int64_t e) {
      return fn(myops::shifted(myops::out_rows(dx), b, es), dw ? ws.data_ptr<double>() + q * xv.N : nullptr,
                myops::shifted(gv.op, b, es), myops::shifted(xv.op, b, es), wp, e - b, xv.N, eps, dtype);
    });
    if (dw) dweight = ws.sum(0).to(x.scalar_type());
  }
  return {dx, dweight};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("rms_norm(Tensor x, Tensor? weight=None, float eps=1e-6) -> (Tensor, Tensor)");
  m.def("rms_norm_backward(Tensor grad, Tensor x, Tensor rstd, Tensor? weight, bool weight_grad, float eps) "
        "-> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("rms_norm_backward", &rms_norm_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("rms_norm_backward", &rms_norm_backward);
}
#endif
// (dx, dweight) = rms_norm_backward(grad, x, rstd, weight, weight wanted, eps); rstd carries no gradient, and an
// unused y none (gradients not materialized: no zero-filled ones).
namespace {
// Forward-mode AD (autograd.h): the forms of norm_ref.h; rstd the op's own.
myops::Tensors rms_norm_composite(const myops::Args& a) {
  const at::Tensor w = myops::tensor_arg(a[1]), xh = myops::norm_ref(a[0].toTensor(), a[2].toDouble(), false).xh;
  return {w.defined() ? xh.mul(myops::acc(w)) : xh, at::Tensor()};
}
// (grad, x, rstd, weight?, weight_grad, eps) -> (dx, dweight where asked for and a weight exists)
myops::Tensors rms_norm_backward_composite(const myops::Args& a) {
  const at::Tensor &grad = a[0].toTensor(), w = myops::tensor_arg(a[3]);
  const myops::NormRef n = myops::norm_ref(a[1].toTensor(), a[5].toDouble(), false);
  return {myops::norm_ref_dx(n, grad, w, false),
          a[4].toBool() && w.defined() ? myops::row_sum(myops::acc(grad).mul(n.xh)) : at::Tensor()};
}
const myops::OpRef rms_norm_backward_op("rms_norm_backward");
}
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  m.impl("rms_norm_backward", myops::backward_op_kernel(rms_norm_backward_composite));
  myops::AutogradSpec spec{myops::saving({0, 1}, {1}), [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                             if (!g[0].defined()) return myops::Tensors{};
                             const at::Tensor &x = c.saved[0], &w = c.saved[1], &rstd = c.saved[2];
                             return rms_norm_backward_op.call_all(
                                 {g[0], x, rstd, myops::optional_arg(w), c.need(1), c.args[2]});
                           }};
  spec.non_differentiable = {1};
  spec.materialize_grads = false;
  m.impl("rms_norm", myops::autograd_kernel(myops::with_composite(std::move(spec), rms_norm_composite)));
}
// vmap (batching.h): dweight per sample, the sum over its rows of grad * x * rstd (rms_weight_sums). A batched weight
// (an ensemble's) in one call too: the forward's product after the op, the backward's grad times the weight before it.
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("rms_norm", myops::batch_kernel(myops::fold_affine({0}, 1)));
  const myops::RowSums sums = myops::rms_weight_sums(0, 1, 2, 3);
  m.impl("rms_norm_backward", myops::batch_kernel(myops::fold_norm_sums({0, 1, 2}, 3, 4, sums)));
}
