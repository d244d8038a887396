"""Custom autograd Functions under study."""

import torch


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
