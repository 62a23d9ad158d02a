// myops::sum(x, dim=None, keepdim=False) = x.sum(dim, keepdim) for floating x (dim None or [] reduces all dims).
// The kernels see x as [M, K] (kept dims, reduced dims) with one stride each; layouts that do not collapse to that
// are copied once. Backward (below) is an expand of grad, as for torch.sum.
#include "autograd.h"
#include "batching.h"
#include "common.h"

#include <optional>

namespace {
using SumCpuFn = int (*)(void* out, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype);
using SumCudaFn = int (*)(void* out, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype,
                          void* workspace, void* stream);
using SumWsFn = int64_t (*)(const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype);
using SumPartFn = int (*)(double* part, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype);
myops::Kernel<SumCpuFn> k_cpu("myops_sum_cpu");
myops::Kernel<SumPartFn> k_part("myops_sum_part_cpu");
myops::Kernel<SumCudaFn> k_cuda("myops_sum_cuda");
myops::Kernel<SumWsFn> k_ws("myops_sum_workspace_cuda");

// Dims `ds` of x (outermost first) as one (size, stride), if their elements form a single strided sequence.
std::optional<std::pair<int64_t, int64_t>> collapse(const at::Tensor& x, const std::vector<int64_t>& ds) {
  int64_t size = 1, stride = 0;
  for (auto it = ds.rbegin(); it != ds.rend(); ++it) {
    const int64_t n = x.size(*it), s = x.stride(*it);
    if (n == 1) continue;
    if (size == 1) {
      size = n;
      stride = s;
    } else if (s == stride * size) {
      size *= n;
    } else {
      return std::nullopt;
    }
  }
  return std::make_pair(size, stride);
}

// Which of x's nd dims `dim` reduces (None or [] all of them), checked.
std::vector<bool> reduced_dims(int64_t nd, at::OptionalIntArrayRef dim) {
  std::vector<bool> reduced(nd, !dim.has_value() || dim->empty());
  if (dim.has_value()) {
    const int64_t lim = std::max<int64_t>(nd, 1);
    for (int64_t d : *dim) {
      TORCH_CHECK(d >= -lim && d < lim, "myops.sum: dim ", myops::str(d), " is out of range for x with ", myops::str(nd),
                  " dimensions");
      if (nd == 0) continue;
      const int64_t w = d < 0 ? d + nd : d;
      TORCH_CHECK(!reduced[w] || dim->empty(), "myops.sum: dim ", myops::str(w), " appears more than once in dim");
      reduced[w] = true;
    }
  }
  return reduced;
}

at::Tensor sum(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  const int dtype = myops::dtype_code(x, "sum", "x");
  const int64_t nd = x.dim();
  const std::vector<bool> reduced = reduced_dims(nd, dim);
  std::vector<int64_t> kept_dims, red_dims, out_shape;
  for (int64_t d = 0; d < nd; ++d) {
    (reduced[d] ? red_dims : kept_dims).push_back(d);
    if (!reduced[d]) out_shape.push_back(x.size(d));
    else if (keepdim) out_shape.push_back(1);
  }
  at::Tensor out = at::empty(out_shape, x.options());
  if (out.numel() == 0) return out;

  auto mk = collapse(x, kept_dims), kk = collapse(x, red_dims);
  at::Tensor src = x;
  int64_t M, K, sM, sK;
  if (mk && kk) {
    std::tie(M, sM) = *mk;
    std::tie(K, sK) = *kk;
  } else {  // e.g. reducing dims 0 and 2 of a contiguous 3-D tensor: one copy to [kept..., reduced...]
    std::vector<int64_t> perm(kept_dims);
    perm.insert(perm.end(), red_dims.begin(), red_dims.end());
    src = x.permute(perm).contiguous();
    M = out.numel();
    K = M == 0 ? 0 : x.numel() / M;
    sM = K;
    sK = 1;
  }

  if (x.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(x.device());
    void* stream = myops::current_stream(x);
    const int64_t ws_bytes = k_ws.get()(src.data_ptr(), M, K, sM, sK, dtype);
    at::Tensor ws;
    if (ws_bytes > 0) ws = at::empty({ws_bytes}, x.options().dtype(at::kByte));
    const int rc = k_cuda.get()(out.data_ptr(), src.data_ptr(), M, K, sM, sK, dtype,
                                ws_bytes > 0 ? ws.data_ptr() : nullptr, stream);
    myops::check_status(rc, "sum", "CUDA");
#else
    TORCH_CHECK(false, "myops.sum: this build of myops has no CUDA support");
#endif
    return out;
  }
  const int64_t es = x.element_size();
  std::atomic<int> status{MYOPS_OK};
  // Few outputs of a long K (a full reduction, M = 1): K splits into parts of kPartK that threads sum into fp64
  // partials, added here in order. The parts depend on the shape alone, so the bits do not depend on the thread count.
  // 2-core EPYC VM, torch 2.14.1, sum() of [4096, 4096], us (eager): fp32 1561 -> 1014-1135 (847-988), bf16 886 ->
  // 444-475 (422-446): the whole reduction had run on one thread (session 34).
  constexpr int64_t kPartK = 1 << 14, kPartMaxM = 64;
  if (M < kPartMaxM && K > kPartK) {
    SumPartFn part_fn = k_part.get();
    const int64_t parts = (K + kPartK - 1) / kPartK;
    std::vector<double> part(parts * M);
    at::parallel_for(0, parts, 1, [&](int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) {
        const int rc = part_fn(part.data() + p * M, static_cast<const char*>(src.data_ptr()) + p * kPartK * sK * es, M,
                               std::min(kPartK, K - p * kPartK), sM, sK, dtype);
        if (rc != MYOPS_OK) status.store(rc);
      }
    });
    myops::check_status(status.load(), "sum", "CPU");
    at::Tensor tot = at::empty({M}, x.options().dtype(at::kDouble));
    double* t = tot.data_ptr<double>();
    for (int64_t m = 0; m < M; ++m) {
      double a = 0.0;
      for (int64_t p = 0; p < parts; ++p) a += part[p * M + m];
      t[m] = a;
    }
    // to fp32 first, then x's dtype: the kernels' own rounding of their fp64 sums
    out.view({M}).copy_(dtype == MYOPS_F64 ? tot : tot.to(at::kFloat));
    return out;
  }
  SumCpuFn fn = k_cpu.get();
  myops::parallel_rows(M, K, [&](int64_t b, int64_t e) {
    const int rc = fn(static_cast<char*>(out.data_ptr()) + b * es,
                      static_cast<const char*>(src.data_ptr()) + b * sM * es, e - b, K, sM, sK, dtype);
    if (rc != MYOPS_OK) status.store(rc);
  });
  myops::check_status(status.load(), "sum", "CPU");
  return out;
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(myops, m) { m.def("sum(Tensor x, int[]? dim=None, bool keepdim=False) -> Tensor"); }
TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("sum", &sum); }
#ifdef MYOPS_WITH_CUDA
TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("sum", &sum); }
#endif
// d sum / d x: grad with the reduced dims put back (keepdim false) and expanded to x's shape. Nothing saved.
namespace {
// Forward-mode AD (autograd.h): ATen's sum over the same dims (fp32 for 16-bit types, as the kernels).
myops::Tensors sum_composite(const myops::Args& a) {
  const at::Tensor x = myops::acc(a[0].toTensor());
  const auto dims = a[1].toOptional<std::vector<int64_t>>();
  const std::vector<bool> red =
      reduced_dims(x.dim(), dims ? at::OptionalIntArrayRef(*dims) : at::OptionalIntArrayRef());
  std::vector<int64_t> d;
  for (size_t i = 0; i < red.size(); ++i)
    if (red[i]) d.push_back(static_cast<int64_t>(i));
  return {d.empty() ? x.clone() : x.sum(d, a[2].toBool())};  // (a 0-d x: itself)
}
}  // namespace
TORCH_LIBRARY_IMPL(myops, Autograd, m) {
  myops::AutogradSpec spec{nullptr, [](const myops::AutogradCtx& c, const myops::Tensors& g) {
                             const std::vector<c10::SymInt>& shape = c.sizes[0];
                             at::Tensor grad = g[0];
                             if (!c.args[2].toBool()) {
                               const auto dims = c.args[1].toOptional<std::vector<int64_t>>();
                               const std::vector<bool> red =
                                   reduced_dims(static_cast<int64_t>(shape.size()),
                                                dims ? at::OptionalIntArrayRef(*dims) : at::OptionalIntArrayRef());
                               for (size_t d = 0; d < red.size(); ++d)
                                 if (red[d]) grad = grad.unsqueeze(static_cast<int64_t>(d));
                             }
                             return myops::Tensors{grad.expand_symint(shape)};
                           }};
  spec.keep_sizes = true;
  m.impl("sum", myops::autograd_kernel(myops::with_composite(std::move(spec), sum_composite)));
}
// vmap (batching.h): the batch's samples in one call, their dims one further on (checked as the op checks them, on
// a sample's dims); a 0-d sample per sample.
TORCH_LIBRARY_IMPL(myops, FuncTorchBatched, m) {
  m.impl("sum", myops::batch_kernel([](const myops::Batch& b) -> std::optional<myops::Tensors> {
           const int64_t n = b.args[0].toTensor().dim() - 1;  // a sample's dims
           if (n == 0) return std::nullopt;
           const auto dims = b.args[1].toOptional<std::vector<int64_t>>();
           const std::vector<bool> red =
               reduced_dims(n, dims ? at::OptionalIntArrayRef(*dims) : at::OptionalIntArrayRef());
           std::vector<int64_t> moved;
           for (int64_t d = 0; d < n; ++d)
             if (red[d]) moved.push_back(d + 1);
           return b.call_tensors({b.front(0), moved, b.args[2]});
         }));
}
