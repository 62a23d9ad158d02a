// softmax.cuh: the kernels of softmax (LOG = false) and log_softmax (LOG = true) over rows [M, N], on the rows.cuh
// engine.
//
// forward:   m = max(x), s = sum(exp(x - m))   (one pass: each thread keeps a running (m, s), rescaling s when m
//                                              grows; threads, CTAs and cluster CTAs combine their pairs)
//            softmax: y = exp(x - m) / s        log_softmax: y = (x - m) - log(s)
// backward:  softmax: dx = y * (dy - sum(dy * y))      log_softmax: dx = dy - exp(y) * sum(dy)
// Rows of -inf give NaN and NaN propagates, as in eager.
#pragma once
#include "rowpipe.cuh"

namespace myops {
namespace softmax {
using namespace rows;

// Folds the VEC values of a slot into the running (m, s).
template <class T, int VEC>
__device__ __forceinline__ void online_update(acc_t<T>& m, acc_t<T>& s, const acc_t<T> (&v)[VEC], int nv) {
  using A = acc_t<T>;
  A mx = m;
#pragma unroll
  for (int e = 0; e < VEC; ++e)
    if (e < nv && v[e] > mx) mx = v[e];
  if (mx != m) {  // m grew (never from -inf to -inf): rescale what was summed against the old maximum
    s = m == neg_inf<A>() ? s : s * exp_of<T>(m - mx);
    m = mx;
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e)
    if (e < nv) s += v[e] == neg_inf<A>() ? A(0) : exp_of<T>(v[e] - m);
}

// The backward's element from dy's g and y's v, k the row's sum (softmax: sum(dy y), log_softmax: sum(dy)).
template <class T, bool LOG>
__device__ __forceinline__ acc_t<T> bwd_elem(acc_t<T> g, acc_t<T> v, acc_t<T> k) {
  return LOG ? g - exp_of<T>(v) * k : v * (g - k);
}

// vec_mask bits: 0 x / dy, 1 y (backward), 3 y / dx.
template <class T, bool LOG>
__global__ void __launch_bounds__(kMaxThreads, 2) fwd_kernel(myops_out_operand y,  // [M, N]
                                                          myops_operand x,      // [M, N]
                                                          int64_t M, int64_t N, int vec_mask, Plan p) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ Pair<A> red[32], cred[2];
  Ctx c(p, N);
  const myops_operand in[1] = {x};
  for (int64_t r = c.first_row(); r < M; r += c.row_step()) {
    Tile<T, 1> t(c, in, vec_mask, r, smem);
    t.stage(M);
    A m = neg_inf<A>(), s = A(0);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A v[VEC];
      t.get(0, j, v);
      online_update<T, VEC>(m, s, v, t.valid(j));
    }
    const Pair<A> ms = c.reduce(Pair<A>{m, s}, OnlineSoftmaxOp<T>{}, red, cred);
    const A mx = ms.a;
    const A logs = log_of<T>(ms.b);
    const A inv = A(1) / ms.b;
    const OutRow<T> o(y, (vec_mask >> 3) & 1, c, r);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A v[VEC];
      t.get(0, j, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        if constexpr (LOG) v[e] = (v[e] - mx) - logs;  // not v - (mx + logs): that rounds at mx's magnitude
        else if constexpr (sizeof(T) == 2) v[e] = exp_of<T>(v[e] - mx) * inv;  // the rounding to T hides 1 ulp
        else v[e] = exp_of<T>(v[e] - mx) / ms.b;
      }
      o.put(j, t.valid(j), v);
    }
  }
  c.finish();
}

template <class T, bool LOG>
__global__ void __launch_bounds__(kMaxThreads) bwd_kernel(myops_out_operand dx,  // [M, N]
                                                          myops_operand dy,      // [M, N]
                                                          myops_operand y,       // [M, N] the forward output
                                                          int64_t M, int64_t N, int vec_mask, Plan p) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ Pair<A> red[32], cred[2];
  Ctx c(p, N);
  const myops_operand in[2] = {dy, y};
  for (int64_t r = c.first_row(); r < M; r += c.row_step()) {
    Tile<T, 2> t(c, in, vec_mask, r, smem);
    t.stage(M, LOG ? 1 : 2);  // log_softmax reads y once, in the output pass
    A acc = A(0);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A g[VEC], v[VEC];
      t.get(0, j, g);
      if constexpr (!LOG) t.get(1, j, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc += LOG ? g[e] : g[e] * v[e];
    }
    const A k = c.reduce(Pair<A>{acc, A(0)}, AddOp{}, red, cred).a;
    const OutRow<T> o(dx, (vec_mask >> 3) & 1, c, r);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A g[VEC], v[VEC];
      t.get(0, j, g);
      t.get(1, j, v, A(0), !LOG);
#pragma unroll
      for (int e = 0; e < VEC; ++e) g[e] = bwd_elem<T, LOG>(g[e], v[e], k);
      o.put(j, t.valid(j), g);
    }
  }
  c.finish();
}

// Writes this thread's NS slots of a row of y (thread t of tpr), given the row's max m and sum of exp(x - ms)
// (ms = exp_shift(m)); get(s, a) fills slot s's x (EXPED: exp(x - ms), which 16-bit softmax keeps from its sum).
template <class T, int NS, bool LOG, bool EXPED = false, class Get>
__device__ __forceinline__ void write_row(T* __restrict__ row, int N, int t, int tpr, acc_t<T> m, acc_t<T> sum,
                                          Get&& get) {
  static_assert(!EXPED || (sizeof(T) == 2 && !LOG), "EXPED: 16-bit softmax only");
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  const A ms = rr::exp_shift(m), logs = log_of<T>(sum), inv = A(1) / sum;
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    const int c = rr::Regs<T, NS>::col(s, t, tpr);
    if (c >= N) break;
    A a[VEC];
    get(s, a);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      if constexpr (LOG) a[e] = (a[e] - m) - logs;  // not a - (m + logs): that rounds at m's magnitude
      else if constexpr (sizeof(T) == 2) a[e] = (EXPED ? a[e] : exp_of<T>(a[e] - ms)) * inv;  // T hides 1 ulp
      else a[e] = div_rn(exp_of<T>(a[e] - ms), sum, inv);
    }
    rr::store(row, c, a);
  }
}

// ---- fast path (regrow.cuh): rows in registers; two exact reductions (max, then sum) instead of the online pair.
// softmax's 16-bit rows of up to 4 vectors per thread keep exp(x - max) in fp32 registers from the sum's pass, which
// the output pass then scales, where it converted x and took exp again: Nsight Compute, bf16 [65536, 1024] (H200),
// 39.8M -> 31.7M instructions (at 78.8% of DRAM bandwidth either way); H200, forward, % of copy, two rounds: [16384,
// 4096] 93.8 / 94.2 -> 94.5 / 94.8, N = 1024 93.9 / 93.8 -> 94.4 / 94.4, N = 2048 94.0 / 93.9 -> 94.6 / 94.5 (63
// registers instead of 40). Not log_softmax, whose output pass needs only x (held converted: within 0.3 either way),
// nor rms_norm's and layer_norm's 16-bit forwards with x held converted (64 registers, spills and rematerialized
// conversions: layer_norm -0.5 to -1.1, rms_norm [16384, 4096] 93.5 -> 88.1; unbounded, 86 registers, layer_norm
// 90.3 -> 78.0 at N = 1024). -DMYOPS_SM_HOLD=0 converts on each pass (A/B).
#ifndef MYOPS_SM_HOLD
#define MYOPS_SM_HOLD 1
#endif
template <class T, int NS, bool LOG> constexpr bool kHold = MYOPS_SM_HOLD && sizeof(T) == 2 && NS <= 4 && !LOG;
// Row r's output from its registers v (slots past N hold -inf), reduced by red (RowReduce, WarpReduce) over the
// row's tpr threads; live: r < M (a spare row slot of a CTA takes part in the reductions and writes nothing).
template <class T, int NS, bool LOG, class R>
__device__ __forceinline__ void rr_fwd_row(const rr::Regs<T, NS>& v, R& red, T* __restrict__ yr, int N, int t, int tpr,
                                           bool live) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  const A m = red(rr::thread_max(v), rr::Max{}, neg_inf<A>());
  const A ms = rr::exp_shift(m);
  if constexpr (kHold<T, NS, LOG>) {
    A ex[NS][VEC];  // exp(x - ms); slots past N hold -inf: 0
    A se = A(0);
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
      for (int e = 0; e < VEC; ++e) se += ex[s][e] = exp_of<T>(v.at(s, e) - ms);
    const A sum = red(se, rr::Sum{}, A(0));
    if (!live) return;
    write_row<T, NS, LOG, true>(yr, N, t, tpr, m, sum, [&](int s, A(&a)[VEC]) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] = ex[s][e];
    });
  } else {
    const A sum = red(rr::thread_exp_sum<false>(v, ms, N, t, tpr).a, rr::Sum{}, A(0));
    if (!live) return;
    write_row<T, NS, LOG>(yr, N, t, tpr, m, sum, [&](int s, A(&a)[VEC]) { v.fresh(s, a); });
  }
}
template <class T, int NS, bool LOG>
__global__ void __launch_bounds__(rr::max_threads<T>()) rr_fwd_kernel(T* __restrict__ y, int64_t ys,        // [M, N]
                                                      const T* __restrict__ x, int64_t xs,  // [M, N]
                                                      int64_t M, int N, int tpr, int staged, bool last) {
  using A = acc_t<T>;
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  extern __shared__ __align__(16) unsigned char stage_smem[];
  const rr::Lane l(tpr);
  rr::RowReduce red(red_buf, tpr);
  const rr::L2Hint h = rr::l2_hint(last);
  rr::Stage<T, NS> st(stage_smem, staged);
  const T ninf = from_acc<T>(neg_inf<A>());
  st.start(x, xs, l.first() + l.slot, l.step(), M, N, l.t, tpr);
  for (int64_t r0 = l.first(); r0 < M; r0 += l.step()) {
    const int64_t r = r0 + l.slot;
    rr::Regs<T, NS> v;
    if (staged) st.take(v, r, M, N, l.t, tpr, ninf);
    else v.load_row(x, xs, r, M, N, l.t, tpr, ninf, h);
    st.next(x, xs, r, l.step(), M, N, l.t, tpr, rr::thread_max(v));
    rr_fwd_row<T, NS, LOG>(v, red, y + r * ys, N, l.t, tpr, r < M);
  }
}
// 16-bit rows of one warp (rr::warp_row_geo): rr_fwd_kernel's reductions and output, one row per warp, the threads
// per row known at compile time; held to 64 registers (log_softmax at 8 vectors per thread took 128, and 64 bytes of
// spills at 64: its rows of 8 keep the register kernel).
template <class T, int NS, bool LOG, bool FULL>
__global__ void __launch_bounds__(512, 2) wr_fwd_kernel(T* __restrict__ y, int64_t ys,        // [M, N]
                                                        const T* __restrict__ x, int64_t xs,  // [M, N]
                                                        int64_t M, int N, bool last) {
  const rr::WarpRow wr;
  rr::Regs<T, NS> v;
  if (!wr.load<FULL>(v, x, xs, M, N, last, from_acc<T>(neg_inf<acc_t<T>>()))) return;
  rr::WarpReduce red;
  rr_fwd_row<T, NS, LOG>(v, red, y + wr.r * ys, N, wr.t, 32, true);
}

