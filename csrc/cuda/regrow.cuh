// regrow.cuh: the fast path of the row-wise ops: each row is held in registers.
//
// Applies when every [M, N] operand has unit column stride, a 16-byte aligned base and a row stride that keeps
// every row 16-byte aligned, N is a multiple of the 16-byte vector (partial vectors made the compiler keep each
// 16-bit element in its own register) and a row is at most NS * tpr vectors (NS <= 8 per thread, tpr <= 1024).
// A group of tpr threads owns a row; thread t holds vectors t, t + tpr, ..., t + (NS - 1) tpr:
//
//   row (N elements, VEC = 16 / sizeof(T) per vector):  | v0 v1 ... v(tpr-1) | v(tpr) ... | ... |
//   thread t:                                              ^ slot 0             ^ slot 1     ...
//
// so a warp's loads of one slot are 512 contiguous bytes, all NS loads of a thread are issued before any is used
// (NS * 16 bytes in flight per thread), and every later pass over the row (statistics, output) reads registers:
// HBM sees each input once and each output once. Row statistics are combined by xor shuffles inside a warp and,
// for tpr > 32, through one shared slot per warp with a single barrier (two alternating slot sets, see RowReduce).
// The grid covers the rows (a CTA never waits on a previous row); backward kernels with per-column sums instead
// loop over rows with a grid of what fits on the chip, summing in registers (a thread's columns are the same on
// every row) and loading the next row and its statistics before reducing the current one.
// Rows longer than a CTA's registers hold (a CTA stops at max_threads and 8 vectors per thread) are split over a
// thread block cluster of up to 8 CTAs (16, non-portable, for CTAs of up to 512 threads; forward kernels aim for
// CTAs of cluster_cta() threads): the row's tpr threads are the cluster's, thread t of CTA rank k being row thread
// k * blockDim + t, so the layout above is unchanged and every row is still read once and written once (fp32 rows of
// 262144 elements in 16 x 512 threads x 8 vectors). A cluster reduction sends each warp's total to every CTA of the
// cluster (st.async into distributed shared memory) and waits on the CTA's mbarrier for all of them.
// Rows that fail these conditions (strided columns, misaligned rows, rows longer than 16 CTAs hold) take the
// rows.cuh engine; the host entry of each op tries this path first.
#pragma once
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <type_traits>

#include "rows.cuh"

namespace myops {
namespace rr {

namespace cg = cooperative_groups;
using rows::kMaxCluster;
using rows::Pair;
using myops::L2Hint;  // (common.cuh: the L2 policy of streamed loads)
using myops::l2_hint;
using myops::l2_last;

constexpr int kCtaThreads = 128;  // a CTA holds several rows when one needs fewer threads than this

using myops::env_knob;  // (common.cuh; each knob below reads its variable once per process)

// Threads per row the geometry aims for: 128 measured best for the forward kernels at N = 4096 (64 and 256 were
// up to 10 points slower, H200), except the fp32 layer_norm forward and, since the loads' L2 policy (L2Hint),
// rms_norm's and add_rms_norm's forwards, which take 256 (the kernel's choice, kernel_choice); MYOPS_ROW_THREADS /
// MYOPS_ROW_THREADS_BWD override it for tuning.
inline bool tpr_ok(int t) { return t >= 32 && t <= 1024; }
inline int target_tpr(int kernel_choice = 128) {
  static const int v = env_knob("MYOPS_ROW_THREADS", 0, tpr_ok);
  return v ? v : kernel_choice;
}
inline int target_tpr_bwd() {
  static const int v = env_knob("MYOPS_ROW_THREADS_BWD", 128, tpr_ok);
  return v;
}
// The norms' backward takes its long-row kernel (per-column sums in shared memory, 4 16-bit vectors per thread and
// the next row prefetched) for rows the register kernel cannot hold, and for every 16-bit row that it applies to (a
// row over one 512-thread CTA's 16384 elements): there the register kernel's one vector per thread left its per-row
// work (a cluster reduction per row of 8 elements per thread) the limit (H200, bf16 forward+backward, % of copy:
// rms_norm N = 24576 75.2 -> 86.3, N = 32768 75.6 -> 86.1, N = 65536 65.8 -> 74.9; layer_norm 64.6 -> 74.9, 63.1 ->
// 73.2, 57.6 -> 60.5). fp32, whose register kernel holds two vectors per thread at N = 65536, keeps it (the long
// kernel: layer_norm +1.1 / +3.2 at N = 24576 / 32768 but -8 at 65536; rms_norm -4.0 / -1.8, and -9.6 at 65536
// before its long kernel held the weight in shared memory).
// MYOPS_ROW_LONG_BWD=n instead takes the long kernel for rows of n elements or more, every type (tuning). Where the
// pipelined kernels (rowpipe.cuh) hold such a row and rp::takes gives it to them, they take it instead.
inline bool long_bwd(bool regs_hold, int64_t N, int elem) {
  static const int from = env_knob("MYOPS_ROW_LONG_BWD", 0, [](int v) { return v > 0; });
  return !regs_hold || (from > 0 ? N >= from : elem == 2);
}
// The norms' forward takes its long-row kernel (a persistent grid of clusters, the next row loaded into registers
// before the current one is reduced, the weight and bias in shared memory) for every row that has its geometry
// (long_fwd_geo): H200, forward, % of copy, register kernel -> long kernel: layer_norm bf16 N = 65536 70.6 -> 79.3,
// N = 262144 63.0 -> 77.9, fp32 81.1 -> 86.6, 64.5 -> 79.1; rms_norm bf16 76.2 -> 85.2, 72.5 -> 84.0, fp32 76.9 ->
// 90.3, 79.7 -> 87.8; add_rms_norm (the next row's x and residual loaded ahead) bf16 74.4 -> 87.0, 62.6 -> 86.0,
// fp32 80.4 -> 90.3, 41.2 -> 86.9. (softmax's forward, whose register kernel runs several 256-thread CTAs per SM, lost
// 6-11 points on the same kernel shape: it keeps its register kernel.) MYOPS_ROW_LONG_FWD=n takes it from n elements
// (tuning; a large n never), MYOPS_ROW_LONG_FWD_NS (4 or 8) sets its vectors per thread.
inline bool long_fwd(int64_t N) {
  static const int from = env_knob("MYOPS_ROW_LONG_FWD", 1, [](int v) { return v > 0; });
  return N >= from;
}
inline int long_fwd_ns() {
  static const int v = env_knob("MYOPS_ROW_LONG_FWD_NS", 0, [](int n) { return n == 4 || n == 8; });
  return v;
}

// Minimum CTAs per SM the norms' 16-bit forward kernels of 8 vectors per thread are compiled for: 2 caps them at 64
// registers (they took 89-108, so a 512-thread CTA of a long row filled an SM alone and staged its next row). Two
// CTAs per SM, unstaged, measured faster on long rows (H200, bf16 forward, % of copy: layer_norm N=65536 60.3 ->
// 67.4, N=262144 55.0 -> 60.4; rms_norm N=262144 69.5 -> 73.3) at a few bytes of spills (layer_norm: 16-32, rms_norm
// 0-24); -DMYOPS_NORM16_MINB=1 restores the compiler's choice (A/B).
#ifndef MYOPS_NORM16_MINB
#define MYOPS_NORM16_MINB 2
#endif
// (8 vectors per thread only; elsewhere 0, no minimum, as without the argument: an explicit 1 already changed the
// compiler's choice, e.g. 32 -> 50 registers.) rms_norm's fp32 forward of 8 vectors per thread likewise (layer_norm's
// fp32 kernel is bound to two 512-thread CTAs anyway): unbounded it took 99 registers, four 128-thread CTAs per SM
// at N = 4096 (24% of warps active in Nsight Compute, where torch.compile's kernel had 90%), one 512-thread CTA at
// N = 16384; at 64 registers (no spills; the bounds-checked variant, for rows that leave slots empty, 96 bytes),
// H200 forward, % of copy: [4096, 16384] 86.0 -> 93.8 (torch.compile 97.0), forward+backward 90.5 -> 94.0;
// [16384, 4096] 94.1 -> 93.6. -DMYOPS_NORM32_MINB=0 restores the compiler's choice.
#ifndef MYOPS_NORM32_MINB
#define MYOPS_NORM32_MINB 2
#endif
template <class T, int NS> constexpr int norm_fwd_min_ctas() {
  return sizeof(T) == 2 && NS == 8 ? MYOPS_NORM16_MINB : sizeof(T) == 4 && NS == 8 ? MYOPS_NORM32_MINB : 0;
}

// Threads per CTA a single-row-buffer kernel allows: 1024 caps registers at 64, which holds 8 fp32 vectors but
// spilled 8 vectors of a 16-bit type (their conversions need more), so those stop at 512.
template <class T> constexpr int max_threads() { return sizeof(T) == 4 ? 1024 : 512; }
// Threads per CTA of the norms' backward kernels: 16-bit types at one vector per thread (NS = 1) fit 64 registers
// and 1024 threads (at NS = 2 with the weight-gradient sums in registers they took 94: two 256-thread CTAs per SM,
// 25% occupancy, 51% of DRAM bandwidth in Nsight Compute); fp32 keeps NS up to 4 and 512 threads. layer_norm's and
// rms_norm's 16-bit rows that one 512-thread CTA holds take NS = 2 with those sums in shared memory (rr::ColSums;
// their rr_bwd_geo), split over up to 4 CTAs of at most 256 threads (bwd16_geo).
template <class T> constexpr int bwd_max_threads() { return sizeof(T) == 2 ? 1024 : 512; }

// Backward rows shorter than this take the rows.cuh engine, which recomputes the row statistics in fp64: the register
// kernels use the forward's fp32 mean and rstd, whose rounding short rows amplify (their dx is a difference of nearly
// equal terms; in the limit N = 1 (rms_norm) or 2 (layer_norm) what remains is eps * rstd^2). Up to N = 4 it broke
// the 2x-eager error rule on some rows; from 8 on, none of 20000 did.
constexpr int64_t kExactBwdBelow = 32;

// Register geometry of a row: NS vectors per thread, tpr threads per row, rows per CTA.
struct Geo {
  int ns = 0;       // 0: the fast path does not apply
  int tpr = 0;      // threads per row: a power of 2 up to 32, else a multiple of 32 (cluster * threads if split)
  int rows = 0;     // rows per CTA (1 when the row is split over a cluster)
  int threads = 0;  // per CTA: tpr * rows, or tpr / cluster
  int cluster = 1;  // CTAs per row (a thread block cluster when > 1)
  int smem = 0;     // dynamic shared memory per CTA (bytes): > 0 for a staged kernel (Stage), on a persistent grid
  int nbuf = 0;     // Stage buffers (0: not staged)
  // Every thread's ns slots lie inside the row (N = ns * tpr * VEC): the norms' forward kernels then run a variant
  // without per-slot bounds checks (straight-line passes; H200 [16384, 4096]: layer_norm bf16 76.0 -> 78.9% of copy,
  // fp32 91.4 -> 92.2, rms_norm bf16 88.7 -> 89.6), chosen on the host so that each variant keeps its own register
  // count. Not softmax: its straight-line bf16 variant took 64 -> 128 registers at NS = 8 (73 -> 55% at N = 65536)
  // and 40 -> 64 at NS = 4 (89 -> 85%).
  bool full = false;
  // The kernel a forward launch uses: the bounds-check-free variant if the row is full and not staged.
  template <class K> K pick(K checked, K unchecked) const { return full && nbuf == 0 ? unchecked : checked; }
};

// MYOPS_ROW_STAGE: 0 never stage, 1 (default) stage rows split over a cluster when the kernel holds one CTA per SM
// without staging, 2 stage every row (tuning only).
inline int stage_mode() {
  static const int v = env_knob("MYOPS_ROW_STAGE", 1, [](int m) { return m >= 0 && m <= 2; });
  return v;
}
// MYOPS_ROW_STAGE_BUFS: 1 (default) or 2 staging buffers where they fit (tuning only). Two measured no faster than
// one on the H200 and cost occupancy where shared memory bounds it (layer_norm fp32 N = 65536: 71 -> 54% of copy).
inline int stage_bufs() {
  static const int v = env_knob("MYOPS_ROW_STAGE_BUFS", 1, [](int n) { return n == 2; });
  return v;
}
// g with a Stage of bytes_per_thread per thread for `kernel` if the stage mode asks for one, in up to 200 KB (the
// static reduction buffer and the 227 KB limit leave room). By default only kernels that hold one CTA per SM without
// it are staged: where two CTAs share an SM one's loads already overlap the other's reductions, and staging measured
// slower there (softmax bf16 N = 65536, H200: 72.8% of copy unstaged, 68.7% staged), faster where one CTA is all
// (rms_norm fp32 N = 65536: 62.5 -> 67.6%, N = 262144: 53.0 -> 59.1%).
template <class K> Geo staged(Geo g, int bytes_per_thread, K kernel) {
  const int mode = stage_mode();
  const int64_t bytes = (int64_t)bytes_per_thread * g.threads;
  if (!g.ns || !(mode == 2 || (mode == 1 && g.cluster > 1))) return g;
  if (mode == 1) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, g.threads, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return g;
    }
    if (per_sm != 1) return g;
  }
  for (int n = stage_bufs(); n >= 1; --n) {
    if (n * bytes <= (200 << 10)) {
      g.nbuf = n;
      g.smem = (int)(n * bytes);
      return g;
    }
  }
  return g;
}

