// cross_entropy over logits [M, C] (rows of any vocabulary size), target [M] (int64), on the rows.cuh engine in
// streaming mode: each kernel reads the logits once, and nothing of size [M, C] but the gradient is ever written.
//
// forward, per row i with t = target[i] != ignore_index (eps = label_smoothing):
//   m_i = max_j x_ij, ls_i = log(sum_j exp(x_ij - m_i))   (online: one pass keeps a running max and rescaled sum)
//   loss_i = ls_i + (1 - eps) (m_i - x_it) + eps (m_i - mean_j x_ij)   (= (1 - eps) nll + eps * mean_j(-log p_ij),
//            written so that no term rounds at the magnitude of the logits, as m_i + ls_i - x_it would)
//   ignored rows: loss_i = 0. Saved: stats [M, 2] = (m_i, ls_i) (acc_t). The caller reduces loss (mean over
//   non-ignored rows / sum).
// backward:  dx_ij = g_i (exp((x_ij - m_i) - ls_i) - (1 - eps) [j == t] - eps / C), 0 on ignored rows; g_i [M]
//   is the incoming gradient already divided by the row count for reduction = "mean".
#include <climits>
#include <cmath>
#include <type_traits>

#include "rowpipe.cuh"

namespace {
using namespace myops;
using namespace myops::rows;

// A row's target (not ignore_index) clamped into the row, so that a bad index never reads outside it; such a row's
// log-sum is saved as NaN (its loss and gradient are NaN). Raising an error for it is check_targets_kernel's job.
__device__ __forceinline__ int64_t clamped_target(int64_t tg, int64_t C) { return tg < 0 ? 0 : tg >= C ? C - 1 : tg; }

// The target check (check_target): CTA b scans rows b * kCheckThreads + t, stepping over the grid, and writes 1 + the
// least row it met whose target is outside [0, C) and not ignore_index, or 0, to bad[b]. Every slot is written, so bad
// needs no zeroing; the host takes the least nonzero slot.
// OVERLAP (MYOPS_CE_CHECK_OVERLAP, below): the forward kernel launched next may start at once (it reads nothing this
// kernel writes), and each slot is written with kSlotDone set, which the host polls instead of an event.
constexpr int kCheckThreads = 256;
constexpr int64_t kSlotDone = int64_t{1} << 62;
template <bool OVERLAP = false>
__global__ void __launch_bounds__(kCheckThreads) check_targets_kernel(int64_t* __restrict__ bad,  // [gridDim.x]
                                                                      const int64_t* __restrict__ target,  // [M]
                                                                      int64_t t_stride, int64_t M, int64_t C,
                                                                      int64_t ignore_index) {
  if constexpr (OVERLAP) pdl_trigger();
  __shared__ unsigned long long least;
  if (threadIdx.x == 0) least = ULLONG_MAX;
  __syncthreads();
  for (int64_t r = (int64_t)blockIdx.x * kCheckThreads + threadIdx.x; r < M; r += (int64_t)gridDim.x * kCheckThreads) {
    const int64_t tg = target[r * t_stride];
    if ((tg < 0 || tg >= C) && tg != ignore_index) {  // a thread's rows only grow: its first is its least
      atomicMin(&least, (unsigned long long)r);
      break;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) bad[blockIdx.x] = (least == ULLONG_MAX ? 0 : (int64_t)least + 1) | (OVERLAP ? kSlotDone : 0);
}

template <class T>
__global__ void __launch_bounds__(kMaxThreads, 2) ce_fwd_kernel(acc_t<T>* __restrict__ loss,      // [M]
                                                             acc_t<T>* __restrict__ stats,     // [M, 2]
                                                             myops_operand x,                  // [M, C]
                                                             const int64_t* __restrict__ target, int64_t t_stride,
                                                             int64_t M, int64_t C, int64_t ignore_index,
                                                             acc_t<T> smoothing, int vec_mask, Plan p) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  __shared__ Pair<A> red[32], cred[2];
  Ctx c(p, C);
  const myops_operand in[1] = {x};
  for (int64_t r = c.first_row(); r < M; r += c.row_step()) {
    Tile<T, 1> t(c, in, vec_mask, r, nullptr);
    A m = neg_inf<A>(), s = A(0), sx = A(0);
#pragma unroll 4  // independent 16-byte loads of four slots in flight per thread
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A v[VEC];
      t.get(0, j, v);
      const int nv = t.valid(j);
      A mx = m;
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (e < nv && v[e] > mx) mx = v[e];
      if (mx != m) {
        s = m == neg_inf<A>() ? s : s * exp_of<T>(m - mx);
        m = mx;
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        if (e < nv) {
          s += v[e] == neg_inf<A>() ? A(0) : exp_of<T>(v[e] - m);
          sx += v[e];
        }
      }
    }
    const Pair<A> ms = c.reduce(Pair<A>{m, s}, OnlineSoftmaxOp<T>{}, red, cred);
    const A sum_x = smoothing != A(0) ? c.reduce(Pair<A>{sx, A(0)}, AddOp{}, red, cred).a : A(0);
    if (c.rank == 0 && c.tid == 0) {
      const int64_t tg = target[r * t_stride];
      A ls = log_of<T>(ms.b);
      stats[2 * r] = ms.a;
      if (tg == ignore_index) {
        stats[2 * r + 1] = ls;
        loss[r] = A(0);
      } else {
        const int64_t tc = clamped_target(tg, C);
        if (tc != tg) ls = nan_of<A>();
        stats[2 * r + 1] = ls;
        const A xt = to_acc(static_cast<const T*>(x.ptr)[r * x.row_stride + tc * x.col_stride]);
        A l = ls + (A(1) - smoothing) * (ms.a - xt);
        if (smoothing != A(0)) l += smoothing * (ms.a - sum_x / A(C));
        loss[r] = l;
      }
    }
  }
  c.finish();
}

template <class T>
__global__ void __launch_bounds__(kMaxThreads, 2) ce_bwd_kernel(myops_out_operand dx,                // [M, C]
                                                             myops_operand x,                     // [M, C]
                                                             const int64_t* __restrict__ target, int64_t t_stride,
                                                             const acc_t<T>* __restrict__ stats,  // [M, 2]
                                                             const acc_t<T>* __restrict__ grad,   // [M] (stride)
                                                             int64_t g_stride, int64_t M, int64_t C,
                                                             int64_t ignore_index, acc_t<T> smoothing, int vec_mask,
                                                             Plan p) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  Ctx c(p, C);
  const myops_operand in[1] = {x};
  for (int64_t r = c.first_row(); r < M; r += c.row_step()) {
    Tile<T, 1> t(c, in, vec_mask, r, nullptr);
    const int64_t tg = target[r * t_stride];
    const bool ignored = tg == ignore_index;
    const A g = ignored ? A(0) : grad[r * g_stride], m = stats[2 * r], ls = stats[2 * r + 1];
    const A off = smoothing / A(C), hit = A(1) - smoothing;
    const int64_t tl = tg - c.c0;  // the target's column within this CTA's chunk
    const OutRow<T> o(dx, (vec_mask >> 3) & 1, c, r);
#pragma unroll 4
    for (int64_t j = t.tid; j < t.slots(); j += t.nthr) {
      A v[VEC];
      t.get(0, j, v);
      const int64_t d = tl - j * VEC;  // the target's lane in this slot, if it is in it
      const int eh = d >= 0 && d < VEC ? (int)d : -1;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const A pr = ignored ? A(0) : exp_of<T>((v[e] - m) - ls);
        v[e] = g * (pr - off - (e == eh ? hit : A(0)));
      }
      o.put(j, t.valid(j), v);
    }
  }
}
// ---- fast path: a row of logits streams through registers once ------------------------------------------------
// A CTA per row (grid-stride over rows; a cluster per row for long rows, see CLUSTER); each thread loads U 16-byte
// vectors of the row at a time (all in flight before any is used) and folds them into a running (max, sum of exp) --
// one exp per element, the sum rescaled only when a group raises the max. The CTA then combines the pairs once. Few
// registers (at most 64: four or more 256-thread CTAs share an SM) let one row's loads overlap another's exps and
// reduction: nothing holds a whole row (the register kernel it replaces held 64 KB rows at one 1024-thread CTA per SM,
// with load and compute phases that did not overlap: 1.6 TB/s on the H200). Measured on the H200 against 4 vectors x
// 256 threads (bf16 [4096, 32000]: 60.6% of copy): 8 vectors 53%, 4 x 512 threads 55%, 2 vectors 61% (but 70% against
// 81% at V = 262144), the next group's loads issued before this one is folded in 57%; again in session 27 (H200, % of
// copy, [4096, 32000] bf16 / fp32, V = 262144 bf16 / fp32): 2 vectors 72.3 / 87.0 / 86.1 / 98.1 against 72.8 / 87.2 /
// 90.6 / 98.0, 2 vectors with the next group's loads in flight 57.2-70.3 / 82.3 / 80.1 / 87.4. CLUSTER: a row split
// over a cluster of CTAs (tpr = the cluster's threads; RowReduce combines the pairs over it), for long rows whose
// single-CTA waves leave much of the last one empty (see ce_cluster). SUB: SUB threads a row, THREADS / SUB rows a
// CTA (a warp: the row's reduction by shuffles alone), for many rows of up to 64 KB (see ce_fwd_tpr). Else tpr =
// THREADS.
constexpr int kStreamThreads = 256;  // the streaming forward's CTA

// This thread's share of row xr (C columns over tpr threads, this one t), U 16-byte vectors at a time: (m, the sum
// of exp(x - m)) with m the share's maximum, and the sum of x (SMOOTH) in sx. One exp per element; the sum is
// rescaled only when a group raises the maximum.
// LOG2 (16-bit types): the sum is kept against c = fl(m log2 e) and each element's exp is 2^fma(x, log2 e, -c): one
// FFMA before the MUFU where exp(x - m) takes an FADD and an FMUL. At the end it becomes the sum against m, times
// 2^-(m log2 e - c), that residual exact by FMA, so that c's rounding does not grow the error with |m|. The maximum
// is taken on the raw packed words (max.bf16x2 / max.f16x2, three inputs per VHMNMX, no conversion). A full group
// loads without bounds tests or fill. bf16's loop: 238 -> about 170 SASS instructions per 32 elements. Valid for
// |m| < 2^16, where c's residual is under 2^-8 and no 2^x over- or underflows: a share whose m is outside (bf16 and
// fp32 logits beyond 65536 in magnitude, +inf) returns a NaN sum, as a NaN logit does, and the kernel redoes such a
// row without LOG2 (the exact formula; rare). H100, % of copy, unchecked forward before -> after (with the loss's
// reduction as a programmatic dependent, below): [4096, 32000] bf16 81.6 -> 83.0, V = 262144 bf16 93.0 -> 93.7 (fp32,
// unchanged here but for the reduction and its registers: 92.0 -> 92.7, 97.2 -> 99.0). The stream kernel itself ran
// at 90% of copy (Nsight Compute: 2.71 TB/s, long-scoreboard stalls first, 0.7 eligible warps per scheduler); the
// rest is the target check, the reduction and their launches. Measured and not taken, H100: the groups staged
// through shared memory by cp.async two ahead (rr::Stage; bf16 80.7, fp32 86.9), 5 CTAs per SM (48 registers, a
// spill; V = 262144 bf16 85.7: its clusters), the next row's target read a row ahead (no change).
// wait(g): called before group g is read (the bulk kernel's copies; the stream kernel's is empty).
template <class T, bool SMOOTH, bool LOG2, int U, class Wait>
__device__ __forceinline__ Pair<acc_t<T>> row_share(const T* __restrict__ xr, int C, int t, int tpr, acc_t<T>& sx,
                                                    const Wait& wait) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  const int G = tpr * U * VEC, ng = (C + G - 1) / G;  // columns per group, groups
  const T fill = from_acc<T>(neg_inf<A>());
  A m = neg_inf<A>(), s = A(0), c = A(0);
  sx = A(0);
  for (int g = 0; g < ng; ++g) {
    const int c0 = g * G;
    wait(g);
    rr::Regs<T, U> v;
    if (C - c0 >= G) v.load<true>(xr + c0, C - c0, t, tpr, fill);  // (a full group: no bounds tests, no fill)
    else v.load(xr + c0, C - c0, t, tpr, fill);
    const A mx = fmaxf(m, rr::thread_max<T, U, LOG2>(v));  // (packed only for LOG2: see thread_max)
    if (mx > m) {  // never from -inf to -inf; from -inf, s is 0
      if constexpr (LOG2) {
        const A cn = mx * kLog2e;
        s = m == neg_inf<A>() ? s : s * exp2_ftz(c - cn);
        c = cn;
      } else {
        s = m == neg_inf<A>() ? s : s * exp_of<T>(m - mx);
      }
      m = mx;
    }
    const Pair<A> e = rr::thread_exp_sum<SMOOTH, T, U, LOG2>(v, LOG2 ? c : rr::exp_shift(m), C - c0, t, tpr);
    s += e.a;
    sx += e.b;
  }
  if constexpr (LOG2) {
    if (m != neg_inf<A>()) s = fabsf(m) < 0x1p16f ? s * exp2_ftz(-fmaf(m, kLog2e, -c)) : nan_of<A>();
  }
  return {m, s};
}

