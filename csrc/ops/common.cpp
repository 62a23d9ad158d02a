// common.cpp: the registration layer's runtime: loading and swapping the kernel library, argument checks, and the
// elementwise driver shared by every elementwise op.
#include "common.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <mutex>

#ifdef MYOPS_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace myops {
namespace {
std::mutex g_mu;
std::atomic<void*> g_handle{nullptr};
std::atomic<uint64_t> g_generation{1};
std::string g_path;  // guarded by g_mu
}  // namespace

void* resolve_kernel(const char* symbol) {
  void* h = g_handle.load(std::memory_order_acquire);
  return h ? dlsym(h, symbol) : nullptr;
}

uint64_t kernel_generation() { return g_generation.load(std::memory_order_acquire); }

void kernel_missing(const std::string& symbol) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    path = g_path;
  }
  TORCH_CHECK(!path.empty(), "myops: no kernel library is loaded (import ops, which builds and loads it)");
  const bool cuda = symbol.size() > 5 && symbol.compare(symbol.size() - 5, 5, "_cuda") == 0;
  TORCH_CHECK(!cuda, "myops: the kernel library ", path, " has no CUDA kernels (", symbol,
              "): it was built without a CUDA toolkit; install one (nvcc) and rebuild "
              "(python -m torch_ops_jit clean && python -m torch_ops_jit build)");
  TORCH_CHECK(false, "myops: kernel ", symbol, " is missing from ", path);
}

// ---- checks ------------------------------------------------------------------------------------------------
std::string str(int64_t v) { return std::to_string(v); }

std::string str(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int dtype_code(const at::Tensor& t, const char* op, const char* arg) {
  switch (t.scalar_type()) {
    case at::kFloat: return MYOPS_F32;
    case at::kHalf: return MYOPS_F16;
    case at::kBFloat16: return MYOPS_BF16;
    case at::kDouble: return MYOPS_F64;
    default:
      TORCH_CHECK(false, "myops.", op, ": ", arg, " must be a floating-point tensor (float32, float16, bfloat16 or ",
                  "float64), got ", t.scalar_type());
  }
}

void check_same_device(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name,
                       const char* arg) {
  TORCH_CHECK(t.device() == ref.device(), "myops.", op, ": ", arg, " must be on the same device as ", ref_name, " (",
              ref.device(), "), got ", t.device());
}

void check_same_dtype(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name,
                      const char* arg) {
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "myops.", op, ": ", arg, " must have the same dtype as ",
              ref_name, " (", ref.scalar_type(), "), got ", t.scalar_type());
}

void check_same_shape(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name,
                      const char* arg) {
  TORCH_CHECK(t.sizes() == ref.sizes(), "myops.", op, ": ", arg, " must have the same shape as ", ref_name, " ",
              str(ref.sizes()), ", got ", str(t.sizes()));
}

void check_like(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name, const char* arg) {
  check_same_device(ref, t, op, ref_name, arg);
  check_same_dtype(ref, t, op, ref_name, arg);
  check_same_shape(ref, t, op, ref_name, arg);
}

void check_last_dim_vector(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name,
                           const char* arg) {
  TORCH_CHECK(ref.dim() >= 1, "myops.", op, ": ", ref_name, " must have at least 1 dimension, got a 0-d tensor");
  TORCH_CHECK(t.dim() == 1 && t.size(0) == ref.size(-1), "myops.", op, ": ", arg, " must have shape [",
              str(ref.size(-1)), "] (the last dimension of ", ref_name, "), got ", str(t.sizes()));
  check_same_device(ref, t, op, ref_name, arg);
  check_same_dtype(ref, t, op, ref_name, arg);
}

#ifdef MYOPS_WITH_CUDA
std::vector<at::Tensor> colsum_cuda(const at::Tensor& ws, at::ScalarType dtype, const char* op) {
  using Fn = int (*)(void*, void*, const void*, int64_t, int64_t, int, void*);
  static Kernel<Fn> k("myops_colsum_cuda");
  TORCH_INTERNAL_ASSERT(ws.dim() == 3 && ws.size(0) >= 1 && ws.size(0) <= 2 && ws.is_contiguous());
  std::vector<at::Tensor> outs;
  for (int64_t i = 0; i < ws.size(0); ++i) outs.push_back(at::empty({ws.size(2)}, ws.options().dtype(dtype)));
  const int rc = k.get()(outs[0].data_ptr(), outs.size() > 1 ? outs[1].data_ptr() : nullptr, ws.data_ptr(),
                         ws.size(1), ws.size(2), dtype_code(outs[0], op, "weight"), current_stream(ws));
  check_status(rc, op, "CUDA");
  return outs;
}
#endif

