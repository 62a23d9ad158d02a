// elementwise.cuh: one kernel template for every elementwise op.
//
//   outs[k][r, c] = Op(ins[0][r, c], ..., ins[NIN-1][r, c])_k     for r < rows, c < cols
//
// Each operand is a 2-D strided view (myops_operand): the registration layer collapses any tensor layout it can
// into [rows, cols]; a bias broadcast over rows is an operand with row_stride 0. Op is a functor
//   struct Op { static constexpr int NIN, NOUT; explicit Op(const double* scalars);
//               template <class C> __device__ void operator()(C (&out)[NOUT], const C (&in)[NIN]) const; };
// evaluated in acc_t<T> (fp32 for half types).
#pragma once
#include "common.cuh"

namespace myops {

constexpr int kEwThreads = 256;
constexpr int kEwRowUnroll = 4;  // rows per thread per iteration: 4 independent 16-byte loads in flight per operand

template <int NIN, int NOUT> struct EwArgs {
  myops_operand in[NIN];
  myops_out_operand out[NOUT];
  int64_t rows, cols;
};

// 16-byte vector of VEC elements: one LDG.128/STG.128 per thread per operand when the column is contiguous.
template <class T, int VEC> struct alignas(sizeof(T) * VEC) Vec { T v[VEC]; };

template <class T, int VEC, class Op>
__global__ void __launch_bounds__(kEwThreads) ew_kernel(EwArgs<Op::NIN, Op::NOUT> a, Op op) {
  using C = acc_t<T>;
  constexpr int NIN = Op::NIN, NOUT = Op::NOUT, U = kEwRowUnroll;
  const int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (c0 >= a.cols) return;
  const bool full = c0 + VEC <= a.cols;  // false only for the last, partial vector of a row
  const int64_t row_step = (int64_t)gridDim.y * blockDim.y * U;
  for (int64_t r0 = (int64_t)blockIdx.y * blockDim.y * U + threadIdx.y; r0 < a.rows; r0 += row_step) {
    C x[U][NIN][VEC];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t r = r0 + (int64_t)u * blockDim.y;
      if (r >= a.rows) break;
#pragma unroll
      for (int i = 0; i < NIN; ++i) {
        const T* p = static_cast<const T*>(a.in[i].ptr) + r * a.in[i].row_stride + c0 * a.in[i].col_stride;
        if (VEC > 1 && full) {
          Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
          for (int e = 0; e < VEC; ++e) x[u][i][e] = to_acc(v.v[e]);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            x[u][i][e] = (c0 + e < a.cols) ? to_acc(p[e * a.in[i].col_stride]) : C(0);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t r = r0 + (int64_t)u * blockDim.y;
      if (r >= a.rows) break;
      Vec<T, VEC> y[NOUT];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        C in[NIN], out[NOUT];
#pragma unroll
        for (int i = 0; i < NIN; ++i) in[i] = x[u][i][e];
        op(out, in);
#pragma unroll
        for (int k = 0; k < NOUT; ++k) y[k].v[e] = from_acc<T>(out[k]);
      }
#pragma unroll
      for (int k = 0; k < NOUT; ++k) {
        T* p = static_cast<T*>(a.out[k].ptr) + r * a.out[k].row_stride + c0 * a.out[k].col_stride;
        if (VEC > 1 && full) {
          *reinterpret_cast<Vec<T, VEC>*>(p) = y[k];
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            if (c0 + e < a.cols) p[e * a.out[k].col_stride] = y[k].v[e];
        }
      }
    }
  }
}

template <class T, int VEC, class Op> int ew_launch_vec(const EwArgs<Op::NIN, Op::NOUT>& a, const Op& op,
                                                        cudaStream_t stream) {
  // Block shape: threads along columns first (coalesced), the rest of the block along rows, so that narrow rows
  // (cols of a few vectors) still fill the block.
  const int64_t vcols = ceil_div(a.cols, VEC);
  int tx = 1;
  while (tx < kEwThreads && tx < vcols) tx *= 2;
  const int ty = kEwThreads / tx;
  const int64_t gx = ceil_div(vcols, tx);
  const int64_t gy = std::min<int64_t>(ceil_div(a.rows, (int64_t)ty * kEwRowUnroll), 65535);
  if (gx > 0x7fffffff) return MYOPS_EARG;
  ew_kernel<T, VEC, Op><<<dim3((unsigned)gx, (unsigned)gy), dim3(tx, ty), 0, stream>>>(a, op);
  return launch_status();
}

// The 16-byte path needs unit column strides, 16-byte aligned pointers and row strides that keep every row
// aligned; anything else takes the one-element path (still coalesced when col_stride == 1).
template <class T, class Op> int ew_launch_typed(const EwArgs<Op::NIN, Op::NOUT>& a, const Op& op,
                                                 cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  bool vec = true;
  auto ok = [&](const void* p, int64_t rs, int64_t cs) {
    return cs == 1 && (reinterpret_cast<uintptr_t>(p) % 16) == 0 && (a.rows == 1 || rs % VEC == 0);
  };
  for (int i = 0; i < Op::NIN; ++i) vec = vec && ok(a.in[i].ptr, a.in[i].row_stride, a.in[i].col_stride);
  for (int k = 0; k < Op::NOUT; ++k) vec = vec && ok(a.out[k].ptr, a.out[k].row_stride, a.out[k].col_stride);
  return vec ? ew_launch_vec<T, VEC>(a, op, stream) : ew_launch_vec<T, 1>(a, op, stream);
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
