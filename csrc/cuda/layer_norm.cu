// layer_norm over rows [M, N] on the rows.cuh engine.
//
// forward:   mu = mean(x);  var = mean((x - mu)^2)  (two passes over the staged row: no cancellation; the 16-bit
//            register kernel takes them in one pass of per-thread shifted sums, rr_stats_tshift)
//            r = 1 / sqrt(var + eps);  y = (x - mu) * r * w + b      (w = 1, b = 0 when absent)
//            saved: mean, rstd [M] (acc_t<T>)
// backward:  xh = (x - mu) * r;  g = dy * w   (mu, r: the saved ones on the register path; recomputed in fp64 by the
//            rows.cuh engine, ln_bwd_kernel)
//            dx = r * (g - mean(g) - xh * mean(g * xh))
//            dw = sum over rows of dy * xh;  db = sum over rows of dy   (per-row-group partials in a workspace
//            ws [2][groups][N], summed by the caller)
#include "rowpipe.cuh"

namespace {
// max(v, 0) that lets NaN through: fmaxf(NaN, 0) is 0, which gave a row holding an inf (variance NaN, as in eager)
// a finite rstd, so that its outputs came out as +-inf where eager's are NaN.
template <class A> __device__ __forceinline__ A nonneg(A v) { return v < A(0) ? A(0) : v; }
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
    A sq = A(0), ds = A(0);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A v[VEC];
      t.get(0, j, v, mu);  // lanes past the end read mu: they add 0
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A d = v[e] - mu;
        sq += d * d;
        ds += d;
      }
    }
    // (the corrected two-pass, as kCorrect's, for every type: this engine's rows are not bound by their arithmetic)
    const Pair<A> q = c.reduce(Pair<A>{sq, ds}, AddOp{}, red, cred);
    const A dm = q.b / A(N), rs = inv_sqrt(nonneg(q.a - q.b * dm) / A(N) + eps), ndr = -dm * rs;
    if (c.rank == 0 && c.tid == 0) {
      mean[r] = mu + dm;
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
        v[e] = fma(v[e] - mu, rs, ndr);
        if (wc) v[e] *= wv[e];
        if (bc) v[e] += bv[e];
      }
      o.put(j, nv, v);
    }
  }
  c.finish();
}

// The engine's backward recomputes mu and r in fp64 instead of reading the saved fp32 ones: where the terms of dx
// cancel (short rows; N = 2: dx = r * (g - mean(g)) * eps * r^2, a difference of terms of size r * g) their rounding
// cost up to 7x eager's error. One pass of sums about the row's first element K (x - K is exact in fp64 for 16/32-bit
// x, and (x_0 - mu)^2 <= N var bounds the cancellation in var = mean((x - K)^2) - mean(x - K)^2); per-element math
// in fp64.
template <class T>
__global__ void __launch_bounds__(kMaxThreads) ln_bwd_kernel(myops_out_operand dx,               // [M, N]
                                                             acc_t<T>* __restrict__ ws,          // [2][groups][N]
                                                             myops_operand dy,                   // [M, N]
                                                             myops_operand x,                    // [M, N]
                                                             const T* __restrict__ w,            // [N] or null
                                                             int64_t M, int64_t N, double eps, int vec_mask,
                                                             Plan p) {
  using A = acc_t<T>;
  using D = double;
  constexpr int VEC = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ Pair<D> red[32], cred[2];
  Ctx c(p, N);
  const myops_operand in[2] = {dy, x};
  const T* wc = w ? w + c.c0 : nullptr;
  const bool dwb = ws != nullptr;
  const ColAcc<T> acc(c, ws, smem + staged_bytes(p, sizeof(T)), N);
  if (dwb) acc.zero(c, 2);
  // g * w rounded to A like eager's product (mul_rn: no fma contraction), then widened
  auto load_gw = [&](const Tile<T, 2>& t, int64_t j, int nv, A k, A (&g)[VEC], A (&v)[VEC], D (&gw)[VEC]) {
    A wv[VEC];
    t.get(0, j, g);
    t.get(1, j, v, k);  // lanes past the row read K: u = 0
    if (wc) get_param(wc, (vec_mask >> 5) & 1, j, nv, wv);
#pragma unroll
    for (int e = 0; e < VEC; ++e) gw[e] = D(wc ? mul_rn(g[e], wv[e]) : g[e]);
  };
  for (int64_t r = c.first_row(); r < M; r += c.row_step()) {
    Tile<T, 2> t(c, in, vec_mask, r, smem);
    t.stage(M);
    const A k = to_acc(static_cast<const T*>(x.ptr)[r * x.row_stride]);  // element (r, 0): the same in every CTA
    D su = D(0), suu = D(0), sg = D(0), sgu = D(0);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A g[VEC], v[VEC];
      D gw[VEC];
      load_gw(t, j, t.valid(j), k, g, v, gw);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const D u = D(v[e]) - D(k);
        su += u;
        suu += u * u;
        sg += gw[e];
        sgu += gw[e] * u;
      }
    }
    const Pair<D> s1 = c.reduce(Pair<D>{su, suu}, AddOp{}, red, cred);
    const Pair<D> s2 = c.reduce(Pair<D>{sg, sgu}, AddOp{}, red, cred);
    const D mu = s1.a / D(N);  // of x - K
    const D var = nonneg(s1.b / D(N) - mu * mu);
    const D rs = D(1) / sqrt(var + eps);
    const D mg = s2.a / D(N), mgx = (s2.b / D(N) - mu * mg) * rs;  // mean(g), mean(g * xhat)
    const OutRow<T> o(dx, (vec_mask >> 3) & 1, c, r);
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      const int nv = t.valid(j);
      A g[VEC], v[VEC];
      D gw[VEC];
      load_gw(t, j, nv, k, g, v, gw);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const D xh = (D(v[e]) - D(k) - mu) * rs;
        if (dwb && e < nv) {
          acc.add(0, j * VEC + e, D(g[e]) * xh);
          acc.add(1, j * VEC + e, D(g[e]));
        }
        v[e] = A(rs * (gw[e] - mg - xh * mgx));
      }
      o.put(j, nv, v);
    }
  }
  if (dwb) acc.flush(c, 2);
  c.finish();
}

