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
// Two kernels, each thread with independent 16-byte loads of every operand in flight (several per operand where that
// measured faster, flat_unroll / rows_unroll; its 64-bit address setup paid once for all of them), looping if the
// grid had to be capped:
//   flat: one row, every operand contiguous: tiles of blockDim * VEC * U elements;
//   rows: [rows, cols] with row strides: threads across column vectors, U rows per step.
#pragma once
#include <type_traits>

#include "common.cuh"

// The one dtype code whose kernels this translation unit instantiates (-1: all); see MYOPS_EW_PART below.
#if defined(MYOPS_EW_PART) && MYOPS_EW_PART < 4
#define MYOPS_EW_ONLY MYOPS_EW_PART
#else
#define MYOPS_EW_ONLY -1
#endif

namespace myops {

constexpr int kEwThreads = 256;
// The flat kernel's block: 128 threads for 16-bit types and for fp32 of two inputs or more (more, smaller blocks for
// the tail to balance), 256 otherwise. H100, % of copy, 256 -> 128 threads for every type, two rounds: bf16
// forward+backward swiglu 98.6 -> 99.2, geglu 98.2 -> 98.9 (torch.compile 99.1), forwards within 0.3.
template <class T, class Op> constexpr int ew_flat_threads() {
  return sizeof(T) == 2 || (sizeof(T) == 4 && Op::NIN >= 2) ? 128 : 256;
}
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

// Vectors per operand and thread in the flat kernel: 8 for one input (relu), so that every thread keeps 8
// independent 16-byte loads in flight; for two inputs or more, 1 (blocks of 512 fp32 / 1024 16-bit elements, the
// latter Inductor's; the two-input ops keep 2-3 loads of 16 bytes a thread in flight and rely on 16 resident blocks
// per SM for the rest). H100, clean flush, % of copy, vectors 4 -> 1 (16-bit) and 2 -> 1 (fp32), each against
// torch.compile in the same run (session 39):
//   bf16 swiglu / geglu forward 103.4-103.6 / 103.4 -> 104.8-105.0 / 104.8-105.0 (compile 103.2-103.7),
//        forward+backward 100.7-100.8 / 101.0-101.2 -> 101.6-102.0 / 101.6-102.1 (compile 100.9-101.5);
//        2 vectors: 103.9 / 104.7, 100.8 / 99.9;
//   fp32 add, mul, swiglu, geglu forward 103.4-103.5 -> 103.8-103.9 (compile 103.0-103.3), mul, swiglu, geglu
//        forward+backward 101.7-101.8 -> 102.0-102.2 (compile 101.5-101.9).
// The backward kernels (three inputs, two outputs) had lost about 1 us to Inductor's at 4 / 2 vectors (kernel times,
// [16384, 4096]: bf16 220.4 against 219.3 us, fp32 436.2 against 434.9). Before (session 33), fp32's 4 -> 2 vectors:
// forward 101.1-101.8 -> 102.8-103.0, forward+backward 100.3-100.5 -> 101.0-101.2.
// fp64 (not measured) keeps 4. MYOPS_EW_FLAT_U16 / MYOPS_EW_FLAT_U32=n: n for 16-bit / fp32 types of two inputs or
// more (A/B).
#ifndef MYOPS_EW_FLAT_U16
#define MYOPS_EW_FLAT_U16 1
#endif
#ifndef MYOPS_EW_FLAT_U32
#define MYOPS_EW_FLAT_U32 1
#endif
template <class T, class Op> constexpr int flat_unroll() {
  if (Op::NIN == 1) return 2 * kEwUnroll;
  return sizeof(T) == 8 ? kEwUnroll : sizeof(T) == 4 ? MYOPS_EW_FLAT_U32 : MYOPS_EW_FLAT_U16;
}

template <class T, int VEC, class Op>
__global__ void __launch_bounds__(ew_flat_threads<T, Op>()) ew_flat_kernel(EwArgs<Op::NIN, Op::NOUT> a, Op op) {
  constexpr int NIN = Op::NIN, NOUT = Op::NOUT, U = flat_unroll<T, Op>(), THREADS = ew_flat_threads<T, Op>();
  static_assert(THREADS % 32 == 0 && THREADS <= 1024 && U >= 1, "the flat kernel's block and vectors per thread");
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
  constexpr int threads = ew_flat_threads<T, Op>();
  const int64_t blocks = std::min<int64_t>(ceil_div(a.cols, (int64_t)threads * VEC * flat_unroll<T, Op>()), 0x7fffffff);
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

// ---- elementwise backward with a bias gradient ---------------------------------------------------------------
//   outs[k][r, c] = Op(ins[..][r, c])_k  for k < NOUT - 1      (written in T, e.g. grad_x)
//   ws[b][c]      = sum over the rows of row block b of Op(...)_{NOUT-1}   (acc_t, unrounded; ws [R, cols])
// colsum.cu then adds ws's R rows: the bias gradient. One pass over the inputs, where writing the summand and
// summing it with the sum op wrote it and read it back (bias_gelu and scale_bias_relu backward). Op also names
// BCAST, the input broadcast over rows (a bias), or -1.
// Block (tx, ty): a thread owns one column vector (VEC accumulators) and walks the rows ty * R apart, U rows in
// flight (U * NIN independent 16-byte loads); the ty partial sums of a column meet in shared memory.
// H100, forward+backward at [16384, 4096], % of copy, bf16 / fp32: scale_bias_relu 66.8 / 69.3 (sum op) -> 90.3 /
// 97.1 (this kernel, U = 4) -> 93.5 / 97.0 (U = 2 for 16-bit types, which brought bf16 from 70 registers, three CTAs
// per SM and a second wave, to 56), bias_gelu 77.7 / 81.2 -> 87.4 / 93.5 -> 93.2 / 96.7 (and BCAST: the bias loaded
// once); torch.compile 71.4 / 83.4 and 78.0 / 82.3.
constexpr int kEwSumUnroll = 4;  // rows in flight per thread (2 for 16-bit types: registers)
constexpr int kEwSumCtas = 4;    // CTAs per SM (the launch bounds hold every instance to 64 registers): one wave

struct EwSumGeo {
  int tx, ty;
  int64_t gx, gy;
};
// The geometry for vectors of `vec` elements; R = gy does not depend on vec (the query below and the launch of
// either vector width agree): about four CTAs per SM, so that the workspace (R * cols accumulators, written once
// and read by colsum) stays about 1% of the traffic at [16384, 4096].
inline EwSumGeo ew_sum_geo(int64_t rows, int64_t cols, int vec, int wide_vec) {
  auto shape = [&](int v, int& tx, int& ty, int64_t& gx) {
    const int64_t nv = ceil_div(cols, (int64_t)v);
    tx = 1;
    while (tx < kEwThreads && tx < nv) tx *= 2;
    ty = kEwThreads / tx;
    gx = ceil_div(nv, (int64_t)tx);
  };
  EwSumGeo g;
  int wtx, wty;
  int64_t wgx;
  shape(wide_vec, wtx, wty, wgx);
  g.gy = std::max<int64_t>(1, std::min<int64_t>({ceil_div(kEwSumCtas * (int64_t)sm_count(), wgx),
                                                  ceil_div(rows, (int64_t)wty * kEwSumUnroll), 65535}));
  shape(vec, g.tx, g.ty, g.gx);
  return g;
}

template <class T, int VEC, class Op>
__global__ void __launch_bounds__(kEwThreads, kEwSumCtas) ew_sum_kernel(EwArgs<Op::NIN, Op::NOUT - 1> a, Op op,
                                                            acc_t<T>* __restrict__ ws) {  // [gridDim.y, cols]
  using C = acc_t<T>;
  constexpr int NIN = Op::NIN, NW = Op::NOUT - 1, U = sizeof(T) == 2 ? 2 : kEwSumUnroll;
  __shared__ C part[kEwThreads * VEC];
  const int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  const int64_t step = (int64_t)gridDim.y * blockDim.y;
  const L2Hint h = l2_hint(a.last);
  C acc[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) acc[e] = C(0);
  // Op::BCAST (or -1): an input broadcast over rows (a bias, row_stride 0), the same vector in every row the thread
  // visits: loaded once.
  Vec<T, VEC> fixed;
  if constexpr (Op::BCAST >= 0)
    if (c0 < a.cols)
      fixed = load_vec<T, VEC>(static_cast<const T*>(a.in[Op::BCAST].ptr) + c0 * a.in[Op::BCAST].col_stride, h);
  // U rows (or the 1 left) at r, r + step, ...: loads of all of them first, then math and stores.
  auto rows_at = [&](int64_t r, auto n_tag) {
    constexpr int N = decltype(n_tag)::value;
    Vec<T, VEC> x[N][NIN];
#pragma unroll
    for (int u = 0; u < N; ++u)
#pragma unroll
      for (int i = 0; i < NIN; ++i)
        x[u][i] = i == Op::BCAST ? fixed
                                 : load_vec<T, VEC>(static_cast<const T*>(a.in[i].ptr) +
                                                        (r + u * step) * a.in[i].row_stride + c0 * a.in[i].col_stride,
                                                    h);
#pragma unroll
    for (int u = 0; u < N; ++u) {
      Vec<T, VEC> y[NW > 0 ? NW : 1];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        C in[NIN], out[Op::NOUT];
#pragma unroll
        for (int i = 0; i < NIN; ++i) in[i] = to_acc(x[u][i].v[e]);
        op(out, in);
#pragma unroll
        for (int k = 0; k < NW; ++k) y[k].v[e] = from_acc<T>(out[k]);
        acc[e] += out[NW];
      }
#pragma unroll
      for (int k = 0; k < NW; ++k) {
        T* p = static_cast<T*>(a.out[k].ptr) + (r + u * step) * a.out[k].row_stride + c0 * a.out[k].col_stride;
        if constexpr (VEC > 1) {
          *reinterpret_cast<Vec<T, VEC>*>(p) = y[k];
        } else {
          *p = y[k].v[0];
        }
      }
    }
  };
  if (c0 < a.cols) {
    int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
    for (; r + (U - 1) * step < a.rows; r += U * step) rows_at(r, std::integral_constant<int, U>{});
    for (; r < a.rows; r += step) rows_at(r, std::integral_constant<int, 1>{});
  }
  if (blockDim.y > 1) {  // the column's ty partial sums, added in a fixed order (deterministic)
#pragma unroll
    for (int e = 0; e < VEC; ++e) part[(threadIdx.y * blockDim.x + threadIdx.x) * VEC + e] = acc[e];
    __syncthreads();
    if (threadIdx.y == 0) {
      for (int j = 1; j < (int)blockDim.y; ++j)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] += part[(j * blockDim.x + threadIdx.x) * VEC + e];
    }
  }
  if (threadIdx.y == 0 && c0 < a.cols) {
    C* w = ws + (int64_t)blockIdx.y * a.cols + c0;
#pragma unroll
    for (int e = 0; e < VEC; ++e) w[e] = acc[e];
  }
}

