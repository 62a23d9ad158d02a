// rowpipe.cuh: a software pipeline for the norms' long-row backward (rows split over a cluster, the per-column sums
// of the weight gradients held in registers).
//
// Each CTA of a cluster owns a column slice of every row it takes (regrow.cuh's layout: slot s of CTA rank k is the
// contiguous chunk of columns (s * tpr + k * blockDim) * VEC, blockDim 16-byte vectors). The operands' slices of row
// j arrive by the bulk copy engine (cp.async.bulk, one copy per operand and slot, completing on stage j % STAGES's
// "full" mbarrier), STAGES rows ahead, without registers or L1: the CTA's registers hold the per-column sums instead
// (rr_bwd_long_kernel kept them in shared memory and the next row in registers, one 512-thread CTA per SM, and
// left HBM idle through each row's passes and cluster reduction). A stage is refilled once every warp has read it
// (its "empty" mbarrier, one arrival per warp).
//
// A row's two sums cross the cluster by SplitReduce: send(j) (after row j's first pass) and take(j) (before its
// second pass) are apart, so a kernel runs row j + 1's first pass while row j's reduction is in flight:
//
//   stages:  | row j: second pass | row j + 1: first pass | rows j + 2 ...: in flight |
//
// Shapes (shared memory): stages [STAGES][OPS][NS][CTA] 16-byte slots (a warp's accesses contiguous: no bank
// conflicts), then the reduction's slots and every mbarrier.
#pragma once
#include "regrow.cuh"

// MYOPS_PIPE_STAGES=n: n stages instead of what fits in shared memory (A/B).
#ifndef MYOPS_PIPE_STAGES
#define MYOPS_PIPE_STAGES 0
#endif

