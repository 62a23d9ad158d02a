// rows.cuh: the engine of the row-wise ops (layer_norm, rms_norm, add_rms_norm, softmax, log_softmax,
// cross_entropy and their backward passes). A problem is M rows of N columns; every operand is a myops_operand
// (any row and column stride, so strided rows run without a copy).
//
// Work split (Plan, host side):
//   short rows:  a warp per row, 8 rows per CTA (a row's reductions are warp shuffles only);
//   other rows:  a CTA per row; when the staged row would exceed kStageBudget bytes, a thread block cluster of up
//                to 8 CTAs (sm_90) splits it into chunks and combines partial reductions through distributed
//                shared memory, so a 262144-wide fp32 row still lives on chip;
//   persistent:  the grid is what fits on the chip at once; each row group loops over rows.
// Staging (resident plans): every thread copies its slots (16-byte vectors) of the CTA's chunk of each input into
// shared memory with cp.async -- the whole chunk is in flight at once -- then every pass of the op (statistics,
// output) reads shared memory, so HBM sees each input once and each output once. A thread only ever reads back the
// slots it staged itself, so no barrier guards the buffers. When even a cluster cannot hold the row, or the op needs
// a single pass (cross_entropy), the plan streams (resident = 0): each pass re-reads global memory. With two
// staging buffers (nbuf), the next row's cp.async is in flight while this row is reduced and written.
// Role: since the register fast path (regrow.cuh) handles contiguous, aligned rows (split over clusters, up to
// 262144-wide rows forward and backward), this engine serves what that path cannot: strided or misaligned rows, N not
// a multiple of the 16-byte vector, fp64, and rows longer than 16 CTAs hold. It is correct at every row length but slower (42-75% of
// copy bandwidth at [16384, 4096], 14-38% on long rows, H200; BENCHMARKS.md).
#pragma once
#include <cooperative_groups.h>

#include "common.cuh"

