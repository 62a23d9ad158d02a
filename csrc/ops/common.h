// common.h: the registration layer's shared half (C++, light torch headers, built and loaded once per process).
// Each csrc/ops/<op>.cpp declares its schema, checks its arguments, allocates outputs, and calls its kernels
// through the C ABI of csrc/myops.h. Kernels live in a separate library (plain C / CUDA C) that runtime.cpp
// loads and can swap at run time (ops.reload()); calls go through Kernel<Fn>, which re-resolves its symbol after
// every swap.
#pragma once
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <atomic>
#include <limits>
#include <optional>
#include <tuple>
#include <initializer_list>
#include <string>
#include <vector>

#ifdef MYOPS_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "../myops.h"

namespace myops {

// ---- kernel library (runtime.cpp) -------------------------------------------------------------------------
void* resolve_kernel(const char* symbol);  // nullptr when the loaded kernel library lacks it
uint64_t kernel_generation();              // bumped by every (re)load of the kernel library
[[noreturn]] void kernel_missing(const std::string& symbol);

// A kernel entry point, looked up by name in the current kernel library and cached until the next reload.
template <class Fn> class Kernel {
 public:
  explicit Kernel(std::string symbol) : symbol_(std::move(symbol)) {}
  Fn get() {
    const uint64_t g = kernel_generation();
    if (gen_.load(std::memory_order_acquire) != g) {
      Fn f = reinterpret_cast<Fn>(resolve_kernel(symbol_.c_str()));
      if (f == nullptr) kernel_missing(symbol_);
      fn_.store(f, std::memory_order_relaxed);
      gen_.store(g, std::memory_order_release);
    }
    return fn_.load(std::memory_order_relaxed);
  }

 private:
  std::string symbol_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<Fn> fn_{nullptr};
};

// ---- argument checks: user errors raise RuntimeError naming the op and the argument --------------------------
// Messages format integers and shapes through these helpers, never through std::ostream's integer insertion:
// with extensions built by GCC 13 against torch 2.11 wheels, `ostream << int64_t` inside a TORCH_CHECK message
// segfaulted (seen on the GPU machine; dtype and device messages, which stream no integers, were fine).
std::string str(int64_t v);
std::string str(at::IntArrayRef shape);  // "[2, 3]"

int dtype_code(const at::Tensor& t, const char* op, const char* arg);
void check_same_device(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name,
                       const char* arg);
void check_same_dtype(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name,
                      const char* arg);
void check_same_shape(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name,
                      const char* arg);
// t must be on ref's device, in ref's dtype and of ref's shape (in that order: an elementwise operand).
void check_like(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name, const char* arg);
// t must be 1-D with ref.size(-1) elements (a per-feature bias), on ref's device, in ref's dtype.
void check_last_dim_vector(const at::Tensor& ref, const at::Tensor& t, const char* op, const char* ref_name,
                           const char* arg);
// Turns a launcher's return code into an exception naming the op.
void check_status(int rc, const char* op, const char* device);

// Elementwise ops: all of them share one C ABI (csrc/cuda/elementwise.cuh, csrc/cpu/elementwise.h):
//   int myops_<name>_cpu (const myops_out_operand* outs, const myops_operand* ins, int64_t rows, int64_t cols,
//                         int dtype, const double* scalars);
//   int myops_<name>_cuda(... same ..., void* stream);
using EwCpuFn = int (*)(const myops_out_operand*, const myops_operand*, int64_t, int64_t, int, const double*);
using EwCudaFn = int (*)(const myops_out_operand*, const myops_operand*, int64_t, int64_t, int, const double*,
                         void*);

struct EwKernel {
  explicit EwKernel(const std::string& name)
      : name(name), cpu("myops_" + name + "_cpu"), cuda("myops_" + name + "_cuda") {}
  std::string name;
  Kernel<EwCpuFn> cpu;
  Kernel<EwCudaFn> cuda;
};

// Runs k over outs (contiguous, allocated by the caller) and ins, every one of outs[0]'s shape (an input may be
// a broadcast view such as bias.expand(shape)). Layouts that collapse to [rows, cols] run in place; others copy
// the offending inputs to contiguous memory first. Dtypes/devices must already be checked.
void run_elementwise(EwKernel& k, std::initializer_list<at::Tensor> outs, std::initializer_list<at::Tensor> ins,
                     std::initializer_list<double> scalars = {});

// Elementwise backward ops with a bias gradient (csrc/cuda/elementwise.cuh, MYOPS_EW_SUM_CUDA_ENTRY; the CPU twin in
// csrc/cpu/elementwise.h): the op's last result is summed over rows instead of stored.
//   int     myops_<name>_cpu (outs, ins, rows, cols, dtype, scalars, double* colsum);   colsum [cols] +=
//   int     myops_<name>_cuda(outs, ins, rows, cols, dtype, scalars, void* ws, int64_t R, void* stream);
//   int64_t myops_<name>_cuda_ws(int64_t rows, int64_t cols, int dtype);                 R (ws [R, cols], acc dtype)
using EwSumCpuFn = int (*)(const myops_out_operand*, const myops_operand*, int64_t, int64_t, int, const double*,
                           double*);
using EwSumCudaFn = int (*)(const myops_out_operand*, const myops_operand*, int64_t, int64_t, int, const double*,
                            void*, int64_t, void*);
using EwSumWsFn = int64_t (*)(int64_t, int64_t, int);

struct EwSumKernel {
  explicit EwSumKernel(const std::string& name)
      : name(name), cpu("myops_" + name + "_cpu"), cuda("myops_" + name + "_cuda"),
        cuda_ws("myops_" + name + "_cuda_ws") {}
  std::string name;
  Kernel<EwSumCpuFn> cpu;
  Kernel<EwSumCudaFn> cuda;
  Kernel<EwSumWsFn> cuda_ws;
};

// Runs k over outs (contiguous, allocated by the caller, of shape [..., N]) and ins of the same shape (a bias
// may be bias.expand(shape)) as a [rows, N] problem; returns the column sums [N] of the op's last result (a bias
// gradient) in the outputs' dtype. Inputs whose leading dims do not collapse are copied once.
at::Tensor run_elementwise_sum(EwSumKernel& k, std::initializer_list<at::Tensor> outs,
                               std::initializer_list<at::Tensor> ins, std::initializer_list<double> scalars = {});

// Runs fn(begin, end) over [0, n) on at::parallel_for when the work (n * cost elements) is worth threads.
template <class F> void parallel_rows(int64_t n, int64_t cost, const F& fn) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(cost, 1));
  at::parallel_for(0, n, grain, fn);
}