namespace myops {
namespace rp {

// MYOPS_ROW_PIPE_BWD: 1 (default) the policy of takes() below, 0 never the pipelined kernels (A/B), 2 every row they
// hold (tuning). Read once.
inline int pipe_mode() {
  static const int v = rr::env_knob("MYOPS_ROW_PIPE_BWD", 1, [](int m) { return m >= 0 && m <= 2; });
  return v;
}
// Whether a norm's backward takes its pipelined kernel (where that kernel's geometry holds the row): every row the
// long kernel would take (rr::long_bwd: every 16-bit row over one CTA's 16384 elements, rows the register kernel
// cannot hold, or MYOPS_ROW_LONG_BWD's), and fp32 rows that the register kernel holds where the op measured the
// pipeline faster (fp32). On devices that are not dram_rich_sms (the H100), 16-bit rows of up to long16 elements
// take rr_bwd_long_kernel instead (or, under a MYOPS_ROW_LONG_BWD that they are short of, the register kernel),
// where the op measured it faster there (the pipeline was chosen on the H200 against
// an older long kernel; H100, bf16 forward+backward, % of copy, pipeline -> long kernel, N = 24576 / 32768 / 49152 /
// 65536 / 131072 / 262144: layer_norm 85.6 -> 88.6, 83.2 -> 85.9, 88.0 -> 88.8, 84.6 -> 86.5, 86.1 -> 85.7, 85.0 ->
// 80.0; rms_norm 89.3 -> 91.4, 88.2 -> 90.2, 90.4 -> 93.1, 89.0 -> 90.7, 90.6 -> 91.2, 90.1 -> 90.8; add_rms_norm
// 116.2 -> 107.1, ..., 114.0 -> 106.5).
inline bool takes(bool regs_hold, int64_t N, int elem, bool fp32, int64_t long16) {
  const int m = pipe_mode();
  if (m != 1) return m == 2;
  if (elem == 2 && N <= long16 && !dram_rich_sms()) return false;
  return rr::long_bwd(regs_hold, N, elem) || (elem == 4 && fp32);
}
// The pipelined kernels' geometry for a row of N (ns = 0: none): 4 vectors per thread in a cluster of 2-16 CTAs of up
// to `cta` threads (16-bit rows up to 262144 elements, fp32 up to 131072). 2 vectors per thread (twice the CTAs, 6
// stages of 32 KB) measured slower where they hold the row (H200 forward+backward, % of copy, 4 -> 2 vectors:
// layer_norm bf16 N = 65536 77.0 -> 69.5, fp32 87.6 -> 81.2, rms_norm bf16 84.0 -> 76.6, add_rms_norm bf16 106.0 ->
// 99.6; fp32 N = 24576 layer_norm 90.4 -> 80.4).
inline rr::Geo geometry(int64_t N, int elem, int cta) {
  const rr::Geo g = rr::geometry(N, elem, 4, cta, rr::target_tpr_bwd(), rr::kMaxCluster);
  return g.ns == 4 && g.cluster > 1 ? g : rr::Geo{};
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// Row j's slices of OPS [M, N] operands in STAGES shared-memory stages of NS slots of CTA threads.
template <class T, int NS, int CTA, int OPS, int STAGES> struct Pipe {
  static constexpr int VEC = 16 / sizeof(T);
  static constexpr int kStageBytes = OPS * NS * CTA * 16;
  static constexpr int bytes() { return STAGES * kStageBytes; }
  static constexpr int bar_bytes() { return 2 * STAGES * 8; }
  unsigned char* smem;  // bytes()
  unsigned bars;        // full[STAGES], then empty[STAGES]
  bool hinted;          // the copies carry hint's L2 policy (rr::l2_hint)
  rr::L2Hint hint;

  // bar: bar_bytes() of shared memory, 8-byte aligned. Thread 0 initializes (run()).
  __device__ Pipe(unsigned char* s, unsigned char* bar, bool hinted_ = false, rr::L2Hint h = {})
      : smem(s), bars(rr::smem_addr(bar)), hinted(hinted_), hint(h) {}
  __device__ void init() const {
    for (int b = 0; b < STAGES; ++b) {
      mbar_init(full(b), 1);
      mbar_init(empty(b), blockDim.x / 32);
    }
  }
  __device__ __forceinline__ unsigned full(int b) const { return bars + 8 * b; }
  __device__ __forceinline__ unsigned empty(int b) const { return bars + 8 * (STAGES + b); }
  // Bytes of slot s's chunk of this CTA (0 past N; the last chunk may be partial).
  __device__ __forceinline__ static unsigned chunk(int s, int N, int tpr) {
    const int64_t c0 = ((int64_t)s * tpr + (int64_t)rr::cluster_rank() * blockDim.x) * VEC;
    const int64_t n = (int64_t)N - c0;
    return n <= 0 ? 0u : (unsigned)(std::min<int64_t>(n, (int64_t)blockDim.x * VEC) * sizeof(T));
  }
  // This thread's slot s of operand op in stage b.
  __device__ __forceinline__ uint4 get(int b, int op, int s) const {
    return reinterpret_cast<const uint4*>(smem)[((b * OPS + op) * NS + s) * CTA + threadIdx.x];
  }
  // This thread's slot s of operand op in stage b, converted to acc_t.
  __device__ __forceinline__ void get(int b, int op, int s, acc_t<T> (&x)[VEC]) const {
    const uint4 q = get(b, op, s);
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int e = 0; e < VEC; ++e) x[e] = VEC == 4 ? rr::word_elem<T>(u[e], 0) : rr::word_elem<T>(u[e >> 1], e & 1);
  }
  // Calls f(s, c, g, x, w) for each of this thread's slots s (its column c < N) of stage b, with operands 0 and 1 and,
  // if hw, the weight's slot from wsm (else w is unset) converted to acc_t: the loop of both passes of every kernel.
  template <class Param, class F>
  __device__ __forceinline__ void slots(int b, const Param& wsm, bool hw, int t, int tpr, int N, F&& f) const {
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int c = rr::Regs<T, NS>::col(s, t, tpr);
      if (c >= N) break;
      acc_t<T> g[VEC], x[VEC], w[VEC];
      get(b, 0, s, g);
      get(b, 1, s, x);
      if (hw) wsm.get(s, w);
      f(s, c, g, x, w);
    }
  }
  // Thread 0: copies row `row` of each operand (base[op] + row * rs[op]) into stage b.
  __device__ __forceinline__ void issue(int b, const T* const (&base)[OPS], const int64_t (&rs)[OPS], int64_t row,
                                        int N, int tpr) const {
    unsigned tx = 0;  // bytes of the row's slices in this CTA
#pragma unroll
    for (int s = 0; s < NS; ++s) tx += chunk(s, N, tpr);
    mbar_expect(full(b), OPS * tx);
    const int64_t c0 = (int64_t)rr::cluster_rank() * blockDim.x * VEC;
#pragma unroll
    for (int op = 0; op < OPS; ++op) {
#pragma unroll
      for (int s = 0; s < NS; ++s) {
        const unsigned n = chunk(s, N, tpr);
        if (n == 0) break;
        const unsigned dst = rr::smem_addr(smem + (size_t)((b * OPS + op) * NS + s) * CTA * 16);
        const T* src = base[op] + row * rs[op] + c0 + (int64_t)s * tpr * VEC;
        if (hinted)
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
              "%4;" ::"r"(dst), "l"(src), "r"(n), "r"(full(b)), "l"(hint.pol)
              : "memory");
        else
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
              "l"(src), "r"(n), "r"(full(b))
              : "memory");
      }
    }
  }
  // Every thread: waits until stage b holds its row (phase parity `ph`).
  __device__ __forceinline__ void wait(int b, unsigned ph) const { rr::mbar_wait(full(b), ph); }
  // Every thread, once it has read stage b: the warp's arrival on its empty barrier.
  __device__ __forceinline__ void release(int b) const {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(empty(b));
  }
  // Thread 0, before refilling stage b: waits until every warp released it (phase parity `ph`).
  __device__ __forceinline__ void wait_empty(int b, unsigned ph) const { rr::mbar_wait(empty(b), ph); }

  // Rows of a cluster: first + j * step for j < rows(...).
  __device__ __forceinline__ static int64_t rows(int64_t first, int64_t step, int64_t M) {
    return first < M ? (M - 1 - first) / step + 1 : 0;
  }
  // Thread 0, after init: starts the copies of the cluster's first STAGES rows.
  __device__ __forceinline__ void start(const T* const (&base)[OPS], const int64_t (&rs)[OPS], int64_t first,
                                        int64_t step, int64_t M, int N, int tpr) const {
    const int64_t n = rows(first, step, M);
    for (int j = 0; j < STAGES && j < n; ++j) issue(j, base, rs, first + j * step, N, tpr);
  }
  // Every thread, the whole of a pipelined kernel's rows: thread 0 sets up the mbarriers and starts the first rows'
  // copies, a cluster barrier, the row loop, a cluster barrier at exit. stats(r): row r's saved statistics (loaded
  // two rows ahead, so that the loads' latency hides behind a pass); pass1(b, r, st) -> float2: row r's first pass
  // over stage b, returning the thread's two partial sums (sent to the cluster); pass2(b, r, st, tot): row r's second
  // pass, with the cluster's totals. Row j + 1's first pass runs before row j's second (its sums cross the cluster
  // meanwhile).
  template <class Red, class Stats, class Pass1, class Pass2>
  __device__ __forceinline__ void run(const T* const (&base)[OPS], const int64_t (&rs)[OPS], int64_t first,
                                      int64_t step, int64_t M, int N, int tpr, const Red& red, Stats stats,
                                      Pass1 pass1, Pass2 pass2) const;
  // Every thread, before the row loop: thread 0 sets up the mbarriers and starts the first rows' copies, then a
  // cluster barrier (every CTA's mbarriers exist before any remote send).
  template <class Red>
  __device__ __forceinline__ void begin(const T* const (&base)[OPS], const int64_t (&rs)[OPS], int64_t first,
                                        int64_t step, int64_t M, int N, int tpr, const Red& red) const {
    if (threadIdx.x == 0) {
      init();
      red.init();
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      start(base, rs, first, step, M, N, tpr);
    }
    cluster_sync();
  }
  // The whole of a kernel without saved statistics (the forwards), with first passes `lag` rows ahead of second
  // passes, so that up to `lag` rows' reductions are in flight at once (lag is clamped to STAGES - 1, which a row
  // ahead must not wait on its own stage, and to Red::max_lag()). pass1(b, r) -> float2: row r's first pass over
  // stage b; pass2(b, r, tot): its second pass, with the cluster's totals.
  template <class Red, class Pass1, class Pass2>
  __device__ __forceinline__ void run_ahead(const T* const (&base)[OPS], const int64_t (&rs)[OPS], int64_t first,
                                            int64_t step, int64_t M, int N, int tpr, const Red& red, int lag,
                                            Pass1 pass1, Pass2 pass2) const;
  template <class Red, class Stats, class Pass1, class Pass2>
  __device__ __forceinline__ void rows_loop(const T* const (&base)[OPS], const int64_t (&rs)[OPS], int64_t first,
                                            int64_t step, int64_t n, int N, int tpr, const Red& red,
                                            Stats stats, Pass1 pass1, Pass2 pass2) const;
};