// ---- fast path (regrow.cuh): rows in registers -----------------------------------------------------------------
// The backward's output pass evaluates dx = r * (g - mean(g) - xh * mean(g xh)) for 16-bit types as
// fma(r, g, fma(x, -c2, c0)), with per-row c2 = r^2 mean(g xh) and c0 = mu c2 - r mean(g): 3 instructions fewer per
// element in a kernel that Nsight Compute showed issue-bound (bf16 [16384, 4096]: 71% SM throughput at 41% of DRAM).
// The rounding of c0 costs about |mu| / std fp32 ulps of dx, far below the 16-bit rounding of the output (fp32 keeps
// the exact form). The 16-bit forward likewise takes xh = fma(x, r, -mu r) (one instruction instead of two, in a
// kernel Nsight Compute showed issue-bound: bf16 [16384, 4096] at 73% SM throughput): its rounding residue,
// |mu| r fp32 ulps, is below the output's 16-bit rounding unless |mu| / std exceeds about 2^15 (a constant row of
// mean mu gets y = b + about 2^-24 |mu| r w instead of b). The backward's xh, which enters dw, stays (x - mu) * r.
// MYOPS_LN_FUSED=0 restores the exact forms (A/B).
#ifndef MYOPS_LN_FUSED
#define MYOPS_LN_FUSED 1
#endif
template <class T> constexpr bool kFused = MYOPS_LN_FUSED && sizeof(T) == 2;
// fp32 rows: the corrected two-pass statistics. The mean's first estimate mu = sum(x) / N carries the rounding of a
// sum of terms of size |mu|, a few ulps of |mu|, and xh = (x - mu) r multiplies that by r: |mu| / std ulps of the
// output (a row of 3 elements near -0.71, std 0.0076: 7.9e-6 where eager had 2.3e-6, H200). The second pass also
// sums d = x - mu (one add per element; the squares' reduction carries it): dm = mean(d) is mu's error,
// var = (sum(d^2) - sum(d) dm) / N, and the output takes xh = fma(x - mu, r, -dm r): the mean kept as two floats
// (x - mu is exact for x near mu), no rounding of |mu| reaches it. The saved mean is mu + dm. 16-bit rows keep the
// forms above, whose rounding is far below the output's. kLazy (below) takes the correction only in the rows that
// need it. H200 fp32 forward, % of copy, plain -> corrected in every row, two rounds (session 47): the register
// kernel N = 1024 99.1 / 99.1 -> 98.5 / 98.5, the long kernel N = 65536 91.6 / 91.5 -> 88.9 / 88.9.
// -DMYOPS_LN_CORRECT=0: the plain two-pass (A/B).
#ifndef MYOPS_LN_CORRECT
#define MYOPS_LN_CORRECT 1
#endif
template <class T> constexpr bool kCorrect = MYOPS_LN_CORRECT && sizeof(T) == 4;
// xh of an element x of a row with statistics (mu, rs) and nmr = ln_nmr(mu, dm, rs): kFused fma(x, rs, -mu rs), else
// fma(x - mu, rs, -dm rs) (dm = 0 where the statistics have no correction).
template <class T> __device__ __forceinline__ acc_t<T> ln_nmr(acc_t<T> mu, acc_t<T> dm, acc_t<T> rs) {
  return kFused<T> ? -mu * rs : -dm * rs;
}
template <class T> __device__ __forceinline__ acc_t<T> ln_xhat(acc_t<T> x, acc_t<T> mu, acc_t<T> rs, acc_t<T> nmr) {
  if constexpr (kFused<T>) return fmaf(x, rs, nmr);
  else return fma(x - mu, rs, nmr);
}
// The register kernels take inv_n = 1/N (rounded to acc_t) from the host and multiply: a division by N compiles to
// an IEEE division sequence of about a dozen instructions, once or twice per row (where a CTA runs one row).
// Accumulator chains (rr::Chains) of the 16-bit register forward's sums; fp32 keeps one (H200 [16384, 4096]
// forward 95.6 / 95.5 -> 95.0 / 94.9% of copy with four).
template <class T, int NS> constexpr int kLnChains = sizeof(T) == 2 ? rr::kChainsFor<NS> : 1;
// kLazy (fp32): the mean's correction only in rows where it matters, |mu| rs above kLazyAbove. mu's rounding is at
// most a few ulps of mean(|x|) <= sqrt(mu^2 + var) (the partial sums are at most sums of |x|), which costs the output
// a few ulps of sqrt(1 + (mu rs)^2): about one below 1/16. Every other row (randn rows, a first element far out in
// its row, nearly every row of an activation) keeps the plain two-pass's two scalar reductions; a row above it (a
// mean far from its spread) sums x - mu from its registers and reduces once more (the branch is uniform: every
// thread of a row holds the same totals). H200 fp32 forward, % of copy, two rounds, session 47's forms (the pair in
// every row of rr_stats, sums about the first element elsewhere) -> kLazy (session 48): N = 65536 89.6 / 89.7 -> 91.8
// / 91.5, N = 262144 87.6 / 87.2 -> 87.1 / 86.7, [16384, 4096] and N = 2048 even (100.3-100.8), N = 1024 98.4 / 98.6
// -> 97.9 / 97.8: the register kernel (rr_fwd, the rr_stats of LAZY false) keeps the pair in every row.
// -DMYOPS_LN_LAZY=0: the pair in every row everywhere (A/B).
#ifndef MYOPS_LN_LAZY
#define MYOPS_LN_LAZY 1
#endif
constexpr bool kLazy = MYOPS_LN_LAZY;
constexpr float kLazyAbove = 1.f / 16;
__device__ __forceinline__ bool ln_lazy_needed(float mu, float rs) { return fabsf(mu) * rs > kLazyAbove; }
// The statistics of a row held in registers (rr_fwd, rr_fwd_long_kernel), from this thread's sum of its part:
// mu = mean(x) and rs = 1 / sqrt(mean((x - mu)^2) + eps), two reductions (no cancellation); dm: mu's correction
// (kCorrect; else 0), in kLazy's rows (LAZY) or in every row, reduced beside the squares.
template <class T, int NS, bool FULL, bool LAZY>
__device__ __forceinline__ Pair<acc_t<T>> rr_stats(const rr::Regs<T, NS>& v, acc_t<T> sum, rr::RowReduce& red, int t,
                                                   int tpr, int N, acc_t<T> inv_n, acc_t<T> eps, acc_t<T>& dm) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  const A mu = red(sum, rr::Sum{}, A(0)) * inv_n;
  rr::Chains<A, kLnChains<T, NS>> sq;
  A ds = A(0);
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    if (!FULL && rr::Regs<T, NS>::col(s, t, tpr) >= N) break;  // slots past the row would add mu^2
    A a[VEC];
    v.fresh(s, a);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const A d = a[e] - mu;
      sq.fma(s * VEC + e, d, d);
      if constexpr (kCorrect<T> && !LAZY) ds += d;
    }
  }
  if constexpr (kCorrect<T> && LAZY) {
    const A var = red(sq.total(), rr::Sum{}, A(0)) * inv_n;  // about mu: the row's variance + dm^2
    A rs = row_rsqrt<T>(var + eps);
    dm = A(0);
    if (ln_lazy_needed(mu, rs)) {
#pragma unroll
      for (int s = 0; s < NS; ++s) {
        if (!FULL && rr::Regs<T, NS>::col(s, t, tpr) >= N) break;
        A a[VEC];
        v.fresh(s, a);
#pragma unroll
        for (int e = 0; e < VEC; ++e) ds += a[e] - mu;
      }
      dm = red(ds, rr::Sum{}, A(0)) * inv_n;
      rs = row_rsqrt<T>(nonneg(fmaf(-dm, dm, var)) + eps);
    }
    return {mu, rs};
  } else if constexpr (kCorrect<T>) {
    const Pair<A> q = red(Pair<A>{sq.total(), ds}, rr::Sum{}, Pair<A>{A(0), A(0)});
    dm = q.b * inv_n;
    return {mu, row_rsqrt<T>(nonneg(fmaf(-dm, q.b, q.a) * inv_n) + eps)};
  } else {
    dm = A(0);
    return {mu, row_rsqrt<T>(red(sq.total(), rr::Sum{}, A(0)) * inv_n + eps)};
  }
}
// The same statistics of a 16-bit row in one pass over the registers (MYOPS_LN_TSHIFT): each thread sums u = x - K
// and u^2 about its own first element K (u exact in fp32 for 16-bit x) and takes its mean m_t = K + su / n_t and
// squared deviations M2_t = suu - su^2 / n_t, which cancel by at most n_t (K is one of the thread's n_t elements:
// n_t (m_t - K)^2 <= (n_t - 1) M2_t), 32 for a bf16 thread of 4 vectors: 5 of fp32's 24 bits, against the 8-11 of
// the output. The row: mu = sum(n_t K + su) / N, var = sum(M2_t + n_t (m_t - mu)^2) / N, both of terms >= 0, where
// the two-pass form converts x once more and sums (x - mu)^2 (a third of the per-element work before the output).
// Nsight Compute, H200, bf16 [65536, 1024], with the chains and rsqrtf: 604 -> 565 instructions per row (39.6M ->
// 37.0M), 76.0 -> 72.6 us; forward, % of copy, two rounds: [16384, 4096] 87.3 / 87.2 -> 88.2 / 88.4, N = 1024
// 90.2 / 90.2 -> 91.3 / 91.3, N = 2048 87.6 / 87.4 -> 88.8 / 88.6 (without this form alone, N = 1024: 90.6).
// n_t, inv_nt: this thread's elements in the row and 1 / n_t (0 for a thread past the row: it adds 0 to both sums).
// This thread's (sum of u, sum of u^2), u = x - center, over its slots of the row (slots past N hold the fill, not
// center: left out; FULL: there are none), in NC accumulator chains (rr::Chains). CONV: how x is converted, kAt
// (Regs::at), kFresh (Regs::fresh, for a pass after a reduction over the same registers) or kOther
// (Regs::decode_other: other instructions than a pass before, see MYOPS_LN_DECODE).
enum Conv { kAt, kFresh, kOther };
template <Conv CONV, bool FULL = false, int NC = 1, class T, int NS>
__device__ __forceinline__ Pair<float> moments_about(const rr::Regs<T, NS>& v, float center, int t, int tpr, int N) {
  constexpr int VEC = 16 / sizeof(T);
  rr::Chains<float, NC> su, suu;
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    if (!FULL && rr::Regs<T, NS>::col(s, t, tpr) >= N) break;
    float a[VEC];
    if constexpr (CONV == kFresh) v.fresh(s, a);
    else if constexpr (CONV == kOther) v.decode_other(s, a);
    else
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] = v.at(s, e);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float u = a[e] - center;
      su.add(s * VEC + e, u);
      suu.fma(s * VEC + e, u, u);
    }
  }
  return {su.total(), suu.total()};
}
#ifndef MYOPS_LN_TSHIFT
#define MYOPS_LN_TSHIFT 1
#endif
template <class T, int NS> constexpr bool kTShift = MYOPS_LN_TSHIFT && sizeof(T) == 2 && NS <= 4;  // (8: as Chains)
template <class T, int NS, bool FULL, class R>
__device__ __forceinline__ Pair<float> rr_stats_tshift(const rr::Regs<T, NS>& v, R& red, int t, int tpr,
                                                       int N, float n_t, float inv_nt, float inv_n, float eps,
                                                       float& first_pass) {
  const float k = v.at(0, 0);  // (a thread past the row: the zero fill, with n_t = 0)
  const Pair<float> m = moments_about<kAt, FULL, rr::kChainsFor<NS>>(v, k, t, tpr, N);
  const float a = m.a, b = m.b;
  first_pass = a;
  const float mt = fmaf(a, inv_nt, k), m2t = fmaf(-a * inv_nt, a, b);
  const float mu = red(fmaf(n_t, k, a), rr::Sum{}, 0.f) * inv_n, d = mt - mu;
  const float q = red(fmaf(n_t * d, d, m2t), rr::Sum{}, 0.f);
  return {mu, row_rsqrt<T>(nonneg(q * inv_n) + eps)};
}
// The same statistics of a row split over a cluster in one exchange (RowReduce::slot_moments): each warp takes its
// part's mean by shuffles, then its squared deviations from it (the exact two-pass over the warp's registers); the
// exchange merges the warps' pairs. The long forward of 8 vectors per thread takes it (one CTA per SM, whose
// reductions no other CTA overlaps); H200, forward, % of copy, rr_stats -> rr_stats_slots: N = 262144 fp32 79.4 ->
// 84.8, bf16 79.9 -> 80.5 (a one-pass variant for 16-bit rows, per-thread moments about the first element merged by
// Chan's formula, measured even: H100 bf16 N = 262144 forward 92.4 / 89.9 -> 92.4 / 89.2 over two rounds, session 33,
// and was removed); elsewhere it lost (its warp-level pass is more instructions than the reduction it saves
// where two CTAs share an SM): N = 65536 (4 vectors) bf16 81.9 -> 80.9, fp32 90.0 -> 90.1; the register kernel at
// [16384, 4096] bf16 87.0 -> 83.7, fp32 95.4 -> 93.8. -DMYOPS_LN_SLOTS=0 takes rr_stats there too (A/B).
// kCorrect (fp32): kLazy's rows (|mu| rs > kLazyAbove) take the exact two-pass pair about mu in a second exchange:
// dm = mean(x - mu), var = mean((x - mu)^2) - dm^2 (the warps' own means are rounded at the size of |mean| there,
// and Chan's merge drops the cross term that rounding leaves: too large a share of the variance); the other rows keep
// the merged moments (under -DMYOPS_LN_LAZY=0 every row takes the pair). Session 47 took sums about the row's first
// element k instead, wrong where k lies far out in its row (the rounding of N |k - mu| in mu:
// test_first_element_outlier). H200, N = 262144 fp32 forward, % of copy, two rounds: plain 87.1 / 87.8, about k 87.6
// / 87.1, this 87.1 / 86.7.
#ifndef MYOPS_LN_SLOTS
#define MYOPS_LN_SLOTS 1
#endif
template <class T, int NS>
__device__ __forceinline__ Pair<acc_t<T>> rr_stats_slots(const rr::Regs<T, NS>& v, acc_t<T> sum, rr::RowReduce& red,
                                                         int t, int tpr, rr::RowCounts c, int N, acc_t<T> inv_n,
                                                         acc_t<T> eps, acc_t<T>& dm) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  const int t0 = t & ~31;  // this warp's first row thread
  const A sw = warp_sum(sum), nw = A(c.threads(t0, t0 + 32)), mw = sw * rr::recip_or_0(nw);
  A m2 = A(0);
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    if (rr::Regs<T, NS>::col(s, t, tpr) >= N) break;
    A a[VEC];
    v.decode_other(s, a);
