"""log_softmax(x, dim=-1) = torch.log_softmax(x, dim) for floating x, computed in fp32 (fp64 for fp64); rows of any length."""

from ._softmax import define

log_softmax = define("log_softmax", "torch.log_softmax(x, dim)")