// MYOPS_ROW_CLUSTER=c (2, 4 or 8) splits every row that spans at least c warps over c CTAs (tuning only).
inline int forced_cluster() {
  static const int v = env_knob("MYOPS_ROW_CLUSTER", 0, [](int c) { return c == 2 || c == 4 || c == 8; });
  return v;
}

// Threads per CTA a forward kernel's row split over a cluster aims for (geometry's cta_target; MYOPS_ROW_CLUSTER_CTA
// overrides the kernel's choice, read once): a row is split over more, smaller CTAs rather than the fewest that hold
// it, so that several CTAs share an SM and one's loads overlap another's reductions. H100, forward, 256 against the
// fewest CTAs: softmax fp32 N = 65536 87.5 -> 96.6% of copy (8 x 256 threads instead of 2 x 1024), bf16 N = 262144
// 88.9 -> 92.6, rms_norm and layer_norm fp32 N = 65536 86.6 -> 90.4 and 89.5 -> 90.4. The norms' 16-bit forwards
// keep 512: at about 96 registers their 512-thread CTAs filled an SM alone and staged the next row, which measured
// faster than two unstaged 256-thread CTAs (rms_norm bf16 N = 65536: 86.0 against 78.8); capped at 64 registers
// (MYOPS_NORM16_MINB) two such CTAs share an SM, and 512 stayed ahead of 256 on the H200 (rms_norm bf16
// N = 262144: 73.3 against 66.7).
inline int cluster_cta(int kernel_choice) {
  static const int v = env_knob("MYOPS_ROW_CLUSTER_CTA", 0, [](int t) { return t >= 64 && t <= 1024; });
  return v ? v : kernel_choice;
}

// MYOPS_ROW_CLUSTER_NS (1, 2, 4, 8): vectors per thread of a forward row split over a cluster, where the kernel holds
// more (tuning only, read once; 0: the kernel's maximum).
inline int cluster_ns() {
  static const int v = env_knob("MYOPS_ROW_CLUSTER_NS", 0, [](int n) { return n == 1 || n == 2 || n == 4 || n == 8; });
  return v;
}

// Shared bytes of a kernel's RowReduce buffer: 2 sets of 256 slots (8 CTAs x 32 warps, 16 x 16) of up to 8 bytes,
// then the two sets' mbarriers (cluster reductions).
constexpr int kRedSetBytes = kMaxCluster * 32 * 8;
constexpr int kRedBytes = 2 * kRedSetBytes + 16;

// The fewest threads per row that geometry's min_ns may leave: 4 (several rows per warp). H200, forward, % of copy,
// 32 -> 4: [262144, 256] layer_norm bf16 53.0 -> 89.3, fp32 89.0 -> 95.9, rms_norm bf16 83.2 -> 91.5, softmax bf16
// 78.3 -> 93.5; [131072, 512] layer_norm bf16 74.5 -> 89.8 (torch.compile 93.0, 97.2, 93.9, 91.6; 92.7); 8 measured
// the same. MYOPS_ROW_MIN_TPR (1-32, a power of 2) overrides (A/B, read once).
// MYOPS_ROW_CTA (32-512, a power of 2): overrides the threads of a CTA that holds several rows of up to 64 threads
// (geometry's row_cta; tuning, read once).
inline int row_cta(int kernel_choice = kCtaThreads) {
  static const int v = env_knob("MYOPS_ROW_CTA", 0, [](int n) { return n >= 32 && n <= 512 && !(n & (n - 1)); });
  return v ? v : kernel_choice;
}
inline int min_tpr() {
  static const int v = env_knob("MYOPS_ROW_MIN_TPR", 4, [](int n) { return n >= 1 && n <= 32 && !(n & (n - 1)); });
  return v;
}
// MYOPS_ROW_MIN_NS (1, 2, 4, 8): overrides the forward kernels' minimum vectors per thread (geometry's min_ns; 1: no
// minimum; A/B, read once).
inline int min_ns_knob(int kernel_choice) {
  static const int v = env_knob("MYOPS_ROW_MIN_NS", 0, [](int n) { return n == 1 || n == 2 || n == 4 || n == 8; });
  return v ? v : kernel_choice;
}
// Picks the fewest vectors per thread (up to max_ns) that keep a row within target_tpr threads, else the fewest
// that fit it in max_tpr threads, then at least min_ns while the row keeps min_tpr() threads: rows of 256-2048 elements
// otherwise took one or two vectors per thread in up to 256 threads, where the per-row work (the reductions, the
// statistics) outweighed the row's (H200, forward, % of copy, [65536, 1024] bf16 -> 4 vectors in one warp:
// layer_norm 46.4 -> 89.6, softmax 65.5 -> 94.0; see the callers). More vectors per thread put more bytes in flight
// per thread; fewer threads per row shorten the cross-warp reduction. target_tpr comes from measurement
// (BENCHMARKS.md). A row that max_tpr threads of max_ns vectors cannot hold is split over a cluster (up to
// max_cluster CTAs, or sm_90's non-portable 16) at max_ns: with cta_target, the fewest CTAs of at most cta_target
// threads, else the most CTAs (the smallest) that hold it; without, the fewest CTAs that hold it. Rows of up to 64
// threads share CTAs of row_cta threads (MYOPS_ROW_CTA overrides).
inline Geo geometry(int64_t N, int elem, int max_ns, int max_tpr, int target_tpr, int max_cluster = 1,
                    int cta_target = 0, int min_ns = 1, int row_cta = kCtaThreads) {
  row_cta = rr::row_cta(row_cta);
  Geo g;
  if (N <= 0 || N % (16 / elem) != 0) return g;  // whole 16-byte vectors only
  const int64_t nvec = N / (16 / elem);
  const int forced = forced_cluster() <= max_cluster ? forced_cluster() : 0;
  if (max_cluster > 1 && (ceil_div(nvec, max_ns) > max_tpr || (forced && ceil_div(nvec, max_ns) >= 32 * forced))) {
    // c CTAs of at most lim threads of ns vectors hold the row (16: non-portable, for CTAs of up to 512 threads, the
    // reduction's 256 slots)
    const auto fits = [&](int ns, int c, int lim) {
      const int64_t t = ceil_div(nvec, (int64_t)ns * c);
      if (c <= max_cluster) return t <= lim;
      return c == 16 && max_cluster == kMaxCluster && t <= std::min(lim, 512);
    };
    // MYOPS_ROW_CLUSTER_NS, unless fewer vectors would need more CTAs than a cluster has
    const int want_ns = cta_target && cluster_ns() ? std::min(max_ns, cluster_ns()) : max_ns;
    const int ns = fits(want_ns, 16, max_tpr) ? want_ns : max_ns;
    const bool aim = cta_target && !forced;
    const auto fewest = [&](int lim) {
      for (int k = forced ? forced : 2; k <= 16; k *= 2)
        if (fits(ns, k, lim)) return k;
      return 0;
    };
    int c = aim ? fewest(std::min(max_tpr, cta_target)) : 0;
    for (int k = 16; k >= 2 && aim && !c; k /= 2)  // no CTAs that small: the smallest that hold the row
      if (fits(ns, k, max_tpr)) c = k;
    if (!c) c = fewest(max_tpr);
    if (!c) return g;
    g.ns = ns;
    g.cluster = c;
    g.threads = (int)ceil_div(ceil_div(nvec, (int64_t)ns * c), 32) * 32;
    g.tpr = g.threads * c;
    g.rows = 1;
    g.full = nvec == (int64_t)g.ns * g.tpr;
    if (c * (g.threads / 32) > kRedSetBytes / 8) return Geo{};  // a warp total per 8-byte slot
    return g;
  }
  int ns = 1;
  while (ns < max_ns && ceil_div(nvec, ns) > target_tpr) ns *= 2;
  while (ns < max_ns && ceil_div(nvec, ns) > max_tpr) ns *= 2;
  while (ns < min_ns && ns < max_ns && ceil_div(nvec, (int64_t)ns * 2) >= min_tpr()) ns *= 2;
  const int64_t need = ceil_div(nvec, ns);
  if (need > max_tpr) return g;
  int tpr = 1;
  if (need <= 32) {
    while (tpr < need) tpr *= 2;
  } else {
    tpr = (int)ceil_div(need, 32) * 32;
  }
  g.ns = ns;
  g.tpr = tpr;
  g.full = nvec == (int64_t)ns * tpr;
  g.rows = tpr >= row_cta || tpr > 64 ? 1 : row_cta / tpr;
  g.threads = g.tpr * g.rows;
  return g;
}

