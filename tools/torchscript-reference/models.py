"""The networks of the TorchScript fixtures that are written here, in the style of three KAN
libraries that are not on PyPI. generate.py scripts or traces them; TorchScript records this
file's name and the line of every op, so a change here changes the committed archives (and
--check says so).

Each follows its library's public source (class and attribute names, the forward's ops), with
what TorchScript cannot compile written another way: no `*shape` unpacking in view(), no
optional branch on a module attribute, no tuple-to-list comparisons in asserts.
"""

import math
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F


# efficient-kan (github.com/Blealtan/efficient-kan, src/efficient_kan/kan.py): B-splines on a
# uniform grid extended by spline_order knots each side, one grid row per input (a buffer),
# Cox-de Boor recursion, and a spline weight scaled by a separate spline_scaler parameter.
class KANLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int, grid_size: int = 5,
                 spline_order: int = 3, scale_base: float = 1.0, scale_spline: float = 1.0,
                 grid_range: List[float] = [-1.0, 1.0]):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.grid_size = grid_size
        self.spline_order = spline_order

        h = (grid_range[1] - grid_range[0]) / grid_size
        grid = ((torch.arange(-spline_order, grid_size + spline_order + 1) * h + grid_range[0])
                .expand(in_features, -1).contiguous())
        self.register_buffer("grid", grid)

        self.base_weight = nn.Parameter(torch.empty(out_features, in_features))
        self.spline_weight = nn.Parameter(
            torch.empty(out_features, in_features, grid_size + spline_order))
        self.spline_scaler = nn.Parameter(torch.empty(out_features, in_features))
        self.scale_base = scale_base
        self.scale_spline = scale_spline
        self.base_activation = nn.SiLU()
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.base_weight, a=math.sqrt(5) * self.scale_base)
        # efficient-kan fits the spline weights to small noise by least squares (curve2coeff);
        # small noise directly keeps the fixture free of lstsq's last-bit variations.
        with torch.no_grad():
            self.spline_weight.copy_(0.1 * torch.randn_like(self.spline_weight))
        nn.init.kaiming_uniform_(self.spline_scaler, a=math.sqrt(5) * self.scale_spline)

    def b_splines(self, x: torch.Tensor) -> torch.Tensor:
        assert x.dim() == 2 and x.size(1) == self.in_features
        grid: torch.Tensor = self.grid  # (in_features, grid_size + 2 * spline_order + 1)
        x = x.unsqueeze(-1)
        bases = ((x >= grid[:, :-1]) & (x < grid[:, 1:])).to(x.dtype)
        for k in range(1, self.spline_order + 1):
            left = (x - grid[:, :-(k + 1)]) / (grid[:, k:-1] - grid[:, :-(k + 1)])
            right = (grid[:, k + 1:] - x) / (grid[:, k + 1:] - grid[:, 1:(-k)])
            bases = left * bases[:, :, :-1] + right * bases[:, :, 1:]
        assert bases.size(1) == self.in_features
        assert bases.size(2) == self.grid_size + self.spline_order
        return bases.contiguous()

    @property
    def scaled_spline_weight(self) -> torch.Tensor:
        return self.spline_weight * self.spline_scaler.unsqueeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.size(-1) == self.in_features
        original_shape = x.shape
        x = x.view(-1, self.in_features)
        base_output = F.linear(self.base_activation(x), self.base_weight)
        spline_output = F.linear(
            self.b_splines(x).view(x.size(0), -1),
            self.scaled_spline_weight.view(self.out_features, -1),
        )
        output = base_output + spline_output
        return output.view(list(original_shape[:-1]) + [self.out_features])


class KAN(nn.Module):
    def __init__(self, layers_hidden: List[int], grid_size: int = 5, spline_order: int = 3):
        super().__init__()
        self.layers = nn.ModuleList([
            KANLinear(in_features, out_features, grid_size=grid_size, spline_order=spline_order)
            for in_features, out_features in zip(layers_hidden, layers_hidden[1:])
        ])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