template <class T, int NS, bool LOG>
__global__ void __launch_bounds__(NS > 4 ? 512 : rr::max_threads<T>()) rr_bwd_kernel(T* __restrict__ dx, int64_t dxs,  // [M, N]
                                                      const T* __restrict__ dy, int64_t dys,  // [M, N]
                                                      const T* __restrict__ y, int64_t ys,    // [M, N]
                                                      int64_t M, int N, int tpr, bool last) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  const rr::Lane l(tpr);
  rr::RowReduce red(red_buf, tpr);
  const T zero = from_acc<T>(A(0));
  const rr::L2Hint h = rr::l2_hint(last);
  for (int64_t r0 = l.first(); r0 < M; r0 += l.step()) {
    const int64_t r = r0 + l.slot;
    const bool live = r < M;
    rr::Regs<T, NS> g, v;
    g.load_row(dy, dys, r, M, N, l.t, tpr, zero, h);
    v.load_row(y, ys, r, M, N, l.t, tpr, zero, h);
    A acc = A(0);
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc += LOG ? g.at(s, e) : g.at(s, e) * v.at(s, e);
    const A k = red(acc, rr::Sum{}, A(0));
    if (!live) continue;
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int c = rr::Regs<T, NS>::col(s, l.t, tpr);
      if (c >= N) break;
      A a[VEC], b[VEC];
      g.fresh(s, a);
      v.fresh(s, b);
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] = bwd_elem<T, LOG>(a[e], b[e], k);
      rr::store(dx + r * dxs, c, a);
    }
  }
}

// Long rows as a pipeline (rowpipe.cuh): x's slices arrive by bulk copies, STAGES rows ahead of the row being
// written, into shared memory; the first pass takes each thread's (max, sum of exp(x - max)) and sends the pair
// over the cluster (the online combine, PairMaxExp), and row j + 1's first pass runs while row j's pair crosses the
// cluster; the second pass writes y from the stage. rr_fwd_kernel's CTAs hold the row in registers and take one
// row each: HBM idled through each row's two cluster reductions.
using PipeRed = rp::SplitReduceOf<rp::PairMaxExp<float>, 8>;  // (the combine's exp is fp32's for every T)
constexpr int kPipeCta = 512, kPipeNs = 8;
template <class T> using PipeFit = rp::Fit<T, kPipeNs, kPipeCta, 1, 0, PipeRed>;
template <class T, bool LOG>
__global__ void __launch_bounds__(kPipeCta, 1) rp_fwd_kernel(T* __restrict__ y, int64_t ys,        // [M, N]
                                                             const T* __restrict__ x, int64_t xs,  // [M, N]
                                                             int64_t M, int N, int tpr, int lag, bool last) {
  constexpr int NS = kPipeNs;
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  using L = typename PipeFit<T>::S;
  extern __shared__ __align__(128) unsigned char pipe_smem[];
  const typename PipeFit<T>::P pipe(pipe_smem, L::bars(pipe_smem), true, rr::l2_hint(last));
  const PipeRed red(L::reduce(pipe_smem));
  const rr::Lane l(tpr);
  const T* const base[1] = {x};
  const int64_t rstr[1] = {xs};
  // this thread's (max, sum of exp(x - max)) of row r's slots in stage b
  const auto pass1 = [&](int b, int64_t) {
    A v[NS][VEC];
    A m = neg_inf<A>();
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      if (rr::Regs<T, NS>::col(s, l.t, tpr) < N) {
        pipe.get(b, 0, s, v[s]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[s][e] = neg_inf<A>();  // past N: adds exp(-inf) = 0
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) m = fmaxf(m, v[s][e]);
    }
    const A ms = rr::exp_shift(m);
    A se = A(0);
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
      for (int e = 0; e < VEC; ++e) se += exp_of<T>(v[s][e] - ms);
    return float2{m, se};
  };
  // row r's output from stage b, with the row's (max, sum)
  const auto pass2 = [&](int b, int64_t r, float2 tot) {
    write_row<T, NS, LOG>(y + r * ys, N, l.t, tpr, tot.x, tot.y, [&](int s, A(&a)[VEC]) { pipe.get(b, 0, s, a); });
  };
  pipe.run_ahead(base, rstr, l.first(), l.step(), M, N, tpr, red, lag, pass1, pass2);
}

// MYOPS_ROW_PIPE_FWD: 1 (default) the policy of pipe_fwd_geo, 0 never rp_fwd_kernel, 2 every row it holds that the
// register kernel splits over a cluster (A/B). MYOPS_ROW_PIPE_LAG (1-3): rows its first passes run ahead (tuning).
// Read once.
inline int pipe_fwd_mode() {
  static const int v = rr::env_knob("MYOPS_ROW_PIPE_FWD", 1, [](int m) { return m >= 0 && m <= 2; });
  return v;
}
inline int pipe_fwd_lag() {
  static const int v = rr::env_knob("MYOPS_ROW_PIPE_LAG", 1, [](int n) { return n >= 1 && n <= 3; });
  return v;
}
// The pipeline's geometry for a row of N that the register kernel splits over a cluster (ns = 0: none): 8 vectors per
// thread in the fewest CTAs (2-16) of up to kPipeCta threads. By default only fp32 rows that need 16 CTAs (over 131072
// elements) take it, where it measured faster (H200, forward, % of copy, register kernel -> pipeline at lag 1:
// N = 262144 softmax 70.5 -> 76.0, log_softmax 74.1 -> 85.1); elsewhere it lost 10-35 points (N = 65536 softmax bf16
// 89.5 -> 52.7, fp32 91.2 -> 62.3; bf16 N = 262144 79.7 -> 65.7), and so did 4 vectors per thread, CTAs of 1024
// threads at 2 or 4 vectors (measured at b38f955, BENCHMARKS.md session 18) and first passes 2 or 3 rows ahead.
template <class T> rr::Geo pipe_fwd_geo(int64_t N) {
  const int mode = pipe_fwd_mode();
  constexpr int vec = 16 / sizeof(T);
  if (mode == 0 || N % vec != 0) return {};
  const int64_t need = ceil_div(N / vec, (int64_t)kPipeNs);
  for (int c = 2; c <= 16; c *= 2) {
    const int64_t t = ceil_div(need, (int64_t)c);
    if (t > kPipeCta) continue;
    if (mode == 1 && !(sizeof(T) == 4 && c == 16)) return {};
    rr::Geo g;
    g.ns = kPipeNs;
    g.cluster = c;
    g.threads = (int)ceil_div(t, (int64_t)32) * 32;
    g.tpr = g.threads * c;
    g.rows = 1;
    g.smem = PipeFit<T>::S::bytes();
    return g;
  }
  return {};
}

