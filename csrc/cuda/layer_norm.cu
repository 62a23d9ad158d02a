// layer_norm over rows [M, N] on the rows.cuh engine.
//
// forward:   mu = mean(x);  var = mean((x - mu)^2)  (two passes over the staged row: no cancellation)
//            r = 1 / sqrt(var + eps);  y = (x - mu) * r * w + b      (w = 1, b = 0 when absent)
//            saved: mean, rstd [M] (acc_t<T>)
// backward:  xh = (x - mu) * r;  g = dy * w
//            dx = r * (g - mean(g) - xh * mean(g * xh))
//            dw = sum over rows of dy * xh;  db = sum over rows of dy   (per-row-group partials in a workspace
//            ws [2][groups][N], summed by the caller)
#include "rows.cuh"

namespace {
using namespace myops;
using namespace myops::rows;

// vec_mask bits: 0 x / dy, 1 x (backward), 3 y / dx, 5 w, 6 b.
template <class T>
__global__ void __launch_bounds__(kMaxThreads) ln_fwd_kernel(myops_out_operand y,            // [M, N]
                                                             acc_t<T>* __restrict__ mean,    // [M]
                                                             acc_t<T>* __restrict__ rstd,    // [M]
                                                             myops_operand x,                // [M, N]
                                                             const T* __restrict__ w,        // [N] or null
                                                             const T* __restrict__ b,        // [N] or null
                                                             int64_t M, int64_t N, acc_t<T> eps, int vec_mask,
                                                             Plan p) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ Pair<A> red[32], cred[2];
  Ctx c(p, N);
  const myops_operand in[1] = {x};
  const T* wc = w ? w + c.c0 : nullptr;
  const T* bc = b ? b + c.c0 : nullptr;
  for (int64_t r = c.first_row(); r < M; r += c.row_step()) {
    Tile<T, 1> t(c, in, vec_mask, r, smem);
    t.stage(M);
    A sum = A(0);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A v[VEC];
      t.get(0, j, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) sum += v[e];
    }
    const A mu = c.reduce(Pair<A>{sum, A(0)}, AddOp{}, red, cred).a / A(N);
    A sq = A(0);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A v[VEC];
      t.get(0, j, v, mu);  // lanes past the end read mu: they add 0
#pragma unroll
      for (int e = 0; e < VEC; ++e) sq += (v[e] - mu) * (v[e] - mu);
    }
    const A rs = inv_sqrt(c.reduce(Pair<A>{sq, A(0)}, AddOp{}, red, cred).a / A(N) + eps);
    if (c.rank == 0 && c.tid == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    const OutRow<T> o(y, (vec_mask >> 3) & 1, c, r);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      const int nv = t.valid(j);
      A v[VEC], wv[VEC], bv[VEC];
      t.get(0, j, v);
      if (wc) get_param(wc, (vec_mask >> 5) & 1, j, nv, wv);
      if (bc) get_param(bc, (vec_mask >> 6) & 1, j, nv, bv);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        v[e] = (v[e] - mu) * rs;
        if (wc) v[e] *= wv[e];
        if (bc) v[e] += bv[e];
      }
      o.put(j, nv, v);
    }
  }
  c.finish();
}

template <class T>
__global__ void __launch_bounds__(kMaxThreads) ln_bwd_kernel(myops_out_operand dx,               // [M, N]
                                                             acc_t<T>* __restrict__ ws,          // [2][groups][N]
                                                             myops_operand dy,                   // [M, N]
                                                             myops_operand x,                    // [M, N]
                                                             const acc_t<T>* __restrict__ mean,  // [M]
                                                             const acc_t<T>* __restrict__ rstd,  // [M]
                                                             const T* __restrict__ w,            // [N] or null
                                                             int64_t M, int64_t N, int vec_mask, Plan p) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ Pair<A> red[32], cred[2];
  Ctx c(p, N);
  const myops_operand in[2] = {dy, x};
  const T* wc = w ? w + c.c0 : nullptr;
  const bool dwb = ws != nullptr;
  const ColAcc<T> acc(c, ws, smem + staged_bytes(p, sizeof(T)), N);
  if (dwb) acc.zero(c, 2);
  for (int64_t r = c.first_row(); r < M; r += c.row_step()) {
    Tile<T, 2> t(c, in, vec_mask, r, smem);
    t.stage(M);
    const A mu = mean[r], rs = rstd[r];
    A sg = A(0), sgx = A(0);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      const int nv = t.valid(j);
      A g[VEC], v[VEC], wv[VEC];
      t.get(0, j, g);
      t.get(1, j, v, mu);
      if (wc) get_param(wc, (vec_mask >> 5) & 1, j, nv, wv);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A xh = (v[e] - mu) * rs;
        if (dwb && e < nv) {
          acc[0][j * VEC + e] += g[e] * xh;
          acc[1][j * VEC + e] += g[e];
        }
        const A gw = wc ? mul_rn(g[e], wv[e]) : g[e];
        sg += gw;
        sgx += gw * xh;
      }
    }
    const Pair<A> s = c.reduce(Pair<A>{sg, sgx}, AddOp{}, red, cred);
    const A mg = s.a / A(N), mgx = s.b / A(N);
    const OutRow<T> o(dx, (vec_mask >> 3) & 1, c, r);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      const int nv = t.valid(j);
      A g[VEC], v[VEC], wv[VEC];
      t.get(0, j, g);
      t.get(1, j, v);
      if (wc) get_param(wc, (vec_mask >> 5) & 1, j, nv, wv);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A gw = wc ? mul_rn(g[e], wv[e]) : g[e];
        v[e] = rs * (gw - mg - (v[e] - mu) * rs * mgx);
      }
      o.put(j, nv, v);
    }
  }
  if (dwb) acc.flush(c, 2);
  c.finish();
}

