// sum: out[m] = sum_k x[m * sM + k * sK]        x viewed as [M, K] (the registration layer moves the reduced
//      dims last and collapses them), out [M] contiguous, in x's dtype, accumulated in fp32 (fp64 for fp64).
//
// Two kernels; both write fp32 partial sums to a workspace [splits, M] when K is split across blocks so that the
// chip fills (a full reduction, M = 1, would otherwise run on one block), and a last pass adds the splits:
//   rows: sK == 1 (reduce along contiguous memory): tpr threads per row (4..256; from MYOPS_SUM_MIN_TPR = 4), the
//         fewest that cover the row with 4 16-byte loads each, so one pass of loads in flight reads it (rows longer
//         than 256 threads' pass loop, and split over blocks above 16k elements); warp shuffles, plus one
//         shared-memory step when a row spans warps. Several rows per 256-thread block when tpr < 256.
//         Rows of exactly one such pass take a straight-line copy of it (sum_full_rows_kernel, same bits); those of
//         256 threads (fp32 K = 4096, 16-bit 8192, fp64 2048) spread it over 512 threads (sum_wide_rows_kernel, same
//         bits). Both load under L2 evict_first: nothing reads the row again.
//   cols: sK != 1 (e.g. bias gradients, reduce over leading dims): each lane owns VEC consecutive m (16-byte
//         loads across the warp when sM == 1, four in flight), the 8 warps of a block take interleaved k, shared
//         memory combines.
// A split's CTAs take interleaved tiles of K (CTA y: tiles y, y + splits, ...), so that the grid reads one sweeping
// window of memory, and split grids hold at most MYOPS_SUM_SPLIT_CTAS (4) CTAs an SM, one wave. The splits' pass adds
// ws over many threads in a fixed order and is a programmatic dependent of the main kernel.
#include <type_traits>

#include "common.cuh"