namespace myops {
namespace rows {

namespace cg = cooperative_groups;

constexpr int kMaxCluster = 8;               // portable cluster size on sm_90
constexpr int kWarpRows = 8;                 // rows per CTA with a warp per row
constexpr int64_t kWarpRowBytes = 4096;      // staged bytes of a row up to which a warp handles it
constexpr int64_t kStageBudget = 48 << 10;   // staged bytes per CTA before the row is split across a cluster
constexpr int64_t kMaxSmem = 200 << 10;      // staged + accumulator bytes per CTA before streaming instead
constexpr int kSlotsPerThread = 4;           // 16-byte slots per thread a CTA is sized for
constexpr int kMaxThreads = 512;             // per CTA: leaves 128 registers per thread (1024 would cap at 64).
// Kernels that fit in 64 registers declare __launch_bounds__(kMaxThreads, 2) so that four 256-thread CTAs share an
// SM; the backward kernels and layer_norm's forward (more live values per 16-byte slot) would spill at 64.

struct Plan {
  int threads;       // per CTA
  int rows_per_cta;  // kWarpRows with a warp per row, else 1
  int cluster;       // CTAs per row
  int resident;      // 1: inputs staged in shared memory
  int64_t chunk;     // columns per CTA (a multiple of 16: whole 16-byte vectors for every dtype)
  int64_t buf;       // elements per staging buffer (chunk rounded so buffers stay 16-byte aligned)
  int nstage;        // staged inputs
  int nacc;          // per-column accumulators (weight gradients), 0 if none
  int acc_smem;      // 1: accumulators in shared memory, 0: in the global workspace
  int acc_wide;      // 1: the shared-memory accumulators are fp64 (rounded once, into the workspace)
  int nbuf;          // staging buffers per row slot: 2 = the next row's copy is in flight during this row's work
  int64_t groups;    // row groups in the grid (grid.x = groups * cluster)
  int64_t smem;      // dynamic shared memory per CTA, bytes
};

// Pair<A>: the value every reduction carries (a sum, two sums, or the online-softmax (max, sum of exp)).
template <class A> struct Pair { A a, b; };

struct AddOp {
  template <class A> __device__ __forceinline__ Pair<A> operator()(Pair<A> x, Pair<A> y) const {
    return {x.a + y.a, x.b + y.b};
  }
};

// Two sums at once in warp_sum, and so in block_sum (common.cuh: one pair of barriers for both).
template <class A> __device__ __forceinline__ Pair<A> warp_sum(Pair<A> v) {
  return {myops::warp_sum(v.a), myops::warp_sum(v.b)};
}

constexpr float kLog2e = 1.44269504088896341f;
// 2^t on the MUFU with subnormal results flushed to 0 (ex2.approx.ftz, 2 ulp); 2^-inf = 0, NaN stays NaN.
__device__ __forceinline__ float exp2_ftz(float t) {
  float p;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(p) : "f"(t));
  return p;
}

// exp for the statistics and outputs: fp32 uses exp_f32 (an fp32 output must not carry __expf's argument-scaled
// error), half types exp_ftz (their rounding hides its error), fp64 exp.
// exp(x) for fp32 outputs in six instructions: 2^t on the MUFU (2 ulp) with t = x log2(e) rounded, times
// (1 + ln2 * c) where c is t's rounding error recovered by FMA (plus the error of log2(e) in fp32). About 2-3 ulp,
// like expf's, at a third of its cost; results below 2^-126 flush to 0 (an absolute error under 1.2e-38).
__device__ __forceinline__ float exp_f32(float x) {
  x = x < -104.f ? -104.f : x;  // exp(-inf) = 0, not inf - inf = NaN below; a NaN x stays NaN
  const float t = x * kLog2e;
  const float c = fmaf(x, 1.925963033500e-8f, fmaf(x, kLog2e, -t));
  return exp2_ftz(t) * fmaf(c, 0.693147180559945309f, 1.0f);
}

// exp(x) as 2^(x log2 e): two instructions, where __expf without -ftz compiles to eight (range checks and a rescale
// for subnormal results, which only move results below 2^-126 off 0); exp(-inf) = 0, NaN stays NaN.
__device__ __forceinline__ float exp_ftz(float x) { return exp2_ftz(x * kLog2e); }

template <class T> __device__ __forceinline__ acc_t<T> exp_of(acc_t<T> x) {
  if constexpr (sizeof(T) == 2) return exp_ftz(x);
  else if constexpr (sizeof(T) == 4) return exp_f32(x);
  else return exp(x);
}
// a / b correctly rounded (fp32, away from overflow and from quotients under about 2^-102 / b, whose residual a - q b
// is itself subnormal: there up to an ulp off) given inv = 1 / b correctly rounded: one FMA correction of a * inv
// (Markstein) instead of the division's instruction sequence per element.
__device__ __forceinline__ float div_rn(float a, float b, float inv) {
  const float q = a * inv;
  return fmaf(fmaf(-q, b, a), inv, q);
}
template <class T> __device__ __forceinline__ acc_t<T> log_of(acc_t<T> x) {
  if constexpr (sizeof(T) == 8) return log(x);
  else return logf(x);
}
// a * b rounded on its own: never contracted into an FMA with a later add. Where a product is summed in one pass
// and subtracted from the same sum in another (g - mean(g)), contraction in only one of them would leave the
// product's rounding residual instead of an exact 0.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// 1 / sqrt(v): correctly rounded sqrt and division (1 ulp) rather than rsqrtf's 2 ulp (fp32 and fp64 rows).
template <class A> __device__ __forceinline__ A inv_sqrt(A v) { return A(1) / sqrt(v); }
// A row's 1 / sqrt(v) for output type T: rsqrtf (2 ulp) for 16-bit outputs, whose rounding (2^-9 / 2^-12) dwarfs
// it; inv_sqrt else. A one-warp row's correctly rounded form (a square root, a division and their slow-path tests)
// is about 20 instructions, 3% of layer_norm's bf16 row at N = 1024 (H200, % of copy, [65536, 1024]: 90.8 -> 91.3).
// MYOPS_RR_RSQRT=0: inv_sqrt everywhere (A/B).
#ifndef MYOPS_RR_RSQRT
#define MYOPS_RR_RSQRT 1
#endif
template <class T> __device__ __forceinline__ acc_t<T> row_rsqrt(acc_t<T> v) {
  if constexpr (MYOPS_RR_RSQRT && sizeof(T) == 2) return rsqrtf(v);
  else return inv_sqrt(v);
}

// The elements of row p (of n) before its first 16-byte boundary: a misaligned row's head, taken one element a
// thread beside the 16-byte loads of the rest (0 for an aligned row; cross_entropy's fold kernel, softmax's
// mis_fwd_kernel).
template <class T> __device__ __forceinline__ int head_elems(const T* p, int n) {
  return min(n, (int)(((16u - (unsigned)(reinterpret_cast<uintptr_t>(p) & 15u)) & 15u) / sizeof(T)));
}

// Loads 16-byte slot j of a contiguous per-column vector (weight, bias) starting at column c0 (a multiple of 16).
template <class T> __device__ __forceinline__ void get_param(const T* w, bool vec, int64_t j, int nv,
                                                             acc_t<T> (&v)[16 / sizeof(T)]) {
  constexpr int VEC = 16 / sizeof(T);
  if (vec && nv == VEC) {
    const Vec<T, VEC> t = *reinterpret_cast<const Vec<T, VEC>*>(w + j * VEC);
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = to_acc(t.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = e < nv ? to_acc(w[j * VEC + e]) : acc_t<T>(0);
  }
}
template <class A> __device__ __forceinline__ A neg_inf() { return -INFINITY; }
template <class A> __device__ __forceinline__ A nan_of() { return A(NAN); }

// (m, s): s = sum of exp(v - m) over the values seen, m their maximum. Combining rescales the smaller side.
template <class T> struct OnlineSoftmaxOp {
  using A = acc_t<T>;
  __device__ __forceinline__ Pair<A> operator()(Pair<A> x, Pair<A> y) const {
    const A m = x.a > y.a ? x.a : y.a;
    if (m == neg_inf<A>()) return {m, x.b + y.b};  // nothing finite yet: avoid exp(-inf - -inf) = NaN
    return {m, x.b * exp_of<T>(x.a - m) + y.b * exp_of<T>(y.a - m)};
  }
};

// ---- cp.async: global -> shared without registers; every 16-byte copy of the chunk in flight at once ------------
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// This thread's place in the plan.
struct Ctx {
  const Plan& p;
  int64_t group;  // row group: rows group, group + groups, ...
  int rank;       // CTA rank in the cluster (chunk index)
  int tid, nthr;  // index and count of the threads sharing a row
  int slot;       // row slot of the CTA (warp index with a warp per row, else 0)
  int64_t c0, n;  // this CTA's columns of the row: [c0, c0 + n)
  int parity = 0; // alternates the cluster reduction slot
  int iter = 0;   // rows this thread has staged (selects the staging buffer)

  __device__ explicit Ctx(const Plan& plan, int64_t N) : p(plan) {
    rank = (int)(blockIdx.x % (unsigned)p.cluster);
    const int64_t cta_group = blockIdx.x / (unsigned)p.cluster;
    if (p.rows_per_cta > 1) {
      slot = threadIdx.x >> 5;
      tid = threadIdx.x & 31;
      nthr = 32;
      group = cta_group * p.rows_per_cta + slot;
    } else {
      slot = 0;
      tid = threadIdx.x;
      nthr = blockDim.x;
      group = cta_group;
    }
    c0 = (int64_t)rank * p.chunk;
    n = c0 >= N ? 0 : (N - c0 < p.chunk ? N - c0 : p.chunk);
  }
  __device__ int64_t first_row() const { return group; }
  __device__ int64_t row_step() const { return p.groups * p.rows_per_cta; }

  // Combines v over the row: the warp (shuffles), the CTA (one shared slot per warp), then the cluster (each CTA's
  // total read by every CTA through distributed shared memory, in rank order, so all CTAs agree bit for bit).
  template <class A, class Op> __device__ Pair<A> reduce(Pair<A> v, Op op, Pair<A>* red /* smem [32] */,
                                                         Pair<A>* cred /* smem [2] */) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const Pair<A> w{__shfl_xor_sync(0xffffffffu, v.a, o), __shfl_xor_sync(0xffffffffu, v.b, o)};
      v = op(v, w);
    }
    if (p.rows_per_cta > 1) return v;
    const int nwarps = blockDim.x >> 5;
    __syncthreads();  // red may still be read by the previous reduction
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < nwarps; ++w) v = op(v, red[w]);
    if (p.cluster > 1) {
      cg::cluster_group cluster = cg::this_cluster();
      if (threadIdx.x == 0) cred[parity] = v;
      cluster.sync();  // also orders this slot's previous readers (two reductions ago) before the write above
      v = *cluster.map_shared_rank(&cred[parity], 0);
      for (int r = 1; r < p.cluster; ++r) v = op(v, *cluster.map_shared_rank(&cred[parity], r));
      parity ^= 1;
    }
    return v;
  }

  // Before exit: no CTA of the cluster may leave while another still reads its shared memory.
  __device__ void finish() {
    if (p.cluster > 1) cg::this_cluster().sync();
  }
};