void check_status(int rc, const char* op, const char* device) {
  if (rc == MYOPS_OK) return;
  TORCH_CHECK(rc != MYOPS_EDTYPE, "myops.", op, ": dtype not supported by the ", device, " kernel");
  TORCH_CHECK(rc != MYOPS_EARG, "myops.", op, ": problem size outside what the ", device, " kernel supports");
#ifdef MYOPS_WITH_CUDA
  TORCH_CHECK(false, "myops.", op, ": CUDA kernel failed: ", cudaGetErrorString(static_cast<cudaError_t>(rc)));
#else
  TORCH_CHECK(false, "myops.", op, ": ", device, " kernel failed with code ", str(rc));
#endif
}

// ---- row-wise ops -----------------------------------------------------------------------------------------------
namespace {
bool collapse_leading(const at::Tensor& t, int64_t& M, int64_t& stride) {
  M = 1;
  stride = t.size(-1);  // any value works for a single row; keep it aligned like a contiguous tensor's
  bool first = true;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    const int64_t n = t.size(d), s = t.stride(d);
    if (n == 1) continue;
    if (first) {
      M = n;
      stride = s;
      first = false;
    } else if (s == stride * M) {
      M *= n;
    } else {
      return false;
    }
  }
  return true;
}
}  // namespace

namespace {
// A CPU tensor whose last dim is strided (not 0: a broadcast, which the kernels convert once): the CPU kernels would
// gather it element by element, a cache line an element for a transposed view. Copied to contiguous memory once
// instead (ATen's copy walks it in blocks). 2 threads, bf16: softmax over dim 0 of [4096, 1024] 5.9 -> 2.4 ms (eager
// 1.3); layer_norm of a transposed [1024, 4096] 5.7 -> 2.6 (eager 2.3).
bool cpu_gathers(const at::Tensor& t) {
  return t.is_cpu() && t.dim() >= 1 && t.size(-1) > 1 && t.stride(-1) != 1 && t.stride(-1) != 0;
}
// A per-feature vector broadcast over rows: strides 0, ..., 0, s.
bool row_broadcast(const at::Tensor& t) {
  bool b = t.dim() >= 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) b = b && t.stride(d) == 0;
  return b;
}
// t as a contiguous copy, or, for a vector broadcast over rows (as bias[::2].expand(M, N)), its one row copied and
// broadcast again: N elements, not M x N.
at::Tensor unit_columns(const at::Tensor& t) {
  if (t.dim() < 2 || !row_broadcast(t)) return t.contiguous();
  at::Tensor row = t;
  while (row.dim() > 1) row = row.select(0, 0);
  return row.contiguous().expand(t.sizes());
}
}  // namespace

RowsView rows_view(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(t.dim() >= 1);
  RowsView v{t, 0, t.size(-1), {}};
  int64_t rs = v.N;
  if (t.numel() == 0) {  // nothing to read: M counts the (possibly empty) rows
    v.M = 1;
    for (int64_t d = 0; d + 1 < t.dim(); ++d) v.M *= t.size(d);
  } else if (cpu_gathers(t) || !collapse_leading(v.t, v.M, rs)) {
    v.t = unit_columns(t);
    TORCH_INTERNAL_ASSERT(collapse_leading(v.t, v.M, rs));
  }
  v.op = {v.t.data_ptr(), rs, v.N > 1 ? v.t.stride(-1) : 1};
  return v;
}

std::vector<int64_t> memory_order(at::IntArrayRef strides) {
  std::vector<int64_t> perm(strides.size());
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return perm;
}