// The combine of SplitReduce's pairs: the norms' two sums (PairSum) or online softmax's (max, sum of exp(x - max))
// (PairMaxExp). warp(a, b): the warp's total of every lane's pair, in every lane; ctas(p): the total of lanes 0-15's
// pairs (lanes 16-31 hold copies), in every lane, the same bits in every CTA (a fixed butterfly of a commutative
// combine).
struct PairSum {
  __device__ static float2 identity() { return make_float2(0.f, 0.f); }
  // lanes 0-15 reduce a, 16-31 b (each shuffle carries one value per lane)
  __device__ __forceinline__ static float2 warp(float a, float b) {
    const int hi = (threadIdx.x >> 4) & 1;
    float x = (hi ? b : a) + rr::shfl_xor(hi ? a : b, 16);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) x += rr::shfl_xor(x, o);
    return make_float2(__shfl_sync(0xffffffffu, x, 0), __shfl_sync(0xffffffffu, x, 16));
  }
  __device__ __forceinline__ static float2 ctas(float2 p) {
    float x = (threadIdx.x & 31) < 16 ? p.x : p.y;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) x += rr::shfl_xor(x, o);
    return make_float2(__shfl_sync(0xffffffffu, x, 0), __shfl_sync(0xffffffffu, x, 16));
  }
};
template <class T> struct PairMaxExp {
  __device__ static float2 identity() { return make_float2(rows::neg_inf<float>(), 0.f); }
  __device__ __forceinline__ static float2 combine(float2 x, float2 y) {
    const float m = fmaxf(x.x, y.x);
    if (m == rows::neg_inf<float>()) return make_float2(m, x.y + y.y);  // nothing finite: no exp(-inf - -inf)
    return make_float2(m, x.y * rows::exp_of<T>(x.x - m) + y.y * rows::exp_of<T>(y.x - m));
  }
  __device__ __forceinline__ static float2 step(float2 v, int o) {
    return combine(v, make_float2(rr::shfl_xor(v.x, o), rr::shfl_xor(v.y, o)));
  }
  __device__ __forceinline__ static float2 warp(float a, float b) {
    float2 v = make_float2(a, b);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = step(v, o);
    return v;
  }
  __device__ __forceinline__ static float2 ctas(float2 p) {
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) p = step(p, o);
    return p;
  }
};