// The 16-bit forward's rows split over a cluster aim for CTAs of 128 threads, where that takes at most 8 of them, else
// 256 as fp32's: H200, forward, % of copy, 256 -> 128, two rounds: N = 65536 (8 CTAs of 128 instead of 4 of 256)
// softmax bf16 89.0 / 89.2 -> 92.3 / 92.3, fp16 89.9 -> 92.4 / 92.5, log_softmax bf16 91.7 / 92.0 -> 93.3 / 93.4,
// fp16 92.1 / 92.2 -> 93.3 / 93.5; at N = 131072 (16 CTAs of 128 against 8 of 256) softmax bf16 87.6 -> 86.8,
// log_softmax 90.7 / 90.8 -> 90.1; CTAs of 64 at N = 65536: softmax bf16 65.0. fp32 lost at N = 65536 (softmax
// 90.7 -> 88.3, log_softmax 97.6 -> 97.4). -DMYOPS_SM_CTA16=256 restores 256 (A/B).
#ifndef MYOPS_SM_CTA16
#define MYOPS_SM_CTA16 128
#endif
constexpr int kFwdCta16 = MYOPS_SM_CTA16;
// Vectors per thread (0: fp64 takes the rows.cuh engine); forward holds one row, backward two.
template <class T> constexpr int kFwdNs = sizeof(T) == 8 ? 0 : 8;
template <class T> constexpr int kBwdNs = sizeof(T) == 8 ? 0 : 4;
// min_ns: the forward takes at least 4 vectors per thread, fp32 8 (rr::geometry): H200, forward, % of copy, [65536,
// 1024] bf16 65.8 -> 94.0, fp32 88.7 -> 97.8; [32768, 2048] bf16 89.4 -> 94.1, fp32 94.2 -> 97.9 (torch.compile 93.1,
// 97.3, 39.1, 73.6).
// cta: the threads per CTA a row split over a cluster aims for (rr::cluster_cta); row_cta: those of a CTA that rows
// of up to 64 threads share (rr::geometry). softmax's 16-bit forward takes 256 for rows of one warp: H200, bf16
// [65536, 1024], % of copy, 128 -> 256, three rounds 94.2 / 94.3 / 94.2 -> 94.6 / 94.7 / 94.6, two more 94.2 / 94.3
// -> 94.7 / 94.7 (torch.compile 94.6). log_softmax keeps 128 (94.0 / 93.9 / 93.9 -> 94.0 / 93.8 / 93.8, then 94.2 /
// 94.1 -> 94.0 / 93.9), as do fp32 (97.8 / 97.8 / 97.9 -> 97.7 / 97.7 / 97.8) and rows of two warps ([32768, 2048]
// bf16 94.7 -> 92.6, one round).
template <int MaxNs>
rr::Geo rr_geo(int64_t N, int elem, int min_ns = 1, int cta = 256, int row_cta = rr::kCtaThreads) {
  if constexpr (MaxNs == 0) return {};
  else return rr::geometry(N, elem, MaxNs, elem == 4 ? 1024 : 512, rr::target_tpr(), rr::kMaxCluster,
                          rr::cluster_cta(cta), min_ns, row_cta);
}
// Backward: fp32 rows longer than 4 vectors x 1024 threads x 8 CTAs (and than 16 CTAs of 512) take 8 vectors per
// thread in 512-thread CTAs (that kernel is bound to 512 threads, 128 registers), up to 262144 elements in a cluster
// of 16, instead of the rows.cuh engine (fwd+bwd at N = 262144 was 34% of copy on the H200).
template <class T> constexpr int kBwdLaunchNs = sizeof(T) == 4 ? 8 : kBwdNs<T>;
template <class T> rr::Geo rr_bwd_geo(int64_t N) {
  rr::Geo g = rr_geo<kBwdNs<T>>(N, sizeof(T));
  if (sizeof(T) == 4 && !g.ns) {
    g = rr::geometry(N, sizeof(T), 8, 512, rr::target_tpr(), rr::kMaxCluster);
    if (g.cluster == 1) g = rr::Geo{};
  }
  return g;
}

// Misaligned rows (N not a multiple of the 16-byte vector, as GPT-2's vocabulary of 50257 or an odd key length, or rows
// off a 16-byte boundary), x and y of the same phase (each row of y as far from a 16-byte boundary as x's): the
// forward, which the rows.cuh engine runs with one-element loads and stores wherever a row is misaligned. A row's head
// (to its first 16-byte boundary) and tail (after its last whole vector), under VEC elements each, one element a thread
// (up to XE on rows of fewer threads than those: mis_extras); the rest in 16-byte loads, NS vectors a thread, all
// issued before the fold; the fold, its reduction and the outputs are fwd_kernel's (the same formulas, in the same
// order within a thread; softmax's at 1 and 2 vectors a thread: KEEP, in mis_fwd_row). blockDim.x threads a row: 32 (or
// 4 to 16: mis_subwarp) and blockDim.y rows a CTA, or a multiple of 32 and one row (mis_fwd_geo). H200, forward /
// forward+backward, % of copy (session 55, torch 2.11), the engine -> these: bf16 [65536, 1001] 17.1 / 19.9 -> 67.9 /
// 83.4 (eager 57.2 / 46.1, torch.compile 78.4 / 81.4), fp32 32.9 / 30.4 -> 67.9 / 84.4, bf16 [16384, 4095] 16.3 / 19.3
// -> 68.7 / 83.6, bf16 [4096, 50257] 9.5 / 9.8 -> 48.7 / 14.6 (its backward on the engine: past mis_bwd_geo).
// MYOPS_SOFTMAX_MIS=0: the engine (A/B). With the forward's statistics in two passes (mis_two, session 56): bf16
// [65536, 1001] 92.0 / 96.0 (eager 57.5 / 46.3, compile 78.8 / 81.4), fp32 93.7 / 98.2 (88.3 / 61.2, 89.8 / 96.1).
constexpr int kMisThreads = 1024, kMisThreads8 = 896, kMisRows = 8;
// A 16-byte vector held as words (not an element array: 16-bit elements were given a register each, and bf16
// spilled), its elements in acc_t.
template <class T> __device__ __forceinline__ void word_vec(const uint4& q, acc_t<T> (&a)[16 / sizeof(T)]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int e = 0; e < 16 / (int)sizeof(T); ++e)
    a[e] = sizeof(T) == 4 ? rr::word_elem<T>(w[e], 0) : rr::word_elem<T>(w[e >> 1], e & 1);
}
// v combined over the row's blockDim.x threads by op: each warp by shuffles; one row a CTA (over 32 threads), its
// warps' values in red [32], shared, in warp order, as Ctx::reduce. (rr::RowReduce, whose cluster path is compiled in
// beside, left the bf16 8-vector forward 16-28 bytes of spills at its register bound.)
// (blockDim.x under 32, a power of 2: several rows a warp, each of blockDim.x lanes, the shuffles kept inside them.)
template <class V, class Op> __device__ __forceinline__ V mis_reduce(V v, Op op, V* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    if (o < (int)blockDim.x) v = op(v, rr::shfl_xor(v, o));
  if (blockDim.x > 32) {
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < (int)blockDim.x / 32; ++w) v = op(v, red[w]);
  }
  return v;
}
// f(i, c) for thread t's extra columns of a misaligned row (of tpr threads), its head's h and its tail's past its
// whole vectors (at h .. h + nvv - 1), nx of them in all (under 2 VEC): the i-th, j = t + i tpr < nx, is column c = j
// of the head, or h + nvv + (j - h) of the tail. XE: the most a thread takes (1 where tpr >= nx; mis_fwd_geo's xe).
template <int XE, class F> __device__ __forceinline__ void mis_extras(int t, int tpr, int h, int nvv, int nx, F&& f) {
#pragma unroll
  for (int i = 0; i < XE; ++i) {
    const int j = t + i * tpr;
    if (j < nx) f(i, j < h ? j : nvv + j);
  }
}
// The misaligned forwards' element a of a row of max mx, exps taken against xs (mx, or exp_shift(mx) for the two
// passes) and sum of exps sum (logs = log(sum), inv = 1 / sum). EXPED: a is softmax's exp_of(x - xs) already, kept
// from the sum (mis_fwd_row's KEEP), and fp32 divides as write_row does.
template <class T, bool LOG, bool EXPED = false>
__device__ __forceinline__ acc_t<T> mis_out(acc_t<T> a, acc_t<T> mx, acc_t<T> xs, acc_t<T> sum, acc_t<T> logs,
                                            acc_t<T> inv) {
  static_assert(!EXPED || !LOG, "EXPED: softmax only");
  if constexpr (LOG) return (a - mx) - logs;  // not a - (mx + logs): that rounds at mx's magnitude
  else if constexpr (sizeof(T) == 2) return (EXPED ? a : exp_of<T>(a - xs)) * inv;  // the rounding to T hides 1 ulp
  else if constexpr (EXPED) return div_rn(a, sum, inv);
  else return exp_of<T>(a - xs) / sum;
}
// Row r of mis_fwd_kernel and mis_fwd_cl_kernel, as thread t of its tpr; reduce(v, op, identity, k): v combined over
// the row's threads by op (k: the row's k-th reduction). live: r < M (a dead row of the last CTA loads nothing,
// stores nothing, but takes the reductions). The statistics: the online (max, sum of exp) pair in one reduction, as
// the engine's fwd_kernel (a rescale per vector where the maximum grows); TWO: the register kernels' exact two
// passes, the max, then the sum of exp(x - max) (no rescales, one more reduction; MYOPS_SOFTMAX_MIS_2P=1, the
// default: mis_two).
template <class T, bool LOG, int NS, bool TWO, int XE, class Reduce>
__device__ __forceinline__ void mis_fwd_row(T* __restrict__ y, int64_t ys,        // [M, N]
                                            const T* __restrict__ x, int64_t xs,  // [M, N]
                                            int64_t r, bool live, int N, int t, int tpr, Reduce&& reduce) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  // softmax's two passes keep the sum's exps for the output at up to 2 vectors a thread (the short rows' lanes of
  // mis_subns; at 4, fp32's kernels took 43-60 registers to 50-71). The same exps; but where an exp is not kept,
  // ptxas fuses fp32's last multiply of exp_f32 into the sum (an FFMA, where KEEP rounds the exp, then adds), and
  // fp32 divides by div_rn, as write_row: an fp32 row's sum and outputs may differ by an ulp from the NS = 4 kernel's.
  constexpr bool KEEP = TWO && !LOG && NS <= 2;
  const T* xr = x + (live ? r : 0) * xs;
  const int h = live ? head_elems(xr, N) : 0;
  const int nv = live ? (N - h) / VEC : 0, nx = live ? N - nv * VEC : 0;  // (nx: head and tail, under 2 VEC)
  const uint4* xv = reinterpret_cast<const uint4*>(xr + h);                // [nv]
  uint4 v[NS];  // (words: word_vec)