// Row r's target tg (ignore_index: none), clamped into the row (tc), and its logit xt from row xr: read first, by the
// thread that writes the loss (two dependent loads); the other threads keep the defaults.
template <class T> struct RowTarget {
  int64_t tg, tc = 0;
  acc_t<T> xt = acc_t<T>(0);
  __device__ __forceinline__ RowTarget(bool reader, const int64_t* __restrict__ target, int64_t r, int64_t t_stride,
                                       const T* __restrict__ xr, int C, int64_t ignore_index)
      : tg(ignore_index) {
    if (!reader) return;
    tg = target[r * t_stride];
    if (tg != ignore_index) {
      tc = clamped_target(tg, C);
      xt = to_acc(xr[tc]);
    }
  }
};

// The row's (max, sum of exp) from its threads' pairs p (each sum against its own maximum): the maximum first, then
// the sum of the threads' sums rescaled to it, two plain reductions. One pass of OnlineSoftmaxOp puts two exps on
// each step of the tree's serial chain: H100, bf16 [4096, 32000], the bulk kernel alone (benchmarks/bulk_read.cu)
// 90.9-91.0 us with it, 89.6 us with these (the probe's fold 89.5-89.6); the op's forward, bench, % of copy, one
// round against two of the one pass: [4096, 32000] bf16 checked 92.9 -> 93.6, unchecked 92.3 / 92.4 -> 93.2; fp32
// 97.2 / 97.3 -> 98.3, 97.4 -> 98.4; V = 262144 bf16 98.3 -> 98.6. A row over a cluster keeps the one pass (one
// exchange through distributed shared memory instead of two).
template <class T>
__device__ __forceinline__ Pair<acc_t<T>> reduce_ms(rr::RowReduce& red, Pair<acc_t<T>> p, int tpr) {
  using A = acc_t<T>;
  if (tpr > (int)blockDim.x) return red(p, OnlineSoftmaxOp<T>{}, Pair<A>{neg_inf<A>(), A(0)});
  const A m = red(p.a, rr::Max{}, neg_inf<A>());
  return {m, red(p.a == neg_inf<A>() ? A(0) : p.b * exp_of<T>(p.a - m), rr::Sum{}, A(0))};
}

// The row's (max, sum of exp) over its tpr threads, and the sum of its logits (SMOOTH) in sum_x: row_share in the
// log2 domain for 16-bit types, redone exactly where that is out of range (the same bits in every thread of the row:
// a uniform branch). SHARED: the CTA's rows share its barriers (several rows of over 32 threads), so all of them take
// the redo's reductions when one needs it, and only that one keeps its result.
template <class T, bool SMOOTH, int U, bool SHARED = false, class Wait>
__device__ __forceinline__ Pair<acc_t<T>> row_stats(rr::RowReduce& red, const T* __restrict__ xr, int C, int t,
                                                    int tpr, acc_t<T>& sum_x, const Wait& wait) {
  using A = acc_t<T>;
  constexpr bool LOG2 = sizeof(T) == 2;
  A sx;
  Pair<A> ms = reduce_ms<T>(red, row_share<T, SMOOTH, LOG2, U>(xr, C, t, tpr, sx, wait), tpr);
  if constexpr (LOG2 && SHARED) {
    const bool redo = !(ms.b < INFINITY);
    if (__syncthreads_or(redo)) {
      A sx2;
      const Pair<A> ex = reduce_ms<T>(red, row_share<T, SMOOTH, false, U>(xr, C, t, tpr, sx2, wait), tpr);
      if (redo) ms = ex, sx = sx2;
    }
  } else if (LOG2 && !(ms.b < INFINITY)) {
    ms = reduce_ms<T>(red, row_share<T, SMOOTH, false, U>(xr, C, t, tpr, sx, wait), tpr);
  }
  sum_x = SMOOTH ? red(sx, rr::Sum{}, A(0)) : A(0);
  return ms;
}

// Row r's stats and loss from its (max, sum of exp) ms, sum of logits sum_x and target. One thread.
template <class T, bool SMOOTH>
__device__ __forceinline__ void finish_row(acc_t<T>* __restrict__ loss, acc_t<T>* __restrict__ stats, int64_t r,
                                           Pair<acc_t<T>> ms, acc_t<T> sum_x, const RowTarget<T>& rt, int C,
                                           int64_t ignore_index, acc_t<T> smoothing) {
  using A = acc_t<T>;
  const int64_t tg = rt.tg;
  A ls = log_of<T>(ms.b);
  stats[2 * r] = ms.a;
  if (tg == ignore_index) {
    stats[2 * r + 1] = ls;
    loss[r] = A(0);
    return;
  }
  if (rt.tc != tg) ls = nan_of<A>();
  stats[2 * r + 1] = ls;
  A lo = ls + (A(1) - smoothing) * (ms.a - rt.xt);
  if (SMOOTH) lo += smoothing * (ms.a - sum_x / A(C));
  loss[r] = lo;
}