// One row's chunk of NIN inputs: staged (resident) or read from global memory on every pass. With two staging
// buffers, stage() also starts copying the row group's next row into the other buffer, so that HBM stays busy
// while this row is reduced and written.
template <class T, int NIN> struct Tile {
  static constexpr int VEC = 16 / sizeof(T);
  using A = acc_t<T>;
  const myops_operand* in;  // the inputs (to address the next row)
  Ctx* c;
  const T* g[NIN];  // element (r, c0) of each input
  int64_t cs[NIN];
  bool vec[NIN];    // 16-byte loads allowed (aligned, unit column stride)
  T* s[NIN];        // this row's staging buffers (resident)
  unsigned char* smem;
  int64_t n, r;
  int tid, nthr;
  bool resident;

  // vec_mask bit k: input k's base pointer and row stride allow 16-byte loads when its column stride is 1.
  __device__ Tile(Ctx& ctx, const myops_operand (&ins)[NIN], int vec_mask, int64_t row, unsigned char* sm)
      : in(ins), c(&ctx), smem(sm), r(row) {
    n = ctx.n;
    tid = ctx.tid;
    nthr = ctx.nthr;
    resident = ctx.p.resident;
#pragma unroll
    for (int k = 0; k < NIN; ++k) {
      g[k] = row_ptr(k, row);
      cs[k] = in[k].col_stride;
      vec[k] = (vec_mask >> k) & 1;
      s[k] = buffer(k, ctx.p.nbuf > 1 ? (ctx.iter & 1) : 0);
    }
  }
  __device__ const T* row_ptr(int k, int64_t row) const {
    return static_cast<const T*>(in[k].ptr) + row * in[k].row_stride + c->c0 * in[k].col_stride;
  }
  __device__ T* buffer(int k, int b) const {
    return reinterpret_cast<T*>(smem) + (((int64_t)b * c->p.rows_per_cta + c->slot) * c->p.nstage + k) * c->p.buf;
  }
  __device__ int64_t slots() const { return ceil_div(n, VEC); }
  __device__ int valid(int64_t j) const { return n - j * VEC >= VEC ? VEC : (int)(n - j * VEC); }

  // Copies this thread's slots of row `row`'s inputs < nstage into buffer b (cp.async where aligned).
  __device__ void copy(int64_t row, int b, int nstage) const {
    for (int64_t j = tid; j < slots(); j += nthr) {
      const int nv = valid(j);
#pragma unroll
      for (int k = 0; k < NIN; ++k) {
        if (k >= nstage) break;
        const T* src = row_ptr(k, row);
        T* dst = buffer(k, b);
        if (vec[k] && nv == VEC) {
          cp_async16(dst + j * VEC, src + j * VEC);
        } else {
          for (int e = 0; e < nv; ++e) dst[j * VEC + e] = src[(j * VEC + e) * cs[k]];
        }
      }
    }
  }

  // Makes this row's inputs < nstage available in shared memory (no-op when streaming); M bounds the prefetch.
  __device__ void stage(int64_t M, int nstage = NIN) {
    if (!resident) return;
    if (c->p.nbuf == 1) {
      copy(r, 0, nstage);
      cp_async_commit();
      cp_async_wait<0>();
    } else {
      const int b = c->iter & 1;
      if (c->iter == 0) {
        copy(r, b, nstage);
        cp_async_commit();
      }
      const int64_t next = r + c->row_step();
      if (next < M) copy(next, b ^ 1, nstage);
      cp_async_commit();  // possibly empty: keeps "all groups but the newest" meaning "this row"
      cp_async_wait<1>();
    }
    c->iter++;
  }

  // Slot j of input k in the accumulation type; lanes past the row's end get `fill`.
  __device__ __forceinline__ void get(int k, int64_t j, A (&v)[VEC], A fill = A(0), bool staged = true) const {
    const int nv = valid(j);
    if (resident && staged) {
      if (nv == VEC) {
        const Vec<T, VEC> t = *reinterpret_cast<const Vec<T, VEC>*>(s[k] + j * VEC);
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = to_acc(t.v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = e < nv ? to_acc(s[k][j * VEC + e]) : fill;
      }
    } else if (vec[k] && nv == VEC) {
      const Vec<T, VEC> t = *reinterpret_cast<const Vec<T, VEC>*>(g[k] + j * VEC);
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = to_acc(t.v[e]);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = e < nv ? to_acc(g[k][(j * VEC + e) * cs[k]]) : fill;
    }
  }
};

// Where one output row's chunk goes.
template <class T> struct OutRow {
  static constexpr int VEC = 16 / sizeof(T);
  T* g;
  int64_t cs;
  bool vec;
  __device__ OutRow(const myops_out_operand& o, bool vec_ok, const Ctx& c, int64_t r)
      : g(static_cast<T*>(o.ptr) + r * o.row_stride + c.c0 * o.col_stride), cs(o.col_stride), vec(vec_ok) {}
  __device__ __forceinline__ void put(int64_t j, int nv, const acc_t<T> (&v)[VEC]) const {
    if (vec && nv == VEC) {
      Vec<T, VEC> t;
#pragma unroll
      for (int e = 0; e < VEC; ++e) t.v[e] = from_acc<T>(v[e]);
      *reinterpret_cast<Vec<T, VEC>*>(g + j * VEC) = t;
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e)  // unrolled with a guard: a runtime bound would put v in local memory
        if (e < nv) g[(j * VEC + e) * cs] = from_acc<T>(v[e]);
    }
  }
};