template <class T, int VEC, class Op> int ew_sum_launch_vec(const EwArgs<Op::NIN, Op::NOUT - 1>& a, const Op& op,
                                                            acc_t<T>* ws, int64_t R, cudaStream_t stream) {
  const EwSumGeo g = ew_sum_geo(a.rows, a.cols, VEC, 16 / sizeof(T));
  if (g.gy != R || g.gx > 0x7fffffff) return MYOPS_EARG;
  ew_sum_kernel<T, VEC, Op><<<dim3((unsigned)g.gx, (unsigned)g.gy), dim3(g.tx, g.ty), 0, stream>>>(a, op, ws);
  return launch_status();
}

template <class Op> int ew_sum_launch(const myops_out_operand* outs, const myops_operand* ins, int64_t rows,
                                      int64_t cols, int dtype, const double* scalars, void* ws, int64_t R,
                                      cudaStream_t stream) {
  static_assert(Op::NOUT >= 1, "the last output is the summed one");
  if (rows <= 0 || cols <= 0) return MYOPS_OK;
  if constexpr (Op::BCAST >= 0)
    if (rows > 1 && ins[Op::BCAST].row_stride != 0) return MYOPS_EARG;
  EwArgs<Op::NIN, Op::NOUT - 1> a;
  for (int i = 0; i < Op::NIN; ++i) a.in[i] = ins[i];
  for (int k = 0; k + 1 < Op::NOUT; ++k) a.out[k] = outs[k];
  a.rows = rows;
  a.cols = cols;
  const Op op(scalars);
  return dispatch_dtype<MYOPS_EW_ONLY>(dtype, [&](auto t) -> int {
    using T = decltype(t);
    constexpr int VEC = 16 / sizeof(T);
    bool vec = cols % VEC == 0;  // 16-byte vectors: unit column strides, aligned rows
    auto check = [&](const void* p, int64_t rs, int64_t cs) {
      vec = vec && cs == 1 && reinterpret_cast<uintptr_t>(p) % 16 == 0 && rs % VEC == 0;
    };
    for (int i = 0; i < Op::NIN; ++i) check(a.in[i].ptr, a.in[i].row_stride, a.in[i].col_stride);
    for (int k = 0; k + 1 < Op::NOUT; ++k) check(a.out[k].ptr, a.out[k].row_stride, a.out[k].col_stride);
    a.last = l2_last(Op::NIN * rows * cols * (int64_t)sizeof(T));
    acc_t<T>* w = static_cast<acc_t<T>*>(ws);
    return vec ? ew_sum_launch_vec<T, VEC>(a, op, w, R, stream) : ew_sum_launch_vec<T, 1>(a, op, w, R, stream);
  });
}

