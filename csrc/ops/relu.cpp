// myops::relu(x) = max(x, 0);  myops::relu_backward(grad, out) = out > 0 ? grad : 0.
#include "autograd.h"
#include "batching.h"
#include "common.h"

namespace {
myops::EwKernel k_relu("relu"), k_relu_backward("relu_backward");
namespace {
const myops::OpRef relu_backward_op("relu_backward");
}

at::Tensor relu(const at::Tensor& x) {
  myops::dtype_code(x, "relu", "x");
  at::Tensor out = at::empty_like(x);  // (laid out as x: run_elementwise)
  myops::run_elementwise(k_relu, {out}, {x});
  return out;
}

at::Tensor relu_backward(const at::Tensor& grad, const at::Tensor& out) {
  myops::dtype_code(grad, "relu_backward", "grad");
  myops::check_like(grad, out, "relu_backward", "grad", "out");
  at::Tensor dx = at::empty_like(out);  // (as out, so as relu's input)
  myops::run_elementwise(k_relu_backward, {dx}, {grad, out});
  return dx;
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("relu(Tensor x) -> Tensor");
  m.def("relu_backward(Tensor grad, Tensor out) -> Tensor");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("relu", &relu);
  m.impl("relu_backward", &relu_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("relu", &relu);
  m.impl("relu_backward", &relu_backward);
}
#endif
// d relu / d x = relu_backward(grad, out), from the output alone.
// Forward-mode AD (autograd.h): ATen's relu; relu_backward as grad masked where out > 0.
myops::Tensors relu_composite(const myops::Args& a) { return {a[0].toTensor().relu()}; }
myops::Tensors relu_backward_composite(const myops::Args& a) { return {a[0].toTensor().mul(a[1].toTensor().gt(0))}; }
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  // relu_backward is linear in grad (the same mask on the incoming gradient) and piecewise constant in out: no
  // gradient for out (as aten's threshold_backward). A second derivative of relu is thus 0 where it is defined.
  m.impl("relu_backward", myops::autograd_kernel(myops::with_composite(
                              {myops::saving({1}, {}),
                               [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                                 return myops::Tensors{
                                     c.need(0) ? relu_backward_op.call1({g[0], c.saved[0]}) : at::Tensor(),
                                     at::Tensor()};
                               }},
                              relu_backward_composite)));
  m.impl("relu", myops::autograd_kernel(
                     myops::with_composite({myops::saving({}, {0}),
                                            [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                                              return myops::Tensors{relu_backward_op.call1({g[0], c.saved[0]})};
                                            }},
                                           relu_composite)));
}
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("relu", myops::batch_kernel(myops::fold({0})));
  m.impl("relu_backward", myops::batch_kernel(myops::fold({0, 1})));
}
