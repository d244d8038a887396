"""Functions written the way other people write them, for the Function lab to judge: naive
formulas in the input dtype, kinks away from 0, outputs saved instead of inputs, PyTorch's
documentation examples. CORRECT ones must pass the lab; PLANTED ones must fail it.

Each entry: the overrides that name it to reluexp.check."""

import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# -- correct ------------------------------------------------------------------------------------


class Swish(torch.autograd.Function):
    """A memory-efficient Swish as activation libraries write it: saves x, recomputes sigmoid."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * (s * (1 + x * (1 - s)))


class Mish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.mul(torch.tanh(F.softplus(x)))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        x_sigmoid = torch.sigmoid(x)
        x_tanh_sp = F.softplus(x).tanh()
        return grad_output.mul(x_tanh_sp + x * x_sigmoid * (1 - x_tanh_sp * x_tanh_sp))


class TanhSavingOutput(torch.autograd.Function):
    """tanh' = 1 - y^2 from the saved output: cancellation where y is near ±1."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * (1 - y * y)


class HardSigmoid(torch.autograd.Function):
    """x/6 + 1/2 clamped to [0, 1]: kinks at ±3."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x / 6 + 0.5).clamp(min=0.0, max=1.0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * ((x > -3.0) & (x < 3.0)) / 6.0


class HardSwish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * (x + 3).clamp(min=0, max=6) / 6

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad = torch.where(x < -3, torch.zeros_like(x), (2 * x + 3) / 6)
        return grad_output * torch.where(x > 3, torch.ones_like(x), grad)


class HardMish(torch.autograd.Function):
    """0.5 x clamp(x + 2, 0, 2) (timm's hard_mish): kinks at -2 and 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * x * (x + 2).clamp(min=0, max=2)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        m = torch.ones_like(x) * (x >= -2.0)
        return torch.where(x >= 0.0, grad_output, grad_output * m * (x + 1.0))


def hard_mish(x):
    """The plain formula, differentiated by autograd: hard_mish's reference."""
    return 0.5 * x * (x + 2).clamp(min=0, max=2)


class ReLU6(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(0, 6)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * ((x > 0) & (x < 6)).to(grad_output.dtype)


class HardTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1, 1)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad = grad_output.clone()
        grad[(x < -1) | (x > 1)] = 0
        return grad


class ELU(torch.autograd.Function):
    """ELU with alpha 1, its backward from the saved output on the negative side."""

    @staticmethod
    def forward(ctx, x):
        y = torch.where(x > 0, x, torch.expm1(x))
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return grad_output * torch.where(x > 0, torch.ones_like(y), y + 1)


class Softsign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (1 + x.abs())

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output / (1 + x.abs()) ** 2


class LegendrePolynomial3(torch.autograd.Function):
    """PyTorch's tutorial example: P3(x) = 1/2 (5x^3 - 3x)."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return 0.5 * (5 * input**3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input**2 - 1)


def legendre3(x):
    return 0.5 * (5 * x**3 - 3 * x)


class Exp(torch.autograd.Function):
    """PyTorch's documentation example: saves its output."""

    @staticmethod
    def forward(ctx, i):
        result = i.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        return grad_output * result


class VmapTanh(torch.autograd.Function):
    """setup_context and generate_vmap_rule, as torch.func's documentation writes them."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.tanh(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * (1 - y**2)


class StableSoftplus(torch.autograd.Function):
    """log(1 + e^x) as max(x, 0) + log1p(e^-|x|): e^ never sees a positive argument."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


class PReLUFunction(torch.autograd.Function):
    """PReLU with one learnable slope: gradients for the input and the slope."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return torch.where(x >= 0, x, weight * x)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        grad_x = torch.where(x >= 0, grad_output, weight * grad_output)
        grad_weight = (grad_output * torch.where(x >= 0, torch.zeros_like(x), x)).sum()
        return grad_x, grad_weight.reshape(weight.shape)


class PReLU(nn.Module):
    def __init__(self, init: float = 0.25):
        super().__init__()
        self.weight = nn.Parameter(torch.full((1,), init))

    def forward(self, x):
        return PReLUFunction.apply(x, self.weight)


class ChannelPReLUFunction(PReLUFunction):
    """PReLU with a learnt slope per channel (the last dimension), as torch.nn.PReLU(channels)
    keeps one: it takes inputs of that width only."""

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        grad_x = torch.where(x >= 0, grad_output, weight * grad_output)
        grad_weight = grad_output * torch.where(x >= 0, torch.zeros_like(x), x)
        return grad_x, grad_weight.reshape(-1, weight.numel()).sum(0)


class ChannelPReLU(nn.Module):
    def __init__(self, channels: int = 100):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.1, 0.3, channels))

    def forward(self, x):
        return ChannelPReLUFunction.apply(x, self.weight)


class ClampAt2(torch.autograd.Function):
    """min(x, 2) with the gradient 0 at x == 2, where autograd's clamp passes it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(max=2.0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x < 2.0)


def clamp_at_2(x):
    return x.clamp(max=2.0)


class FastSigmoidSpike(torch.autograd.Function):
    """snntorch's fast-sigmoid spike, its surrogate declared to the lab (its `.float()` written
    as the input's dtype, so float64 stays float64)."""

    @staticmethod
    def forward(ctx, input_, slope=25):
        ctx.save_for_backward(input_)
        ctx.slope = slope
        return (input_ > 0).to(input_.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (input_,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad = grad_input / (ctx.slope * torch.abs(input_) + 1.0) ** 2
        return grad, None


class HardSigmoidClamp(torch.autograd.Function):
    """(x + 3).clamp(0, 6) / 6 with backward 1/6 inside (-3, 3): correct, though
    F.hardsigmoid's float64 kernel keeps float32 constants."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x + 3).clamp(0, 6) / 6

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * ((x > -3) & (x < 3)) / 6


class SoftplusLog1pExp(torch.autograd.Function):
    """log1p(exp(-|x|)) + relu(x) with backward sigmoid(x): correct, though F.softplus is
    linear above its threshold of 20."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.log1p(torch.exp(-x.abs())) + torch.relu(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


class SwishAutoFn(torch.autograd.Function):
    """timm's memory-efficient Swish (layers/activations_me.py)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.mul(torch.sigmoid(x))

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        x_sigmoid = torch.sigmoid(x)
        return grad_output.mul(x_sigmoid * (1 + x * (1 - x_sigmoid)))


class HardSigmoidAutoFn(torch.autograd.Function):
    """timm's memory-efficient hard sigmoid: the gradient passes at exactly -3 and 3."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x + 3).clamp(min=0, max=6).div(6.0)

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        return grad_output * ((x >= -3.0) & (x <= 3.0)) / 6.0


class SwishImplementation(torch.autograd.Function):
    """EfficientNet-PyTorch's memory-efficient Swish (utils.py)."""

    @staticmethod
    def forward(ctx, i):
        result = i * torch.sigmoid(i)
        ctx.save_for_backward(i)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        i = ctx.saved_tensors[0]
        sigmoid_i = torch.sigmoid(i)
        return grad_output * (sigmoid_i * (1 + i * (1 - sigmoid_i)))


class GELUTanh(torch.autograd.Function):
    """GELU's tanh approximation, with its own exact derivative, against the built-in's tanh
    approximation (params: approximate="tanh" to both)."""

    @staticmethod
    def forward(ctx, x, approximate="tanh"):
        ctx.save_for_backward(x)
        return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        inner = 0.7978845608028654 * (x + 0.044715 * x**3)
        t = torch.tanh(inner)
        d_inner = 0.7978845608028654 * (1 + 3 * 0.044715 * x**2)
        return grad_output * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * d_inner), None


# New activations with no built-in: checked without a reference.


class Squareplus(torch.autograd.Function):
    """Squareplus (Barron 2021): (x + sqrt(x^2 + b)) / 2, b = 4."""

    @staticmethod
    def forward(ctx, x, b=4.0):
        root = torch.sqrt(x * x + b)
        ctx.save_for_backward(x, root)
        return (x + root) / 2

    @staticmethod
    def backward(ctx, grad_output):
        x, root = ctx.saved_tensors
        return grad_output * (1 + x / root) / 2, None


class QuickGELU(torch.autograd.Function):
    """CLIP's QuickGELU, x * sigmoid(1.702 x), as a new user writes it: the sigmoid saved from
    the forward, so its first derivative is right but its backward is not differentiable in x
    through the saved value (double backward differs)."""

    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(1.702 * x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad_output):
        x, s = ctx.saved_tensors
        return grad_output * (s + 1.702 * x * s * (1 - s))


class SmeLU(torch.autograd.Function):
    """Smooth ReLU (Shamir et al. 2020): 0 below -beta, (x + beta)^2 / (4 beta) between, x above:
    its derivative is continuous, so it has no kink."""

    @staticmethod
    def forward(ctx, x, beta=1.0):
        ctx.save_for_backward(x)
        ctx.beta = beta
        quadratic = (x + beta) ** 2 / (4 * beta)
        return torch.where(x <= -beta, torch.zeros_like(x), torch.where(x >= beta, x, quadratic))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        beta = ctx.beta
        slope = torch.where(x >= beta, torch.ones_like(x), (x + beta) / (2 * beta))
        return grad_output * torch.where(x <= -beta, torch.zeros_like(x), slope), None


class SnakeFunction(torch.autograd.Function):
    """Snake (Ziyin et al. 2020): x + sin^2(a x) / a, learnable frequency a."""

    @staticmethod
    def forward(ctx, x, a):
        ctx.save_for_backward(x, a)
        return x + torch.sin(a * x) ** 2 / a

    @staticmethod
    def backward(ctx, grad_output):
        x, a = ctx.saved_tensors
        sin2 = torch.sin(2 * a * x)
        grad_x = grad_output * (1 + sin2)
        grad_a = grad_output * (x * sin2 / a - torch.sin(a * x) ** 2 / a**2)
        return grad_x, grad_a.sum().reshape(a.shape)


class Snake(nn.Module):
    def __init__(self, a: float = 0.5):
        super().__init__()
        self.a = nn.Parameter(torch.full((1,), a))

    def forward(self, x):
        return SnakeFunction.apply(x, self.a)


class PadeFunction(torch.autograd.Function):
    """A safe Pade activation unit (Molina et al. 2020): P(x) / (1 + |Q(x)|), P of degree 3,
    Q(x) = b1 x + b2 x^2; gradients for x and both coefficient vectors."""

    @staticmethod
    def forward(ctx, x, a, b):
        powers = torch.stack([x**k for k in range(4)])
        p = torch.tensordot(a, powers, dims=1)
        q = b[0] * x + b[1] * x * x
        y = p / (1 + q.abs())
        ctx.save_for_backward(x, a, b)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x, a, b = ctx.saved_tensors
        powers = torch.stack([x**k for k in range(4)])
        p = torch.tensordot(a, powers, dims=1)
        q = b[0] * x + b[1] * x * x
        d = 1 + q.abs()
        sign = torch.sign(q)
        dp = a[1] + 2 * a[2] * x + 3 * a[3] * x * x
        dq = b[0] + 2 * b[1] * x
        grad_x = grad_output * (dp / d - p * sign * dq / d**2)
        grad_a = (grad_output / d * powers).flatten(1).sum(1)
        common = -grad_output * p * sign / d**2
        grad_b = torch.stack([(common * x).sum(), (common * x * x).sum()])
        return grad_x, grad_a, grad_b


class Pade(nn.Module):
    """Learnable: numerator near a leaky ReLU's shape, denominator small."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.tensor([0.02, 0.5, 0.3, 0.02]))
        self.b = nn.Parameter(torch.tensor([0.2, 0.05]))

    def forward(self, x):
        return PadeFunction.apply(x, self.a, self.b)


class NumpyCube(torch.autograd.Function):
    """PyTorch's autograd_function_db style: the forward computes in numpy (autograd cannot
    follow it), the backward in torch."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.from_numpy(x.detach().cpu().numpy() ** 3).to(x.device)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 3 * x**2


# Spiking neurons, as the spiking libraries write them, each with its declared surrogate.


def heaviside(x):
    """A plain step: a spike's reference without a surrogate."""
    return (x > 0).to(x.dtype)


class SnnTorchFastSigmoid(torch.autograd.Function):
    """snntorch.surrogate.FastSigmoid as written: slope on ctx, a float32 mask whatever the
    input's dtype, (grad, None) back."""

    @staticmethod
    def forward(ctx, input_, slope):
        ctx.save_for_backward(input_)
        ctx.slope = slope
        out = (input_ > 0).float()
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (input_,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad = grad_input / (ctx.slope * torch.abs(input_) + 1.0) ** 2
        return grad, None


class SnnTorchATan(torch.autograd.Function):
    """snntorch.surrogate.ATan as written (an in-place pow_ in its backward)."""

    @staticmethod
    def forward(ctx, input_, alpha):
        ctx.save_for_backward(input_)
        ctx.alpha = alpha
        out = (input_ > 0).float()
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (input_,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad = ctx.alpha / 2 / (1 + (torch.pi / 2 * ctx.alpha * input_).pow_(2)) * grad_input
        return grad, None


def atan_derivative(x, alpha=2.0):
    return alpha / 2 / (1 + (torch.pi / 2 * alpha * x) ** 2)


def sj_heaviside(x):
    return (x >= 0).to(x)


def sj_sigmoid_backward(grad_output, x, alpha):
    sgax = (x * alpha).sigmoid_()
    return grad_output * (1.0 - sgax) * sgax * alpha, None


class SJSigmoidFunction(torch.autograd.Function):
    """spikingjelly.activation_based.surrogate.sigmoid as written: the constant a second apply
    argument, setup_context, None for it from backward."""

    @staticmethod
    def forward(x, alpha):
        return sj_heaviside(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, alpha = inputs
        ctx.save_for_backward(x)
        ctx.alpha = alpha

    @staticmethod
    def backward(ctx, grad_output):
        return sj_sigmoid_backward(grad_output, ctx.saved_tensors[0], ctx.alpha)


class SJSigmoid(nn.Module):
    """spikingjelly's surrogate Module: a `spiking` switch between the Function and the
    primitive (smooth) function whose derivative the surrogate is."""

    def __init__(self, alpha=4.0, spiking=True):
        super().__init__()
        self.alpha, self.spiking = alpha, spiking

    def forward(self, x):
        if self.spiking:
            return SJSigmoidFunction.apply(x, self.alpha)
        return (x * self.alpha).sigmoid()


def sigmoid_derivative(x, alpha=4.0):
    s = torch.sigmoid(alpha * x)
    return alpha * s * (1 - s)


class NorseSuperSpike(torch.autograd.Function):
    """norse.torch.functional.superspike.SuperSpike as written: setup_context, needs_input_grad,
    a heaviside through torch.gt; its backward uses 1 / (|x| + 1)^2 whatever alpha is."""

    @staticmethod
    def forward(input_tensor, alpha):
        return torch.gt(input_tensor, torch.as_tensor(0.0)).to(input_tensor.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        input_tensor, alpha = inputs
        ctx.alpha = alpha
        ctx.save_for_backward(input_tensor)

    @staticmethod
    def backward(ctx, grad_output):
        (inp,) = ctx.saved_tensors
        grad = None
        if ctx.needs_input_grad[0]:
            grad = grad_output / (torch.abs(inp) + 1.0).pow(2)
        return grad, None


def superspike_derivative(x):
    return 1 / (x.abs() + 1) ** 2


class NorseHeaviTanhHalf(torch.autograd.Function):
    """norse's HeaviTanh with the 1/2 of h(x) = 1/2 + 1/2 tanh(kx) kept: dy k (1 - tanh^2) / 2."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return torch.gt(x, torch.as_tensor(0.0)).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return dy * ctx.k * (1 - (x * ctx.k).tanh().pow(2)) / 2, None


def half_tanh_derivative(x, k=1.0):
    """h(x) = 1/2 + 1/2 tanh(kx): h' = k (1 - tanh(kx)^2) / 2."""
    return k * (1 - torch.tanh(k * x) ** 2) / 2


# -- planted bugs -------------------------------------------------------------------------------


class DoubledSwish(Swish):
    @staticmethod
    def backward(ctx, grad_output):
        return 2 * Swish.backward(ctx, grad_output)


class GELUWrongConstant(torch.autograd.Function):
    """0.4 for 1/sqrt(2 pi) = 0.39894...: fast gradcheck lets it pass."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * x * (1 + torch.erf(x * 0.7071067811865476))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        cdf = 0.5 * (1 + torch.erf(x * 0.7071067811865476))
        return grad_output * (cdf + x * 0.4 * torch.exp(-0.5 * x * x))


class HardTanhWrongSignAbove(HardTanh):
    """The gradient's sign flipped on one side of the kink at 1 (between 0 and 1)."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad = HardTanh.backward(ctx, grad_output)
        return torch.where(x > 0, -grad, grad)


class WrongShape(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.sum(dim=0)


class TupleForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0), x > 0

    @staticmethod
    def backward(ctx, grad_output, grad_mask):
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0)


class InPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.clamp_(min=0)
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0)


class ClippedStraightThroughInPlace(torch.autograd.Function):
    """A clipped straight-through quantizer (8 levels on [-1, 1]) as a published QAT library
    writes its backward: the incoming gradient zeroed in place outside [-1, 1], and returned.
    Under y.sum().backward() every position shares one value, which the write zeroes."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.round(x.clamp(-1, 1) * 7) / 7

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_output[(x < -1) | (x > 1)] = 0
        return grad_output


class ClippedStraightThrough(ClippedStraightThroughInPlace):
    """The same quantizer, its backward writing into a copy."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[(x < -1) | (x > 1)] = 0
        return grad_input


def clipped_straight_through(x):
    """The surrogate both declare: 1 on [-1, 1], 0 outside."""
    return ((x >= -1) & (x <= 1)).to(x.dtype)


class ReLUSavedInPlace(torch.autograd.Function):
    """A ReLU whose backward makes its mask out of the saved input itself (sign_ in place):
    its gradients are right, the layer's input is gone."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x.clamp_(min=0).sign_()


class StableSoftplusRelu(torch.autograd.Function):
    """The overflow-free softplus as numerically careful code writes it, relu(x) +
    log1p(exp(-|x|)), its backward sigmoid(x): exact at 0, where the formula's relu and abs
    bend."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.relu(x) + torch.log1p(torch.exp(-x.abs()))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(x)


class NaiveSoftplus(torch.autograd.Function):
    """log1p(exp(x)): exp overflows to inf at x > 88.7 in float32."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.log1p(torch.exp(x))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.exp(x) / (1 + torch.exp(x))


class WrongForLargeInputs(Swish):
    """Right for |x| < 20; beyond, a gradient of 0 (as if the saturation were the other way)."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return torch.where(x.abs() < 20, Swish.backward(ctx, grad_output), 0 * grad_output)


class WrongInFloat64(Swish):
    """A dtype branch that is wrong in float64 only."""

    @staticmethod
    def backward(ctx, grad_output):
        grad = Swish.backward(ctx, grad_output)
        return grad * 1.01 if grad.dtype == torch.float64 else grad


def square_plus(x):
    """x^2 + x through autograd: SquarePlusHalfOverflow's reference."""
    return x * x + x


class SquarePlusHalfOverflow(torch.autograd.Function):
    """Right in float32 and bfloat16; in float16 its scaled intermediate overflows to inf at
    ordinary inputs."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x + x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * ((2 * x + 1) * 65536) / 65536


class SpikeWrongSlope(FastSigmoidSpike):
    """The surrogate's slope hard-coded to 10 in the backward, 25 declared."""

    @staticmethod
    def backward(ctx, grad_output):
        (input_,) = ctx.saved_tensors
        return grad_output / (10 * torch.abs(input_) + 1.0) ** 2, None


class PReLUWrongSlopeGradient(PReLUFunction):
    """The slope's gradient summed over the positive side instead of the negative."""

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        grad_x = torch.where(x >= 0, grad_output, weight * grad_output)
        grad_weight = (grad_output * torch.where(x >= 0, x, torch.zeros_like(x))).sum()
        return grad_x, grad_weight.reshape(weight.shape)


class PReLUWithWrongSlopeGradient(PReLU):
    def forward(self, x):
        return PReLUWrongSlopeGradient.apply(x, self.weight)


class GELUTanhAgainstExact(GELUTanh):
    """Right for its own (tanh) forward; checked against the exact F.gelu, which it is not."""


class SquareplusMissingHalf(Squareplus):
    """A new activation with a wrong backward: the derivative's 1/2 left out."""

    @staticmethod
    def backward(ctx, grad_output):
        x, root = ctx.saved_tensors
        return grad_output * (1 + x / root), None


class NorseHeaviTanh(NorseHeaviTanhHalf):
    """norse's HeaviTanh as written: 1 - tanh^2, twice the documented surrogate at k=1."""

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return dy * (1 - (x * ctx.k).tanh().pow(2)), None


class HeaviTanhHalved(NorseHeaviTanhHalf):
    """Half the documented surrogate."""

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return dy * ctx.k * (1 - (x * ctx.k).tanh().pow(2)) / 4, None


class SnnTorchHeaviside(torch.autograd.Function):
    """snntorch.surrogate.Heaviside as written: backward dy * out, 0 for x <= 0; declared with a
    straight-through surrogate of 1 everywhere, it is zero on one side."""

    @staticmethod
    def forward(ctx, input_):
        out = (input_ > 0).float()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (out,) = ctx.saved_tensors
        return grad_output * out


def straight_through(x):
    return torch.ones_like(x)


class SwishBetaFunction(torch.autograd.Function):
    """Swish with a learnable beta, its beta gradient through exp(-beta x) / (1 + exp(-beta x))^2:
    inf / inf = NaN for large negative inputs."""

    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x, beta)
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def backward(ctx, grad_output):
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        e = torch.exp(-beta * x)
        ds = e / (1 + e) ** 2
        grad_x = grad_output * (s + beta * x * ds)
        grad_beta = (grad_output * x * x * ds).sum().reshape(beta.shape)
        return grad_x, grad_beta


class SwishBeta(nn.Module):
    def __init__(self, beta: float = 1.0):
        super().__init__()
        self.beta = nn.Parameter(torch.full((1,), beta))

    def forward(self, x):
        return SwishBetaFunction.apply(x, self.beta)


class LearnableSwishFunction(SwishBetaFunction):
    """The same Swish, its beta gradient through s (1 - s), as papers on learnable activations
    write it: finite everywhere."""

    @staticmethod
    def backward(ctx, grad_output):
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        grad_x = grad_output * (s + beta * x * s * (1 - s))
        grad_beta = (grad_output * x * x * s * (1 - s)).sum().reshape(beta.shape)
        return grad_x, grad_beta


class LearnableSwish(SwishBeta):
    """Its Module: beta a Parameter starting at 1, where it is F.silu."""

    def forward(self, x):
        return LearnableSwishFunction.apply(x, self.beta)


# -- not elementwise, several inputs, a domain, a jump, float32 constants (lab V) ------------


class SoftmaxAlongDim(torch.autograd.Function):
    """A normalizer along a dimension, as entmax/sparsemax-style libraries write one: saves its
    output, the row term in its backward."""

    @staticmethod
    def forward(ctx, x, dim=-1):
        y = torch.softmax(x, dim=dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        inner = (grad_output * y).sum(dim=ctx.dim, keepdim=True)
        return y * (grad_output - inner), None


class SoftmaxDroppingRowTerm(SoftmaxAlongDim):
    """Planted: the backward of y_i alone, without the row's sum."""

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return y * grad_output, None


class HalfReluHalfTanh(torch.autograd.Function):
    """Rows that follow different rules by position: the first half of the units ReLU, the
    second tanh (a mixed layer)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        half = x.shape[-1] // 2
        return torch.cat([x[..., :half].clamp(min=0), torch.tanh(x[..., half:])], dim=-1)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        half = x.shape[-1] // 2
        slope = torch.cat([(x[..., :half] > 0).to(x.dtype), 1 - torch.tanh(x[..., half:]) ** 2], -1)
        return grad_output * slope


class ScaledShiftedTanh(torch.autograd.Function):
    """Three inputs: alpha * tanh(x) + beta, alpha and beta tensors (apply(x, alpha, beta)),
    a gradient for each."""

    @staticmethod
    def forward(ctx, x, alpha: torch.Tensor, beta: torch.Tensor):
        ctx.save_for_backward(x, alpha)
        return alpha * torch.tanh(x) + beta

    @staticmethod
    def backward(ctx, grad_output):
        x, alpha = ctx.saved_tensors
        t = torch.tanh(x)
        grad_alpha = (grad_output * t).sum().reshape(alpha.shape)
        return grad_output * alpha * (1 - t * t), grad_alpha, grad_output.sum().reshape(alpha.shape)


class ScaledTanhFixedShift(ScaledShiftedTanh):
    """beta a fixed shift that needs no gradient: the backward returns None for it."""

    @staticmethod
    def backward(ctx, grad_output):
        grad_x, grad_alpha, _ = ScaledShiftedTanh.backward(ctx, grad_output)
        return grad_x, grad_alpha, None


class ScaledTanhFixedShiftDoubledAlpha(ScaledShiftedTanh):
    """Planted: alpha's gradient doubled; beta, as above, needs none."""

    @staticmethod
    def backward(ctx, grad_output):
        grad_x, grad_alpha, _ = ScaledShiftedTanh.backward(ctx, grad_output)
        return grad_x, 2 * grad_alpha, None


class ScaledShiftedTanhWrongAlpha(ScaledShiftedTanh):
    """Planted: alpha's gradient from the input instead of tanh of it."""

    @staticmethod
    def backward(ctx, grad_output):
        x, alpha = ctx.saved_tensors
        t = torch.tanh(x)
        grad_alpha = (grad_output * x * 0.5).sum().reshape(alpha.shape)
        return grad_output * alpha * (1 - t * t), grad_alpha, grad_output.sum().reshape(alpha.shape)


class LogOfPositive(torch.autograd.Function):
    """A log documented for x > 0: NaN below, -inf at 0; its backward 1 / x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.log(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output / x


class LogOfPositiveHalved(LogOfPositive):
    """Planted: 1 / (2x) inside the domain."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output / (2 * x)


class HeavisideAtOrAbove(torch.autograd.Function):
    """A step that is 1 at the threshold itself, its straight-through surrogate 1 from the
    threshold on: at exactly 0 forward and backward take the upper side, the surrogate as
    documented (1 for x > 0) the lower."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x >= 0).to(grad_output.dtype)


def above_zero(x):
    return (x > 0).to(x.dtype)


class ErfSurrogateFloat32Constant(torch.autograd.Function):
    """A spike whose erf surrogate's constant 2 / sqrt(pi) comes from a float32 tensor, in
    float64 math: 3e-8 relative off, whatever the dtype."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        constant = 2 / torch.sqrt(torch.tensor(math.pi))
        return grad_output * (constant * torch.exp(-x * x)).to(grad_output.dtype)


def erf_derivative(x):
    return 2 / math.sqrt(math.pi) * torch.exp(-x * x)


class CenteredWhole(torch.autograd.Function):
    """x - mean(x) over the whole tensor: every output depends on every input."""

    @staticmethod
    def forward(ctx, x):
        return x - x.mean()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output - grad_output.mean()


class LogSoftmaxRows(torch.autograd.Function):
    """log_softmax along the last dim from its saved output; a row holding a huge value makes
    the others' finite differences vanish in float64 rounding, not their derivative."""

    @staticmethod
    def forward(ctx, x):
        y = torch.log_softmax(x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output - y.exp() * grad_output.sum(-1, keepdim=True)


class HangingBackward(torch.autograd.Function):
    """A backward that never returns (for Ctrl-C): it touches the file named by
    $RELUEXP_TEST_MARKER first, so a test knows it hangs."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        Path(os.environ["RELUEXP_TEST_MARKER"]).touch()
        while True:
            time.sleep(0.1)


class SpikeInverse(torch.autograd.Function):
    """A spiking step whose surrogate min(1/|x|, alpha) is written sign over x:
    clamp_max(((x >= 0) * 2 - 1) / x, alpha). At x = -0.0, where x >= 0 holds, 1 / -0.0 is
    -inf: its surrogate says alpha."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return torch.clamp_max(((x >= 0) * 2 - 1) / x, ctx.alpha) * grad_output, None


def inverse_surrogate(x, alpha=0.3):
    return (1 / x.abs()).clamp_max(alpha)


class BatchSparsemax(torch.autograd.Function):
    """sparsemax along the last dim as written for (batch, features) inputs: the ranks
    `arange(...).view(1, -1).expand_as(x)` raise on a 1-D input."""

    @staticmethod
    def forward(ctx, x):
        x = x - x.amax(dim=-1, keepdim=True)  # shift-invariant: the largest is 0
        z, _ = torch.sort(x, dim=-1, descending=True)
        ranks = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
        ranks = ranks.view(1, -1).expand_as(x)
        cumulative = z.cumsum(dim=-1)
        support = (1 + ranks * z > cumulative).sum(dim=-1, keepdim=True)
        tau = (cumulative.gather(-1, support - 1) - 1) / support.to(x.dtype)
        y = (x - tau).clamp(min=0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        inside = (y > 0).to(grad_output.dtype)
        mean = (grad_output * inside).sum(-1, keepdim=True) / inside.sum(-1, keepdim=True)
        return inside * (grad_output - mean)


class RaisesOnEveryShape(torch.autograd.Function):
    """A forward that needs an argument nobody passes: it raises whatever the input."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0) * ctx.scale

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


class DropoutReusingMask(torch.autograd.Function):
    """Dropout by hand: a Bernoulli mask drawn in the forward, saved, and reused by the
    backward."""

    @staticmethod
    def forward(ctx, x, p=0.5):
        mask = (torch.rand_like(x) >= p).to(x.dtype) / (1 - p)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad_output):
        (mask,) = ctx.saved_tensors
        return grad_output * mask, None


class DropoutDoubled(DropoutReusingMask):
    """Planted: the mask's scale applied twice in the backward."""

    @staticmethod
    def backward(ctx, grad_output):
        (mask,) = ctx.saved_tensors
        return grad_output * mask * mask, None


class ArgmaxOneHot(torch.autograd.Function):
    """A hard choice along the last dim, straight through: the one-hot of each row's argmax."""

    @staticmethod
    def forward(ctx, x):
        return F.one_hot(x.argmax(dim=-1), x.shape[-1]).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


class ChannelQuant(torch.autograd.Function):
    """A dynamic channel-wise quantizer as pytorch-quantization writes its TensorQuantFunction:
    amax per channel of dim 1, 8 bits in a narrow range, straight through where |x| <= amax
    (everywhere: amax is the channel's largest)."""

    @staticmethod
    def forward(ctx, inputs, num_bits=8):
        reduce = tuple(d for d in range(inputs.dim()) if d != 1)
        amax = inputs.detach().abs().amax(dim=reduce, keepdim=True)
        ctx.save_for_backward(inputs, amax)
        max_bound = 2.0 ** (num_bits - 1) - 1.0
        scale = max_bound / amax
        outputs = torch.clamp((inputs * scale).round_(), -max_bound, max_bound)
        return outputs / scale

    @staticmethod
    def backward(ctx, grad_outputs):
        inputs, amax = ctx.saved_tensors
        zero = grad_outputs.new_zeros(1)
        return torch.where(inputs.abs() <= amax, grad_outputs, zero), None


class ChannelQuantDroppingItsLargest(ChannelQuant):
    """The same, its mask strict: each channel's largest element gets no gradient."""

    @staticmethod
    def backward(ctx, grad_outputs):
        inputs, amax = ctx.saved_tensors
        return torch.where(inputs.abs() < amax, grad_outputs, 0.0), None


def channel_fake_quant(x):
    """ChannelQuant's forward by torch's own per-channel fake quantizer, which takes inputs of
    two or more dimensions only (axis 1)."""
    scale = (x.detach().abs().amax(dim=0) / 127).float()
    zero_point = torch.zeros(x.shape[1], dtype=torch.int32)
    return torch.fake_quantize_per_channel_affine(x.float(), scale, zero_point, 1, -127, 127).to(
        x.dtype
    )


class PairModulus(torch.autograd.Function):
    """The modulus of neighbouring pairs along the row (sqrt(x_i^2 + x_{i+1}^2), circular) with
    the textbook backward, 0 where the modulus is: of tiny neighbours (float32 below 1e-19)
    the squares underflow, the modulus is 0 and so is its gradient, where it is x_i / y_i."""

    @staticmethod
    def forward(ctx, x):
        y = torch.sqrt(x * x + torch.roll(x, -1, dims=-1) ** 2)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        ratio = torch.where(y > 0, grad_output / y, torch.zeros_like(y))
        return x * ratio + x * torch.roll(ratio, 1, dims=-1)


class PairModulusByHypot(PairModulus):
    """The same by torch.hypot, its backward the ratios x / y (at most 1) before the upstream
    gradient: right at every magnitude, as coarse as subnormal inputs are."""

    @staticmethod
    def forward(ctx, x):
        y = torch.hypot(x, torch.roll(x, -1, dims=-1))
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        before = torch.roll(y, 1, dims=-1)
        own = torch.where(y > 0, x / y, 0.0) * grad_output
        other = torch.where(before > 0, x / before, 0.0) * torch.roll(grad_output, 1, dims=-1)
        return own + other


class AsinhSquaring(torch.autograd.Function):
    """asinh as sign(x) * log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x|: precise near 0, but a^2
    overflows float64 past 1.34e154, where asinh is 355 (float32: past 1.8e19, 45)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        a = x.abs()
        return torch.sign(x) * torch.log1p(a + a * a / (1 + torch.sqrt(1 + a * a)))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output / torch.sqrt(1 + x * x)


class SafeLog(torch.autograd.Function):
    """Pyro's safe_log: torch.log, its gradient clamped to at most 1 / eps of the input's dtype
    (pyro/ops/special.py)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x.clamp(min=torch.finfo(x.dtype).eps)


def safe_log_derivative(x):
    """The surrogate it declares, per dtype as it is computed: 1 / max(x, eps)."""
    return 1 / x.clamp(min=torch.finfo(x.dtype).eps)


class ScalarClampSte(torch.autograd.Function):
    """Brevitas's ScalarClampSteFn: torch.clamp between two numbers, its gradient straight
    through (brevitas/ops/autograd_ste_ops.py)."""

    @staticmethod
    def forward(ctx, x, min_val: float, max_val: float):
        return torch.clamp(x, min_val, max_val)

    @staticmethod
    def backward(ctx, grad_y):
        return grad_y, None, None


class ChannelLSQFunction(torch.autograd.Function):
    """Learned step size quantization (Esser et al.) with a step per channel: x straight
    through inside the 8-bit range, the step's gradient LSQ's own (round(v) - v inside, the
    bound outside)."""

    @staticmethod
    def forward(ctx, x, step):
        s = step.view(1, -1)
        ctx.save_for_backward(x, s)
        return torch.clamp(torch.round(x / s), -128, 127) * s

    @staticmethod
    def backward(ctx, grad_output):
        x, s = ctx.saved_tensors
        v = x / s
        lower, upper = v < -128, v > 127
        inside = ~(lower | upper)
        grad_step = (lower * -128.0 + upper * 127.0 + inside * (torch.round(v) - v)) * grad_output
        return grad_output * inside, grad_step.sum(dim=0)


class ChannelLSQ(nn.Module):
    def __init__(self, channels: int = 100):
        super().__init__()
        self.step = nn.Parameter(torch.full((channels,), 0.05))

    def forward(self, x):
        return ChannelLSQFunction.apply(x, self.step)


def inside_lsq_range(x):
    """ChannelLSQ's surrogate for x at its starting step, 0.05: 1 inside the 8-bit range."""
    return ((x >= -128 * 0.05) & (x <= 127 * 0.05)).to(x.dtype)


def entry(target: str, reference: str | None, *overrides: str) -> list[str]:
    named = [] if reference is None else [f"activation.reference={reference}"]
    return ["activation=custom", f"activation.target={target}", *named, *overrides]


def surrogate(path: str, **params: float) -> list[str]:
    return [
        f"activation.surrogate={path}",
        *(f"+activation.params.{k}={v}" for k, v in params.items()),
    ]


SPIKE = [
    "activation.surrogate=reluexp.functions.fast_sigmoid_derivative",
    "+activation.params.slope=25.0",
]

CORRECT = {
    "batch_only_normalizer": entry("tests.corpus.BatchSparsemax", None),
    "dropout_reusing_its_mask": entry("tests.corpus.DropoutReusingMask", None),
    "softmax_along_dim": entry(
        "tests.corpus.SoftmaxAlongDim", "torch.softmax", "+activation.params.dim=-1"
    ),
    "half_relu_half_tanh": entry("tests.corpus.HalfReluHalfTanh", None),
    "centered_whole": entry("tests.corpus.CenteredWhole", None),
    "log_softmax_rows": entry("tests.corpus.LogSoftmaxRows", None),
    "three_inputs": entry(
        "tests.corpus.ScaledShiftedTanh",
        None,
        "+activation.params.alpha=0.8",
        "+activation.params.beta=0.1",
    ),
    "log_of_positive": entry("tests.corpus.LogOfPositive", "torch.log"),
    "heaviside_at_or_above": entry(
        "tests.corpus.HeavisideAtOrAbove",
        "tests.corpus.heaviside",
        "activation.surrogate=tests.corpus.above_zero",
    ),
    "erf_surrogate_float32_constant": entry(
        "tests.corpus.ErfSurrogateFloat32Constant",
        "tests.corpus.heaviside",
        "activation.surrogate=tests.corpus.erf_derivative",
    ),
    "after_a_diverging_experiment": entry("reluexp.functions.MyReLU", "torch.relu", "lr=0.01"),
    "swish": entry("tests.corpus.Swish", "torch.nn.functional.silu"),
    "mish": entry("tests.corpus.Mish", "torch.nn.functional.mish"),
    "tanh_from_output": entry("tests.corpus.TanhSavingOutput", "torch.tanh"),
    "hardsigmoid": entry("tests.corpus.HardSigmoid", "torch.nn.functional.hardsigmoid"),
    "hardswish": entry("tests.corpus.HardSwish", "torch.nn.functional.hardswish"),
    "hard_mish": entry("tests.corpus.HardMish", "tests.corpus.hard_mish"),
    "relu6": entry("tests.corpus.ReLU6", "torch.nn.functional.relu6"),
    "hardtanh": entry("tests.corpus.HardTanh", "torch.nn.functional.hardtanh"),
    "stable_softplus_relu": entry("tests.corpus.StableSoftplusRelu", None),
    # A learnable Function against a built-in without parameters: compared at beta=1.
    "learnable_swish": entry("tests.corpus.LearnableSwish", "torch.nn.functional.silu"),
    # 77.4: its reference refuses 1-D input; those comparisons are not made, and said.
    "channel_quantizer": entry(
        "tests.corpus.ChannelQuant",
        "tests.corpus.channel_fake_quant",
        "activation.surrogate=tests.corpus.straight_through",
    ),
    # 77.5: a surrogate whose clamp depends on the dtype, evaluated in the input's.
    "pyro_safe_log": entry(
        "tests.corpus.SafeLog",
        "torch.log",
        "activation.surrogate=tests.corpus.safe_log_derivative",
    ),
    # torch.clamp takes min and max, not the target's min_val and max_val: it is given its own.
    "brevitas_scalar_clamp_ste": entry(
        "tests.corpus.ScalarClampSte",
        "torch.clamp",
        "activation.surrogate=tests.corpus.straight_through",
        "+activation.params.min_val=-1.0",
        "+activation.params.max_val=1.0",
        "+activation.reference_params.min=-1.0",
        "+activation.reference_params.max=1.0",
    ),
    # 77.4: a learnt slope per channel: checked at its width, 100, the experiment's too.
    "channel_prelu": entry("tests.corpus.ChannelPReLU", None),
    # A surrogate declares the input's gradient: the steps' is not judged, nor trained beside.
    "lsq_per_channel": entry(
        "tests.corpus.ChannelLSQ", None, "activation.surrogate=tests.corpus.inside_lsq_range"
    ),
    "pair_modulus_by_hypot": entry("tests.corpus.PairModulusByHypot", None),
    "clipped_straight_through": entry(
        "tests.corpus.ClippedStraightThrough",
        None,
        "activation.surrogate=tests.corpus.clipped_straight_through",
    ),
    "elu": entry("tests.corpus.ELU", "torch.nn.functional.elu"),
    "softsign": entry("tests.corpus.Softsign", "torch.nn.functional.softsign"),
    "legendre": entry("tests.corpus.LegendrePolynomial3", "tests.corpus.legendre3"),
    "exp": entry("tests.corpus.Exp", "torch.exp"),
    "vmap_tanh": entry("tests.corpus.VmapTanh", "torch.tanh"),
    "stable_softplus": entry("tests.corpus.StableSoftplus", "torch.nn.functional.softplus"),
    "prelu": entry("tests.corpus.PReLU", "torch.nn.PReLU"),
    "clamp_at_2": entry("tests.corpus.ClampAt2", "tests.corpus.clamp_at_2"),
    "spike": entry("tests.corpus.FastSigmoidSpike", "reluexp.functions.spike_reference", *SPIKE),
    "hardsigmoid_clamp": entry("tests.corpus.HardSigmoidClamp", "torch.nn.functional.hardsigmoid"),
    "softplus_log1p_exp": entry("tests.corpus.SoftplusLog1pExp", "torch.nn.functional.softplus"),
    "timm_swish": entry("tests.corpus.SwishAutoFn", "torch.nn.functional.silu"),
    "timm_hard_sigmoid": entry("tests.corpus.HardSigmoidAutoFn", "torch.nn.functional.hardsigmoid"),
    "efficientnet_swish": entry("tests.corpus.SwishImplementation", "torch.nn.functional.silu"),
    "gelu_tanh": entry(
        "tests.corpus.GELUTanh", "torch.nn.functional.gelu", "+activation.params.approximate=tanh"
    ),
    "squareplus": entry("tests.corpus.Squareplus", None),
    "quick_gelu": entry("tests.corpus.QuickGELU", None),
    "smelu": entry("tests.corpus.SmeLU", None),
    "snake": entry("tests.corpus.Snake", None),
    "pade": entry("tests.corpus.Pade", None),
    "numpy_cube": entry("tests.corpus.NumpyCube", None),
    "snntorch_fast_sigmoid": entry(
        "tests.corpus.SnnTorchFastSigmoid",
        "tests.corpus.heaviside",
        *surrogate("reluexp.functions.fast_sigmoid_derivative", slope=25.0),
    ),
    "snntorch_atan": entry(
        "tests.corpus.SnnTorchATan",
        "tests.corpus.heaviside",
        *surrogate("tests.corpus.atan_derivative", alpha=2.0),
    ),
    "spikingjelly_sigmoid": entry(
        "tests.corpus.SJSigmoidFunction",
        None,
        *surrogate("tests.corpus.sigmoid_derivative", alpha=4.0),
    ),
    "spikingjelly_module": entry(
        "tests.corpus.SJSigmoid",
        "tests.corpus.sj_heaviside",
        *surrogate("tests.corpus.sigmoid_derivative", alpha=4.0),
    ),
    "norse_superspike": entry(
        "tests.corpus.NorseSuperSpike",
        "tests.corpus.heaviside",
        *surrogate("tests.corpus.superspike_derivative", alpha=100.0),
    ),
    "norse_heavi_tanh": entry(
        "tests.corpus.NorseHeaviTanhHalf",
        None,
        *surrogate("tests.corpus.half_tanh_derivative", k=1.0),
    ),
}
PLANTED = {
    "normalizer_without_row_term": entry(
        "tests.corpus.SoftmaxDroppingRowTerm", "torch.softmax", "+activation.params.dim=-1"
    ),
    "wrong_second_input": entry(
        "tests.corpus.ScaledShiftedTanhWrongAlpha",
        None,
        "+activation.params.alpha=0.8",
        "+activation.params.beta=0.1",
    ),
    "wrong_inside_its_domain": entry("tests.corpus.LogOfPositiveHalved", "torch.log"),
    "doubled": entry("tests.corpus.DoubledSwish", "torch.nn.functional.silu"),
    "wrong_constant": entry("tests.corpus.GELUWrongConstant", "torch.nn.functional.gelu"),
    "wrong_sign_by_a_kink": entry(
        "tests.corpus.HardTanhWrongSignAbove", "torch.nn.functional.hardtanh"
    ),
    "wrong_shape": entry("tests.corpus.WrongShape", "torch.relu"),
    "tuple_return": entry("tests.corpus.TupleForward", "torch.relu"),
    "in_place": entry("tests.corpus.InPlace", "torch.relu"),
    "backward_writes_its_gradient": entry(
        "tests.corpus.ClippedStraightThroughInPlace",
        None,
        "activation.surrogate=tests.corpus.clipped_straight_through",
    ),
    "channel_quantizer_dropping_its_largest": entry(
        "tests.corpus.ChannelQuantDroppingItsLargest",
        "tests.corpus.channel_fake_quant",
        "activation.surrogate=tests.corpus.straight_through",
    ),
    "modulus_of_tiny_neighbours": entry("tests.corpus.PairModulus", None),
    "backward_writes_its_input": entry("tests.corpus.ReLUSavedInPlace", "torch.relu"),
    "overflowing_forward": entry("tests.corpus.NaiveSoftplus", "torch.nn.functional.softplus"),
    "wrong_for_large_inputs": entry("tests.corpus.WrongForLargeInputs", "torch.nn.functional.silu"),
    "wrong_in_float64": entry("tests.corpus.WrongInFloat64", "torch.nn.functional.silu"),
    "wrong_surrogate_constant": entry(
        "tests.corpus.SpikeWrongSlope", "reluexp.functions.spike_reference", *SPIKE
    ),
    "wrong_slope_gradient": entry("tests.corpus.PReLUWithWrongSlopeGradient", "torch.nn.PReLU"),
    "differs_from_reference": entry(
        "tests.corpus.GELUTanhAgainstExact", "torch.nn.functional.gelu"
    ),
    "new_activation_wrong": entry("tests.corpus.SquareplusMissingHalf", None),
    "surrogate_doubled": entry(
        "tests.corpus.NorseHeaviTanh",
        None,
        *surrogate("tests.corpus.half_tanh_derivative", k=1.0),
    ),
    "surrogate_halved": entry(
        "tests.corpus.HeaviTanhHalved",
        "tests.corpus.heaviside",
        *surrogate("tests.corpus.half_tanh_derivative", k=1.0),
    ),
    "surrogate_zero_on_one_side": entry(
        "tests.corpus.SnnTorchHeaviside",
        "tests.corpus.heaviside",
        "activation.surrogate=tests.corpus.straight_through",
    ),
    "swish_beta_nan_at_large_inputs": entry("tests.corpus.SwishBeta", None),
    "dropout_doubled": entry("tests.corpus.DropoutDoubled", None),
    "raises_on_every_shape": entry("tests.corpus.RaisesOnEveryShape", "torch.relu"),
    "inf_at_minus_zero": entry(
        "tests.corpus.SpikeInverse",
        "tests.corpus.sj_heaviside",
        *surrogate("tests.corpus.inverse_surrogate", alpha=0.3),
    ),
}


class PlainGELUTanh(GELUTanh):
    """GELU's tanh approximation as users write it: no argument beside the input (its reference,
    F.gelu, needs approximate="tanh" of its own: activation.reference_params)."""

    @staticmethod
    def forward(ctx, x):
        return GELUTanh.forward(ctx, x)

    @staticmethod
    def backward(ctx, grad_output):
        return GELUTanh.backward(ctx, grad_output)[0]
