"""Functions with planted bugs: the lab must name the check each one fails."""

import torch


class ScaledGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * grad_output * (x > 0)


class MissingMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.clone()


class WrongNegativeSlope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, negative_slope=0.01):
        ctx.save_for_backward(x)
        return torch.where(x > 0, x, x * negative_slope)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return torch.where(x > 0, grad_output, grad_output * 0.1), None


class WrongBackwardDtype(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output * (x > 0)).double()


def wrong_forward_dtype(x):
    return torch.relu(x).double()


class RaisesInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        raise ValueError("planted failure")


class InPlaceForward(torch.autograd.Function):
    """Clamps its input in place: trains like relu while the layer's metrics read garbage."""

    @staticmethod
    def forward(ctx, x):
        x.clamp_(min=0)
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0)


class WrongShapeBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.sum()


SQRT_HALF = 0.7071067811865476


class GELUWrongConstant(torch.autograd.Function):
    """GELU whose backward uses 0.4 for 1/sqrt(2 pi) (0.39894...): gradcheck's rtol lets it pass."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * x * (1 + torch.erf(x * SQRT_HALF))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        cdf = 0.5 * (1 + torch.erf(x * SQRT_HALF))
        return grad_output * (cdf + x * 0.4 * torch.exp(-0.5 * x * x))


def square_plus(x):
    """x^2 + x through autograd: the reference of the two Functions below."""
    return x * x + x


class SquarePlus(torch.autograd.Function):
    """Correct, with another formula than autograd's: g * (2x + 1) rounds differently in half
    precision, and is as close to the truth as the reference."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x + x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (2 * x + 1)


class SquarePlusHalfOverflow(torch.autograd.Function):
    """Right in float32 and bfloat16; in float16 its scaled intermediate overflows to inf."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x + x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * ((2 * x + 1) * 65536) / 65536
