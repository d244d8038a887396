"""The Function lab on Functions written as other libraries write them, each of a kind that
fooled it (issue 59): a forward that leaves its reference at large magnitudes, a backward that
is NaN at tiny inputs, a quantizer that rounds in float32, a stated domain that training
leaves. Each with and without a reference where that is the question."""

import inspect
import json
import re

import pytest
import torch

from reluexp.functions import MyReLU
from reluexp.lab import Status, check_function
from reluexp.lab.compiled import NOT_COMPILED
from tests.helpers import run_cli, run_process

pytestmark = pytest.mark.compat


class FlatAsinh(torch.autograd.Function):
    """asinh that goes flat beyond |x| = 1e8 (19.1 where asinh reaches 23.7 at 1e10); its
    backward asinh's derivative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.asinh(x.clamp(-1e8, 1e8))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output / torch.sqrt(1 + x * x)


class SmoothStep(torch.autograd.Function):
    """exp(-1/x) for x > 0, else 0; its backward exp(-1/x) / x**2: 0/0 where exp(-1/x)
    underflows (float16 below 1.7e-4, float32 below ~2.6e-23), where the derivative is 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x > 0, torch.exp(-1 / x), torch.zeros_like(x))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.where(x > 0, torch.exp(-1 / x) / x**2, torch.zeros_like(x))


class SafeSmoothStep(SmoothStep):
    """The same, its backward written to stay finite: exp(-1/x) * (1/x)**2 with 1/x clamped at
    100 (below x = 0.01 both are under 4e-40; 100**2 fits float16)."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        inverse = torch.where(x > 0, 1 / x, torch.zeros_like(x)).clamp(max=100)
        return grad_output * torch.where(x > 0, torch.exp(-inverse) * inverse**2, 0.0)


class RoundSTE(torch.autograd.Function):
    """A straight-through quantizer to a 0.2 grid, rounding in float32 (as many do)."""

    @staticmethod
    def forward(ctx, x):
        return (torch.round(x.float() / 0.2) * 0.2).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


def rounded_to_the_grid(x):
    """The quantizer's formula in the input's own dtype (float64 here)."""
    return torch.round(x / 0.2) * 0.2


def straight_through(x):
    return torch.ones_like(x)


def test_a_forward_that_leaves_its_reference_at_large_inputs_differs():
    """At x = 1e10 (19.1 against 23.7) it was 4e-10 'of the scale', scaled by |x|."""
    report = check_function(FlatAsinh, torch.asinh, training=False)
    assert not report.ok
    (finding,) = [f for f in report.findings if f.group == "reference"]
    assert finding.status == Status.DIFFERS
    assert "of the reference's value apart: beyond float32 rounding" in finding.detail
    assert "got 19.11382792451231, reference " in finding.detail


def test_a_quantizers_jump_within_rounding_of_its_references_is_precision():
    """float32 puts the jump at x = -0.2999999999999998 on the other side: the two jumps are
    1.5e-8 apart. It was DIFFERS FROM ITS REFERENCE."""
    report = check_function(
        RoundSTE, rounded_to_the_grid, surrogate=straight_through, training=False
    )
    assert report.ok, str(report)
    (finding,) = [f for f in report.findings if f.group == "reference"]
    assert finding.status == Status.PRECISION
    assert "the forward and the reference jump within float32 rounding of each other" in (
        finding.detail
    )


def test_a_quantizer_whose_grid_differs_from_its_reference_still_differs():
    """The jump rule excuses jumps a rounding apart, not another grid."""
    report = check_function(
        RoundSTE, lambda x: torch.round(x / 0.25) * 0.25, surrogate=straight_through, training=False
    )
    assert not report.ok
    assert [f.status for f in report.findings if f.group == "reference"] == [Status.DIFFERS]


def test_a_backward_that_is_nan_at_tiny_inputs_is_wrong_in_every_dtype():
    """0/0 where exp(-1/x) underflows: no tiny or subnormal input was ever tried."""
    report = check_function(SmoothStep, training=False)
    assert not report.ok
    found = {f.check: f for f in report.findings if f.group == "every magnitude"}
    assert set(found) == {
        "every binade float32",
        "every binade float64",
        "every value float16",
        "every value bfloat16",
    }
    for name, finding in found.items():
        dtype = name.rsplit(" ", 1)[1]
        assert finding.status == Status.WRONG, finding
        assert finding.at.what == "backward" and finding.at.dtype == dtype
        assert 0 < finding.at.input < 2e-4 and finding.at.expected == pytest.approx(0, abs=1e-200)
        assert finding.detail.startswith("backward at x[") and "got nan" in finding.detail


def test_the_same_step_with_a_backward_that_stays_finite_passes():
    report = check_function(SafeSmoothStep, training=False)
    assert report.ok, str(report)
    assert {f.status for f in report.findings if f.group == "every magnitude"} == {Status.PASS}


class ClampedAtanh(torch.autograd.Function):
    """atanh of its input clamped inside (-1, 1), the derivative taken at the clamped input:
    right on the domain it is meant for, a convention off it."""

    @staticmethod
    def forward(ctx, x):
        clamped = x.clamp(-0.999, 0.999)
        ctx.save_for_backward(clamped)
        return torch.atanh(clamped)

    @staticmethod
    def backward(ctx, grad_output):
        (clamped,) = ctx.saved_tensors
        return grad_output / (1 - clamped * clamped)


def test_a_stated_domain_bounds_training_parity():
    """The article's pre-activations (about +-30) leave [-0.999, 0.999] at step 0: off the
    domain whatever the Function returns is a convention, so training parity says so and is no
    WRONG. (It trained on them and called the pair WRONG.)"""
    report = check_function(ClampedAtanh, torch.atanh, domain=(-0.999, 0.999))
    assert report.ok, str(report)
    (parity,) = [f for f in report.findings if f.check == "training parity"]
    assert parity.status == Status.INFO
    assert parity.detail.startswith(
        "the pre-activations leave the domain (-0.999 <= x <= 0.999) at step 0 ("
    )
    assert report.facts["training"]["float64 twin"]["left_the_domain_at"] == 0


def test_without_its_domain_the_clamped_atanh_is_wrong():
    """Off (-0.999, 0.999) its forward is flat and its backward is not: no domain, no excuse."""
    report = check_function(ClampedAtanh, torch.atanh, training=False)
    assert not report.ok
    assert any(f.status == Status.WRONG and f.at.input >= 0.999 for f in report.findings if f.at)


# -- the compiled world: torch.library custom ops, torch.compile -----------------------------

CUSTOM_OPS = """
import torch