template <class T, bool SMOOTH, bool CLUSTER, int U = 4, int THREADS = kStreamThreads, int SUB = 0, int MINB = 4>
__global__ void __launch_bounds__(THREADS, MINB) stream_fwd_kernel(acc_t<T>* __restrict__ loss,          // [M]
                                                                acc_t<T>* __restrict__ stats,         // [M, 2]
                                                                const T* __restrict__ x, int64_t xs,  // [M, C]
                                                                const int64_t* __restrict__ target,   // [M]
                                                                int64_t t_stride, int64_t M, int C,
                                                                int64_t ignore_index, acc_t<T> smoothing,
                                                                int cluster_tpr) {
  using A = acc_t<T>;
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  static_assert(!(SUB && CLUSTER), "several rows per CTA or a cluster per row");
  static_assert(SUB == 0 || (SUB >= 32 && THREADS % (SUB ? SUB : 1) == 0 && (SUB & (SUB - 1)) == 0),
                "SUB: a power of 2 of warps that divides the CTA");
  constexpr int RPC = SUB ? THREADS / SUB : 1;  // rows per CTA
  const int tpr = CLUSTER ? cluster_tpr : SUB ? SUB : THREADS;
  rr::RowReduce red(red_buf, tpr);
  // (rr::Lane's indices, written out: through Lane the one-CTA kernels took 58 -> 63 registers, bf16, and the
  // smoothed one spilled)
  const int t = CLUSTER ? (int)(rr::cluster_rank() * THREADS + threadIdx.x) : SUB ? (int)(threadIdx.x & (SUB - 1))
                                                                                : (int)threadIdx.x;
  const int sub = SUB ? (int)(threadIdx.x / SUB) : 0;
  // A warp per row runs its own row loop; wider rows of a CTA share its barriers, so their loop runs over the CTA's
  // first row and a row past M redoes row M - 1 without writing it.
  const int64_t first = CLUSTER ? rr::cluster_id() : blockIdx.x * RPC + (SUB == 32 ? threadIdx.x / 32 : 0),
                step = CLUSTER ? rr::cluster_count() : (int64_t)gridDim.x * RPC;
  pdl_trigger();  // (the loss's reduction, launched next, waits for this grid's completion in pdl_wait)
  for (int64_t r0 = first; r0 < M; r0 += step) {
    const bool live = SUB <= 32 || r0 + sub < M;
    const int64_t r = SUB <= 32 ? r0 : live ? r0 + sub : M - 1;
    const T* __restrict__ xr = x + r * xs;
    const RowTarget<T> rt(t == 0, target, r, t_stride, xr, C, ignore_index);
    A sum_x;
    const Pair<A> ms = row_stats<T, SMOOTH, U, (SUB > 32)>(red, xr, C, t, tpr, sum_x, [](int) {});
    if (t == 0 && live) finish_row<T, SMOOTH>(loss, stats, r, ms, sum_x, rt, C, ignore_index, smoothing);
  }
}
// The forward of rows of kBulkMinBytes to kBulkMaxBytes, one per CTA: at its start thread 0 hands the whole row to
// the bulk copy engine (cp.async.bulk into shared memory, one copy and mbarrier per group of row_share), and the
// threads then fold each group as it lands. Every CTA on an SM keeps its whole row in flight from its first
// instruction, without registers: the stream kernel holds only U vectors per thread in flight and none while it
// folds, reduces or starts a row (memory-latency bound at about 90% of copy, [4096, 32000] bf16 on the H100).
// H100, forward, % of copy, bf16, checked / unchecked, stream kernel -> this one (two rounds, the second's numbers):
// [4096, 32000] 81.4 / 82.4 -> 83.9 / 84.9, [6144, 32000] 87.7 / 88.6 -> 89.4 / 91.0; fp16 at [4096, 32000] like bf16
// (80.5 / 82.0 -> 83.1 / 84.3 at three CTAs per SM). kBulkSmemFloor: each CTA asks for at least 100 KB of shared
// memory, so that two share an SM (128 KB of rows in flight) where three would fit: 83.1 / 84.3 and 89.4 / 90.5 at
// three. The rest to copy bandwidth: the last wave (4096 rows over 264 CTAs: 15.5 waves), the target check and the
// reduction.
// Measured and not taken (session 35, H100, clean flush, % of copy, [4096, 32000] bf16 checked / unchecked, this
// kernel at 92.6 / 92.2 in the same runs): three CTAs an SM (no floor) 91.3 / 92.0; a persistent CTA an SM with a
// ring of 3 (or 2) bulk-copied row buffers, each refilled once its row is folded so that rows stay in flight through
// the fold and reduction, 83.7-84.6 / 84.1-84.4 at 512 threads (2 buffers 86.3-86.5), 74.6-74.8 at 256; four
// independent chains of the exp sum's FADDs (one chain is a dependent FADD per element) 92.1 against 92.5. Nsight
// Compute puts this kernel at 2.84 TB/s (4 warps per scheduler, 0.68 eligible, 43% of issue slots used) against
// 3.02 for a plain row-by-row read of the same logits (myops sum(dim=-1)). Session 36: a lean kernel (a row per CTA
// by 16-byte loads, the target read after the reduction, 40 registers, 6 CTAs an SM) 87.4 / 87.7. Where the rest
// went (benchmarks/bulk_read.cu, this kernel and a standalone fold in one harness): the fold with the target and
// the stats 89.6 us (96.6% of copy), this kernel 91.0 us, of which the (max, sum) pair's one-pass reduction was the
// 1.4 us (reduce_ms); the op adds about 2.5 us for the loss's reduction kernel, which waits for the grid's end.
constexpr int kBulkMinBytes = 32 * 1024, kBulkMaxBytes = 64 * 1024, kBulkGroups = 8, kBulkSmemFloor = 100 * 1024;
template <class T, bool SMOOTH, int U = 4, int THREADS = kStreamThreads>
__global__ void __launch_bounds__(THREADS, 2) bulk_fwd_kernel(acc_t<T>* __restrict__ loss,          // [M]
                                                              acc_t<T>* __restrict__ stats,         // [M, 2]
                                                              const T* __restrict__ x, int64_t xs,  // [M, C]
                                                              const int64_t* __restrict__ target,   // [M]
                                                              int64_t t_stride, int C, int64_t ignore_index,
                                                              acc_t<T> smoothing) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T), G = THREADS * U * VEC;  // a group's elements (row_share)
  static_assert(kBulkMaxBytes <= kBulkGroups * G * (int)sizeof(T), "a row's groups fit the mbarriers");
  extern __shared__ __align__(128) unsigned char bulk_row[];  // [C] of T
  __shared__ __align__(16) unsigned char red_buf[rr::kRedBytes];
  __shared__ __align__(8) uint64_t bars[kBulkGroups];
  const int64_t r = blockIdx.x;
  const int ng = (C + G - 1) / G;
  const T* __restrict__ xr = x + r * xs;
  if (threadIdx.x == 0) {
    for (int g = 0; g < ng; ++g) rp::mbar_init(rr::smem_addr(&bars[g]), 1);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // (the inits, visible to the copy engine)
    for (int g = 0; g < ng; ++g) {
      const unsigned bar = rr::smem_addr(&bars[g]), bytes = (unsigned)(min(G, C - g * G) * (int)sizeof(T));
      rp::mbar_expect(bar, bytes);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       rr::smem_addr(bulk_row + (size_t)g * G * sizeof(T))),
                   "l"(xr + (int64_t)g * G), "r"(bytes), "r"(bar)
                   : "memory");
    }
  }
  __syncthreads();  // (the mbarriers exist before anyone waits on them)
  pdl_trigger();    // (the loss's reduction, launched next, waits for this grid's completion in pdl_wait)
  rr::RowReduce red(red_buf, THREADS);
  const RowTarget<T> rt(threadIdx.x == 0, target, r, t_stride, xr, C, ignore_index);
  const auto landed = [&](int g) { rr::mbar_wait(rr::smem_addr(&bars[g]), 0); };
  A sum_x;
  const Pair<A> ms =
      row_stats<T, SMOOTH, U>(red, reinterpret_cast<const T*>(bulk_row), C, threadIdx.x, THREADS, sum_x, landed);
  if (threadIdx.x == 0) finish_row<T, SMOOTH>(loss, stats, r, ms, sum_x, rt, C, ignore_index, smoothing);
}
// ---- 16-bit rows of up to 256 KB on the H200: the fold alone in registers ----------------------------------------
// TPR threads a row (a CTA for rows of 16 KB and more; see ce_fold), each CTA its rows once (no row loop), whose
// threads hold nothing but U 16-byte vectors in flight and the running (m, c, s) of row_share's log2 fold (and the
// sum of x, SMOOTH): 32 registers, so eight 256-thread CTAs share an SM (the stream kernel's 56 allow four: half the
// loads in flight). Each thread's share is folded as row_share does (the maximum on the packed words, the sum of
// 2^(x log2 e - c) against c = fl(m log2 e), made exact against m at the end), the row reduced as reduce_ms does (its
// maximum, then the threads' sums rescaled to it), and the target and its logit read by the row's first thread only
// after that, so that they hold no register through the fold. A row whose log2 fold is out of range (|m| >= 2^16,
// +inf or NaN logits: a sum that is not finite) takes a second pass of exact exps against the row's maximum, which
// the first pass found (the stream kernel's redo; rare). benchmarks/bulk_read.cu had a standalone fold of this form at
// 96.3-98.4% of copy, 95.8 with the target and the stats (H200, bf16 [4096, 32000], sessions 46-47), where the op's
// kernels stopped at 88-93.
// H200, forward, unchecked, % of copy, the former policy (a warp per row, or the bulk kernel for M < 24 rows an SM,
// or a CTA per row over 64 KB) -> a CTA a row (session 50, one or two rounds): bf16 [4096, 32000] 88.6-90.6 ->
// 92.4-94.1 (fp16 alike), with smoothing 88.9-89.3 -> 92.3-92.5; [2048, 32000] 72.5 -> 80.9; [16384, 8192] 86.6 ->
// 92.1; [8192, 12288] 86.7 -> 88.3 (with smoothing 85.8 -> 85.7); [8192, 16384] 89.8 -> 93.2; [4096, 65536] 98.7 ->
// 101.4; [2048, 131072] 99.3 -> 100.0. Not taken: [1024, 196608] 97.3 -> 97.2, [1024, 262144] 97.6-97.8 ->
// 97.1-97.3 (the stream kernel's clusters). Shorter rows by ce_fold's table.
// The max or sum of v over a row's TPR threads (every one of them gets it): shuffles, then for TPR > 32 the row's
// warps through sh [kStreamThreads / 32] (every thread of the CTA must call it: its barriers are the CTA's).
template <int TPR, bool MAX>
__device__ __forceinline__ float fold_row(float v, float* sh) {
#pragma unroll
  for (int o = (TPR < 32 ? TPR : 32) / 2; o > 0; o >>= 1) {  // (TPR < 32: the xor stays in the row's lanes)
    const float y = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, y) : v + y;
  }
  if constexpr (TPR > 32) {
    constexpr int NW = TPR / 32;  // the row's warps
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    const float* row_sh = sh + threadIdx.x / TPR * NW;
    v = row_sh[0];
#pragma unroll
    for (int w = 1; w < NW; ++w) v = MAX ? fmaxf(v, row_sh[w]) : v + row_sh[w];
    __syncthreads();  // (sh is free for the next reduction)
  }
  return v;
}
// TPR threads a row (2 to kStreamThreads), kStreamThreads / TPR rows a CTA, each CTA its rows once (grid = M / rows
// a CTA, no row loop). A thread of a row past M loads nothing but still takes its warp's shuffles (TPR < 32) or the
// CTA's barriers (TPR > 32); a warp whose rows are all past M returns.
// MIS: rows need not start on a 16-byte boundary nor hold a multiple of VEC columns (C odd, or a row stride that is
// not a multiple of VEC): each row's head (to its first boundary) and tail (after its last whole vector), under VEC
// columns each, are folded one element a thread before its vectors. At eight CTAs an SM (32 registers) the MIS
// kernels spilled 8-48 bytes (ptxas, the smoothed ones), so they take six (40 registers, no spills), as do the fp32
// smoothed ones (8 bytes at 4-16 threads a row).
template <class T, bool SMOOTH, int TPR, bool MIS = false>
__global__ void __launch_bounds__(kStreamThreads, MIS || (sizeof(T) == 4 && SMOOTH) ? 6 : 8)
    fold_fwd_kernel(float* __restrict__ loss,             // [M]
                    float* __restrict__ stats,            // [M, 2]
                    const T* __restrict__ x, int64_t xs,  // [M, C]
                    const int64_t* __restrict__ target,   // [M]
                    int64_t t_stride, int64_t M, int C, int64_t ignore_index, float smoothing) {
  constexpr bool L2F = sizeof(T) == 2;  // (the log2 fold; fp32: exp_f32 against the running maximum)
  static_assert(L2F || sizeof(T) == 4, "16-bit or fp32 logits");
  static_assert(TPR >= 2 && TPR <= kStreamThreads && (TPR & (TPR - 1)) == 0, "TPR: a power of 2, 2 and up");
  constexpr int U = 4, VEC = 16 / sizeof(T);
  __shared__ float sh[kStreamThreads / 32];
  pdl_trigger();  // (the loss's reduction, launched next, waits for this grid's completion in pdl_wait)
  // (the row's index and pointer are taken again at the end from the parameters: kept live through the fold, they
  // made the smoothed kernels spill)
  const auto row_of = [&] { return (int64_t)blockIdx.x * (kStreamThreads / TPR) + threadIdx.x / TPR; };
  constexpr bool kOneRow = TPR == kStreamThreads;  // (grid = M: every CTA's row is live)
  if (TPR <= 32 && (int64_t)blockIdx.x * (kStreamThreads / TPR) + threadIdx.x / 32 * (32 / TPR) >= M)
    return;  // (the warp's rows are past M; no CTA barrier)
  const int t = (int)(threadIdx.x % TPR);
  const bool live = kOneRow || row_of() < M;
  // (MIS) The row's head and tail columns, C - nv VEC, the k-th at k (head, h columns) or k + nv VEC (tail).
  const auto extra = [&](int k, int h, int nv) { return to_acc(x[row_of() * xs + (k < h ? k : k + nv * VEC)]); };
  const auto head = [&] { return MIS ? head_elems(x + row_of() * xs, C) : 0; };
  float m = neg_inf<float>(), c = 0.f, s = 0.f, sx = 0.f;
  if constexpr (MIS) {  // folded first, one a thread, so that nothing of them is held through the vectors' loop
    const int h = head(), nv = live ? (C - h) / VEC : 0, nx = live ? C - nv * VEC : 0;
    const auto fold_extra = [&](float a) {
      if constexpr (L2F) {
        if (a > m) {
          c = a * kLog2e;
          s = s * exp2_ftz((m == neg_inf<float>() ? c : m * kLog2e) - c);  // (the same rescale as the vectors')
          m = a;
        }
        s += exp2_ftz(fmaf(a, kLog2e, -c));
      } else {
        if (a > m) {
          s = m == neg_inf<float>() ? s : s * exp_f32(m - a);
          m = a;
        }
        s += exp_f32(a - (m == neg_inf<float>() ? 0.f : m));
      }
      if (SMOOTH) sx += a;
    };
    for (int k = t; k < nx; k += TPR) fold_extra(extra(k, h, nv));
  }
  const int h = head();
  const uint4* __restrict__ row = reinterpret_cast<const uint4*>(x + row_of() * xs + h);  // [nv]
  const int nv = live ? (C - h) / VEC : 0;
  const uint32_t ninf = rr::splat_word(from_acc<T>(neg_inf<float>()));
  for (int j0 = t; j0 < nv; j0 += TPR * U) {
    rr::Regs<T, U> v;  // (its words; the loads are this kernel's own, bounded by vectors)
    auto& w = v.u;
#pragma unroll
    for (int u = 0; u < U; ++u) {  // (all U loads issue before any is used)
      const int j = j0 + u * TPR;
      const uint4 q = j < nv ? row[j] : make_uint4(ninf, ninf, ninf, ninf);
      w[u][0] = q.x, w[u][1] = q.y, w[u][2] = q.z, w[u][3] = q.w;
    }
    const float mx = fmaxf(m, rr::thread_max<T, U>(v));  // (16-bit: on the packed words)
    if (mx > m) {  // never from -inf to -inf; from -inf, s is 0
      if constexpr (L2F) {
        const float cn = mx * kLog2e;
        s = m == neg_inf<float>() ? s : s * exp2_ftz(c - cn);
        c = cn;
      } else {
        s = m == neg_inf<float>() ? s : s * exp_f32(m - mx);
      }
      m = mx;
    }
    if constexpr (L2F) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float a = rr::word_elem<T>(w[u][i], 0), b = rr::word_elem<T>(w[u][i], 1);
          s += exp2_ftz(fmaf(a, kLog2e, -c)) + exp2_ftz(fmaf(b, kLog2e, -c));
        }
    } else {
      const float ms = m == neg_inf<float>() ? 0.f : m;  // (all -inf so far: exp(-inf - 0) = 0, not NaN)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < 4; ++i) s += exp_f32(__uint_as_float(w[u][i]) - ms);
    }
    // The sum of x after the exps, from the words again: summed beside them, bf16's kept a, b and the fill's test
    // live together and spilled 4-12 bytes under 256 threads a row (ptxas; same sums, same order).
    if (SMOOTH)
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (j0 + u * TPR < nv)  // (the fill must not enter sum(x))
#pragma unroll
          for (int i = 0; i < 4; ++i)
            sx += L2F ? rr::word_elem<T>(w[u][i], 0) + rr::word_elem<T>(w[u][i], 1) : __uint_as_float(w[u][i]);
  }
  if (L2F && m != neg_inf<float>()) s = fabsf(m) < 0x1p16f ? s * exp2_ftz(-fmaf(m, kLog2e, -c)) : nan_of<float>();
  const float mr = fold_row<TPR, true>(m, sh);
  float sr = fold_row<TPR, false>(m == neg_inf<float>() ? 0.f : s * exp_of<T>(m - mr), sh);
  // The exact pass: uniform over the row, and over the warp (TPR < 32: its shuffles) or for 32 < TPR <
  // kStreamThreads over the CTA (its barriers), where every row takes it if one needs it and only that one keeps its
  // result.
  // (fp32 takes no second pass: its exps are exact against the running maximum, and a NaN or +inf logit gives a NaN
  // sum there as in the stream kernel)
  const bool redo = L2F && !(sr < INFINITY);
  if (L2F && (TPR > 32 && !kOneRow ? __syncthreads_or(redo) : TPR < 32 ? __any_sync(0xffffffffu, redo) : redo)) {
    s = 0.f;
    for (int j = t; j < nv; j += TPR) {
      const uint4 q = row[j];
      const uint32_t wq[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
        s += exp_ftz(rr::word_elem<T>(wq[i], 0) - mr) + exp_ftz(rr::word_elem<T>(wq[i], 1) - mr);
    }
    if constexpr (MIS) {
      const int h2 = head(), nv2 = live ? (C - h2) / VEC : 0;
      for (int k = t; k < (live ? C - nv2 * VEC : 0); k += TPR) s += exp_ftz(extra(k, h2, nv2) - mr);
    }
    s = fold_row<TPR, false>(s, sh);
    if (redo) sr = s;
  }
  if (SMOOTH) sx = fold_row<TPR, false>(sx, sh);
  if (t == 0 && (kOneRow || row_of() < M)) {
    const int64_t r = row_of();
    const RowTarget<T> rt(true, target, r, t_stride, x + r * xs, C, ignore_index);
    finish_row<T, SMOOTH>(loss, stats, r, {mr, sr}, sx, rt, C, ignore_index, smoothing);
  }
}
// MYOPS_CE_FOLD: whether 16-bit rows take fold_fwd_kernel: 1 (default) rows of up to kFoldMaxBytes on devices of over
// 30 GB/s of DRAM bandwidth per SM (dram_rich_sms: the H200; not timed on the H100), 0 never, 2 always (A/B, tests).
// Its threads a row by the row's bytes: 2 up to 128 bytes (aligned rows), 4 up to 1 KB, 8 under 8 KB, 128 under
// 16 KB, else a CTA; MYOPS_CE_FOLD_TPR (2 to 256, a power of 2; 2 for aligned 16-bit rows alone) fixes them. H200,
// bf16 forward, unchecked / label_smoothing 0.1, % of copy, the former policy (a warp per row) against the fold at
// 32 / 64 / 128 / 256 threads a row (session 50):
//   [65536, 2048]   73.5 / 70.2 -> 82.0 / 78.0, 80.6 / 76.3, 55.5 / 47.8, 32.5 / 28.1
//   [16384, 4096]   74.1 / 72.8 -> 79.2 / 74.9, 79.8 / 75.3, 81.0 / 77.5, 59.4 / 52.0
//   [8192, 8192]    78.6 / 77.7 -> 82.0 / 77.5, 79.6 / 74.8, 82.1 / 77.4, 83.4 / 83.5
//   [4096, 32000]   90.4 / 90.5 -> 91.2 / 89.3, 90.3 / 84.3, 91.3 / 84.9, 94.1 / 93.5
// and rows under 8 KB, unchecked, a warp per row (the stream kernel) against the fold at 4 / 8 / 16 / 32 threads a
// row (session 51, one round each; "-" not timed):
//   [1048576, 128]  7.6 -> 23.4, 20.0-20.2, 14.9, 10.1
//   [524288, 256]   14.9 -> 37.5, 36.0-36.9, 28.9, 19.6
//   [131072, 512]   28.8 -> 55.8, 54.0-54.2, 52.9, 38.0
//   [262144, 1000]  52.2 -> -, 69.2, 69.7, 68.1
//   [65536, 1024]   51.4 -> -, 69.5, 67.5, 66.4
//   [131072, 1536]  60.7 -> -, 79.7, 78.5, 75.8
//   [32768, 1920]   65.6 -> -, 75.0, 73.1, 74.4
//   [32768, 2048]   - -> -, 78.9, -, 77.2 ([65536, 2048]: 84.0 at 8)
//   [16384, 3072]   - -> -, 75.5, -, 74.4
// Short rows pay for their fixed tail (the reductions, then the target's two dependent loads): fewer threads a row
// put more rows in flight in each warp. An L2 prefetch of the target at the kernel's start changed nothing (within
// 1 point either way at 16 and 32 threads a row), so the kernel has none. (The bf16 smoothed kernels, which spilled
// 4-12 bytes under 256 threads a row, read [131072, 512] 52.5 against fp16's 55.6, [65536, 2048] 77.8 against 83.4;
// they no longer spill, not yet timed.) Read once. ce_fold: the threads a row, or 0 (not this kernel).
constexpr int64_t kFoldMaxBytes = 256 * 1024;
// f(std::integral_constant<int, P>{}) for the power of 2 P = p of Lo to Hi (Hi for any other p).
template <int Lo, int Hi, class F>
int with_pow2(int p, F&& f) {
  if constexpr (Lo >= Hi)
    return f(std::integral_constant<int, Hi>{});
  else
    return p == Lo ? f(std::integral_constant<int, Lo>{}) : with_pow2<Lo * 2, Hi>(p, f);
}
// MYOPS_CE_FOLD_TPR: the fold kernel's threads a row, fixed (2 to 256, a power of 2; under 4 for aligned 16-bit rows
// alone, the others taking 4), or 0. Read once. H200, bf16, unchecked, forward / forward+backward, % of copy, 4 -> 2
// threads a row (session 54): [1048576, 64] 51.3 / 69.7 -> 65.2 / 77.5; [1048576, 128] 81.3 / 86.9 -> 75.6 / 84.6;
// [524288, 256] 83.6 / 88.3 -> 69.9 / 82.9. (A row of 128 bytes, 8 vectors, fills one round of U = 4 loads at 2
// threads a row, half of one at 4: twice the rows a warp share the fixed tail, the reductions and the target's loads.)
inline int ce_fold_tpr_knob() {
  static const int fixed =
      rr::env_knob("MYOPS_CE_FOLD_TPR", 0, [](int t) { return t == 0 || (t >= 2 && t <= 256 && (t & (t - 1)) == 0); });
  return fixed;
}
// (misaligned: for ce_misaligned's rows, 16-bit or fp32, which MYOPS_CE_FOLD=0 leaves on this table)
inline int ce_fold(int64_t row_bytes, bool misaligned = false) {
  static const int mode = rr::env_knob("MYOPS_CE_FOLD", 1, [](int m) { return m >= 0 && m <= 2; });
  const int fixed = ce_fold_tpr_knob();
  if ((mode == 0 && !misaligned) || (mode != 2 && !(dram_rich_sms() && row_bytes <= kFoldMaxBytes))) return 0;
  if (fixed) return misaligned ? std::max(fixed, 4) : fixed;
  if (row_bytes <= 128 && !misaligned) return 2;
  return row_bytes <= 1024 ? 4 : row_bytes < 8 * 1024 ? 8 : row_bytes < 16 * 1024 ? 128 : kStreamThreads;
}