#pragma unroll
    for (int e = 0; e < VEC; ++e) m2 += (a[e] - mw) * (a[e] - mw);
  }
  m2 = warp_sum(m2);
  const Pair<A> tot = red.slot_moments(Pair<A>{sw, m2}, c, inv_n);
  const A mu = tot.a * inv_n;
  A rs = row_rsqrt<T>(tot.b * inv_n + eps);
  dm = A(0);
  if (kCorrect<T> && (!kLazy || ln_lazy_needed(mu, rs))) {
    const Pair<A> p = red(moments_about<kOther>(v, mu, t, tpr, N), rr::Sum{}, Pair<A>{A(0), A(0)});
    dm = p.a * inv_n;
    rs = row_rsqrt<T>(nonneg(fmaf(-dm, p.a, p.b) * inv_n) + eps);
  }
  return {mu, rs};
}
// The long forward's 16-bit rows at 4 vectors per thread (MYOPS_LN_SHIFT): the statistics in one cluster exchange,
// of the sums of u = x - K about the row's first element K (u is exact in fp32 for 16-bit x): mu = K + mean(u),
// var = m2 - mean(u)^2, m2 = mean(u^2), where rr_stats takes two exchanges and a second pass over the registers. The
// difference cancels by m2 / var, at most N ((x_0 - mu)^2 <= N var); a row where it exceeds 256 (8 of fp32's 24
// bits: a first element far out in its row) takes the exact second pass about mu instead, whose mean also corrects
// mu (rounded at the size of K - mu), so the variance keeps at least 16 bits in every row, against the 8-11 of the
// output. Every thread of the cluster gets the same totals: the branch is uniform. H200, forward, % of copy, two
// rounds: N = 65536 bf16 81.0 / 81.7 -> 84.7 / 85.0, fp16 80.8 / 81.1 -> 84.5 / 85.0; H100 bf16 87.7 / 88.0 -> 88.2
// / 88.0. Not taken: at 8 vectors per thread (rr_stats_slots' one exchange: N = 262144 bf16 81.4 -> 67.5), and in
// the register kernel (rr_fwd, where two CTAs or more share an SM): with K loaded with its row, H200 [16384, 4096]
// bf16 87.2 -> 80.8 (K's latency on every row's critical path; K = 0, timed only, 88.3), with K loaded a row ahead,
// H100 93.8 -> 92.7, N = 2048 93.9 -> 91.7.
#ifndef MYOPS_LN_SHIFT
#define MYOPS_LN_SHIFT 1
#endif
// (AFF only: with the weight or the bias absent, the kernel's run-time tests and the branch's pass left it spilling
// 60 bytes instead of 24.)
template <class T, int NS, bool AFF> constexpr bool kShift = MYOPS_LN_SHIFT && sizeof(T) == 2 && NS == 4 && AFF;
template <class T, int NS>
__device__ __forceinline__ Pair<float> rr_stats_shift(const rr::Regs<T, NS>& v, float k, rr::RowReduce& red, int t,
                                                      int tpr, int N, float inv_n, float eps) {
  constexpr Pair<float> zero{0.f, 0.f};
  const Pair<float> tot = red(moments_about<kAt>(v, k, t, tpr, N), rr::Sum{}, zero);
  const float d = tot.a * inv_n, m2 = tot.b * inv_n, mu = k + d, var = m2 - d * d;
  if (var * 256.f >= m2) return {mu, row_rsqrt<T>(var + eps)};
  // (NaN takes this path too, and propagates)
  const Pair<float> t2 = red(moments_about<kFresh>(v, mu, t, tpr, N), rr::Sum{}, zero);
  const float dc = t2.a * inv_n;
  return {mu + dc, row_rsqrt<T>(t2.b * inv_n - dc * dc + eps)};
}
// A slot's output in place: a = xh w + b, xh = ln_xhat(a, mu, rs, nmr); the weight wv and
// bias bv enter where present (hw, hb).
template <class T, int VEC>
__device__ __forceinline__ void rr_affine(acc_t<T> (&a)[VEC], acc_t<T> mu, acc_t<T> rs, acc_t<T> nmr, bool hw, bool hb,
                                          const acc_t<T> (&wv)[VEC], const acc_t<T> (&bv)[VEC]) {
  using A = acc_t<T>;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {  // (one fma for weight and bias: the compiler kept a multiply and an add)
    const A xh = ln_xhat<T>(a[e], mu, rs, nmr);
    a[e] = hw && hb ? fmaf(xh, wv[e], bv[e]) : hw ? xh * wv[e] : hb ? xh + bv[e] : xh;
  }
}
// The warp-row kernel's output pass at 5 and 6 vectors per thread converts x again with Regs::decode_other (byte
// permutes), not with the statistics pass's instructions: with the same conversion, ptxas kept that pass's converted
// values live across the reduction (fresh()'s moves do not stop it), 107 and 106 registers (bf16) instead of 58 and
// 64. H200, forward, % of copy, two rounds: N = 1280 bf16 84.6 / 84.8 -> 91.1 / 91.3, fp16 85.7 / 85.7 -> 91.1 /
// 91.1. Not taken elsewhere: at 3 and 4 vectors (62 -> 51, 66 -> 51 registers) N = 768 bf16 92.0 / 92.0 -> 91.3 /
// 91.6, N = 1024 91.5 / 91.9 -> 91.3 / 91.4; in rr_fwd's output loop, [16384, 4096] 88.3 / 88.1 -> 88.0 / 88.0.
// -DMYOPS_LN_DECODE=0 keeps fresh() (A/B).
#ifndef MYOPS_LN_DECODE
#define MYOPS_LN_DECODE 1
#endif
template <int NS> constexpr bool kLnDecode = MYOPS_LN_DECODE && (NS == 5 || NS == 6);
// A row's output from its registers (the warp-row kernel): y = xh w + b, xh = ln_xhat(x, mu, rs, nmr), the weight
// and bias where present. rr_fwd keeps its own copy of the loop: called from there, this function took
// rr_fwd_kernel<bf16, 4, full> from 61 to 100 registers.
template <class T, int NS, bool FULL>
__device__ __forceinline__ void rr_out_row(const rr::Regs<T, NS>& v, T* y,  // [N]: this row
                                           const T* w, const T* b,     // [N] or null
                                           acc_t<T> mu, acc_t<T> rs, acc_t<T> nmr, int t, int tpr, int N) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    const int c = rr::Regs<T, NS>::col(s, t, tpr);
    if (!FULL && c >= N) break;
    A a[VEC], wv[VEC], bv[VEC];
    if constexpr (kLnDecode<NS>) v.decode_other(s, a);
    else v.fresh(s, a);
    if (w) rr::load_param(w, c, wv);
    if (b) rr::load_param(b, c, bv);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {  // (one fma for weight and bias: the compiler kept a multiply and an add)
      const A xh = ln_xhat<T>(a[e], mu, rs, nmr);
      a[e] = w && b ? fmaf(xh, wv[e], bv[e]) : w ? xh * wv[e] : b ? xh + bv[e] : xh;
    }
    rr::store(y, c, a);
  }
}
template <class T, int NS, bool FULL>
__device__ __forceinline__ void rr_fwd(T* __restrict__ y, int64_t ys,        // [M, N]
                                       acc_t<T>* __restrict__ mean,          // [M]
                                       acc_t<T>* __restrict__ rstd,          // [M]
                                       const T* __restrict__ x, int64_t xs,  // [M, N]
                                       const T* __restrict__ w,              // [N] or null
                                       const T* __restrict__ b,              // [N] or null
                                       int64_t M, int N, acc_t<T> inv_n, acc_t<T> eps, int tpr, int staged,
                                       bool last) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  extern __shared__ __align__(16) unsigned char stage_smem[];
  const rr::Lane l(tpr);
  rr::RowReduce red(red_buf, tpr);
  const rr::L2Hint h = rr::l2_hint(last);
  rr::Stage<T, NS> st(stage_smem, staged);
  const T zero = from_acc<T>(A(0));
  int slots = NS;  // (kTShift) this thread's slots inside the row
  if (!FULL)
    while (slots > 0 && rr::Regs<T, NS>::col(slots - 1, l.t, tpr) >= N) --slots;
  const float n_t = float(slots * VEC), inv_nt = slots ? 1.f / n_t : 0.f;
  st.start(x, xs, l.first() + l.slot, l.step(), M, N, l.t, tpr);
  for (int64_t r0 = l.first(); r0 < M; r0 += l.step()) {
    const int64_t r = r0 + l.slot;
    const bool live = r < M;
    rr::Regs<T, NS> v;
    if (staged) st.take(v, r, M, N, l.t, tpr, zero);
    else v.template load_row<FULL>(x, xs, r, M, N, l.t, tpr, zero, h);
    Pair<A> ms;
    A sum, dm = A(0);
    if constexpr (kTShift<T, NS>) {
      ms = rr_stats_tshift<T, NS, FULL>(v, red, l.t, tpr, N, n_t, inv_nt, inv_n, eps, sum);
      st.next(x, xs, r, l.step(), M, N, l.t, tpr, sum);
    } else {
      rr::Chains<A, kLnChains<T, NS>> cs;
#pragma unroll
      for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int e = 0; e < VEC; ++e) cs.add(s * VEC + e, v.at(s, e));
      sum = cs.total();
      st.next(x, xs, r, l.step(), M, N, l.t, tpr, sum);
      ms = rr_stats<T, NS, FULL, false>(v, sum, red, l.t, tpr, N, inv_n, eps, dm);
    }
    const A mu = ms.a, rs = ms.b, nmr = ln_nmr<T>(mu, dm, rs);
    if (!live) continue;
    if (l.t == 0) {
      mean[r] = mu + dm;
      rstd[r] = rs;
    }
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int c = rr::Regs<T, NS>::col(s, l.t, tpr);
      if (!FULL && c >= N) break;
      A a[VEC], wv[VEC], bv[VEC];
      v.fresh(s, a);
      if (w) rr::load_param(w, c, wv);
      if (b) rr::load_param(b, c, bv);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {  // (one fma for weight and bias: the compiler kept a multiply and an add)
        const A xh = ln_xhat<T>(a[e], mu, rs, nmr);
        a[e] = w && b ? fmaf(xh, wv[e], bv[e]) : w ? xh * wv[e] : b ? xh + bv[e] : xh;
      }
      rr::store(y + r * ys, c, a);
    }
  }
}
// FULL: no per-slot bounds checks (rr::Geo::full).
// fp32 runs two CTAs per SM (64 registers; 74 without the bound: one CTA per SM, 69% -> 52% of copy at
// N = 65536); so do 16-bit types (MYOPS_NORM16_MINB, regrow.cuh: 108 registers unbounded at 8 vectors per thread).
template <class T, int NS, bool FULL>
__global__ void __launch_bounds__(512, rr::norm_fwd_min_ctas<T, NS>())
    rr_fwd_kernel(T* y, int64_t ys, acc_t<T>* mean, acc_t<T>* rstd, const T* x, int64_t xs, const T* w, const T* b,
                  int64_t M, int N, acc_t<T> inv_n, acc_t<T> eps, int tpr, int staged, bool last) {
  rr_fwd<T, NS, FULL>(y, ys, mean, rstd, x, xs, w, b, M, N, inv_n, eps, tpr, staged, last);
}
template <int NS, bool FULL>
__global__ void __launch_bounds__(512, 2) rr_fwd_kernel_f32(float* y, int64_t ys, float* mean, float* rstd,
                                                            const float* x, int64_t xs, const float* w,
                                                            const float* b, int64_t M, int N, float inv_n,
                                                            float eps, int tpr, int staged, bool last) {
  rr_fwd<float, NS, FULL>(y, ys, mean, rstd, x, xs, w, b, M, N, inv_n, eps, tpr, staged, last);
}
template <class T, int NS, bool FULL> constexpr auto rr_fwd_kernel_for() {
  if constexpr (sizeof(T) == 4) return rr_fwd_kernel_f32<NS, FULL>;
  else return rr_fwd_kernel<T, NS, FULL>;
}
// 16-bit rows of one warp (rr::warp_row_geo): rr_fwd's statistics (one pass of per-thread shifted sums) and output,
// one row per warp, the threads per row known at compile time. It ran far ahead of the register kernel's rows of two
// warps, their last slots partly empty (H200, bf16 forward, % of copy, two rounds: N = 1280 66.4 / 66.8 -> 84.1 /
// 84.2 at 107 registers, 91.2 since at 58 (kLnDecode); N = 1600 at 8 vectors 70.6 / 70.5 -> 89.0 / 88.9).
template <class T, int NS, bool FULL>
__global__ void __launch_bounds__(512) wr_fwd_kernel(T* __restrict__ y, int64_t ys,        // [M, N]
                                                     float* __restrict__ mean,             // [M]
                                                     float* __restrict__ rstd,             // [M]
                                                     const T* __restrict__ x, int64_t xs,  // [M, N]
                                                     const T* __restrict__ w,              // [N] or null
                                                     const T* __restrict__ b,              // [N] or null
                                                     int64_t M, int N, float inv_n, float eps, bool last) {
  constexpr int VEC = 16 / sizeof(T);
  const rr::WarpRow wr;
  rr::Regs<T, NS> v;
  if (!wr.load<FULL>(v, x, xs, M, N, last, from_acc<T>(0.f))) return;
  const int t = wr.t;
  const int64_t r = wr.r;
  int slots = NS;
  if (!FULL)
    while (slots > 0 && rr::Regs<T, NS>::col(slots - 1, t, 32) >= N) --slots;
  const float n_t = float(slots * VEC), inv_nt = slots ? 1.f / n_t : 0.f;
  rr::WarpReduce red;
  float sum;
  const Pair<float> ms = rr_stats_tshift<T, NS, FULL>(v, red, t, 32, N, n_t, inv_nt, inv_n, eps, sum);
  const float mu = ms.a, rs = ms.b;
  if (t == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
  rr_out_row<T, NS, FULL>(v, y + r * ys, w, b, mu, rs, ln_nmr<T>(mu, 0.f, rs), t, 32, N);
}

// The 16-bit backward at 2 vectors per thread keeps a thread's dw and db sums in its own shared-memory slots
// (rr::ColSums, 16 per slot: 2 x 16-byte loads and stores per slot and row) instead of 32 registers: 100 registers
// instead of 124, the next row's prefetch kept. H200, bf16 forward+backward, % of copy, two rounds: [16384, 4096]
// 78.8 / 78.8 -> 84.8 / 84.9, N = 1024 74.6 / 74.6 -> 80.4 / 80.4, N = 2048 77.8 / 77.5 -> 83.5 / 83.6 (with slots
// of a 512-thread layout, 64 KB per CTA: 84.7, 77.7, 79.9). Not taken (that layout): without the prefetch (84
// registers) 73.0, 66.8, 68.2; bound to 80 registers (three CTAs of 256 per SM) 75.6, 66.5, 67.8 without it, 72.9,
// 61.1, 62.2 with it (56 bytes spilled); 4 vectors per thread with the sums in shared memory (128 registers, 28
// bytes spilled): 84.5 -> 80.0, 79.9 -> 68.2, 83.2 -> 76.8. -DMYOPS_LN_BWD_SMEM=0 restores the registers (A/B).
#ifndef MYOPS_LN_BWD_SMEM
#define MYOPS_LN_BWD_SMEM 1
#endif
template <class T, int NS> constexpr bool kBwdSmem = MYOPS_LN_BWD_SMEM && sizeof(T) == 2 && NS == 2;
template <class T, int NS>
using BwdSums = rr::ColSums<std::conditional_t<sizeof(T) == 8, float, T>, NS, 2, 512>;  // (fp64: never used)
// ws: [2][owners][N] dw, db partials (one row per CTA or cluster, Lane::owner; a CTA of several rows sums its row
// slots' first, ColSums::flush_rows), or null.
// AFF: w and ws are both present (a training step's affine layer_norm), so that no per-element select on them is
// left for the compiler to predicate: with them tested at run time it merged the two cases and shared g * xh between
// dw and sum(g w xh), which kept both from fusing into FFMAs (bf16: about 14 instructions per element in the first
// pass instead of 10).
template <class T, int NS, bool AFF>
__global__ void __launch_bounds__(NS > 1 ? 512 : 1024) rr_bwd_kernel(T* __restrict__ dx, int64_t dxs,  // [M, N]
                                                     acc_t<T>* __restrict__ ws,            // [2, owners, N]
                                                     const T* __restrict__ dy, int64_t dys,  // [M, N]
                                                     const T* __restrict__ x, int64_t xs,    // [M, N]
                                                     const acc_t<T>* __restrict__ mean,      // [M]
                                                     const acc_t<T>* __restrict__ rstd,      // [M]
                                                     const T* __restrict__ w,                // [N] or null
                                                     int64_t M, int N, acc_t<T> inv_n, int tpr) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  pdl_wait();  // (launched as a programmatic dependent: rr::launch_dependent)
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  const rr::Lane l(tpr);
  rr::RowReduce red(red_buf, tpr);
  const T zero = from_acc<T>(A(0));
  const bool hw = AFF || w != nullptr, hws = AFF || ws != nullptr;
  rr::Regs<T, NS> wr;  // the weight, loaded once: a thread's columns are the same on every row
  if (hw) wr.load(w, N, l.t, tpr, zero);
  constexpr bool SM = kBwdSmem<T, NS>;
  extern __shared__ __align__(16) unsigned char sums_smem[];
  const BwdSums<T, NS> dwb(sums_smem);
  A dw[SM ? 1 : NS][VEC], db[SM ? 1 : NS][VEC];
  if (SM && hws) dwb.zero();
#pragma unroll
  for (int s = 0; s < (SM ? 1 : NS); ++s)
#pragma unroll
    for (int e = 0; e < VEC; ++e) dw[s][e] = db[s][e] = A(0);
  // The next row's loads are issued before this row's reduction: with the few CTAs per SM that the per-column
  // sums leave room for, a row's load latency would otherwise stall the SM. The row statistics are prefetched with
  // the rows (a load per row on the critical path stalled every iteration). A row past M reads row M - 1
  // (rr::row_or_last) and only live rows enter dw and db. (Loading only rows that exist, without a fill, kept gn and
  // vn live across iterations: spills.)
  rr::Regs<T, NS> g, v;
  int64_t rc = rr::row_or_last(l.first() + l.slot, M);
  A mu_n = mean[rc], rs_n = rstd[rc];
  g.template load<false>(dy + rc * dys, N, l.t, tpr, zero);
  v.template load<false>(x + rc * xs, N, l.t, tpr, zero);
  for (int64_t r0 = l.first(); r0 < M; r0 += l.step()) {
    const int64_t r = r0 + l.slot;
    const bool live = r < M;
    rc = rr::row_or_last(r + l.step(), M);
    rr::Regs<T, NS> gn, vn;
    gn.template load<false>(dy + rc * dys, N, l.t, tpr, zero);
    vn.template load<false>(x + rc * xs, N, l.t, tpr, zero);
    const A mu = mu_n, rs = rs_n;
    mu_n = mean[rc];
    rs_n = rstd[rc];
    A sg = A(0), sgx = A(0);
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      if (rr::Regs<T, NS>::col(s, l.t, tpr) >= N) break;
      A acc[2][VEC];
      if (SM && hws && live) dwb.load(s, acc);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A gv = g.at(s, e), xh = (v.at(s, e) - mu) * rs;
        if (SM && hws && live) {
          acc[0][e] += gv * xh;
          acc[1][e] += gv;
        } else if (hws && live) {
          dw[SM ? 0 : s][e] += gv * xh;
          db[SM ? 0 : s][e] += gv;
        }
        const A gw = hw ? mul_rn(gv, wr.at(s, e)) : gv;
        sg += gw;
        sgx += gw * xh;
      }
      if (SM && hws && live) dwb.store(s, acc);
    }
    const Pair<A> tot = red(Pair<A>{sg, sgx}, rr::Sum{}, Pair<A>{A(0), A(0)});
    if (live) {
      const A mg = tot.a * inv_n, mgx = tot.b * inv_n, c2 = rs * rs * mgx, c0 = mu * c2 - rs * mg;
#pragma unroll
      for (int s = 0; s < NS; ++s) {
        const int c = rr::Regs<T, NS>::col(s, l.t, tpr);
        if (c >= N) break;
        A gv[VEC], xv[VEC], wv[VEC];
        g.fresh(s, gv);
        v.fresh(s, xv);
        if (hw) wr.fresh(s, wv);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const A gw = hw ? mul_rn(gv[e], wv[e]) : gv[e];
          gv[e] = kFused<T> ? fmaf(rs, gw, fmaf(xv[e], -c2, c0)) : rs * (gw - mg - (xv[e] - mu) * rs * mgx);
        }
        rr::store(dx + r * dxs, c, gv);
      }
    }
    g = gn;
    v = vn;
  }
  if (!hws) return;
  if constexpr (!SM) {
    if (l.rows == 1) {
      const int64_t owners = l.owners(), o = l.owner();
#pragma unroll
      for (int s = 0; s < NS; ++s) {
        const int c = rr::Regs<T, NS>::col(s, l.t, tpr);
        if (c >= N) break;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          ws[o * N + c + e] = dw[s][e];
          ws[(owners + o) * N + c + e] = db[s][e];
        }
      }
      return;
    }
