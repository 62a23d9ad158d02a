// myops::scale_bias_relu(x, bias, scale) = relu(x * scale + bias), bias [x.shape[-1]].
// myops::scale_bias_relu_backward(grad, out, scale) -> (grad_x, grad_bias): with grad_pre = out > 0 ? grad : 0,
// grad_x = grad_pre * scale and grad_bias = the sum of grad_pre over all but the last dim, in one pass.
#include "autograd.h"
#include "batching.h"
#include "common.h"

namespace {
myops::EwKernel k_fwd("scale_bias_relu");
myops::EwSumKernel k_bwd("scale_bias_relu_backward");

at::Tensor scale_bias_relu(const at::Tensor& x, const at::Tensor& bias, double scale) {
  myops::dtype_code(x, "scale_bias_relu", "x");
  myops::check_last_dim_vector(x, bias, "scale_bias_relu", "x", "bias");
  at::Tensor out = at::empty_like(x);  // (laid out as x: run_elementwise)
  myops::run_elementwise(k_fwd, {out}, {x, bias.expand(x.sizes())}, {scale});
  return out;
}

std::tuple<at::Tensor, at::Tensor> scale_bias_relu_backward(const at::Tensor& grad, const at::Tensor& out,
                                                            double scale) {
  myops::dtype_code(grad, "scale_bias_relu_backward", "grad");
  myops::check_like(grad, out, "scale_bias_relu_backward", "grad", "out");
  TORCH_CHECK(grad.dim() >= 1, "myops.scale_bias_relu_backward: grad must have at least 1 dimension");
  at::Tensor dx = at::empty(grad.sizes(), grad.options());
  at::Tensor dbias = myops::run_elementwise_sum(k_bwd, {dx}, {grad, out}, {scale});
  return {dx, dbias};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("scale_bias_relu(Tensor x, Tensor bias, float scale) -> Tensor");
  m.def("scale_bias_relu_backward(Tensor grad, Tensor out, float scale) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("scale_bias_relu", &scale_bias_relu);
  m.impl("scale_bias_relu_backward", &scale_bias_relu_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("scale_bias_relu", &scale_bias_relu);
  m.impl("scale_bias_relu_backward", &scale_bias_relu_backward);
}
#endif
// (dx, dbias) = scale_bias_relu_backward(grad, out, scale), from the output alone.
namespace {
const myops::OpRef scale_bias_relu_backward_op("scale_bias_relu_backward"), relu_backward_op("relu_backward");
}
// Forward-mode AD (autograd.h): relu(x scale + bias) in ATen (fp32 for 16-bit types, as the kernels).
// scale_bias_relu_backward: g = grad where out > 0, (g scale, g summed over all but the last dim).
myops::Tensors scale_bias_relu_backward_composite(const myops::Args& a) {
  const at::Tensor g = myops::acc(a[0].toTensor()).mul(a[1].toTensor().gt(0));
  return {g.mul(a[2].toDouble()), myops::row_sum(g)};
}
myops::Tensors scale_bias_relu_composite(const myops::Args& a) {
  return {myops::acc(a[0].toTensor()).mul(a[2].toDouble()).add(myops::acc(a[1].toTensor())).relu()};
}
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  // scale_bias_relu_backward is linear in grad and piecewise constant in out (no gradient for it): with incoming
  // gradients g_x [..., N] and g_bias [N], d/dgrad = (g_x scale + g_bias) where out > 0 (relu_backward's mask).
  m.impl("scale_bias_relu_backward",
         myops::autograd_kernel(myops::with_composite({myops::saving({1}, {}),
                                                       [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                                                         at::Tensor dgrad;
                                                         if (c.need(0))
                                                           dgrad = relu_backward_op.call1(
                                                               {g[0].mul(c.args[2].toDouble()).add(g[1]), c.saved[0]});
                                                         return myops::Tensors{dgrad, at::Tensor(), at::Tensor()};
                                                       }},
                                                      scale_bias_relu_backward_composite)));
  m.impl("scale_bias_relu", myops::autograd_kernel(myops::with_composite(
                                {myops::saving({}, {0}),
                                 [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                                   return scale_bias_relu_backward_op.call_all({g[0], c.saved[0], c.args[2]});
                                 }},
                                scale_bias_relu_composite)));
}
// vmap (batching.h): grad_bias per sample, the sum of that sample's grad where out > 0.
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("scale_bias_relu", myops::batch_kernel(myops::fold({0}, {1})));
  m.impl(
      "scale_bias_relu_backward",
      myops::batch_kernel(myops::fold_row_sums({0, 1}, {}, -1, [](const myops::Args& a, const at::Tensor&) {
        const at::Tensor &grad = a[0].toTensor(), &out = a[1].toTensor();
        return myops::Tensors{myops::sample_col_sums(grad.masked_fill(out.gt(0).logical_not(), 0), grad.scalar_type())};
      })));
}
