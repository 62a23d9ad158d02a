// rope: rotary position embedding in the Hugging Face Llama form   out = x * cos + rotate_half(x) * sin
//
//   x, out [B, S, H, D]  any strides for B, S, H (D contiguous). A heads-first tensor [B, H, S, D] is the same
//                        problem with its S and H strides swapped (the registration layer does that), as is out.
//   cos, sin [B, S, D]   any strides (stride 0 over the batch positions they are broadcast over).
//
// Every element d1 pairs with one partner d2: NeoX/Llama d2 = d1 + D/2 (d1 < D/2); GPT-J (interleaved)
// (d1, d2) = (2i, 2i + 1). With (a, b) = (x[d1], x[d2]):
//   forward:  out[d1] = a cos[d1] - b sin[d1]      out[d2] = b cos[d2] + a sin[d2]
//   backward: dx[d1]  = a cos[d1] + b sin[d2]      dx[d2]  = b cos[d2] - a sin[d1]     (a, b: the gradient)
// The backward is the transposed rotation, i.e. the forward with sin'[d1] = -sin[d2] and sin'[d2] = -sin[d1]:
// the kernel's BWD variant (rotate<.., BWD>) reads the partner's sin and flips the signs in its formula.
//
// Bandwidth: x is read once and out written once; cos/sin ([B, S, D], 1/H of x) are what may be re-read. Two kernels:
//
// The flat kernel (rope_flat_kernel: fp32 and 16-bit 16-byte layouts, the default) gives each thread one 16-byte
// output vector (of K heads at one position), reading cos/sin per thread, mostly from L1: about 30 registers, so
// the SMs hold their full 2048 threads. H200, % of copy, forward [S, H, D] / heads first, register kernel -> flat
// kernel: bf16 86.0 / 83.3 -> 90.2 / 90.5, fp32 94.8 / 90.0 -> 96.2 / 94.6; forward+backward bf16 87.2 / 84.3 ->
// 91.2 / 91.5, fp32 95.2 / 90.4 -> 96.5 / 95.5 (torch.compile in the same runs: 94.6 / 93.6 forward, 90.7 / 89.8
// forward+backward bf16; fp32 99.6 / 93.0, 97.6 / 93.4). Then the 16-bit products as one FMA and the partner's sign
// flipped on its packed words (158 instructions per thread instead of about 170): bf16 forward 90.9 / 90.8,
// forward+backward 92.1 / 92.1. A thread per vector pair (the partner's loads and conversions shared; 40 registers,
// 106 instructions per 16 bytes): 90.9 / 89.1, fp32 95.4 / 93.0 (own vectors 96.0 / 94.7), not taken. Then its
// loads under the L2 evict_last policy (as the row ops' and elementwise ops' forwards; MYOPS_L2_LAST_MB), plain ->
// hinted, means of two rounds: forward bf16 90.4 / 90.4 -> 91.1 / 91.3, fp32 96.2 / 94.6 -> 98.9 / 95.7;
// forward+backward bf16 91.3 / 91.4 -> 91.8 / 92.0, fp32 96.6 / 95.6 -> 99.1 / 96.4.
//
// The register kernel (rope_kernel: fp64, layouts without 16-byte vectors, indices over 2^31) gives a team of tx
// threads one (b, s) position and one group of heads: it loads that position's cos/sin slice once into registers
// (in T, converted where used) and reuses it for every head it visits (h = g, g + G, ...), two heads' loads in
// flight at a time. Its 16-bit variant holds 119 registers (512 threads per SM), which left HBM waiting on its
// loads (Nsight Compute, bf16 [S, H, D]: 0.7 eligible warps per scheduler, long-scoreboard stalls first). (Held in
// fp32, the 16-bit kernel took 127 registers, and computing the team's position took two 64-bit divisions; H200,
// bf16 forward, % of copy, [S, H, D] / heads first, with both changes: 79.9 / 76.7 -> 84.5 / 80.9, 86.0 / 83.2
// with the waves below; fp32 94.6 / 89.7 -> 91.8 / 86.9 at 94 registers, 94.9 / 90.2 held to 80.) Thread c of a
// team owns two 16-byte vectors of a row of D: NeoX the vectors at c*VEC and D/2 + c*VEC (element e of one pairs
// with element e of the other), interleaved the adjacent vectors at 2c*VEC and 2c*VEC + VEC (pairs inside each
// vector). A row of D is one contiguous span per half, so a team's loads and stores cover whole 32-byte sectors.
// The number of head groups G is chosen so that the grid fills the chip. Layouts the vector path cannot take (D
// not a multiple of 2*VEC, misaligned pointers or strides, strided cos/sin rows) run it with VEC = 1: one pair per
// thread and head.
//
// Measured and not taken (H200, bf16 forward [S, H, D] / heads first, % of copy, against the register kernel's
// 86 / 83): the register kernel with the next head group's rows prefetched into L2 (cp.async.bulk.prefetch) 85.5 /
// 82.8; a thread per vector pair and head (64 registers) 81.0 / 77.4; a bulk-copy pipeline (a persistent grid, a
// position's rows brought into shared memory stages by cp.async.bulk, 3 CTAs of 80 registers per SM) 83.1 / 68.0.
#include <type_traits>

