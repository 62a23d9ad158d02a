"""softmax(x, dim=-1) = torch.softmax(x, dim) for floating x, computed in fp32 (fp64 for fp64); rows of any length."""

from ._softmax import define

softmax = define("softmax", "torch.softmax(x, dim)")