// The norms' 16-bit register backward at 2 vectors a thread (layer_norm, rms_norm): one CTA a row, of up to 512
// threads, a row that would take over 256 split over a cluster of CTAs of at most 256: at about 100 registers a
// thread, a CTA of 320-512 threads is alone on its SM (bf16 [13107, 5120]'s backward near 73% of copy, where
// N = 4096's two CTAs of 256 an SM ran it near 87; H200), and 2 x 160 take three an SM. Rows of 8200-16384 elements,
// which one CTA does not hold, take 2 vectors on up to 4 CTAs (N = 12288: 4 x 192) where the 1-vector kernel took a
// cluster of 2 (2 x 768). H200 bf16 forward+backward, % of copy (session 55, torch 2.11), one CTA -> split:
// layer_norm [13107, 5120] 80.9 -> 83.2, [5461, 12288] 71.0 -> 78.2; rms_norm 84.1 -> 91.0, 83.0 -> 85.3.
// MYOPS_ROW_BWD_SPLIT=0: one CTA of up to 512 (A/B; read once).
inline bool bwd16_split() {
  static const int v = env_knob("MYOPS_ROW_BWD_SPLIT", 1, [](int m) { return m == 0 || m == 1; });
  return v == 1;
}
inline Geo bwd16_geo(int64_t N) {
  if (bwd16_split()) {
    const Geo g = geometry(N, 2, 2, 256, target_tpr_bwd(), 4, 0, 2);
    if (g.ns == 2) return g;
  }
  return geometry(N, 2, 2, 512, target_tpr_bwd(), 1, 0, 2);  // (none past one CTA)
}

// The geometry of a long-row forward kernel for N (rr::long_fwd): CTAs of up to cta threads, 4 vectors per thread
// where a cluster of up to 8 of them holds the row, else 8 (long_fwd_ns() overrides: tuning); `params` per-column
// vectors in shared memory, one 16-byte vector per slot of each of cta threads (rr::ColParam). None (ns = 0) for a
// row that one CTA of 8 vectors per thread holds (the register kernels' rows) or 16 do not. At 4 vectors the kernels
// fit 64 registers, two CTAs per SM; at 8, one. H200, forward, % of copy, 8 -> 4 vectors at N = 65536: layer_norm
// bf16 76.5 -> 79.0, fp32 85.6 -> 86.9, rms_norm 82.2 -> 85.4, 88.8 -> 90.6; at bf16 N = 262144, where 4 vectors
// take a cluster of 16 (seven on the chip), layer_norm 77.8 -> 62.7, rms_norm 84.1 -> 83.1. CTAs of 1024 threads of
// 4 vectors (one per SM, clusters of 8) measured -5.0 to +1.9 against these. Two inputs (add_rms_norm: x and the
// residual, both loaded ahead) take 8 vectors: at 4 they spilled 40-64 bytes within 64 registers (N = 65536, bf16
// 80.8 -> 87.0, fp32 88.5 -> 90.3 at 8).
inline Geo long_fwd_geo(int64_t N, int elem, int cta, int params, int inputs = 1) {
  if (!long_fwd(N) || N <= (int64_t)8 * cta * (16 / elem)) return {};
  const int forced = long_fwd_ns();
  for (const int ns : {forced ? forced : inputs > 1 ? 8 : 4, 8}) {
    Geo g = geometry(N, elem, ns, cta, target_tpr(), kMaxCluster);
    if (g.ns == ns && g.cluster > 1 && (forced || ns == 8 || g.cluster <= kMaxCluster)) {
      g.smem = params * ns * 16 * cta;
      return g;
    }
  }
  return {};
}

// Every operand of the op passes this (plus the per-column parameter vectors through param_ok).
inline bool operand_ok(const void* p, int64_t row_stride, int64_t col_stride, int64_t M, int64_t N, int elem) {
  return rows::vec_ok(p, row_stride, col_stride, M, N, elem);
}
inline bool param_ok(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// Whether an op may take the fast path: every input (a null one is absent), output and per-column parameter
// vector qualifies.
inline bool operands_ok(std::initializer_list<myops_operand> ins, std::initializer_list<myops_out_operand> outs,
                        std::initializer_list<const void*> params, int64_t M, int64_t N, int es) {
  for (const myops_operand& o : ins)
    if (o.ptr != nullptr && !operand_ok(o.ptr, o.row_stride, o.col_stride, M, N, es)) return false;
  for (const myops_out_operand& o : outs)
    if (!operand_ok(o.ptr, o.row_stride, o.col_stride, M, N, es)) return false;
  for (const void* p : params)
    if (!param_ok(p)) return false;
  return true;
}
// An output as the C++ layer allocates it (contiguous [M, N]): what a workspace-size query assumes of dx.
inline myops_out_operand contiguous_out(int64_t N) { return {reinterpret_cast<void*>(uintptr_t(256)), N, 1}; }

// Calls f(std::integral_constant<int, NS>{}) for ns in {1, 2, 4, 8} up to MaxNs (the only ones instantiated;
// MaxNs = 0: none).
template <int MaxNs, class R = int, class F> R with_ns(int ns, F&& f) {
  switch (ns) {
    case 1: if constexpr (MaxNs >= 1) return f(std::integral_constant<int, 1>{}); break;
    case 2: if constexpr (MaxNs >= 2) return f(std::integral_constant<int, 2>{}); break;
    case 4: if constexpr (MaxNs >= 4) return f(std::integral_constant<int, 4>{}); break;
    case 8: if constexpr (MaxNs >= 8) return f(std::integral_constant<int, 8>{}); break;
    default: break;
  }
  return R(MYOPS_EARG);
}

__device__ __forceinline__ unsigned cluster_id() {
  unsigned v;
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(v));
  return v;
}
__device__ __forceinline__ unsigned cluster_count() {
  unsigned v;
  asm("mov.u32 %0, %%nclusterid.x;" : "=r"(v));
  return v;
}
__device__ __forceinline__ unsigned cluster_size() {
  unsigned v;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(v));
  return v;
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned v;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(v));
  return v;
}

// A thread's place: its row slot in the CTA and its index in the row's thread group. tpr > blockDim.x: the row
// is split over a cluster of tpr / blockDim.x CTAs (one row slot per cluster; without a cluster launch each CTA
// is a cluster of one, so the kernels' clustered and plain paths are the same code).
struct Lane {
  int tpr, rows, slot, t;
  unsigned group, groups;  // this row group (CTA or cluster) and their count
  __device__ explicit Lane(int tpr_) : tpr(tpr_) {
    if (tpr > (int)blockDim.x) {
      rows = 1;
      slot = 0;
      t = (int)(cluster_rank() * blockDim.x + threadIdx.x);
      group = cluster_id();
      groups = cluster_count();
    } else {
      // no integer division (about 30 instructions each, per CTA, which at [16384, 4096] runs one row): a CTA holds
      // one row (tpr = blockDim.x, any multiple of 32), or several rows of a power-of-2 tpr (geometry: rows > 1 only
      // where tpr <= 64)
      const bool one = tpr == (int)blockDim.x;
      const int sh = __ffs(tpr) - 1;
      rows = one ? 1 : (int)blockDim.x >> sh;
      slot = one ? 0 : (int)threadIdx.x >> sh;
      t = one ? (int)threadIdx.x : (int)threadIdx.x & (tpr - 1);
      group = blockIdx.x;
      groups = gridDim.x;
    }
  }
  // Row loop (every thread of the CTA runs the same iterations: the reductions hold barriers):
  //   for (int64_t r0 = l.first(); r0 < M; r0 += l.step()) { const int64_t r = r0 + l.slot; ... r < M ... }
  __device__ int64_t first() const { return (int64_t)group * rows; }
  __device__ int64_t step() const { return (int64_t)groups * rows; }
  // Per-column partial sums (weight gradients): one workspace row per row group; a CTA of several row slots sums
  // theirs first (ColSums::flush_rows).
  __device__ int64_t owner() const { return group; }
  __device__ int64_t owners() const { return groups; }
};

// The row a prefetch reads for row r: r itself, or the last row M - 1 for a row past M (the prefetch after a row
// group's last row, a spare row slot). The backward kernels load it unconditionally and keep rows past M out of
// their per-column sums: no branch and no register fill per operand and row.
__device__ __forceinline__ int64_t row_or_last(int64_t r, int64_t M) { return r < M ? r : M - 1; }

// An element of a 16-byte vector held as four 32-bit words: fp32 is a word, a 16-bit type a half word. Bit
// operations instead of element arrays keep a vector in 4 registers (arrays of 16-bit elements were given one
// register per element, doubling the footprint and spilling).
template <class T> __device__ __forceinline__ acc_t<T> word_elem(uint32_t w, int half);
template <> __device__ __forceinline__ float word_elem<float>(uint32_t w, int) { return __uint_as_float(w); }
template <> __device__ __forceinline__ float word_elem<__nv_bfloat16>(uint32_t w, int h) {
  return __uint_as_float(h ? w & 0xffff0000u : w << 16);
}
template <> __device__ __forceinline__ float word_elem<__half>(uint32_t w, int h) {
  return __half2float(__ushort_as_half((unsigned short)(h ? w >> 16 : w & 0xffffu)));
}
// The word holding two copies of f (or f itself for fp32).
template <class T> __device__ __forceinline__ uint32_t splat_word(T f) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(to_acc(f));
  } else {
    unsigned short b;
    memcpy(&b, &f, 2);
    return (uint32_t)b | (uint32_t)b << 16;
  }
}

