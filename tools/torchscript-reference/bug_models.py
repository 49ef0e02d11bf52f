"""The planted-bug fixtures of tests/reference/torchscript/bugs: one tiny KAN (Gaussian radial
bases on a grid buffer, one coefficient matrix per input, a SiLU base linear; 2 inputs, 3 outputs)
with exactly one GPU-device bug in forward, on the line that ends with `# planted: <kind>`.
generate.py finds each line by that marker (never by number) and checks that the saved archive's
graph names this file and that line, so moving a line here changes the fixtures and their
manifest together. Every model runs on the CPU; the bugs show only where the parameters and the
input are on a GPU.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def rbf(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Gaussian bases of every input at every grid point: (N, in) -> (N, in, G)."""
    return torch.exp(-(((x[..., None] - grid) * 2.0) ** 2))


class TinyKAN(nn.Module):
    """The clean parts every fixture shares: parameters, a buffer and the spline sum."""

    def __init__(self):
        super().__init__()
        self.register_buffer("grid", torch.linspace(-1.0, 1.0, 5))
        self.coef = nn.Parameter(0.5 * torch.randn(2, 5, 3))  # (in, G, out)
        self.base_weight = nn.Parameter(0.5 * torch.randn(3, 2))

    def spline(self, x: torch.Tensor) -> torch.Tensor:
        bases = rbf(x, self.grid)
        return bases[:, 0] @ self.coef[0] + bases[:, 1] @ self.coef[1]

    def base(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.silu(x), self.base_weight)


class Clean(TinyKAN):
    """The device-correct forms of what the others get wrong: a factory and an index tensor made
    on x's device, a registered buffer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bases = rbf(x, self.grid)
        y = torch.zeros(x.shape[0], 3, dtype=x.dtype, device=x.device)
        for i in range(2):
            y = y + bases[:, i] @ self.coef[i]
        order = torch.arange(3, device=x.device)
        return y.index_select(1, order) + self.base(x)


class FactoryNoDevice(TinyKAN):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bases = rbf(x, self.grid)
        y = torch.zeros(x.shape[0], 3)  # planted: factory_no_device
        for i in range(2):
            y = y + bases[:, i] @ self.coef[i]
        return y + self.base(x)


class PlainTensorAttribute(TinyKAN):
    def __init__(self):
        super().__init__()
        # Neither a buffer nor a parameter: Module.to(device) leaves it on the CPU.
        self.out_scale = torch.tensor([1.0, 0.5, 2.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.spline(x) * self.out_scale  # planted: plain_tensor_attribute
        return y + self.base(x)


class CpuCall(TinyKAN):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.spline(x).cpu()  # planted: cpu_call
        return torch.tanh(h).to(x.device) + self.base(x)


class ItemCall(TinyKAN):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.spline(x)
        peak = y.abs().max().item()  # planted: item_call
        return y / (peak + 1.0) + self.base(x)


class CpuIndex(TinyKAN):
    """index_select needs its index on the tensor's device (advanced indexing, y[:, index],
    would accept a CPU index)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.spline(x) + self.base(x)
        return y.index_select(1, torch.tensor([0, 2]))  # planted: cpu_index


class CpuScalar(TinyKAN):
    """A 0-dim CPU tensor mixes with CUDA tensors like a Python number: not a bug."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.spline(x) * torch.tensor(2.0)  # planted: cpu_scalar (not a bug)
        return y + self.base(x)
