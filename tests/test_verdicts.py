"""The lab's verdict rules as tables, without the pipeline: judge() on one element at a time
(what counts as right, precision, wrong, a failure at large inputs, a convention), compare() on
small Functions (kinks, steps, non-finite inputs, domains, rows)."""

import math

import pytest
import torch

from reluexp.functions import MyReLU
from reluexp.lab.cases import Kink
from reluexp.lab.compare import compare
from reluexp.lab.findings import Finding, Report, Status
from reluexp.lab.judge import Ground, Judged, Truth, judge
from reluexp.lab.oracle import choose_oracle
from reluexp.lab.shape import Domain, Structure, stated_domain, structure_of
from reluexp.lab.subject import build_subject
from tests import corpus

F32_EPS = torch.finfo(torch.float32).eps


def one(value: float, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor([value], dtype=torch.float64).to(dtype)


@pytest.mark.parametrize(
    ("actual", "truth", "dtype", "x", "convention", "expected"),
    [
        # Equal, or within a few units of the dtype it was computed in: right.
        (1.0, 1.0, torch.float32, 0.5, False, Status.PASS),
        (1.0 + 2 * F32_EPS, 1.0, torch.float32, 0.5, False, Status.PASS),
        # Tens of units: right but less precise.
        (1.0 + 30 * F32_EPS, 1.0, torch.float32, 0.5, False, Status.PRECISION),
        # A thousandth off is no rounding.
        (1.001, 1.0, torch.float32, 0.5, False, Status.WRONG),
        # float64 math with a float32 constant: precision, not wrong.
        (1.0 + 3e-8, 1.0, torch.float64, 0.5, False, Status.PRECISION),
        (1.0 + 1e-4, 1.0, torch.float64, 0.5, False, Status.WRONG),
        # Non-finite where the truth is finite: wrong at an ordinary input, a failure at a
        # large one; past the dtype's range, inf is the right float32 value.
        (math.nan, 1.0, torch.float32, 1.0, False, Status.WRONG),
        (math.inf, 100.0, torch.float32, 100.0, False, Status.LARGE),
        (math.inf, 1e39, torch.float32, 1e39, False, Status.PASS),
        # At a convention element any difference is a convention.
        (0.0, 1.0, torch.float32, 0.0, True, Status.CONVENTION),
    ],
)
def test_judge(actual, truth, dtype, x, convention, expected):
    inputs = one(x, dtype)
    scale = inputs.double().abs().clamp(min=1.0)
    verdict = judge(
        Judged("backward", "x", inputs, one(actual, dtype), dtype),
        Truth(torch.tensor([truth], dtype=torch.float64), "truth", []),
        Ground(scale, inputs.double().abs(), torch.tensor([convention])),
    )
    assert verdict.status == expected, verdict


def test_judge_counts_the_formulas_own_rounding_as_right():
    x = one(0.5, torch.float32)
    verdict = judge(
        Judged("backward", "x", x, one(1.001, torch.float32), torch.float32),
        Truth(torch.tensor([1.0], dtype=torch.float64), "truth", [one(1.001, torch.float32)]),
        Ground(torch.ones(1, dtype=torch.float64), x.double(), torch.tensor([False])),
    )
    assert verdict.status == Status.PASS


def compared(
    target, x, surrogate=None, params=None, kinks=(), structure=None, domain=None, convention=None
):
    subject = build_subject(target, surrogate=surrogate, params=params)
    kinks = list(kinks)
    oracle = choose_oracle(
        subject,
        torch.linspace(0.5, 2.0, 20, dtype=torch.float64).reshape(4, 5),
        kinks,
        structure or Structure(),
        domain or Domain(),
    )
    x = x.requires_grad_()
    return compare(subject, oracle, x, torch.ones_like(x), kinks, convention).status


class ReLUAtOneTenth(torch.autograd.Function):
    """max(x - 0.1, 0) with its kink at 0.1, where float32 rounds 0.1 and the input alike."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x - 0.1).clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x - 0.1 > 0)


class CenteredThroughNumpy(torch.autograd.Function):
    """x - mean(x) computed in numpy: autograd cannot follow it, finite differences judge."""

    @staticmethod
    def forward(ctx, x):
        a = x.detach().numpy()
        return torch.from_numpy(a - a.mean()).to(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output - grad_output.mean()


def infinite_where(function: type, where) -> type:
    """The Function with its backward made inf (times the upstream gradient) where
    `where(x)` holds, everywhere else its own: a non-finite result at one kind of element."""

    class InfiniteThere(function):
        @staticmethod
        def backward(ctx, grad_output):
            grads = function.backward(ctx, grad_output)
            grad = grads[0] if isinstance(grads, tuple) else grads
            (x,) = ctx.saved_tensors[:1]
            grad = torch.where(where(x), math.inf * grad_output, grad)
            return (grad, *grads[1:]) if isinstance(grads, tuple) else grad

    return InfiniteThere


def at_zero(x):
    return x == 0


RELU_KINK = Kink(0.0, 0.0, 1.0)
STEP = Kink(0.0, 0.0, 1.0, step=True)


@pytest.mark.parametrize(
    ("case", "status"),
    [
        # A subgradient at a kink is right; beside it the derivative decides.
        (lambda: compared(corpus.ReLU6, torch.tensor([0.0, 1.0]), kinks=[RELU_KINK]), Status.PASS),
        (
            lambda: compared(
                corpus.HardTanhWrongSignAbove, torch.tensor([0.5], dtype=torch.float64)
            ),
            Status.WRONG,
        ),
        # A kink nobody listed that float32's rounding crosses: the float32 forward is exactly
        # 0 where the float64 one is not (0.1f - 0.1 in float64 is 1.5e-9), and the backward
        # takes that piece's slope: a convention.
        (lambda: compared(ReLUAtOneTenth, torch.tensor([0.1, 1.0])), Status.CONVENTION),
        # A non-finite input is a convention, never wrong.
        (lambda: compared(corpus.Swish, torch.tensor([math.nan, 1.0])), Status.PASS),
        # A surrogate's value at the step's jump is a convention.
        (
            lambda: compared(
                corpus.HeavisideAtOrAbove,
                torch.tensor([0.0, 1.0, -1.0], dtype=torch.float64),
                surrogate=corpus.above_zero,
                kinks=[STEP],
            ),
            Status.CONVENTION,
        ),
        # A convention chooses among finite values: a non-finite backward where the truth is
        # finite is wrong at a kink, a step's jump, a rounding crossing, an exact 0 of a
        # position-dependent Function; at a non-finite input (a limit) it is not.
        (
            lambda: compared(
                infinite_where(MyReLU, at_zero), torch.tensor([0.0, 1.0]), kinks=[RELU_KINK]
            ),
            Status.WRONG,
        ),
        (
            lambda: compared(
                infinite_where(corpus.HeavisideAtOrAbove, at_zero),
                torch.tensor([0.0, 1.0, -1.0], dtype=torch.float64),
                surrogate=corpus.above_zero,
                kinks=[STEP],
            ),
            Status.WRONG,
        ),
        (
            lambda: compared(
                infinite_where(ReLUAtOneTenth, lambda x: (x - 0.1).clamp(min=0) == 0),
                torch.tensor([0.1, 1.0]),
            ),
            Status.WRONG,
        ),
        (
            lambda: compared(
                infinite_where(corpus.HalfReluHalfTanh, at_zero),
                torch.tensor([0.0, 1.0, 0.5, -0.5]),
                structure=Structure("elementwise"),
                # What the edge checks take an exact 0 of such a Function for.
                convention=torch.tensor([True, False, False, False]),
            ),
            Status.WRONG,
        ),
        (
            lambda: compared(
                infinite_where(corpus.Swish, lambda x: ~x.isfinite()), torch.tensor([math.nan, 1.0])
            ),
            Status.CONVENTION,
        ),
        # Off the domain a difference is a convention; inside it the backward is judged.
        (
            lambda: compared(
                corpus.LogOfPositiveHalved,
                torch.tensor([-1.0, 0.0]),
                domain=stated_domain((0.5, math.inf)),
            ),
            Status.CONVENTION,
        ),
        (
            lambda: compared(
                corpus.LogOfPositiveHalved,
                torch.tensor([1.0, 2.0], dtype=torch.float64),
                domain=stated_domain((0.5, math.inf)),
            ),
            Status.WRONG,
        ),
        # A row's function: a NaN anywhere in a row makes the whole row a convention.
        (
            lambda: compared(
                corpus.SoftmaxDroppingRowTerm,
                torch.tensor([[math.nan, 1.0, 2.0]], dtype=torch.float64),
                params={"dim": -1},
                structure=Structure("rows", -1),
            ),
            Status.PASS,
        ),
        (
            lambda: compared(
                corpus.SoftmaxDroppingRowTerm,
                torch.tensor([[0.5, 1.0, 2.0]], dtype=torch.float64),
                params={"dim": -1},
                structure=Structure("rows", -1),
            ),
            Status.WRONG,
        ),
        # A huge value in the row swamps finite differences in float64 rounding: through a
        # row, autograd of the forward stays the truth, and differences carry their rounding.
        (
            lambda: compared(
                corpus.LogSoftmaxRows,
                torch.tensor([[10.0, -10.0, 8.5e37, -8.5e37]]),
                structure=Structure("rows", -1),
            ),
            Status.PASS,
        ),
        (
            lambda: compared(
                CenteredThroughNumpy,
                torch.tensor([10.0, -10.0, 8.5e37, -8.5e37]),
                structure=Structure("general"),
            ),
            Status.PASS,
        ),
    ],
)
def test_compare(case, status):
    assert case() == status


def test_a_row_function_that_is_piecewise_constant_is_found_to_be_one():
    # An argmax's one-hot moves its other outputs only when one input becomes the largest.
    subject = build_subject(corpus.ArgmaxOneHot)
    generator = torch.Generator().manual_seed(8)
    samples = [torch.randn(4, 6, generator=generator, dtype=torch.float64) for _ in range(2)]
    assert structure_of(subject, samples) == Structure("rows", -1)
    assert structure_of(build_subject(corpus.Swish), samples) == Structure("pointwise")


def test_the_verdicts_counts_say_how_many_of_them_the_lines_above_show():
    findings = [
        Finding("kinks", "kink at x=0", Status.CONVENTION, "a"),
        Finding("edges", "edge one", Status.CONVENTION, "b"),
        Finding("edges", "edge two", Status.CONVENTION, "c"),
        Finding("gradients", "gradcheck", Status.PASS),
    ]
    assert str(Report("F", findings)).splitlines() == [
        "CONVENTION kink at x=0: a",
        "CONVENTION edge one: b",
        "F: gradients correct; 3 convention findings (2 above, one per group; the report has each)",
    ]
    assert str(Report("F", findings[:2])).splitlines()[-1] == (
        "F: gradients correct; 2 convention findings"
    )