#pragma unroll
    for (int s = 0; s < NS; ++s) {  // (rr_bwd_geo gave the CTA shared memory for them)
      A a[2][VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        a[0][e] = dw[s][e];
        a[1][e] = db[s][e];
      }
      dwb.store(s, a);
    }
  }
  dwb.flush(sums_smem, ws, l, N);
}

// Rows too long for rr_bwd_kernel's registers (its per-column sums and the next row's prefetch) that the pipelined
// kernel below does not take (fp32 rows over 131072 elements; MYOPS_ROW_PIPE_BWD=0): kLongNs vectors per thread (4
// 16-bit, 8 fp32) in CTAs of up to kLongCta threads of a cluster of up to 16 hold dy and x of a row (262144
// elements); the dw and db sums of a thread's columns live in its own shared-memory slots (rr::ColSums, no barrier:
// each thread touches only its own), 128 KB per CTA, so one CTA runs per SM. K: rr_bwd_long_kernel_for.
// - 16-bit rows also hold the next row (PF), loaded before the current row's first pass, so that HBM stays busy
//   through that row's passes and cluster reduction (without it, H200 bf16 [256, 262144]: 29% of DRAM bandwidth),
//   and the weight in shared memory (rr::ColParam, 32 KB: its L2 loads each stalled their slot; H200 bf16
//   forward+backward, % of copy, N = 65536 61.0 -> 65.6).
// - fp32 rows (8 vectors of dy and x in 64 registers: no room for the next row) read the weight through L1, all eight
//   slots' loads issued together at the start of each pass (WB; pass 1's go out with dy's and x's, pass 2's hit L1).
//   Loaded a slot at a time, ptxas put each load after the previous slot's multiply: eight L2 round trips in a row
//   under full DRAM load (H100, the kernel alone, benchmarks/ln_long_probe.cu: 73.3 -> 85.1-86.3% of copy; the op's
//   forward+backward at [256, 262144] 77.7 -> 86.5). Held in shared memory (64 KB beside the sums) the weight costs
//   L1 the room the streamed loads need (71-74). Only kernels that know at compile time that the weight is there
//   batch its loads (K 1, 2): testing it at run time, ptxas spilled.
// - fp32 rows ask L2 for the first slots of the next row's dy and x once the current row's reduction is done
//   (rr::BwdRows' L2, cp.async.bulk.prefetch.L2; no registers): kLongL2Next, 1 with the dw/db sums, else 2. More in
//   flight early measured slower, as did staging the next row's slots in shared memory by cp.async.
// The measurements, and the variants not taken: BENCHMARKS.md sessions 10, 24 and 36-38. A/B switches:
// -DMYOPS_LN_LONG_W=0 (the weight a slot at a time), -DMYOPS_LN_L2_NEXT=k (every kernel's L2 slots; 0 none).
#ifndef MYOPS_LN_LONG_W
#define MYOPS_LN_LONG_W 1
#endif
#ifdef MYOPS_LN_L2_NEXT
template <int K> constexpr int kLongL2Next = MYOPS_LN_L2_NEXT;
#else
template <int K> constexpr int kLongL2Next = K == 2 && MYOPS_LN_LONG_W ? 1 : 2;
#endif
constexpr int kLongCta = 512;
template <class T, int NS, int K>
__global__ void __launch_bounds__(kLongCta) rr_bwd_long_kernel(T* __restrict__ dx, int64_t dxs,         // [M, N]
                                                               acc_t<T>* __restrict__ ws,             // [2, owners, N]
                                                               const T* __restrict__ dy, int64_t dys,  // [M, N]
                                                               const T* __restrict__ x, int64_t xs,    // [M, N]
                                                               const acc_t<T>* __restrict__ mean,      // [M]
                                                               const acc_t<T>* __restrict__ rstd,      // [M]
                                                               const T* __restrict__ w,                // [N] or null
                                                               int64_t M, int N, acc_t<T> inv_n, int tpr) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  constexpr bool PF = sizeof(T) == 2;
  constexpr bool WB = !PF && K && MYOPS_LN_LONG_W;  // the weight's slots loaded together (16-bit: shared memory)
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  extern __shared__ __align__(16) unsigned char stage_smem[];
  const rr::ColSums<T, NS, 2, kLongCta> dwb(stage_smem);  // dw, db
  const rr::ColParam<T, NS, kLongCta> wsm(stage_smem + decltype(dwb)::bytes());
  const rr::Lane l(tpr);
  rr::RowReduce red(red_buf, tpr);
  const T zero = from_acc<T>(A(0));
  const bool hw = K || w != nullptr, hws = K == 2 || (!K && ws != nullptr);
  if (hws) dwb.zero();
  if (PF && hw) wsm.fill(w, N, l.t, tpr);
  // one row per cluster, every row live; the statistics are prefetched with the rows (rr::BwdRows)
  int64_t rn = rr::row_or_last(l.first(), M);
  A mu_n = mean[rn], rs_n = rstd[rn];
  rr::BwdRows<T, NS, PF, PF ? 0 : kLongL2Next<K>> rows(dy, dys, x, xs, rn, N, l.t, tpr, zero);
  const rr::Regs<T, NS>&g = rows.g, &v = rows.v;
  rr::Regs<T, NS> wr;  // (WB) the weight's slots
  for (int64_t r = l.first(); r < M; r += l.step()) {
    rn = rr::row_or_last(r + l.step(), M);
    rows.begin(r, rn, N, l.t, tpr, zero);
    const A mu = mu_n, rs = rs_n, nmr = -mu * rs;  // kFused: xh = fma(x, rs, -mu rs)
    mu_n = mean[rn];
    rs_n = rstd[rn];
    A sg = A(0), sgx = A(0);
    if (WB) wr.load(w, N, l.t, tpr, zero);
    const auto weight = [&](int s, int c, A(&wv)[VEC]) {
      if (PF) {
        wsm.get(s, wv);
      } else if (WB) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) wv[e] = wr.at(s, e);
      } else {
        rr::load_param(w, c, wv);
      }
    };
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int c = rr::Regs<T, NS>::col(s, l.t, tpr);
      if (c >= N) break;
      A wv[VEC], acc[2][VEC];  // acc: this slot's dw, db sums
      if (hw) weight(s, c, wv);
      if (hws) dwb.load(s, acc);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A gv = g.at(s, e), xh = kFused<T> ? fmaf(v.at(s, e), rs, nmr) : (v.at(s, e) - mu) * rs;
        if (hws) {
          acc[0][e] += gv * xh;
          acc[1][e] += gv;
        }
        const A gw = hw ? mul_rn(gv, wv[e]) : gv;
        sg += gw;
        sgx += gw * xh;
      }
      if (hws) dwb.store(s, acc);
    }
    const Pair<A> tot = red.generic(Pair<A>{sg, sgx}, rr::Sum{}, Pair<A>{A(0), A(0)});  // (always a cluster)
    rows.mid(rn, r + l.step() < M, N, l.t, tpr);
    const A mg = tot.a * inv_n, mgx = tot.b * inv_n, c2 = rs * rs * mgx, c0 = mu * c2 - rs * mg;
    if (WB) wr.load(w, N, l.t, tpr, zero);  // (L1 hits: pass 1 just read them)
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int c = rr::Regs<T, NS>::col(s, l.t, tpr);
      if (c >= N) break;
      A gv[VEC], xv[VEC], wv[VEC];
      g.fresh(s, gv);
      v.fresh(s, xv);
      if (hw) weight(s, c, wv);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A gw = hw ? mul_rn(gv[e], wv[e]) : gv[e];
        gv[e] = kFused<T> ? fmaf(rs, gw, fmaf(xv[e], -c2, c0)) : rs * (gw - mg - (xv[e] - mu) * rs * mgx);
      }
      rr::store(dx + r * dxs, c, gv);
    }
    rows.end();
  }
  if (hws) dwb.flush(ws, l.owners(), l.owner(), N, l.t, tpr);
}