// A row's pair over the cluster, sent and taken apart (SETS slot sets; at most SETS rows outstanding), combined by
// Op.
// send: each warp's total goes to a local slot and the warp arrives on the set's local mbarrier; warp 0 waits for
// all warps, totals the CTA's slots in a fixed order and sends the CTA total (st.async) into its slot of every CTA of
// the cluster, counted in bytes on that CTA's mbarrier of the set. take: waits for the cluster's bytes and totals the
// CTA slots in the same order in every CTA (the same bits everywhere).
// Set reuse, with sends `lag` rows ahead of takes (Pipe::rows_loop: 1; Pipe::run_ahead): a CTA sends row k after
// its warps' first pass of row k, which follows (program order) their take of row k - lag - 1; that take needed
// every CTA's send of row k - lag - 1, made after that CTA's warps' first pass of it, hence after they took row
// k - 2 lag - 2. So no CTA's set k % SETS (slots or mbarrier phase) is overwritten before it has been taken if
// SETS >= 2 lag + 2 (lag 1: 4 sets).
template <class Op, int SETS = 4> struct SplitReduceOf {
  static constexpr int kSets = SETS, kWarps = 32, kCtas = 16;
  static constexpr int max_lag() { return (SETS - 2) / 2; }
  static constexpr int bytes() { return kSets * (kWarps + kCtas) * 8 + 2 * kSets * 8; }
  float2* loc;   // [kSets][kWarps] warp totals of this CTA
  float2* rem;   // [kSets][kCtas] CTA totals of the cluster
  unsigned bars; // loc_bar[kSets], rem_bar[kSets]
  __device__ explicit SplitReduceOf(unsigned char* s)
      : loc(reinterpret_cast<float2*>(s)),
        rem(reinterpret_cast<float2*>(s) + kSets * kWarps),
        bars(rr::smem_addr(s + kSets * (kWarps + kCtas) * 8)) {}
  __device__ __forceinline__ unsigned loc_bar(int k) const { return bars + 8 * k; }
  __device__ __forceinline__ unsigned rem_bar(int k) const { return bars + 8 * (kSets + k); }
  __device__ void init() const {  // thread 0
    for (int k = 0; k < kSets; ++k) {
      mbar_init(loc_bar(k), blockDim.x / 32);
      mbar_init(rem_bar(k), 1);
    }
  }
  __device__ __forceinline__ void send(unsigned j, float a, float b) const {
    const int k = j % kSets, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float2 v = Op::warp(a, b);
    if (lane == 0) {
      loc[k * kWarps + warp] = v;
      mbar_arrive(loc_bar(k));  // (release: the slot is visible to warp 0 once it sees the phase)
    }
    if (warp != 0) return;
    rr::mbar_wait(loc_bar(k), (j / kSets) & 1);
    const float2 p = lane < nw ? loc[k * kWarps + lane] : Op::identity();
    const float2 t = Op::warp(p.x, p.y);
    const int ctas = (int)rr::cluster_size();
    if (lane == 0) mbar_expect(rem_bar(k), ctas * 8);
    if (lane < ctas) {
      const unsigned dst = rr::map_rank(rr::smem_addr(rem + k * kCtas + rr::cluster_rank()), lane);
      rr::send_remote(dst, t, rr::map_rank(rem_bar(k), lane));
    }
  }
  __device__ __forceinline__ float2 take(unsigned j) const {
    const int k = j % kSets, i = threadIdx.x & 15;
    rr::mbar_wait(rem_bar(k), (j / kSets) & 1);
    const int ctas = (int)rr::cluster_size();
    return Op::ctas(i < ctas ? rem[k * kCtas + i] : Op::identity());
  }
};
using SplitReduce = SplitReduceOf<PairSum>;