namespace {
using namespace myops;

constexpr int kThreads = 256;
constexpr int kRowLoads = 4;             // 16-byte loads in flight per thread in the row kernel
static_assert(kRowLoads == 4, "sum_rows_kernel's accumulators and their fold are written for 4");
constexpr int64_t kWarpRowMaxK = 16384;  // rows up to this long stay in one block (MYOPS_SUM_TPR applies to them)
constexpr int64_t kMinRowSplit = 16384;  // elements of one row per block below which splitting costs more than it gives
constexpr int64_t kMinColSplit = 256;    // rows of a column block per split, likewise

struct Plan {
  bool rows;          // row kernel (sK == 1) or column kernel
  int tpr_log2;       // row kernel: log2 of the threads per row (2..8)
  int vec;            // elements per 16-byte load (1: unaligned or strided)
  int64_t gx;         // blocks along M
  int64_t splits;     // K split across this many blocks (1: the kernel writes the output directly)
};

Plan make_plan(const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int64_t elem) {
  Plan p;
  const int vec = (int)(16 / elem);
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  p.rows = (sK == 1 || K <= 1);
  // Blocks that keep every SM busy when K is split, rounded down (splits = target / gx): a grid over them spills a
  // second wave once the kernel holds only `per_sm` CTAs an SM. sum(dim=0) fp32 on the H100 ran 17 x 32 = 544 CTAs
  // of a 62-register kernel, 4 an SM (528 resident): 95.6 -> 87.1% of copy against 48 registers (5 an SM).
  // MYOPS_SUM_SPLIT_CTAS: CTAs per SM (A/B; default 4). H100, % of
  // copy, sum() / sum(dim=0) bf16 at 3, 4, 5, 6 with splits rounded up (09bec95; at 5 and 6 the grids spilled past
  // residency): 87.5 / 86.3, 88.2 / 87.6, 85.5 / 75.0, 84.6 / 80.1; rounded down, 3 -> 4 (one round): 90.4 / 89.6 ->
  // 90.5-90.7 / 89.0, fp32 96.3 / 97.9 -> 96.4 / 97.5-97.6.
  static const int per_sm = env_knob("MYOPS_SUM_SPLIT_CTAS", 4, [](int v) { return v >= 1 && v <= 32; });
  const int64_t target = (int64_t)per_sm * sm_count();
  if (p.rows) {
    p.vec = aligned && (M == 1 || sM % vec == 0) ? vec : 1;
    // The fewest threads whose one pass of loads covers the row. A warp per row for every row up to 16k elements
    // (the former kernel, MYOPS_SUM_TPR=32) gave a few long tasks per warp: [16384, 4096] filled 1.94 waves of
    // blocks that all ended together, the second 94% full. H100, clean flush, two rounds, % of copy, a warp a row ->
    // this (bf16 128 threads a row, fp32 256): bf16 92.7 / 92.6 -> 94.7 / 94.5 (torch.compile 93.2-93.5), fp32
    // 97.2 / 97.1 -> 100.5 / 100.5 (torch.compile 101.5-101.7) (session 33).
    // Short rows (16-bit K <= 512, fp32 <= 256: under a warp's one pass) from MYOPS_SUM_MIN_TPR (4, the default;
    // 8, 16, or 32: a warp a row, the former kernel) threads a row, 256 / that rows a CTA, where a warp per row left
    // most lanes without a load. H200, sum(dim=-1), % of copy, min 32 -> 16 -> 4 (session 53): bf16 [1048576, 128]
    // 24.1 -> 43.4 -> 102.4 (torch.compile 97.3), [1048576, 64] 12.2 -> 22.5 -> 73.6; fp32 [1048576, 128]
    // 53.0 -> 80.2 -> 107.5, [1048576, 64] 27.1 -> 48.2 -> 101.5; bf16 [262144, 512] 77.4 -> 102.3 -> 102.2.
    static const int min_tpr =
        env_knob("MYOPS_SUM_MIN_TPR", 4, [](int v) { return v >= 4 && v <= 32 && !(v & (v - 1)); });
    int t = __builtin_ctz(min_tpr);
    while (t < 8 && ((int64_t)kRowLoads * p.vec << t) < K) ++t;
    static const int knob =
        env_knob("MYOPS_SUM_TPR", 0, [](int v) { return v == 0 || (v >= 4 && v <= 256 && !(v & (v - 1))); });
    if (knob != 0 && K <= kWarpRowMaxK) t = __builtin_ctz(knob);
    if (K > kWarpRowMaxK) t = 8;
    p.tpr_log2 = t;
    p.gx = ceil_div(M, (int64_t)(kThreads >> t));
    p.splits = K <= kWarpRowMaxK ? 1 : std::min<int64_t>(target / p.gx, ceil_div(K, kMinRowSplit));
  } else {
    p.vec = aligned && sM == 1 && sK % vec == 0 ? vec : 1;
    p.tpr_log2 = 0;
    p.gx = ceil_div(M, 32LL * p.vec);
    p.splits = std::min<int64_t>(target / p.gx, ceil_div(K, kMinColSplit));
  }
  p.splits = std::max<int64_t>(1, std::min<int64_t>(p.splits, 65535));
  return p;
}

// The sum of v over each aligned group of tpr < 32 lanes of the warp (a short row's threads), in every one of them:
// the xor butterfly of warp_sum from offset tpr / 2, so that it stays inside the row.
template <class A> __device__ __forceinline__ A group_sum(A v, int tpr) {
  for (int o = tpr >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The row's total from its warps' sums s (each warp_sum'd; tpr > 32: the row spans tpr / 32 warps, which meet in
// smem, one slot per warp of the block), added in order by the row's first thread (lane 0), where it is valid.
// Every thread of the block calls it (a barrier where tpr > 32).
template <class A> __device__ __forceinline__ A row_total(A s, A* smem, int tpr, int lane) {
  if (tpr <= 32) return s;
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = s;
  __syncthreads();
  if (lane == 0) {
    s = A(0);
    for (int w = 0; w < (tpr >> 5); ++w) s += smem[(threadIdx.x >> 5) + w];
  }
  return s;
}

// Row kernel. Block (256): 256 >> tpr_log2 rows of 1 << tpr_log2 threads each (a long row's block is one split of
// it). grid (gx, splits). IL: a split row's part is tiles blockIdx.y, blockIdx.y + splits, ... (interleaved, for
// splits > 1 only), else one contiguous chunk (vector-aligned boundaries; unsplit rows: the whole row). IL is a
// template argument because a run-time choice cost the unsplit kernel its loads in flight: nvcc issued each 16-byte
// load after the previous one's adds (43 registers instead of 48), and sum(dim=-1) bf16 fell from 94 to 87% of copy on
// the H100.
// SHORT: tpr < 32 (never split: IL false), a warp spanning 32 / tpr rows, each summed over its lanes alone.
template <class T, int VEC, bool IL, bool SHORT = false>
__global__ void __launch_bounds__(kThreads) sum_rows_kernel(T* __restrict__ out,          // [M]
                                                            acc_t<T>* __restrict__ ws,    // [splits, M]
                                                            const T* __restrict__ x,      // [M, K], sK == 1
                                                            int64_t M, int64_t K, int64_t sM, int tpr_log2,
                                                            int64_t chunk) {
  using A = acc_t<T>;
  __shared__ A smem[kThreads / 32];
  const int tpr = 1 << tpr_log2;
  const int64_t m = (int64_t)blockIdx.x * (kThreads >> tpr_log2) + (threadIdx.x >> tpr_log2);
  const int lane = threadIdx.x & (tpr - 1);
  const int64_t step = (int64_t)tpr * VEC, tile = kRowLoads * step;  // one pass of the row's loads
  const int64_t k_begin = (int64_t)blockIdx.y * (IL ? tile : chunk);
  const int64_t k_end = IL ? K : std::min<int64_t>(K, k_begin + chunk);
  const int64_t adv = IL ? (int64_t)gridDim.y * tile : tile;
  if (gridDim.y > 1) pdl_trigger();  // (the splits' kernel, launched next, waits for this grid in pdl_wait)
  A acc[kRowLoads] = {A(0), A(0), A(0), A(0)};
  if (m < M) {
    const T* row = x + m * sM;
    const int64_t kv_end = k_end - (k_end - k_begin) % VEC;  // whole vectors up to here (k_begin is aligned)
    int64_t k = k_begin + (int64_t)lane * VEC;
    for (; k + (kRowLoads - 1) * step < kv_end; k += adv) {  // independent loads in flight
      Vec<T, VEC> v[kRowLoads];
#pragma unroll
      for (int u = 0; u < kRowLoads; ++u) v[u] = *reinterpret_cast<const Vec<T, VEC>*>(row + k + u * step);
#pragma unroll
      for (int u = 0; u < kRowLoads; ++u)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[u] += to_acc(v[u].v[e]);
    }
    // The rest, under kRowLoads vectors a thread: predicated loads, all issued before their sums.
    Vec<T, VEC> v[kRowLoads - 1];
#pragma unroll
    for (int u = 0; u < kRowLoads - 1; ++u)
      if (k + u * step < kv_end) v[u] = *reinterpret_cast<const Vec<T, VEC>*>(row + k + u * step);
#pragma unroll
    for (int u = 0; u < kRowLoads - 1; ++u)
      if (k + u * step < kv_end)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[u] += to_acc(v[u].v[e]);
    if (lane == 0 && (!IL || blockIdx.y == 0))  // the last elements, fewer than a vector
      for (int64_t kk = kv_end; kk < k_end; ++kk) acc[3] += to_acc(row[kk]);
  }
  const A part = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  const A s = row_total(SHORT ? group_sum(part, tpr) : warp_sum(part), smem, tpr, lane);
  if (m < M && lane == 0) {
    if (gridDim.y == 1) out[m] = from_acc<T>(s);
    else ws[(int64_t)blockIdx.y * M + m] = s;
  }
}

// Rows of exactly one pass of the row kernel's loads (K = kRowLoads * TPR * VEC, unsplit, vector-aligned rows:
// fp32 K = 512-4096, 16-bit K = 1024-8192, the common hidden sizes), straight-line: no loop, no tail, the row's
// threads and their shift and mask as constants, so that it fits 32 registers and 8 CTAs an SM (2048 threads) where
// the row kernel's 64-bit loop bounds and tail held it to 40-48 registers, 5-6 CTAs. The same additions in the same
// order as the row kernel's one pass (the same bits). H100, sum(dim=-1) at [16384, 4096], % of copy, two rounds
// against the row kernel (MYOPS_SUM_FULL=0): bf16 94.2 / 94.1 -> 95.1 / 95.2, fp32 100.1 / 100.3 -> 100.3 / 100.3.
// The loads take the L2 evict_first policy (MYOPS_SUM_FIRST, below).
template <class T, int VEC, int TPR>
__global__ void __launch_bounds__(kThreads, 8) sum_full_rows_kernel(T* __restrict__ out,        // [M]
                                                                    const T* __restrict__ x,  // [M, K], sK == 1
                                                                    int64_t M, int64_t sM, bool first) {
  using A = acc_t<T>;
  static_assert(TPR >= 4 && TPR <= kThreads, "4 threads a row and up");
  __shared__ A smem[kThreads / 32];
  const int64_t m = (int64_t)blockIdx.x * (kThreads / TPR) + threadIdx.x / TPR;
  const int lane = threadIdx.x % TPR;
  const L2Hint h = first ? l2_first() : l2_hint(false);
  A acc[kRowLoads] = {A(0), A(0), A(0), A(0)};
  if (m < M) {
    const T* row = x + m * sM + (int64_t)lane * VEC;
    Vec<T, VEC> v[kRowLoads];
#pragma unroll
    for (int u = 0; u < kRowLoads; ++u) v[u] = load_vec<T, VEC>(row + u * TPR * VEC, h);
#pragma unroll
    for (int u = 0; u < kRowLoads; ++u)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[u] += to_acc(v[u].v[e]);
  }
  const A part = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  const A s = row_total(TPR < 32 ? group_sum(part, TPR) : warp_sum(part), smem, TPR, lane);
  if (m < M && lane == 0) out[m] = from_acc<T>(s);
}

// Rows of one pass at 256 threads (fp32 K = 4096, 16-bit 8192, fp64 2048) over 512 threads of 2 vectors each, a row
// per CTA: thread l < 256 holds the full kernel's slots 0 and 1 of lane l, thread l + 256 its slots 2 and 3, whose
// sum it hands over through shared memory; from there the full kernel's steps (the same bits). H100, sum(dim=-1) fp32
// [16384, 4096], % of copy, two rounds each (probe kernels, session 41): 256 threads of 4 vectors 100.1 / 100.2,
// with evict_first 100.5 / 100.7; 512 of 2 101.1 / 101.2, with evict_first 101.7 / 101.9 (torch.compile, whose
// triton_red kernel runs 512 threads at 18 registers under evict_first: 101.4 / 101.4); 1024 of 1 96.2 / 96.5
// (evict_first 91.3 / 90.9); 512 threads of one vector in a loop of two (as triton_red) 99.5 / 99.8 (evict_first
// 99.9 / 99.9). This kernel, H200, fp32 [16384, 4096]: 102.3-102.5, against 101.8 / 101.9 at MYOPS_SUM_WIDE=0 and
// 101.6 / 102.0 at MYOPS_SUM_FIRST=0 (torch.compile 102.5 / 102.6); bf16 [16384, 8192] 102.0 / 102.5, 102.0 at
// MYOPS_SUM_WIDE=0 (compile 102.3).
template <class T, int VEC>
__global__ void __launch_bounds__(2 * kThreads, 4) sum_wide_rows_kernel(T* __restrict__ out,        // [M]
                                                                       const T* __restrict__ x,  // [M, K], sK == 1
                                                                       int64_t sM, bool first) {
  using A = acc_t<T>;
  __shared__ A upper[kThreads];  // [256] slots 2 + 3 of each lane
  __shared__ A smem[2 * kThreads / 32];  // [16] a slot per warp (row_total; the upper half's never read)
  const int64_t m = blockIdx.x;
  const int lane = threadIdx.x % kThreads, hi = threadIdx.x / kThreads;
  const L2Hint h = first ? l2_first() : l2_hint(false);
  const T* row = x + m * sM + (int64_t)(lane + hi * 2 * kThreads) * VEC;
  Vec<T, VEC> v[2];
#pragma unroll
  for (int u = 0; u < 2; ++u) v[u] = load_vec<T, VEC>(row + u * kThreads * VEC, h);
  A acc[2] = {A(0), A(0)};
#pragma unroll
  for (int u = 0; u < 2; ++u)
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[u] += to_acc(v[u].v[e]);
  const A pair = acc[0] + acc[1];
  if (hi) upper[lane] = pair;
  __syncthreads();
  // (the upper half's warps sum zeros, never read: the row is lanes 0-255)
  const A s = row_total(warp_sum(hi ? A(0) : pair + upper[lane]), smem, kThreads, (int)threadIdx.x);
  if (threadIdx.x == 0) out[m] = from_acc<T>(s);
}

// Column kernel. Block (32, 8): lane l owns m in [m0, m0 + VEC), warp w takes k = w, w + 8, ... of its split. IL: a
// split's k is tiles of 32 (the block's 4 loads x 8 warps) blockIdx.y, blockIdx.y + splits, ..., else one contiguous
// chunk (as the row kernel's).
template <class T, int VEC, bool IL>
__global__ void __launch_bounds__(kThreads) sum_cols_kernel(T* __restrict__ out,        // [M]
                                                            acc_t<T>* __restrict__ ws,  // [splits, M]
                                                            const T* __restrict__ x,    // [M, K] strided
                                                            int64_t M, int64_t K, int64_t sM, int64_t sK,
                                                            int64_t chunk) {
  using A = acc_t<T>;
  __shared__ A smem[8][32 * VEC + 1];
  const int64_t m0 = ((int64_t)blockIdx.x * 32 + threadIdx.x) * VEC;
  const int64_t k_begin = (int64_t)blockIdx.y * (IL ? 32 : chunk);
  const int64_t k_end = IL ? K : std::min<int64_t>(K, k_begin + chunk);
  const int64_t adv = IL ? (int64_t)gridDim.y * 32 : 32;
  if (gridDim.y > 1) pdl_trigger();  // (as the row kernel's)
  A acc[2][VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) acc[0][e] = acc[1][e] = A(0);
  if (m0 + VEC <= M) {
    const T* col = x + m0 * sM;
    int64_t k = k_begin + threadIdx.y;
    for (; k + 24 < k_end; k += adv) {  // four independent loads in flight per lane (64 bytes at VEC = 16 / sizeof(T))
      Vec<T, VEC> v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (VEC > 1) {
          v[u] = *reinterpret_cast<const Vec<T, VEC>*>(col + (k + 8 * u) * sK);
        } else {
          v[u].v[0] = col[(k + 8 * u) * sK];
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[u & 1][e] += to_acc(v[u].v[e]);
    }
    for (; k < k_end; k += 8) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[0][e] += to_acc(col[k * sK + e * sM]);
    }
  } else if (m0 < M) {  // the last, partial group of columns
    const auto add_row = [&](int64_t k) {
      for (int e = 0; e < VEC && m0 + e < M; ++e) acc[0][e] += to_acc(x[(m0 + e) * sM + k * sK]);
    };
    int64_t k = k_begin + threadIdx.y;  // the main path's walk over k, one row at a time
    for (; k + 24 < k_end; k += adv)
      for (int u = 0; u < 4; ++u) add_row(k + 8 * u);
    for (; k < k_end; k += 8) add_row(k);
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) smem[threadIdx.y][threadIdx.x * VEC + e] = acc[0][e] + acc[1][e];
  __syncthreads();
  // 256 threads combine the 8 warps' partial sums for the block's 32 * VEC columns.
  for (int c = threadIdx.y * 32 + threadIdx.x; c < 32 * VEC; c += kThreads) {
    const int64_t m = (int64_t)blockIdx.x * 32 * VEC + c;
    if (m >= M) break;
    A s = A(0);
#pragma unroll
    for (int w = 0; w < 8; ++w) s += smem[w][c];
    if (gridDim.y == 1) out[m] = from_acc<T>(s);
    else ws[(int64_t)blockIdx.y * M + m] = s;
  }
}

// The splits' partial sums, added in a fixed order (the same bits every run), by many threads: one thread adding a
// column of ws alone was a chain of dependent L2 loads after the main kernel, 528 of them for a full reduction.
// Launched as a programmatic dependent of the main kernel (its launch overlaps that kernel's last CTAs). H100, clean
// flush, % of copy at [16384, 4096], one thread a column of ws -> this (and the column kernel's four loads in flight):
// sum() bf16 66.8 -> 88.2-88.5 (torch.compile 87.0), fp32 80.4 -> 94.1-95.4 (95.1); sum(dim=0) bf16 81.7 -> 87.3-87.6
// (80.8), fp32 94.6 -> 95.4 (93.4); with MYOPS_PDL=0, sum(dim=0) bf16 83.7 (session 34).
// Block (32, 8), M >= 32: lane -> m, warp w adds splits w, w + 8, ...; the 8 warps' sums meet in shared memory.
template <class T>
__global__ void __launch_bounds__(kThreads) sum_splits_kernel(T* __restrict__ out,              // [M]
                                                              const acc_t<T>* __restrict__ ws,  // [splits, M]
                                                              int64_t M, int64_t splits) {
  using A = acc_t<T>;
  __shared__ A smem[8][33];
  pdl_wait();
  const int64_t m = (int64_t)blockIdx.x * 32 + threadIdx.x;
  A s = A(0);
  if (m < M)
#pragma unroll 4
    for (int64_t i = threadIdx.y; i < splits; i += 8) s += ws[i * M + m];
  smem[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && m < M) {
    A t = A(0);
#pragma unroll
    for (int w = 0; w < 8; ++w) t += smem[w][threadIdx.x];
    out[m] = from_acc<T>(t);
  }
}

// The same for M < 32 (a full reduction: M = 1): one block per m, its 256 threads add splits t, t + 256, ..., then
// the warps' shuffles and the block's 8 warp sums in order.
template <class T>
__global__ void __launch_bounds__(kThreads) sum_splits_block_kernel(T* __restrict__ out,              // [M]
                                                                    const acc_t<T>* __restrict__ ws,  // [splits, M]
                                                                    int64_t M, int64_t splits) {
  using A = acc_t<T>;
  __shared__ A smem[kThreads / 32];
  pdl_wait();
  const int64_t m = blockIdx.x;
  A s = A(0);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < splits; i += kThreads) s += ws[i * M + m];
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    A t = A(0);
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) t += smem[w];
    out[m] = from_acc<T>(t);
  }
}

template <class T>
int sum_typed(T* out, const T* x, int64_t M, int64_t K, int64_t sM, int64_t sK, void* workspace, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  const Plan p = make_plan(x, M, K, sM, sK, sizeof(T));
  if (p.gx > 0x7fffffff) return MYOPS_EARG;
  if (p.splits > 1 && workspace == nullptr) return MYOPS_EARG;
  auto* ws = static_cast<acc_t<T>*>(workspace);
  const dim3 grid((unsigned)p.gx, (unsigned)p.splits);
  // MYOPS_SUM_INTERLEAVE: 1 (default) a split's CTAs take interleaved tiles of the reduced dim, so that the grid reads
  // one sweeping window of memory; 0 each CTA one contiguous chunk (A/B). H100, clean flush, % of copy, two rounds
  // against 09bec95 (contiguous chunks), then the knob at 0: sum(dim=0) bf16 87.3 / 87.2 -> 89.0 / 89.0 (0: 87.0),
  // fp32 95.8 / 95.7 -> 97.5 / 97.6 (0: 97.3; the rounded-down splits above); sum() bf16 88.3 / 88.2 -> 90.5 / 90.7
  // (0: 88.2), fp32 94.3 / 94.1 -> 96.4 / 96.4 (0: 94.0) (session 34).
  static const int knob_il = env_knob("MYOPS_SUM_INTERLEAVE", 1, [](int v) { return v == 0 || v == 1; });
  // A split's contiguous chunk of K (unless IL), whole vectors for the row kernel; from here, because in the kernel
  // its 64-bit division by gridDim.y came before the first load (the unsplit fp32 row kernel: 728 -> 536 SASS
  // instructions; no measured change, H100, two rounds: sum(dim=-1) bf16 94.2 / 94.6 -> 94.0 / 94.7, fp32 100.2 /
  // 100.2 -> 100.2 / 100.0, session 35).
  const int64_t chunk = p.rows ? ceil_div(ceil_div(K, p.splits), p.vec) * p.vec : ceil_div(K, p.splits);
  const auto launch = [&](auto il) {
    constexpr bool IL = decltype(il)::value;
    if (p.rows && p.tpr_log2 < 5) {  // (short rows: never split)
      if (p.vec > 1)
        sum_rows_kernel<T, VEC, false, true><<<grid, kThreads, 0, stream>>>(out, ws, x, M, K, sM, p.tpr_log2, chunk);
      else sum_rows_kernel<T, 1, false, true><<<grid, kThreads, 0, stream>>>(out, ws, x, M, K, sM, p.tpr_log2, chunk);
    } else if (p.rows) {
      if (p.vec > 1)
        sum_rows_kernel<T, VEC, IL><<<grid, kThreads, 0, stream>>>(out, ws, x, M, K, sM, p.tpr_log2, chunk);
      else sum_rows_kernel<T, 1, IL><<<grid, kThreads, 0, stream>>>(out, ws, x, M, K, sM, p.tpr_log2, chunk);
    } else {
      if (p.vec > 1) sum_cols_kernel<T, VEC, IL><<<grid, dim3(32, 8), 0, stream>>>(out, ws, x, M, K, sM, sK, chunk);
      else sum_cols_kernel<T, 1, IL><<<grid, dim3(32, 8), 0, stream>>>(out, ws, x, M, K, sM, sK, chunk);
    }
  };
  // MYOPS_SUM_FULL: 1 (default) rows of exactly one pass take sum_full_rows_kernel, 0 the row kernel (A/B).
  // MYOPS_SUM_WIDE: 1 (default) those of 256 threads take sum_wide_rows_kernel, 0 sum_full_rows_kernel (A/B).
  // MYOPS_SUM_FIRST: 1 (default) both load under L2 evict_first, 0 plainly (A/B; H200 bf16 [16384, 4096], the full
  // kernel at 128 threads a row: 94.8-94.9 against 94.4 / 95.2, level).
  static const int knob_full = env_knob("MYOPS_SUM_FULL", 1, [](int v) { return v == 0 || v == 1; });
  static const int knob_wide = env_knob("MYOPS_SUM_WIDE", 1, [](int v) { return v == 0 || v == 1; });
  static const bool first = env_knob("MYOPS_SUM_FIRST", 1, [](int v) { return v == 0 || v == 1; }) == 1;
  if (knob_full == 1 && p.rows && p.splits == 1 && p.vec == VEC && K == ((int64_t)kRowLoads * VEC << p.tpr_log2)) {
    if (p.tpr_log2 == 8 && knob_wide == 1) {
      sum_wide_rows_kernel<T, VEC><<<grid, 2 * kThreads, 0, stream>>>(out, x, sM, first);
      return launch_status();
    }
    const auto full = [&](auto kernel) {
      kernel<<<grid, kThreads, 0, stream>>>(out, x, M, sM, first);
      return launch_status();
    };
    switch (p.tpr_log2) {
      case 2: return full(sum_full_rows_kernel<T, VEC, 4>);
      case 3: return full(sum_full_rows_kernel<T, VEC, 8>);
      case 4: return full(sum_full_rows_kernel<T, VEC, 16>);
      case 5: return full(sum_full_rows_kernel<T, VEC, 32>);
      case 6: return full(sum_full_rows_kernel<T, VEC, 64>);
      case 7: return full(sum_full_rows_kernel<T, VEC, 128>);
      default: return full(sum_full_rows_kernel<T, VEC, 256>);
    }
  }
  if (knob_il == 1 && p.splits > 1) launch(std::true_type{});
  else launch(std::false_type{});
  if (p.splits == 1) return launch_status();
  const int rc = launch_status();
  if (rc) return rc;
  if (M < 32)
    return launch_pdl(sum_splits_block_kernel<T>, dim3((unsigned)M), dim3(kThreads), stream, out, ws, M, p.splits);
  return launch_pdl(sum_splits_kernel<T>, dim3((unsigned)ceil_div(M, 32)), dim3(32, 8), stream, out, ws, M, p.splits);
}

int64_t elem_size(int dtype) { return dtype == MYOPS_F64 ? 8 : dtype == MYOPS_F32 ? 4 : 2; }
}  // namespace

// Bytes of workspace myops_sum_cuda needs for this problem on the current device (0: none).
extern "C" int64_t myops_sum_workspace_cuda(const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype) {
  const Plan p = make_plan(x, M, K, sM, sK, elem_size(dtype));
  return p.splits <= 1 ? 0 : p.splits * M * (dtype == MYOPS_F64 ? 8 : 4);
}

extern "C" int myops_sum_cuda(void* out, const void* x, int64_t M, int64_t K, int64_t sM, int64_t sK, int dtype,
                              void* workspace, void* stream) {
  if (M <= 0) return MYOPS_OK;
  return dispatch_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    return sum_typed<T>(static_cast<T*>(out), static_cast<const T*>(x), M, K, sM, sK, workspace,
                        static_cast<cudaStream_t>(stream));
  });
}