// The long-row backward as a pipeline (rowpipe.cuh), for rows that a cluster of up to 16 CTAs of 512 threads of 4
// vectors holds (rp::takes says which): dy and x arrive by the bulk copy engine into three stages of shared memory
// (3 x 64 KB), the weight sits beside them (32 KB), and the dw and db sums of a thread's 4 slots stay in its registers
// (64 of them). Row j + 1's first pass runs while row j's sums cross the cluster; row j's second pass follows. One CTA
// per SM. H200 forward+backward, % of copy, rr_bwd_long_kernel -> this kernel: bf16 N = 65536 67.6 -> 75.8,
// N = 262144 60.0 -> 70.9 (Nsight Compute at N = 262144: 55.6% of DRAM bandwidth, 25 instructions per element, a
// quarter of the stall samples waiting for a stage's copies).
template <class T, int NS> using LnFit = rp::Fit<T, NS, kLongCta, 2>;  // dy, x
template <class T, int NS, bool AFF>
__global__ void __launch_bounds__(kLongCta, 1) rr_bwd_pipe_kernel(T* __restrict__ dx, int64_t dxs,         // [M, N]
                                                                  acc_t<T>* __restrict__ ws,             // [2, owners, N]
                                                                  const T* __restrict__ dy, int64_t dys,  // [M, N]
                                                                  const T* __restrict__ x, int64_t xs,    // [M, N]
                                                                  const acc_t<T>* __restrict__ mean,      // [M]
                                                                  const acc_t<T>* __restrict__ rstd,      // [M]
                                                                  const T* __restrict__ w,                // [N] or null
                                                                  int64_t M, int N, acc_t<T> inv_n, int tpr) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  using L = typename LnFit<T, NS>::S;
  extern __shared__ __align__(128) unsigned char pipe_smem[];
  typename LnFit<T, NS>::P pipe(pipe_smem, L::bars(pipe_smem));
  const rr::ColParam<T, NS, kLongCta> wsm(L::param(pipe_smem));
  const rp::SplitReduce red(L::reduce(pipe_smem));
  const rr::Lane l(tpr);
  const bool hw = AFF || w != nullptr, hws = AFF || ws != nullptr;
  const T* const base[2] = {dy, x};
  const int64_t rstr[2] = {dys, xs};
  if (hw) wsm.fill(w, N, l.t, tpr);
  A dw[NS][VEC], db[NS][VEC];
#pragma unroll
  for (int s = 0; s < NS; ++s)
#pragma unroll
    for (int e = 0; e < VEC; ++e) dw[s][e] = db[s][e] = A(0);
  // the saved statistics of row r
  const auto stats = [&](int64_t r) { return float2{mean[r], rstd[r]}; };
  // row r's first pass from stage b: its dw and db terms, and its sums of g w and g w xh
  const auto pass1 = [&](int b, int64_t, float2 st) {
    const A mu = st.x, rs = st.y, nmr = -mu * rs;
    A sg = A(0), sgx = A(0);
    pipe.slots(b, wsm, hw, l.t, tpr, N, [&](int s, int, const A(&g)[VEC], const A(&xv)[VEC], const A(&wv)[VEC]) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A gv = g[e], xh = kFused<T> ? fmaf(xv[e], rs, nmr) : (xv[e] - mu) * rs;
        if (hws) {
          dw[s][e] += gv * xh;
          db[s][e] += gv;
        }
        const A gw = hw ? mul_rn(gv, wv[e]) : gv;
        sg += gw;
        sgx += gw * xh;
      }
    });
    return float2{sg, sgx};
  };
  // row r's dx from stage b and the row's totals
  const auto pass2 = [&](int b, int64_t r, float2 st, float2 tot) {
    const A mu = st.x, rs = st.y;
    const A mg = tot.x * inv_n, mgx = tot.y * inv_n, c2 = rs * rs * mgx, c0 = mu * c2 - rs * mg;
    pipe.slots(b, wsm, hw, l.t, tpr, N, [&](int, int c, const A(&g)[VEC], const A(&xv)[VEC], const A(&wv)[VEC]) {
      A d[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A gw = hw ? mul_rn(g[e], wv[e]) : g[e];
        d[e] = kFused<T> ? fmaf(rs, gw, fmaf(xv[e], -c2, c0)) : rs * (gw - mg - (xv[e] - mu) * rs * mgx);
      }
      rr::store(dx + r * dxs, c, d);
    });
  };
  pipe.run(base, rstr, l.first(), l.step(), M, N, tpr, red, stats, pass1, pass2);
  if (hws) {
    rp::store_sums<T, NS>(ws + l.owner() * N, dw, N, l.t, tpr);
    rp::store_sums<T, NS>(ws + (l.owners() + l.owner()) * N, db, N, l.t, tpr);
  }
}