// Per-column accumulators of a backward pass (weight gradients): this row group's columns of each of nacc
// arrays, in shared memory when they fit (fp64 when Plan::acc_wide, else acc_t<T>; flushed to the workspace at the
// end) or directly in the workspace ws [nacc][groups * rows_per_cta][N] (acc_t<T>). Each thread touches only the
// columns of its own slots.
template <class T> struct ColAcc {
  using A = acc_t<T>;
  A* narrow;         // the accumulators in acc_t<T> (shared memory or the workspace), or null
  double* wide;      // the fp64 accumulators in shared memory, or null
  int64_t stride;    // between the nacc arrays
  A* ws;             // this group's row of the workspace, column c0
  int64_t ws_stride;
  __device__ ColAcc(const Ctx& c, A* workspace, unsigned char* acc_smem, int64_t N) : narrow(nullptr), wide(nullptr) {
    const int64_t owners = c.p.groups * c.p.rows_per_cta;
    ws = workspace + c.group * N + c.c0;
    ws_stride = owners * N;
    const int64_t off = (int64_t)c.slot * c.p.nacc * c.p.chunk;
    if (c.p.acc_smem) {
      if (c.p.acc_wide) wide = reinterpret_cast<double*>(acc_smem) + off;
      else narrow = reinterpret_cast<A*>(acc_smem) + off;
      stride = c.p.chunk;
    } else {
      narrow = ws;
      stride = ws_stride;
    }
  }
  // array k, column i (of the CTA's chunk) += v
  __device__ __forceinline__ void add(int k, int64_t i, double v) const {
    if (wide) wide[k * stride + i] += v;
    else narrow[k * stride + i] += A(v);
  }
  // zero this thread's columns (call before the row loop)
  __device__ void zero(const Ctx& c, int nacc) const {
    constexpr int VEC = 16 / sizeof(T);
    for (int64_t j = c.tid; j < ceil_div(c.n, VEC); j += c.nthr)
      for (int k = 0; k < nacc; ++k)
        for (int e = 0; e < VEC && j * VEC + e < c.n; ++e) {
          if (wide) wide[k * stride + j * VEC + e] = 0.0;
          else narrow[k * stride + j * VEC + e] = A(0);
        }
  }
  __device__ void flush(const Ctx& c, int nacc) const {
    constexpr int VEC = 16 / sizeof(T);
    if (!c.p.acc_smem) return;
    for (int64_t j = c.tid; j < ceil_div(c.n, VEC); j += c.nthr)
      for (int k = 0; k < nacc; ++k)
        for (int e = 0; e < VEC && j * VEC + e < c.n; ++e) {
          const int64_t i = k * stride + j * VEC + e;
          ws[k * ws_stride + j * VEC + e] = wide ? A(wide[i]) : narrow[i];
        }
  }
};

