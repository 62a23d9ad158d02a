// act.h: the activations' first and second derivatives in ATen ops, for the second derivatives of the backward ops
// of swiglu (silu), geglu and bias_gelu (gelu, tanh form). Differentiable again (every term an ATen op), in the
// input's dtype.
//   silu(x) = x s, s = sigmoid(x):  silu' = s (1 + x (1 - s)),  silu'' = s (1 - s) (2 + x (1 - 2 s))
//   gelu(x) = x (1 + t) / 2, t = tanh(u), u = k0 (x + k1 x^3):  gelu' = (1 + t) / 2 + x (1 - t^2) u' / 2,
//   gelu'' = (1 - t^2) (u' + x (u'' - 2 t u'^2) / 2), u' = k0 (1 + 3 k1 x^2), u'' = 6 k0 k1 x
#pragma once
#include <ATen/core/Tensor.h>

#include <utility>

namespace myops {

enum class Act { Silu, GeluTanh };
constexpr double kGeluK0 = 0.7978845608028654, kGeluK1 = 0.044715;  // sqrt(2 / pi), the cubic's coefficient

// (act'(x), act''(x))
inline std::pair<at::Tensor, at::Tensor> act_derivatives(const at::Tensor& x, Act act) {
  if (act == Act::Silu) {
    const at::Tensor s = x.sigmoid(), one_s = s.neg().add(1);
    return {s.mul(x.mul(one_s).add(1)), s.mul(one_s).mul(x.mul(one_s.sub(s)).add(2))};
  }
  constexpr double k0 = kGeluK0, k1 = kGeluK1;
  const at::Tensor x2 = x.mul(x);
  const at::Tensor t = x.mul(x2.mul(k1).add(1)).mul(k0).tanh(), sech2 = t.mul(t).neg().add(1);
  const at::Tensor du = x2.mul(3 * k1).add(1).mul(k0), d2u = x.mul(6 * k0 * k1);
  const at::Tensor first = t.add(1).mul(0.5).add(x.mul(sech2).mul(du).mul(0.5));
  const at::Tensor second = sech2.mul(du.add(x.mul(d2u.sub(t.mul(du).mul(du).mul(2))).mul(0.5)));
  return {first, second};
}

inline at::Tensor act_value(const at::Tensor& x, Act act) {
  if (act == Act::Silu) return x.mul(x.sigmoid());
  constexpr double k0 = kGeluK0, k1 = kGeluK1;
  return x.mul(x.mul(x.mul(x).mul(k1).add(1)).mul(k0).tanh().add(1)).mul(0.5);
}

}  // namespace myops