// The forward on long rows (rr::long_fwd), as rms_norm.cuh's rr_fwd_long_kernel: a persistent grid of clusters
// of up to kLongCta threads, NS vectors per thread, the next row loaded into registers before the current one is
// reduced, the weight and bias in shared memory (rr::ColParam, filled once: Nsight Compute put a fifth of
// rr_fwd_kernel's stalls at [256, 262144] bf16 on their L2 loads in the output pass). The statistics are
// rr_stats_slots' at 8 vectors per thread and rr_stats_shift's for 16-bit rows at 4 (one cluster exchange per row
// each), else rr_fwd's (two); the output is rr_fwd's.
// AFF: weight and bias both present (compile time).
template <class T, int NS, bool AFF>
__global__ void __launch_bounds__(kLongCta, NS == 4 ? 2 : 1)
    rr_fwd_long_kernel(T* __restrict__ y, int64_t ys,        // [M, N]
                       acc_t<T>* __restrict__ mean,          // [M]
                       acc_t<T>* __restrict__ rstd,          // [M]
                       const T* __restrict__ x, int64_t xs,  // [M, N]
                       const T* __restrict__ w,              // [N] or null
                       const T* __restrict__ b,              // [N] or null
                       int64_t M, int N, acc_t<T> inv_n, acc_t<T> eps, int tpr, bool last) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  using P = rr::ColParam<T, NS, kLongCta>;
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  extern __shared__ __align__(16) unsigned char stage_smem[];
  const bool hw = AFF || w != nullptr, hb = AFF || b != nullptr;
  const P wsm(stage_smem), bsm(stage_smem + (hw ? P::bytes() : 0));  // (the launch gives what is present)
  const rr::Lane l(tpr);
  rr::RowReduce red(red_buf, tpr);
  const T zero = from_acc<T>(A(0));
  if (hw) wsm.fill(w, N, l.t, tpr);
  if (hb) bsm.fill(b, N, l.t, tpr);
  const rr::L2Hint h = rr::l2_hint(last);
  const int nvec = N / VEC, q = nvec / tpr;
  const rr::RowCounts counts{VEC, q, nvec - q * tpr};
  rr::Regs<T, NS> v;  // one row per cluster, every row live; a prefetch past M reads row M - 1
  int64_t rn = rr::row_or_last(l.first(), M);
  v.load(x + rn * xs, N, l.t, tpr, zero, h);
  A k = kShift<T, NS, AFF> ? to_acc(x[rn * xs]) : A(0);
  for (int64_t r = l.first(); r < M; r += l.step()) {
    rr::Regs<T, NS> vn;
    rn = rr::row_or_last(r + l.step(), M);
    vn.load(x + rn * xs, N, l.t, tpr, zero, h);
    const A kn = kShift<T, NS, AFF> ? to_acc(x[rn * xs]) : A(0);
    Pair<A> ms;
    A dm = A(0);
    if constexpr (kShift<T, NS, AFF>) {
      ms = rr_stats_shift<T, NS>(v, k, red, l.t, tpr, N, inv_n, eps);
    } else {
      A sum = A(0);
#pragma unroll
      for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int e = 0; e < VEC; ++e) sum += v.at(s, e);
      ms = MYOPS_LN_SLOTS && NS == 8 ? rr_stats_slots<T, NS>(v, sum, red, l.t, tpr, counts, N, inv_n, eps, dm)
                                     : rr_stats<T, NS, false, kLazy>(v, sum, red, l.t, tpr, N, inv_n, eps, dm);
    }
    const A mu = ms.a, rs = ms.b, nmr = ln_nmr<T>(mu, dm, rs);
    if (l.t == 0) {
      mean[r] = mu + dm;
      rstd[r] = rs;
    }
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int c = rr::Regs<T, NS>::col(s, l.t, tpr);
      if (c >= N) break;
      A a[VEC], wv[VEC], bv[VEC];
      v.fresh(s, a);
      if (hw) wsm.get(s, wv);
      if (hb) bsm.get(s, bv);
      rr_affine<T>(a, mu, rs, nmr, hw, hb, wv, bv);
      rr::store(y + r * ys, c, a);
    }
    v = vn;
    k = kn;
  }
}

// Vectors per thread (0: fp64 takes the rows.cuh engine). Backward holds dy and x of two rows (prefetch), the
// weight and two sums (VEC fp32 per vector) of each: one vector per thread and up to 1024 threads keep it within 64
// registers (at two vectors it took 92-113 registers, one or two CTAs per SM; 16-bit rows that one CTA holds take two
// nonetheless, rr_bwd_geo, and rows of up to 4 CTAs of 256 too, rr::bwd16_geo).
template <class T> constexpr int kFwdNs = sizeof(T) == 8 ? 0 : 8;
template <class T> constexpr int kBwdNs = sizeof(T) == 8 ? 0 : 1;
template <int MaxNs> rr::Geo rr_geo(int64_t N, int elem, bool bwd = false) {
  if constexpr (MaxNs == 0) return {};
  else if (bwd) return rr::geometry(N, elem, MaxNs, 1024, rr::target_tpr_bwd(), rr::kMaxCluster);
  // fp32 forward: 256 threads per row (4 vectors each at N = 4096) measured ahead of 128 (8 vectors each):
  // H200 [16384, 4096] 92.6 -> 94.9% of copy, H100 96.3 -> 97.3 (its two reductions' serial chains are shorter;
  // rms_norm, with one, was unchanged, and 16-bit types lost 22 points)
  // at least 4 vectors per thread (rr::geometry): H200, forward, % of copy, [65536, 1024] bf16 46.4 -> 90.5, fp32
  // 47.7 -> 97.1; [32768, 2048] bf16 68.1 -> 87.5, fp32 70.4 -> 97.0 (torch.compile 92.2, 96.9, 61.3, 93.9)
  else return rr::geometry(N, elem, MaxNs, 512, rr::target_tpr(elem == 4 ? 256 : 128), rr::kMaxCluster,
                          rr::cluster_cta(elem == 2 ? 512 : 256), rr::min_ns_knob(4));
}
// Backward: fp32 rows longer than 1024 threads x 8 CTAs hold take 2 vectors per thread in 512-thread CTAs (bound to
// 512 threads, 128 registers), up to 65536 elements in a cluster of 16, instead of the rows.cuh engine (fwd+bwd at
// N = 65536 was 24% of copy on the H200).
// 16-bit rows that one CTA holds take 2 vectors per thread (at least; rows of 512-thread CTAs at most, 124
// registers, no spill): per element, the row's reduction, barrier and loop cost half as much. bf16
// forward+backward, % of copy, two rounds, 1 -> 2 vectors, H200: [16384, 4096] 77.0 / 77.1 -> 78.3 / 78.2,
// [65536, 1024] 73.4 / 73.2 -> 74.0 / 73.9, [32768, 2048] 76.1 / 76.0 -> 77.2 / 77.2; H100 (within 0.6): 85.7 ->
// 85.5, 81.5 -> 80.9 / 81.1, 83.9 / 84.0 -> 84.1 / 84.2. MYOPS_LN_BWD_NS=1 restores one (A/B, read once).
template <class T> constexpr int kBwdLaunchNs = sizeof(T) == 8 ? 0 : 2;
inline int bwd16_ns() {
  static const int v = rr::env_knob("MYOPS_LN_BWD_NS", 2, [](int n) { return n == 1 || n == 2; });
  return v;
}
// The CTA's shared memory for rr_bwd_kernel's dw and db sums: kBwdSmem's slots, or room to combine the row slots'
// register sums where a CTA holds several rows (ColSums::flush_rows).
template <class T> rr::Geo with_bwd_sums(rr::Geo g) {
  if (g.ns && (g.rows > 1 || (g.ns == 2 && kBwdSmem<T, 2>)))
    g.smem = g.ns * BwdSums<T, 1>::bytes(g.threads);
  return g;
}
template <class T> rr::Geo rr_bwd_geo(int64_t N) {
  if (N < rr::kExactBwdBelow) return {};
  if (sizeof(T) == 2 && bwd16_ns() == 2) {
    const rr::Geo g = rr::bwd16_geo(N);
    if (g.ns) return with_bwd_sums<T>(g);
  }
  rr::Geo g = rr_geo<kBwdNs<T>>(N, sizeof(T), true);
  if (sizeof(T) == 4 && !g.ns) {
    g = rr::geometry(N, sizeof(T), 2, 512, rr::target_tpr_bwd(), rr::kMaxCluster);
    if (g.cluster == 1) g = rr::Geo{};
  }
  return with_bwd_sums<T>(g);
}
// rr_bwd_long_kernel's geometry (a cluster of up to 512-thread CTAs, kLongNs vectors per thread, 128 KB of dw/db slots
// and, 16-bit, 32 KB of weight per CTA), or none; rr::long_bwd says which rows take it.
template <class T> constexpr int kLongNs = sizeof(T) == 4 ? 8 : 4;
template <class T> rr::Geo rr_bwd_long_geo(int64_t N) {
  if constexpr (sizeof(T) == 8) {
    return {};
  } else {
    rr::Geo g = rr::geometry(N, sizeof(T), kLongNs<T>, kLongCta, rr::target_tpr_bwd(), rr::kMaxCluster);
    if (g.cluster == 1) return {};
    g.smem = rr::ColSums<T, kLongNs<T>, 2, kLongCta>::bytes() +
             (sizeof(T) == 2 ? rr::ColParam<T, kLongNs<T>, kLongCta>::bytes() : 0);
    return g;
  }
}
// K: 2 the weight and the dw/db sums (a training step's affine layer_norm), 1 the weight alone (a frozen layer; fp32,
// whose batched weight loads need the weight known at compile time), 0 either tested at run time.
template <class T> auto rr_bwd_long_kernel_for(bool w, bool ws) {
  if (w && ws) return rr_bwd_long_kernel<T, kLongNs<T>, 2>;
  if constexpr (sizeof(T) == 4) {
    if (w) return rr_bwd_long_kernel<T, kLongNs<T>, 1>;
  }
  return rr_bwd_long_kernel<T, kLongNs<T>, 0>;
}
// rr_bwd_pipe_kernel's geometry (4 vectors per thread, a cluster of 2-16 CTAs of up to 512 threads) where the row
// takes it (rp::takes; fp32 rows too: H200 forward+backward, % of copy, the register kernel -> the pipeline, N = 24576
// 73.7 -> 90.0, N = 32768 75.8 -> 85.3, N = 65536 80.9 -> 87.1; on the H100 16-bit rows of up to 65536 elements keep
// rr_bwd_long_kernel), else none (also fp32 rows over 131072 elements).
template <class T> rr::Geo rr_bwd_pipe_geo(int64_t N, bool regs_hold) {
  if constexpr (sizeof(T) == 8) {
    return {};
  } else {
    if (!rp::takes(regs_hold, N, sizeof(T), true, 65536)) return {};
    rr::Geo g = rp::geometry(N, sizeof(T), kLongCta);
    if (g.ns) g.smem = LnFit<T, 4>::S::bytes();
    return g;
  }
}
template <class T> auto rr_bwd_pipe_kernel_for(bool w, bool ws) {
  return w && ws ? rr_bwd_pipe_kernel<T, 4, true> : rr_bwd_pipe_kernel<T, 4, false>;
}
// The long forward's kernel for ns vectors per thread (rr::long_fwd_geo), with weight and bias or not both.
template <class T> auto rr_fwd_long_kernel_for(int ns, bool w, bool b) {
  if (ns == 4) return w && b ? rr_fwd_long_kernel<T, 4, true> : rr_fwd_long_kernel<T, 4, false>;
  return w && b ? rr_fwd_long_kernel<T, 8, true> : rr_fwd_long_kernel<T, 8, false>;
}
// The register backward's kernel for g.ns vectors per thread, with a weight (w) and parameter gradients (ws); its
// grid (below) and the launch must agree.
template <class T, int NS> auto rr_bwd_kernel_for(bool w, bool ws) {
  return w && ws ? rr_bwd_kernel<T, NS, true> : rr_bwd_kernel<T, NS, false>;
}
template <class T> int64_t rr_bwd_grid(const rr::Geo& g, int64_t M, bool w, bool ws) {
  if (!ws) return rr::cover_grid(g, M);
  return rr::with_ns<kBwdLaunchNs<T>, int64_t>(g.ns, [&](auto ns) -> int64_t {
    return rr::resident_grid(g, rr_bwd_kernel_for<T, decltype(ns)::value>(w, ws), M);
  });
}

