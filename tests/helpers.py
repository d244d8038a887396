"""Shared helpers: an independent copy of the seed's loop, and the CLI run as a user runs it."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


class SeedRelu(torch.autograd.Function):
    """The seed article's Function, copied here so the tests do not trust reluexp's."""

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


def seed_loop(relu=SeedRelu.apply, steps=500, seed=42, lr=1e-6):
    """The article's script, step for step; per step: loss, grad norms, the updated weight's
    norm, exact zeros, dead units."""
    generator = torch.Generator("cpu").manual_seed(seed)
    N, D_in, H, D_out = 64, 1000, 100, 10
    x = torch.randn(N, D_in, generator=generator)
    y = torch.randn(N, D_out, generator=generator)
    w1 = torch.randn(D_in, H, requires_grad=True, generator=generator)
    w2 = torch.randn(H, D_out, requires_grad=True, generator=generator)
    records = []
    for _ in range(steps):
        pre = x.mm(w1)
        post = relu(pre)
        loss = (post.mm(w2) - y).pow(2).sum()
        loss.backward()
        records.append(
            {
                "loss": loss.item(),
                "grad_w1": w1.grad.norm().item(),
                "grad_w2": w2.grad.norm().item(),
                "exact_zeros": int((pre == 0).sum()),
                "dead_fraction": float((post == 0).all(dim=0).float().mean()),
            }
        )
        with torch.no_grad():
            w1 -= lr * w1.grad
            w2 -= lr * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
        records[-1]["weight_w1"] = w1.detach().norm().item()
    return records


def run_cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """`python -m reluexp ARGS` in a subprocess, as a user types it."""
    result = subprocess.run(
        [sys.executable, "-m", "reluexp", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        pytest.fail(f"reluexp {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


class RaisesAtStep50(SeedRelu):
    """The seed's ReLU, whose backward raises on its 51st call (step 50 of a run with one hidden
    layer)."""

    calls = 0

    @staticmethod
    def backward(ctx, grad_output):
        RaisesAtStep50.calls += 1
        if RaisesAtStep50.calls > 50:
            raise RuntimeError("planted failure at step 50")
        return SeedRelu.backward(ctx, grad_output)
