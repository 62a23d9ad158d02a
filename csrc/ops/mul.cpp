// myops::mul(a, b) = a * b, same shape.
// myops::mul_backward(grad, a, b) -> (grad * b, grad * a) in one pass (its autograd, below, takes it when both need
// a gradient, mul alone otherwise).
#include "autograd.h"
#include "batching.h"
#include "common.h"

namespace {
myops::EwKernel k_mul("mul"), k_mul_backward("mul_backward");

at::Tensor mul(const at::Tensor& a, const at::Tensor& b) {
  myops::dtype_code(a, "mul", "a");
  myops::check_like(a, b, "mul", "a", "b");
  at::Tensor out = at::empty_like(a);  // (laid out as a: run_elementwise)
  myops::run_elementwise(k_mul, {out}, {a, b});
  return out;
}

std::tuple<at::Tensor, at::Tensor> mul_backward(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& b) {
  const char* op = "mul_backward";
  myops::dtype_code(a, op, "a");
  myops::check_like(a, b, op, "a", "b");
  myops::check_like(a, grad, op, "a", "grad");
  // (both laid out as a: one layout for run_elementwise's outputs)
  at::Tensor da = at::empty_like(a), db = at::empty_like(a);
  myops::run_elementwise(k_mul_backward, {da, db}, {grad, a, b});
  return {da, db};
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("mul(Tensor a, Tensor b) -> Tensor");
  m.def("mul_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("mul", &mul);
  m.impl("mul_backward", &mul_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("mul", &mul);
  m.impl("mul_backward", &mul_backward);
}
#endif
// d(a * b) = (grad * b, grad * a): one kernel for both when both are wanted; each factor is saved only for the
// other's gradient.
namespace {
const myops::OpRef mul_op("mul"), mul_backward_op("mul_backward");
}
// Forward-mode AD (autograd.h): ATen's mul.
myops::Tensors mul_composite(const myops::Args& a) { return {a[0].toTensor().mul(a[1].toTensor())}; }
myops::Tensors mul_backward_composite(const myops::Args& a) {
  const at::Tensor& grad = a[0].toTensor();
  return {grad.mul(a[2].toTensor()), grad.mul(a[1].toTensor())};
}
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  // mul_backward(grad, a, b) = (grad b, grad a), bilinear: d/dgrad = g_a b + g_b a, d/da = g_b grad,
  // d/db = g_a grad (the incoming gradients g_a, g_b of its two outputs), through mul (differentiable again).
  m.impl("mul_backward", myops::autograd_kernel(myops::with_composite(
                             {myops::saving({0, 1, 2}, {}),
                              [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                                const at::Tensor &grad = c.saved[0], &a = c.saved[1], &b = c.saved[2];
                                at::Tensor dgrad;
                                if (c.need(0)) dgrad = mul_op.call1({g[0], b}).add(mul_op.call1({g[1], a}));
                                return myops::Tensors{dgrad, c.need(1) ? mul_op.call1({g[1], grad}) : at::Tensor(),
                                                      c.need(2) ? mul_op.call1({g[0], grad}) : at::Tensor()};
                              }},
                             mul_backward_composite)));
  m.impl("mul", myops::autograd_kernel(myops::with_composite(
                    {[](const myops::Args& a, const myops::Tensors&, const std::vector<bool>& needs) {
                       return myops::Tensors{needs[1] ? a[0].toTensor() : at::Tensor(),
                                             needs[0] ? a[1].toTensor() : at::Tensor()};
                     },
                     [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                       const at::Tensor &a = c.saved[0], &b = c.saved[1];
                       if (c.need(0) && c.need(1)) {
                         return mul_backward_op.call_all({g[0], a, b});
                       }
                       return myops::Tensors{c.need(0) ? mul_op.call1({g[0], b}) : at::Tensor(),
                                             c.need(1) ? mul_op.call1({g[0], a}) : at::Tensor()};
                     }},
                    mul_composite)));
}
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("mul", myops::batch_kernel(myops::fold({0, 1})));
  m.impl("mul_backward", myops::batch_kernel(myops::fold({0, 1, 2})));
}
