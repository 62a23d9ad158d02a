// softmax.h: what the registrations of softmax and log_softmax share (they differ only in their kernels).
//   <op>(x, dim) -> y;  <op>_backward(grad, y, dim) -> dx
// dim is moved last (a view); the kernels see rows [M, N] with strides, so no copy unless the leading dims of that
// view do not collapse. The output is allocated in the moved layout and moved back (the fake impl matches).
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
  explicit SoftmaxKernels(const std::string& op)
      : fwd_cpu("myops_" + op + "_cpu"), fwd_cuda("myops_" + op + "_cuda"), bwd_cpu("myops_" + op + "_backward_cpu"),
        bwd_cuda("myops_" + op + "_backward_cuda"), mis_rows("myops_softmax_mis_rows_cuda") {}
  Kernel<FwdCpu> fwd_cpu;
  Kernel<FwdCuda> fwd_cuda;
  Kernel<BwdCpu> bwd_cpu;
  Kernel<BwdCuda> bwd_cuda;
  Kernel<MisRows> mis_rows;  // (both ops': softmax.cu)
};

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

inline at::Tensor softmax_forward(SoftmaxKernels& k, const char* op, const at::Tensor& x_in, int64_t dim) {
  const int dtype = dtype_code(x_in, op, "x");
  const int64_t d = softmax_dim(x_in, dim, op);
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

inline at::Tensor softmax_backward(SoftmaxKernels& k, const char* op, const at::Tensor& grad_in,
                                   const at::Tensor& y_in, int64_t dim) {
  const int dtype = dtype_code(y_in, op, "y");
  check_like(y_in, grad_in, op, "y", "grad");
  const int64_t d = softmax_dim(y_in, dim, op);
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