#pragma unroll
  for (int k = 0; k < NS; ++k)
    if (t + k * tpr < nv) v[k] = xv[t + k * tpr];
  A xe[XE];  // this thread's extra columns (mis_extras)
  mis_extras<XE>(t, tpr, h, nv * VEC, nx, [&](int i, int c) { xe[i] = to_acc(xr[c]); });
  // f(k, a) for each of this thread's vectors k in the row, a its elements in acc_t
  const auto each = [&](auto&& f) {
#pragma unroll
    for (int k = 0; k < NS; ++k)
      if (t + k * tpr < nv) {
        A a[VEC];
        word_vec<T>(v[k], a);
        f(k, a);
      }
  };
  A mx, sum;  // the row's max and its sum of exp(x - max) (TWO: exp(x - exp_shift(max)))
  A ex[KEEP ? NS : 1][VEC];  // (KEEP: the sum's exps of this thread's vectors; its extras' replace xe's elements)
  if constexpr (TWO) {
    A m = neg_inf<A>(), s = A(0);  // (NaN: skipped by the max, then the sum's exp makes it NaN)
    each([&](int, A(&a)[VEC]) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) m = a[e] > m ? a[e] : m;
    });
    mis_extras<XE>(t, tpr, h, nv * VEC, nx, [&](int i, int) { m = xe[i] > m ? xe[i] : m; });
    mx = reduce(m, rr::Max{}, neg_inf<A>(), 0);
    const A ms = rr::exp_shift(mx);  // (a row of -inf: 0, so its exps are 0 and its outputs NaN, as eager's)
    each([&](int k, A(&a)[VEC]) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A q = exp_of<T>(a[e] - ms);
        s += q;
        if constexpr (KEEP) ex[k][e] = q;
      }
    });
    mis_extras<XE>(t, tpr, h, nv * VEC, nx, [&](int i, int) {
      const A q = exp_of<T>(xe[i] - ms);
      s += q;
      if constexpr (KEEP) xe[i] = q;
    });
    sum = reduce(s, rr::Sum{}, A(0), 1);
  } else {
    A m = neg_inf<A>(), s = A(0);
#pragma unroll
    for (int k = 0; k < NS; ++k) {
      A a[VEC];
      word_vec<T>(v[k], a);
      online_update<T, VEC>(m, s, a, t + k * tpr < nv ? VEC : 0);
    }
    mis_extras<XE>(t, tpr, h, nv * VEC, nx, [&](int i, int) {
      const A a[1] = {xe[i]};
      online_update<T, 1>(m, s, a, 1);
    });
    const Pair<A> ms = reduce(Pair<A>{m, s}, OnlineSoftmaxOp<T>{}, Pair<A>{neg_inf<A>(), A(0)}, 0);
    mx = ms.a;
    sum = ms.b;
  }
  if (!live) return;
  const A xs0 = TWO ? rr::exp_shift(mx) : mx;  // what the exps were taken against
  const A logs = log_of<T>(sum), inv = A(1) / sum;
  const auto out = [&](A a) -> A { return mis_out<T, LOG, KEEP>(a, mx, xs0, sum, logs, inv); };
  T* yr = y + r * ys + h;  // [nv VEC] (y's row as far from a boundary as x's: the same h)
#pragma unroll
  for (int k = 0; k < NS; ++k)
    if (t + k * tpr < nv) {
      A a[VEC];
      if constexpr (KEEP) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) a[e] = ex[k][e];
      } else {
        word_vec<T>(v[k], a);
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] = out(a[e]);
      rr::store(yr, (t + k * tpr) * VEC, a);
    }
  mis_extras<XE>(t, tpr, h, nv * VEC, nx, [&](int i, int c) { yr[c - h] = from_acc<T>(out(xe[i])); });
}
template <class T, bool LOG, int NS, bool TWO, int XE>
__global__ void __launch_bounds__(NS > 4 ? kMisThreads8 : kMisThreads)
    mis_fwd_kernel(T* __restrict__ y, int64_t ys,        // [M, N]
                   const T* __restrict__ x, int64_t xs,  // [M, N]
                   int64_t M, int N) {
  using A = acc_t<T>;
  using Red = std::conditional_t<TWO, A, Pair<A>>;
  __shared__ Red red[TWO ? 2 : 1][32];  // (one row a CTA over 32 threads: TWO's two reductions, a slot set each)
  const int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
  mis_fwd_row<T, LOG, NS, TWO, XE>(y, ys, x, xs, r, r < M, N, (int)threadIdx.x, (int)blockDim.x,
                                   [&](auto v, auto op, auto, int k) { return mis_reduce(v, op, red[k]); });
}
// Rows past mis_fwd_geo (16-bit N over 57344, fp32 over 28672): a row over a cluster of up to 8 CTAs of up to
// kMisClThreads (mis_cl_geo), thread t of the row cluster rank * blockDim.x + threadIdx.x, 4 vectors a thread, the
// reduction through distributed shared memory (rr::RowReduce); a persistent grid of the clusters that fit, each
// looping over rows (rr::Lane's row loop).
// MYOPS_SOFTMAX_MIS=2 takes it, =3 every row of over kMisClThreads threads too (mis_mode: the streaming kernels
// below, the default, beat it).
constexpr int kMisClThreads = 512;
// The clustered kernels' row loop: row(r, t, red) for each row r of this cluster, t its thread of the row's tpr, red
// the row's reduction (every CTA of the cluster runs the same rows).
template <class Row> __device__ __forceinline__ void mis_cl_rows(int64_t M, int tpr, Row&& row) {
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  const rr::Lane l(tpr);
  rr::RowReduce red(red_buf, tpr);
  for (int64_t r = l.first(); r < M; r += l.step()) row(r, l.t, red);
}
template <class T, bool LOG, bool TWO>
__global__ void __launch_bounds__(kMisClThreads) mis_fwd_cl_kernel(T* __restrict__ y, int64_t ys,        // [M, N]
                                                                   const T* __restrict__ x, int64_t xs,  // [M, N]
                                                                   int64_t M, int N, int tpr) {
  mis_cl_rows(M, tpr, [&](int64_t r, int t, rr::RowReduce& red) {
    mis_fwd_row<T, LOG, 4, TWO, 1>(y, ys, x, xs, r, true, N, t, tpr,
                                   [&](auto v, auto op, auto identity, int) { return red(v, op, identity); });
  });
}
// The backward of such rows (dy, y and dx of the same phase), as bwd_kernel: NS = 4 vectors of dy and of y a thread
// (rows of up to 4096 vectors: 16-bit N up to 32768, fp32 16384; mis_bwd_geo), or short rows' 1 or 2 (mis_subns:
// by default 1, whatever the forward's), the row's sum, then dx.
// (Row r of mis_bwd_kernel and mis_bwd_cl_kernel, as mis_fwd_row; reduce: a sum over the row's threads.)
template <class T, bool LOG, int XE, int NS, class Reduce>
__device__ __forceinline__ void mis_bwd_row(T* __restrict__ dx, int64_t dxs,        // [M, N]
                                            const T* __restrict__ dy, int64_t dys,  // [M, N]
                                            const T* __restrict__ y, int64_t ys,    // [M, N]
                                            int64_t r, bool live, int N, int t, int tpr, Reduce&& reduce) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  const T* gr = dy + (live ? r : 0) * dys;
  const T* vr = y + (live ? r : 0) * ys;
  const int h = live ? head_elems(gr, N) : 0;
  const int nv = live ? (N - h) / VEC : 0, nx = live ? N - nv * VEC : 0;
  uint4 g[NS], v[NS];  // (words: word_vec)
