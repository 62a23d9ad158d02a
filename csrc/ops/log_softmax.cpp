// myops::log_softmax(x, dim=-1) = x.log_softmax(dim) for floating x, computed in fp32 (fp64 for fp64).
// myops::log_softmax_backward(grad, y, dim) = the gradient for x, from the forward output y. Shared code: softmax.h.
#include "softmax.h"

namespace {
myops::SoftmaxKernels kernels("log_softmax");

at::Tensor fwd(const at::Tensor& x, int64_t dim) { return myops::softmax_forward(kernels, "log_softmax", x, dim); }
at::Tensor bwd(const at::Tensor& grad, const at::Tensor& y, int64_t dim) {
  return myops::softmax_backward(kernels, "log_softmax_backward", grad, y, dim);
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("log_softmax(Tensor x, int dim=-1) -> Tensor");
  m.def("log_softmax_backward(Tensor grad, Tensor y, int dim) -> Tensor");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("log_softmax", &fwd);
  m.impl("log_softmax_backward", &bwd);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("log_softmax", &fwd);
  m.impl("log_softmax_backward", &bwd);
}
#endif
namespace {
// Forward-mode AD (autograd.h): log_softmax_backward as grad - exp(y) sum(grad) in ATen (fp32 for 16-bit types).
myops::Tensors log_softmax_backward_composite(const myops::Args& a) {
  const at::Tensor grad = myops::acc(a[0].toTensor()), y = myops::acc(a[1].toTensor());
  const int64_t dim = a[2].toInt();
  return {grad.sub(y.exp().mul(grad.sum(dim, true)))};
}
}  // namespace
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  // log_softmax_backward(grad, y) = grad - exp(y) sum(grad) over dim: d/dgrad = g - sum(g exp(y)),
  // d/dy = -g exp(y) sum(grad) (g: the incoming gradient).
  m.impl("log_softmax_backward", myops::autograd_kernel(myops::with_composite(
                                     {myops::saving({0, 1}, {}),
                                      [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                                        const at::Tensor &grad = c.saved[0], &y = c.saved[1];
                                        const int64_t dim = c.args[2].toInt();
                                        const at::Tensor p = y.exp();
                                        return myops::Tensors{
                                            c.need(0) ? g[0].sub(g[0].mul(p).sum(dim, true)) : at::Tensor(),
                                            c.need(1) ? g[0].mul(p).mul(grad.sum(dim, true)).neg() : at::Tensor()};
                                      }},
                                     log_softmax_backward_composite)));
  m.impl("log_softmax", myops::autograd_kernel(myops::softmax_autograd("log_softmax_backward", true)));
}
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("log_softmax", myops::batch_kernel(myops::softmax_batch_rule("log_softmax", 1)));
  m.impl("log_softmax_backward", myops::batch_kernel(myops::softmax_batch_rule("log_softmax_backward", 2)));
}