Plan fwd_plan(int64_t M, int64_t N, int dtype) { return make_plan(M, N, elem_size(dtype), 1, 0, 0, true); }
Plan bwd_plan(int64_t M, int64_t N, int dtype, bool ws) {
  return make_plan(M, N, elem_size(dtype), 2, ws ? 2 : 0, dtype == MYOPS_F64 ? 8 : 4, true);
}
// fp32 rows of N = 8 TPR (4096 at 512 threads, 2048 at 256): a lean kernel of one row per CTA, two 16-byte vectors a
// thread (vectors t and t + TPR: each load instruction reads TPR * 16 contiguous bytes), the exact two-pass statistics
// over the registers, 32 registers: four CTAs of 512 threads per SM, where the register kernel (rr_fwd_kernel_f32<4>)
// runs 256 threads x 4 vectors at 64 registers, two CTAs (50% occupancy), behind torch.compile's two-pass kernel of
// 512 threads at 32 registers. Forward, [16384, 4096], % of copy, two rounds (session 42, torch 2.11): H200 96.7 /
// 97.4 -> 100.7 / 100.7 (compile 98.9), H100 100.3 / 100.5 -> 101.0 / 101.6 (compile 101.4). The loads under
// l2_hint(last) as the register kernel's; under evict_first 93.0, evict_unchanged 98.1-98.3 (H200). Rows of 2048 at
// 256 threads, [32768, 2048] (session 43): H200 98.9 / 98.8 -> 100.1 / 99.7 (compile 94.5), H100 100.1 / 100.0 ->
// 101.0 / 100.9; not rows of 8192 at 1024 threads: H200 98.2 / 98.3 -> 93.2 / 93.1. MYOPS_LN_WIDE=0: the register
// kernel (A/B).
// kCorrect: kLazy's correction where |mu| rs > kLazyAbove, else the plain two-pass; -DMYOPS_LN_LAZY=0: the pair (a
// sum of x - mu beside the squares, every row). H200 fp32 [16384, 4096] forward, % of copy, two rounds (session 47):
// plain two-pass 100.7 / 100.5, the pair 98.7 / 98.6, sums about the row's first element k 100.6 / 100.8 (taken in
// session 47, wrong: a first element far out in its row puts the rounding of N |k - mu| into mu; an fp32 row of 2048
// whose first element is 1000 had 9x eager's error, test_first_element_outlier, session 48).
template <int TPR>
__global__ void __launch_bounds__(TPR, 2048 / TPR) ln_wide_f32_kernel(float* __restrict__ y, int64_t ys,  // [M, N]
                                                                      float* __restrict__ mean,          // [M]
                                                                      float* __restrict__ rstd,          // [M]
                                                                      const float* __restrict__ x,       // [M, N]
                                                                      int64_t xs,
                                                                      const float* __restrict__ w,  // [N] or null
                                                                      const float* __restrict__ b,  // [N] or null
                                                                      float inv_n, float eps, bool last) {
  __shared__ float red[32];
  __shared__ Pair<float> red2[32];
  const int64_t r = blockIdx.x;
  const rr::WideRowF32<TPR> row(x, xs, r, l2_hint(last));
  const Vec<float, 4>&v0 = row.v[0], &v1 = row.v[1];
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) s += v0.v[e] + v1.v[e];
  const float mu = block_sum(s, red) * inv_n;
  float q = 0.f, ds = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float d0 = v0.v[e] - mu, d1 = v1.v[e] - mu;
    q = fmaf(d0, d0, fmaf(d1, d1, q));
    if constexpr (kCorrect<float> && !kLazy) ds += d0 + d1;
  }
  float dm = 0.f, rs;
  if constexpr (kCorrect<float> && !kLazy) {
    const Pair<float> t = block_sum(Pair<float>{q, ds}, red2);
    dm = t.b * inv_n;
    rs = inv_sqrt(nonneg(fmaf(-dm, t.b, t.a) * inv_n) + eps);
  } else {
    const float var = block_sum(q, red) * inv_n;  // about mu: the row's variance + dm^2
    rs = inv_sqrt(var + eps);
    if (kCorrect<float> && ln_lazy_needed(mu, rs)) {  // (uniform: one row per CTA)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds += (v0.v[e] - mu) + (v1.v[e] - mu);
      dm = block_sum(ds, red) * inv_n;
      rs = inv_sqrt(nonneg(fmaf(-dm, dm, var)) + eps);
    }
  }
  const float nmr = ln_nmr<float>(mu, dm, rs);
  if (threadIdx.x == 0) {
    mean[r] = mu + dm;
    rstd[r] = rs;
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int c = row.col(k);
    Vec<float, 4> o = row.v[k];
    const Vec<float, 4> wv = w ? *reinterpret_cast<const Vec<float, 4>*>(w + c) : Vec<float, 4>{{1.f, 1.f, 1.f, 1.f}};
    const Vec<float, 4> bv = b ? *reinterpret_cast<const Vec<float, 4>*>(b + c) : Vec<float, 4>{{0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int e = 0; e < 4; ++e) o.v[e] = fmaf(ln_xhat<float>(o.v[e], mu, rs, nmr), wv.v[e], bv.v[e]);
    *reinterpret_cast<Vec<float, 4>*>(y + r * ys + c) = o;
  }
}
// 16-bit rows of 4096: the same one-row-per-CTA shape at 128 threads x 4 vectors (62-63 registers), the exact
// two-pass statistics (two chains each: half the dependent adds), and the register kernel's fused output
// fma(fma(x, rs, -mu rs), w, b) (its rounding is below the 16-bit output's). Forward [16384, 4096], % of copy, two
// rounds (session 43, torch 2.11), the register kernel -> this: H200 bf16 90.7 / 90.7 -> 96.7 / 96.5, fp16 91.6 ->
// 97.0 (torch.compile bf16 65.4); 256 x 2 (40-44 registers) 92.9 / 92.8, 512 x 1 (32) 75.2 / 75.1: with one row per
// CTA the two barriers stall every warp of a row at once, and a thread with more vectors in flight covers them. H100:
// bf16 99.0 / 99.0 -> 99.8 / 99.7, fp16 99.1 / 99.3 -> 100.4 / 100.3 (compile bf16 86.6). MYOPS_LN_WIDE=0: the
// register kernels (A/B).
// TPR = 0: rows of other widths at a run-time width (rr::wide_threads), 4 vectors a thread where a whole number of
// warps holds the row so, else 2 (2560: 160 x 2; 3072: 96 x 4, 5120: 160 x 4, 7168: 224 x 4, 12288: 384 x 4), where
// the register kernel's geometry (rr_geo: toward 128 threads a row) leaves slots empty: bf16 [13107, 5120] on 96
// threads of 8 vectors (640 vectors in 768 slots; a 40-88 byte stack frame) forward at 81.1% of copy, [26214, 2560]
// on 96 x 4 at 76.4, [9362, 7168] on 128 x 8 at 83.0 (H200, session 54). Taken for rows of 2049-8192. H200 bf16
// forward / forward+backward, % of copy (session 55, torch 2.11), the register kernel -> this: [26214, 2560] 75.8 /
// 81.5 -> 90.5 / 87.3, [21845, 3072] 89.1 / 83.5 -> 98.1 / 86.1, [13107, 5120] 81.0 / 76.1 -> 95.9 / 81.0,
// [9362, 7168] 83.1 / 80.7 -> 91.8 / 83.9, [8192, 8192] 91.8 / 85.3 -> 94.8 / 86.4 (torch.compile 83.4 / 48.6); not
// longer rows: [5461, 12288] 92.2 -> 76.3, [4096, 16384] 92.0 -> 81.7 (at 4 vectors, 64-66 registers: a CTA of
// 384-512 threads is alone on its SM). MYOPS_LN_WIDE=2 takes those too, =0 none (A/B).
template <class T, int TPR, int NV>
__global__ void __launch_bounds__(TPR > 0 ? TPR : rr::kWideMaxThreads)
    ln_wide16_kernel(T* __restrict__ y, int64_t ys,        // [M, N]
                     float* __restrict__ mean,             // [M]
                     float* __restrict__ rstd,             // [M]
                     const T* __restrict__ x, int64_t xs,  // [M, N]
                     const T* __restrict__ w,              // [N] or null
                     const T* __restrict__ b,              // [N] or null
                     float inv_n, float eps, bool last) {
  using Row = rr::WideRow<T, TPR, NV>;
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const Row row(x, xs, r, l2_hint(last));
  const float mu = block_sum(row.fold2([](float s, float v) { return s + v; }), red) * inv_n;
  const float q = row.fold2([mu](float s, float v) { return fmaf(v - mu, v - mu, s); });
  const float rs = rsqrtf(block_sum(q, red) * inv_n + eps), nmr = -mu * rs;
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int c = row.col(k);
    float a[Row::kVec], wv[Row::kVec], bv[Row::kVec];
    row.get(k, a);
    rr::param_vec(w, c, 1.f, wv);
    rr::param_vec(b, c, 0.f, bv);
#pragma unroll
    for (int e = 0; e < Row::kVec; ++e) a[e] = fmaf(fmaf(a[e], rs, nmr), wv[e], bv[e]);
    row.put(y + r * ys, k, a);
  }
}
}  // namespace