#include "regrow.cuh"  // (rr::env_knob)

namespace {
using namespace myops;

constexpr int kThreads = 256;
constexpr int kHeadUnroll = 2;  // heads whose x vectors one thread loads before it computes (loads in flight)
// CTAs per SM the launch bound asks for: fp32 3 (80 registers instead of 94, no spills), 16-bit types 1 (119
// registers: held to 80 they spilled 120 bytes). H200, % of copy, forward ([S, H, D] / heads first), 2 -> 3 CTAs:
// fp32 94.6 / 89.7 -> 94.9 / 90.2; bf16 84.5 / 80.9 -> 67.9 / 65.6.
template <class T> constexpr int kRopeMinCtas = sizeof(T) == 4 ? 3 : 1;

template <class T> struct RopeArgs {
  T* out;          // [B, S, H, D] strides (oB, oS, oH, 1)
  const T* x;      // [B, S, H, D] strides (xB, xS, xH, 1)
  const T* cos;    // [B, S, D]    strides (cB, cS, cD)
  const T* sin;    // [B, S, D]    strides (sB, sS, sD)
  int64_t S, H, D;
  int64_t chunks;  // threads one row needs: D / (2 VEC)
  int64_t groups;  // teams per position (G): team g visits heads g, g + G, ...
  int64_t teams;   // B * S * G
  int gshift;      // log2(G) where G is a power of 2, else -1
  bool narrow;     // teams and positions fit 32 bits: 32-bit index division
  int64_t xB, xS, xH, oB, oS, oH, cB, cS, cD, sB, sS, sD;
  bool backward;
};

// VEC consecutive elements at p (VEC > 1: one 16-byte load; the launcher checked alignment and unit stride) or the
// element p[0] (VEC == 1).
template <class T, int VEC> __device__ __forceinline__ Vec<T, VEC> load(const T* p) {
  if constexpr (VEC > 1) {
    return *reinterpret_cast<const Vec<T, VEC>*>(p);
  } else {
    return Vec<T, 1>{{*p}};
  }
}

template <class T, int VEC> __device__ __forceinline__ void store(T* p, const Vec<T, VEC>& v) {
  if constexpr (VEC > 1) {
    *reinterpret_cast<Vec<T, VEC>*>(p) = v;
  } else {
    *p = v.v[0];
  }
}

// Separately rounded products, as eager PyTorch's x * cos + rotate_half(x) * sin rounds them (no FMA contraction):
// fp32 and fp64 results equal eager's bit for bit. Half types compute in fp32 and round once, to 16 bits (mul_add
// below contracts their first product into an FMA).
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// a c + p (p = +-b s, rounded): fp32 and fp64 round the product a c too, as eager does (bit for bit); half types take
// one FMA (an instruction fewer per element; their result rounds to 16 bits after, far coarser than the fp32
// rounding it saves).
template <class T, class A> __device__ __forceinline__ A mul_add(A a, A c, A p) {
  if constexpr (sizeof(T) == 2) {
    return fmaf(a, c, p);
  } else {
    return mul_rn(a, c) + p;
  }
}

// v with every element's sign flipped where `flip` (one XOR per 32-bit word).
template <class T, int VEC> __device__ __forceinline__ Vec<T, VEC> negate_if(Vec<T, VEC> v, bool flip) {
  static_assert(sizeof(v) % 4 == 0, "whole 32-bit words");
  constexpr uint32_t kSign = sizeof(T) == 2 ? 0x80008000u : 0x80000000u;
  uint32_t w[sizeof(v) / 4];
  memcpy(w, &v, sizeof(v));
#pragma unroll
  for (int k = 0; k < (int)(sizeof(v) / 4); ++k) w[k] ^= flip ? kSign : 0u;
  memcpy(&v, w, sizeof(v));
  return v;
}

// The interleaved rotation inside one vector x: elements 2k and 2k + 1 pair up (see rotate below).
template <bool BWD, class T, int VEC>
__device__ __forceinline__ void rotate_pairs(const Vec<T, VEC>& x, const Vec<T, VEC>& c, const Vec<T, VEC>& s,
                                             Vec<T, VEC>& o) {
  using A = acc_t<T>;
#pragma unroll
  for (int e = 0; e < VEC; e += 2) {
    const A a = to_acc(x.v[e]), b = to_acc(x.v[e + 1]), ca = to_acc(c.v[e]), cb = to_acc(c.v[e + 1]);
    if constexpr (BWD) {
      o.v[e] = from_acc<T>(mul_add<T>(a, ca, mul_rn(b, to_acc(s.v[e + 1]))));
      o.v[e + 1] = from_acc<T>(mul_add<T>(b, cb, -mul_rn(a, to_acc(s.v[e]))));
    } else {
      o.v[e] = from_acc<T>(mul_add<T>(a, ca, -mul_rn(b, to_acc(s.v[e]))));
      o.v[e + 1] = from_acc<T>(mul_add<T>(b, cb, mul_rn(a, to_acc(s.v[e + 1]))));
    }
  }
}

// out[d1] = a c[d1] - b s[d1], out[d2] = b c[d2] + a s[d2] for the VEC pairs of the two vectors x1, x2.
// CROSS (NeoX, or any pairing with VEC == 1): element e of x1 pairs with element e of x2. Otherwise (interleaved,
// VEC > 1): elements 2k and 2k + 1 of each vector pair up.
// BWD: the transposed rotation, out[d1] = a c[d1] + b s[d2], out[d2] = b c[d2] - a s[d1] (see the top).
// cos/sin come in T and are converted where used.
template <bool CROSS, bool BWD, class T, int VEC>
__device__ __forceinline__ void rotate(const Vec<T, VEC>& x1, const Vec<T, VEC>& x2, const Vec<T, VEC>& c1,
                                       const Vec<T, VEC>& c2, const Vec<T, VEC>& s1, const Vec<T, VEC>& s2,
                                       Vec<T, VEC>& o1, Vec<T, VEC>& o2) {
  using A = acc_t<T>;
  if constexpr (CROSS) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const A a = to_acc(x1.v[e]), b = to_acc(x2.v[e]), c1e = to_acc(c1.v[e]), c2e = to_acc(c2.v[e]);
      if constexpr (BWD) {
        o1.v[e] = from_acc<T>(mul_add<T>(a, c1e, mul_rn(b, to_acc(s2.v[e]))));
        o2.v[e] = from_acc<T>(mul_add<T>(b, c2e, -mul_rn(a, to_acc(s1.v[e]))));
      } else {
        o1.v[e] = from_acc<T>(mul_add<T>(a, c1e, -mul_rn(b, to_acc(s1.v[e]))));
        o2.v[e] = from_acc<T>(mul_add<T>(b, c2e, mul_rn(a, to_acc(s2.v[e]))));
      }
    }
  } else {
    rotate_pairs<BWD>(x1, c1, s1, o1);
    rotate_pairs<BWD>(x2, c2, s2, o2);
  }
}