// fp32 rows on fold_fwd_kernel (exp_f32 against the running maximum, no log2 fold, no second pass), 4 to 32 threads
// a row, where a warp per row left short rows' lanes idle. H200, unchecked forward, % of copy, a warp per row ->
// fold at 4 / 8 / 16 threads a row (session 53): [1048576, 128] 23.4 -> 89.9 / 82.2 / 53.3 (forward+backward 47.1
// -> 93.3), [524288, 256] 44.7 -> 88.4 / 90.3 / 90.2, [131072, 512] 75.6 -> 78.3 / 88.0 / 87.3. MYOPS_CE_FOLD32: 1
// (default) rows up to kFold32MaxBytes on dram_rich_sms devices, 4 threads a row under 1 KB, else 8; 0 none; 2 every
// fp32 row (A/B, tests). MYOPS_CE_FOLD_TPR fixes the threads a row (4 to 32, clamped). Read once.
constexpr int64_t kFold32MaxBytes = 2048;
inline int ce_fold32(int64_t row_bytes) {
  static const int mode = rr::env_knob("MYOPS_CE_FOLD32", 1, [](int m) { return m >= 0 && m <= 2; });
  const int fixed = ce_fold_tpr_knob();
  if (mode == 0 || (mode == 1 && !(dram_rich_sms() && row_bytes <= kFold32MaxBytes))) return 0;
  if (fixed) return std::clamp(fixed, 4, 32);
  return row_bytes < 1024 ? 4 : 8;
}

// Misaligned rows (C not a multiple of 16 / sizeof(T) columns, as GPT-2's 50257, or such a row stride or pointer)
// took the rows.cuh engine (ce_fwd_kernel, ce_bwd_kernel: its one-element loads wherever a row is not aligned).
// MYOPS_CE_MISALIGNED=1 (default): the forward (16-bit and fp32) takes fold_fwd_kernel (ce_fold's threads a row, on
// dram_rich_sms devices, rows up to kFoldMaxBytes), the backward packed_bwd_kernel (packed rows as short as
// ce_bwd_flat's) or rr_bwd_kernel (rows of kBwdThreads vectors or more), each with a row's (or the buffer's) head and
// tail one element a thread beside 16-byte loads of the rest; 0: the engine. Read once. H200, unchecked, % of copy,
// engine -> these, forward / forward+backward (session 53): [4096, 50257] bf16 26.9 / 20.1 -> 94.4 / 97.5, fp32
// 38.3 / 40.2 -> 99.3 / 99.7; [8192, 8195] bf16 19.8 / 18.5 -> 71.1 / 83.9, fp32 23.2 / 31.7 -> 89.3 / 95.0;
// [65536, 1001] bf16 14.8 / 16.4 -> 71.7 / 54.9, fp32 22.2 / 32.4 -> 82.6 / 73.3; [262144, 127] bf16 2.6 / 4.7 ->
// 51.7 / 48.8, fp32 5.6 / 10.4 -> 68.0 / 66.5. The short rows' backward (packed_bwd_kernel) runs at 44-75% of copy
// (ce_packed_bwd), where the aligned rows' flat_bwd_kernel reaches 87-97.
inline bool ce_misaligned() {
  static const int mode = rr::env_knob("MYOPS_CE_MISALIGNED", 1, [](int m) { return m == 0 || m == 1; });
  return mode == 1;
}

// MYOPS_CE_PACKED_BWD: packed_bwd_kernel for ce_misaligned's short packed rows, 1 (default) its SEG form for 16-bit
// rows of kPackedSegMinBytes or more and its per-element form for the rest, 2 SEG always, 3 per-element always, 0
// never (the engine's backward, or rr_bwd_kernel's from kBwdThreads vectors). Read once. H200, unchecked,
// forward+backward, % of copy, per-element -> SEG (session 54): bf16 [262144, 127] 48.8 -> 44.3, [131072, 511]
// 55.1 -> 57.7, [98304, 767] 56.3 -> 65.1, [65536, 1001] 55.0 -> 62.1, [131072, 2001] 61.1 -> 74.9; fp32
// [262144, 127] 66.4 -> 54.1, [65536, 1001] 73.4 -> 70.9, [131072, 2001] 79.1 -> 79.3. (SEG pays twice, both paths,
// for a warp that holds a row's end; rows of a few warps' vectors put one in most warps.) The bound, between the
// 254 bytes measured behind and the 1022 ahead, is not measured closer.
constexpr int64_t kPackedSegMinBytes = 512;
// 1: the per-element form, 2: SEG, 0: none (the caller's other kernels), for rows of row_bytes bytes of es each.
inline int ce_packed_bwd(int64_t row_bytes, int64_t es) {
  static const int mode = rr::env_knob("MYOPS_CE_PACKED_BWD", 1, [](int m) { return m >= 0 && m <= 3; });
  if (mode != 1) return mode == 3 ? 1 : mode;
  return es == 2 && row_bytes >= kPackedSegMinBytes ? 2 : 1;
}

// MYOPS_CE_BULK: 1 (default) rows of kBulkMinBytes to kBulkMaxBytes take bulk_fwd_kernel (but fp32 rows on the
// H200: see ce_fwd_tpr), 0 none, 2 every row up to kBulkMaxBytes (A/B). Read once.
inline int ce_bulk_mode() {
  static const int mode = rr::env_knob("MYOPS_CE_BULK", 1, [](int m) { return m >= 0 && m <= 2; });
  return mode;
}

