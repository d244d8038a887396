"""Custom autograd Functions under study."""

import math

import torch
from torch import nn

from reluexp._compat import ApplyWithoutBinding


class MyReLU(torch.autograd.Function):
    """The seed article's ReLU, kept verbatim: it is the subject of the experiments.

    forward: y = clamp(x, min=0). backward: dx = dy where x >= 0, else 0; at x == 0 the
    gradient passes (torch.relu gives 0 there). Saves the whole input.
    """

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        return grad_input


class LeanReLU(ApplyWithoutBinding, torch.autograd.Function):
    """torch.relu's exact contract as a custom Function, saving nothing the graph lacks.

    forward: y = clamp(x, min=0). backward: dx = dy where y > 0, else 0 (0 at x == 0, as
    torch.relu). Saves the output, which the next layer's matmul keeps alive anyway. Applied
    without torch's per-call signature binding (reluexp._compat).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.clamp(min=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad_output):
        (output,) = ctx.saved_tensors
        # dy where y > 0, else 0, in one kernel: the one torch.relu's own backward calls. (Not
        # dy * (y > 0): an inf gradient times a 0 mask would give NaN, and that is two kernels.)
        return torch.ops.aten.threshold_backward(grad_output, output, 0)


class LeakyReLU(torch.autograd.Function):
    """F.leaky_relu as a custom Function.

    forward: y = x if x > 0 else negative_slope * x. backward: dx = dy if x > 0 else
    negative_slope * dy (the negative side at x == 0, as F.leaky_relu). For a slope >= 0 the
    output has the input's sign, so the output is saved (shared with the next layer); otherwise
    the input.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x, negative_slope=0.01):
        return torch.where(x > 0, x, x * negative_slope)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, *rest = inputs
        ctx.negative_slope = rest[0] if rest else 0.01
        ctx.save_for_backward(output if ctx.negative_slope >= 0 else x)

    @staticmethod
    def backward(ctx, grad_output):
        (sign_source,) = ctx.saved_tensors
        grad_input = torch.where(sign_source > 0, grad_output, grad_output * ctx.negative_slope)
        return grad_input, None


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """float16/bfloat16 upcast for a multi-op formula, as built-in kernels compute in float32."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class SiLU(ApplyWithoutBinding, torch.autograd.Function):
    """F.silu with an analytic backward.

    forward: y = x * sigmoid(x). backward: dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x).
    Saves the input (as F.silu does) and recomputes the sigmoid; smooth, so no kink. Half
    precision is computed in float32 and rounded once, as the built-in does.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        wide = at_least_float32(x)
        return (wide * torch.sigmoid(wide)).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        wide = at_least_float32(x)
        s = torch.sigmoid(wide)
        return (at_least_float32(grad_output) * s * (1 + wide * (1 - s))).to(grad_output.dtype)


class PReLUFunction(torch.autograd.Function):
    """F.prelu with one learnable slope per channel (or one for all), by hand.

    forward: y = x if x > 0 else weight * x, weight broadcast over dim 1 (channels) when it has
    more than one element. backward: dx = dy if x > 0 else weight * dy (the negative side at
    x == 0, as F.prelu); dweight = sum of dy * x over the elements where x <= 0 (per channel).
    Saves the input and the weight.
    """

    @staticmethod
    def forward(ctx, x, weight):
        slope = channel_view(weight, x)
        ctx.save_for_backward(x, weight)
        return torch.where(x > 0, x, slope * x)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        slope = channel_view(weight, x)
        positive = x > 0
        grad_x = torch.where(positive, grad_output, slope * grad_output)
        per_element = torch.where(positive, torch.zeros_like(x), grad_output * x)
        if weight.numel() == 1:
            grad_weight = per_element.sum().reshape(weight.shape)
        else:
            dims = [d for d in range(x.dim()) if d != 1]
            grad_weight = per_element.sum(dim=dims)
        return grad_x, grad_weight


def channel_view(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """weight shaped to broadcast over x: one slope for all, or one per channel (dim 1)."""
    if weight.numel() == 1:
        return weight.reshape(())
    return weight.reshape([-1] + [1] * (x.dim() - 2))


class PReLU(nn.Module):
    """nn.PReLU's interface and parameter (`weight`, init 0.25), through PReLUFunction."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        self.weight = nn.Parameter(torch.full((num_parameters,), float(init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return PReLUFunction.apply(x, self.weight)


def fast_sigmoid_derivative(x: torch.Tensor, slope: float = 25.0) -> torch.Tensor:
    """The fast-sigmoid surrogate (SuperSpike, Zenke & Ganguli 2018): 1 / (1 + slope |x|)^2."""
    return 1 / (1 + slope * x.abs()) ** 2


class Spike(torch.autograd.Function):
    """A spiking neuron's threshold with a surrogate gradient, as snntorch and SpikingJelly
    write it.

    forward: y = 1 where x > 0, else 0 (a step: its derivative is 0 almost everywhere).
    backward: dx = dy / (1 + slope |x|)^2, the fast-sigmoid surrogate, declared to the lab as
    `activation.surrogate: reluexp.functions.fast_sigmoid_derivative`. Saves the input.
    slope: a finite number > 0 (the forward raises ValueError otherwise: a slope <= 0 makes the
    surrogate blow up or change sign, NaN makes every gradient NaN).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x, slope=25.0):
        if not 0 < slope < math.inf:
            raise ValueError(f"slope={slope}: the surrogate's slope must be a finite number > 0")
        return (x > 0).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, *rest = inputs
        ctx.slope = rest[0] if rest else 25.0
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * fast_sigmoid_derivative(x, ctx.slope), None


def spike_reference(x: torch.Tensor, slope: float = 25.0) -> torch.Tensor:
    """The same neuron in plain autograd: the step's value, the gradient of x / (1 + slope |x|)
    (whose derivative is the fast-sigmoid surrogate), the straight-through way."""
    smooth = x / (1 + slope * x.abs())
    return (x > 0).to(x.dtype) + (smooth - smooth.detach())
