// softmax.h: what the registrations of softmax and log_softmax share (they differ only in their kernels).
//   <op>(x, dim) -> y;  <op>_backward(grad, y, dim) -> dx
// CUDA: dim is moved last (a view); the kernels see rows [M, N] with strides, so no copy unless the leading dims of
// that view do not collapse. The output is allocated in the moved layout and moved back. CPU: the output laid out as
// x (empty_like, eager's layout), a dim that is not innermost in it taken as the columns of [A, D, B]
// (softmax_forward_cpu). The fake impl matches both.
#pragma once
#include "autograd.h"
#include "batching.h"
#include "common.h"

namespace myops {

struct SoftmaxKernels {
  using FwdCpu = int (*)(myops_out_operand, myops_operand, int64_t, int64_t, int);
  using FwdCuda = int (*)(myops_out_operand, myops_operand, int64_t, int64_t, int, void*);
  using BwdCpu = int (*)(myops_out_operand, myops_operand, myops_operand, int64_t, int64_t, int);
  using BwdCuda = int (*)(myops_out_operand, myops_operand, myops_operand, int64_t, int64_t, int, void*);
  using MisRows = int (*)(int64_t, int64_t, int, int);
  using FwdColsCpu = int (*)(void*, const void*, int64_t, int64_t, int64_t, int64_t, int);
  using BwdColsCpu = int (*)(void*, const void*, const void*, int64_t, int64_t, int64_t, int64_t, int);
  explicit SoftmaxKernels(const std::string& op)
      : fwd_cpu("myops_" + op + "_cpu"), fwd_cuda("myops_" + op + "_cuda"), bwd_cpu("myops_" + op + "_backward_cpu"),
        bwd_cuda("myops_" + op + "_backward_cuda"), mis_rows("myops_softmax_mis_rows_cuda"),
        fwd_cols_cpu("myops_" + op + "_cols_cpu"), bwd_cols_cpu("myops_" + op + "_backward_cols_cpu") {}
  Kernel<FwdCpu> fwd_cpu;
  Kernel<FwdCuda> fwd_cuda;
  Kernel<BwdCpu> bwd_cpu;
  Kernel<BwdCuda> bwd_cuda;
  Kernel<MisRows> mis_rows;  // (both ops': softmax.cu)
  Kernel<FwdColsCpu> fwd_cols_cpu;
  Kernel<BwdColsCpu> bwd_cols_cpu;
};

// The CPU's operands laid out as out (dense: empty_like of x or y) with dim d not innermost in it: [A, D, B] in
// memory order, the dim's columns in tiles (csrc/cpu/softmax.h, softmax_cols_*); B = 1 (d innermost, its leading
// dims permuted): rows [A, D].
// Below this many bytes of columns beside the dim (B es), the column kernels' tiles are too narrow to vectorize
// ([4096, 64, 2] over dim 1, fp32: 6155 us against eager's 961): such tensors are copied to rows along the dim and
// the output copied back into place (228 us before that copy back).
constexpr int64_t kMinColBytes = 64;
struct ColsView {
  int64_t A = 1, D = 1, B = 1;
};
inline ColsView cols_view(const at::Tensor& out, int64_t d, const std::vector<int64_t>& perm) {
  ColsView v;
  v.D = out.size(d);
  bool inner = false;
  for (const int64_t p : perm) {
    if (p == d) inner = true;
    else (inner ? v.B : v.A) *= out.size(p);
  }
  return v;
}

// v as the kernels see a fresh contiguous tensor (a copy of t, whose rows v views) where `fresh` (the rows take the
// CUDA misaligned kernels, whose sums follow each row's offset from a 16-byte boundary: softmax.cuh's mis_rows) and
// v is laid out otherwise (strided, padded, or off a boundary).
inline RowsView fresh_rows(const at::Tensor& t, RowsView v, bool fresh) {
  const bool as_fresh = v.op.col_stride == 1 && (v.M <= 1 || v.op.row_stride == v.N) &&
                        reinterpret_cast<uintptr_t>(v.op.ptr) % 16 == 0;
  return !fresh || as_fresh ? v : rows_view(t.clone(at::MemoryFormat::Contiguous));
}

inline int64_t softmax_dim(int64_t ndim, int64_t dim, const char* op) {
  const int64_t lim = std::max<int64_t>(ndim, 1);
  TORCH_CHECK(dim >= -lim && dim < lim, "myops.", op, ": dim ", str(dim), " is out of range for a tensor with ",
              str(ndim), " dimensions");
  return dim < 0 ? dim + lim : dim;
}
inline int64_t softmax_dim(const at::Tensor& x, int64_t dim, const char* op) { return softmax_dim(x.dim(), dim, op); }

// The CPU's forward of x with dim d (x of 1 dim or more): y laid out as x. Where d is innermost in y and y's other
// dims row-major (dim -1 of a row-major x, strided rows too), rows as the CUDA path's; otherwise x in y's layout (a
// copy where it is not) as [A, D, B]. The former path copied x to rows along d and returned y in that moved layout:
// softmax over dim 0 of a row-major x then cost two transposing copies forward and backward, and the gradient a third.
inline at::Tensor softmax_forward_cpu(SoftmaxKernels& k, const char* op, const at::Tensor& x_in, int64_t d,
                                      int dtype) {
  at::Tensor y = at::empty_like(x_in);
  if (y.numel() == 0) return y;
  const int64_t es = y.element_size();
  const auto fn = k.fwd_cpu.get();
  const auto rows = [&](myops_out_operand yo, myops_operand xo, int64_t M, int64_t N) {  // the row kernel on [M, N]
    cpu_rows(M, N, op,
             [&](int64_t b, int64_t e) { return fn(shifted(yo, b, es), shifted(xo, b, es), e - b, N, dtype); });
  };
  const at::Tensor ym = y.movedim(d, -1);
  if (ym.is_contiguous()) {
    const RowsView v = rows_view(x_in.movedim(d, -1));
    rows(out_rows(ym), v.op, v.M, v.N);
    return y;
  }
  const std::vector<int64_t> perm = memory_order(y.strides());
  const ColsView c = cols_view(y, d, perm);
  if (c.B > 1 && c.B * es < kMinColBytes) {  // x copied to rows along d, y copied back from them
    const at::Tensor xr = x_in.movedim(d, -1).contiguous(), yr = at::empty_like(xr);
    rows(out_rows(yr), {xr.data_ptr(), c.D, 1}, xr.numel() / c.D, c.D);
    ym.copy_(yr);
    return y;
  }
  const at::Tensor x = as_layout(x_in, y, perm);
  if (c.B == 1) {
    rows({y.data_ptr(), c.D, 1}, {x.data_ptr(), c.D, 1}, c.A, c.D);
    return y;
  }
  const auto cols = k.fwd_cols_cpu.get();
  cpu_rows(c.A * c.B, c.D, op,
           [&](int64_t b, int64_t e) { return cols(y.data_ptr(), x.data_ptr(), c.D, c.B, b, e, dtype); });
  return y;
}

inline at::Tensor softmax_forward(SoftmaxKernels& k, const char* op, const at::Tensor& x_in, int64_t dim) {
  const int dtype = dtype_code(x_in, op, "x");
  const int64_t d = softmax_dim(x_in, dim, op);
  if (x_in.is_cpu() && x_in.dim() > 0) return softmax_forward_cpu(k, op, x_in, d, dtype);
  const at::Tensor x = x_in.dim() == 0 ? x_in.reshape({1}) : x_in.movedim(d, -1);
  at::Tensor y = at::empty(x.sizes(), x.options());
  const RowsView v = rows_view(x);
  if (v.M > 0 && v.N > 0) {
    if (x.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
      const c10::cuda::OptionalCUDAGuard guard(x.device());
      const RowsView xv = fresh_rows(x, v, k.mis_rows.get()(v.M, v.N, dtype, 0));
      check_status(k.fwd_cuda.get()(out_rows(y), xv.op, v.M, v.N, dtype, current_stream(x)), op, "CUDA");
#endif
    } else {
      const auto fn = k.fwd_cpu.get();
      const int64_t es = x.element_size();
      cpu_rows(v.M, v.N, op, [&](int64_t b, int64_t e) {
        return fn(shifted(out_rows(y), b, es), shifted(v.op, b, es), e - b, v.N, dtype);
      });
    }
  }
  return x_in.dim() == 0 ? y.reshape({}) : y.movedim(-1, d);
}

// The CPU's backward, as softmax_forward_cpu: dx laid out as y (so as x, whose gradient AccumulateGrad then keeps).
inline at::Tensor softmax_backward_cpu(SoftmaxKernels& k, const char* op, const at::Tensor& grad_in,
                                       const at::Tensor& y_in, int64_t d, int dtype) {
  at::Tensor dx = at::empty_like(y_in);
  if (dx.numel() == 0) return dx;
  const int64_t es = dx.element_size();
  const auto fn = k.bwd_cpu.get();
  const auto rows = [&](myops_out_operand dxo, myops_operand go, myops_operand yo, int64_t M, int64_t N) {
    cpu_rows(M, N, op, [&](int64_t b, int64_t e) {
      return fn(shifted(dxo, b, es), shifted(go, b, es), shifted(yo, b, es), e - b, N, dtype);
    });
  };
  const at::Tensor dm = dx.movedim(d, -1);
  if (dm.is_contiguous()) {
    const RowsView gv = rows_view(grad_in.movedim(d, -1)), yv = rows_view(y_in.movedim(d, -1));
    rows(out_rows(dm), gv.op, yv.op, yv.M, yv.N);
    return dx;
  }
  const std::vector<int64_t> perm = memory_order(dx.strides());
  const ColsView c = cols_view(dx, d, perm);
  if (c.B > 1 && c.B * es < kMinColBytes) {  // (as softmax_forward_cpu's)
    const at::Tensor gr = grad_in.movedim(d, -1).contiguous(), yr = y_in.movedim(d, -1).contiguous();
    const at::Tensor dr = at::empty_like(yr);
    rows(out_rows(dr), {gr.data_ptr(), c.D, 1}, {yr.data_ptr(), c.D, 1}, yr.numel() / c.D, c.D);
    dm.copy_(dr);
    return dx;
  }
  const at::Tensor g = as_layout(grad_in, dx, perm), y = as_layout(y_in, dx, perm);
  if (c.B == 1) {
    rows({dx.data_ptr(), c.D, 1}, {g.data_ptr(), c.D, 1}, {y.data_ptr(), c.D, 1}, c.A, c.D);
    return dx;
  }
  const auto cols = k.bwd_cols_cpu.get();
  cpu_rows(c.A * c.B, c.D, op, [&](int64_t b, int64_t e) {
    return cols(dx.data_ptr(), g.data_ptr(), y.data_ptr(), c.D, c.B, b, e, dtype);
  });
  return dx;
}

inline at::Tensor softmax_backward(SoftmaxKernels& k, const char* op, const at::Tensor& grad_in,
                                   const at::Tensor& y_in, int64_t dim) {
  const int dtype = dtype_code(y_in, op, "y");
  check_like(y_in, grad_in, op, "y", "grad");
  const int64_t d = softmax_dim(y_in, dim, op);
  if (y_in.is_cpu() && y_in.dim() > 0) return softmax_backward_cpu(k, op, grad_in, y_in, d, dtype);
  auto moved = [&](const at::Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t.movedim(d, -1); };
  const at::Tensor g = moved(grad_in), y = moved(y_in);
  at::Tensor dx = at::empty(y.sizes(), y.options());
  const RowsView gv = rows_view(g), yv = rows_view(y);
  if (yv.M > 0 && yv.N > 0) {
    if (y.is_cuda()) {
#ifdef MYOPS_WITH_CUDA
      const c10::cuda::OptionalCUDAGuard guard(y.device());
      const bool fresh = k.mis_rows.get()(yv.M, yv.N, dtype, 1);
      const RowsView gf = fresh_rows(g, gv, fresh), yf = fresh_rows(y, yv, fresh);
      check_status(k.bwd_cuda.get()(out_rows(dx), gf.op, yf.op, yv.M, yv.N, dtype, current_stream(y)), op, "CUDA");
#endif
    } else {
      const auto fn = k.bwd_cpu.get();
      const int64_t es = y.element_size();
      cpu_rows(yv.M, yv.N, op, [&](int64_t b, int64_t e) {
        return fn(shifted(out_rows(dx), b, es), shifted(gv.op, b, es), shifted(yv.op, b, es), e - b, yv.N, dtype);
      });
    }
  }
  return y_in.dim() == 0 ? dx.reshape({}) : dx.movedim(-1, d);
}

// The formula: dx = <op>_backward(grad, y, dim), from the output alone; forward-mode AD (autograd.h): ATen's
// softmax or (log) log_softmax, fp32 for 16-bit types.
inline AutogradSpec softmax_autograd(const char* backward, bool log) {
  return with_composite({saving({}, {0}),
                         [bwd = OpRef(backward)](const AutogradCtx& c, const Tensors& g) {
                           return Tensors{bwd.call1({g[0], c.saved[0], c.args[1]})};
                         }},
                        [log](const Args& a) {
                          const at::Tensor x = acc(a[0].toTensor());
                          const int64_t dim = a[1].toInt();
                          return Tensors{log ? x.log_softmax(dim) : x.softmax(dim)};
                        });
}

// vmap (batching.h) of <op> (x, dim) and <op>_backward (grad, y, dim): the batch's samples in one call, the
// sample's dim (checked as the op checks it) one further on, past the batch; a 0-d sample per sample. `tensors` is the
// op's count of tensor arguments (the last of them, x or y, gives the sample's dims; dim follows them).
inline BatchRule softmax_batch_rule(const char* op, int tensors) {
  return [op, tensors](const Batch& b) -> std::optional<Tensors> {
    const int last = tensors - 1;
    const int64_t n = b.args[last].toTensor().dim() - (b.batched(last) ? 1 : 0);
    if (n == 0) return std::nullopt;
    Args a = b.args;
    for (int i = 0; i < tensors; ++i) a[i] = b.front(i);
    a[tensors] = softmax_dim(n, b.args[tensors].toInt(), op) + 1;
    return b.call_tensors(std::move(a));
  };
}

}  // namespace myops