at::Tensor as_layout(const at::Tensor& t, const at::Tensor& ref, const std::vector<int64_t>& perm) {
  if (t.strides() == ref.strides()) return t;
  std::vector<int64_t> shape(perm.size()), inv(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) {
    shape[d] = ref.size(perm[d]);
    inv[perm[d]] = static_cast<int64_t>(d);
  }
  return at::empty(shape, t.options()).copy_(t.permute(perm)).permute(inv);
}

myops_out_operand out_rows(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(t.is_contiguous() && t.dim() >= 1);
  return {t.data_ptr(), t.size(-1), 1};
}

// ---- elementwise driver ---------------------------------------------------------------------------------------
namespace {
// Merges the dims of a shape shared by several operands into as few strided dims as possible (size-1 dims drop
// out; dim d merges into the next inner group when every operand's stride allows it). Returns false when more
// than two dims remain.
bool collapse_2d(at::IntArrayRef shape, const std::vector<at::IntArrayRef>& strides, int64_t& rows, int64_t& cols,
                 std::vector<std::pair<int64_t, int64_t>>& rc_strides) {
  const size_t n = strides.size();
  struct Group { int64_t size; std::vector<int64_t> stride; };
  std::vector<Group> groups;  // innermost first
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (!groups.empty()) {
      Group& g = groups.back();
      bool merge = true;
      for (size_t i = 0; i < n && merge; ++i) merge = strides[i][d] == g.stride[i] * g.size;
      if (merge) {
        g.size *= shape[d];
        continue;
      }
    }
    Group g{shape[d], std::vector<int64_t>(n)};
    for (size_t i = 0; i < n; ++i) g.stride[i] = strides[i][d];
    groups.push_back(std::move(g));
  }
  if (groups.size() > 2) return false;
  rc_strides.assign(n, {0, 1});
  rows = groups.size() == 2 ? groups[1].size : 1;
  cols = groups.empty() ? 1 : groups[0].size;
  for (size_t i = 0; i < n; ++i) {
    if (!groups.empty()) rc_strides[i].second = groups[0].stride[i];
    if (groups.size() == 2) rc_strides[i].first = groups[1].stride[i];
  }
  return true;
}
}  // namespace

namespace {
// The kernels read an input element after writing outputs of the same element (the CPU body of two-output ops
// writes out[0] in place, then reads in[0] again): outputs are fresh tensors, never views of an input.
void assert_fresh_outputs(const std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins, const char* op) {
  for (const auto& o : outs)
    for (const auto& i : ins) TORCH_INTERNAL_ASSERT(!o.is_alias_of(i), "myops.", op, ": an output aliases an input");
}
}  // namespace