// ---- host side -----------------------------------------------------------------------------------------------

inline bool vec_ok(const void* p, int64_t row_stride, int64_t col_stride, int64_t M, int64_t N, int elem) {
  const int vec = 16 / elem;
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (col_stride == 1 || N <= 1) && (M <= 1 || row_stride % vec == 0);
}

// Whether rows of a and b ([M, N] of elem bytes, both of unit column stride) start as far from a 16-byte boundary as
// each other, row by row: their misaligned rows' heads and tails are the same columns (cross_entropy's backward,
// softmax's mis kernels).
inline bool same_phase(const void* a, int64_t as, int64_t acs, const void* b, int64_t bs, int64_t bcs, int64_t M,
                       int elem) {
  const auto addr = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
  return acs == 1 && bcs == 1 && (addr(a) - addr(b)) % 16 == 0 && (M <= 1 || (as - bs) * elem % 16 == 0);
}

// The work split for M rows of N elements of `elem` bytes with nstage staged inputs and nacc per-column
// accumulators (of acc_elem bytes). resident = false asks for a streaming plan (single-pass ops).
inline Plan make_plan(int64_t M, int64_t N, int elem, int nstage, int nacc, int acc_elem, bool want_resident) {
  Plan p{};
  p.nstage = nstage;
  p.nacc = nacc;
  const int vec = 16 / elem;
  const int64_t row_bytes = (int64_t)nstage * N * elem;
  if (want_resident && row_bytes <= kWarpRowBytes && N <= 1024) {
    p.threads = 32 * kWarpRows;
    p.rows_per_cta = kWarpRows;
    p.cluster = 1;
  } else {
    p.rows_per_cta = 1;
    p.cluster = 1;
    if (want_resident) {
      while (p.cluster < kMaxCluster && row_bytes > kStageBudget * p.cluster) p.cluster *= 2;
    } else {
      // streaming: split long rows over a cluster only when there are too few rows to fill the chip
      const int64_t target = 2LL * sm_count();
      while (p.cluster < kMaxCluster && M * p.cluster < target && N / (2 * p.cluster) >= 8192) p.cluster *= 2;
    }
  }
  p.chunk = ceil_div(ceil_div(N, p.cluster), 16) * 16;
  p.buf = ceil_div(p.chunk * elem, 16) * 16 / elem;
  if (p.rows_per_cta == 1) {
    const int64_t slots = ceil_div(p.chunk, vec);
    const int64_t t = ceil_div(ceil_div(slots, kSlotsPerThread), 32) * 32;
    p.threads = (int)std::min<int64_t>(kMaxThreads, std::max<int64_t>(128, t));
  }
  const int64_t stage_bytes = (int64_t)p.rows_per_cta * nstage * p.buf * elem;
  int64_t acc_bytes = (int64_t)p.rows_per_cta * nacc * p.chunk * acc_elem;
  p.resident = want_resident && stage_bytes <= kMaxSmem;
  p.nbuf = p.resident && 2 * stage_bytes + acc_bytes <= kMaxSmem ? 2 : 1;
  const int64_t staged = p.resident ? p.nbuf * stage_bytes : 0;
  p.acc_smem = nacc > 0 && staged + acc_bytes <= kMaxSmem;
  // fp64 accumulators where they fit beside the same staging: in fp32 a group's column sum of many rows rounds at the
  // magnitude of its partial sums, which matters where the column's total cancels (as colsum.cu's final sum did for
  // add_rms_norm fp32 [194, 2]; that case, a few rows per group, was fixed by colsum's fp64 sums alone)
  const int64_t wide_bytes = acc_bytes / acc_elem * 8;
  p.acc_wide = p.acc_smem && acc_elem < 8 && staged + wide_bytes <= kMaxSmem;
  if (p.acc_wide) acc_bytes = wide_bytes;
  p.smem = staged + (p.acc_smem ? acc_bytes : 0);
  p.groups = 0;  // set by finish_plan
  return p;
}