#pragma unroll
  for (int k = 0; k < NS; ++k)
    if (t + k * tpr < nv) {
      g[k] = reinterpret_cast<const uint4*>(gr + h)[t + k * tpr];
      v[k] = reinterpret_cast<const uint4*>(vr + h)[t + k * tpr];
    }
  A ge[XE], ve[XE];  // dy's and y's extra columns (mis_extras)
  mis_extras<XE>(t, tpr, h, nv * VEC, nx, [&](int i, int c) {
    ge[i] = to_acc(gr[c]);
    ve[i] = to_acc(vr[c]);
  });
  // f(q, dy's elements, y's) for each of this thread's vectors q in the row
  const auto each = [&](auto&& f) {
#pragma unroll
    for (int q = 0; q < NS; ++q)
      if (t + q * tpr < nv) {
        A a[VEC], b[VEC];
        word_vec<T>(g[q], a);
        word_vec<T>(v[q], b);
        f(q, a, b);
      }
  };
  A acc = A(0);
  each([&](int, const A(&a)[VEC], const A(&b)[VEC]) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc += LOG ? a[e] : a[e] * b[e];
  });
  mis_extras<XE>(t, tpr, h, nv * VEC, nx, [&](int i, int) { acc += LOG ? ge[i] : ge[i] * ve[i]; });
  const A k = reduce(acc);
  if (!live) return;
  const auto out = [&](A a, A b) -> A { return bwd_elem<T, LOG>(a, b, k); };
  T* dr = dx + r * dxs + h;  // [nv VEC] (the same h)
  each([&](int q, A(&a)[VEC], const A(&b)[VEC]) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) a[e] = out(a[e], b[e]);
    rr::store(dr, (t + q * tpr) * VEC, a);
  });
  mis_extras<XE>(t, tpr, h, nv * VEC, nx, [&](int i, int c) { dr[c - h] = from_acc<T>(out(ge[i], ve[i])); });
}
template <class T, bool LOG, int XE, int NS>
__global__ void __launch_bounds__(kMisThreads)
    mis_bwd_kernel(T* __restrict__ dx, int64_t dxs,        // [M, N]
                   const T* __restrict__ dy, int64_t dys,  // [M, N]
                   const T* __restrict__ y, int64_t ys,    // [M, N]
                   int64_t M, int N) {
  __shared__ acc_t<T> red[32];
  const int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
  mis_bwd_row<T, LOG, XE, NS>(dx, dxs, dy, dys, y, ys, r, r < M, N, (int)threadIdx.x, (int)blockDim.x,
                              [&](acc_t<T> v) { return mis_reduce(v, rr::Sum{}, red); });
}
// Rows past mis_bwd_geo (16-bit N over 32768, fp32 over 16384) over a cluster, as mis_fwd_cl_kernel
// (MYOPS_SOFTMAX_MIS=2).
template <class T, bool LOG>
__global__ void __launch_bounds__(kMisClThreads) mis_bwd_cl_kernel(T* __restrict__ dx, int64_t dxs,        // [M, N]
                                                                   const T* __restrict__ dy, int64_t dys,  // [M, N]
                                                                   const T* __restrict__ y, int64_t ys,    // [M, N]
                                                                   int64_t M, int N, int tpr) {
  using A = acc_t<T>;
  mis_cl_rows(M, tpr, [&](int64_t r, int t, rr::RowReduce& red) {
    mis_bwd_row<T, LOG, 1, 4>(dx, dxs, dy, dys, y, ys, r, true, N, t, tpr,
                              [&](A v) { return red(v, rr::Sum{}, A(0)); });
  });
}
// Misaligned rows past the one-CTA kernels' registers, any N (MYOPS_SOFTMAX_MIS=4, the default: 16-bit backward over
// 32768, fp32 forward over 28672 and backward over 16384; =5: the 8-vector forward's rows too, 16-bit 32769-57344
// and fp32 16385-28672): one CTA of
// st_threads(es) a row streams it twice, the statistics first (forward: the online (max, sum) pair; backward:
// softmax's sum(dy y), log_softmax's sum(dy) from dy alone), then the outputs from a second read, in reverse, so that
// it starts on the part of the row L2 took last, with evict-first loads. kStU 16-byte vectors an operand a thread in
// flight. 64 registers at 1024 threads (ptxas, sm_90a: 50-64, no spills): one CTA an SM, so 132 rows in flight on the
// H200, bf16 [*, 50257]'s dy and y 26 MB, inside its 50 MB L2. bf16 [4096, 50257] forward+backward 78.1% of copy
// (softmax) and 80.6% (log_softmax), against the clusters' 34.7 and 36.0, eager's 46.4 and 71.9 and torch.compile's
// 40.9 and 47.5 (mis_mode).
constexpr int kStThreads = 1024, kStU = 4;
// load(q, i) then use(q, i) for this thread's vectors i of the row's nv (i = threadIdx.x mod blockDim.x), kStU loads
// issued before their uses; batches of kStU * blockDim.x vectors in order, or last first (rev).
template <class Q, class Load, class Use>
__device__ __forceinline__ void st_sweep(int nv, bool rev, Load&& load, Use&& use) {
  const int step = kStU * (int)blockDim.x, nb = (nv + step - 1) / step;
  for (int b0 = 0; b0 < nb; ++b0) {
    const int i0 = (rev ? nb - 1 - b0 : b0) * step + (int)threadIdx.x;
    Q q[kStU];
#pragma unroll
    for (int u = 0; u < kStU; ++u)
      if (i0 + u * (int)blockDim.x < nv) load(q[u], i0 + u * (int)blockDim.x);
#pragma unroll
    for (int u = 0; u < kStU; ++u)
      if (i0 + u * (int)blockDim.x < nv) use(q[u], i0 + u * (int)blockDim.x);
  }
}
template <class T, bool LOG>
__global__ void __launch_bounds__(kStThreads) st_fwd_kernel(T* __restrict__ y, int64_t ys,        // [M, N]
                                                            const T* __restrict__ x, int64_t xs,  // [M, N]
                                                            int N) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  __shared__ Pair<A> red[32];
  const int64_t r = blockIdx.x;
  const int t = (int)threadIdx.x;
  const T* xr = x + r * xs;
  const int h = head_elems(xr, N), nv = (N - h) / VEC, nx = N - nv * VEC;  // (nx: head and tail, under 2 VEC)
  const uint4* xv = reinterpret_cast<const uint4*>(xr + h);                // [nv]
  A m = neg_inf<A>(), s = A(0);
  st_sweep<uint4>(nv, false, [&](uint4& q, int i) { q = xv[i]; },
                  [&](const uint4& q, int) {
                    A a[VEC];
                    word_vec<T>(q, a);
                    online_update<T, VEC>(m, s, a, VEC);
                  });
  A xe[1];  // this thread's extra column (mis_extras: blockDim.x >= 512 threads take a row's under 2 VEC)
  mis_extras<1>(t, (int)blockDim.x, h, nv * VEC, nx, [&](int i, int c) {
    xe[i] = to_acc(xr[c]);
    const A a[1] = {xe[i]};
    online_update<T, 1>(m, s, a, 1);
  });
  const Pair<A> ms = mis_reduce(Pair<A>{m, s}, OnlineSoftmaxOp<T>{}, red);
  const A mx = ms.a, sum = ms.b, logs = log_of<T>(sum), inv = A(1) / sum;
  const auto out = [&](A a) -> A { return mis_out<T, LOG>(a, mx, mx, sum, logs, inv); };
  T* yr = y + r * ys + h;  // [nv VEC] (y's row as far from a boundary as x's: the same h)
  st_sweep<uint4>(nv, true, [&](uint4& q, int i) { q = __ldcs(xv + i); },
                  [&](const uint4& q, int i) {
                    A a[VEC];
                    word_vec<T>(q, a);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) a[e] = out(a[e]);
                    rr::store(yr, i * VEC, a);
                  });
  mis_extras<1>(t, (int)blockDim.x, h, nv * VEC, nx, [&](int i, int c) { yr[c - h] = from_acc<T>(out(xe[i])); });
}
struct StPair {
  uint4 g, v;  // dy's and y's vector
};
template <class T, bool LOG>
__global__ void __launch_bounds__(kStThreads) st_bwd_kernel(T* __restrict__ dx, int64_t dxs,        // [M, N]
                                                            const T* __restrict__ dy, int64_t dys,  // [M, N]
                                                            const T* __restrict__ y, int64_t ys,    // [M, N]
                                                            int N) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  __shared__ A red[32];
  const int64_t r = blockIdx.x;
  const int t = (int)threadIdx.x;
  const T* gr = dy + r * dys;
  const T* vr = y + r * ys;
  const int h = head_elems(gr, N), nv = (N - h) / VEC, nx = N - nv * VEC;
  const uint4* gv = reinterpret_cast<const uint4*>(gr + h);  // [nv]
  const uint4* vv = reinterpret_cast<const uint4*>(vr + h);  // [nv]
  A acc = A(0);
  if constexpr (LOG) {  // sum(dy): y waits for the second read
    st_sweep<uint4>(nv, false, [&](uint4& q, int i) { q = gv[i]; },
                    [&](const uint4& q, int) {
                      A a[VEC];
                      word_vec<T>(q, a);
#pragma unroll
                      for (int e = 0; e < VEC; ++e) acc += a[e];
                    });
  } else {
    st_sweep<StPair>(nv, false,
                     [&](StPair& q, int i) {
                       q.g = gv[i];
                       q.v = vv[i];
                     },
                     [&](const StPair& q, int) {
                       A a[VEC], b[VEC];
                       word_vec<T>(q.g, a);
                       word_vec<T>(q.v, b);
#pragma unroll
                       for (int e = 0; e < VEC; ++e) acc += a[e] * b[e];
                     });
  }
  A ge[1], ve[1];  // dy's and y's extra column (as st_fwd_kernel's)
  mis_extras<1>(t, (int)blockDim.x, h, nv * VEC, nx, [&](int i, int c) {
    ge[i] = to_acc(gr[c]);
    ve[i] = to_acc(vr[c]);
    acc += LOG ? ge[i] : ge[i] * ve[i];
  });
  const A k = mis_reduce(acc, rr::Sum{}, red);
  const auto out = [&](A a, A b) -> A { return bwd_elem<T, LOG>(a, b, k); };
  T* dr = dx + r * dxs + h;  // [nv VEC] (the same h)
  st_sweep<StPair>(nv, true,
                   [&](StPair& q, int i) {
                     q.g = __ldcs(gv + i);
                     q.v = __ldcs(vv + i);
                   },
                   [&](const StPair& q, int i) {
                     A a[VEC], b[VEC];
                     word_vec<T>(q.g, a);
                     word_vec<T>(q.v, b);
#pragma unroll
                     for (int e = 0; e < VEC; ++e) a[e] = out(a[e], b[e]);
                     rr::store(dr, i * VEC, a);
                   });
  mis_extras<1>(t, (int)blockDim.x, h, nv * VEC, nx, [&](int i, int c) { dr[c - h] = from_acc<T>(out(ge[i], ve[i])); });
}
// MYOPS_SOFTMAX_MIS: misaligned rows' forward and backward on mis_fwd_kernel and mis_bwd_kernel where their
// geometries hold the row (operands laid out as fresh tensors': mis_rows), and longer rows: 4 (default) on
// st_fwd_kernel and st_bwd_kernel (one CTA streams the row twice), 2 on mis_fwd_cl_kernel and mis_bwd_cl_kernel
// (clusters), 1 on the rows.cuh engine. 3: every row of over kMisClThreads threads at 4 vectors on the clusters (where
// one CTA of 8 vectors holds 16-bit rows of up to 57344, one row an SM at 72 registers); 5: those rows streamed. 0:
// every misaligned row on the engine. H200, session 56, % of copy, forward / forward+backward, softmax and
// log_softmax:
//   bf16 [4096, 50257]: engine (1) 48.9 / 14.7 and 51.0 / 19.9 (one CTA's forward); clusters (2) 68.5 / 34.7 and
//     72.6 / 36.0; streamed (4) 68.6 / 78.1 and 72.6 / 80.6; streamed forward too (5) 55.2 / 70.2 and 56.2 / 70.7;
//     clusters first (3) 18.4 / 22.4 and 18.4 / 22.7.
//   fp32 [4096, 50257]: engine 14.1 / 12.5 and 14.4 / 18.5; clusters 58.6 / 67.4 and 55.9 / 56.0; streamed (CTAs of
//     512) 64.6 / 64.6 and 69.5 / 74.0.
//   bf16 [2048, 32769]: clusters 57.0 / 33.1 and 60.8 / 34.1; streamed 57.2 / 71.4 and 60.9 / 72.4.
//   fp32 [2048, 32769]: clusters 63.5 / 70.3 and 63.7 / 57.5; streamed (512) 64.1 / 68.1 and 72.3 / 78.3.
// (The clusters' persistent rows load, reduce and store in turn, the loads of the next row not yet issued.) Read once.
inline int mis_mode() {
  static const int v = rr::env_knob("MYOPS_SOFTMAX_MIS", 4, [](int m) { return m >= 0 && m <= 5; });
  return v;
}
// st_fwd_kernel's and st_bwd_kernel's CTA for elements of es bytes: MYOPS_SOFTMAX_ST_THREADS, 1024 (one CTA an SM)
// or 512 (two: one loads while the other reduces, with twice the rows L2 must keep for the second read); 0 (default)
// 1024 for 16-bit types, 512 for fp32. H200, session 56, % of copy, 1024 -> 512: fp32 [4096, 50257] softmax forward
// 53.9 -> 64.6, log_softmax 60.4 -> 69.5, forward+backward 65.9 -> 64.6 and 75.2 -> 74.0; fp32 [2048, 32769]
// forward 48.5 -> 64.1 and 54.2 -> 72.3, forward+backward 67.3 -> 68.1 and 71.9 -> 78.3; bf16 [4096, 50257]
// forward+backward 77.9 -> 72.5 and 80.4 -> 81.0. Read once.
inline int st_threads(int es) {
  static const int v =
      rr::env_knob("MYOPS_SOFTMAX_ST_THREADS", 0, [](int t) { return t == 0 || t == 512 || t == 1024; });
  return v ? v : es == 4 ? 512 : kStThreads;
}
// Whether the streaming kernels take misaligned rows [M, N] of es-byte elements that the one-CTA kernels do not
// (modes 4 and 5; N a whole number of vectors: rows off a boundary as aligned ones are, on the engine, as mis_rows).
inline bool st_rows(int64_t M, int64_t N, int es) {
  return mis_mode() >= 4 && N * es % 16 != 0 && M < INT_MAX && N < INT_MAX;
}
inline bool mis_fwd_on() { return mis_mode() >= 1; }
// MYOPS_SOFTMAX_MIS_2P: the one-CTA and clustered misaligned forward kernels' statistics in two exact passes
// (mis_fwd_row's TWO; 1, the default), or the online pair (0); the streaming forward always takes the online pair
// (its row is read once for them). H200, session 56, % of copy, online -> two passes: forward bf16 [65536, 1001]
// 68.0 -> 92.2, fp32 67.8 -> 92.9, bf16 [16384, 4095] 68.8 -> 93.1, bf16 [262144, 127] 13.8 -> 26.5, bf16 [2048,
// 32769] 39.1 -> 57.1; bf16 [4096, 50257] (8 vectors) 48.9 -> 68.5; fp32 [2048, 32769] on the clusters 41.3 -> 63.3.
// (The online pair's rescale sits in each thread's dependent chain; the two passes' second reduction costs less.)
// Read once.
inline bool mis_two() {
  static const int v = rr::env_knob("MYOPS_SOFTMAX_MIS_2P", 1, [](int m) { return m == 0 || m == 1; });
  return v == 1;
}
// MYOPS_SOFTMAX_MIS_SUBWARP: short misaligned rows on part of a warp (mis_fwd_geo): 2 (the default) the fewest
// lanes, 4 to 16, that hold the row's vectors at MYOPS_SOFTMAX_MIS_SUBNS a lane, each lane taking up to 4 of the row's
// head and tail elements (bf16 127 on 4 lanes); 1 16 lanes a 16-bit row, 8 an fp32 one; 0 a warp a row. H200,
// session 57, softmax, % of copy, forward / forward+backward, 0 -> 1 -> 2: bf16 [262144, 127] 27.5 / 35.7 -> 51.2 /
// 62.6 -> 71.1 / 78.3, fp32 48.5 / 64.9 -> 89.4 / 93.3 -> 90.1 / 94.2 (8 lanes either way); bf16 [65536, 257] 48.2 /
// 59.3 -> 67.0 / 76.6 -> 67.3 / 76.9 (16 lanes either way); 1 -> 2: bf16 [1048576, 31] 14.1 / 18.8 -> 40.7 / 51.4,
// fp32 49.6 / 65.5 -> 60.9 / 77.9, fp32 [131072, 255] 74.6 / 87.5 -> 92.4 / 95.4 (16 lanes instead of a warp).
// (Measured and removed, session 58: the fewest lanes from 2, 16-bit lanes taking up to 8 head and tail elements:
// softmax bf16 [262144, 63] 52.3 / 65.5 -> 41.7 / 48.9, [1048576, 31] 40.5 / 51.2 -> 41.2 / 50.5, fp32 31 60.4 / 77.5
// -> 58.6 / 64.9.) Read once.
inline int mis_subwarp() {
  static const int v = rr::env_knob("MYOPS_SOFTMAX_MIS_SUBWARP", 2, [](int m) { return m >= 0 && m <= 2; });
  return v;
}
// MYOPS_SOFTMAX_MIS_SUBNS: the vectors a lane of such rows (MYOPS_SOFTMAX_MIS_SUBWARP=2) holds: 0 (default) 1 in the
// backward, 2 in softmax's forward (whose exps then stay in registers for its output), 4 in log_softmax's; 1, 2 or
// 4 that many in both passes. Rows past 16 lanes of them, and the online pair's forward (MYOPS_SOFTMAX_MIS_2P=0),
// take 4. Fewer vectors, fewer registers (1 and 2: 30-46, against 44-64 at 4): more rows in flight an SM. H200,
// session 58, % of copy, forward / forward+backward, 4 -> 2 -> 1 in both passes:
//   softmax bf16 [1048576, 31] 41.0 / 51.5 -> 49.6 / 51.8 -> 53.1 / 64.9 (torch.compile's forward+backward 53.6);
//     fp32 60.8 / 77.7 -> 79.5 / 87.9 -> 75.3 / 87.6 (compile 74.7 / 87.3, session 57);
//   log_softmax bf16 46.2 / 54.3 -> 48.3 / 48.8 -> 50.2 / 62.8; fp32 79.5 / 88.7 -> 78.3 / 87.6 -> 75.1 / 88.0;
//   softmax bf16 [262144, 127] 71.4 / 78.5 -> 75.9 / 78.4 -> 70.0 / 82.6; fp32 90.1 / 93.8 -> 93.5 / 95.5 -> 89.9 /
//     93.8; log_softmax bf16 76.1 / 79.5 -> 68.7 / 72.1 -> 64.9 / 79.2; fp32 92.4 / 95.0 -> 93.6 / 96.2 -> 92.5 / 95.0.
// The backward alone (the difference) is fastest at 1 in every case but fp32 at 127 (within 1.5%): bf16 31 73-74 ->
// 60 us, 127 56-57 -> 50. Then 4 -> the default, one process each: softmax bf16 31 40.9 / 51.6 -> 49.5 / 62.7, 63
// 57.6 / 71.6 -> 68.9 / 76.2, 127 71.2 / 78.2 -> 76.0 / 85.8, 255 77.8 / 85.3 -> 85.4 / 88.5; fp32 31 61.0 / 77.8 ->
// 79.6 / 89.7, 63 60.8 / 76.2 -> 90.9 / 94.8, 127 89.9 / 93.7 -> 93.7 / 95.1; log_softmax (its forward unchanged)
// forward+backward bf16 31 54.4 -> 60.0, 63 76.9 -> 75.5, 127 79.2 -> 84.4; fp32 31 88.7 -> 90.3, 63 87.6 -> 92.5.
// Read once.
inline int mis_subns_knob() {
  static const int v =
      rr::env_knob("MYOPS_SOFTMAX_MIS_SUBNS", 0, [](int m) { return m == 0 || m == 1 || m == 2 || m == 4; });
  return v;
}
inline int mis_subns(bool log, bool bwd) {
  const int k = mis_subns_knob();
  return k ? k : bwd ? 1 : log ? 4 : 2;
}
// mis_fwd_kernel's vectors a thread (4 in up to 1024 threads, else 8 in up to 896: bf16 rows of up to 57344 elements,
// GPT-2's 50257 included; 0: neither; short rows 1, 2 or 4: subns) and threads a row for rows of N elements of es
// bytes: the fewest warps that hold the row's vectors. (ptxas, sm_90a: 32-65 registers but bf16 at 8 vectors, which
// spilled 36 bytes under 1024 threads' 64 registers and takes 72 under 896's bound, log_softmax's with 4 bytes spilled.
// Since session 57's mis_extras the online pair's (MYOPS_SOFTMAX_MIS_2P=0) spill more: bf16 8 vectors 8-12 bytes,
// softmax's fp16 4 vectors 40 bytes at 32 registers; the default two passes none.)
struct MisGeo {
  int ns = 0, tpr = 0, rows = 0, xe = 1;  // (xe: the row's head and tail elements a thread takes, 1 or 4)
};
// (Mode 5: not 8.)
// subns: short rows' vectors a lane (mis_subns; the forward's 1 and 2 under the two passes alone).
inline MisGeo mis_fwd_geo(int64_t M, int64_t N, int es, int subns = 4) {
  MisGeo g;
  const int64_t nv = ceil_div(N, (int64_t)(16 / es));  // (at least the row's whole vectors, whatever its head)
  g.ns = ceil_div(nv, (int64_t)4) <= kMisThreads                               ? 4
         : mis_mode() != 5 && ceil_div(nv, (int64_t)8) <= kMisThreads8 ? 8
                                                                                : 0;
  if (!g.ns || N >= INT_MAX) return MisGeo{};
  g.tpr = (int)ceil_div(ceil_div(nv, (int64_t)g.ns), (int64_t)32) * 32;
  g.rows = g.tpr == 32 ? kMisRows : 1;
  // Short rows on part of a warp (mis_subwarp), where sub lanes hold its vectors at ns a lane (subns: 16-bit rows of
  // up to about 128 ns elements, fp32 64 ns; longer rows, up to 512 and 256, at 4 a lane), rows of 256-thread CTAs; a
  // row's head and tail (up to 2 VEC - 2 elements) take up to xe elements a lane (sub under 2 VEC - 2: 4). A warp a
  // row runs one to four of its lanes' loads at bf16 N = 127: 2048 threads an SM keep 64 rows of 254 bytes in flight,
  // 16 KB; 4 lanes a row, 512 rows, 128 KB.
  int sub = es == 4 ? 8 : 16, ns = 4;
  if (mis_subwarp() == 2) {
    ns = ceil_div(nv, (int64_t)subns) <= 16 ? subns : 4;
    for (sub = 4; sub < 16 && ceil_div(nv, (int64_t)ns) > sub;) sub *= 2;
  }
  if (mis_subwarp() && g.ns == 4 && ceil_div(nv, (int64_t)ns) <= sub) {
    const int nx = 2 * (16 / es) - 2;  // (the head and tail: up to 2 VEC - 2 elements)
    g.ns = ns;
    g.tpr = sub;
    g.rows = 256 / sub;
    g.xe = sub >= nx ? 1 : 4;  // (4 sub >= nx for 2- and 4-byte types)
  }
  if (ceil_div(M, (int64_t)g.rows) >= INT_MAX) return MisGeo{};
  return g;
}