// A warp per row (stream_fwd_kernel's SUB = 32; 16-bit rows, and fp32 rows on the H100) where there are enough rows
// to give every SM kWarpRowsPerSm of them at once (of the 32 warps it holds: four 256-thread CTAs), for rows of up
// to kBulkMinBytes, and for longer rows up to kWarpMaxBytes on devices of over 30 GB/s of DRAM bandwidth per SM
// (dram_rich_sms: the H200, not the H100: there the bulk kernel stays ahead at 64 KB, 85.2 against 82.7, while a
// warp per row wins at 32 KB, fp32 [16384, 8192]).
// Each such warp keeps 2 KB of its row in flight (U = 4 vectors a lane) and reduces by shuffles alone, so an SM
// streams many rows with no CTA barrier between them; fewer rows take a CTA per row, which keeps more of each row in
// flight. Forward, % of copy, a CTA per row (stream_fwd_kernel, or bulk_fwd_kernel at 32-64 KB) -> a warp per row:
//                                  H100 bf16 / fp32               H200 bf16 / fp32
//   [65536, 2048]                  24.9 / 47.6 -> 75.9 / 88.6     bf16 17.6 -> 65.3
//   [16384, 8192]                  65.4 / 83.1 -> 81.2 / 90.6     44.1-55.0 / 62.4 -> 75.6 / 86.1-86.3
//   [8192, 16384]                                                 bf16 58.2 -> 78.1
//   [4096, 32000] unchecked        85.2-85.3 / 92.7 -> 82.7-82.8 / 92.6-92.7   75.4-75.7 / 91.1 -> 79.1 / 91.7-92.0
// Measured and not taken (session 44, H200, bf16 [4096, 32000] unchecked forward, % of copy, two rounds; the warp
// kernel 90.5-90.6 / 88.8-88.9 in the same calls): each lane's vectors copied by cp.async into a per-warp ring of D
// group slots in shared memory, D groups ahead of the fold (no registers in flight; 152-218 KB of shared memory per
// SM) 75.0-77.0 at U = 4, D = 2 / 3 and U = 2, D = 4 / 6 (fp32 82.7-84.2 against 100.0-100.2; [16384, 8192] bf16
// 78.3-79.0 against 87.8); the next group's loads issued before this one is folded at U = 2 / 3 / 4 vectors a lane:
// 87.2-87.5 / 90.2-90.6 / 86.8-86.9 (U = 4 spills 8-24 bytes), [16384, 8192] 80.3 / 84.6 against 86.6. Warp per row
// for fp32 rows of 128 KB and more (H200, forward, default -> warp): [4096, 32000] 97.5-98.3 -> 99.3-100.2, but
// [3200, 32768] 98.5 -> 86.2, [4096, 49152] 102.4 -> 102.5; bf16 [4096, 65536] 98.4 -> 87.3.
// fp32 rows of up to kWarpMaxBytes on dram_rich_sms devices instead (session 45): the rows of a CTA share it in the
// widest power of 2 of threads, 32 to kStreamThreads, that still gives each row 4 groups or more (tpr * 256 bytes
// <= the row: 16 KB rows 64 threads, 32 KB 128, 64 KB a CTA per row, the stream kernel: bulk_fwd_kernel trails it
// there, [16384, 8192] 72.6 against 94.4, [8192, 16384] 93.5 against 98.1). A group then carries more of the row, and
// fp32 folds half the elements of a 16-bit row of the same bytes, so the wider row's barriers cost less than the
// loads they keep in flight; 16-bit rows stay a warp each (H200, bf16, a warp -> 64 threads: [16384, 8192] 86.6 ->
// 83.1, [8192, 16384] 89.9 -> 87.2, [4096, 32000] 88.8 -> 88.3). Where that width gives under kSmallWaves waves of
// rows (four 256-thread CTAs an SM), the rows of one wave at full occupancy instead: the narrowest width no smaller
// than the chip's resident threads over M, so that every row is in flight from the start. H200, fp32 forward,
// unchecked, % of copy, a warp / 64 / 128 / 256 threads a row (256: the stream kernel), two calls:
//   [32768, 4096]   95.5-95.8 / 96.9-97.0 / 93.9-94.1 / 80.2-80.3
//   [16384, 8192]   90.6-92.7 / 95.5-97.6 / 97.0-98.9 / 94.4-96.9
//   [8192, 16384]   94.5-96.8 / 94.2-96.5 / 96.6-98.7 / 98.1-100.2
//   [4096, 8192]    84.5-84.6 / 71.8 / 78.8-79.0 / 77.4-77.9      (3.9 waves at 128 threads: a warp)
//   [2048, 16384]   77.2-77.6 / 84.0-84.2 / 71.4 / 79.3-79.4      (3.9 waves at 256: 64 threads)
//   [4096, 16000]   90.1 / - / 87.9 / - (bulk_fwd_kernel 86.5)     (3.9 waves at 128: a warp)
//   [65536, 2048]   90.7 / 88.1
// The former policy (a warp per row from 24 rows per SM, else the bulk kernel at 32-64 KB, else a CTA per row) ->
// this one, a third call: [16384, 8192] 90.7 -> 97.1, [32768, 4096] 93.8 -> 95.1, [2048, 16384] 76.8 -> 82.3,
// [1024, 16384] 61.5 -> 69.1, [1024, 4096] 30.2 -> 33.5, [512, 8192] 30.5 -> 34.6; [8192, 16384] the table's warp ->
// 256 column.
// MYOPS_CE_WARP: 1 (default) that policy, 0 no rows shared by a CTA, 2 a warp per row always (A/B, tests);
// MYOPS_CE_TPR (32, 64 or 128) fixes the threads of every row instead. Read once.
constexpr int64_t kWarpMaxBytes = 64 * 1024;
constexpr int kWarpRowsPerSm = 24;
constexpr int kSmallWaves = 5;
// The forward's kernel for M rows of row_bytes: the streaming kernel's threads a row, 32, 64 or 128 (several rows a
// CTA) or kStreamThreads (a CTA, or a cluster, per row), or 0: bulk_fwd_kernel. The knobs fixing one come first.
inline int ce_fwd_tpr(int64_t M, int64_t row_bytes, int es) {
  static const int mode = rr::env_knob("MYOPS_CE_WARP", 1, [](int m) { return m >= 0 && m <= 2; });
  static const int fixed =
      rr::env_knob("MYOPS_CE_TPR", 0, [](int t) { return t == 0 || t == 32 || t == 64 || t == 128; });
  const int bulk = ce_bulk_mode();
  if (fixed) return fixed;
  if (mode == 2) return 32;
  if (bulk == 2 && row_bytes <= kBulkMaxBytes) return 0;
  if (mode == 1 && row_bytes <= kWarpMaxBytes) {
    if (es == 4 && dram_rich_sms()) {
      const int64_t resident = 4LL * kStreamThreads * sm_count();
      int tpr = 32;
      while (tpr < kStreamThreads && 2 * tpr * 256 <= row_bytes) tpr *= 2;
      if (M * tpr < kSmallWaves * resident)
        while (tpr > 32 && M * tpr > resident) tpr /= 2;
      return tpr;
    }
    if (M >= (int64_t)kWarpRowsPerSm * sm_count() && (row_bytes <= kBulkMinBytes || dram_rich_sms())) return 32;
  }
  return bulk == 1 && row_bytes >= kBulkMinBytes && row_bytes <= kBulkMaxBytes ? 0 : kStreamThreads;
}

// CTAs per row of the streaming forward: 1, unless the row is long (kCeClusterBytes or more) and one CTA per row
// would fill less than kCeFill of its last wave, which then idles most of the chip: the fewest CTAs per row (2, 4 or
// 8) that fill kCeFill. H200, forward, % of copy, one CTA per row -> clusters of 2 / 4 / 8, two rounds each:
// - V = 262144 fp32 (1024 rows, 660 at once: 1.55 waves): 85.6 -> 95.9 at 4 (6.2 waves), 93.5 at 8; on another
//   machine (the policy's choice, 4): 95.3 -> 98.0.
// - V = 262144 bf16 (528 at once: 1.94 waves): 88.0 -> 82.9 at 4, 75.9 at 8: the clusters' cost (each row's CTAs
//   wait for the slowest of them) where the waves were full already.
// - [4096, 32000] bf16: 71.3 -> 59.4 at 2, 43.1 at 4; fp32 85.0 -> 79.7, 64.3.
// MYOPS_CE_CLUSTER (1, 2, 4 or 8) fixes it (A/B); read once.
constexpr int64_t kCeClusterBytes = 512 * 1024;
constexpr double kCeFill = 0.85;
template <class K> int ce_cluster(K kernel, int64_t M, int64_t C, int es) {
  static const int knob =
      rr::env_knob("MYOPS_CE_CLUSTER", 0, [](int c) { return c == 0 || (c <= kMaxCluster && (c & (c - 1)) == 0); });
  if (knob) return knob;
  int per_sm = 0;
  if (C * es < kCeClusterBytes ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kStreamThreads, 0) != cudaSuccess || per_sm < 1) {
    (void)cudaGetLastError();
    return 1;
  }
  const double slots = (double)per_sm * sm_count();
  for (int cl = 1; cl < kMaxCluster; cl *= 2) {
    const double waves = (double)M * cl / slots;
    if (waves / std::ceil(waves) >= kCeFill) return cl;
  }
  return kMaxCluster;
}

// d loss / d x of one vector of VEC columns from c (a, in place: x in, dx out), tg = the row's target - c: g (the
// row's gradient, 0 where ignored) times softmax(x) - (1 - smoothing) one_hot(target) - smoothing / C.
template <class T, class A, int VEC>
__device__ __forceinline__ void bwd_vec(A (&a)[VEC], int64_t tg, bool ignored, A g, A m, A ls, A off, A hit) {
  const int eh = tg >= 0 && tg < VEC ? (int)tg : -1;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const A pr = ignored ? A(0) : exp_of<T>((a[e] - m) - ls);
    a[e] = g * (pr - off - (e == eh ? hit : A(0)));
  }
}

// Backward has no reduction, so it need not hold a row: each CTA takes kBwdThreads * kBwdNv vectors of one row
// (grid = M * chunks), the layout of an elementwise kernel, with the row's target, stats and grad broadcast.
constexpr int kBwdThreads = 256, kBwdNv = 4;
// MIS: rows misaligned as fold_fwd_kernel's, x's and dx's alike (the same offset from a 16-byte boundary in each
// row): the vectors start at the row's head, whose columns (and the tail's) chunk 0's threads take one each.
template <class T, bool MIS = false>
__global__ void __launch_bounds__(kBwdThreads)
    rr_bwd_kernel(T* __restrict__ dx, int64_t dxs,      // [M, C]
                  const T* __restrict__ x, int64_t xs,  // [M, C]
                  const int64_t* __restrict__ target, int64_t t_stride,
                  const acc_t<T>* __restrict__ stats,  // [M, 2]
                  const acc_t<T>* __restrict__ grad,   // [M] (stride)
                  int64_t g_stride, int C, int64_t ignore_index, acc_t<T> smoothing, int chunks, bool last) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  const int64_t r = blockIdx.x / chunks;
  const int h = MIS ? head_elems(x + r * xs, C) : 0;                       // (the head's columns)
  const int nb = MIS ? (C - h) / VEC * VEC : C;                            // (the vectors' columns, from h)
  const int c0 = (int)(blockIdx.x % chunks) * kBwdThreads * kBwdNv * VEC;  // the chunk's first column (from h)
  const int n = nb - c0;                                                   // columns from there to the vectors' end
  rr::Regs<T, kBwdNv> v;
  v.load(x + r * xs + h + c0, n, threadIdx.x, kBwdThreads, from_acc<T>(A(0)), rr::l2_hint(last));
  const int64_t tg = target[r * t_stride];
  const bool ignored = tg == ignore_index;
  const A g = ignored ? A(0) : grad[r * g_stride], m = stats[2 * r], ls = stats[2 * r + 1];
  const A off = smoothing / A(C), hit = A(1) - smoothing;
#pragma unroll
  for (int s = 0; s < kBwdNv; ++s) {
    const int c = rr::Regs<T, kBwdNv>::col(s, threadIdx.x, kBwdThreads);
    if (c >= n) break;
    A a[VEC];
    v.fresh(s, a);
    bwd_vec<T>(a, tg - h - c0 - c, ignored, g, m, ls, off, hit);
    rr::store(dx + r * dxs + h + c0, c, a);
  }
  if (MIS && c0 == 0) {  // the head's and the tail's columns (under VEC each), k-th at k or k + nb
    for (int k = threadIdx.x; k < C - nb; k += kBwdThreads) {
      const int col = k < h ? k : k + nb;
      A a[1] = {to_acc(x[r * xs + col])};
      bwd_vec<T>(a, tg - col, ignored, g, m, ls, off, hit);
      dx[r * dxs + col] = from_acc<T>(a[0]);
    }
  }
}

// The same over rows too short to fill rr_bwd_kernel's CTA (a row of V = C / VEC vectors left kBwdThreads * kBwdNv
// - V of its slots idle, 15 of 16 threads at C = 128 in 16 bits, and launched a CTA per row): the [M, V] vectors
// flattened, each CTA kBwdThreads * kBwdNv consecutive ones (any rows), thread t its kBwdNv at t + s kBwdThreads,
// each vector with its own row's target, stats and grad (neighbouring threads share rows: L1 hits).
template <class T>
__global__ void __launch_bounds__(kBwdThreads, 4)
    flat_bwd_kernel(T* __restrict__ dx, int64_t dxs,      // [M, C]
                    const T* __restrict__ x, int64_t xs,  // [M, C]
                    const int64_t* __restrict__ target, int64_t t_stride,
                    const acc_t<T>* __restrict__ stats,  // [M, 2]
                    const acc_t<T>* __restrict__ grad,   // [M] (stride)
                    int64_t g_stride, int64_t M, int C, int64_t ignore_index, acc_t<T> smoothing, bool last) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  const unsigned V = (unsigned)(C / VEC);
  const int64_t base = (int64_t)blockIdx.x * (kBwdThreads * kBwdNv);  // the CTA's first vector
  const int64_t r0 = base / V;                                        // (one 64-bit division; then 32-bit ones)
  const unsigned k0 = (unsigned)(base - r0 * V) + threadIdx.x;        // from row r0's first vector
  const L2Hint h = l2_hint(last);
  rr::Regs<T, kBwdNv> v;  // (its words: vector s of this thread in slot s)
  int64_t r[kBwdNv], tg[kBwdNv];
  int c[kBwdNv];
  A g[kBwdNv], m[kBwdNv], ls[kBwdNv];
  // Every load first, the rows' too (each vector may be another row's): where each vector's target, grad and stats
  // were loaded in its turn, after the stores before it, a thread waited on kBwdNv round trips in a row.
#pragma unroll
  for (int s = 0; s < kBwdNv; ++s) {
    const unsigned k = k0 + s * kBwdThreads, dr = k / V;
    r[s] = r0 + dr;
    c[s] = (int)(k - dr * V) * VEC;
    if (r[s] < M) {
      const uint4 q = ld16(x + r[s] * xs + c[s], h);
      v.u[s][0] = q.x, v.u[s][1] = q.y, v.u[s][2] = q.z, v.u[s][3] = q.w;
      tg[s] = target[r[s] * t_stride];
      g[s] = grad[r[s] * g_stride];  // (read for an ignored row too: no wait on its target)
      m[s] = stats[2 * r[s]];
      ls[s] = stats[2 * r[s] + 1];
    }
  }
  const A off = smoothing / A(C), hit = A(1) - smoothing;
#pragma unroll
  for (int s = 0; s < kBwdNv; ++s) {
    if (r[s] >= M) break;
    const bool ignored = tg[s] == ignore_index;
    A a[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) a[e] = v.at(s, e);
    bwd_vec<T>(a, tg[s] - c[s], ignored, ignored ? A(0) : g[s], m[s], ls[s], off, hit);
    rr::store(dx + r[s] * dxs, c[s], a);
  }
}