// A thread's sum over its part of a row in NC independent accumulators, added pairwise at the end. With one
// accumulator a pass is a serial chain of NS * VEC dependent adds (32 x 4 cycles for a bf16 row at 4 vectors per
// thread) between a row's load and its reduction, in kernels that wait on latency (Nsight Compute, layer_norm bf16
// [65536, 1024]: 68% of DRAM bandwidth at 68% of SM issue). The accumulators start at -0, which an add leaves exact
// (x + -0 = x for every x), so the compiler folds the first add of each. layer_norm's 16-bit forward takes them
// (H200, % of copy, bf16 [65536, 1024]: 90.7 with one chain, 91.3 with four); rms_norm's measured within 0.2 and
// keeps one; so do softmax's and log_softmax's exp sums and maxima (four chains, H200 forward: within 0.2 at
// [16384, 4096], N = 1024 and 2048, bf16 and fp32; fp32 N = 65536 91.9 -> 91.3-91.6). MYOPS_RR_CHAINS=1: one chain
// (A/B).
#ifndef MYOPS_RR_CHAINS
#define MYOPS_RR_CHAINS 4
#endif
template <class A, int NC = MYOPS_RR_CHAINS> struct Chains {
  A c[NC];
  __device__ __forceinline__ Chains() {
#pragma unroll
    for (int i = 0; i < NC; ++i) c[i] = A(-0.0);
  }
  // term i (a compile-time index after unrolling) goes to chain i % NC
  __device__ __forceinline__ void add(int i, A x) { c[i % NC] += x; }
  __device__ __forceinline__ void fma(int i, A x, A y) {
    if constexpr (sizeof(A) == 4) c[i % NC] = fmaf(x, y, c[i % NC]);
    else c[i % NC] = ::fma(x, y, c[i % NC]);
  }
  __device__ __forceinline__ A total() const {
    A t[NC];
#pragma unroll
    for (int i = 0; i < NC; ++i) t[i] = c[i];
#pragma unroll
    for (int w = NC / 2; w > 0; w /= 2)
#pragma unroll
      for (int i = 0; i < w; ++i) t[i] += t[i + w];
    return t[0];
  }
};
static_assert((MYOPS_RR_CHAINS & (MYOPS_RR_CHAINS - 1)) == 0, "MYOPS_RR_CHAINS: a power of 2");
// Chains for a pass over NS vectors per thread: one at 8, where the 16-bit forwards sit at their 64-register bound
// and spilled more with four (layer_norm bf16, 8 vectors and a partial last slot: 28 -> 40 bytes).
template <int NS> constexpr int kChainsFor = NS <= 4 ? MYOPS_RR_CHAINS : 1;

// NS 16-byte vectors of one row, raw (converted on use so that they cost 4 registers each).
template <class T, int NS> struct Regs {
  static constexpr int VEC = 16 / sizeof(T);
  using A = acc_t<T>;
  uint32_t u[NS][4];

  // Columns of slot s (int: a row is at most 8192 vectors).
  __device__ __forceinline__ static int col(int s, int t, int tpr) { return (t + s * tpr) * VEC; }

  // Loads this thread's slots of `row` (N a multiple of VEC); slots past N read `fill` (FULL: there are none, see
  // Geo::full). (Plain loads: the weight and bias vectors hit in L1 anyway, and ld.global.nc.L1::no_allocate measured
  // up to 7 points of copy slower, H200.)
  // (H: NoHint, or the kernel's L2Hint for its streamed inputs.)
  template <bool FULL = false, class H = NoHint>
  __device__ __forceinline__ void load(const T* __restrict__ row, int N, int t, int tpr, T fill, H h = {}) {
    const uint32_t f = splat_word(fill);
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int c = col(s, t, tpr);
      if (FULL || c < N) {
        const uint4 q = ld16(row + c, h);
        u[s][0] = q.x, u[s][1] = q.y, u[s][2] = q.z, u[s][3] = q.w;
      } else {
        u[s][0] = u[s][1] = u[s][2] = u[s][3] = f;
      }
    }
  }
  // Row `row` of an [M, N] operand with row stride rs; a row past M (a CTA's spare row slot) reads `fill`.
  template <bool FULL = false, class H = NoHint>
  __device__ __forceinline__ void load_row(const T* __restrict__ base, int64_t rs, int64_t row, int64_t M, int N,
                                           int t, int tpr, T fill_value, H h = {}) {
    if (row < M) load<FULL>(base + row * rs, N, t, tpr, fill_value, h);
    else fill(fill_value);
  }
  __device__ __forceinline__ void fill(T fill_value) {
    const uint32_t f = splat_word(fill_value);
#pragma unroll
    for (int s = 0; s < NS; ++s) u[s][0] = u[s][1] = u[s][2] = u[s][3] = f;
  }
  __device__ __forceinline__ A at(int s, int e) const {
    if constexpr (VEC == 4) return word_elem<T>(u[s][e], 0);
    else return word_elem<T>(u[s][e >> 1], e & 1);
  }
  // Stores VEC values into slot s, rounded to T.
  __device__ __forceinline__ void set(int s, const A (&x)[VEC]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (VEC == 4) {
        u[s][i] = __float_as_uint(x[i]);
      } else {
        const T lo = from_acc<T>(x[2 * i]), hi = from_acc<T>(x[2 * i + 1]);
        unsigned short a, b;
        memcpy(&a, &lo, 2);
        memcpy(&b, &hi, 2);
        u[s][i] = (uint32_t)a | (uint32_t)b << 16;
      }
    }
  }
  // Slot s converted by other instructions than at() and fresh() use (16-bit types; fp32 needs no conversion): for a
  // pass that follows another over the same slots with no barrier between, where ptxas (to which fresh()'s moves are
  // plain moves) kept the first pass's converted values live for the second and spilled (layer_norm's long forward,
  // bf16: 144-192 bytes). bf16: byte permutes instead of shifts and masks; fp16: the conversion of the sign-flipped
  // word, negated back (one more instruction per word).
  __device__ __forceinline__ void decode_other(int s, A (&x)[VEC]) const {
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>)
        x[e] = __uint_as_float(__byte_perm(u[s][e >> 1], 0u, e & 1 ? 0x3244 : 0x1044));
      else if constexpr (std::is_same_v<T, __half>)
        x[e] = -word_elem<T>(u[s][e >> 1] ^ 0x80008000u, e & 1);
      else
        x[e] = at(s, e);
    }
  }
  // Slot s converted anew: the volatile moves keep the compiler from holding a first pass's converted values live
  // across the reduction into the next pass (that doubled the registers and spilled).
  __device__ __forceinline__ void fresh(int s, A (&x)[VEC]) const {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = u[s][i];
      asm volatile("mov.b32 %0, %0;" : "+r"(w[i]));
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) x[e] = VEC == 4 ? word_elem<T>(w[e], 0) : word_elem<T>(w[e >> 1], e & 1);
  }
};

// Asks L2 for this CTA's part of a row's first K slots (cp.async.bulk.prefetch.L2: no registers, nothing to wait
// for; the row's loads hit L2 when they come). A CTA's threads cover, in each slot, blockDim.x * VEC contiguous
// columns from (t0 + s tpr) VEC, t0 = its first thread's index in the row: threads 0 .. K - 1 issue one slot each.
// (row: 16-byte aligned, N a multiple of VEC, as the loads need.)
template <class T, int K>
__device__ __forceinline__ void prefetch_l2(const T* __restrict__ row, int N, int t0, int tpr) {
  constexpr int VEC = 16 / sizeof(T);
  const int s = (int)threadIdx.x;
  if (s < K) {
    const int c = (t0 + s * tpr) * VEC;
    if (c < N) {
      const unsigned bytes = (unsigned)(min((int)blockDim.x * VEC, N - c) * (int)sizeof(T));
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row + c), "r"(bytes) : "memory");
    }
  }
}

// dy and x of the rows a long-row backward kernel takes (r = first, first + step, ... < M, one per cluster). With PF
// the next row's are loaded into gn and vn before the current row's passes (a row past M reads row M - 1,
// row_or_last), so that HBM stays busy through them; without, each row is loaded when its turn comes, and L2 > 0
// asks L2 for the next row's first L2 slots (prefetch_l2) once the current row's reduction is done (mid), where a
// kernel's registers hold no second row.
template <class T, int NS, bool PF, int L2 = 0> struct BwdRows {
  Regs<T, NS> g, v;    // the current row's dy and x
  Regs<T, NS> gn, vn;  // (PF) the next row's
  const T* __restrict__ dy;
  const T* __restrict__ x;
  int64_t dys, xs;
  // Before the row loop: PF loads row `first` (or M - 1).
  __device__ __forceinline__ BwdRows(const T* dy_, int64_t dys_, const T* x_, int64_t xs_, int64_t first, int N, int t,
                                     int tpr, T zero)
      : dy(dy_), x(x_), dys(dys_), xs(xs_) {
    if constexpr (PF) load(g, v, first, N, t, tpr, zero);
  }
  __device__ __forceinline__ void load(Regs<T, NS>& a, Regs<T, NS>& b, int64_t r, int N, int t, int tpr, T zero) {
    a.load(dy + r * dys, N, t, tpr, zero);
    b.load(x + r * xs, N, t, tpr, zero);
  }
  // At the top of row r's iteration (next: the row after it, or M - 1): g and v hold row r once it returns.
  __device__ __forceinline__ void begin(int64_t r, int64_t next, int N, int t, int tpr, T zero) {
    if constexpr (PF) load(gn, vn, next, N, t, tpr, zero);
    else load(g, v, r, N, t, tpr, zero);
  }
  // After the current row's reduction (more: whether `next` is a row after it): L2 > 0 prefetches the next row's
  // first L2 slots into L2.
  __device__ __forceinline__ void mid(int64_t next, bool more, int N, int t, int tpr) {
    if (L2 > 0 && more) {
      const int t0 = t - (int)threadIdx.x;
      prefetch_l2<T, (L2 < NS ? L2 : NS)>(dy + next * dys, N, t0, tpr);
      prefetch_l2<T, (L2 < NS ? L2 : NS)>(x + next * xs, N, t0, tpr);
    }
  }
  __device__ __forceinline__ void end() {
    if constexpr (PF) {
      g = gn;
      v = vn;
    }
  }
};

