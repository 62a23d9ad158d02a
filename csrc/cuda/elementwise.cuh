// elementwise.cuh: one kernel template for every elementwise op.
//
//   outs[k][r, c] = Op(ins[0][r, c], ..., ins[NIN-1][r, c])_k     for r < rows, c < cols
//
// Each operand is a 2-D strided view (myops_operand): the registration layer collapses any tensor layout it can
// into [rows, cols]; a bias broadcast over rows is an operand with row_stride 0; a fully contiguous problem is a
// single row. Op is a functor
//   struct Op { static constexpr int NIN, NOUT; explicit Op(const double* scalars);
//               template <class C> __device__ void operator()(C (&out)[NOUT], const C (&in)[NIN]) const; };
// evaluated in acc_t<T> (fp32 for half types).
//
// Two kernels, each thread with several independent 16-byte loads per operand in flight (its 64-bit address setup
// paid once for all of them), looping if the grid had to be capped:
//   flat: one row, every operand contiguous: tiles of blockDim * VEC * U elements;
//   rows: [rows, cols] with row strides: threads across column vectors, U rows per step.
#pragma once
#include "common.cuh"

// The one dtype code whose kernels this translation unit instantiates (-1: all); see MYOPS_EW_PART below.
#if defined(MYOPS_EW_PART) && MYOPS_EW_PART < 4
#define MYOPS_EW_ONLY MYOPS_EW_PART
#else
#define MYOPS_EW_ONLY -1
#endif

namespace myops {

constexpr int kEwThreads = 256;
// The flat kernel's block: 128 threads for 16-bit types (tiles of 4096 elements, twice the blocks for the tail to
// balance), 256 for wider ones. H100, % of copy, 256 -> 128 threads for every type, two rounds: bf16 forward+backward
// swiglu 98.6 -> 99.2, geglu 98.2 -> 98.9 (torch.compile 99.1), forwards within 0.3; fp32 swiglu and geglu 0.1-0.2
// slower either way. fp32 stays behind compile (swiglu forward 99.8 against 101.2), with or without the L2 policy
// (without it 1-1.5 points slower in both dtypes).
template <class T> constexpr int ew_flat_threads() { return sizeof(T) == 2 ? 128 : 256; }
constexpr int kEwUnroll = 4;

template <int NIN, int NOUT> struct EwArgs {
  myops_operand in[NIN];
  myops_out_operand out[NOUT];
  int64_t rows, cols;
  bool last;  // the inputs' loads under the L2 evict_last policy (common.cuh, l2_last)
};

template <class Op, class T, int VEC>
__device__ __forceinline__ void ew_apply(const Op& op, const Vec<T, VEC> (&x)[Op::NIN], Vec<T, VEC> (&y)[Op::NOUT]) {
  using C = acc_t<T>;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    C in[Op::NIN], out[Op::NOUT];
#pragma unroll
    for (int i = 0; i < Op::NIN; ++i) in[i] = to_acc(x[i].v[e]);
    op(out, in);
#pragma unroll
    for (int k = 0; k < Op::NOUT; ++k) y[k].v[e] = from_acc<T>(out[k]);
  }
}

// Scalar element j of a problem whose operands are all contiguous (the flat kernel's tail).
template <class T, class Op>
__device__ __forceinline__ void ew_flat_one(const EwArgs<Op::NIN, Op::NOUT>& a, const Op& op, int64_t j) {
  Vec<T, 1> x[Op::NIN], y[Op::NOUT];
#pragma unroll
  for (int i = 0; i < Op::NIN; ++i) x[i].v[0] = static_cast<const T*>(a.in[i].ptr)[j];
  ew_apply(op, x, y);
#pragma unroll
  for (int k = 0; k < Op::NOUT; ++k) static_cast<T*>(a.out[k].ptr)[j] = y[k].v[0];
}

// Vectors per operand and thread in the flat kernel: 8 for one input (relu), 4 otherwise, so that every thread
// keeps at least 8 independent 16-byte loads in flight.
template <class Op> constexpr int flat_unroll() { return Op::NIN == 1 ? 2 * kEwUnroll : kEwUnroll; }

template <class T, int VEC, class Op>
__global__ void __launch_bounds__(ew_flat_threads<T>()) ew_flat_kernel(EwArgs<Op::NIN, Op::NOUT> a, Op op) {
  constexpr int NIN = Op::NIN, NOUT = Op::NOUT, U = flat_unroll<Op>(), THREADS = ew_flat_threads<T>();
  const int64_t n = a.cols, tile = (int64_t)THREADS * VEC * U;
  const L2Hint h = l2_hint(a.last);
  for (int64_t base = (int64_t)blockIdx.x * tile; base < n; base += (int64_t)gridDim.x * tile) {
    if (base + tile <= n) {
      Vec<T, VEC> x[U][NIN], y[U][NOUT];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < NIN; ++i)
          x[u][i] = load_vec<T, VEC>(
              static_cast<const T*>(a.in[i].ptr) + base + (int64_t)(u * THREADS + threadIdx.x) * VEC, h);
#pragma unroll
      for (int u = 0; u < U; ++u) ew_apply(op, x[u], y[u]);
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int k = 0; k < NOUT; ++k)
          reinterpret_cast<Vec<T, VEC>*>(static_cast<T*>(a.out[k].ptr) + base)[u * THREADS + threadIdx.x] =
              y[u][k];
    } else {
      for (int64_t j = base + threadIdx.x; j < n; j += THREADS) ew_flat_one<T>(a, op, j);
    }
  }
}