// Misaligned rows stored packed (row stride C >= VEC; x's and dx's buffers as far from a 16-byte boundary), short as
// flat_bwd_kernel's: its layout over the M * C elements taken as one buffer, 16-byte vectors from the buffer's first
// boundary. A vector across a row's end (C >= VEC: two rows at most) reads both rows' target, grad and stats (the same
// row's twice elsewhere: L1 hits); the buffer's head and tail, under VEC elements each, CTA 0 takes one element a
// thread (through the op the head is empty: dx comes aligned, and x must share its phase). (Per-row heads and tails,
// rr_bwd_kernel<T, true>'s way, left a 1001-column bf16 row's 125 vectors on a CTA of 256 threads.) H200, unchecked,
// forward+backward, % of copy, the engine's backward -> this (session 53): [65536, 1001] bf16 16.4 -> 54.9, fp32 32.4
// -> 73.3; [131072, 2001] bf16 61.0, fp32 79.0 (its backward alone near 53% of copy in bf16). Its first form, which
// indexed the two rows' data by a computed index, put them in local memory (160 bytes a thread): bf16
// [65536, 1001] 48.9.
// SEG (16-bit rows of 512 bytes or more, ce_packed_bwd): a vector within one row (for C = 1001 in bf16, 124 of 125)
// takes flat_bwd_kernel's code, and one across two rows decodes them once (the first row's elements, each row's target
// element in the vector) and selects per element, where the per-element form takes bwd_vec on each one alone, with
// its 64-bit target compares and selects (bf16 16-byte vectors there run the backward at about half of copy: issue-
// bound, by a count of 12-15 instructions an element against the copy's time); the next row's data read only by the
// vectors that reach it. Same arithmetic, same bits.
template <class T, bool SEG>
__global__ void __launch_bounds__(kBwdThreads, 3)  // (two rows' data a vector: 48 bytes spilled under 4's 64 registers)
    packed_bwd_kernel(T* __restrict__ dx,       // [M, C], row stride C
                      const T* __restrict__ x,  // [M, C], row stride C
                      const int64_t* __restrict__ target, int64_t t_stride,
                      const acc_t<T>* __restrict__ stats,  // [M, 2]
                      const acc_t<T>* __restrict__ grad,   // [M] (stride)
                      int64_t g_stride, int64_t M, int C, int64_t ignore_index, acc_t<T> smoothing, bool last) {
  using A = acc_t<T>;
  constexpr int VEC = 16 / sizeof(T);
  const int64_t n = M * C;
  const int h = head_elems(x, VEC);                                   // (n >= C >= VEC)
  const int64_t nv = (n - h) / VEC;                                   // the vectors
  const int64_t base = (int64_t)blockIdx.x * (kBwdThreads * kBwdNv);  // the CTA's first vector
  const int64_t e0 = h + base * VEC, r0 = e0 / C;                     // (one 64-bit division; then 32-bit ones)
  const unsigned o0 = (unsigned)(e0 - r0 * C) + threadIdx.x * VEC;    // from row r0's start
  const L2Hint hint = l2_hint(last);
  const A off = smoothing / A(C), hit = A(1) - smoothing;
  // d loss / d x of element i in place (row r, column c): one element of bwd_vec with that row's data
  const auto one = [&](A& a, int64_t tg, A g, A m, A ls, int c) {
    A v[1] = {a};
    const bool ignored = tg == ignore_index;
    bwd_vec<T>(v, tg - c, ignored, ignored ? A(0) : g, m, ls, off, hit);
    a = v[0];
  };
  rr::Regs<T, kBwdNv> v;  // (its words: vector s of this thread in slot s)
  int64_t tg[kBwdNv][2];  // [vector][its first element's row, its last's]
  A g[kBwdNv][2], m[kBwdNv][2], ls[kBwdNv][2];
  int c[kBwdNv];  // the vector's first column
  // Every load first, as flat_bwd_kernel.
#pragma unroll
  for (int s = 0; s < kBwdNv; ++s) {
    const int64_t k = base + threadIdx.x + s * kBwdThreads;
    if (k < nv) {
      const unsigned o = o0 + s * kBwdThreads * VEC, dr = o / (unsigned)C;
      c[s] = (int)(o - dr * C);
      const uint4 q = ld16(x + h + k * VEC, hint);
      v.u[s][0] = q.x, v.u[s][1] = q.y, v.u[s][2] = q.z, v.u[s][3] = q.w;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t r = r0 + dr + (j && c[s] + VEC > C);
        if (SEG && j && r == r0 + dr) {  // (no next row: the first's data again, loaded once)
          tg[s][1] = tg[s][0], g[s][1] = g[s][0], m[s][1] = m[s][0], ls[s][1] = ls[s][0];
          break;
        }
        tg[s][j] = target[r * t_stride];
        g[s][j] = grad[r * g_stride];
        m[s][j] = stats[2 * r];
        ls[s][j] = stats[2 * r + 1];
      }
    }
  }
#pragma unroll
  for (int s = 0; s < kBwdNv; ++s) {
    const int64_t k = base + threadIdx.x + s * kBwdThreads;
    if (k >= nv) break;
    A a[VEC];
    if constexpr (SEG) {
      const bool ia = tg[s][0] == ignore_index, ib = tg[s][1] == ignore_index;
      const A ga = ia ? A(0) : g[s][0], gb = ib ? A(0) : g[s][1];
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] = v.at(s, e);
      if (c[s] + VEC <= C) {  // one row: flat_bwd_kernel's code
        bwd_vec<T>(a, tg[s][0] - c[s], ia, ga, m[s][0], ls[s][0], off, hit);
      } else {
        // Element e is the first row's below split, at column c + e, else the next row's, at c + e - C; each row's
        // target element (-1: not in this vector) can only fall in its own part, as a valid target is under C.
        const int split = C - c[s];
        const auto elem = [](int64_t d) { return d >= 0 && d < VEC ? (int)d : -1; };
        const int ea = elem(tg[s][0] - c[s]), eb = elem(tg[s][1] - (c[s] - C));
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const bool b = e >= split;
          const A d = (a[e] - (b ? m[s][1] : m[s][0])) - (b ? ls[s][1] : ls[s][0]);
          const A pr = (b ? ib : ia) ? A(0) : exp_of<T>(d);
          a[e] = (b ? gb : ga) * (pr - off - (e == (b ? eb : ea) ? hit : A(0)));  // (bwd_vec's expression)
        }
      }
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int col = c[s] + e;
        const bool b = col >= C;  // (selects: an index into these arrays put them in local memory, 160 bytes a thread)
        a[e] = v.at(s, e);
        one(a[e], b ? tg[s][1] : tg[s][0], b ? g[s][1] : g[s][0], b ? m[s][1] : m[s][0], b ? ls[s][1] : ls[s][0],
            b ? col - C : col);
      }
    }
    rr::store(dx + h + k * VEC, 0, a);
  }
  if (blockIdx.x == 0) {  // the head's elements and the tail's, k-th at k or k + nv * VEC
    const int64_t tail = n - h - nv * VEC;
    for (int k = threadIdx.x; k < h + tail; k += kBwdThreads) {
      const int64_t i = k < h ? k : k + nv * VEC, r = i / C;
      A a = to_acc(x[i]);
      one(a, target[r * t_stride], grad[r * g_stride], stats[2 * r], stats[2 * r + 1], (int)(i - r * C));
      dx[i] = from_acc<T>(a);
    }
  }
}

// The backward's kernel: flat_bwd_kernel for rows under kBwdFlatVecs vectors (16-bit) or half that (fp32), else
// rr_bwd_kernel. H200, unchecked forward+backward, % of copy, rr_bwd_kernel -> flat_bwd_kernel (session 52): bf16
// [1048576, 128] 8.9 -> 87.2, [131072, 512] 29.0 -> 82.0, [262144, 1000] 48.0 -> 93.5, [65536, 2048] 68.8 -> 91.0,
// [16384, 4096] (512 vectors) 80.7 -> 85.5; fp32 [1048576, 128] 16.6 -> 47.0 (its forward at 23.4), [262144, 1000]
// 85.6 -> 97.3, but [65536, 2048] (512 vectors, two a thread in rr_bwd_kernel) 98.7 -> 95.8. Before the rows' loads
// moved ahead of the first store, flat_bwd_kernel had 77.7, 75.6, 86.6, 86.0 (bf16) and 83.2 (fp32 [262144, 1000]).
// MYOPS_CE_BWD_FLAT: 1 that policy (default), 0 never flat, 2 always flat (A/B). Read once.
constexpr int kBwdFlatVecs = kBwdThreads * kBwdNv;
inline bool ce_bwd_flat(int64_t vecs_per_row, int es) {
  static const int mode = rr::env_knob("MYOPS_CE_BWD_FLAT", 1, [](int m) { return m >= 0 && m <= 2; });
  return mode == 2 || (mode == 1 && vecs_per_row < (es == 2 ? kBwdFlatVecs : kBwdFlatVecs / 2));
}

// ---- the scalars around the row kernels: one launch each where reduction "mean" took a chain of ATen ops (forward:
// sum, ne, sum, cast, div, cast; backward: cast, ne, sum, cast, div), each a host call and a kernel
constexpr int kScalarThreads = 1024;

// Sums v (a thread's share) and n over the CTA, in a fixed order (deterministic); the totals are valid in thread 0.
// Each warp's butterfly, then warp 0's over the warps' sums: the forward's loss waits on this after the row kernel's
// end, where thread 0 adding the 32 warps' sums from shared memory in turn was a chain of 32 dependent loads and adds.
// H100, [4096, 32000] forward, % of copy, chain -> butterfly (6-13 processes each; those whose host wait for the check
// ran late aside): bf16 checked 93.2-93.8 -> 93.8-94.1, unchecked 92.7-93.5 -> 92.9-93.6; fp32 98.0-98.4 -> 98.2-98.5.
template <class A> __device__ void cta_sum(A& v, long long& n) {
  __shared__ A sv[32];
  __shared__ long long sn[32];
  const auto warp_sum = [&] {  // (both sums' shuffles interleaved: common.cuh's warp_sum on each, one after the
                                //  other, compiled to predicated code with 16 more SASS instructions, not GPU-timed)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      v += __shfl_xor_sync(0xffffffffu, v, o);
      n += __shfl_xor_sync(0xffffffffu, n, o);
    }
  };
  warp_sum();
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (lane == 0) {
    sv[w] = v;
    sn[w] = n;
  }
  __syncthreads();
  if (w == 0) {
    v = lane < nw ? sv[lane] : A(0);
    n = lane < nw ? sn[lane] : 0;
    warp_sum();
  }
}

// This thread's share of rows [r0, r1) (threadIdx.x, then every kScalarThreads-th): v = the sum of losses[r] (losses
// null: none) and n = the count of targets not ignore_index (mean), in a fixed order. With losses (the forward) the
// targets are counted before pdl_wait (see scalar_kernel), else after it.
template <class A>
__device__ __forceinline__ void rows_sum_count(A& v, long long& n, const A* __restrict__ losses,
                                               const int64_t* __restrict__ target, int64_t t_stride, int64_t r0,
                                               int64_t r1, int64_t ignore_index, int mean) {
  n = 0;
  const auto count = [&] {
    if (mean)
      for (int64_t r = r0 + threadIdx.x; r < r1; r += kScalarThreads) n += target[r * t_stride] != ignore_index;
  };
  if (losses) count();
  pdl_wait();
  if (!losses) count();
  v = A(0);
  if (losses) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.x; r < r1; r += kScalarThreads) v += losses[r];
  }
}

// Thread 0: out[0] = total / (mean ? n : 1) in Out, total being v (the losses' sum) or, in given (the backward),
// in[0]. Every row ignored: 0 / 0 = NaN.
template <class A, class In, class Out>
__device__ __forceinline__ void store_total(Out* __restrict__ out, A v, long long n, const In* __restrict__ in,
                                            int mean) {
  if (threadIdx.x == 0) {
    const A total = in ? to_acc(in[0]) : v;
    out[0] = from_acc<Out>(mean ? total / A(n) : total);
  }
}

// out[0] = total / (mean ? the count of rows whose target is not ignore_index : 1) in Out, where total is
// sum_r losses[r] (the forward's loss of reduction sum/mean from the rows' losses) or in[0] (in given, losses null:
// the backward's per-row factor from the loss's gradient), in A and a fixed order (deterministic). Every row ignored:
// 0 / 0 = NaN, as F.cross_entropy.
// The forward's primary is its row kernel, which only reads target and started after whatever wrote it
// (plainly, or as a dependent of the target check, itself launched plainly), so the targets are counted before
// pdl_wait, while that kernel runs; after it, one batch of loads of the losses (four in flight a thread) is left,
// where each row's two loads in one loop took dependent round trips to L2. H100, [4096, 32000] forward, % of copy,
// two rounds: unchecked bf16 91.9 / 91.9 -> 92.3 / 92.4, fp32 97.2 / 97.2 -> 97.4 / 97.4 (session 35).
template <class A, class In, class Out>
__global__ void __launch_bounds__(kScalarThreads)
    scalar_kernel(Out* __restrict__ out,               // []
                  const A* __restrict__ losses,        // [M] or null
                  const In* __restrict__ in,           // [] or null
                  const int64_t* __restrict__ target,  // [M]
                  int64_t t_stride, int64_t M, int64_t ignore_index, int mean) {
  A v;
  long long n;
  rows_sum_count<A>(v, n, losses, target, t_stride, 0, M, ignore_index, mean);
  cta_sum(v, n);
  store_total(out, v, n, in, mean);
}