@torch.library.custom_op("reluexp_unseen::softplus", mutates_args=())
def softplus(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softplus(x)


@softplus.register_fake
def _(x):
    return torch.empty_like(x)


def setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def backward(ctx, grad_output):
    (x,) = ctx.saved_tensors
    return grad_output * torch.sigmoid(x)


softplus.register_autograd(backward, setup_context=setup)


@torch.library.custom_op("reluexp_unseen::wrong_fake", mutates_args=())
def wrong_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softplus(x)


@wrong_fake.register_fake
def _(x):
    return x.new_empty(x.shape[:-1])  # the shape loses its last dimension


wrong_fake.register_autograd(backward, setup_context=setup)


def setup_mul(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


# PyTorch's custom-op tutorial's numpy_mul, its y's gradient summed to y's shape (a number from
# the command line is a 0-D tensor), times y_factor.
def numpy_mul_op(name, y_factor):

    @torch.library.custom_op(f"reluexp_unseen::{name}", mutates_args=())
    def op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.numpy(force=True) * y.numpy(force=True)).to(x.device)

    @op.register_fake
    def _(x, y):
        return torch.empty_like(x)

    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, y_factor * (grad * x).sum_to_size(y.shape)

    op.register_autograd(backward, setup_context=setup_mul)
    return op


numpy_mul = numpy_mul_op("numpy_mul", 1)
numpy_mul_doubled_y = numpy_mul_op("numpy_mul_doubled_y", 2)
"""


@pytest.fixture(scope="module")
def custom_ops(tmp_path_factory):
    """The two ops, as a module a user keeps beside their command."""
    if not hasattr(torch.library, "custom_op"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (torch 2.4's)")
    import importlib
    import sys

    directory = tmp_path_factory.mktemp("ops")
    (directory / "unseen_ops.py").write_text(CUSTOM_OPS)
    sys.path.insert(0, str(directory))
    try:
        yield importlib.import_module("unseen_ops"), directory
    finally:
        sys.path.remove(str(directory))


class BranchingReLU(torch.autograd.Function):
    """A ReLU that branches in Python on its input's values: a graph break under fullgraph."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        if bool((x < 0).any()):
            return x.clamp(min=0)
        return x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0)