// Block (tx, ty): threadIdx.x is the thread's place c in its team (chunk of the row), threadIdx.y its team in the
// block. Teams t = blockIdx.x * ty + threadIdx.y (grid-stride beyond 2^31 blocks) map to position p = t / G and
// head group g = t % G, so the G teams of one position sit in the same block and share its cos/sin lines in L1.
template <class T, int VEC, bool INTERLEAVED, bool BWD>
__global__ void __launch_bounds__(kThreads, kRopeMinCtas<T>) rope_kernel(const RopeArgs<T> a) {
  constexpr bool CROSS = !INTERLEAVED || VEC == 1;
  const int64_t half = a.D / 2;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; t < a.teams;
       t += (int64_t)gridDim.x * blockDim.y) {
    // (a 64-bit division is a call of about 70 instructions; most launches need neither)
    const int64_t p = a.gshift >= 0 ? t >> a.gshift
                      : a.narrow    ? (int64_t)((uint32_t)t / (uint32_t)a.groups)
                                    : t / a.groups;
    const int64_t g = t - p * a.groups;
    const int64_t b = a.narrow ? (int64_t)((uint32_t)p / (uint32_t)a.S) : p / a.S, s = p - b * a.S;
    const T* xp = a.x + b * a.xB + s * a.xS;     // [H, D] of this position
    T* op = a.out + b * a.oB + s * a.oS;         // [H, D]
    const T* cp = a.cos + b * a.cB + s * a.cS;   // [D]
    const T* sp = a.sin + b * a.sB + s * a.sS;   // [D]
    for (int64_t c = threadIdx.x; c < a.chunks; c += blockDim.x) {
      // The two vectors this thread owns in a row: element offsets d1 (first of a pair) and d2.
      const int64_t d1 = INTERLEAVED ? 2 * c * VEC : c * VEC;
      const int64_t d2 = INTERLEAVED ? d1 + VEC : d1 + half;
      // cos/sin stay in T and are converted where used (loading them again for each group of heads, from L1,
      // measured no faster: H200 fp32 94.2 / 88.7, bf16 84.3 / 80.8, % of copy as below).
      const Vec<T, VEC> c1 = load<T, VEC>(cp + d1 * a.cD), c2 = load<T, VEC>(cp + d2 * a.cD);
      const Vec<T, VEC> s1 = load<T, VEC>(sp + d1 * a.sD), s2 = load<T, VEC>(sp + d2 * a.sD);
      // Heads g, g + G, ...: kHeadUnroll rows' loads issued before any is used. Row pointers advance by adding
      // (no 64-bit multiplies in the loop).
      const int64_t xstep = a.groups * a.xH, ostep = a.groups * a.oH, dd = d2 - d1;
      const T* xh = xp + g * a.xH + d1;
      T* oh = op + g * a.oH + d1;
      for (int64_t h = g; h < a.H; h += a.groups * kHeadUnroll) {
        Vec<T, VEC> x1[kHeadUnroll], x2[kHeadUnroll];
#pragma unroll
        for (int u = 0; u < kHeadUnroll; ++u) {
          if (h + u * a.groups < a.H) {
            x1[u] = load<T, VEC>(xh + u * xstep);
            x2[u] = load<T, VEC>(xh + u * xstep + dd);
          }
        }
#pragma unroll
        for (int u = 0; u < kHeadUnroll; ++u) {
          if (h + u * a.groups < a.H) {
            Vec<T, VEC> o1, o2;
            rotate<CROSS, BWD>(x1[u], x2[u], c1, c2, s1, s2, o1, o2);
            store<T, VEC>(oh + u * ostep, o1);
            store<T, VEC>(oh + u * ostep + dd, o2);
          }
        }
        xh += kHeadUnroll * xstep;
        oh += kHeadUnroll * ostep;
      }
    }
  }
}

