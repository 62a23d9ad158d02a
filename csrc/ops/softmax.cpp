// myops::softmax(x, dim=-1) = x.softmax(dim) for floating x, computed in fp32 (fp64 for fp64).
// myops::softmax_backward(grad, y, dim) = the gradient for x, from the forward output y. Shared code: softmax.h.
#include "softmax.h"

namespace {
myops::SoftmaxKernels kernels("softmax");

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
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  m.impl("softmax_backward", myops::backward_op_kernel());  // (a second derivative raises)
  m.impl("softmax", myops::autograd_kernel(myops::softmax_autograd("softmax_backward")));
}