extern "C" int myops_layer_norm_cuda(myops_out_operand y, void* mean, void* rstd, myops_operand x, const void* w,
                                     const void* b, int64_t M, int64_t N, double eps, int dtype, void* stream) {
  if (M <= 0 || N <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int es = sizeof(T);
    if constexpr (es != 8) {
      const rr::Geo gl = rr::long_fwd_geo(N, es, kLongCta, (w != nullptr) + (b != nullptr));
      if (gl.ns && rr::operands_ok({x}, {y}, {w, b}, M, N, es)) {
        const auto kernel = rr_fwd_long_kernel_for<T>(gl.ns, w != nullptr, b != nullptr);
        const int64_t grid = rr::resident_grid(gl, kernel, M);
        if (grid > 0)  // (else its clusters cannot be scheduled: the register kernel's may)
          return rr::launch(gl, grid, kernel, static_cast<cudaStream_t>(stream), static_cast<T*>(y.ptr), y.row_stride,
                            static_cast<acc_t<T>*>(mean), static_cast<acc_t<T>*>(rstd), static_cast<const T*>(x.ptr),
                            x.row_stride, static_cast<const T*>(w), static_cast<const T*>(b), M, (int)N,
                            (acc_t<T>)(1.0 / N), (acc_t<T>)eps, gl.tpr, rr::l2_last(M * N * es));
      }
    }
    if constexpr (es == 2) {
      const rr::Geo gw = rr::warp_row_geo<rr::kWarpNs>(N, es, 128, rr_geo<kFwdNs<T>>(N, es).full);
      if (gw.ns && rr::operands_ok({x}, {y}, {w, b}, M, N, es))
        return rr::with_warp_ns<rr::kWarpNs>(gw, [&](auto ns, auto full) {
          return rr::launch(gw, rr::cover_grid(gw, M), wr_fwd_kernel<T, decltype(ns)::value, decltype(full)::value>,
                            static_cast<cudaStream_t>(stream), static_cast<T*>(y.ptr), y.row_stride,
                            static_cast<float*>(mean), static_cast<float*>(rstd), static_cast<const T*>(x.ptr),
                            x.row_stride, static_cast<const T*>(w), static_cast<const T*>(b), M, (int)N,
                            (float)(1.0 / N), (float)eps, rr::l2_last(M * N * es));
        });
    }
    if constexpr (es != 8) {  // the one-row-per-CTA kernels: fp32 rows of 4096 and 2048, 16-bit rows of 4096
      // (1: the rows above and 16-bit rows of 2049-8192 at run-time widths, ln_wide16_kernel<T, 0, NV>; 2: 16-bit rows
      // of any width it holds; 0: none)
      static const int wide = rr::env_knob("MYOPS_LN_WIDE", 1, [](int v) { return v >= 0 && v <= 2; });
      const auto go = [&](auto kernel, int tpr) {
        kernel<<<(unsigned)M, tpr, 0, static_cast<cudaStream_t>(stream)>>>(
            static_cast<T*>(y.ptr), y.row_stride, static_cast<float*>(mean), static_cast<float*>(rstd),
            static_cast<const T*>(x.ptr), x.row_stride, static_cast<const T*>(w), static_cast<const T*>(b),
            (float)(1.0 / N), (float)eps, rr::l2_last(M * N * es));
        return launch_status();
      };
      if (wide && rr::operands_ok({x}, {y}, {w, b}, M, N, es)) {
        if constexpr (es == 4) {
          if (rr::WideRowF32<512>::fits(M, N)) return go(ln_wide_f32_kernel<512>, 512);
          if (rr::WideRowF32<256>::fits(M, N)) return go(ln_wide_f32_kernel<256>, 256);
        } else {
          if (rr::WideRow<T, 128, 4>::fits(M, N)) return go(ln_wide16_kernel<T, 128, 4>, 128);
          if (wide == 2 || N <= 8192) {  // (wide_threads: over 2048)
            if (const int t = rr::wide_threads(M, N, es, 4)) return go(ln_wide16_kernel<T, 0, 4>, t);
            if (const int t = rr::wide_threads(M, N, es, 2)) return go(ln_wide16_kernel<T, 0, 2>, t);
          }
        }
      }
    }
    const rr::Geo g0 = rr_geo<kFwdNs<T>>(N, es);
    if (g0.ns && rr::operands_ok({x}, {y}, {w, b}, M, N, es)) {
      return rr::with_ns<kFwdNs<T>>(g0.ns, [&](auto ns) -> int {
        constexpr int NS = decltype(ns)::value;
        const rr::Geo g = rr::staged(g0, rr::Stage<T, NS>::bytes_per_thread(), rr_fwd_kernel_for<T, NS, false>());
        const auto kernel = g.pick(rr_fwd_kernel_for<T, NS, false>(), rr_fwd_kernel_for<T, NS, true>());
        const int64_t grid = rr::row_grid(g, kernel, M);
        if (grid < 0) return (int)MYOPS_EARG;
        return rr::launch(g, grid, kernel, static_cast<cudaStream_t>(stream), static_cast<T*>(y.ptr),
                          y.row_stride, static_cast<acc_t<T>*>(mean), static_cast<acc_t<T>*>(rstd),
                          static_cast<const T*>(x.ptr), x.row_stride, static_cast<const T*>(w),
                          static_cast<const T*>(b), M, (int)N, (acc_t<T>)(1.0 / N), (acc_t<T>)eps, g.tpr,
                          g.nbuf, rr::l2_last(M * N * es));
      });
    }
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

// Rows of each of the two [rows, N] workspaces (dw, db partials) the backward pass needs for these operands (-1: no
// launch configuration fits this device).
extern "C" int64_t myops_layer_norm_backward_ws_cuda(myops_operand dy, myops_operand x, const void* w, int64_t M,
                                                     int64_t N, int dtype) {
  if (M <= 0 || N <= 0) return 0;
  int64_t rows_ = 0;
  dispatch_dtype(dtype, [&](auto tag) -> int {
    using T = decltype(tag);
    const rr::Geo g = rr_bwd_geo<T>(N);
    const bool ok = rr::operands_ok({dy, x}, {rr::contiguous_out(N)}, {w}, M, N, sizeof(T));
    if constexpr (sizeof(T) != 8) {
      const rr::Geo gp = rr_bwd_pipe_geo<T>(N, g.ns != 0), gl = rr_bwd_long_geo<T>(N);
      const int64_t pgrid = gp.ns && ok ? rr::resident_grid(gp, rr_bwd_pipe_kernel_for<T>(w != nullptr, true), M) : -1;
      if (pgrid > 0) {
        rows_ = rr::owners(gp, pgrid);
        return (int)MYOPS_OK;
      }
      if (gl.ns && ok && rr::long_bwd(g.ns, N, sizeof(T))) {
        rows_ = rr::owners(gl, rr::resident_grid(gl, rr_bwd_long_kernel_for<T>(w != nullptr, true), M));
        return (int)MYOPS_OK;
      }
    }
    if (g.ns && ok) {
      const int64_t grid = rr_bwd_grid<T>(g, M, w != nullptr, true);
      rows_ = rr::owners(g, grid);
      return (int)MYOPS_OK;
    }
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
                                              int64_t N, double eps, int dtype, void* stream) {
  if (M <= 0 || N <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int es = sizeof(T);
    const rr::Geo g = rr_bwd_geo<T>(N);
    if constexpr (es != 8) {
      const rr::Geo gp = rr_bwd_pipe_geo<T>(N, g.ns != 0);
      if (gp.ns && rr::operands_ok({dy, x}, {rr::contiguous_out(N)}, {w}, M, N, es)) {
        const auto pkernel = rr_bwd_pipe_kernel_for<T>(w != nullptr, ws != nullptr);
        const int64_t pgrid = rr::resident_grid(gp, pkernel, M);
        if (pgrid > 0) {
          if (!rr::operands_ok({}, {dx}, {}, M, N, es)) return (int)MYOPS_EARG;  // the workspace was sized for this
          return rr::launch(gp, pgrid, pkernel, static_cast<cudaStream_t>(stream), static_cast<T*>(dx.ptr),
                            dx.row_stride, static_cast<acc_t<T>*>(ws), static_cast<const T*>(dy.ptr), dy.row_stride,
                            static_cast<const T*>(x.ptr), x.row_stride, static_cast<const acc_t<T>*>(mean),
                            static_cast<const acc_t<T>*>(rstd), static_cast<const T*>(w), M, (int)N,
                            (acc_t<T>)(1.0 / N), gp.tpr);
        }
      }
      const rr::Geo gl = rr_bwd_long_geo<T>(N);
      if (gl.ns && rr::long_bwd(g.ns, N, es) && rr::operands_ok({dy, x}, {rr::contiguous_out(N)}, {w}, M, N, es)) {
        if (!rr::operands_ok({}, {dx}, {}, M, N, es)) return (int)MYOPS_EARG;  // the workspace was sized for this
        const auto kernel = rr_bwd_long_kernel_for<T>(w != nullptr, ws != nullptr);
        const int64_t grid = rr::resident_grid(gl, kernel, M);
        if (grid < 0) return (int)MYOPS_EARG;
        return rr::launch(gl, grid, kernel, static_cast<cudaStream_t>(stream), static_cast<T*>(dx.ptr), dx.row_stride,
                          static_cast<acc_t<T>*>(ws), static_cast<const T*>(dy.ptr), dy.row_stride,
                          static_cast<const T*>(x.ptr), x.row_stride, static_cast<const acc_t<T>*>(mean),
                          static_cast<const acc_t<T>*>(rstd), static_cast<const T*>(w), M, (int)N, (acc_t<T>)(1.0 / N),
                          gl.tpr);
      }
    }
    if (g.ns && rr::operands_ok({dy, x}, {rr::contiguous_out(N)}, {w}, M, N, es)) {
      // the workspace was sized for this path: dx must qualify too (the C++ layer allocates it contiguous)
      if (!rr::operands_ok({}, {dx}, {}, M, N, es)) return (int)MYOPS_EARG;
      const int64_t grid = rr_bwd_grid<T>(g, M, w != nullptr, ws != nullptr);
      if (grid < 0) return (int)MYOPS_EARG;
      return rr::with_ns<kBwdLaunchNs<T>>(g.ns, [&](auto ns) -> int {
        return rr::launch_dependent(g, grid, rr_bwd_kernel_for<T, decltype(ns)::value>(w != nullptr, ws != nullptr),
                          static_cast<cudaStream_t>(stream),
                          static_cast<T*>(dx.ptr), dx.row_stride, static_cast<acc_t<T>*>(ws),
                          static_cast<const T*>(dy.ptr), dy.row_stride, static_cast<const T*>(x.ptr), x.row_stride,
                          static_cast<const acc_t<T>*>(mean), static_cast<const acc_t<T>*>(rstd),
                          static_cast<const T*>(w), M, (int)N, (acc_t<T>)(1.0 / N), g.tpr);
      });
    }
    Plan p = bwd_plan(M, N, dtype, ws != nullptr);
    auto kernel = ln_bwd_kernel<T>;
    const int rc = finish_plan(p, kernel, M);
    if (rc) return rc;
    const int mask = vec_ok(dy.ptr, dy.row_stride, dy.col_stride, M, N, es) |
                     vec_ok(x.ptr, x.row_stride, x.col_stride, M, N, es) << 1 |
                     vec_ok(dx.ptr, dx.row_stride, dx.col_stride, M, N, es) << 3 | vec_ok(w, 0, 1, 1, N, es) << 5;
    return launch(p, kernel, static_cast<cudaStream_t>(stream), dx, static_cast<acc_t<T>*>(ws), dy, x,
                  static_cast<const T*>(w), M, N, eps, mask, p);
  });
}