// mis_bwd_kernel's: 4 vectors a thread in up to 1024 threads, or the forward's short rows' (0: none).
inline MisGeo mis_bwd_geo(int64_t M, int64_t N, int es, int subns = 4) {
  const MisGeo g = mis_fwd_geo(M, N, es, subns);
  return g.ns <= 4 ? g : MisGeo{};
}

// mis_fwd_cl_kernel's and mis_bwd_cl_kernel's (MYOPS_SOFTMAX_MIS=2 or 3): the fewest CTAs of up to kMisClThreads
// that hold the row at 4 vectors a thread, 2 to 8 of them (16-bit rows of up to 131072 elements, fp32 65536), each
// the fewest warps that hold its share. ns = 0: none (one CTA holds the row, or 8 do not).
inline rr::Geo mis_cl_geo(int64_t N, int es) {
  rr::Geo g;
  const int64_t thr = ceil_div(ceil_div(N, (int64_t)(16 / es)), (int64_t)4);  // the row's threads
  const int64_t c = ceil_div(thr, (int64_t)kMisClThreads);
  if ((mis_mode() != 2 && mis_mode() != 3) || c < 2 || c > rr::kMaxCluster) return g;
  g.ns = 4;
  g.cluster = (int)c;
  g.rows = 1;
  g.threads = (int)ceil_div(ceil_div(thr, c), (int64_t)32) * 32;
  g.tpr = g.threads * g.cluster;
  return g;
}

