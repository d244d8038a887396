"""The Function lab on Functions that are not elementwise, take several tensors, live on a
domain, jump, or compute in float32 inside float64; and the Python API's and the command's
own edges (bad arguments, the caller's random stream, devices, Ctrl-C)."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from reluexp.config import Config, ConfigError
from reluexp.lab import Status, check_function, command
from reluexp.options import Init
from tests import corpus
from tests.helpers import REPO_ROOT
from tests.test_lab import finding, run_check, statuses

pytestmark = pytest.mark.compat


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (
            "softmax_along_dim",
            "info: not elementwise: each row of dim -1 depends on the whole row",
        ),
        ("half_relu_half_tanh", "info: elementwise, but not the same function at every position"),
        ("log_of_positive", "info: checked on x > 0, where the forward is finite"),
        (
            "dropout_reusing_its_mask",
            "info: elementwise, but not the same function at every position",
        ),
        (
            "batch_only_normalizer",
            "info: takes inputs of 2 and 3 dimensions, not 0-D (raised IndexError: tuple index "
            "out of range), 1-D (raised RuntimeError: expand(",
        ),
    ],
)
def test_what_the_lab_found_of_a_functions_shape_is_one_info_line(tmp_path, capsys, name, said):
    code, report = run_check(tmp_path, *corpus.CORRECT[name])
    out = capsys.readouterr().out
    assert code == 0, out
    assert [line for line in out.splitlines() if line.startswith(said)], out
    assert "wrong" not in statuses(report).values()


def test_a_normalizer_is_judged_by_its_whole_vector_jacobian_product(tmp_path):
    _, report = run_check(tmp_path, *corpus.CORRECT["softmax_along_dim"])
    every = finding(report, "derivative (64, 100) every element")
    assert every["status"] == "pass"
    assert finding(report, "training parity")["status"] == "pass"
    # Kinks on a line of inputs mean nothing for a row's function; no picture of one either.
    assert "not looked for" in finding(report, "kinks of the forward")["detail"]
    assert not (tmp_path / "check.png").exists()
    # Without its row term the same Function is wrong, at the elements the row term moves.
    planted = check_function(corpus.SoftmaxDroppingRowTerm, params={"dim": -1}, training=False)
    every = next(f for f in planted.findings if f.check == "derivative (64, 100) every element")
    assert every.status == Status.WRONG and every.at.what == "backward"


def test_every_tensor_input_of_a_function_gets_its_gradient_checked():
    alpha, beta = torch.tensor(0.8), torch.tensor(0.1)
    right = check_function(
        corpus.ScaledShiftedTanh, params={"alpha": alpha, "beta": beta}, training=False
    )
    assert right.ok, right
    wrong = check_function(
        corpus.ScaledShiftedTanhWrongAlpha, params={"alpha": alpha, "beta": beta}, training=False
    )
    gradcheck = next(f for f in wrong.findings if f.check == "gradcheck (4, 5)")
    assert gradcheck.status == Status.WRONG
    assert gradcheck.at.what == "gradient of alpha" and gradcheck.at.tensor == "alpha"
    # The caller's tensors are the caller's: the check changes none of them.
    assert alpha.item() == pytest.approx(0.8) and not alpha.requires_grad


def test_a_stated_domain_is_where_the_check_looks():
    report = check_function(corpus.LogOfPositive, domain=(0.5, float("inf")), training=False)
    domain = next(f for f in report.findings if f.check == "domain")
    assert domain.detail == "checked on x >= 0.5, as stated (activation.domain)"
    assert report.ok, report
    wrong = check_function(corpus.LogOfPositiveHalved, domain=(1.0, 5.0), training=False)
    assert wrong.status == Status.WRONG
    located = [f.at.input for f in wrong.findings if f.status == Status.WRONG and f.at]
    assert located and all(1.0 <= x <= 5.0 for x in located)


def test_a_bad_domain_is_one_line(tmp_path, capsys):
    code, _ = run_check(tmp_path, *corpus.CORRECT["log_of_positive"], "activation.domain=[2,1]")
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (
        "reluexp.check: error: activation.domain=[2.0, 1.0]: expected [low, high] with "
        "low < high (inf for no bound)"
    )


def test_at_a_steps_jump_the_backward_is_a_convention(tmp_path):
    code, report = run_check(tmp_path, *corpus.CORRECT["heaviside_at_or_above"])
    assert code == 0
    kink = finding(report, "kink at x=0")
    assert kink["status"] == "convention" and "the forward steps from 0 to 1" in kink["detail"]
    assert finding(report, "derivative (64, 100) every element")["status"] == "pass"


def test_a_float32_constant_in_float64_math_is_precision_not_wrong(tmp_path):
    code, report = run_check(tmp_path, *corpus.CORRECT["erf_surrogate_float32_constant"])
    assert code == 0
    every = finding(report, "derivative (64, 100) every element")
    assert every["status"] == "precision"
    assert "the size of float32's rounding, as a float32 constant" in every["detail"]


def test_non_finite_pre_activations_of_a_diverged_experiment_are_conventions(tmp_path):
    code, report = run_check(tmp_path, *corpus.CORRECT["after_a_diverging_experiment"])
    assert code == 0
    last = finding(report, "experiment's pre-activations, last step")
    assert last["status"] == "convention" and "=nan" in last["detail"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"dtypes": "float32"}, "dtypes='float32': expected a tuple of floating dtypes"),
        ({"dtypes": ("float8",)}, "dtypes: 'float8' is not one the lab checks in"),
        ({"dtypes": (torch.int32,)}, "dtypes: torch.int32 is not one the lab checks in"),
        ({"params": [1]}, "params=[1]: expected a dict of the target's arguments"),
        ({"experiment": "cpu"}, "experiment='cpu': expected a reluexp.config.Config"),
        ({"experiment": Config(device="cuda:7")}, "device='cuda:7': "),
        ({"domain": (3.0, 1.0)}, "activation.domain=[3.0, 1.0]: expected [low, high]"),
    ],
)
def test_a_mistake_in_check_functions_arguments_is_one_config_error_before_any_check(
    monkeypatch, arguments, message
):
    def no_check(*args, **kwargs):
        raise AssertionError("a check ran")

    monkeypatch.setattr("reluexp.lab.pipeline.run_checks", no_check)
    with pytest.raises(ConfigError) as raised:
        check_function(corpus.Swish, training=False, **arguments)
    assert str(raised.value).startswith(message), str(raised.value)


def test_an_out_dir_under_a_file_is_refused_before_any_check(tmp_path, monkeypatch):
    monkeypatch.setattr("reluexp.lab.pipeline.run_checks", pytest.fail)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"out_dir='.*file/report': .*file is a file"):
        check_function(corpus.Swish, out_dir=tmp_path / "file" / "report")


def test_a_check_leaves_the_callers_random_stream_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_function(corpus.Swish, training=False)
    assert torch.equal(torch.rand(3), expected)


def test_a_device_this_machine_lacks_is_a_usage_error(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, report = run_check(tmp_path, "activation=myrelu", "device=cuda")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and report is None
    assert err == ["reluexp.check: error: device='cuda': CUDA is not available on this machine"]


@pytest.mark.slow
def test_ctrl_c_on_a_hanging_backward_is_one_line_naming_the_stage(tmp_path):
    marker = tmp_path / "hanging"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reluexp.check",
            "activation=custom",
            "activation.target=tests.corpus.HangingBackward",
            f"hydra.run.dir={tmp_path / 'check'}",
        ],
        cwd=REPO_ROOT,
        env=os.environ | {"RELUEXP_TEST_MARKER": str(marker)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), process.communicate(timeout=60)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130
    assert err.strip().splitlines() == ["reluexp.check: interrupted during returns"], err
    assert "Traceback" not in out + err


def test_an_interrupt_inside_the_users_code_names_the_stage_in_process(tmp_path, capsys):
    code = command.main(
        [
            "activation=custom",
            "activation.target=tests.test_lab_v.InterruptedBackward",
            f"hydra.run.dir={tmp_path}",
        ]
    )
    assert code == 130
    assert capsys.readouterr().err.strip() == "reluexp.check: interrupted during returns"


class InterruptedBackward(torch.autograd.Function):
    """Ctrl-C arriving while the backward runs."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        raise KeyboardInterrupt