// A thread's slots of its row group's next rows, copied into shared memory with cp.async (16 bytes each, no
// registers) while the current row is reduced and written: a persistent CTA (grid = what fits on the chip) keeps
// HBM busy through its reductions, which for rows split over a cluster include cluster barriers. With two buffers
// the copies of the next two rows are in flight (the SMs run their rows in step, so with one buffer the chip's loads
// paused while every CTA took its row and ran its first pass). Slot s of thread i in buffer b is
// buf[(b * NS + s) * blockDim + i] (a warp's 16-byte accesses are contiguous: no bank conflicts). Each thread reads
// back only what it copied, so no barrier guards the buffers; a copy into a buffer is issued only once the thread's
// registers hold the row it held and a value computed from all of them (`after`) exists, so the shared loads have
// completed. The copies take no L2 policy: with `.L2::cache_hint`, ptxas (CUDA 13.0) gave softmax's 16-bit kernel
// LDGSTS instructions whose descriptor sat in an odd uniform register, and every staged softmax launch
// (MYOPS_ROW_STAGE=2) died of an illegal instruction in start() (compute-sanitizer, H200). Staging is a tuning path:
// by default no kernel stages (the clustered rows of softmax share SMs; the norms' take their long-row kernels).
template <class T, int NS> struct Stage {
  uint4* buf;  // dynamic shared memory: nbuf * NS * blockDim 16-byte slots
  int nbuf;    // 0 (the kernel loads from global memory), 1 or 2
  int k = 0;   // rows taken so far: buffer k % nbuf holds the next
  __device__ Stage(unsigned char* smem, int nbuf_) : buf(reinterpret_cast<uint4*>(smem)), nbuf(nbuf_) {}
  static constexpr int bytes_per_thread() { return NS * 16; }
  __device__ __forceinline__ uint4* slot(int b, int s) const { return buf + (b * NS + s) * blockDim.x + threadIdx.x; }
  // Copies row `row` of [M, N] (row stride rs) into buffer b (nothing for a row past M) as one cp.async group.
  __device__ __forceinline__ void copy(int b, const T* __restrict__ base, int64_t rs, int64_t row, int64_t M, int N,
                                       int t, int tpr, float after) {
    if (row < M) {
      const T* src = base + row * rs;
#pragma unroll
      for (int s = 0; s < NS; ++s) {
        const int c = Regs<T, NS>::col(s, t, tpr);
        if (c < N) {
          const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(slot(b, s)));
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src + c), "f"(after) : "memory");
        }
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  // Before the row loop: starts the copies of the row group's first nbuf rows (first, first + step).
  __device__ __forceinline__ void start(const T* __restrict__ base, int64_t rs, int64_t first, int64_t step,
                                        int64_t M, int N, int t, int tpr) {
    for (int b = 0; b < nbuf; ++b) copy(b, base, rs, first + b * step, M, N, t, tpr, 0.f);
  }
  // Waits for row `row`'s copies and moves them into v (slots past N, or a row past M: `fill`).
  __device__ __forceinline__ void take(Regs<T, NS>& v, int64_t row, int64_t M, int N, int t, int tpr, T fill) {
    if (nbuf == 2) asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // the newer row may stay in flight
    else asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    if (row >= M) {
      v.fill(fill);
      return;
    }
    const uint32_t f = splat_word(fill);
    const int b = nbuf == 2 ? (k & 1) : 0;
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      if (Regs<T, NS>::col(s, t, tpr) < N) {
        const uint4 q = *slot(b, s);
        v.u[s][0] = q.x, v.u[s][1] = q.y, v.u[s][2] = q.z, v.u[s][3] = q.w;
      } else {
        v.u[s][0] = v.u[s][1] = v.u[s][2] = v.u[s][3] = f;
      }
    }
  }
  // After the first pass over row `row` (taken last; `after` computed from all of it): refills its buffer with the
  // row nbuf steps ahead. Nothing without staging.
  __device__ __forceinline__ void next(const T* __restrict__ base, int64_t rs, int64_t row, int64_t step, int64_t M,
                                       int N, int t, int tpr, float after) {
    if (nbuf == 0) return;
    const int b = nbuf == 2 ? (k & 1) : 0;
    copy(b, base, rs, row + nbuf * step, M, N, t, tpr, after);
    ++k;
  }
};

// K per-column sums over rows (weight and bias gradients) of a thread's NS slots, in shared memory for kernels whose
// registers cannot also hold them. A slot's K x VEC sums are K * VEC / 4 16-byte entries; each warp has its own
// [NS][K * VEC / 4][32] block of them (a warp's 16-byte accesses are contiguous: no bank conflicts; the offsets are
// immediates; a thread touches only its own entries: no barrier), holding the sums element-major (e * K + k): a
// kernel reads a slot's sums with 16-byte loads, adds a row, and writes them back (with one 4-byte access per sum,
// the two sums of layer_norm's backward took 4 shared-memory instructions per element). The launch gives
// bytes(blockDim) of dynamic shared memory (CTA: the kernel's thread bound, the default).
template <class T, int NS, int K, int CTA> struct ColSums {
  static constexpr int VEC = 16 / sizeof(T), Q = K * VEC / 4;
  using A = acc_t<T>;
  static_assert(sizeof(A) == 4, "ColSums holds fp32 sums");
  float4* buf;  // this thread's first entry
  __device__ explicit ColSums(unsigned char* smem)
      : buf(reinterpret_cast<float4*>(smem) + (threadIdx.x >> 5) * (NS * Q * 32) + (threadIdx.x & 31)) {}
  static constexpr int bytes(int cta = CTA) { return NS * Q * 16 * cta; }
  __device__ __forceinline__ float4& entry(int i) const { return buf[i * 32]; }
  __device__ __forceinline__ void zero() const {
#pragma unroll
    for (int i = 0; i < NS * Q; ++i) entry(i) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  __device__ __forceinline__ void load(int s, A (&a)[K][VEC]) const {
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const float4 v = entry(s * Q + q);
      const float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) a[(4 * q + i) % K][(4 * q + i) / K] = f[i];
    }
  }
  __device__ __forceinline__ void store(int s, const A (&a)[K][VEC]) const {
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      float f[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) f[i] = a[(4 * q + i) % K][(4 * q + i) / K];
      entry(s * Q + q) = make_float4(f[0], f[1], f[2], f[3]);
    }
  }
  // Writes sum k of this thread's columns to row `owner` of the workspace ws [K][owners][N] (16-byte stores).
  __device__ __forceinline__ void flush(A* __restrict__ ws, int64_t owners, int64_t owner, int N, int t,
                                        int tpr) const {
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int c = Regs<T, NS>::col(s, t, tpr);
      if (c >= N) break;
      A a[K][VEC];
      load(s, a);
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int e = 0; e < VEC; e += 4)
          *reinterpret_cast<float4*>(ws + (k * owners + owner) * N + c + e) =
              make_float4(a[k][e], a[k][e + 1], a[k][e + 2], a[k][e + 3]);
    }
  }
  // The kernel's last step: its sums into row l.owner() of ws [K][l.owners()][N] (flush_rows where the CTA holds
  // several rows). Every thread of the CTA calls it.
  __device__ __forceinline__ void flush(const unsigned char* smem, A* __restrict__ ws, const Lane& l, int N) const {
    if (l.rows == 1) return flush(ws, l.owners(), l.owner(), N, l.t, l.tpr);
    __syncthreads();
    flush_rows(smem, ws, l.owners(), l.owner(), N, l.tpr, l.rows);
  }
  // A CTA of several rows (rows > 1 row slots of tpr threads, tpr a power of 2) writes one workspace row, `group` of
  // ws [K][groups][N]: each column's sums over its row slots (in slot order, in fp64, rounded once), read from every
  // thread's entries in smem (this layout at bytes(blockDim)). Call after a barrier that follows the last store. With
  // a row per slot the workspace and colsum's reads of it were `rows` times larger: at [65536, 1024] bf16 (8 slots,
  // 17 MB) colsum took 22.5 us of layer_norm's 190 us forward and backward (H200; 12.2 after this, 4.0 with colsum's
  // 32 warps). Not inlined: inlined, it took rms_norm's fp32 backward at 4 vectors per thread (128 registers) from 0
  // to 20 bytes of spills, and its 2-vector one from 101 to 88 registers (5 CTAs per SM instead of 4; that
  // measured faster at N = 1024 alone: H200 fp32 forward+backward 93.6 -> 97.1, but 97.9 -> 95.8 at [16384, 4096],
  // 98.2 -> 96.3 at N = 1280, layer_norm bf16 87.9 -> 85.2 at [16384, 4096]; session 27).
  static __device__ __noinline__ void flush_rows(const unsigned char* smem, A* __restrict__ ws, int64_t groups,
                                                 int64_t group, int N, int tpr, int rows) {
    const float4* base = reinterpret_cast<const float4*>(smem);
    const int sh = __ffs(tpr) - 1;
    for (int f = threadIdx.x; f < (NS * Q) << sh; f += blockDim.x) {
      const int t = f & (tpr - 1), i = f >> sh, s = i / Q, q = i % Q;  // consecutive threads: consecutive columns
      const int c = Regs<T, NS>::col(s, t, tpr);
      if (c >= N) continue;
      double a[4] = {0.0, 0.0, 0.0, 0.0};
      for (int j = 0; j < rows; ++j) {
        const int u = (j << sh) + t;  // the thread of slot j that holds these columns
        const float4 v = base[(u >> 5) * (NS * Q * 32) + i * 32 + (u & 31)];
        a[0] += v.x;
        a[1] += v.y;
        a[2] += v.z;
        a[3] += v.w;
      }
      // entry q holds elements 4q .. 4q + 3 of the element-major (e * K + k) sums: columns c + 4q / K on
      A* out = ws + group * N + c + 4 * q / K;
      if constexpr (K == 1) {
        *reinterpret_cast<float4*>(out) = make_float4(float(a[0]), float(a[1]), float(a[2]), float(a[3]));
      } else {
        static_assert(K == 2, "ColSums::flush_rows: K = 1 or 2");
        *reinterpret_cast<float2*>(out) = make_float2(float(a[0]), float(a[2]));
        *reinterpret_cast<float2*>(out + groups * N) = make_float2(float(a[1]), float(a[3]));
      }
    }
  }
};