// n / d for n < 2^31 as one high multiply, an add and a shift (d < 2^31): with s = ceil(log2 d) and
// m = floor(2^32 (2^s - d) / d) + 1, n / d = (umulhi(n, m) + n) >> s (Granlund and Montgomery's method).
struct FastDiv {
  uint32_t m = 1, s = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t d) {
    while ((1ull << s) < d) ++s;
    m = (uint32_t)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t operator()(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

struct FlatArgs {
  uint32_t n;              // threads: B * outer * inner * nv (< 2^31)
  uint32_t nv, inner, outer;
  uint32_t hk;             // H / K: a thread's heads are hb + k * hk, k < K
  FastDiv by_nv, by_inner, by_outer;
  bool xlast, tlast;       // x's / cos and sin's loads under the L2 evict_last policy (common.cuh, l2_hint)
};


// MYOPS_ROPE_L2X / MYOPS_ROPE_L2T (0 plain, 1 evict_last): x's / the tables' L2 policy instead of def (A/B; read
// once).
bool rope_l2_last(char which, bool def) {
  static const int x = rr::env_knob("MYOPS_ROPE_L2X", -1, [](int m) { return m == 0 || m == 1; });
  static const int t = rr::env_knob("MYOPS_ROPE_L2T", -1, [](int m) { return m == 0 || m == 1; });
  const int v = which == 'X' ? x : t;
  return v >= 0 ? v == 1 : def;
}

// One NeoX output element: x c + xs sn, xs the partner's x with its sign (rounded once to T after the fp32 fma).
template <class T> __device__ __forceinline__ T neox_elem(T x, T c, T xs, T sn) {
  return from_acc<T>(mul_add<T>(to_acc(x), to_acc(c), mul_rn(to_acc(xs), to_acc(sn))));
}

// The flat kernel (16-byte layouts, every thread index under 2^31): one thread per 16-byte vector v of the output's
// rows at one position and K heads (hb, hb + H / K, ...), consecutive threads walking the output in memory order (v,
// then the inner of the positions and the H / K head bases, then the outer, then B: INNER_H when the heads are the
// inner dim). A NeoX thread reads its own x vector and its partner's (the other half of the row: one of them an L1
// hit of a neighbouring thread's load), cos and sin at its own columns (the backward: sin at the partner's) once for
// its K heads; an interleaved thread reads its own vectors alone. About 30-40 registers: the SMs' full 2048 threads,
// where the register kernel's 16-bit variant held 119 registers (512 threads) and waited on its loads. NARROW: every
// element offset fits 32 bits (the launcher checked), so the offsets take 32-bit multiplies. PAIR (NeoX, K = 1): one
// thread per vector of the row's first half writes its own output and its partner's from the same two x loads (cos
// and sin at both columns): 6 loads and the index work once per 2 outputs, where a thread of one vector takes 4 loads
// and the index work per output; the same expressions (the same bits). Under __launch_bounds__(kThreads, 1) all 6
// loads issue before the first multiply (cuobjdump; 47-53 registers, 1024-1280 threads per SM); under the default
// bound the forward issued 2 of them after its math began (36-40 registers) and lost the gain (H200 heads first 93.7
// -> 91.8, session 43).
template <class T, bool INTERLEAVED, bool BWD, bool INNER_H, int K, bool NARROW, bool PAIR = false>
__global__ void __launch_bounds__(kThreads, PAIR ? 1 : 0) rope_flat_kernel(const RopeArgs<T> a, const FlatArgs f) {
  static_assert(!PAIR || (!INTERLEAVED && K == 1), "the pair kernel is NeoX at one head a thread");
  constexpr int VEC = 16 / sizeof(T);
  using Off = std::conditional_t<NARROW, uint32_t, int64_t>;
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= f.n) return;
  const L2Hint xhint = l2_hint(f.xlast), thint = l2_hint(f.tlast);
  const uint32_t r = f.by_nv(i), rest = f.by_inner(r), bb = f.by_outer(rest);
  const uint32_t ii = r - rest * f.inner, oo = rest - bb * f.outer;
  const Off b = bb, s = INNER_H ? oo : ii, hb = INNER_H ? ii : oo;
  const Off d = (Off)(i - r * f.nv) * VEC;
  const T* cr = a.cos + (b * (Off)a.cB + s * (Off)a.cS);  // [D]
  const T* sr = a.sin + (b * (Off)a.sB + s * (Off)a.sS);  // [D]
  const Off xrow = b * (Off)a.xB + s * (Off)a.xS, orow = b * (Off)a.oB + s * (Off)a.oS;
  if constexpr (INTERLEAVED) {
    const Vec<T, VEC> c = load_vec<T, VEC>(cr + d, thint), sn = load_vec<T, VEC>(sr + d, thint);
    Vec<T, VEC> x[K];
#pragma unroll
    for (int k = 0; k < K; ++k) x[k] = load_vec<T, VEC>(a.x + (xrow + (hb + k * f.hk) * (Off)a.xH + d), xhint);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      Vec<T, VEC> o;
      rotate_pairs<BWD>(x[k], c, sn, o);
      store<T, VEC>(a.out + (orow + (hb + k * f.hk) * (Off)a.oH + d), o);
    }
  } else if constexpr (PAIR) {
    // d in the first half: forward o = x c - x' s, o' = x' c' + x s'; backward o = x c + x' s', o' = x' c' - x s
    const Off dp = d + (Off)(a.D / 2);
    const T* xr = a.x + (xrow + hb * (Off)a.xH);  // [D]
    T* const orp = a.out + (orow + hb * (Off)a.oH);  // [D]
    const Vec<T, VEC> x0 = load_vec<T, VEC>(xr + d, xhint), x1 = load_vec<T, VEC>(xr + dp, xhint);
    const Vec<T, VEC> c0 = load_vec<T, VEC>(cr + d, thint), c1 = load_vec<T, VEC>(cr + dp, thint);
    const Vec<T, VEC> s0 = load_vec<T, VEC>(sr + d, thint), s1 = load_vec<T, VEC>(sr + dp, thint);
    const Vec<T, VEC> xs0 = negate_if(x1, !BWD), xs1 = negate_if(x0, BWD);
    const Vec<T, VEC>&sn0 = BWD ? s1 : s0, &sn1 = BWD ? s0 : s1;
    Vec<T, VEC> o0, o1;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      o0.v[e] = neox_elem(x0.v[e], c0.v[e], xs0.v[e], sn0.v[e]);
      o1.v[e] = neox_elem(x1.v[e], c1.v[e], xs1.v[e], sn1.v[e]);
    }
    store<T, VEC>(orp + d, o0);
    store<T, VEC>(orp + dp, o1);
  } else {
    const Off half = (Off)(a.D / 2);
    const bool first = d < half;
    const Off dp = first ? d + half : d - half;  // the partner's columns
    const Vec<T, VEC> c = load_vec<T, VEC>(cr + d, thint), sn = load_vec<T, VEC>(sr + (BWD ? dp : d), thint);
    Vec<T, VEC> x[K], xp[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const T* xr = a.x + (xrow + (hb + k * f.hk) * (Off)a.xH);
      x[k] = load_vec<T, VEC>(xr + d, xhint);
      xp[k] = load_vec<T, VEC>(xr + dp, xhint);
    }
    const bool minus = first != BWD;  // forward: out = x c - x' s in the first half; the backward flips the sign
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const Vec<T, VEC> xs = negate_if(xp[k], minus);  // (-x') s = -(x' s) exactly
      Vec<T, VEC> o;
#pragma unroll
      for (int e = 0; e < VEC; ++e) o.v[e] = neox_elem(x[k].v[e], c.v[e], xs.v[e], sn.v[e]);
      store<T, VEC>(a.out + (orow + (hb + k * f.hk) * (Off)a.oH + d), o);
    }
  }
}