USERS_TEST = """
import torch
from reluexp.lab import check_function


class DoubledReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * grad_output * (x > 0)


def test_as_the_readme_writes_it():
    report = check_function(DoubledReLU, reference=torch.relu, training=False)
    assert report.ok, str(report)


def test_with_the_report_as_the_message():
    report = check_function(DoubledReLU, reference=torch.relu, training=False)
    assert report.ok, report
"""


def test_a_failing_check_in_a_users_pytest_shows_the_verdict_lines(tmp_path):
    (tmp_path / "test_users.py").write_text(USERS_TEST)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = result.stdout
    assert result.returncode == 1, out
    # Both failures open with the first line the command prints; the README's pattern shows
    # every line, the verdict last.
    first = r"E\s+AssertionError: WRONG gradcheck \(4, 5\): backward at x\[\d, \d\]="
    assert len(re.findall(first, out)) == 2, out
    assert re.search(r"E\s+DoubledReLU: WRONG\n", out), out
    assert "Report(" not in out and "Finding(" not in out, out


def test_an_input_the_backward_gives_none_needs_no_gradient_and_each_other_is_judged():
    alpha, beta = torch.tensor(0.8), torch.tensor(0.1)
    right = check_function(
        corpus.ScaledTanhFixedShift, params={"alpha": alpha, "beta": beta}, training=False
    )
    assert right.ok, str(right)
    returns = next(f for f in right.findings if f.check == "returns")
    assert "returns None for beta: taken as needing no gradient" in returns.detail
    wrong = check_function(
        corpus.ScaledTanhFixedShiftDoubledAlpha,
        params={"alpha": alpha, "beta": beta},
        training=False,
    )
    failing = [f for f in wrong.findings if f.status == Status.WRONG]
    assert failing and all(f.at is not None and f.at.tensor == "alpha" for f in failing), failing
    assert not [line for line in str(wrong).splitlines() if "WRONG" in line and "beta" in line]