// Softmax statistics of a row held in Regs (both ops that need them, softmax and cross_entropy, fill with -inf).
// The maximum over this thread's elements.
// (fmaxf: one instruction, and like a > m ? a : m it passes over NaN, which the sum of exp then propagates.)
// PACKED (16-bit types): the maximum of the raw words, two elements per max.bf16x2 / max.f16x2 (three-input
// VHMNMX in SASS; exact, and NaN passes over as with fmaxf), decoding only the result's two halves. H200 bf16
// forward, % of copy, two paired runs: softmax N = 65536 87.4-87.6 -> 88.8-88.9, N = 262144 78.1-78.2 -> 81.1-81.2;
// log_softmax 88.6-88.8 -> 89.4-89.6, 79.0-79.1 -> 81.2-81.3. cross_entropy's 16-bit streaming forward takes it
// with its exps in the log2 domain (row_share); alone, in session 27, its loop lost 23 of 241 instructions but the
// kernel took 40 registers instead of 58, six CTAs per SM instead of four, and V = 262144's 1024 rows then ran as 1.3
// waves of 792 rows instead of 1.9 of 528: 89.0 -> 72.9 (while [4096, 32000] went 73.4 -> 76.3). With the log2 exps
// it takes 56-64 registers.
template <class T, int NS, bool PACKED = sizeof(T) == 2>
__device__ __forceinline__ acc_t<T> thread_max(const Regs<T, NS>& v) {
  if constexpr (PACKED && sizeof(T) == 2) {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    uint32_t m = splat_word(from_acc<T>(rows::neg_inf<float>()));
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        T2 a, b;
        memcpy(&a, &m, 4);
        memcpy(&b, &v.u[s][i], 4);
        const T2 c = __hmax2(a, b);
        memcpy(&m, &c, 4);
      }
    return fmaxf(word_elem<T>(m, 0), word_elem<T>(m, 1));
  } else {
    acc_t<T> m = rows::neg_inf<acc_t<T>>();
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
      for (int e = 0; e < Regs<T, NS>::VEC; ++e) m = fmaxf(m, v.at(s, e));
    return m;
  }
}
// The maximum that exp(x - m) subtracts: 0 for a row of -inf (m = -inf), so that every exp is exp(-inf) = 0 instead
// of exp(-inf + inf) = NaN: the row's sum is 0, as the eager ops' NaN outputs expect. No per-element test.
template <class A> __device__ __forceinline__ A exp_shift(A m) { return m == rows::neg_inf<A>() ? A(0) : m; }
// (sum of exp(x - m), sum of x if SUM_X) over this thread's elements of the row's N, with m = exp_shift(row max);
// -inf elements (the fill past N too) add exp(-inf) = 0 to the first.
// LOG2 (fp32 and 16-bit types): the sum of 2^(x log2 e - m) instead, m being a shift in the log2 domain: one FFMA
// before the MUFU where exp(x - m) takes an FADD and an FMUL (see cross_entropy's row_share).
template <bool SUM_X, class T, int NS, bool LOG2 = false>
__device__ __forceinline__ Pair<acc_t<T>> thread_exp_sum(const Regs<T, NS>& v, acc_t<T> m, int N, int t, int tpr) {
  using A = acc_t<T>;
  constexpr int VEC = Regs<T, NS>::VEC;
  A se = A(0), sx = A(0);
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    if (SUM_X && Regs<T, NS>::col(s, t, tpr) >= N) break;  // the fill must not enter sum(x)
    A a[VEC];
    v.fresh(s, a);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      if constexpr (LOG2) se += rows::exp2_ftz(fmaf(a[e], rows::kLog2e, -m));
      else se += rows::exp_of<T>(a[e] - m);
      if (SUM_X) sx += a[e];
    }
  }
  return {se, sx};
}

// Stores slot s's VEC values (in acc_t) to `row` at column c (c < N, N a multiple of VEC).
template <class T>
__device__ __forceinline__ void store(T* __restrict__ row, int c, const acc_t<T> (&x)[16 / sizeof(T)]) {
  constexpr int VEC = 16 / sizeof(T);
  Vec<T, VEC> o;
#pragma unroll
  for (int e = 0; e < VEC; ++e) o.v[e] = from_acc<T>(x[e]);
  *reinterpret_cast<Vec<T, VEC>*>(row + c) = o;
}

// Slot at column c (< N) of a per-column parameter vector (weight, bias; contiguous, 16-byte aligned), in acc_t.
// (Decoded from 32-bit words like Regs: one instruction per bf16 element, where converting each element took two.)
template <class T>
__device__ __forceinline__ void load_param(const T* __restrict__ p, int c, acc_t<T> (&x)[16 / sizeof(T)]) {
  constexpr int VEC = 16 / sizeof(T);
  const uint4 q = *reinterpret_cast<const uint4*>(p + c);
  const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int e = 0; e < VEC; ++e) x[e] = VEC == 4 ? word_elem<T>(u[e], 0) : word_elem<T>(u[e >> 1], e & 1);
}

// A per-column parameter (the weight) at a thread's NS slots, held in shared memory as loaded (one 16-byte vector of
// T per slot, [NS][CTA]; converted on each use): the long-row backward kernels read it on each pass with 16-byte
// shared loads, where their global loads of it each waited on L2 (layer_norm bf16 [256, 262144], H200: a fifth of
// the stall samples). Converted to fp32 it took 32 KB more per CTA for 16-bit types: layer_norm's long kernel, with
// its 128 KB of sums, was then left about 60 KB of L1 for the 64 KB of row loads a CTA has in flight (0.2-0.7 points
// slower than L2 loads), and rms_norm's gained nothing from skipping the conversion (bf16 N = 262144: 74.3% of copy
// converted, 75.1 as loaded).
template <class T, int NS, int CTA> struct ColParam {
  static constexpr int VEC = 16 / sizeof(T);
  using A = acc_t<T>;
  uint4* buf;  // this thread's first slot
  __device__ explicit ColParam(unsigned char* smem) : buf(reinterpret_cast<uint4*>(smem) + threadIdx.x) {}
  static constexpr int bytes() { return NS * 16 * CTA; }
  __device__ __forceinline__ void fill(const T* __restrict__ p, int N, int t, int tpr) const {
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      const int c = Regs<T, NS>::col(s, t, tpr);
      if (c >= N) break;
      buf[s * CTA] = *reinterpret_cast<const uint4*>(p + c);
    }
  }
  __device__ __forceinline__ void get(int s, A (&x)[VEC]) const {
    const uint4 q = buf[s * CTA];
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int e = 0; e < VEC; ++e) x[e] = VEC == 4 ? word_elem<T>(u[e], 0) : word_elem<T>(u[e >> 1], e & 1);
  }
};

template <class A> __device__ __forceinline__ A shfl_xor(A v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
template <class A> __device__ __forceinline__ Pair<A> shfl_xor(Pair<A> v, int o) {
  return {__shfl_xor_sync(0xffffffffu, v.a, o), __shfl_xor_sync(0xffffffffu, v.b, o)};
}

struct Sum {
  template <class A> __device__ __forceinline__ A operator()(A x, A y) const { return x + y; }
  template <class A> __device__ __forceinline__ Pair<A> operator()(Pair<A> x, Pair<A> y) const {
    return {x.a + y.a, x.b + y.b};
  }
};
struct Max {
  __device__ __forceinline__ float operator()(float x, float y) const { return fmaxf(x, y); }
  __device__ __forceinline__ double operator()(double x, double y) const { return fmax(x, y); }
};

template <class A> __device__ __forceinline__ A recip_or_0(A n) {
  if constexpr (sizeof(A) == 4) return n > A(0) ? __fdividef(1.f, n) : A(0);
  else return n > A(0) ? A(1) / n : A(0);
}
// Element counts of a row's threads: thread t holds q + (t < rem) vectors of vec elements.
struct RowCounts {
  int vec, q, rem;
  // threads [lo, hi)
  __device__ __forceinline__ int threads(int lo, int hi) const {
    return vec * (q * (hi - lo) + min(max(rem - lo, 0), hi - lo));
  }
};

// Cluster reductions signal an mbarrier per slot set (st.async) instead of passing a cluster barrier: a barrier's
// release half waits until the thread's earlier global stores are acknowledged, and a long row's CTA enters its first
// reduction with the previous row's output stores (up to 64 KB per SM) still in flight. MYOPS_RR_MBAR=0 restores
// the barrier (A/B).
#ifndef MYOPS_RR_MBAR
#define MYOPS_RR_MBAR 1
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// The shared::cluster address of local shared address a in CTA `rank` of the cluster.
__device__ __forceinline__ unsigned map_rank(unsigned a, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
// Writes v (4 or 8 bytes) at shared::cluster address dst and counts its bytes on the mbarrier at `bar` (same CTA).
template <class V> __device__ __forceinline__ void send_remote(unsigned dst, const V& v, unsigned bar) {
  if constexpr (sizeof(V) == 4) {
    uint32_t w;
    memcpy(&w, &v, 4);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(dst), "r"(w),
                 "r"(bar) : "memory");
  } else {
    static_assert(sizeof(V) == 8, "a cluster reduction slot holds 4 or 8 bytes");
    uint64_t w;
    memcpy(&w, &v, 8);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(dst), "l"(w),
                 "r"(bar) : "memory");
  }
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n\t.reg .pred P;\n"
      "RR_WAIT:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 P, [%0], %1;\n\t"
      "@!P bra RR_WAIT;\n"
      "}" ::"r"(bar), "r"(parity) : "memory");
}

// Combines one value per thread over each row's thread group; every thread of the row gets the result, in the
// same bits. Above 32 threads per row, each warp's total goes to a shared slot, one barrier, then each warp
// reduces its row's slots with shuffles. Two slot sets alternate: a warp writing reduction k + 2's slots has
// passed reduction k + 1's barrier, which no thread reaches before it has read reduction k's slots.
// A row split over a cluster (up to 16 CTAs) does the same at cluster scope: each warp sends its total into its slot
// of every CTA of the cluster (st.async to distributed shared memory, counted in bytes on that CTA's mbarrier for
// the slot set), every CTA waits until its mbarrier has all the cluster's bytes, then every warp of every CTA combines
// all slots in the same order. The reuse argument is the same: a CTA sends reduction k + 2 only once it has every
// warp's reduction k + 1, which each warp sends after it has read reduction k. No CTA exits while a send to it may be
// in flight: each receives all its bytes before it goes on, and a clustered kernel passes a cluster barrier at exit.
struct RowReduce {
  unsigned char* buf;  // shared: kRedBytes
  int tpr;
  unsigned round = 0;  // reductions so far: slot set round & 1, its mbarrier's phase parity (round >> 1) & 1
  // A CTA may write another's shared memory only once that CTA has started (compute-sanitizer's racecheck flagged
  // the first reduction's DSMEM writes without this): a clustered kernel passes a cluster barrier at entry, after its
  // mbarriers are initialized. (Arriving here and waiting before the first remote write instead kept a flag live
  // through the row loop: the bf16 softmax forward went from 64 to 76 registers, one CTA per SM, 72 -> 58% of copy at
  // N = 65536.)
  __device__ RowReduce(unsigned char* b, int tpr_) : buf(b), tpr(tpr_) {
    if (tpr > (int)blockDim.x) {
#if MYOPS_RR_MBAR
      if (threadIdx.x == 0) {
        const unsigned bar = smem_addr(buf + 2 * kRedSetBytes);
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar + 8) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      }
#endif
      asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
      asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    }
  }