class ReshapesWhenCompiled(torch.autograd.Function):
    """A ReLU whose forward reshapes under torch.compile alone: compiled, its backward cannot
    run (compile=true training fails at step 0); eager, it is right."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        y = x.clamp(min=0)
        if torch.compiler.is_compiling():
            y = y.reshape(-1)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0)


class ScaledByItsMaximum(torch.autograd.Function):
    """A ReLU times max|x| / max|x|, the maximum read with .item(): a graph break."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        largest = x.abs().max().item()
        return x.clamp(min=0) * (largest / largest)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0)


class ThirdInFloat32(torch.autograd.Function):
    """x / 3 computed in float32 whatever the input (a quantizer's scale, say); compiled, it
    multiplies by a third instead, as inductor may: the two differ by float32 rounding."""

    @staticmethod
    def forward(ctx, x):
        x32 = x.float()
        third = x32 * (1 / 3) if torch.compiler.is_compiling() else x32 / 3
        return third.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        return (grad_output.float() / 3).to(grad_output.dtype)


class ThirdOffByAPercent(ThirdInFloat32):
    """Its backward a percent off: beyond what finite differences of a float32 forward carry."""

    @staticmethod
    def backward(ctx, grad_output):
        return (grad_output.float() / 2.97).to(grad_output.dtype)


class ThirdOffWhenCompiled(ThirdInFloat32):
    """Compiled, a factor a thousandth off: beyond any rounding."""

    @staticmethod
    def forward(ctx, x):
        x32 = x.float()
        third = x32 * (1.001 / 3) if torch.compiler.is_compiling() else x32 / 3
        return third.to(x.dtype)


def compile_findings(report):
    return {f.check: f for f in report.findings if f.group == "compile"}


def test_a_correct_custom_op_passes_with_no_compile_finding(custom_ops):
    ops, _ = custom_ops
    report = check_function(
        ops.softplus, torch.nn.functional.softplus, training=False, compile=True
    )
    assert report.ok, str(report)
    found = compile_findings(report)
    assert {name: f.status for name, f in found.items()} == {
        "custom op (opcheck)": Status.PASS,
        "torch.compile fullgraph": Status.PASS,
    }


def test_a_custom_op_whose_fake_kernel_is_wrong_fails_naming_it(custom_ops):
    """It said `gradients correct`."""
    ops, _ = custom_ops
    report = check_function(ops.wrong_fake, training=False)
    assert not report.ok
    opcheck = compile_findings(report)["custom op (opcheck)"]
    assert opcheck.status == Status.WRONG
    assert opcheck.detail.startswith(
        "its fake kernel (register_fake) against the real output fails (test_faketensor, a "
        "float32 (4, 5) input): MetadataMismatchError: "
    )
    assert "Shapes torch.Size([4, 5]) and torch.Size([4]) are not equal" in opcheck.detail


def check_op(directory, tmp_path, name, *params):
    return run_cli(
        "activation=custom",
        f"activation.target=unseen_ops.{name}",
        *params,
        f"hydra.run.dir={tmp_path}",
        cwd=directory,
        check=False,
        module="reluexp.check",
    )


