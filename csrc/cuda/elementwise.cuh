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
// Two kernels, both with a grid of about two waves that loops over the problem (per-thread setup -- 64-bit
// address math -- is paid once, not once per 16 bytes) and U independent 16-byte loads per operand in flight:
//   flat: one row, every operand contiguous: tiles of blockDim * VEC * U elements;
//   rows: [rows, cols] with row strides: threads across column vectors, U rows per step.
#pragma once
#include "common.cuh"

namespace myops {

constexpr int kEwThreads = 256;
constexpr int kEwUnroll = 4;

template <int NIN, int NOUT> struct EwArgs {
  myops_operand in[NIN];
  myops_out_operand out[NOUT];
  int64_t rows, cols;
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

template <class T, int VEC, class Op>
__global__ void __launch_bounds__(kEwThreads) ew_flat_kernel(EwArgs<Op::NIN, Op::NOUT> a, Op op) {
  constexpr int NIN = Op::NIN, NOUT = Op::NOUT, U = kEwUnroll;
  const int64_t n = a.cols, tile = (int64_t)kEwThreads * VEC * U;
  for (int64_t base = (int64_t)blockIdx.x * tile; base < n; base += (int64_t)gridDim.x * tile) {
    if (base + tile <= n) {
      Vec<T, VEC> x[U][NIN], y[U][NOUT];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < NIN; ++i)
          x[u][i] = reinterpret_cast<const Vec<T, VEC>*>(static_cast<const T*>(a.in[i].ptr) + base)
              [u * kEwThreads + threadIdx.x];
#pragma unroll
      for (int u = 0; u < U; ++u) ew_apply(op, x[u], y[u]);
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int k = 0; k < NOUT; ++k)
          reinterpret_cast<Vec<T, VEC>*>(static_cast<T*>(a.out[k].ptr) + base)[u * kEwThreads + threadIdx.x] =
              y[u][k];
    } else {
      for (int64_t j = base + threadIdx.x; j < n; j += kEwThreads) ew_flat_one<T>(a, op, j);
    }
  }
}

// Block (tx, ty): tx threads across column vectors, ty across rows. VEC > 1 needs col_stride 1 everywhere.
template <class T, int VEC, class Op>
__global__ void __launch_bounds__(kEwThreads) ew_rows_kernel(EwArgs<Op::NIN, Op::NOUT> a, Op op) {
  constexpr int NIN = Op::NIN, NOUT = Op::NOUT, U = kEwUnroll;
  const int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (c0 >= a.cols) return;
  const int64_t rstep = (int64_t)gridDim.y * blockDim.y;
  const T* ip[NIN];
  T* op_[NOUT];
#pragma unroll
  for (int i = 0; i < NIN; ++i) ip[i] = static_cast<const T*>(a.in[i].ptr) + c0 * a.in[i].col_stride;
#pragma unroll
  for (int k = 0; k < NOUT; ++k) op_[k] = static_cast<T*>(a.out[k].ptr) + c0 * a.out[k].col_stride;
  const int64_t r_first = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
  if (c0 + VEC <= a.cols) {
    for (int64_t r = r_first; r < a.rows; r += U * rstep) {
      Vec<T, VEC> x[U][NIN], y[U][NOUT];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t rr = r + u * rstep;
        if (rr < a.rows) {
#pragma unroll
          for (int i = 0; i < NIN; ++i) {
            const T* p = ip[i] + rr * a.in[i].row_stride;
            if (VEC > 1) {
              x[u][i] = *reinterpret_cast<const Vec<T, VEC>*>(p);
            } else {
              x[u][i].v[0] = *p;
            }
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t rr = r + u * rstep;
        if (rr < a.rows) {
          ew_apply(op, x[u], y[u]);
#pragma unroll
          for (int k = 0; k < NOUT; ++k) *reinterpret_cast<Vec<T, VEC>*>(op_[k] + rr * a.out[k].row_stride) = y[u][k];
        }
      }
    }
  } else {  // the last, partial column vector of every row
    for (int64_t r = r_first; r < a.rows; r += rstep) {
      for (int64_t c = c0; c < a.cols; ++c) {
        Vec<T, 1> x[NIN], y[NOUT];
#pragma unroll
        for (int i = 0; i < NIN; ++i) x[i].v[0] = ip[i][r * a.in[i].row_stride + (c - c0)];
        ew_apply(op, x, y);
#pragma unroll
        for (int k = 0; k < NOUT; ++k) op_[k][r * a.out[k].row_stride + (c - c0)] = y[k].v[0];
      }
    }
  }
}

// Blocks for about two full waves (8 resident 256-thread blocks per multiprocessor).
inline int64_t ew_max_blocks() { return 16LL * sm_count(); }

template <class T, int VEC, class Op> int ew_launch_flat(const EwArgs<Op::NIN, Op::NOUT>& a, const Op& op,
                                                         cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>(ceil_div(a.cols, (int64_t)kEwThreads * VEC * kEwUnroll), ew_max_blocks());
  ew_flat_kernel<T, VEC, Op><<<(unsigned)blocks, kEwThreads, 0, stream>>>(a, op);
  return launch_status();
}

template <class T, int VEC, class Op> int ew_launch_rows(const EwArgs<Op::NIN, Op::NOUT>& a, const Op& op,
                                                         cudaStream_t stream) {
  // Threads along columns first (coalesced); narrow rows leave the rest of the block to rows.
  const int64_t vcols = ceil_div(a.cols, VEC);
  int tx = 1;
  while (tx < kEwThreads && tx < vcols) tx *= 2;
  const int ty = kEwThreads / tx;
  const int64_t gx = ceil_div(vcols, tx);
  if (gx > 0x7fffffff) return MYOPS_EARG;
  const int64_t gy = std::max<int64_t>(1, std::min<int64_t>({ceil_div(a.rows, (int64_t)ty * kEwUnroll),
                                                              ceil_div(ew_max_blocks(), gx), 65535}));
  ew_rows_kernel<T, VEC, Op><<<dim3((unsigned)gx, (unsigned)gy), dim3(tx, ty), 0, stream>>>(a, op);
  return launch_status();
}

template <class T, class Op> int ew_launch_typed(const EwArgs<Op::NIN, Op::NOUT>& a, const Op& op,
                                                 cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  bool unit = true, aligned = true;
  auto check = [&](const void* p, int64_t rs, int64_t cs) {
    unit = unit && cs == 1;
    aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0 && (a.rows == 1 || rs % VEC == 0);
  };
  for (int i = 0; i < Op::NIN; ++i) check(a.in[i].ptr, a.in[i].row_stride, a.in[i].col_stride);
  for (int k = 0; k < Op::NOUT; ++k) check(a.out[k].ptr, a.out[k].row_stride, a.out[k].col_stride);
  if (a.rows == 1 && unit) {
    return aligned ? ew_launch_flat<T, VEC>(a, op, stream) : ew_launch_flat<T, 1>(a, op, stream);
  }
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
  return dispatch_dtype(dtype, [&](auto t) { return ew_launch_typed<decltype(t)>(a, op, stream); });
}

}  // namespace myops

// Defines the C entry point `name` (the ABI every elementwise op shares; see csrc/ops/common.h).
#define MYOPS_EW_CUDA_ENTRY(name, Op)                                                                          \
  extern "C" int name(const myops_out_operand* outs, const myops_operand* ins, int64_t rows, int64_t cols,     \
                      int dtype, const double* scalars, void* stream) {                                        \
    return myops::ew_launch<Op>(outs, ins, rows, cols, dtype, scalars, static_cast<cudaStream_t>(stream));     \
  }