// Writes a thread's per-column sums of its NS slots to `row` (a workspace row of N, 16-byte stores).
template <class T, int NS>
__device__ __forceinline__ void store_sums(float* __restrict__ row, const float (&a)[NS][16 / sizeof(T)], int N, int t,
                                           int tpr) {
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    const int c = rr::Regs<T, NS>::col(s, t, tpr);
    if (c >= N) break;
#pragma unroll
    for (int e = 0; e < 16 / (int)sizeof(T); e += 4)
      *reinterpret_cast<float4*>(row + c + e) = make_float4(a[s][e], a[s][e + 1], a[s][e + 2], a[s][e + 3]);
  }
}

// A pipelined kernel's shared memory: P's stages, one per-column parameter vector (the weight, rr::ColParam), the
// reduction, P's mbarriers.
template <class P, class W, class R = SplitReduce> struct Smem {
  static constexpr int bytes() { return P::bytes() + W::bytes() + R::bytes() + P::bar_bytes(); }
  __device__ static unsigned char* param(unsigned char* s) { return s + P::bytes(); }
  __device__ static unsigned char* reduce(unsigned char* s) { return s + P::bytes() + W::bytes(); }
  __device__ static unsigned char* bars(unsigned char* s) { return reduce(s) + R::bytes(); }
};

// No per-column parameter vector (Smem's W for the forward kernels without one).
struct NoParam {
  static constexpr int bytes() { return 0; }
};

// The pipeline of OPS operands at NS vectors per thread in CTAs of up to CTA threads with the most stages that fit
// beside PARAMS per-column parameter vectors (0 or 1: the weight) in an SM's shared memory (227 KB a CTA): 3 of
// 64 KB at NS = 4 with the weight, 16-bit and fp32 rows alike (2 instead: H200 forward+backward, % of copy, bf16
// layer_norm N = 65536 76.4 -> 65.5, rms_norm 83.5 -> 71.9).
// R: the reduction (its slot sets). (The 1 KB is the kernels' static shared memory.)
template <class T, int NS, int CTA, int OPS, int PARAMS = 1, class R = SplitReduce> struct Fit {
  static constexpr int kStage = OPS * NS * CTA * 16, kParam = PARAMS * NS * CTA * 16;
  static constexpr int kFree = 232448 - 1024 - kParam - R::bytes() - 2 * 8 * 8;
  static constexpr int stages = MYOPS_PIPE_STAGES > 0 ? MYOPS_PIPE_STAGES : std::min(8, kFree / kStage);
  using P = Pipe<T, NS, CTA, OPS, stages>;
  using S = Smem<P, std::conditional_t<PARAMS == 0, NoParam, rr::ColParam<T, NS, CTA>>, R>;
};