// ---- the loss's scalar over many rows: scalar_kernel's one CTA reads M losses and M targets (12 bytes a row) at one
// SM's rate. H200, bf16 unchecked forward (session 51): the time past the logits' bytes at the copy's speed was 12.6
// us at M = 65536, 25.6 at 131072, 56 at 262144 and 216 at 1048576, 56-62 GB/s of those 12 bytes a row at every row
// length (128 to 2048): by that estimate, the one CTA's reads after the row kernel. Over ce_parts(M) parts,
// part_kernel's CTAs each reduce a chunk of rows into parts [2, P] (the sum of their losses and the count of their
// targets not ignored), then one CTA (parts_total_kernel) sums the parts in their order: deterministic for a given
// M, as scalar_kernel. H200, bf16 unchecked forward, % of copy, one CTA -> parts (session 52): [1048576, 128]
// 22.9 -> 81.6, [131072, 512] 54.5 -> 72.3, [262144, 1000] 67.3 -> 90.0, [65536, 2048] 82.9 -> 86.7 (76.0 -> 72.5
// us); but 16384 and 32768 rows lost 0.8-1.5 us ([16384, 512] 11.6 -> 13.1 us, [32768, 512] 16.2 -> 17.0,
// [16384, 4096] 38.8 -> 39.9): there the one CTA's reads were shorter than a second launch.
constexpr int64_t kPartRows = 4096;    // (rows a part reduces, four a thread)
constexpr int64_t kPartsFrom = 65536;  // (rows, the least M reduced in parts)
constexpr int64_t kMaxParts = 1024;    // (M up to 2^24 of them: a part's count exact in fp32)
// MYOPS_CE_PARTS: 1 (default) parts of kPartRows rows from M = kPartsFrom; 0 one CTA for every M; 2 parts of 3 rows
// for every M > 1 (tests). The parts' count for M rows, or 0 (one CTA). Read once.
inline int64_t ce_parts(int64_t M) {
  static const int mode = rr::env_knob("MYOPS_CE_PARTS", 1, [](int m) { return m >= 0 && m <= 2; });
  if (mode == 0 || M < 2 || (mode == 1 && M < kPartsFrom) || M > (kMaxParts << 24)) return 0;
  const int64_t chunk = ceil_div(M, std::min(kMaxParts, ceil_div(M, mode == 2 ? 3 : kPartRows)));
  return ceil_div(M, chunk);
}

// Part b of P = gridDim.x over rows [b chunk, (b + 1) chunk): parts[b] = the sum of their losses (null: none, the
// backward's count alone) and parts[P + b] = the count of their targets not ignore_index (mean; else 0), both in A.
template <class A>
__global__ void __launch_bounds__(kScalarThreads)
    part_kernel(A* __restrict__ parts,               // [2, P]
                const A* __restrict__ losses,        // [M] or null
                const int64_t* __restrict__ target,  // [M]
                int64_t t_stride, int64_t M, int64_t chunk, int64_t ignore_index, int mean) {
  pdl_trigger();  // (parts_total_kernel, launched next, waits for this grid's completion in pdl_wait)
  const int64_t r0 = (int64_t)blockIdx.x * chunk, r1 = r0 + chunk < M ? r0 + chunk : M;
  A v;
  long long n;
  rows_sum_count<A>(v, n, losses, target, t_stride, r0, r1, ignore_index, mean);
  cta_sum(v, n);
  if (threadIdx.x == 0) {
    parts[blockIdx.x] = v;
    parts[gridDim.x + blockIdx.x] = A(n);
  }
}

// out[0] = total / (mean ? the parts' count : 1) in Out, where total is the parts' sum (in null: the forward) or
// in[0] (the backward's factor from the loss's gradient); as scalar_kernel's.
template <class A, class In, class Out>
__global__ void __launch_bounds__(kScalarThreads) parts_total_kernel(Out* __restrict__ out,        // []
                                                                     const A* __restrict__ parts,  // [2, P]
                                                                     int64_t P,
                                                                     const In* __restrict__ in,  // [] or null
                                                                     int mean) {
  pdl_wait();
  A v = A(0);
  long long n = 0;
  for (int64_t b = threadIdx.x; b < P; b += kScalarThreads) {
    v += parts[b];
    n += (long long)parts[P + b];
  }
  cta_sum(v, n);
  store_total(out, v, n, in, mean);
}

// One CTA of scalar_kernel, a programmatic dependent of the kernel before it (the forward's row kernel, which lets
// it start once its last CTAs run): its launch overlaps that kernel's tail instead of following it.
template <class K, class... Args> int launch_scalar(cudaStream_t st, K kernel, Args... args) {
  rr::Geo g;
  g.threads = kScalarThreads;
  return rr::launch_dependent(g, 1, kernel, st, args...);
}
// out[0] from rows (the forward's row losses [M]; null: the backward's factor from in[0]) by one CTA, or where parts
// (a workspace of 2 ce_parts(M) elements, or null) is given and ce_parts(M) > 0 by part_kernel's CTAs and
// parts_total_kernel, each a programmatic dependent of the kernel before it. The backward's "sum" counts nothing:
// one CTA.
template <class A, class In, class Out>
int launch_loss_scalar(cudaStream_t st, Out* out, const A* rows, const In* in, A* parts, const int64_t* target,
                       int64_t t_stride, int64_t M, int64_t ignore_index, int mean) {
  const int64_t P = parts != nullptr && (rows != nullptr || mean) ? ce_parts(M) : 0;
  if (P == 0)
    return launch_scalar(st, scalar_kernel<A, In, Out>, out, rows, rows ? nullptr : in, target, t_stride, M,
                         ignore_index, mean);
  rr::Geo g;
  g.threads = kScalarThreads;
  const int rc = rr::launch_dependent(g, P, part_kernel<A>, st, parts, rows, target, t_stride, M, ceil_div(M, P),
                                      ignore_index, mean);
  if (rc) return rc;
  return launch_scalar(st, parts_total_kernel<A, In, Out>, out, static_cast<const A*>(parts), P, rows ? nullptr : in,
                       mean);
}

// The check's slots: *used of check_host's `slots` (one per CTA of the check), and their device address in *dev
// (the same address under unified addressing; asked, not assumed).
int check_slots(int64_t* check_host, int64_t slots, int64_t M, int64_t* used, int64_t** dev) {
  *used = std::min<int64_t>(slots, ceil_div(M, (int64_t)kCheckThreads));
  *dev = nullptr;
  return cudaHostGetDevicePointer(reinterpret_cast<void**>(dev), check_host, 0);
}
// 1 + the least bad row over the check's written slots (their kSlotDone bit aside), or 0.
int64_t least_bad(const volatile int64_t* slot, int64_t used) {
  int64_t bad = 0;
  for (int64_t b = 0; b < used; ++b) {
    const int64_t v = slot[b] & ~kSlotDone;
    if (v != 0 && (bad == 0 || v < bad)) bad = v;
  }
  return bad;
}

// Queues the target check (check_targets_kernel, writing straight into the pinned check_host through its device
// mapping: no copy to queue behind it) and an event behind it, returned in *done (null if none was created; once it
// is not null, the caller must check_wait on it even when this fails, so that the check is done writing check_host
// before it is freed). *used: the slots the check writes.
int check_launch(int64_t* check_host, int64_t slots, int64_t* used, cudaEvent_t* done, const int64_t* target,
                 int64_t t_stride, int64_t M, int64_t C, int64_t ignore_index, cudaStream_t stream) {
  *done = nullptr;
  int64_t* check_dev;
  int rc = check_slots(check_host, slots, M, used, &check_dev);
  if (rc) return rc;
  rc = cudaEventCreateWithFlags(done, cudaEventDisableTiming);  // (before the check is queued)
  if (rc) {
    *done = nullptr;
    return rc;
  }
  check_targets_kernel<false><<<(unsigned)*used, kCheckThreads, 0, stream>>>(check_dev, target, t_stride, M, C,
                                                                             ignore_index);
  rc = launch_status();
  return rc ? rc : cudaEventRecord(*done, stream);
}
// Waits for `done` (the host alone: the GPU goes on), destroys it, and folds the check's slots into *bad_row = 1 +
// the least bad row, or 0.
int check_wait(cudaEvent_t done, const int64_t* check_host, int64_t used, int64_t* bad_row) {
  *bad_row = 0;
  const int wait = cudaEventSynchronize(done);
  cudaEventDestroy(done);
  if (wait) return wait;
  *bad_row = least_bad(check_host, used);
  return MYOPS_OK;
}

// The target check, then the rest of the forward (`forward`: the row kernel and the loss's reduction), and only
// then the wait for the check. The host waits for the check alone while the GPU goes on with the forward, so the GPU
// never idles for it (the flag that the forward kernel used to raise was read after it, leaving the GPU idle while
// the host queued what followed: [4096, 32000] fp32 ran at 62% of copy checked against 84% unchecked on the H100),
// and once the wait returns the host has nothing left to queue. *bad_row = 1 + the least bad row, or 0. check_host
// null: no check.
// MYOPS_CE_CHECK_OVERLAP (default 1; 0: the order above): the forward's row kernel as a programmatic dependent of
// the check, which triggers it first thing, so that the two overlap instead of the check's ~2 us (and its launch)
// running ahead of the forward. No event may sit between them, so the host learns that the check is done from its
// slots (each written with kSlotDone set), polled, with cudaStreamQuery every 256 polls to notice a stream that
// failed or finished without writing them. H100, [4096, 32000] forward, clean flush, two rounds, % of copy, 0 -> 1:
// bf16 89.7 / 90.2 -> 92.3 / 92.4 (unchecked: 92.3), fp32 95.7 / 95.8 -> 97.1 / 97.0 (session 33). Read once.
inline bool ce_check_overlap() {
  static const int v = rr::env_knob("MYOPS_CE_CHECK_OVERLAP", 1, [](int m) { return m == 0 || m == 1; });
  return v == 1 && pdl_on();
}
template <class Forward>
int check_overlapped(int64_t* check_host, int64_t slots, int64_t* bad_row, const int64_t* target, int64_t t_stride,
                     int64_t M, int64_t C, int64_t ignore_index, cudaStream_t stream, const Forward& forward) {
  int64_t used, *check_dev;
  int rc = check_slots(check_host, slots, M, &used, &check_dev);
  if (rc) return rc;
  volatile int64_t* slot = check_host;
  for (int64_t b = 0; b < used; ++b) slot[b] = 0;
  check_targets_kernel<true><<<(unsigned)used, kCheckThreads, 0, stream>>>(check_dev, target, t_stride, M, C,
                                                                           ignore_index);
  rc = launch_status();
  if (rc) return rc;  // (nothing was queued that writes the slots)
  rc = forward(true);
  // Wait for the slots (also when the forward failed: check_host must not be freed under the check).
  const auto written = [&] {
    for (int64_t b = 0; b < used; ++b)
      if (!(slot[b] & kSlotDone)) return false;
    return true;
  };
  for (unsigned polls = 1; !written(); ++polls) {
    if (polls % 256 != 0) continue;
    const cudaError_t q = cudaStreamQuery(stream);
    if (q != cudaErrorNotReady && !written())  // done or failed: a slot still unwritten will not be
      return rc ? rc : q != cudaSuccess ? (int)q : MYOPS_EARG;
  }
  *bad_row = least_bad(slot, used);
  return rc;
}
template <class Forward>
int check_then_forward(int64_t* check_host, int64_t slots, int64_t* bad_row, const int64_t* target, int64_t t_stride,
                       int64_t M, int64_t C, int64_t ignore_index, cudaStream_t stream, const Forward& forward) {
  *bad_row = 0;
  if (check_host == nullptr) return forward(false);
  if (ce_check_overlap())
    return check_overlapped(check_host, slots, bad_row, target, t_stride, M, C, ignore_index, stream, forward);
  cudaEvent_t done;
  int64_t used;
  int rc = check_launch(check_host, slots, &used, &done, target, t_stride, M, C, ignore_index, stream);
  if (!rc) rc = forward(false);
  if (done == nullptr) return rc;
  const int wait = check_wait(done, check_host, used, bad_row);  // (also when a launch failed)
  return rc ? rc : wait;
}

}  // namespace

