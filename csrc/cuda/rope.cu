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
// one kernel, which permutes its sin registers once per position and then runs the forward formula.
//
// Bandwidth: x is read once and out written once; cos/sin ([B, S, D], 1/H of x) are what may be re-read. A team
// of tx threads owns one (b, s) position and one group of heads: it loads that position's cos/sin slice once into
// registers (fp32) and reuses it for every head it visits (h = g, g + G, ...), two heads' loads in flight at a
// time. Thread c of a team owns two 16-byte vectors of a row of D: NeoX the vectors at c*VEC and D/2 + c*VEC
// (element e of one pairs with element e of the other), interleaved the adjacent vectors at 2c*VEC and
// 2c*VEC + VEC (pairs inside each vector). A row of D is one contiguous span per half, so a team's loads and
// stores cover whole 32-byte sectors. The number of head groups G is chosen so that the grid fills the chip.
// Layouts the vector path cannot take (D not a multiple of 2*VEC, misaligned pointers or strides, strided cos/sin
// rows) run the same kernel with VEC = 1: one pair per thread and head.
#include "common.cuh"

namespace {
using namespace myops;

constexpr int kThreads = 256;
constexpr int kHeadUnroll = 2;  // heads whose x vectors one thread loads before it computes (loads in flight)

template <class T> struct RopeArgs {
  T* out;          // [B, S, H, D] strides (oB, oS, oH, 1)
  const T* x;      // [B, S, H, D] strides (xB, xS, xH, 1)
  const T* cos;    // [B, S, D]    strides (cB, cS, cD)
  const T* sin;    // [B, S, D]    strides (sB, sS, sD)
  int64_t S, H, D;
  int64_t chunks;  // threads one row needs: D / (2 VEC)
  int64_t groups;  // teams per position (G): team g visits heads g, g + G, ...
  int64_t teams;   // B * S * G
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
// fp32 and fp64 results equal eager's bit for bit, and half types round once, from fp32. One instruction more per
// element than an FMA, far below the memory time.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// out[d1] = a c[d1] - b s[d1], out[d2] = b c[d2] + a s[d2] for the VEC pairs of the two vectors x1, x2.
// CROSS (NeoX, or any pairing with VEC == 1): element e of x1 pairs with element e of x2. Otherwise (interleaved,
// VEC > 1): elements 2k and 2k + 1 of each vector pair up.
template <bool CROSS, class T, int VEC, class A>
__device__ __forceinline__ void rotate(const Vec<T, VEC>& x1, const Vec<T, VEC>& x2, const A (&c1)[VEC],
                                       const A (&c2)[VEC], const A (&s1)[VEC], const A (&s2)[VEC],
                                       Vec<T, VEC>& o1, Vec<T, VEC>& o2) {
  if constexpr (CROSS) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const A a = to_acc(x1.v[e]), b = to_acc(x2.v[e]);
      o1.v[e] = from_acc<T>(mul_rn(a, c1[e]) - mul_rn(b, s1[e]));
      o2.v[e] = from_acc<T>(mul_rn(b, c2[e]) + mul_rn(a, s2[e]));
    }
  } else {
#pragma unroll
    for (int e = 0; e < VEC; e += 2) {
      const A a1 = to_acc(x1.v[e]), b1 = to_acc(x1.v[e + 1]);
      o1.v[e] = from_acc<T>(mul_rn(a1, c1[e]) - mul_rn(b1, s1[e]));
      o1.v[e + 1] = from_acc<T>(mul_rn(b1, c1[e + 1]) + mul_rn(a1, s1[e + 1]));
      const A a2 = to_acc(x2.v[e]), b2 = to_acc(x2.v[e + 1]);
      o2.v[e] = from_acc<T>(mul_rn(a2, c2[e]) - mul_rn(b2, s2[e]));
      o2.v[e + 1] = from_acc<T>(mul_rn(b2, c2[e + 1]) + mul_rn(a2, s2[e + 1]));
    }
  }
}

