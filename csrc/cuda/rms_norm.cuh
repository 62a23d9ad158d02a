// rms_norm.cuh: the kernels of rms_norm (ADD = false) and add_rms_norm (ADD = true), on the rows.cuh engine.
//
// forward, per row of N:   s = x (+ residual, rounded to T like the eager sum)
//                          r = 1 / sqrt(mean(s^2) + eps)            (saved: rstd [M] in acc_t<T>)
//                          y = s * r * w                            (w = 1 when absent)
// backward:                g = dy * w
//                          ds = r * (g - s * r^2 * mean(g * s))  (+ ds_out, the gradient of add_rms_norm's s output)
//                          dw = sum over rows of dy * s * r     (per-row-group partials in a workspace)
#pragma once
#include "rows.cuh"

namespace myops {
namespace rms {
using namespace rows;

// vec_mask bits: 0 x / dy, 1 residual / s, 2 ds_out, 3 y / dx, 4 s output, 5 w.
template <class T, bool ADD>
__global__ void __launch_bounds__(kMaxThreads, 2) fwd_kernel(myops_out_operand y,      // [M, N]
                                                   myops_out_operand s_out,  // [M, N] x + residual (ADD)
                                                   acc_t<T>* __restrict__ rstd,  // [M]
                                                   myops_operand x,          // [M, N]
                                                   myops_operand res,        // [M, N] (ADD)
                                                   const T* __restrict__ w,  // [N] or null
                                                   int64_t M, int64_t N, acc_t<T> eps, int vec_mask, Plan p) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T), NIN = ADD ? 2 : 1;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ Pair<A> red[32], cred[2];
  Ctx c(p, N);
  myops_operand in[NIN];
  in[0] = x;
  if constexpr (ADD) in[NIN - 1] = res;
  const T* wc = w ? w + c.c0 : nullptr;
  for (int64_t r = c.first_row(); r < M; r += c.row_step()) {
    Tile<T, NIN> t(c, in, vec_mask, r, smem);
    t.stage(M);
    auto load = [&](int64_t j, A (&v)[VEC]) {
      t.get(0, j, v);
      if constexpr (ADD) {
        A u[VEC];
        t.get(1, j, u);
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = to_acc(from_acc<T>(v[e] + u[e]));
      }
    };
    A ss = A(0);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A v[VEC];
      load(j, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) ss += v[e] * v[e];
    }
    const A total = c.reduce(Pair<A>{ss, A(0)}, AddOp{}, red, cred).a;
    const A rs = inv_sqrt(total / A(N) + eps);
    if (rstd != nullptr && c.rank == 0 && c.tid == 0) rstd[r] = rs;
    const OutRow<T> yo(y, (vec_mask >> 3) & 1, c, r);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      const int nv = t.valid(j);
      A v[VEC], wv[VEC];
      load(j, v);
      if constexpr (ADD) OutRow<T>(s_out, (vec_mask >> 4) & 1, c, r).put(j, nv, v);
      if (wc) get_param(wc, (vec_mask >> 5) & 1, j, nv, wv);
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = wc ? v[e] * rs * wv[e] : v[e] * rs;
      yo.put(j, nv, v);
    }
  }
  c.finish();
}

template <class T, bool ADD>
__global__ void __launch_bounds__(kMaxThreads) bwd_kernel(myops_out_operand dx,          // [M, N]
                                                   acc_t<T>* __restrict__ ws,     // [groups, N] dw partials
                                                   myops_operand dy,              // [M, N]
                                                   myops_operand s,               // [M, N] (x, or x + residual)
                                                   myops_operand ds_out,          // [M, N] (ADD)
                                                   const acc_t<T>* __restrict__ rstd,  // [M]
                                                   const T* __restrict__ w,       // [N] or null
                                                   int64_t M, int64_t N, int vec_mask, Plan p) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T), NIN = ADD ? 3 : 2;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ Pair<A> red[32], cred[2];
  Ctx c(p, N);
  myops_operand in[NIN];
  in[0] = dy;
  in[1] = s;
  if constexpr (ADD) in[2] = ds_out;
  const T* wc = w ? w + c.c0 : nullptr;
  const bool dw = ws != nullptr;  // accumulate the weight gradient
  const ColAcc<T> acc(c, ws, smem + staged_bytes(p, sizeof(T)), N);
  if (dw) acc.zero(c, 1);
  for (int64_t r = c.first_row(); r < M; r += c.row_step()) {
    Tile<T, NIN> t(c, in, vec_mask, r, smem);
    t.stage(M, 2);  // ds_out is read once, in the output pass
    const A rs = rstd[r];
    A dot = A(0);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      const int nv = t.valid(j);
      A g[VEC], v[VEC], wv[VEC];
      t.get(0, j, g);
      t.get(1, j, v);
      if (wc) {
        get_param(wc, (vec_mask >> 5) & 1, j, nv, wv);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          if (dw && e < nv) acc[0][j * VEC + e] += g[e] * v[e] * rs;
          g[e] = mul_rn(g[e], wv[e]);
        }
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) dot += g[e] * v[e];
    }
    const A k = c.reduce(Pair<A>{dot, A(0)}, AddOp{}, red, cred).a / A(N) * rs * rs;
    const OutRow<T> o(dx, (vec_mask >> 3) & 1, c, r);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      const int nv = t.valid(j);
      A g[VEC], v[VEC], wv[VEC], d[VEC];
      t.get(0, j, g);
      t.get(1, j, v);
      if (wc) {
        get_param(wc, (vec_mask >> 5) & 1, j, nv, wv);
#pragma unroll
        for (int e = 0; e < VEC; ++e) g[e] = mul_rn(g[e], wv[e]);
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) d[e] = rs * (g[e] - v[e] * k);
      if constexpr (ADD) {
        A u[VEC];
        t.get(2, j, u, A(0), false);
#pragma unroll
        for (int e = 0; e < VEC; ++e) d[e] += u[e];
      }
      o.put(j, nv, d);
    }
  }
  if (dw) acc.flush(c, 1);
  c.finish();
}