def test_a_custom_ops_tensor_argument_takes_a_number_as_a_functions_does(
    custom_ops, tmp_path, capfd
):
    """77.5: `+activation.params.y=0.5` was WRONG (`Expected a value of type 'Tensor' for
    argument 'y'`): a number became a tensor for a Function's argument, not for a custom op's.
    Now y is an input whose gradient is checked. vmap runs the op through its fallback, said,
    without the C++ warning torch prints to the terminal about it."""
    _, directory = custom_ops
    done = check_op(directory, tmp_path / "right", "numpy_mul", "+activation.params.y=0.5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("unseen_ops.numpy_mul: gradients correct")
    assert "BatchedFallback" not in capfd.readouterr().err
    report = json.loads((tmp_path / "right" / "check.json").read_text())
    (vmapped,) = [f for f in report["findings"] if f["check"] == "torch.func.vmap"]
    assert vmapped["detail"] == (
        "through vmap's fallback, a loop: reluexp_unseen::numpy_mul has no batching rule"
    )
    done = check_op(
        directory, tmp_path / "doubled", "numpy_mul_doubled_y", "+activation.params.y=0.5"
    )
    assert done.returncode == 1
    assert re.search(
        r"WRONG gradcheck \(4, 5\): gradient of y at y\[\]=0\.5 \(float64\): got \S+, ",
        done.stdout,
    ), done.stdout


@torch.compile(backend="eager")
def halved(x):
    return x / 2


class CompiledInside(torch.autograd.Function):
    """A Function whose forward calls a function it compiled itself: each dtype and shape the
    lab tries recompiles it, past dynamo's recompile limit, which dynamo logs as a warning."""

    @staticmethod
    def forward(ctx, x):
        return halved(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output / 2


def test_torchs_log_while_the_lab_runs_is_kept_in_the_report_not_the_terminal(capfd):
    """77.6: a Function's own @torch.compile hit dynamo's recompile limit, five lines of
    torch's log on stderr among the lab's."""
    report = check_function(CompiledInside, training=False)
    assert report.ok, str(report)
    assert capfd.readouterr().err == ""
    # Dynamo's words: `hit config.recompile_limit (8)` on torch 2.13, `cache_size_limit` on 2.3.
    assert any(
        re.search(r"hit config\.(recompile|cache_size)_limit", message)
        for message in report.facts["torch_log"]
    )


def test_a_custom_ops_tensor_argument_given_words_is_the_users_mistake(custom_ops, tmp_path):
    _, directory = custom_ops
    done = check_op(directory, tmp_path, "numpy_mul", "+activation.params.y=half")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "reluexp.check: error: activation.params.y='half': expected a number or a list of "
        "numbers (unseen_ops.numpy_mul takes a tensor there)"
    )


def test_the_default_check_compiles_nothing_and_says_so():
    """73.2: the fullgraph check imported dynamo, most of a default check's time: it is its own
    stage, which compile=True (--compile) runs."""
    found = compile_findings(check_function(BranchingReLU, torch.relu, training=False))
    assert found["torch.compile fullgraph"].status == Status.INFO
    assert found["torch.compile fullgraph"].detail == NOT_COMPILED


def test_a_graph_break_is_named_at_the_users_line():
    report = check_function(BranchingReLU, torch.relu, training=False, compile=True)
    found = compile_findings(report)["torch.compile fullgraph"]
    assert found.status == Status.INFO
    line = BranchingReLU.forward.__code__.co_firstlineno + 3  # the `if`
    assert f"breaks torch.compile's graph at {__file__}:{line} (float32 (64, 100): " in (
        found.detail
    )
    assert f"info: {found.detail}" in report.notes
    assert report.ok  # a graph break is information: eager still runs


@pytest.mark.slow
def test_compile_true_training_with_a_function_that_fails_under_compile_is_one_line(custom_ops):
    """Pages of torch's log reached stderr before the closing line."""
    import subprocess
    import sys

    _, directory = custom_ops
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reluexp",
            "activation=custom",
            "activation.target=unseen_ops.wrong_fake",
            "compile=true",
            "steps=3",
            "hydra.run.dir=run",
        ],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(
        "reluexp: failed after 0 steps: CompileFailed: torch.compile (compile=true) of the model "
        "with activation.target=unseen_ops.wrong_fake failed: "
    )
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" in (directory / "run" / "reluexp.log").read_text()


