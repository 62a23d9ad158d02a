// myops::bias_gelu(x, bias) = gelu(x + bias, approximate="tanh"), bias [x.shape[-1]].
// myops::bias_gelu_backward(grad, x, bias) -> (grad_x, grad_bias): grad_x = grad * gelu'(x + bias), grad_bias = its
// sum over all but the last dim, in one pass.
#include "act.h"
#include "autograd.h"
#include "batching.h"
#include "common.h"
#include <ATen/ops/gelu.h>

namespace {
myops::EwKernel k_fwd("bias_gelu");
myops::EwSumKernel k_bwd("bias_gelu_backward");

at::Tensor bias_gelu(const at::Tensor& x, const at::Tensor& bias) {
  myops::dtype_code(x, "bias_gelu", "x");
  myops::check_last_dim_vector(x, bias, "bias_gelu", "x", "bias");
  at::Tensor out = at::empty_like(x);  // (laid out as x: run_elementwise)
  myops::run_elementwise(k_fwd, {out}, {x, bias.expand(x.sizes())});
  return out;
}

std::tuple<at::Tensor, at::Tensor> bias_gelu_backward(const at::Tensor& grad, const at::Tensor& x,
                                                      const at::Tensor& bias) {
  myops::dtype_code(grad, "bias_gelu_backward", "grad");
  myops::check_like(grad, x, "bias_gelu_backward", "grad", "x");
  myops::check_last_dim_vector(x, bias, "bias_gelu_backward", "x", "bias");
  at::Tensor dx = at::empty(grad.sizes(), grad.options());
  at::Tensor dbias = myops::run_elementwise_sum(k_bwd, {dx}, {grad, x, bias.expand(x.sizes())});
  return {dx, dbias};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("bias_gelu(Tensor x, Tensor bias) -> Tensor");
  m.def("bias_gelu_backward(Tensor grad, Tensor x, Tensor bias) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("bias_gelu", &bias_gelu);
  m.impl("bias_gelu_backward", &bias_gelu_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("bias_gelu", &bias_gelu);
  m.impl("bias_gelu_backward", &bias_gelu_backward);
}
#endif
// (dx, dbias) = bias_gelu_backward(grad, x, bias).
namespace {
const myops::OpRef bias_gelu_backward_op("bias_gelu_backward");
}
// Forward-mode AD (autograd.h): ATen's gelu (tanh) of x + bias (fp32 for 16-bit types, as the kernels).
// bias_gelu_backward: dx = grad gelu'(x + bias), dbias = dx summed to bias's shape.
myops::Tensors bias_gelu_backward_composite(const myops::Args& a) {
  const at::Tensor& bias = a[2].toTensor();
  const at::Tensor z = myops::acc(a[1].toTensor()).add(myops::acc(bias));
  const at::Tensor dx = myops::acc(a[0].toTensor()).mul(myops::act_derivatives(z, myops::Act::GeluTanh).first);
  return {dx, dx.sum_to_size_symint(bias.sym_sizes())};
}
myops::Tensors bias_gelu_composite(const myops::Args& a) {
  return {at::gelu(myops::acc(a[0].toTensor()).add(myops::acc(a[1].toTensor())), "tanh")};
}
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  // bias_gelu_backward(grad, x, bias) = (dx, dbias), dx = grad gelu'(z), z = x + bias, dbias = dx summed over rows:
  // with incoming gradients g_x, g_bias, G = g_x + g_bias (broadcast: dbias sums dx) and d/dgrad = G gelu'(z),
  // d/dx = G grad gelu''(z), d/dbias = that summed over rows.
  m.impl("bias_gelu_backward", myops::autograd_kernel(myops::with_composite(
                                   {myops::saving({0, 1, 2}, {}),
                                    [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                                      const at::Tensor &grad = c.saved[0], &x = c.saved[1], &bias = c.saved[2];
                                      const auto d = myops::act_derivatives(x.add(bias), myops::Act::GeluTanh);
                                      const at::Tensor G = g[0].add(g[1]);
                                      myops::Tensors out(3);
                                      if (c.need(0)) out[0] = G.mul(d.first);
                                      if (c.need(1) || c.need(2)) {
                                        const at::Tensor h = G.mul(grad).mul(d.second);
                                        if (c.need(1)) out[1] = h;
                                        if (c.need(2)) out[2] = h.sum_to_size_symint(bias.sym_sizes());
                                      }
                                      return out;
                                    }},
                                   bias_gelu_backward_composite)));
  m.impl("bias_gelu", myops::autograd_kernel(myops::with_composite(
                          {myops::saving({0, 1}, {}),
                           [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                             return bias_gelu_backward_op.call_all({g[0], c.saved[0], c.saved[1]});
                           }},
                          bias_gelu_composite)));
}
// vmap (batching.h): grad_bias per sample, the sum of that sample's grad_x (d/d bias being d/dx).
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("bias_gelu", myops::batch_kernel(myops::fold({0}, {1})));
  m.impl("bias_gelu_backward",
         myops::batch_kernel(myops::fold_row_sums({0, 1}, {2}, -1, [](const myops::Args&, const at::Tensor& dx) {
           return myops::Tensors{myops::sample_col_sums(dx, dx.scalar_type())};
         })));
}