void run_elementwise(EwKernel& k, std::initializer_list<at::Tensor> outs_l, std::initializer_list<at::Tensor> ins_l,
                     std::initializer_list<double> scalars_l) {
  std::vector<at::Tensor> outs(outs_l), ins(ins_l);
  const std::vector<double> scalars(scalars_l);
  assert_fresh_outputs(outs, ins, k.name.c_str());
  const at::Tensor& ref = outs.at(0);
  if (ref.numel() == 0) return;
  const at::IntArrayRef shape = ref.sizes();

  // The dims in the first output's memory order, outermost first (stable: a row-major output keeps its order). The
  // ops allocate their outputs as their first operand (empty_like), so a transposed or permuted input and its output
  // collapse to unit-stride columns together instead of one of them striding.
  const std::vector<int64_t> perm = memory_order(ref.strides());
  const at::IntArrayRef ostr = ref.strides();
  const auto permuted = [&](at::IntArrayRef v) {
    std::vector<int64_t> r(v.size());
    for (size_t d = 0; d < perm.size(); ++d) r[d] = v[perm[d]];
    return r;
  };
  const std::vector<int64_t> pshape = permuted(shape);
  int64_t rows = 0, cols = 0;
  std::vector<std::pair<int64_t, int64_t>> st;
  auto try_collapse = [&] {
    std::vector<std::vector<int64_t>> owned;
    for (auto& t : ins) owned.push_back(permuted(t.strides()));
    for (auto& t : outs) owned.push_back(permuted(t.strides()));
    const std::vector<at::IntArrayRef> strides(owned.begin(), owned.end());
    return collapse_2d(pshape, strides, rows, cols, st);
  };
  // t copied into the outputs' layout (dense: empty_like), which collapses to one group in its memory order (inputs
  // already laid out as the outputs are not copied).
  const auto like_output = [&](const at::Tensor& t) { return as_layout(t, ref, perm); };
  if (!try_collapse()) {
    // A layout with three or more irreducible strided dims against the outputs' (e.g. a permuted 3-D view beside a
    // row-major operand): copy such inputs once. A per-feature vector broadcast over rows (strides 0, ..., 0, s)
    // stays as it is where it collapses against the others (its feature dim outermost or innermost in the outputs'
    // order), and is copied too where not.
    for (auto& t : ins)
      if (!row_broadcast(t)) t = like_output(t);
    if (!try_collapse())
      for (auto& t : ins) t = like_output(t);
    TORCH_INTERNAL_ASSERT(try_collapse(), "myops.", k.name, ": layout did not collapse after a copy");
  }
  if (ref.is_cpu() && cols > 1) {
    // CPU inputs whose columns are strided against the outputs (a transposed view beside a row-major one): copied
    // once, as rows_view does (cpu_gathers). 2 threads, bf16, two transposed [1024, 4096] tensors, when outputs were
    // row-major: add 11.3 -> 5.1 ms, swiglu 11.7 -> 5.7 (eager 0.3 and 1.0; outputs laid out as the first operand
    // took that case off this path).
    bool copied = false;
    for (size_t i = 0; i < ins.size(); ++i)
      if (st[i].second != 0 && st[i].second != 1) {
        ins[i] = row_broadcast(ins[i]) && ostr.back() == 1 ? unit_columns(ins[i]) : like_output(ins[i]);
        copied = true;
      }
    if (copied) TORCH_INTERNAL_ASSERT(try_collapse(), "myops.", k.name, ": layout did not collapse after a copy");
  }

  std::vector<myops_operand> in_ops(ins.size());
  std::vector<myops_out_operand> out_ops(outs.size());
  for (size_t i = 0; i < ins.size(); ++i) in_ops[i] = {ins[i].data_ptr(), st[i].first, st[i].second};
  for (size_t j = 0; j < outs.size(); ++j) {
    const auto& s = st[ins.size() + j];
    out_ops[j] = {outs[j].data_ptr(), s.first, s.second};
  }
  const int dtype = dtype_code(ref, k.name.c_str(), "input");

  if (ref.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(ref.device());
    void* stream = current_stream(ref);
    const int rc = k.cuda.get()(out_ops.data(), in_ops.data(), rows, cols, dtype, scalars.data(), stream);
    check_status(rc, k.name.c_str(), "CUDA");
#else
    TORCH_CHECK(false, "myops.", k.name, ": this build of myops has no CUDA support");
#endif
    return;
  }
  TORCH_INTERNAL_ASSERT(ref.is_cpu());
  EwCpuFn fn = k.cpu.get();
  const int64_t es = ref.element_size();
  std::atomic<int> status{MYOPS_OK};
  // Split rows across threads; a single long row (a flattened contiguous tensor) is split along its columns.
  const bool by_cols = rows < at::get_num_threads() && cols >= (int64_t{1} << 16);
  const int64_t n = by_cols ? cols : rows, cost = by_cols ? rows : cols;
  parallel_rows(n, cost, [&](int64_t b, int64_t e) {
    std::vector<myops_operand> ip(in_ops);
    std::vector<myops_out_operand> op(out_ops);
    for (auto& o : ip) o.ptr = static_cast<const char*>(o.ptr) + b * (by_cols ? o.col_stride : o.row_stride) * es;
    for (auto& o : op) o.ptr = static_cast<char*>(o.ptr) + b * (by_cols ? o.col_stride : o.row_stride) * es;
    const int rc = by_cols ? fn(op.data(), ip.data(), rows, e - b, dtype, scalars.data())
                           : fn(op.data(), ip.data(), e - b, cols, dtype, scalars.data());
    if (rc != MYOPS_OK) status.store(rc);
  });
  check_status(status.load(), k.name.c_str(), "CPU");
}