#if MYOPS_RR_MBAR
  __device__ ~RowReduce() {
    if (tpr > (int)blockDim.x) {
      asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
      asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    }
  }
#endif
  template <class V, class Op> __device__ __forceinline__ V operator()(V v, Op op, V identity) {
    return generic(v, op, identity);
  }
  // Pair sums (layer_norm's backward) inside a CTA: the two components share each shuffle. The first step sends each
  // lane's partner the component the partner keeps (lanes 0-15 keep .a, 16-31 .b), so a warp reduces one value per
  // lane: 5 shuffles and adds instead of 10. Each warp's two totals go to shared slots; the row's first warp reads
  // the .a totals into lanes 0-15 and the .b totals into 16-31, and lanes 0 and 16 broadcast them.
  template <class A> __device__ __forceinline__ Pair<A> operator()(Pair<A> v, Sum op, Pair<A> identity) {
    if (tpr < 32 || tpr > (int)blockDim.x) return generic(v, op, identity);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hi = lane >> 4;
    A x = (hi ? v.b : v.a) + shfl_xor(hi ? v.a : v.b, 16);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) x += shfl_xor(x, o);
    if (tpr > 32) {
      A* red = reinterpret_cast<A*>(buf + (round & 1) * kRedSetBytes);
      ++round;
      const int nw = tpr >> 5;
      if ((lane & 15) == 0) red[2 * warp + hi] = x;
      __syncthreads();
      const int first = tpr == (int)blockDim.x ? 0 : warp & ~(nw - 1);
      const int k = lane & 15;  // (nw <= 32: at most two slots per lane)
      x = k < nw ? red[2 * (first + k) + hi] : A(0);
      if (nw > 16) x += k + 16 < nw ? red[2 * (first + k + 16) + hi] : A(0);
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) x += shfl_xor(x, o);
    }
    return {__shfl_sync(0xffffffffu, x, 0), __shfl_sync(0xffffffffu, x, 16)};
  }
  template <class V, class Op> __device__ __forceinline__ V generic(V v, Op op, V identity) {
    if (tpr < 32) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
        if (o < tpr) v = op(v, shfl_xor(v, o));
      return v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));  // (no per-step test on the common path)
    if (tpr == 32) return v;
    if (tpr > (int)blockDim.x) return cluster_combine(v, op, identity);
    V* red = reinterpret_cast<V*>(buf + (round & 1) * kRedSetBytes);
    ++round;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = tpr >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    // the row's first warp (nw is a power of 2 where a CTA holds several rows of over 32 threads: tpr = 64)
    const int first = tpr == (int)blockDim.x ? 0 : warp & ~(nw - 1);
    v = lane < nw ? red[first + lane] : identity;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
    return v;
  }
  template <class V, class Op> __device__ __forceinline__ V cluster_combine(V v, Op op, V identity) {
    int n;
    const V* red = cluster_slots(v, n);
    const int lane = threadIdx.x & 31;
    v = identity;
    for (int k = lane; k < n; k += 32) v = op(v, red[k]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
    return v;
  }
  // A row split over a cluster: its (sum, sum of squared deviations from its mean) from each warp's w = (sum, squared
  // deviations from the warp's own mean), in one exchange where the exact two-pass statistics take two: every warp's
  // pair goes to its cluster slot, then a two-pass over the slots, mean = sum of the sums * inv_n, m2 = sum over slots
  // k of m2_k + n_k (s_k / n_k - mean)^2 (row warp k holds c.threads(32 k, 32 k + 32) elements). Both passes are
  // differences from a mean: no sum of squares cancels.
  template <class A> __device__ __forceinline__ Pair<A> slot_moments(Pair<A> w, RowCounts c, A inv_n) {
    // (The counts are the same on every row: the compiler hoisted their arithmetic out of the row loop and spilled
    // it. Opaque here, it is recomputed per call.)
    asm volatile("mov.b32 %0, %0;" : "+r"(c.q));
    asm volatile("mov.b32 %0, %0;" : "+r"(c.rem));
    const int lane = threadIdx.x & 31;
    int n;
    const Pair<A>* red = cluster_slots(w, n);
    A s = A(0);
    for (int k = lane; k < n; k += 32) s += red[k].a;
    s = myops::warp_sum(s);
    const A mu = s * inv_n;
    A m2 = A(0);
    for (int k = lane; k < n; k += 32) {
      const A nk = A(c.threads(32 * k, 32 * k + 32));
      const Pair<A> p = red[k];
      const A d = nk > A(0) ? p.a * recip_or_0(nk) - mu : A(0);
      m2 += p.b + nk * d * d;
    }
    return {s, myops::warp_sum(m2)};
  }
  // A cluster reduction's exchange: sends this warp's total v to its slot in every CTA of the cluster and waits for
  // every slot of this CTA; returns them (n = the cluster's warps, in row order).
  template <class V> __device__ __forceinline__ const V* cluster_slots(const V& v, int& n) {
    static_assert(sizeof(V) <= 8, "a cluster reduction slot holds 8 bytes");
    const unsigned set = round & 1;
    V* red = reinterpret_cast<V*>(buf + set * kRedSetBytes);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int ctas = (int)cluster_size();
    n = ctas * nw;  // (tpr / blockDim.x, without a division)
#if MYOPS_RR_MBAR
    const unsigned bar = smem_addr(buf + 2 * kRedSetBytes + 8 * set);
    if (threadIdx.x == 0)  // this CTA's arrival: the phase completes once the n slots' bytes have also landed
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n * (int)sizeof(V))
                   : "memory");
    if (lane < ctas)
      send_remote(map_rank(smem_addr(red + cluster_rank() * nw + warp), lane), v, map_rank(bar, lane));
    mbar_wait(bar, (round >> 1) & 1);
#else
    cg::cluster_group cluster = cg::this_cluster();
    if (lane < ctas) *cluster.map_shared_rank(red + cluster_rank() * nw + warp, lane) = v;
    cluster.sync();
#endif
    ++round;
    return red;
  }
};

// A row that one whole warp holds (warp-row kernels): the same reduction as RowReduce's at tpr = 32, with nothing
// known only at run time.
struct WarpReduce {
  template <class V, class Op> __device__ __forceinline__ V operator()(V v, Op op, V) const {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
    return v;
  }
};

// A row that one CTA of TPR threads holds, NV 16-byte vectors a thread: vectors t + k TPR (each load instruction
// reads TPR * 16 contiguous bytes), loaded under h at construction. The norms' one-row-per-CTA kernels: fp32 rows of
// 2048 / 4096 (WideRowF32: NV = 2, ln_wide_f32_kernel, rms_wide_f32_kernel) and 16-bit rows of 4096 (ln_wide16_kernel,
// rms_wide16_kernel). TPR = 0: the CTA's width at run time, blockDim.x threads (wide_threads: rows of other widths).
template <class T, int TPR, int NV> struct WideRow {
  static constexpr int kVec = 16 / sizeof(T);
  static constexpr int kN = NV * TPR * kVec;  // the row length (0: NV blockDim.x kVec)
  // Whether rows [M, N] fit these kernels: N == kN, a grid of M CTAs (one per row) within CUDA's x limit.
  static bool fits(int64_t M, int64_t N) { return TPR > 0 && N == kN && M <= 0x7fffffff; }
  static __device__ __forceinline__ int tpr() { return TPR > 0 ? TPR : (int)blockDim.x; }
  Vec<T, kVec> v[NV];
  __device__ __forceinline__ WideRow(const T* x, int64_t xs, int64_t r, L2Hint h) {
#pragma unroll
    for (int k = 0; k < NV; ++k) v[k] = load_vec<T, kVec>(x + r * xs + col(k), h);
  }
  // The first column of this thread's vector k.
  static __device__ __forceinline__ int col(int k) { return kVec * ((int)threadIdx.x + k * tpr()); }
  // This thread's vector k in acc_t.
  __device__ __forceinline__ void get(int k, acc_t<T> (&a)[kVec]) const {
#pragma unroll
    for (int e = 0; e < kVec; ++e) a[e] = to_acc(v[k].v[e]);
  }
  // This thread's fold of its elements in acc_t, s = f(s, v), along two interleaved chains from 0 (half the
  // dependent adds of one chain), summed.
  template <class F> __device__ __forceinline__ acc_t<T> fold2(F f) const {
    acc_t<T> s0 = 0, s1 = 0;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      acc_t<T> a[kVec];
      get(k, a);
#pragma unroll
      for (int e = 0; e < kVec; e += 2) {
        s0 = f(s0, a[e]);
        s1 = f(s1, a[e + 1]);
      }
    }
    return s0 + s1;
  }
  // kVec acc_t values stored (rounded to T) as this thread's vector k of the row at p.
  static __device__ __forceinline__ void put(T* p, int k, const acc_t<T> (&a)[kVec]) {
    Vec<T, kVec> o;
#pragma unroll
    for (int e = 0; e < kVec; ++e) o.v[e] = from_acc<T>(a[e]);
    *reinterpret_cast<Vec<T, kVec>*>(p + col(k)) = o;
  }
};
template <int TPR> using WideRowF32 = WideRow<float, TPR, 2>;
// The threads of a WideRow<T, 0, nv> CTA for rows [M, N] of elem bytes: N / (nv VEC) where that is a whole number
// of warps up to kWideMaxThreads, for rows of over 256 vectors (shorter ones are the warp-row kernels'; 16-bit: N of
// 3072-16384 at 4 vectors a thread, 2560-8192 at 2), and M CTAs fit CUDA's grid; else 0.
constexpr int kWideMaxThreads = 512;
inline int wide_threads(int64_t M, int64_t N, int elem, int nv) {
  const int64_t per = (int64_t)nv * (16 / elem), t = N / per;
  if (M > 0x7fffffff || N % (per * 32) != 0 || N / (16 / elem) <= 256 || t > kWideMaxThreads) return 0;
  return (int)t;
}
// A parameter vector's (weight, bias: [N] or null) 16 bytes at column c in acc_t, or dflt where p is null.
template <class T> __device__ __forceinline__ void param_vec(const T* p, int c, acc_t<T> dflt,
                                                             acc_t<T> (&a)[16 / sizeof(T)]) {
  if (p) {
    const Vec<T, 16 / sizeof(T)> q = *reinterpret_cast<const Vec<T, 16 / sizeof(T)>*>(p + c);
#pragma unroll
    for (int e = 0; e < 16 / (int)sizeof(T); ++e) a[e] = to_acc(q.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < 16 / (int)sizeof(T); ++e) a[e] = dflt;
  }
}

