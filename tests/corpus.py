"""Functions written the way other people write them, for the Function lab to judge: naive
formulas in the input dtype, kinks away from 0, outputs saved instead of inputs, PyTorch's
documentation examples. CORRECT ones must pass the lab; PLANTED ones must fail it.

Each entry: the overrides that name it to reluexp.check."""

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


def entry(target: str, reference: str, *overrides: str) -> list[str]:
    return [
        "activation=custom",
        f"activation.target={target}",
        f"activation.reference={reference}",
        *overrides,
    ]


SPIKE = [
    "activation.surrogate=reluexp.functions.fast_sigmoid_derivative",
    "+activation.params.slope=25.0",
]

CORRECT = {
    "swish": entry("tests.corpus.Swish", "torch.nn.functional.silu"),
    "mish": entry("tests.corpus.Mish", "torch.nn.functional.mish"),
    "tanh_from_output": entry("tests.corpus.TanhSavingOutput", "torch.tanh"),
    "hardsigmoid": entry("tests.corpus.HardSigmoid", "torch.nn.functional.hardsigmoid"),
    "hardswish": entry("tests.corpus.HardSwish", "torch.nn.functional.hardswish"),
    "hard_mish": entry("tests.corpus.HardMish", "tests.corpus.hard_mish"),
    "relu6": entry("tests.corpus.ReLU6", "torch.nn.functional.relu6"),
    "hardtanh": entry("tests.corpus.HardTanh", "torch.nn.functional.hardtanh"),
    "elu": entry("tests.corpus.ELU", "torch.nn.functional.elu"),
    "softsign": entry("tests.corpus.Softsign", "torch.nn.functional.softsign"),
    "legendre": entry("tests.corpus.LegendrePolynomial3", "tests.corpus.legendre3"),
    "exp": entry("tests.corpus.Exp", "torch.exp"),
    "vmap_tanh": entry("tests.corpus.VmapTanh", "torch.tanh"),
    "stable_softplus": entry("tests.corpus.StableSoftplus", "torch.nn.functional.softplus"),
    "prelu": entry("tests.corpus.PReLU", "torch.nn.PReLU"),
    "clamp_at_2": entry("tests.corpus.ClampAt2", "tests.corpus.clamp_at_2"),
    "spike": entry("tests.corpus.FastSigmoidSpike", "reluexp.functions.spike_reference", *SPIKE),
}
PLANTED = {
    "doubled": entry("tests.corpus.DoubledSwish", "torch.nn.functional.silu"),
    "wrong_constant": entry("tests.corpus.GELUWrongConstant", "torch.nn.functional.gelu"),
    "wrong_sign_by_a_kink": entry(
        "tests.corpus.HardTanhWrongSignAbove", "torch.nn.functional.hardtanh"
    ),
    "wrong_shape": entry("tests.corpus.WrongShape", "torch.relu"),
    "tuple_return": entry("tests.corpus.TupleForward", "torch.relu"),
    "in_place": entry("tests.corpus.InPlace", "torch.relu"),
    "overflowing_forward": entry("tests.corpus.NaiveSoftplus", "torch.nn.functional.softplus"),
    "wrong_for_large_inputs": entry("tests.corpus.WrongForLargeInputs", "torch.nn.functional.silu"),
    "wrong_in_float64": entry("tests.corpus.WrongInFloat64", "torch.nn.functional.silu"),
    "wrong_surrogate_constant": entry(
        "tests.corpus.SpikeWrongSlope", "reluexp.functions.spike_reference", *SPIKE
    ),
    "wrong_slope_gradient": entry("tests.corpus.PReLUWithWrongSlopeGradient", "torch.nn.PReLU"),
}