at::Tensor run_elementwise_sum(EwSumKernel& k, std::initializer_list<at::Tensor> outs_l,
                               std::initializer_list<at::Tensor> ins_l, std::initializer_list<double> scalars_l) {
  const std::vector<at::Tensor> outs(outs_l);
  const std::vector<double> scalars(scalars_l);
  assert_fresh_outputs(outs, std::vector<at::Tensor>(ins_l), k.name.c_str());
  const at::Tensor& ref = outs.at(0);
  TORCH_INTERNAL_ASSERT(ref.dim() >= 1);
  const int64_t N = ref.size(-1), M = N > 0 ? ref.numel() / N : 0;
  const int dtype = dtype_code(ref, k.name.c_str(), "input");
  if (ref.numel() == 0) return at::zeros({N}, ref.options());
  std::vector<RowsView> ins;  // views (or contiguous copies) kept alive for the launch
  for (const auto& t : ins_l) ins.push_back(rows_view(t));
  std::vector<myops_operand> in_ops;
  for (const auto& v : ins) in_ops.push_back(v.op);
  std::vector<myops_out_operand> out_ops;
  for (const auto& t : outs) out_ops.push_back(out_rows(t));

  if (ref.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
    const c10::cuda::OptionalCUDAGuard guard(ref.device());
    const int64_t R = k.cuda_ws.get()(M, N, dtype);
    TORCH_CHECK(R > 0, "myops.", k.name, ": no launch configuration for ", str(ref.sizes()));
    at::Tensor ws = at::empty({R, N}, ref.options().dtype(stat_dtype(ref)));
    const int rc = k.cuda.get()(out_ops.data(), in_ops.data(), M, N, dtype, scalars.data(), ws.data_ptr(), R,
                                current_stream(ref));
    check_status(rc, k.name.c_str(), "CUDA");
    return colsum_cuda(ws.unsqueeze(0), ref.scalar_type(), k.name.c_str())[0];
#else
    TORCH_CHECK(false, "myops.", k.name, ": this build of myops has no CUDA support");
#endif
  }
  TORCH_INTERNAL_ASSERT(ref.is_cpu());
  EwSumCpuFn fn = k.cpu.get();
  const int64_t es = ref.element_size(), parts = cpu_parts(M);
  at::Tensor ws = at::zeros({parts, N}, ref.options().dtype(at::kDouble));  // a row of partial sums per part
  cpu_row_parts(M, parts, k.name.c_str(), [&](int64_t q, int64_t b, int64_t e) {
    std::vector<myops_operand> ip(in_ops);
    std::vector<myops_out_operand> op(out_ops);
    for (auto& o : ip) o = shifted(o, b, es);
    for (auto& o : op) o = shifted(o, b, es);
    return fn(op.data(), ip.data(), e - b, N, dtype, scalars.data(), ws.data_ptr<double>() + q * N);
  });
  return ws.sum(0).to(ref.scalar_type());
}
}  // namespace myops

// ---- C entry points for the Python loader (ctypes) --------------------------------------------------------------
extern "C" {

// Loads the kernel library at `path` next to any loaded before (never unloaded: queued kernels and captured CUDA
// graphs may still point into an old one) and makes it current. Returns 0, or non-zero with a message in err.
__attribute__((visibility("default"))) int myops_runtime_load_kernels(const char* path, char* err, size_t errlen) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    std::snprintf(err, errlen, "dlopen failed: %s", e ? e : "unknown error");
    return 1;
  }
  using AbiFn = int (*)();
  auto abi = reinterpret_cast<AbiFn>(dlsym(h, "myops_abi_version"));
  if (abi == nullptr || abi() != MYOPS_ABI_VERSION) {
    std::snprintf(err, errlen, "%s is not a myops kernel library of ABI version %d", path, MYOPS_ABI_VERSION);
    dlclose(h);
    return 2;
  }
  std::lock_guard<std::mutex> lock(myops::g_mu);
  myops::g_path = path;
  myops::g_handle.store(h, std::memory_order_release);
  myops::g_generation.fetch_add(1, std::memory_order_acq_rel);
  return 0;
}

__attribute__((visibility("default"))) int myops_runtime_abi_version() { return MYOPS_ABI_VERSION; }

__attribute__((visibility("default"))) int myops_runtime_with_cuda() {
#ifdef MYOPS_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}
}