// rows [M] and stats [M, 2] (acc type): the rows' losses and (max, log-sum); loss [] (logits' dtype, or null for
// reduction "none"): their sum (mean = 0) or mean over the rows not ignored (mean = 1), where rows holds
// M + myops_cross_entropy_parts_cuda(M) elements (the rest: the reduction's workspace). check_host [slots] (pinned
// host memory) is the target check's scratch, or null (no check: a bad target's row gets a NaN loss).
// *bad_row = 1 + the least row whose target is outside [0, C) and not ignore_index, else 0.
extern "C" int myops_cross_entropy_cuda(void* loss, int mean, void* rows, void* stats, int64_t* check_host,
                                        int64_t slots, int64_t* bad_row, myops_operand x, const int64_t* target,
                                        int64_t t_stride, int64_t M, int64_t C, int64_t ignore_index,
                                        double smoothing, int dtype, void* stream) {
  *bad_row = 0;
  if (M <= 0 || C <= 0) return MYOPS_OK;
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int es = sizeof(T);
    using A = acc_t<T>;
    const auto row_kernel = [&](bool dependent) -> int {  // dependent: a programmatic dependent of the check
      // (fold_fwd_kernel at ftpr threads a row; mis: std::true_type for misaligned rows)
      const auto fold_at = [&](int ftpr, auto mis) {
        rr::Geo g;
        g.threads = kStreamThreads;
        const auto fold = [&](auto tpr) {
          constexpr int F = decltype(tpr)::value;
          constexpr bool MIS = decltype(mis)::value;
          const auto go = [&](auto kernel) {
            return rr::launch_as(dependent, g, ceil_div(M, (int64_t)(kStreamThreads / F)), kernel, st,
                                 static_cast<A*>(rows), static_cast<A*>(stats), static_cast<const T*>(x.ptr),
                                 x.row_stride, target, t_stride, M, (int)C, ignore_index, (A)smoothing);
          };
          return smoothing != 0.0 ? go(fold_fwd_kernel<T, true, F, MIS>) : go(fold_fwd_kernel<T, false, F, MIS>);
        };
        // (fp32: up to 32 threads a row, but misaligned rows, which have no other kernel but the engine's; 2 threads
        // a row for aligned 16-bit rows alone: ce_fold's rows of up to 128 bytes)
        constexpr int kHi = es == 2 || decltype(mis)::value ? kStreamThreads : 32;
        constexpr int kLo = es == 2 && !decltype(mis)::value ? 2 : 4;
        return with_pow2<kLo, kHi>(ftpr, fold);
      };
      if constexpr (es != 8) {  // fp64 takes the rows.cuh engine
        if (C % (16 / es) == 0 && C < (1LL << 31) && rr::operand_ok(x.ptr, x.row_stride, x.col_stride, M, C, es)) {
          // (the stream kernel for geometry g: g.rows rows per CTA, or g.cluster CTAs per row; g.tpr threads a row)
          const auto stream = [&](const rr::Geo& g, auto kernel) {
            return rr::launch_as(dependent, g, rr::cover_grid(g, M), kernel, st, static_cast<A*>(rows),
                                 static_cast<A*>(stats), static_cast<const T*>(x.ptr), x.row_stride, target, t_stride,
                                 M, (int)C, ignore_index, (A)smoothing, g.tpr);
          };
          const auto go = [&](auto plain, auto clustered) {
            rr::Geo g;
            g.ns = 4;
            g.cluster = ce_cluster(plain, M, C, es);
            g.threads = kStreamThreads;
            g.tpr = g.threads * g.cluster;
            g.rows = 1;
            return stream(g, g.cluster > 1 ? clustered : plain);
          };
          const auto sub = [&](auto sub_tpr) {  // several rows per CTA, sub_tpr threads each
            constexpr int S = decltype(sub_tpr)::value;
            rr::Geo g;
            g.threads = kStreamThreads;
            g.tpr = S;
            g.rows = kStreamThreads / S;
            return smoothing != 0.0 ? stream(g, stream_fwd_kernel<T, true, false, 4, kStreamThreads, S>)
                                    : stream(g, stream_fwd_kernel<T, false, false, 4, kStreamThreads, S>);
          };
          if constexpr (es == 2) {
            if (const int ftpr = ce_fold(C * es); ftpr && M < (1LL << 31)) return fold_at(ftpr, std::false_type{});
          } else {
            if (const int ftpr = ce_fold32(C * es); ftpr && M < (1LL << 31)) return fold_at(ftpr, std::false_type{});
          }
          const int tpr = ce_fwd_tpr(M, C * es, es);
          switch (tpr) {
            case 32: return sub(std::integral_constant<int, 32>{});
            case 64: return sub(std::integral_constant<int, 64>{});
            case 128: return sub(std::integral_constant<int, 128>{});
            default: break;
          }
          if (tpr == 0 && M < (1LL << 31)) {
            rr::Geo g;
            g.threads = kStreamThreads;
            g.smem = std::max((int)(C * es), kBulkSmemFloor);  // (two CTAs per SM: see kBulkSmemFloor)
            const auto bulk = [&](auto kernel) {
              return rr::launch_as(dependent, g, M, kernel, st, static_cast<A*>(rows), static_cast<A*>(stats),
                                   static_cast<const T*>(x.ptr), x.row_stride, target, t_stride, (int)C, ignore_index,
                                   (A)smoothing);
            };
            return smoothing != 0.0 ? bulk(bulk_fwd_kernel<T, true>) : bulk(bulk_fwd_kernel<T, false>);
          }
          return smoothing != 0.0 ? go(stream_fwd_kernel<T, true, false>, stream_fwd_kernel<T, true, true>)
                                  : go(stream_fwd_kernel<T, false, false>, stream_fwd_kernel<T, false, true>);
        }
        // Misaligned rows (C not a multiple of 16 / es, or such a row stride or pointer: not the block above).
        if (ce_misaligned() && (x.col_stride == 1 || C == 1) && C < (1LL << 31) && M < (1LL << 31))
          if (const int ftpr = ce_fold(C * es, true)) return fold_at(ftpr, std::true_type{});
      }
      Plan p = make_plan(M, C, es, 1, 0, 0, false);
      auto kernel = ce_fwd_kernel<T>;
      const int rc = finish_plan(p, kernel, M);
      if (rc) return rc;
      const int mask = vec_ok(x.ptr, x.row_stride, x.col_stride, M, C, es);
      return launch(p, kernel, st, static_cast<A*>(rows), static_cast<A*>(stats), x, target, t_stride, M, C,
                    ignore_index, (A)smoothing, mask, p);
    };
    return check_then_forward(check_host, slots, bad_row, target, t_stride, M, C, ignore_index, st, [&](bool dep) {
      const int rc = row_kernel(dep);
      if (rc || loss == nullptr) return rc;
      return launch_loss_scalar(st, static_cast<T*>(loss), static_cast<const A*>(rows), static_cast<const A*>(nullptr),
                                static_cast<A*>(rows) + M, target, t_stride, M, ignore_index, mean);
    });
  });
}

extern "C" int myops_cross_entropy_backward_cuda(myops_out_operand dx, myops_operand x, const int64_t* target,
                                                 int64_t t_stride, const void* stats, const void* grad,
                                                 int64_t g_stride, int64_t M, int64_t C, int64_t ignore_index,
                                                 double smoothing, int dtype, void* stream) {
  if (M <= 0 || C <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    constexpr int es = sizeof(T);
    const auto st = static_cast<cudaStream_t>(stream);
    const auto sp = static_cast<const A*>(stats);  // [M, 2]
    const auto gp = static_cast<const A*>(grad);   // [M] (g_stride)
    if constexpr (es != 8) {  // fp64 takes the rows.cuh engine
      constexpr int64_t VEC = 16 / es;
      const auto dxp = static_cast<T*>(dx.ptr);      // [M, C]
      const auto xp = static_cast<const T*>(x.ptr);  // [M, C]
      const bool last = rr::l2_last(M * C * es);
      const int64_t chunks = ceil_div(C, kBwdFlatVecs * VEC);
      // (rr_bwd_kernel<T, MIS>: a CTA a row's chunk of kBwdFlatVecs vectors)
      const auto row_chunks = [&](auto kernel) {
        kernel<<<(unsigned)(M * chunks), kBwdThreads, 0, st>>>(dxp, dx.row_stride, xp, x.row_stride, target, t_stride,
                                                               sp, gp, g_stride, (int)C, ignore_index, (A)smoothing,
                                                               (int)chunks, last);
        return launch_status();
      };
      if (C % VEC == 0 && M * chunks < (1LL << 31) && rr::operand_ok(x.ptr, x.row_stride, x.col_stride, M, C, es) &&
          rr::operand_ok(dx.ptr, dx.row_stride, dx.col_stride, M, C, es)) {
        if (const int64_t ctas = ceil_div(M * (C / VEC), kBwdFlatVecs);
            ce_bwd_flat(C / VEC, es) && ctas < (1LL << 31)) {
          flat_bwd_kernel<T><<<(unsigned)ctas, kBwdThreads, 0, st>>>(dxp, dx.row_stride, xp, x.row_stride, target,
                                                                     t_stride, sp, gp, g_stride, M, (int)C,
                                                                     ignore_index, (A)smoothing, last);
          return launch_status();
        }
        return row_chunks(rr_bwd_kernel<T>);
      }
      // Misaligned rows (ce_misaligned), dx's rows as far from a 16-byte boundary as x's (dx as the op allocates it,
      // for contiguous logits): packed and as short as ce_bwd_flat's rows, packed_bwd_kernel; of kBwdThreads vectors
      // or more, rr_bwd_kernel<T, true>.
      const bool mis = ce_misaligned() && C < (1LL << 31) &&
                       same_phase(x.ptr, x.row_stride, x.col_stride, dx.ptr, dx.row_stride, dx.col_stride, M, es);
      if (const int packed = ce_packed_bwd(C * es, es);
          packed && mis && C >= VEC && C < (1LL << 31) - 16 && ce_bwd_flat(C / VEC, es) &&
          (M == 1 || (x.row_stride == C && dx.row_stride == C)) && ceil_div(M * C / VEC, kBwdFlatVecs) < (1LL << 31)) {
        const auto go = [&](auto kernel) {
          kernel<<<(unsigned)ceil_div(M * C / VEC, kBwdFlatVecs), kBwdThreads, 0, st>>>(
              dxp, xp, target, t_stride, sp, gp, g_stride, M, (int)C, ignore_index, (A)smoothing, last);
          return launch_status();
        };
        return packed == 2 ? go(packed_bwd_kernel<T, true>) : go(packed_bwd_kernel<T, false>);
      }
      if (mis && C / VEC >= kBwdThreads && M * chunks < (1LL << 31)) return row_chunks(rr_bwd_kernel<T, true>);
    }
    Plan p = make_plan(M, C, es, 1, 0, 0, false);
    auto kernel = ce_bwd_kernel<T>;
    const int rc = finish_plan(p, kernel, M);
    if (rc) return rc;
    const int mask = vec_ok(x.ptr, x.row_stride, x.col_stride, M, C, es) |
                     vec_ok(dx.ptr, dx.row_stride, dx.col_stride, M, C, es) << 3;
    return launch(p, kernel, st, dx, x, target, t_stride, sp, gp, g_stride, M, C, ignore_index, (A)smoothing, mask, p);
  });
}

// The target check alone, for a caller that reads it later (the C++ autograd: when backward runs): queued into
// check_host [slots] (pinned) with an event behind it, returned opaque in *event (null: nothing to wait for), and
// the slots it writes in *used. myops_cross_entropy_check_wait_cuda must follow once *event is not null (even after
// a failure), before check_host is freed.
extern "C" int myops_cross_entropy_check_cuda(int64_t* check_host, int64_t slots, int64_t* used, void** event,
                                              const int64_t* target, int64_t t_stride, int64_t M, int64_t C,
                                              int64_t ignore_index, void* stream) {
  *event = nullptr;
  *used = 0;
  if (M <= 0) return MYOPS_OK;
  cudaEvent_t done;
  const int rc = check_launch(check_host, slots, used, &done, target, t_stride, M, C, ignore_index,
                              static_cast<cudaStream_t>(stream));
  *event = done;
  return rc;
}
// Waits for that check (the host alone), releases its event, and sets *bad_row = 1 + the least row whose target is
// outside [0, C) and not ignore_index, else 0.
extern "C" int myops_cross_entropy_check_wait_cuda(void* event, const int64_t* check_host, int64_t used,
                                                   int64_t* bad_row) {
  return check_wait(static_cast<cudaEvent_t>(event), check_host, used, bad_row);
}

// The elements of the loss's reduction workspace for M rows (ce_parts): after rows' M in the forward, after g's first
// in the backward's factor.
extern "C" int64_t myops_cross_entropy_parts_cuda(int64_t M) { return 2 * ce_parts(M); }

// g[0] (acc type) = grad (the loss's gradient, a scalar in the logits' dtype) for reduction "sum" (mean = 0),
// divided by the count of rows not ignored for "mean" (mean = 1); g holds 1 + myops_cross_entropy_parts_cuda(M)
// elements (the rest: the count's workspace).
extern "C" int myops_cross_entropy_grad_scale_cuda(void* g, const void* grad, const int64_t* target, int64_t t_stride,
                                                   int64_t M, int64_t ignore_index, int mean, int dtype, void* stream) {
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    return launch_loss_scalar(static_cast<cudaStream_t>(stream), static_cast<A*>(g), static_cast<const A*>(nullptr),
                              static_cast<const T*>(grad), static_cast<A*>(g) + 1, target, t_stride, M, ignore_index,
                              mean);
  });
}