// Sizes the persistent grid for `kernel`: as many row groups as fit on the chip at once (never more than needed).
template <class K> int finish_plan(Plan& p, K kernel, int64_t M) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return (int)e;
  if (p.smem > 0) {  // opt in to what the plan needs: above 48 KB (static shared memory included) it must
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.smem);
    if (e != cudaSuccess) return (int)e;
  }
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, p.threads, (size_t)p.smem);
  if (e != cudaSuccess) return (int)e;
  if (per_sm < 1) return MYOPS_EARG;
  const int64_t fit = std::max<int64_t>(1, (int64_t)per_sm * sm_count() / p.cluster);
  p.groups = std::min<int64_t>(fit, ceil_div(std::max<int64_t>(M, 1), p.rows_per_cta));
  return MYOPS_OK;
}

// Launches kernel<<<groups * cluster, threads, smem, stream>>>(args...) as clusters of p.cluster CTAs.
template <class... KArgs, class... Args>
int launch(const Plan& p, void (*kernel)(KArgs...), cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(p.groups * p.cluster));
  cfg.blockDim = dim3((unsigned)p.threads);
  cfg.dynamicSmemBytes = (size_t)p.smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  if (p.cluster > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)p.cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) return (int)e;
  return launch_status();
}

// Bytes of shared memory before the accumulators (the staging buffers).
__host__ __device__ inline int64_t staged_bytes(const Plan& p, int elem) {
  return p.resident ? (int64_t)p.nbuf * p.rows_per_cta * p.nstage * p.buf * elem : 0;
}

inline int elem_size(int dtype) { return dtype == MYOPS_F64 ? 8 : dtype == MYOPS_F32 ? 4 : 2; }

}  // namespace rows
}  // namespace myops