// Rows of the workspace ew_sum_launch needs (R above; the same for every dtype of a size class).
inline int64_t ew_sum_ws_rows(int64_t rows, int64_t cols, int dtype) {
  if (rows <= 0 || cols <= 0) return 1;
  const int es = dtype == MYOPS_F64 ? 8 : dtype == MYOPS_F32 ? 4 : 2;
  return ew_sum_geo(rows, cols, 16 / es, 16 / es).gy;
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

// MYOPS_EW_ENTRY_(name, PARAMS, ARGS, LAUNCH): the entry point `name(PARAMS)` returning LAUNCH, or in a split build
// the part of this translation unit's dtype and, in part 4, `name` dispatching on dtype to name##_partK ARGS.
#if !defined(MYOPS_EW_PART)
#define MYOPS_EW_ENTRY_(name, PARAMS, ARGS, LAUNCH) \
  extern "C" int name(PARAMS) { return LAUNCH; }
#elif MYOPS_EW_PART == 4
#define MYOPS_EW_ENTRY_(name, PARAMS, ARGS, LAUNCH) \
  extern "C" int name##_part0(PARAMS);              \
  extern "C" int name##_part1(PARAMS);              \
  extern "C" int name##_part2(PARAMS);              \
  extern "C" int name##_part3(PARAMS);              \
  extern "C" int name(PARAMS) {                     \
    switch (dtype) {                                \
      case MYOPS_F32: return name##_part0 ARGS;     \
      case MYOPS_F16: return name##_part1 ARGS;     \
      case MYOPS_BF16: return name##_part2 ARGS;    \
      case MYOPS_F64: return name##_part3 ARGS;     \
      default: return MYOPS_EDTYPE;                 \
    }                                               \
  }
#else
#define MYOPS_EW_ENTRY_(name, PARAMS, ARGS, LAUNCH)                            \
  extern "C" int MYOPS_EW_CAT(name##_part, MYOPS_EW_PART)(PARAMS) {            \
    return dtype == MYOPS_EW_PART ? LAUNCH : MYOPS_EDTYPE;                     \
  }
#endif

#define MYOPS_EW_CUDA_ENTRY(name, Op)                                                                          \
  MYOPS_EW_ENTRY_(name, MYOPS_EW_ARGS, (outs, ins, rows, cols, dtype, scalars, stream),                        \
                  myops::ew_launch<Op>(outs, ins, rows, cols, dtype, scalars, static_cast<cudaStream_t>(stream)))

// The same for an elementwise backward with a bias gradient (ew_sum_launch): `name` takes the workspace
// ws [R, cols] (acc_t) and R, and `name##_ws` (in the entry's translation unit) returns R:
//   int     name(const myops_out_operand* outs, const myops_operand* ins, int64_t rows, int64_t cols, int dtype,
//                const double* scalars, void* ws, int64_t R, void* stream);
//   int64_t name##_ws(int64_t rows, int64_t cols, int dtype);
#define MYOPS_EW_SUM_ARGS                                                                                       \
  const myops_out_operand *outs, const myops_operand *ins, int64_t rows, int64_t cols, int dtype,              \
      const double *scalars, void *ws, int64_t R, void *stream
#if !defined(MYOPS_EW_PART) || MYOPS_EW_PART == 4
#define MYOPS_EW_SUM_WS_(name)                                                                                 \
  extern "C" int64_t name##_ws(int64_t rows, int64_t cols, int dtype) {                                        \
    return myops::ew_sum_ws_rows(rows, cols, dtype);                                                           \
  }
#else
#define MYOPS_EW_SUM_WS_(name)
#endif
#define MYOPS_EW_SUM_CUDA_ENTRY(name, Op)                                                                      \
  MYOPS_EW_SUM_WS_(name)                                                                                       \
  MYOPS_EW_ENTRY_(name, MYOPS_EW_SUM_ARGS, (outs, ins, rows, cols, dtype, scalars, ws, R, stream),             \
                  myops::ew_sum_launch<Op>(outs, ins, rows, cols, dtype, scalars, ws, R,                       \
                                           static_cast<cudaStream_t>(stream)))