// A warp-row kernel's lane t and row r (one per warp).
struct WarpRow {
  int t;
  int64_t r;
  __device__ WarpRow() : t((int)threadIdx.x & 31), r((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) {}
  // Loads this thread's slots of row r of x ([M, N], row stride xs; slots past N read fill) under the L2 policy
  // `last` (l2_hint); false for a warp past M, which then returns whole (no barrier follows).
  template <bool FULL, class T, int NS>
  __device__ __forceinline__ bool load(Regs<T, NS>& v, const T* __restrict__ x, int64_t xs, int64_t M, int N,
                                       bool last, T fill) const {
    if (r >= M) return false;
    v.template load<FULL>(x + r * xs, N, t, 32, fill, l2_hint(last));
    return true;
  }
};

// Warp-row forward kernels: 16-bit rows of 513-2048 elements, one row per warp and CTAs of several warps, their
// geometry known at compile time: no row loop, no shared memory or barrier, loads and stores at immediate offsets
// from one row address. The register kernel keeps the threads per row in a register (its prologue and per-row address
// work were about 230 of layer_norm's 565 instructions per row at N = 1024, Nsight Compute, H200), and where a row
// leaves the last of its 4 slots per thread empty (N = 768, 1536) or spans warps whose last slots are partly empty
// (1280, 1600) each warp's fixed work is spread over fewer elements (layer_norm bf16, warp instructions per warp and
// row, Nsight Compute, H200: N = 1536 650 for 24 elements per thread, N = 3072 629 for 32). Forward, bf16, % of copy,
// register -> warp-row kernel (H200: two rounds at N = 768, 1024 and 1280 for rms_norm, one else):
//
//   |            | H200 layer_norm     | H200 rms_norm       | H100 layer_norm | H100 rms_norm |
//   | N = 768    | 78.8 / 78.9 -> 92.3 | 84.8 / 84.7 -> 93.2 | 94.3 -> 94.4    | 95.0 -> 96.0  |
//   | N = 1024   | 91.4 / 91.3 -> 91.7 | 92.8 / 92.8 -> 93.1 | 94.1 -> 94.2    | 94.7 -> 96.0  |
//   | N = 1280   | 66.6 -> 84.2        | 90.6 / 90.3 -> 93.3 | 86.7 -> 95.3    | 94.4 -> 96.2  |
//   | N = 1536   | 72.3 -> 87.7        | (register kernel)   | 92.2 -> 94.1    |               |
//   | N = 1600   | 70.6 -> 88.6        | 86.1 -> 89.6        | 90.8 -> 93.2    | 94.6 -> 93.3  |
//
inline int warp_rows_cta(int kernel_choice) {
  static const int v =
      env_knob("MYOPS_WARP_ROWS", -1, [](int n) { return n == 0 || n == 64 || n == 128 || n == 256 || n == 512; });
  return v < 0 ? kernel_choice : v;
}
// The warp-row kernels an op instantiates, a set of (vectors per thread, full) pairs: warp_ns(ns, full) bits.
// kWarpNs: all that warp_row_geo can give; an op leaves out those its kernel would not serve well (rms_norm 6, whose
// register kernel holds such rows in full; log_softmax's 8, which spilled) and their rows take its register kernel.
constexpr unsigned warp_ns(int ns, bool full) { return 1u << (2 * ns + full); }
constexpr unsigned kWarpNs = warp_ns(3, true) | warp_ns(4, true) | warp_ns(4, false) | warp_ns(5, true) |
                             warp_ns(6, true) | warp_ns(8, false);
// The warp-row geometry for a row of N elements of elem bytes, or none (ns = 0): 16-bit rows of 65-256 vectors (N of
// 513-2048), ns vectors per thread: 3, 5 or 6 where that many fill every thread's slots (N = 768, 1280, 1536), else
// 4 or 8 (the last slots empty where the row is shorter; 8 in full rows, N = 2048, is no warp row). None where the
// op's register kernel holds the row in full slots and a warp would need more than 4 vectors per thread (reg_full;
// by default only rms_norm's N = 1536): H200, rms_norm bf16 forward, % of copy, register -> warp-row kernel, N = 1536
// 92.6 / 92.6 -> 92.1 / 92.3, N = 2048 92.8 / 92.9 -> 91.5 / 91.7. None if the op leaves the geometry out of Ns, or
// if MYOPS_ROW_STAGE=2 asks every row staged.
template <unsigned Ns> Geo warp_row_geo(int64_t N, int elem, int kernel_cta, bool reg_full) {
  Geo g;
  const int vec = 16 / elem, cta = warp_rows_cta(kernel_cta);
  if (elem != 2 || cta == 0 || stage_mode() == 2 || N % vec != 0) return g;
  const int64_t nvec = N / vec;
  if (nvec <= 64 || nvec > 256) return g;
  int ns = (int)ceil_div(nvec, (int64_t)32);
  if (ns > 4 && reg_full) return g;
  if (nvec != 32 * ns || !(ns == 3 || ns == 5 || ns == 6)) ns = ns <= 4 ? 4 : 8;
  const bool full = nvec == 32 * ns;
  if (!(Ns & kWarpNs & warp_ns(ns, full))) return g;
  g.ns = ns;
  g.tpr = 32;
  g.rows = cta / 32;
  g.threads = cta;
  g.full = full;
  return g;
}
// f(std::integral_constant<int, NS>{}, std::bool_constant<FULL>{}) for a warp-row geometry of warp_row_geo<Ns>
// (instantiated for the pairs in Ns alone).
template <unsigned Ns, class R = int, class F> R with_warp_ns(const Geo& g, F&& f) {
  R r = R(MYOPS_EARG);
  const auto take = [&](auto ns, auto full) {
    if constexpr ((Ns & warp_ns(decltype(ns)::value, decltype(full)::value)) != 0)
      if (g.ns == decltype(ns)::value && g.full == decltype(full)::value) r = f(ns, full);
  };
  using std::integral_constant, std::true_type, std::false_type;
  take(integral_constant<int, 3>{}, true_type{});
  take(integral_constant<int, 4>{}, true_type{});
  take(integral_constant<int, 4>{}, false_type{});
  take(integral_constant<int, 5>{}, true_type{});
  take(integral_constant<int, 6>{}, true_type{});
  take(integral_constant<int, 8>{}, false_type{});
  return r;
}

inline cudaLaunchConfig_t launch_config(const Geo& g, int64_t grid, cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)grid);
  cfg.blockDim = dim3((unsigned)g.threads);
  cfg.dynamicSmemBytes = (size_t)g.smem;
  cfg.stream = stream;
  if (g.cluster > 1) {
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = (unsigned)g.cluster;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return cfg;
}

// The kernel attributes g needs: above 48 KB of dynamic shared memory and above 8 CTAs per cluster it must opt in.
template <class K> int prepare(const Geo& g, K kernel) {
  cudaError_t e = cudaSuccess;
  if (g.smem > 0) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, g.smem);
  if (e == cudaSuccess && g.cluster > kMaxCluster)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  return (int)e;
}

// Launch of a fast-path kernel: grid = the CTAs that cover M rows, or at most `cap` CTAs (row loop); a multiple
// of g.cluster, launched as clusters of that many CTAs. dependent: as a programmatic dependent (add_pdl).
template <class... KArgs, class... Args>
int launch_as(bool dependent, const Geo& g, int64_t grid, void (*kernel)(KArgs...), cudaStream_t stream,
              Args&&... args) {
  if (grid <= 0) return MYOPS_OK;
  const int rc = prepare(g, kernel);
  if (rc) return rc;
  if (g.cluster == 1 && !dependent) {
    kernel<<<(unsigned)grid, (unsigned)g.threads, (size_t)g.smem, stream>>>(std::forward<Args>(args)...);
    return launch_status();
  }
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = launch_config(g, grid, stream, attr);
  if (dependent) add_pdl(cfg, attr);
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) return (int)e;
  return launch_status();
}
template <class... KArgs, class... Args>
int launch(const Geo& g, int64_t grid, void (*kernel)(KArgs...), cudaStream_t stream, Args&&... args) {
  return launch_as(false, g, grid, kernel, stream, std::forward<Args>(args)...);
}
// launch() as a programmatic dependent where pdl_on() (common.cuh), for kernels whose first statement is pdl_wait().
template <class... KArgs, class... Args>
int launch_dependent(const Geo& g, int64_t grid, void (*kernel)(KArgs...), cudaStream_t stream, Args&&... args) {
  return launch_as(pdl_on(), g, grid, kernel, stream, std::forward<Args>(args)...);
}
inline int64_t cover_grid(const Geo& g, int64_t M) {
  return std::min<int64_t>(ceil_div(M, g.rows), (1 << 30) / g.cluster) * g.cluster;
}

// CTAs that fit on the chip at once (for kernels that loop over rows and keep per-column sums), never more than
// the rows need; -1 if the kernel cannot run with g.threads threads (or its clusters cannot be scheduled).
template <class K> int64_t resident_grid(const Geo& g, K kernel, int64_t M) {
  if (prepare(g, kernel)) {
    (void)cudaGetLastError();
    return -1;
  }
  if (g.cluster > 1) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = launch_config(g, (int64_t)g.cluster * sm_count(), nullptr, &attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters < 1) {
      (void)cudaGetLastError();
      return -1;
    }
    return std::min<int64_t>(clusters, M) * g.cluster;
  }
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, g.threads, g.smem) != cudaSuccess || per_sm < 1)
    return -1;
  return std::min<int64_t>((int64_t)per_sm * sm_count(), ceil_div(M, g.rows));
}
// The grid of a forward kernel: a persistent one (what fits) when it stages rows, else one that covers the rows.
template <class K> int64_t row_grid(const Geo& g, K kernel, int64_t M) {
  return g.smem > 0 ? resident_grid(g, kernel, M) : cover_grid(g, M);
}
// Rows of a per-column partial-sum workspace for a grid of `grid` CTAs (Lane::owners()).
inline int64_t owners(const Geo& g, int64_t grid) { return grid < 0 ? -1 : grid / g.cluster; }

}  // namespace rr
}  // namespace myops