// Whether rows [M, N] of dtype take mis_fwd_kernel (bwd: mis_bwd_kernel) when every operand is laid out as a fresh
// tensor's (contiguous from a 16-byte boundary): MYOPS_SOFTMAX_MIS on, N not a whole number of 16-byte vectors, and
// the kernel's geometry holds the row. Their sums run in an order set by each row's offset from a 16-byte boundary
// (the engine's by the column), so the registration layer (ops/softmax.h) copies operands of other layouts into
// fresh tensors for them: one result whatever the layout of a tensor of one shape, where torch.compile hands the
// backward strided gradients and eager contiguous ones. (Row r's offset is r N es mod 16: a slice of rows can round
// otherwise.)
inline bool mis_rows(int64_t M, int64_t N, int dtype, bool bwd) {
  const int es = dtype == MYOPS_F32 ? 4 : dtype == MYOPS_F16 || dtype == MYOPS_BF16 ? 2 : 0;
  if (!mis_fwd_on() || M <= 0 || N <= 0 || es == 0 || N * es % 16 == 0) return false;
  return (bwd ? mis_bwd_geo(M, N, es) : mis_fwd_geo(M, N, es)).ns != 0 || mis_cl_geo(N, es).ns != 0 ||
         st_rows(M, N, es);
}