# FastKAN (github.com/ZiyaoLi/fast-kan, fastkan/fastkan.py): Gaussian radial basis functions on a
# fixed grid (a Parameter with requires_grad=False, as FastKAN has it), a LayerNorm on each
# layer's input, a bias-free spline linear over the RBF features and a SiLU base linear.
class SplineLinear(nn.Linear):
    def __init__(self, in_features: int, out_features: int, init_scale: float = 0.1):
        self.init_scale = init_scale
        super().__init__(in_features, out_features, bias=False)

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.weight, mean=0, std=self.init_scale)


class RadialBasisFunction(nn.Module):
    def __init__(self, grid_min: float = -2.0, grid_max: float = 2.0, num_grids: int = 8):
        super().__init__()
        self.grid_min = grid_min
        self.grid_max = grid_max
        self.num_grids = num_grids
        grid = torch.linspace(grid_min, grid_max, num_grids)
        self.grid = nn.Parameter(grid, requires_grad=False)
        self.denominator = (grid_max - grid_min) / (num_grids - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(-((x[..., None] - self.grid) / self.denominator) ** 2)


class FastKANLayer(nn.Module):
    def __init__(self, input_dim: int, output_dim: int, grid_min: float = -2.0,
                 grid_max: float = 2.0, num_grids: int = 8, spline_weight_init_scale: float = 0.1):
        super().__init__()
        self.input_dim = input_dim
        self.output_dim = output_dim
        assert input_dim > 1
        self.layernorm = nn.LayerNorm(input_dim)
        self.rbf = RadialBasisFunction(grid_min, grid_max, num_grids)
        self.spline_linear = SplineLinear(input_dim * num_grids, output_dim,
                                          spline_weight_init_scale)
        self.base_linear = nn.Linear(input_dim, output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spline_basis = self.rbf(self.layernorm(x))
        ret = self.spline_linear(spline_basis.view(list(spline_basis.shape[:-2]) + [-1]))
        base = self.base_linear(F.silu(x))
        return ret + base


class FastKAN(nn.Module):
    def __init__(self, layers_hidden: List[int], grid_min: float = -2.0, grid_max: float = 2.0,
                 num_grids: int = 8):
        super().__init__()
        self.layers = nn.ModuleList([
            FastKANLayer(in_dim, out_dim, grid_min=grid_min, grid_max=grid_max,
                         num_grids=num_grids)
            for in_dim, out_dim in zip(layers_hidden[:-1], layers_hidden[1:])
        ])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


# ChebyKAN (github.com/SynodicMonth/ChebyKAN, ChebyKANLayer.py): tanh squashes the input into
# [-1, 1], T_n(x) = cos(n acos(x)) with n from an integer buffer, an einsum with the coefficients.
class ChebyKANLayer(nn.Module):
    def __init__(self, input_dim: int, output_dim: int, degree: int):
        super().__init__()
        self.inputdim = input_dim
        self.outdim = output_dim
        self.degree = degree
        self.cheby_coeffs = nn.Parameter(torch.empty(input_dim, output_dim, degree + 1))
        nn.init.normal_(self.cheby_coeffs, mean=0.0, std=1 / (input_dim * (degree + 1)))
        self.register_buffer("arange", torch.arange(0, degree + 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(x)
        x = x.view((-1, self.inputdim, 1)).expand(-1, -1, self.degree + 1)
        x = x.acos()
        x *= self.arange
        x = x.cos()
        y = torch.einsum("bid,iod->bo", x, self.cheby_coeffs)
        return y.view(-1, self.outdim)


class ChebyKAN(nn.Module):
    def __init__(self, layers_hidden: List[int], degree: int):
        super().__init__()
        self.layers = nn.ModuleList([
            ChebyKANLayer(in_dim, out_dim, degree)
            for in_dim, out_dim in zip(layers_hidden[:-1], layers_hidden[1:])
        ])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
