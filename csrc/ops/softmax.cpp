// myops::softmax(x, dim=-1) = x.softmax(dim) for floating x, computed in fp32 (fp64 for fp64).
// myops::softmax_backward(grad, y, dim) = the gradient for x, from the forward output y. Shared code: softmax.h.
#include "softmax.h"

namespace {
myops::SoftmaxKernels kernels("softmax");
const myops::OpRef softmax_backward_op("softmax_backward");

at::Tensor fwd(const at::Tensor& x, int64_t dim) { return myops::softmax_forward(kernels, "softmax", x, dim); }
at::Tensor bwd(const at::Tensor& grad, const at::Tensor& y, int64_t dim) {
  return myops::softmax_backward(kernels, "softmax_backward", grad, y, dim);
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("softmax(Tensor x, int dim=-1) -> Tensor");
  m.def("softmax_backward(Tensor grad, Tensor y, int dim) -> Tensor");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("softmax", &fwd);
  m.impl("softmax_backward", &bwd);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("softmax", &fwd);
  m.impl("softmax_backward", &bwd);
}
#endif
namespace {
// Forward-mode AD (autograd.h): softmax_backward as y (grad - sum(grad y)) in ATen (fp32 for 16-bit types).
myops::Tensors softmax_backward_composite(const myops::Args& a) {
  const at::Tensor grad = myops::acc(a[0].toTensor()), y = myops::acc(a[1].toTensor());
  const int64_t dim = a[2].toInt();
  return {y.mul(grad.sub(grad.mul(y).sum(dim, true)))};
}
}  // namespace
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  // softmax_backward(grad, y) = y (grad - s), s = sum(grad y) over dim: its Jacobian in grad is symmetric, so
  // d/dgrad = softmax_backward(g, y); d/dy = g (grad - s) - grad sum(g y) (g: the incoming gradient).
  m.impl("softmax_backward",
         myops::autograd_kernel(myops::with_composite(
             {myops::saving({0, 1}, {}),
              [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                const at::Tensor &grad = c.saved[0], &y = c.saved[1];
                const int64_t dim = c.args[2].toInt();
                at::Tensor dgrad, dy;
                if (c.need(0)) dgrad = softmax_backward_op.call1({g[0], y, dim});
                if (c.need(1))
                  dy = g[0].mul(grad.sub(grad.mul(y).sum(dim, true))).sub(grad.mul(g[0].mul(y).sum(dim, true)));
                return myops::Tensors{dgrad, dy};
              }},
             softmax_backward_composite)));
  m.impl("softmax", myops::autograd_kernel(myops::softmax_autograd("softmax_backward", false)));
}
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("softmax", myops::batch_kernel(myops::softmax_batch_rule("softmax", 1)));
  m.impl("softmax_backward", myops::batch_kernel(myops::softmax_batch_rule("softmax_backward", 2)));
}
