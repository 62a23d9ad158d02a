// norm_ref.h: the norms in ATen ops of the input (differentiable, with PyTorch's forward-mode formulas), for the
// composites of the norms and their backward ops (forward-mode AD and second derivatives, autograd.h). The statistics
// come from x itself, not from a saved mean or rstd, so that their tangents and second derivatives are part of the
// result. fp32 for 16-bit types (myops::acc).
//   rms:  xh = x rsqrt(mean(x^2) + eps),           y = xh w,      dx = rs (gw - xh mean(gw xh))
//   ln:   xh = (x - mean(x)) rsqrt(var(x) + eps),  y = xh w + b,  dx = rs (gw - mean(gw) - xh mean(gw xh))
// with gw = grad w (grad where there is no weight); dw = sum of grad xh and db = sum of grad over all but the last dim.
#pragma once
#include <ATen/core/Tensor.h>

#include "autograd.h"

namespace myops {

struct NormRef {
  at::Tensor rs, xh;  // [..., 1], [..., N]
};
inline NormRef norm_ref(const at::Tensor& x_in, double eps, bool center) {
  const at::Tensor x = acc(x_in);
  const at::Tensor xc = center ? x.sub(x.mean({-1}, true)) : x;
  const at::Tensor rs = xc.square().mean({-1}, true).add(eps).rsqrt();
  return {rs, xc.mul(rs)};
}
// dx of the norm (center: layer_norm, else rms_norm) for the incoming gradient grad and weight w (undefined: none).
inline at::Tensor norm_ref_dx(const NormRef& n, const at::Tensor& grad, const at::Tensor& w, bool center) {
  const at::Tensor g = acc(grad), gw = w.defined() ? g.mul(acc(w)) : g;
  const at::Tensor inner = center ? gw.sub(gw.mean({-1}, true)) : gw;
  return n.rs.mul(inner.sub(n.xh.mul(gw.mul(n.xh).mean({-1}, true))));
}
}  // namespace myops