// 2 vectors per operand in flight: with 4 the kernel needed 64-128 registers (2-byte types unpack a vector into 8),
// halving the resident blocks; with 2 it stays at 32-48.
template <class T> constexpr int rows_unroll() { return 2; }

// Block (tx, ty): each thread owns U column vectors of a row, tx * VEC columns apart (so one row pointer per
// operand serves all U loads), and walks rows ty * gridDim.y apart. VEC > 1 needs col_stride 1 everywhere and
// cols % VEC == 0 (checked by the launcher); VEC == 1 takes any strides.
template <class T, int VEC, class Op>
__global__ void __launch_bounds__(kEwThreads) ew_rows_kernel(EwArgs<Op::NIN, Op::NOUT> a, Op op) {
  constexpr int NIN = Op::NIN, NOUT = Op::NOUT, U = rows_unroll<T>();
  const int64_t cspan = (int64_t)blockDim.x * VEC;
  const int64_t c0 = (int64_t)blockIdx.x * cspan * U + (int64_t)threadIdx.x * VEC;
  if (c0 >= a.cols) return;
  bool valid[U];
#pragma unroll
  for (int u = 0; u < U; ++u) valid[u] = c0 + u * cspan < a.cols;
  const int64_t rstep = (int64_t)gridDim.y * blockDim.y;
  const L2Hint h = l2_hint(a.last);
  for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < a.rows; r += rstep) {
    Vec<T, VEC> x[U][NIN], y[U][NOUT];
#pragma unroll
    for (int i = 0; i < NIN; ++i) {
      const T* p = static_cast<const T*>(a.in[i].ptr) + r * a.in[i].row_stride + c0 * a.in[i].col_stride;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (valid[u]) x[u][i] = load_vec<T, VEC>(p + u * cspan * a.in[i].col_stride, h);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) ew_apply(op, x[u], y[u]);
#pragma unroll
    for (int k = 0; k < NOUT; ++k) {
      T* p = static_cast<T*>(a.out[k].ptr) + r * a.out[k].row_stride + c0 * a.out[k].col_stride;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!valid[u]) continue;
        if constexpr (VEC > 1) {
          *reinterpret_cast<Vec<T, VEC>*>(p + u * cspan) = y[u][k];
        } else {
          p[u * cspan * a.out[k].col_stride] = y[u][k].v[0];
        }
      }
    }
  }
}

// Grids: one flat tile per block (the hardware scheduler balances blocks as they finish; a persistent grid of
// resident blocks lost ~5% to tiles that did not divide evenly among them), and a few rows per row-kernel thread.
template <class T, int VEC, class Op> int ew_launch_flat(const EwArgs<Op::NIN, Op::NOUT>& a, const Op& op,
                                                         cudaStream_t stream) {
  constexpr int threads = ew_flat_threads<T>();
  const int64_t blocks = std::min<int64_t>(ceil_div(a.cols, (int64_t)threads * VEC * flat_unroll<Op>()), 0x7fffffff);
  ew_flat_kernel<T, VEC, Op><<<(unsigned)blocks, threads, 0, stream>>>(a, op);
  return launch_status();
}

template <class T, int VEC, class Op> int ew_launch_rows(const EwArgs<Op::NIN, Op::NOUT>& a, const Op& op,
                                                         cudaStream_t stream) {
  // Threads along columns first (coalesced); narrow rows leave the rest of the block to rows.
  const int64_t per_thread = ceil_div(ceil_div(a.cols, VEC), rows_unroll<T>());  // threads one row needs
  int tx = 1;
  while (tx < kEwThreads && tx < per_thread) tx *= 2;
  const int ty = kEwThreads / tx;
  const int64_t gx = ceil_div(per_thread, tx);
  if (gx > 0x7fffffff) return MYOPS_EARG;
  constexpr int64_t kRowsPerThread = 2;
  const int64_t gy = std::max<int64_t>(1, std::min<int64_t>(ceil_div(a.rows, ty * kRowsPerThread), 65535));
  ew_rows_kernel<T, VEC, Op><<<dim3((unsigned)gx, (unsigned)gy), dim3(tx, ty), 0, stream>>>(a, op);
  return launch_status();
}