// Block (tx, ty): threadIdx.x is the thread's place c in its team (chunk of the row), threadIdx.y its team in the
// block. Teams t = blockIdx.x * ty + threadIdx.y (grid-stride beyond 2^31 blocks) map to position p = t / G and
// head group g = t % G, so the G teams of one position sit in the same block and share its cos/sin lines in L1.
template <class T, int VEC, bool INTERLEAVED>
__global__ void __launch_bounds__(kThreads) rope_kernel(const RopeArgs<T> a) {
  using A = acc_t<T>;
  constexpr bool CROSS = !INTERLEAVED || VEC == 1;
  const int64_t half = a.D / 2;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; t < a.teams;
       t += (int64_t)gridDim.x * blockDim.y) {
    const int64_t p = t / a.groups, g = t - p * a.groups;
    const int64_t b = p / a.S, s = p - b * a.S;
    const T* xp = a.x + b * a.xB + s * a.xS;     // [H, D] of this position
    T* op = a.out + b * a.oB + s * a.oS;         // [H, D]
    const T* cp = a.cos + b * a.cB + s * a.cS;   // [D]
    const T* sp = a.sin + b * a.sB + s * a.sS;   // [D]
    for (int64_t c = threadIdx.x; c < a.chunks; c += blockDim.x) {
      // The two vectors this thread owns in a row: element offsets d1 (first of a pair) and d2.
      const int64_t d1 = INTERLEAVED ? 2 * c * VEC : c * VEC;
      const int64_t d2 = INTERLEAVED ? d1 + VEC : d1 + half;
      A c1[VEC], c2[VEC], s1[VEC], s2[VEC];
      {
        const Vec<T, VEC> vc1 = load<T, VEC>(cp + d1 * a.cD), vc2 = load<T, VEC>(cp + d2 * a.cD);
        const Vec<T, VEC> vs1 = load<T, VEC>(sp + d1 * a.sD), vs2 = load<T, VEC>(sp + d2 * a.sD);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          c1[e] = to_acc(vc1.v[e]);
          c2[e] = to_acc(vc2.v[e]);
          s1[e] = to_acc(vs1.v[e]);
          s2[e] = to_acc(vs2.v[e]);
        }
      }
      if (a.backward) {  // sin'[d1] = -sin[d2], sin'[d2] = -sin[d1]
        if constexpr (CROSS) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const A t1 = s1[e];
            s1[e] = -s2[e];
            s2[e] = -t1;
          }
        } else {
#pragma unroll
          for (int e = 0; e < VEC; e += 2) {
            A t1 = s1[e];
            s1[e] = -s1[e + 1];
            s1[e + 1] = -t1;
            t1 = s2[e];
            s2[e] = -s2[e + 1];
            s2[e + 1] = -t1;
          }
        }
      }
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
            rotate<CROSS>(x1[u], x2[u], c1, c2, s1, s2, o1, o2);
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

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class T, int VEC, bool INTERLEAVED> int rope_launch(RopeArgs<T> a, int64_t positions, cudaStream_t stream) {
  a.chunks = a.D / (2 * VEC);
  // Threads along the row first; the rest of the block's 256 threads are further teams.
  const int tx = (int)std::min<int64_t>(a.chunks, kThreads);
  const int ty = kThreads / tx;
  // Head groups: the fewest (the most cos/sin reuse) that still give about two full waves of threads
  // (2048 per SM); 2-D positions with few heads simply get G = 1 or G = H.
  const int64_t want = 2LL * sm_count() * 2048;
  int64_t G = 1;
  while (G < a.H && positions * G * tx < want) G *= 2;
  a.groups = std::min<int64_t>(G, a.H);
  a.teams = positions * a.groups;
  const int64_t blocks = std::min<int64_t>(ceil_div(a.teams, ty), 0x7fffffff);
  rope_kernel<T, VEC, INTERLEAVED><<<(unsigned)blocks, dim3(tx, ty), 0, stream>>>(a);
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