template <class T, int NS, int CTA, int OPS, int STAGES>
template <class Red, class Stats, class Pass1, class Pass2>
__device__ __forceinline__ void Pipe<T, NS, CTA, OPS, STAGES>::run(const T* const (&base)[OPS],
                                                                   const int64_t (&rs)[OPS], int64_t first,
                                                                   int64_t step, int64_t M, int N, int tpr,
                                                                   const Red& red, Stats stats, Pass1 pass1,
                                                                   Pass2 pass2) const {
  using St = decltype(stats(int64_t(0)));
  begin(base, rs, first, step, M, N, tpr, red);
  const int64_t n = rows(first, step, M);
  if (n > 0) rows_loop(base, rs, first, step, n, N, tpr, red, stats, pass1, pass2);
  cluster_sync();  // no CTA exits while another may still send to it
}

template <class T, int NS, int CTA, int OPS, int STAGES>
template <class Red, class Stats, class Pass1, class Pass2>
__device__ __forceinline__ void Pipe<T, NS, CTA, OPS, STAGES>::rows_loop(const T* const (&base)[OPS],
                                                                         const int64_t (&rs)[OPS], int64_t first,
                                                                         int64_t step, int64_t n, int N, int tpr,
                                                                         const Red& red, Stats stats,
                                                                         Pass1 pass1, Pass2 pass2) const {
  using St = decltype(stats(int64_t(0)));
  St st = stats(first), st_n = n > 1 ? stats(first + step) : St{};
  wait(0, 0);
  float2 p = pass1(0, first, st);
  red.send(0, p.x, p.y);
  int b = 0;
  unsigned ph = 0;  // stage b's phase parity for row j
  int64_t r = first;
  for (int64_t j = 0; j < n; ++j, r += step) {
    const int bn = b + 1 == STAGES ? 0 : b + 1;
    const unsigned phn = bn == 0 ? ph ^ 1u : ph;
    const St st_nn = j + 2 < n ? stats(r + 2 * step) : St{};
    if (j + 1 < n) {
      wait(bn, phn);
      p = pass1(bn, r + step, st_n);
      red.send((unsigned)(j + 1), p.x, p.y);
    }
    pass2(b, r, st, red.take((unsigned)j));
    if (j + STAGES < n) {  // stage b takes row j + STAGES once every warp has read it
      release(b);
      if (threadIdx.x == 0) {
        wait_empty(b, ph);
        issue(b, base, rs, r + STAGES * step, N, tpr);
      }
    }
    st = st_n;
    st_n = st_nn;
    b = bn;
    ph = phn;
  }
}

template <class T, int NS, int CTA, int OPS, int STAGES>
template <class Red, class Pass1, class Pass2>
__device__ __forceinline__ void Pipe<T, NS, CTA, OPS, STAGES>::run_ahead(const T* const (&base)[OPS],
                                                                         const int64_t (&rs)[OPS], int64_t first,
                                                                         int64_t step, int64_t M, int N, int tpr,
                                                                         const Red& red, int lag, Pass1 pass1,
                                                                         Pass2 pass2) const {
  begin(base, rs, first, step, M, N, tpr, red);
  lag = std::max(1, std::min(lag, std::min(STAGES - 1, Red::max_lag())));
  const unsigned n = (unsigned)rows(first, step, M);  // row j of the cluster: stage j % STAGES, use j / STAGES
  for (unsigned j = 0; j < (unsigned)lag && j < n; ++j) {
    wait(j % STAGES, (j / STAGES) & 1u);
    const float2 p = pass1(j % STAGES, first + j * step);
    red.send(j, p.x, p.y);
  }
  for (unsigned j = 0; j < n; ++j) {
    const unsigned k = j + lag;
    if (k < n) {
      wait(k % STAGES, (k / STAGES) & 1u);
      const float2 p = pass1(k % STAGES, first + k * step);
      red.send(k, p.x, p.y);
    }
    const int b = j % STAGES;
    pass2(b, first + j * step, red.take(j));
    if (j + STAGES < n) {  // stage b takes row j + STAGES once every warp has read it
      release(b);
      if (threadIdx.x == 0) {
        wait_empty(b, (j / STAGES) & 1u);
        issue(b, base, rs, first + (int64_t)(j + STAGES) * step, N, tpr);
      }
    }
  }
  cluster_sync();  // no CTA exits while another may still send to it
}

}  // namespace rp
}  // namespace myops