template <class T, class Op> int ew_launch_typed(EwArgs<Op::NIN, Op::NOUT> a, const Op& op,
                                                 cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  bool unit = true, aligned = true;
  auto check = [&](const void* p, int64_t rs, int64_t cs) {
    unit = unit && cs == 1;
    aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0 && (a.rows == 1 || rs % VEC == 0);
  };
  aligned = aligned && (a.rows == 1 || a.cols % VEC == 0);  // the row kernel has no partial vectors
  for (int i = 0; i < Op::NIN; ++i) check(a.in[i].ptr, a.in[i].row_stride, a.in[i].col_stride);
  for (int k = 0; k < Op::NOUT; ++k) check(a.out[k].ptr, a.out[k].row_stride, a.out[k].col_stride);
  a.last = l2_last(Op::NIN * a.rows * a.cols * (int64_t)sizeof(T));
  // Three instantiations per dtype, not four: an unaligned single row takes the row kernel's one-element path
  // (each kernel instantiation costs edit->reload time).
  if (a.rows == 1 && unit && aligned) return ew_launch_flat<T, VEC>(a, op, stream);
  return unit && aligned ? ew_launch_rows<T, VEC>(a, op, stream) : ew_launch_rows<T, 1>(a, op, stream);
}

template <class Op> int ew_launch(const myops_out_operand* outs, const myops_operand* ins, int64_t rows,
                                  int64_t cols, int dtype, const double* scalars, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return MYOPS_OK;
  EwArgs<Op::NIN, Op::NOUT> a;
  for (int i = 0; i < Op::NIN; ++i) a.in[i] = ins[i];
  for (int k = 0; k < Op::NOUT; ++k) a.out[k] = outs[k];
  a.rows = rows;
  a.cols = cols;
  const Op op(scalars);
  return dispatch_dtype<MYOPS_EW_ONLY>(dtype, [&](auto t) { return ew_launch_typed<decltype(t)>(a, op, stream); });
}

}  // namespace myops

// Defines the C entry point `name` (the ABI every elementwise op shares; see csrc/ops/common.h).
//
// Parallel build: the JIT may compile an elementwise .cu file five times with MYOPS_EW_PART = 0..3 (the kernels of
// one dtype code each: f32, f16, bf16, f64) and 4 (the entry point, which dispatches to the parts), so that on a
// many-core host an edit recompiles four quarter-size translation units at once. Without MYOPS_EW_PART, one
// translation unit holds everything.
#define MYOPS_EW_ARGS                                                                                           \
  const myops_out_operand *outs, const myops_operand *ins, int64_t rows, int64_t cols, int dtype,              \
      const double *scalars, void *stream
#define MYOPS_EW_CAT_(a, b) a##b
#define MYOPS_EW_CAT(a, b) MYOPS_EW_CAT_(a, b)

#if !defined(MYOPS_EW_PART)
#define MYOPS_EW_CUDA_ENTRY(name, Op)                                                                          \
  extern "C" int name(MYOPS_EW_ARGS) {                                                                         \
    return myops::ew_launch<Op>(outs, ins, rows, cols, dtype, scalars, static_cast<cudaStream_t>(stream));     \
  }
#elif MYOPS_EW_PART == 4
#define MYOPS_EW_CUDA_ENTRY(name, Op)                                                                          \
  extern "C" int name##_part0(MYOPS_EW_ARGS);                                                                  \
  extern "C" int name##_part1(MYOPS_EW_ARGS);                                                                  \
  extern "C" int name##_part2(MYOPS_EW_ARGS);                                                                  \
  extern "C" int name##_part3(MYOPS_EW_ARGS);                                                                  \
  extern "C" int name(MYOPS_EW_ARGS) {                                                                         \
    switch (dtype) {                                                                                           \
      case MYOPS_F32: return name##_part0(outs, ins, rows, cols, dtype, scalars, stream);                      \
      case MYOPS_F16: return name##_part1(outs, ins, rows, cols, dtype, scalars, stream);                      \
      case MYOPS_BF16: return name##_part2(outs, ins, rows, cols, dtype, scalars, stream);                     \
      case MYOPS_F64: return name##_part3(outs, ins, rows, cols, dtype, scalars, stream);                      \
      default: return MYOPS_EDTYPE;                                                                            \
    }                                                                                                          \
  }
#else
#define MYOPS_EW_CUDA_ENTRY(name, Op)                                                                          \
  extern "C" int MYOPS_EW_CAT(name##_part, MYOPS_EW_PART)(MYOPS_EW_ARGS) {                                     \
    return dtype == MYOPS_EW_PART                                                                              \
               ? myops::ew_launch<Op>(outs, ins, rows, cols, dtype, scalars, static_cast<cudaStream_t>(stream)) \
               : MYOPS_EDTYPE;                                                                                 \
  }
#endif