Plan fwd_plan(int64_t M, int64_t N, int dtype) { return make_plan(M, N, elem_size(dtype), 1, 0, 0, true); }
Plan bwd_plan(int64_t M, int64_t N, int dtype, bool ws) {
  return make_plan(M, N, elem_size(dtype), 2, ws ? 2 : 0, dtype == MYOPS_F64 ? 8 : 4, true);
}
}  // namespace

extern "C" int myops_layer_norm_cuda(myops_out_operand y, void* mean, void* rstd, myops_operand x, const void* w,
                                     const void* b, int64_t M, int64_t N, double eps, int dtype, void* stream) {
  if (M <= 0 || N <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int es = sizeof(T);
    Plan p = fwd_plan(M, N, dtype);
    auto kernel = ln_fwd_kernel<T>;
    const int rc = finish_plan(p, kernel, M);
    if (rc) return rc;
    const int mask = vec_ok(x.ptr, x.row_stride, x.col_stride, M, N, es) |
                     vec_ok(y.ptr, y.row_stride, y.col_stride, M, N, es) << 3 | vec_ok(w, 0, 1, 1, N, es) << 5 |
                     vec_ok(b, 0, 1, 1, N, es) << 6;
    return launch(p, kernel, static_cast<cudaStream_t>(stream), y, static_cast<acc_t<T>*>(mean),
                  static_cast<acc_t<T>*>(rstd), x, static_cast<const T*>(w), static_cast<const T*>(b), M, N,
                  (acc_t<T>)eps, mask, p);
  });
}

// Rows of each of the two [rows, N] workspaces (dw, db partials) the backward pass needs (-1: the kernel cannot
// run with its plan on this device).
extern "C" int64_t myops_layer_norm_backward_ws_cuda(int64_t M, int64_t N, int dtype) {
  if (M <= 0 || N <= 0) return 0;
  int64_t rows_ = 0;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    Plan p = bwd_plan(M, N, dtype, true);
    const int rc = finish_plan(p, ln_bwd_kernel<T>, M);
    rows_ = rc ? -1 : p.groups * p.rows_per_cta;
    return rc;
  });
  return rows_;
}

// ws null: no weight/bias gradients; else ws [2][myops_layer_norm_backward_ws_cuda(...)][N] in acc_t.
extern "C" int myops_layer_norm_backward_cuda(myops_out_operand dx, void* ws, myops_operand dy, myops_operand x,
                                              const void* mean, const void* rstd, const void* w, int64_t M,
                                              int64_t N, int dtype, void* stream) {
  if (M <= 0 || N <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int es = sizeof(T);
    Plan p = bwd_plan(M, N, dtype, ws != nullptr);
    auto kernel = ln_bwd_kernel<T>;
    const int rc = finish_plan(p, kernel, M);
    if (rc) return rc;
    const int mask = vec_ok(dy.ptr, dy.row_stride, dy.col_stride, M, N, es) |
                     vec_ok(x.ptr, x.row_stride, x.col_stride, M, N, es) << 1 |
                     vec_ok(dx.ptr, dx.row_stride, dx.col_stride, M, N, es) << 3 | vec_ok(w, 0, 1, 1, N, es) << 5;
    return launch(p, kernel, static_cast<cudaStream_t>(stream), dx, static_cast<acc_t<T>*>(ws), dy, x,
                  static_cast<const acc_t<T>*>(mean), static_cast<const acc_t<T>*>(rstd), static_cast<const T*>(w),
                  M, N, mask, p);
  });
}