// MYOPS_ROPE_FLAT: 1 (default) the flat kernel where it applies, 0 the register kernel (A/B, tests). MYOPS_ROPE_HEADS:
// heads per flat thread (K: 1, or 2 where H is even; 0 or unset: flat_heads()). Read once.
int rope_flat_mode() {
  static const int v = rr::env_knob("MYOPS_ROPE_FLAT", 1, [](int m) { return m == 0 || m == 1; });
  return v;
}
// K: 2 for fp32 with the heads inner on devices of over 30 GB/s of DRAM bandwidth per SM (dram_rich_sms: the H200,
// not the H100), else 1. H200, % of copy, forward [S, H, D] / heads first, K = 1 -> 2: bf16 90.2 / 90.5 -> 84.4 /
// 84.1 (42 registers, 1280 threads per SM; held to 32 it spilled), fp32 95.0 / 94.6 -> 96.2 / 92.5 (session 28).
// H100, fp32 [S, H, D], K = 2 -> 1: forward 101.3 -> 102.1 (two rounds), forward+backward 100.2 -> 100.8-100.9
// (session 34; torch.compile's forward 101.9-102.0).
template <class T> int flat_heads(int64_t H, bool inner_h) {
  static const int v = rr::env_knob("MYOPS_ROPE_HEADS", 0, [](int m) { return m >= 0 && m <= 2; });
  if (H % 2 != 0) return 1;
  return v ? v : sizeof(T) == 4 && inner_h && dram_rich_sms() ? 2 : 1;
}
// The pair kernel for 16-bit NeoX (rope_flat_kernel's PAIR). MYOPS_ROPE_PAIR: 1 on, 0 off, unset: on where
// dram_rich_sms() (the H200, not the H100; read once). % of copy, bf16 forward / forward+backward, per vector ->
// pair, two rounds: H200 (session 44, this kernel) [S, H, D] 97.1 / 96.9, 97.3 / 96.9 -> 99.5 / 97.3, 99.6 / 97.4
// (torch.compile 98.0 / 91.9), heads first 94.1 / 93.2, 94.2 / 93.3 -> 95.8 / 93.7, 95.9 / 93.9 (compile 96.4 /
// 90.6); H100 (session 43, the form under the default bound; this one not timed there) [S, H, D] 104.8 / 102.5 ->
// 103.8 / 101.5, heads first 102.1 / 99.8 -> 101.0 / 99.0.
bool rope_pair() {
  static const int v = rr::env_knob("MYOPS_ROPE_PAIR", -1, [](int m) { return m == 0 || m == 1; });
  return v >= 0 ? v == 1 : dram_rich_sms();
}
// Whether every element offset b * sB + s * sS + h * sH + d of a [B, S, H, D] operand with these strides fits 32 bits.
bool offsets_fit(int64_t B, int64_t S, int64_t H, int64_t D, int64_t sB, int64_t sS, int64_t sH) {
  if (sB < 0 || sS < 0 || sH < 0) return false;
  const double last = (double)(B - 1) * sB + (double)(S - 1) * sS + (double)(H - 1) * sH + (double)D;
  return last < 2147483647.0;
}
template <class T, bool INTERLEAVED> int rope_flat_launch(const RopeArgs<T>& a, int64_t B, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  // The inner dim is the output's (heads for [S, H, D], positions heads first). H200, % of copy, bf16 forward, the
  // other order: [S, H, D] 87.9 -> 79.0, heads first 88.3 -> 85.1.
  const bool inner_h = std::llabs(a.oH) <= std::llabs(a.oS);
  const int K = flat_heads<T>(a.H, inner_h);
  // 32-bit offsets: H200, % of copy, bf16 forward [S, H, D] / heads first, 64-bit -> 32-bit 82.4 / 82.6 -> 90.2 /
  // 90.5, fp32 (K = 2) 92.9 / 90.8 -> 96.2 / 92.5.
  const bool narrow = offsets_fit(B, a.S, a.H, a.D, a.xB, a.xS, a.xH) &&
                      offsets_fit(B, a.S, a.H, a.D, a.oB, a.oS, a.oH) &&
                      offsets_fit(B, a.S, 1, a.D, a.cB, a.cS, 0) && offsets_fit(B, a.S, 1, a.D, a.sB, a.sS, 0);
  FlatArgs f;
  f.nv = (uint32_t)(a.D / VEC);
  f.hk = (uint32_t)(a.H / K);
  f.inner = (uint32_t)(inner_h ? f.hk : a.S);
  f.outer = (uint32_t)(inner_h ? a.S : f.hk);
  f.n = (uint32_t)(B * a.S * f.hk * f.nv);
  f.by_nv = FastDiv(f.nv), f.by_inner = FastDiv(f.inner), f.by_outer = FastDiv(f.outer);
  // L2 policies: cos/sin (re-read for every head) evict_last; x evict_last too, but plain where that measured faster
  // (fp32 heads first, 16-bit heads inner): there x's evict_last lines push the tables' out. H100, the kernel alone,
  // forward (backward alike), us, x evict_last -> plain: fp32 heads first 186.1 / 186.6 -> 177.5 (96.0 -> 100.7% of
  // copy; torch.compile 187.5, its backward 183.8), bf16 [S, H, D] 88.8 -> 86.9; not taken: fp32 [S, H, D] 179.0 ->
  // 179.7, bf16 heads first 87.7 -> 89.1. With the tables plain: fp32 heads first 185.2 (x plain), 193.1 (x last);
  // x evict_first (tables evict_last) 183.5. MYOPS_ROPE_L2X / MYOPS_ROPE_L2T override (A/B).
  const bool last = l2_last((int64_t)f.n * K * 16), x_plain = (sizeof(T) == 4) != inner_h;
  f.xlast = rope_l2_last('X', last && !x_plain);
  f.tlast = rope_l2_last('T', last);
  const bool pair = !INTERLEAVED && sizeof(T) == 2 && K == 1 && f.nv % 2 == 0 && rope_pair();
  if (pair) {  // threads over the rows' first halves
    f.nv /= 2;
    f.n /= 2;
    f.by_nv = FastDiv(f.nv);
  }
  const unsigned blocks = (unsigned)ceil_div(f.n, kThreads);
  const auto go = [&](auto kernel) { kernel<<<blocks, kThreads, 0, stream>>>(a, f); };
  // (BWD, INNER_H, K, NARROW) as template arguments, one bit each; PAIR at K = 1 for 16-bit NeoX
  const auto pick = [&](auto bwd, auto inner, auto k2) {
    constexpr bool BWD = decltype(bwd)::value, INNER = decltype(inner)::value;
    constexpr int KK = decltype(k2)::value ? 2 : 1;
    if constexpr (!INTERLEAVED && sizeof(T) == 2 && KK == 1) {
      if (pair) {
        narrow ? go(rope_flat_kernel<T, false, BWD, INNER, 1, true, true>)
               : go(rope_flat_kernel<T, false, BWD, INNER, 1, false, true>);
        return;
      }
    }
    narrow ? go(rope_flat_kernel<T, INTERLEAVED, BWD, INNER, KK, true>)
           : go(rope_flat_kernel<T, INTERLEAVED, BWD, INNER, KK, false>);
  };
  using t = std::true_type;
  using n = std::false_type;
  const auto by_k = [&](auto bwd, auto inner) { K == 2 ? pick(bwd, inner, t{}) : pick(bwd, inner, n{}); };
  const auto by_inner = [&](auto bwd) { inner_h ? by_k(bwd, t{}) : by_k(bwd, n{}); };
  a.backward ? by_inner(t{}) : by_inner(n{});
  return launch_status();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The head groups aim for waves x 2048 threads per SM: 16-bit types 1, fp32 2. H200, % of copy, forward ([S, H, D] /
// heads first), 2 -> 1 wave: bf16 84.5 / 80.9 -> 86.0 / 83.2, fp32 91.8 / 86.9 -> 92.0 / 89.4 (at 94 registers);
// 4 waves: bf16 78.6 / 75.4, fp32 85.7 / 81.7. MYOPS_ROPE_WAVES (1-8) overrides it (tuning; read once).
template <class T> int rope_waves() {
  static const int v = rr::env_knob("MYOPS_ROPE_WAVES", 0, [](int w) { return w >= 1 && w <= 8; });
  return v ? v : sizeof(T) == 2 ? 1 : 2;
}
template <class T, int VEC, bool INTERLEAVED> int rope_launch(RopeArgs<T> a, int64_t positions, cudaStream_t stream) {
  a.chunks = a.D / (2 * VEC);
  // Threads along the row first; the rest of the block's 256 threads are further teams.
  const int tx = (int)std::min<int64_t>(a.chunks, kThreads);
  const int ty = kThreads / tx;
  // Head groups: the fewest (the most cos/sin reuse) that still give about rope_waves() full waves of threads
  // (2048 per SM); 2-D positions with few heads simply get G = 1 or G = H.
  const int64_t want = (int64_t)rope_waves<T>() * sm_count() * 2048;
  int64_t G = 1;
  while (G < a.H && positions * G * tx < want) G *= 2;
  a.groups = std::min<int64_t>(G, a.H);
  a.teams = positions * a.groups;
  a.gshift = (a.groups & (a.groups - 1)) == 0 ? __builtin_ctzll((unsigned long long)a.groups) : -1;
  a.narrow = a.teams < (1LL << 32) && a.S < (1LL << 32);
  const int64_t blocks = std::min<int64_t>(ceil_div(a.teams, ty), 0x7fffffff);
  if (a.backward) rope_kernel<T, VEC, INTERLEAVED, true><<<(unsigned)blocks, dim3(tx, ty), 0, stream>>>(a);
  else rope_kernel<T, VEC, INTERLEAVED, false><<<(unsigned)blocks, dim3(tx, ty), 0, stream>>>(a);
  return launch_status();
}

template <class T> int rope_typed(const RopeArgs<T>& a, int64_t positions, bool interleaved, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  // 16-byte vectors need: rows made of whole vector pairs, 16-byte aligned bases, and every stride (in elements)
  // a multiple of VEC so that each row start stays aligned; cos/sin rows contiguous.
  bool vec = a.D % (2 * VEC) == 0 && a.cD == 1 && a.sD == 1;
  vec = vec && aligned16(a.x) && aligned16(a.out) && aligned16(a.cos) && aligned16(a.sin);
  const int64_t strides[] = {a.xB, a.xS, a.xH, a.oB, a.oS, a.oH, a.cB, a.cS, a.sB, a.sS};
  for (const int64_t st : strides) vec = vec && st % VEC == 0;
  // The flat kernel (not instantiated for fp64) takes 32-bit indices: every vector's index under 2^31.
  if constexpr (sizeof(T) < 8) {
    if (vec && rope_flat_mode() == 1 && positions * a.H * (a.D / VEC) < (1LL << 31)) {
      const int64_t B = positions / a.S;
      return interleaved ? rope_flat_launch<T, true>(a, B, stream) : rope_flat_launch<T, false>(a, B, stream);
    }
  }
  if (interleaved) {
    return vec ? rope_launch<T, VEC, true>(a, positions, stream) : rope_launch<T, 1, true>(a, positions, stream);
  }
  return vec ? rope_launch<T, VEC, false>(a, positions, stream) : rope_launch<T, 1, false>(a, positions, stream);
}
}  // namespace

// shape [4] = (B, S, H, D); x_strides / out_strides [3] = the B, S, H strides (D stride 1); cos_strides /
// sin_strides [3] = the B, S, D strides. Strides in elements. backward: x is the gradient, out the input gradient.
extern "C" int myops_rope_cuda(void* out, const void* x, const void* cos, const void* sin, const int64_t* shape,
                               const int64_t* x_strides, const int64_t* out_strides, const int64_t* cos_strides,
                               const int64_t* sin_strides, int interleaved, int backward, int dtype, void* stream) {
  const int64_t B = shape[0], S = shape[1], H = shape[2], D = shape[3];
  if (B <= 0 || S <= 0 || H <= 0 || D <= 0) return MYOPS_OK;
  if (D % 2 != 0) return MYOPS_EARG;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    RopeArgs<T> a;
    a.out = static_cast<T*>(out);
    a.x = static_cast<const T*>(x);
    a.cos = static_cast<const T*>(cos);
    a.sin = static_cast<const T*>(sin);
    a.S = S;
    a.H = H;
    a.D = D;
    a.chunks = a.groups = a.teams = 0;  // set by rope_launch
    a.xB = x_strides[0], a.xS = x_strides[1], a.xH = x_strides[2];
    a.oB = out_strides[0], a.oS = out_strides[1], a.oH = out_strides[2];
    a.cB = cos_strides[0], a.cS = cos_strides[1], a.cD = cos_strides[2];
    a.sB = sin_strides[0], a.sS = sin_strides[1], a.sD = sin_strides[2];
    a.backward = backward != 0;
    return rope_typed<T>(a, B * S, interleaved != 0, static_cast<cudaStream_t>(stream));
  });
}
