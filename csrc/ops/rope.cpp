// myops::rope(x, cos, sin, heads_first=False, interleaved=False) = x * cos + rotate_half(x) * sin, the Hugging Face
// Llama form with cos/sin unsqueezed over the heads dim: x [..., S, H, D] (or [..., H, S, D] with heads_first),
// cos/sin [S, D] or [..., S, D] with leading dims that broadcast to x's batch dims. rotate_half pairs d with
// d + D/2 (NeoX/Llama) or, interleaved, 2i with 2i + 1 (GPT-J).
// myops::rope_backward(grad, cos, sin, heads_first, interleaved) = the gradient for x (the transposed rotation).
// Gradients for cos/sin, when asked for, are ATen ops in its autograd (below).
//
// The kernels see x as [B, S, H, D] with one stride per dim (D stride 1); heads_first only swaps the S and H
// strides. x's batch dims must collapse into one (size, stride) and its last dim be contiguous, else x is copied
// once; cos/sin expand to [batch..., S, D] (stride 0 where broadcast) and are copied (to x's batch shape) only if
// their batch dims do not collapse. The output is a new contiguous tensor of x's shape.
#include "autograd.h"
#include "batching.h"
#include "common.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/stack.h>

#include <optional>

namespace {
// out, x, cos, sin, shape [B, S, H, D], x / out strides [B, S, H], cos / sin strides [B, S, D], interleaved,
// backward, then (CPU) the positions [p_begin, p_end) of B * S to run, dtype, (CUDA) stream.
using RopeCpuFn = int (*)(void*, const void*, const void*, const void*, const int64_t*, const int64_t*,
                          const int64_t*, const int64_t*, const int64_t*, int, int, int64_t, int64_t, int);
using RopeCudaFn = int (*)(void*, const void*, const void*, const void*, const int64_t*, const int64_t*,
                           const int64_t*, const int64_t*, const int64_t*, int, int, int, void*);
myops::Kernel<RopeCpuFn> k_cpu("myops_rope_cpu");
myops::Kernel<RopeCudaFn> k_cuda("myops_rope_cuda");

// Dims [0, n) of t as one (size, stride), if their elements form a single strided sequence (size-1 dims drop out;
// no dims: (1, 0)).
std::optional<std::pair<int64_t, int64_t>> collapse_leading(const at::Tensor& t, int64_t n) {
  int64_t size = 1, stride = 0;
  for (int64_t d = n - 1; d >= 0; --d) {
    const int64_t sz = t.size(d), st = t.stride(d);
    if (sz == 1) continue;
    if (size == 1) {
      size = sz;
      stride = st;
    } else if (st == stride * size) {
      size *= sz;
    } else {
      return std::nullopt;
    }
  }
  return std::make_pair(size, stride);
}

// Stride of dim d for the kernel: 0 for a size-1 dim (its stride is arbitrary and must not spoil the alignment
// test of the vectorized CUDA path).
int64_t stride_of(const at::Tensor& t, int64_t d) { return t.size(d) == 1 ? 0 : t.stride(d); }

// cos/sin: same device and dtype as x, shape [S, D] or [..., S, D] with leading dims broadcastable to x's batch dims.
void check_table(const at::Tensor& x, const at::Tensor& t, const char* op, const char* xname, const char* name,
                 int64_t S, int64_t D) {
  myops::check_same_device(x, t, op, xname, name);
  myops::check_same_dtype(x, t, op, xname, name);
  const int64_t nb = x.dim() - 3, lead = t.dim() - 2;
  bool ok = t.dim() >= 2 && lead <= nb && t.size(-2) == S && t.size(-1) == D;
  for (int64_t i = 0; ok && i < lead; ++i) {
    const int64_t n = t.size(i), m = x.size(nb - lead + i);
    ok = n == 1 || n == m;
  }
  TORCH_CHECK(ok, "myops.", op, ": ", name, " must have shape [S, D] = [", myops::str(S), ", ", myops::str(D),
              "], or [..., S, D] with leading dims that broadcast to ", xname, "'s batch dims ",
              myops::str(x.sizes().slice(0, nb)), ", got ", myops::str(t.sizes()));
}

// A table expanded to [batch..., S, D] and its kernel strides {B, S, D}.
struct Table {
  at::Tensor t;
  int64_t strides[3];
};

Table table_view(const at::Tensor& t, at::IntArrayRef batch, int64_t S, int64_t D) {
  std::vector<int64_t> shape(batch.begin(), batch.end());
  shape.push_back(S);
  shape.push_back(D);
  const int64_t nb = (int64_t)batch.size();
  Table r{t.expand(shape), {0, 0, 0}};
  auto b = collapse_leading(r.t, nb);
  if (!b) {  // e.g. cos [B1, 1, S, D] against batch [B1, B2]: one copy of the table (1/H of x's size)
    r.t = r.t.contiguous();
    b = collapse_leading(r.t, nb);
    TORCH_INTERNAL_ASSERT(b, "myops.rope: table layout did not collapse after a contiguous copy");
  }
  r.strides[0] = b->second;
  r.strides[1] = stride_of(r.t, nb);
  r.strides[2] = stride_of(r.t, nb + 1);
  return r;
}

at::Tensor run(const char* op, const char* xname, const at::Tensor& x_in, const at::Tensor& cos,
               const at::Tensor& sin, bool heads_first, bool interleaved, bool backward) {
  const int dtype = myops::dtype_code(x_in, op, xname);
  TORCH_CHECK(x_in.dim() >= 3, "myops.", op, ": ", xname, " must have at least 3 dimensions ([..., S, H, D], or ",
              "[..., H, S, D] with heads_first), got shape ", myops::str(x_in.sizes()));
  const int64_t nd = x_in.dim(), nb = nd - 3;
  const int64_t s_dim = heads_first ? nd - 2 : nd - 3, h_dim = heads_first ? nd - 3 : nd - 2;
  const int64_t S = x_in.size(s_dim), H = x_in.size(h_dim), D = x_in.size(-1);
  TORCH_CHECK(D % 2 == 0, "myops.", op, ": ", xname, "'s last dimension (D) must be even, got ", myops::str(D));
  check_table(x_in, cos, op, xname, "cos", S, D);
  check_table(x_in, sin, op, xname, "sin", S, D);

  at::Tensor out = at::empty(x_in.sizes(), x_in.options());
  if (out.numel() == 0) return out;

  at::Tensor x = x_in;
  if (x.stride(-1) != 1) x = x.contiguous();  // the kernels read rows of D contiguous elements
  auto xb = collapse_leading(x, nb);
  if (!xb) {  // batch dims that do not form one strided sequence (e.g. two transposed batch dims): one copy
    x = x.contiguous();
    xb = collapse_leading(x, nb);
    TORCH_INTERNAL_ASSERT(xb, "myops.", op, ": x layout did not collapse after a contiguous copy");
  }
  const auto ob = collapse_leading(out, nb);
  TORCH_INTERNAL_ASSERT(ob && ob->first == xb->first);
  const at::IntArrayRef batch = x.sizes().slice(0, nb);
  const Table c = table_view(cos, batch, S, D), s = table_view(sin, batch, S, D);

  const int64_t shape[4] = {xb->first, S, H, D};
  const int64_t xs[3] = {xb->second, stride_of(x, s_dim), stride_of(x, h_dim)};
  const int64_t os[3] = {ob->second, stride_of(out, s_dim), stride_of(out, h_dim)};

  if (x.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(x.device());
    void* stream = myops::current_stream(x);
    const int rc = k_cuda.get()(out.data_ptr(), x.data_ptr(), c.t.data_ptr(), s.t.data_ptr(), shape, xs, os,
                                c.strides, s.strides, interleaved, backward, dtype, stream);
    myops::check_status(rc, op, "CUDA");
#else
    TORCH_CHECK(false, "myops.", op, ": this build of myops has no CUDA support");
#endif
    return out;
  }
  TORCH_INTERNAL_ASSERT(x.is_cpu());
  RopeCpuFn fn = k_cpu.get();
  std::atomic<int> status{MYOPS_OK};
  myops::parallel_rows(shape[0] * S, H * D, [&](int64_t b, int64_t e) {
    const int rc = fn(out.data_ptr(), x.data_ptr(), c.t.data_ptr(), s.t.data_ptr(), shape, xs, os, c.strides,
                      s.strides, interleaved, backward, b, e, dtype);
    if (rc != MYOPS_OK) status.store(rc);
  });
  myops::check_status(status.load(), op, "CPU");
  return out;
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool heads_first,
                bool interleaved) {
  return run("rope", "x", x, cos, sin, heads_first, interleaved, false);
}

at::Tensor rope_backward(const at::Tensor& grad, const at::Tensor& cos, const at::Tensor& sin, bool heads_first,
                         bool interleaved) {
  return run("rope_backward", "grad", grad, cos, sin, heads_first, interleaved, true);
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) {
  m.def("rope(Tensor x, Tensor cos, Tensor sin, bool heads_first=False, bool interleaved=False) -> Tensor");
  m.def("rope_backward(Tensor grad, Tensor cos, Tensor sin, bool heads_first=False, bool interleaved=False) -> Tensor");
}
TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("rope", &rope);
  m.impl("rope_backward", &rope_backward);
}
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("rope", &rope);
  m.impl("rope_backward", &rope_backward);
}
#endif
// dx = rope_backward(grad, cos, sin, heads_first, interleaved); the tables' gradients (when cos or sin want one:
// usually they are buffers that need none, and x is saved only for them) in ATen ops, products and sums in fp32 for
// 16-bit types: out = x * cos + rotate(x) * sin, so dcos = sum(g * x) and dsin = sum(g * rotate(x)), summed over the
// heads dim and the dims a table is broadcast over, as eager autograd's sum_to_size does for x * cos.unsqueeze(head).
namespace {
const myops::OpRef rope_op("rope"), rope_backward_op("rope_backward");
// rotate_half(x) (NeoX / Llama), or interleaved the GPT-J rotate_every_two.
at::Tensor rotate(const at::Tensor& x, bool interleaved) {
  if (interleaved)
    return at::stack({x.slice(-1, 1, std::nullopt, 2).neg(), x.slice(-1, 0, std::nullopt, 2)}, -1).flatten(-2);
  const c10::SymInt half = x.sym_size(-1) / 2;
  return at::cat({x.slice_symint(-1, half).neg(), x.slice_symint(-1, 0, half)}, -1);
}
at::Tensor table_grad(const at::Tensor& prod, const at::Tensor& like, bool heads_first) {
  const int64_t head = heads_first ? -3 : -2;
  return prod.sum_to_size_symint(like.unsqueeze(head).sym_sizes()).squeeze(head).to(like.scalar_type());
}
// The formula of rope (op = rope_backward, v = x, rotate_g false) or of rope_backward (op = rope, v = its grad,
// rotate_g true) for the incoming gradient g: d[0] = op(g), d[1] = sum(g v) for cos, d[2] = sum(g rotate(v)) (rope)
// or sum(rotate(g) v) (rope_backward) for sin, the products in fp32 for 16-bit types.
myops::Tensors rope_formula(const myops::AutogradCtx& c, const at::Tensor& g, const myops::OpRef& op,
                            const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& v, bool rotate_g) {
  const bool heads_first = c.args[3].toBool(), interleaved = c.args[4].toBool();
  myops::Tensors d(3);
  if (c.need(0)) d[0] = op.call1({g, cos, sin, heads_first, interleaved});
  if (c.need(1) || c.need(2)) {
    const at::ScalarType t = g.scalar_type();
    const at::ScalarType acc = t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
    const at::Tensor ga = g.to(acc), va = v.to(acc);
    if (c.need(1)) d[1] = table_grad(ga.mul(va), cos, heads_first);
    if (c.need(2))
      d[2] = table_grad(rotate_g ? rotate(ga, interleaved).mul(va) : ga.mul(rotate(va, interleaved)), sin, heads_first);
  }
  return d;
}
// Forward-mode AD (autograd.h), in ATen (fp32 for 16-bit types, as the kernels) with the tables unsqueezed over the
// heads dim: rope = x cos + rotate(x) sin; rope_backward = grad cos - rotate(grad sin) (rotate's transpose is
// -rotate).
at::Tensor rope_table(const myops::Args& a, int i) {
  return myops::acc(a[i].toTensor()).unsqueeze(a[3].toBool() ? -3 : -2);
}
myops::Tensors rope_backward_composite(const myops::Args& a) {
  const at::Tensor g = myops::acc(a[0].toTensor());
  return {g.mul(rope_table(a, 1)).sub(rotate(g.mul(rope_table(a, 2)), a[4].toBool()))};
}
myops::Tensors rope_composite(const myops::Args& a) {
  const at::Tensor x = myops::acc(a[0].toTensor());
  return {x.mul(rope_table(a, 1)).add(rotate(x, a[4].toBool()).mul(rope_table(a, 2)))};
}
}  // namespace
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  // rope_backward(grad) = grad cos - rotate(grad sin) (rotate^T = -rotate), whose adjoint in grad is rope itself:
  // d/dgrad = rope(g) for its incoming gradient g; d/dcos = sum(g grad), d/dsin = sum(rotate(g) grad), summed as
  // rope's own table gradients. A second derivative of rope (linear in x) comes back through these.
  m.impl("rope_backward", myops::autograd_kernel(myops::with_composite(
                              {myops::saving({0, 1, 2}, {}),
                               [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                                 return rope_formula(c, g[0], rope_op, c.saved[1], c.saved[2], c.saved[0], true);
                               }},
                              rope_backward_composite)));
  m.impl("rope", myops::autograd_kernel(myops::with_composite(
                     {[](const myops::Args& a, const myops::Tensors&, const std::vector<bool>& needs) {
                        const bool tables = needs[1] || needs[2];
                        return myops::Tensors{a[1].toTensor(), a[2].toTensor(),
                                              tables ? a[0].toTensor() : at::Tensor()};
                      },
                      [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                        return rope_formula(c, g[0], rope_backward_op, c.saved[0], c.saved[1], c.saved[2], false);
                      }},
                     rope_composite)));
}
// vmap (batching.h) of rope and rope_backward (x or grad, cos, sin, ...): the batch in one call as x's first batch
// dim. Batched tables (per-sample positions) fold too: their batch dim first, then size-1 dims up to x's count of
// batch dims, so that it lines up with x's (the kernel broadcasts tables over x's batch dims); a sample's x of under
// 3 dims or a table of more batch dims than x has: per sample (the op raises).
namespace {
std::optional<myops::Tensors> rope_batch(const myops::Batch& b) {
  myops::Args a = b.args;
  const at::Tensor x = b.front(0);  // [B, *x's batch dims, S, H, D]
  const int64_t xb = x.dim() - 4;
  if (xb < 0) return std::nullopt;
  a[0] = x;
  for (int i : {1, 2}) {
    if (!b.batched(i)) continue;  // (an unbatched table broadcasts over the batch as over x's batch dims)
    at::Tensor t = b.front(i);    // [B, *its batch dims, S, D]
    const int64_t tb = t.dim() - 3;
    if (tb < 0 || tb > xb) return std::nullopt;
    for (int64_t k = tb; k < xb; ++k) t = t.unsqueeze(1);
    a[i] = t;
  }
  return b.call_tensors(std::move(a));
}
}  // namespace
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("rope", myops::batch_kernel(rope_batch));
  m.impl("rope_backward", myops::batch_kernel(rope_batch));
}