template <bool LOG>
int forward(myops_out_operand y, myops_operand x, int64_t M, int64_t N, int dtype, void* stream) {
  if (M <= 0 || N <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int es = sizeof(T);
    const int min_ns = rr::min_ns_knob(es == 4 ? 8 : 4);
    const bool warp_row = N <= (int64_t)32 * min_ns * (16 / es);  // one warp at min_ns vectors per thread
    const int row_cta = !LOG && es == 2 && warp_row ? 256 : rr::kCtaThreads;  // (see rr_geo)
    rr::Geo g0 = rr_geo<kFwdNs<T>>(N, es, min_ns, es == 4 ? 256 : kFwdCta16, row_cta);
    if (g0.cluster > rr::kMaxCluster) g0 = rr_geo<kFwdNs<T>>(N, es, min_ns);  // (see kFwdCta16)
    if constexpr (es == 2) {
      constexpr unsigned kNs = LOG ? rr::kWarpNs & ~rr::warp_ns(8, false) : rr::kWarpNs;  // (see wr_fwd_kernel)
      const rr::Geo gw = rr::warp_row_geo<kNs>(N, es, LOG ? rr::kCtaThreads : 256, g0.full);
      if (gw.ns && rr::operands_ok({x}, {y}, {}, M, N, es))
        return rr::with_warp_ns<kNs>(gw, [&](auto ns, auto full) {
          constexpr int NS = decltype(ns)::value;
          return rr::launch(gw, rr::cover_grid(gw, M), wr_fwd_kernel<T, NS, LOG, decltype(full)::value>,
                            static_cast<cudaStream_t>(stream), static_cast<T*>(y.ptr), y.row_stride,
                            static_cast<const T*>(x.ptr), x.row_stride, M, (int)N, rr::l2_last(M * N * es));
        });
    }
    if (g0.ns && rr::operands_ok({x}, {y}, {}, M, N, es)) {
      if constexpr (sizeof(T) != 8) {
        const rr::Geo gp = g0.cluster > 1 ? pipe_fwd_geo<T>(N) : rr::Geo{};
        const auto kernel = rp_fwd_kernel<T, LOG>;
        const int64_t grid = gp.ns ? rr::resident_grid(gp, kernel, M) : -1;
        if (grid > 0)  // (else its clusters cannot be scheduled: the register kernel's may)
          return rr::launch(gp, grid, kernel, static_cast<cudaStream_t>(stream), static_cast<T*>(y.ptr), y.row_stride,
                            static_cast<const T*>(x.ptr), x.row_stride, M, (int)N, gp.tpr, pipe_fwd_lag(),
                            rr::l2_last(M * N * es));
      }
      return rr::with_ns<kFwdNs<T>>(g0.ns, [&](auto ns) -> int {
        constexpr int NS = decltype(ns)::value;
        const rr::Geo g = rr::staged(g0, rr::Stage<T, NS>::bytes_per_thread(), rr_fwd_kernel<T, NS, LOG>);
        const int64_t grid = rr::row_grid(g, rr_fwd_kernel<T, NS, LOG>, M);
        if (grid < 0) return (int)MYOPS_EARG;
        return rr::launch(g, grid, rr_fwd_kernel<T, NS, LOG>, static_cast<cudaStream_t>(stream),
                          static_cast<T*>(y.ptr), y.row_stride, static_cast<const T*>(x.ptr), x.row_stride, M, (int)N,
                          g.tpr, g.nbuf, rr::l2_last(M * N * es));
      });
    }
    if constexpr (es != 8) {  // misaligned rows (and aligned ones past the register kernels: the engine, below)
      const bool phased =
          mis_fwd_on() && same_phase(x.ptr, x.row_stride, x.col_stride, y.ptr, y.row_stride, y.col_stride, M, es);
      const rr::Geo gc = phased ? mis_cl_geo(N, es) : rr::Geo{};
      const int subns = mis_two() ? mis_subns(LOG, false) : 4;
      const MisGeo gm = phased && !(gc.ns && mis_mode() == 3) ? mis_fwd_geo(M, N, es, subns) : MisGeo{};
      if (gm.ns) {
        const auto go = [&](auto kernel) {
          kernel<<<(unsigned)ceil_div(M, (int64_t)gm.rows), dim3((unsigned)gm.tpr, (unsigned)gm.rows), 0,
                   static_cast<cudaStream_t>(stream)>>>(static_cast<T*>(y.ptr), y.row_stride,
                                                        static_cast<const T*>(x.ptr), x.row_stride, M, (int)N);
          return launch_status();
        };
        // the kernel of NS vectors and XE extra elements a thread, its statistics as mis_two says (1 and 2 vectors
        // only under the two passes, whose subns alone asks for them)
        const auto pick = [&](auto ns, auto xe) {
          constexpr int NS = decltype(ns)::value, XE = decltype(xe)::value;
          if constexpr (NS < 4) return go(mis_fwd_kernel<T, LOG, NS, true, XE>);
          else return mis_two() ? go(mis_fwd_kernel<T, LOG, NS, true, XE>) : go(mis_fwd_kernel<T, LOG, NS, false, XE>);
        };
        using I1 = std::integral_constant<int, 1>;
        using I4 = std::integral_constant<int, 4>;
        const auto with_xe = [&](auto ns) { return gm.xe == 4 ? pick(ns, I4{}) : pick(ns, I1{}); };
        return gm.ns == 1   ? with_xe(I1{})
               : gm.ns == 2 ? with_xe(std::integral_constant<int, 2>{})
               : gm.ns == 4 ? with_xe(I4{})
                            : pick(std::integral_constant<int, 8>{}, I1{});  // (XE over 1 only at 4 vectors or fewer)
      }
      if (phased && st_rows(M, N, es)) {
        st_fwd_kernel<T, LOG><<<(unsigned)M, (unsigned)st_threads(es), 0, static_cast<cudaStream_t>(stream)>>>(
            static_cast<T*>(y.ptr), y.row_stride, static_cast<const T*>(x.ptr), x.row_stride, (int)N);
        return launch_status();
      }
      // (a persistent grid of the clusters that fit; none: the engine)
      const auto cl = [&](auto kernel) -> int {
        const int64_t grid = rr::resident_grid(gc, kernel, M);
        if (grid <= 0) return -1;
        return rr::launch(gc, grid, kernel, static_cast<cudaStream_t>(stream), static_cast<T*>(y.ptr), y.row_stride,
                          static_cast<const T*>(x.ptr), x.row_stride, M, (int)N, gc.tpr);
      };
      const int rc = !gc.ns      ? -1
                     : mis_two() ? cl(mis_fwd_cl_kernel<T, LOG, true>)
                                 : cl(mis_fwd_cl_kernel<T, LOG, false>);
      if (rc != -1) return rc;  // (-1: no cluster fits; a launch's codes are cudaError_t / MYOPS_E*, never negative)
    }
    Plan p = make_plan(M, N, es, 1, 0, 0, true);
    auto kernel = fwd_kernel<T, LOG>;
    const int rc = finish_plan(p, kernel, M);
    if (rc) return rc;
    const int mask = vec_ok(x.ptr, x.row_stride, x.col_stride, M, N, es) |
                     vec_ok(y.ptr, y.row_stride, y.col_stride, M, N, es) << 3;
    return launch(p, kernel, static_cast<cudaStream_t>(stream), y, x, M, N, mask, p);
  });
}

template <bool LOG>
int backward(myops_out_operand dx, myops_operand dy, myops_operand y, int64_t M, int64_t N, int dtype,
             void* stream) {
  if (M <= 0 || N <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int es = sizeof(T);
    const rr::Geo g = rr_bwd_geo<T>(N);
    if (g.ns && rr::operands_ok({dy, y}, {dx}, {}, M, N, es)) {
      return rr::with_ns<kBwdLaunchNs<T>>(g.ns, [&](auto ns) -> int {
        return rr::launch(g, rr::cover_grid(g, M), rr_bwd_kernel<T, decltype(ns)::value, LOG>,
                          static_cast<cudaStream_t>(stream), static_cast<T*>(dx.ptr), dx.row_stride,
                          static_cast<const T*>(dy.ptr), dy.row_stride, static_cast<const T*>(y.ptr), y.row_stride, M,
                          (int)N, g.tpr, rr::l2_last(2 * M * N * es));
      });
    }
    if constexpr (es != 8) {  // misaligned rows (as the forward's)
      const bool phased =
          mis_fwd_on() &&
          same_phase(dy.ptr, dy.row_stride, dy.col_stride, dx.ptr, dx.row_stride, dx.col_stride, M, es) &&
          same_phase(y.ptr, y.row_stride, y.col_stride, dx.ptr, dx.row_stride, dx.col_stride, M, es);
      const rr::Geo gc = phased ? mis_cl_geo(N, es) : rr::Geo{};
      const MisGeo gm = phased && !(gc.ns && mis_mode() == 3) ? mis_bwd_geo(M, N, es, mis_subns(LOG, true)) : MisGeo{};
      if (gm.ns) {
        const auto go = [&](auto kernel) {
          kernel<<<(unsigned)ceil_div(M, (int64_t)gm.rows), dim3((unsigned)gm.tpr, (unsigned)gm.rows), 0,
                   static_cast<cudaStream_t>(stream)>>>(static_cast<T*>(dx.ptr), dx.row_stride,
                                                        static_cast<const T*>(dy.ptr), dy.row_stride,
                                                        static_cast<const T*>(y.ptr), y.row_stride, M, (int)N);
          return launch_status();
        };
        const auto xe = [&](auto ns) {
          constexpr int NS = decltype(ns)::value;
          return gm.xe == 4 ? go(mis_bwd_kernel<T, LOG, 4, NS>) : go(mis_bwd_kernel<T, LOG, 1, NS>);
        };
        return gm.ns == 1   ? xe(std::integral_constant<int, 1>{})
               : gm.ns == 2 ? xe(std::integral_constant<int, 2>{})
                            : xe(std::integral_constant<int, 4>{});
      }
      if (phased && st_rows(M, N, es)) {
        st_bwd_kernel<T, LOG><<<(unsigned)M, (unsigned)st_threads(es), 0, static_cast<cudaStream_t>(stream)>>>(
            static_cast<T*>(dx.ptr), dx.row_stride, static_cast<const T*>(dy.ptr), dy.row_stride,
            static_cast<const T*>(y.ptr), y.row_stride, (int)N);
        return launch_status();
      }
      const int64_t grid = gc.ns ? rr::resident_grid(gc, mis_bwd_cl_kernel<T, LOG>, M) : -1;
      if (grid > 0)
        return rr::launch(gc, grid, mis_bwd_cl_kernel<T, LOG>, static_cast<cudaStream_t>(stream),
                          static_cast<T*>(dx.ptr), dx.row_stride, static_cast<const T*>(dy.ptr), dy.row_stride,
                          static_cast<const T*>(y.ptr), y.row_stride, M, (int)N, gc.tpr);
    }
    Plan p = make_plan(M, N, es, LOG ? 1 : 2, 0, 0, true);
    auto kernel = bwd_kernel<T, LOG>;
    const int rc = finish_plan(p, kernel, M);
    if (rc) return rc;
    const int mask = vec_ok(dy.ptr, dy.row_stride, dy.col_stride, M, N, es) |
                     vec_ok(y.ptr, y.row_stride, y.col_stride, M, N, es) << 1 |
                     vec_ok(dx.ptr, dx.row_stride, dx.col_stride, M, N, es) << 3;
    return launch(p, kernel, static_cast<cudaStream_t>(stream), dx, dy, y, M, N, mask, p);
  });
}

}  // namespace softmax
}  // namespace myops
