// myops::add(a, b) = a + b, same shape. Backward (below): da = db = grad.
#include "autograd.h"
#include "batching.h"
#include "common.h"

namespace {
myops::EwKernel k_add("add");

at::Tensor add(const at::Tensor& a, const at::Tensor& b) {
  myops::dtype_code(a, "add", "a");
  myops::check_like(a, b, "add", "a", "b");
  at::Tensor out = at::empty_like(a);  // (laid out as a: run_elementwise)
  myops::run_elementwise(k_add, {out}, {a, b});
  return out;
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) { m.def("add(Tensor a, Tensor b) -> Tensor"); }
TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("add", &add); }
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("add", &add); }
#endif
// d(a + b) = (grad, grad): nothing saved.
// Forward-mode AD (autograd.h): ATen's add.
myops::Tensors add_composite(const myops::Args& a) { return {a[0].toTensor().add(a[1].toTensor())}; }
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  m.impl("add",
         myops::autograd_kernel(myops::with_composite(
             {nullptr, [](const myops::AutogradCtx&, const myops::Tensors& g) { return myops::Tensors{g[0], g[0]}; }},
             add_composite)));
}
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) { m.impl("add", myops::batch_kernel(myops::fold({0, 1}))); }