def test_a_function_that_fails_under_compile_is_unsupported_not_a_graph_break(capfd):
    """74.2: it was `info: ... breaks torch.compile's graph ... it runs in eager only` and 68
    lines of torch's log on stderr, while compile=true training on it failed at step 0."""
    report = check_function(ReshapesWhenCompiled, torch.relu, training=False, compile=True)
    found = compile_findings(report)["torch.compile fullgraph"]
    assert found.status == Status.UNSUPPORTED
    line = ReshapesWhenCompiled.backward.__code__.co_firstlineno + 3  # where the shapes clash
    assert found.detail.startswith(
        f"ReshapesWhenCompiled fails under torch.compile at {__file__}:{line} (float32 (64, 100): "
    )
    assert found.detail.endswith("compile=true training fails on it; it runs in eager")
    assert report.ok  # eager, its gradients are right
    assert capfd.readouterr().err == ""  # torch's own log held


def test_a_function_computing_in_float32_is_judged_in_float32_compiled_or_not():
    """77.5: a Function computing in float32 was wrong under fullgraph for a float32 rounding
    against eager, judged at float64's though its float64 input computes in float32. Its float64
    results being float32 values says so."""
    report = check_function(ThirdInFloat32, training=False, compile=True)
    assert compile_findings(report)["torch.compile fullgraph"].status == Status.PASS
    # Its float32 rounding is not taken for kinks (a staircase to a float64 grid: 1,500 of
    # them took 90 s), nor its finite differences' noise for a wrong backward.
    kinks = next(f for f in report.findings if f.check == "kinks of the forward")
    assert kinks.detail == "none"
    assert report.ok, str(report)
    wrong = check_function(ThirdOffByAPercent, training=False, dtypes=("float64",))
    assert not wrong.ok, str(wrong)
    found = compile_findings(check_function(ThirdOffWhenCompiled, training=False, compile=True))
    assert found["torch.compile fullgraph"].status == Status.WRONG
    assert re.fullmatch(
        r"compiled, its forward differs from eager's by up to \S+ \(float32 \(64, 100\)\): "
        r"beyond float32 rounding",
        found["torch.compile fullgraph"].detail,
    )


def test_an_item_graph_break_is_named_by_dynamos_reason_at_the_users_line(tmp_path):
    """74.2: it read as an internal dynamo error (PendingUnbackedSymbolNotFound), no line.
    Dynamo says the reason once a process (its warning is cached): a process of its own."""
    source = inspect.getsource(ScaledByItsMaximum)
    (tmp_path / "scaled.py").write_text(f"import torch\n\n\n{source}")
    done = run_process(
        "--compile",
        "activation=custom",
        "activation.target=scaled.ScaledByItsMaximum",
        "activation.reference=torch.relu",
        f"hydra.run.dir={tmp_path / 'check'}",
        cwd=tmp_path,
        module="reluexp.check",
    )
    line = 4 + source.splitlines().index("        largest = x.abs().max().item()")
    (said,) = [text for text in done.stdout.splitlines() if "torch.compile" in text]
    assert said.startswith(
        f"info: ScaledByItsMaximum breaks torch.compile's graph at {tmp_path / 'scaled.py'}:"
        f"{line} (float32 (64, 100): "
    )
    # Dynamo's own reason: its warning on torch 2.13 (`Graph break from Tensor.item()`), its
    # fullgraph error on 2.3 (`Unsupported: Tensor.item`).
    assert "Tensor.item" in said and "Internal" not in said, said
    # torch's own log held (its records start `W1207 08:02:04...`); a CUDA build of torch
    # without a driver still says so as it imports.
    assert not re.search(r"^[EWI]\d{4} |Traceback", done.stderr, flags=re.M), done.stderr


def test_eager_and_compiled_cost_are_one_finding_beside_the_reference():
    """77.6: --compile timed the compiled Function in a finding of its own, apart from the
    eager one; now one line, each beside its reference, in the same repetitions."""
    report = check_function(MyReLU, torch.relu, training=False, compile=True)
    (cost,) = [f for f in report.findings if f.group == "cost"]
    assert re.match(
        r"forward\+backward: \S+x the reference's time at \(64, 100\) \([^)]*\), compiled by "
        r"inductor \S+ us at \(64, 100\), \S+x the compiled reference's \(\S+ us\)",
        cost.detail,
    ), cost.detail