def test_a_module_instance_is_checked_as_its_class():
    instance = torch.nn.PReLU(init=0.3)
    report = check_function(instance, reference=torch.nn.PReLU, training=False)
    assert report.ok and report.name == "PReLU", str(report)
    wrong = check_function(corpus.PReLUWithWrongSlopeGradient(), training=False)
    gradcheck = next(f for f in wrong.findings if f.check == "gradcheck (4, 5)")
    assert gradcheck.status == Status.WRONG and gradcheck.at.tensor == "weight"
    # The caller's instance is the caller's: not cast, not trained.
    assert instance.weight.dtype == torch.float32 and instance.weight.item() == pytest.approx(0.3)
    assert instance.weight.grad is None
    with pytest.raises(ConfigError, match="PReLU already built; pass its class"):
        check_function(instance, params={"init": 0.1})


def test_a_learnable_module_trains_beside_its_forward_differentiated_by_finite_differences():
    # The seed's lr diverges with a PReLU: a gentler experiment, as the check advises.
    experiment = Config(device="cpu", lr=1e-6)
    experiment.model.init = Init.scaled
    right = check_function(corpus.PReLU, experiment=experiment)
    parity = next(f for f in right.findings if f.check == "training parity")
    assert parity.status == Status.PASS, parity
    assert "beside its own forward differentiated by finite differences part at step" in (
        parity.detail
    )
    wrong = check_function(corpus.PReLUWithWrongSlopeGradient, experiment=experiment)
    parity = next(f for f in wrong.findings if f.check == "training parity")
    assert parity.status == Status.WRONG and "far beyond rounding" in parity.detail, parity


def test_a_convention_line_shows_the_gradient_that_chose_and_not_a_sum_that_agrees():
    """62.8: a PReLU whose input gradient at 0 is 1 (nn.PReLU's: its slope, 0.25). The line at
    the kink showed the slope's gradient, a sum over the batch equal to its finite differences
    to their precision (got -0.001, finite differences -0.000999...), and not the input's."""
    report = check_function(corpus.PReLU, torch.nn.PReLU, training=False)
    kink = next(f for f in report.findings if f.check == "kink at x=0")
    assert kink.status == Status.CONVENTION
    at = kink.at
    assert (at.what, at.input, at.got, at.expected) == ("backward", 0.0, 1.0, 0.25)


def test_backwards_that_differ_where_the_forwards_agree_blame_neither_by_name():
    """62.8: beside a wrong backward the reference's gradient was said not to be the forward's
    derivative; the gradient checks are what judge the Function's."""
    report = check_function(corpus.GELUWrongConstant, torch.nn.functional.gelu, training=False)
    assert report.status == Status.WRONG
    same = next(f for f in report.findings if f.check.startswith("same function as the reference"))
    assert "where the forwards agree: one of them is not the derivative there" in same.detail
    assert "the reference's gradient is not" not in same.detail


def test_a_reference_takes_keyword_arguments_of_its_own(tmp_path):
    """62.9: a tanh GELU's reference is F.gelu with approximate="tanh", which the Function
    does not take: without a wrapper it was checked against the exact GELU."""
    gelu = torch.nn.functional.gelu
    against_exact = check_function(corpus.PlainGELUTanh, gelu, training=False)
    assert against_exact.status == Status.DIFFERS
    against_tanh = check_function(
        corpus.PlainGELUTanh, gelu, reference_params={"approximate": "tanh"}, training=False
    )
    assert against_tanh.ok, str(against_tanh)
    code = command.main(
        [
            "activation=custom",
            "activation.target=tests.corpus.PlainGELUTanh",
            "activation.reference=torch.nn.functional.gelu",
            "+activation.reference_params.approximate=tanh",
            f"hydra.run.dir={tmp_path}",
        ]
    )
    assert code == 0