inline Plan fwd_plan(int64_t M, int64_t N, int dtype, bool add) {
  return make_plan(M, N, elem_size(dtype), add ? 2 : 1, 0, 0, true);
}
inline Plan bwd_plan(int64_t M, int64_t N, int dtype, bool weight) {
  return make_plan(M, N, elem_size(dtype), 2, weight ? 1 : 0, dtype == MYOPS_F64 ? 8 : 4, true);
}

template <bool ADD>
int forward(myops_out_operand y, myops_out_operand s_out, void* rstd, myops_operand x, myops_operand res,
            const void* w, int64_t M, int64_t N, double eps, int dtype, void* stream) {
  if (M <= 0 || N <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int es = sizeof(T);
    Plan p = fwd_plan(M, N, dtype, ADD);
    auto kernel = fwd_kernel<T, ADD>;
    int rc = finish_plan(p, kernel, M);
    if (rc) return rc;
    const int mask = vec_ok(x.ptr, x.row_stride, x.col_stride, M, N, es) |
                     (ADD && vec_ok(res.ptr, res.row_stride, res.col_stride, M, N, es)) << 1 |
                     vec_ok(y.ptr, y.row_stride, y.col_stride, M, N, es) << 3 |
                     (ADD && vec_ok(s_out.ptr, s_out.row_stride, s_out.col_stride, M, N, es)) << 4 |
                     vec_ok(w, 0, 1, 1, N, es) << 5;
    return launch(p, kernel, static_cast<cudaStream_t>(stream), y, s_out, static_cast<acc_t<T>*>(rstd), x, res,
                  static_cast<const T*>(w), M, N, (acc_t<T>)eps, mask, p);
  });
}

// Rows of the dw workspace [rows, N] the backward pass needs (0 when dw is not wanted, -1 if the kernel cannot
// run with its plan on this device). The backward pass
// accumulates dw exactly when it gets a workspace.
inline int64_t backward_ws_rows(int64_t M, int64_t N, int dtype, bool weight, bool add) {
  if (!weight || M <= 0 || N <= 0) return 0;
  int64_t rows_ = 0;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    Plan p = bwd_plan(M, N, dtype, true);
    const int rc = add ? finish_plan(p, bwd_kernel<T, true>, M) : finish_plan(p, bwd_kernel<T, false>, M);
    rows_ = rc ? -1 : p.groups * p.rows_per_cta;
    return rc;
  });
  return rows_;
}

template <bool ADD>
int backward(myops_out_operand dx, void* ws, myops_operand dy, myops_operand s, myops_operand ds_out,
             const void* rstd, const void* w, int64_t M, int64_t N, int dtype, void* stream) {
  if (M <= 0 || N <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int es = sizeof(T);
    Plan p = bwd_plan(M, N, dtype, ws != nullptr);
    auto kernel = bwd_kernel<T, ADD>;
    int rc = finish_plan(p, kernel, M);
    if (rc) return rc;
    const int mask = vec_ok(dy.ptr, dy.row_stride, dy.col_stride, M, N, es) |
                     vec_ok(s.ptr, s.row_stride, s.col_stride, M, N, es) << 1 |
                     (ADD && vec_ok(ds_out.ptr, ds_out.row_stride, ds_out.col_stride, M, N, es)) << 2 |
                     vec_ok(dx.ptr, dx.row_stride, dx.col_stride, M, N, es) << 3 |
                     vec_ok(w, 0, 1, 1, N, es) << 5;
    return launch(p, kernel, static_cast<cudaStream_t>(stream), dx, static_cast<acc_t<T>*>(ws), dy, s, ds_out,
                  static_cast<const acc_t<T>*>(rstd), static_cast<const T*>(w), M, N, mask, p);
  });
}

}  // namespace rms
}  // namespace myops