// ---- row-wise ops (norms, softmax, cross_entropy): problems of M rows of N = t.size(-1) elements ------------
struct RowsView {
  at::Tensor t;  // the tensor the operand points into (t itself, or a contiguous copy)
  int64_t M, N;
  myops_operand op;
};
// t's leading dims collapsed into one (size, stride), its last dim as the columns; a layout whose leading dims do
// not collapse is copied to contiguous memory once.
RowsView rows_view(const at::Tensor& t);
// The [M, N] operand of a contiguous tensor whose last dim has N elements.
myops_out_operand out_rows(const at::Tensor& t);
// The dims of a tensor of these strides in memory order, outermost first (stable: a row-major tensor keeps its order).
std::vector<int64_t> memory_order(at::IntArrayRef strides);
// t (of ref's sizes) laid out as ref, a dense tensor (empty_like's) whose dims in memory order are perm: t itself
// where its strides are ref's, else a copy through a contiguous buffer in that order, viewed back (ATen's copy into a
// strided destination has no blocked path: bf16 add(a.t(), b) [1024, 4096], 2 threads, 6905 us through
// empty_strided against 2147 this way).
at::Tensor as_layout(const at::Tensor& t, const at::Tensor& ref, const std::vector<int64_t>& perm);
// The operand moved down by `rows` rows (a CPU worker's share of the problem).
inline myops_operand shifted(myops_operand o, int64_t rows, int64_t es) {
  o.ptr = static_cast<const char*>(o.ptr) + rows * o.row_stride * es;
  return o;
}
inline myops_out_operand shifted(myops_out_operand o, int64_t rows, int64_t es) {
  o.ptr = static_cast<char*>(o.ptr) + rows * o.row_stride * es;
  return o;
}
// The per-row statistics saved for a backward pass: fp32, or fp64 for fp64 inputs.
inline at::ScalarType stat_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}
// Runs fn(b, e) -> status over row ranges [b, e) of [0, M) on CPU threads; raises on a failed status.
template <class F> void cpu_rows(int64_t M, int64_t N, const char* op, const F& fn) {
  std::atomic<int> status{MYOPS_OK};
  parallel_rows(M, N, [&](int64_t b, int64_t e) {
    const int rc = fn(b, e);
    if (rc != MYOPS_OK) status.store(rc);
  });
  check_status(status.load(), op, "CPU");
}
// Like cpu_rows over a fixed split into `parts` ranges, fn(part, b, e): per-part partial sums stay deterministic.
template <class F> void cpu_row_parts(int64_t M, int64_t parts, const char* op, const F& fn) {
  std::atomic<int> status{MYOPS_OK};
  at::parallel_for(0, parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t q = pb; q < pe; ++q) {
      const int rc = fn(q, M * q / parts, M * (q + 1) / parts);
      if (rc != MYOPS_OK) status.store(rc);
    }
  });
  check_status(status.load(), op, "CPU");
}
// Number of parts for cpu_row_parts: enough for every thread, never more than the rows.
inline int64_t cpu_parts(int64_t M) { return std::max<int64_t>(1, std::min<int64_t>(M, at::get_num_threads())); }

#ifdef MYOPS_WITH_CUDA
inline void* current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}
// The norms' parameter gradients from their CUDA backward kernels' per-CTA partial sums ws [K, R, N] (acc dtype,
// K = 1 or 2): K tensors [N] of dtype, in one launch (csrc/cuda/colsum.cu). Call under the device guard.
std::vector<at::Tensor> colsum_cuda(const at::Tensor& ws, at::ScalarType dtype, const char* op);
#endif

}  // namespace myops
