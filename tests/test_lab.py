"""The Function lab: Functions written by others pass, with or without a reference; planted bugs
fail, naming the user's class and the input; each verdict says what it means; the Python API
gives what the command gives."""

import inspect
import json
import re
import subprocess
import sys

import pytest
import torch

from reluexp.config import Config, ConfigError
from reluexp.functions import MyReLU
from reluexp.lab import Status, check_function, command, pipeline
from reluexp.lab.calls import raised
from reluexp.lab.cases import sample
from tests import corpus
from tests.helpers import REPO_ROOT, SHIPPED_ACTIVATIONS, SeedRelu, run_cli, tensorboard

pytestmark = pytest.mark.compat


def run_check(tmp_path, *overrides):
    code = command.main([*overrides, f"hydra.run.dir={tmp_path}"])
    path = tmp_path / "check.json"
    report = json.loads(path.read_text()) if path.exists() else None
    return code, report


def statuses(report):
    return {f["check"]: f["status"] for f in report["findings"]}


def finding(report, check):
    return next(f for f in report["findings"] if f["check"] == check)


FAILING = {"wrong", "fails at large inputs", "differs from its reference", "error of the lab"}


@pytest.mark.parametrize("name", SHIPPED_ACTIVATIONS)
def test_every_shipped_activation_passes(tmp_path, name):
    code, report = run_check(tmp_path, f"activation={name}")
    assert code == 0 and report["passed"], report["findings"]
    assert not set(statuses(report).values()) & FAILING


@pytest.mark.parametrize("name", corpus.CORRECT)
def test_a_correct_function_written_by_others_passes(tmp_path, capsys, name):
    code, report = run_check(tmp_path, *corpus.CORRECT[name])
    failing = [f for f in report["findings"] if f["status"] in FAILING]
    assert code == 0 and not failing, failing
    assert "gradients correct" in capsys.readouterr().out.splitlines()[-1]


# What each planted bug's first failing line must say (its user's class, the input, the cause).
PLANTED_LINES = {
    "doubled": r"WRONG gradcheck \(4, 5\): backward at x\[0, 0\]=-6\.93\S* \(float64\): "
    r"got -0\.0115\d*, derivative of the forward -0\.00578",
    "wrong_constant": r"WRONG gradcheck \(4, 5\): backward at x\[\d, \d\]=\S+ \(float64\): "
    r"got \S+, derivative of the forward",
    "wrong_sign_by_a_kink": r"WRONG gradcheck \(4, 5\): backward at x\[\d, \d\]=0\.\d+ "
    r"\(float64\): got -1\.0, derivative of the forward 1\.0",
    "wrong_shape": r"WRONG returns: raised RuntimeError: WrongShape\.backward returned an "
    r"invalid gradient at index 0 - got \[5\] but expected shape compatible with \[4, 5\]",
    "tuple_return": r"WRONG returns: forward returned a tuple of 2, not a tensor",
    "in_place": r"WRONG returns: forward changed its input in place",
    # 77.1: gradcheck passes both.
    "backward_writes_its_gradient": r"WRONG returns: ClippedStraightThroughInPlace\.backward "
    r"changed its incoming gradient in place",
    # Each channel's largest element, the one a strict mask drops.
    "channel_quantizer_dropping_its_largest": r"WRONG derivative \(64, 100\) every element: "
    r"backward at x\[\d+, \d+\]=\S+ \(float64\): got 0\.0, declared surrogate",
    # 77.5: neighbours whose squares underflow float32 (float64's truth holds them).
    "modulus_of_tiny_neighbours": r"WRONG every binade float32: backward at x\[\d+, \d+\]="
    r"\S+e-(19|[23]\d) \(float32\): got 0\.0, derivative of the forward",
    "backward_writes_its_input": r"WRONG returns: ReLUSavedInPlace\.backward changed the "
    r"forward's input in place",
    "overflowing_forward": r"FAILS AT LARGE INPUTS large inputs float32: forward at "
    r"x\[2\]=100\.0 \(float32\): got inf, float64 forward 100\.0.*non-finite from "
    r"x=8\d\.\d+ on, where exp\(x\) overflows float32: .*relu\(x\) \+ log1p\(exp\(-\|x\|\)\)",
    "wrong_for_large_inputs": r"WRONG large inputs float32: backward at x\[2\]=100\.0 "
    r"\(float32\): got 0\.0, derivative of the forward 1\.0",
    "wrong_in_float64": r"WRONG gradcheck \(4, 5\): backward at x\[0, 0\]=\S+ \(float64\)",
    "wrong_surrogate_constant": r"WRONG derivative \(64, 100\) every element: backward at "
    r"x\[0, 0\]=\S+ \(float64\): got \S+, declared surrogate",
    "wrong_slope_gradient": r"WRONG gradcheck \(4, 5\): gradient of weight at weight\[0\]=0\.25 "
    r"\(float64\): got \S+, finite differences of the forward",
    "differs_from_reference": r"DIFFERS FROM ITS REFERENCE same function as the reference "
    r"\(float64\): forward at x=\S+: got \S+, reference \S+, \S+ of the reference's value apart",
    "new_activation_wrong": r"WRONG gradcheck \(4, 5\): backward at x\[\d, \d\]=\S+ "
    r"\(float64\): got \S+, derivative of the forward",
    "surrogate_doubled": r"WRONG derivative \(64, 100\) every element: backward at "
    r"x\[0, 0\]=-0\.653\d* \(float64\): got -0\.755\d*, declared surrogate -0\.377",
    "surrogate_halved": r"WRONG derivative \(64, 100\) every element: backward at "
    r"x\[0, 0\]=-0\.653\d* \(float64\): got -0\.188\d*, declared surrogate -0\.377",
    "surrogate_zero_on_one_side": r"WRONG derivative \(64, 100\) every element: backward at "
    r"x\[0, 0\]=-0\.653\d* \(float64\): got -0\.0, declared surrogate -1\.12",
    "swish_beta_nan_at_large_inputs": r"FAILS AT LARGE INPUTS large inputs float32: "
    r"backward at x\[3\]=-100\.0 \(float32\): got nan",
    "normalizer_without_row_term": r"WRONG gradcheck \(4, 5\): backward at x\[\d, \d\]=\S+ "
    r"\(float64\): got \S+, derivative of the forward",
    "wrong_second_input": r"WRONG gradcheck \(4, 5\): gradient of alpha at "
    r"alpha\[\]=0\.80\d* \(float64\): got \S+, derivative of the forward",
    # A random forward, checked with its randomness fixed.
    "dropout_doubled": r"WRONG gradcheck \(4, 5\): backward at x\[\d, \d\]=\S+ \(float64\): "
    r"got \S+, derivative of the forward",
    "raises_on_every_shape": r"WRONG returns: raised AttributeError: \S+ object has no "
    r"attribute 'scale'",
    # A non-finite backward where the truth is finite is wrong, whatever convention is near.
    "inf_at_minus_zero": r"WRONG edge 0, -0\.0, ±1\.5: backward at x\[1\]=-0\.0 \(float32\): "
    r"got -inf, declared surrogate 0\.3",
    "wrong_inside_its_domain": r"WRONG gradcheck \(4, 5\): backward at x\[\d, \d\]=\d\S* "
    r"\(float64\): got \S+, derivative of the forward",
}


@pytest.mark.parametrize("name", corpus.PLANTED)
def test_a_planted_bug_fails_naming_the_class_and_the_input(tmp_path, capsys, name):
    code, report = run_check(tmp_path, *corpus.PLANTED[name])
    out = capsys.readouterr().out
    assert code == 1 and not report["passed"]
    lines = out.splitlines()
    # The verdict line names the user's class; a line per failing group says where.
    target = corpus.PLANTED[name][1].rsplit(".", 1)[1]
    verdicts = "WRONG|FAILS AT LARGE INPUTS|DIFFERS FROM ITS REFERENCE"
    assert re.match(rf"{target}: ({verdicts})\. Report: ", lines[-1]), lines[-1]
    assert re.search(PLANTED_LINES[name], out), out
    # Nothing of the lab's own wrappers or of autograd's node names reaches the user.
    assert not re.search(r"Spy|ApplyTemplate|Backward\b|Traceback|LAB ERROR", out)


def test_the_output_is_a_line_per_failing_group_and_the_table_is_behind_verbose(tmp_path, capsys):
    run_check(tmp_path / "quiet", *corpus.PLANTED["doubled"])
    lines = capsys.readouterr().out.splitlines()
    groups = [line.split(":")[0] for line in lines[:-1]]
    assert len(groups) == len(set(groups)) <= 7
    assert all(len(line) < 400 for line in lines)
    run_check(tmp_path / "verbose", *corpus.PLANTED["doubled"], "verbose=true")
    table = capsys.readouterr().out
    assert "gradgradcheck (4, 5)" in table and "PASS" in table


def test_myrelu_against_relu_parts_where_an_independent_loop_parts(
    tmp_path, seed_steps_on_one_thread
):
    code, report = run_check(tmp_path, "activation=myrelu")
    assert code == 0
    # Its backward is the derivative of its own forward (clamp passes the gradient at 0, as
    # it does); only against torch.relu is 0 a convention.
    assert statuses(report)["training parity"] == "pass"
    assert statuses(report)["kink at x=0"] == "convention"
    assert "reference 0.0" in finding(report, "kink at x=0")["detail"]
    custom, builtin = seed_steps_on_one_thread
    parted = next(t for t, (a, b) in enumerate(zip(custom, builtin)) if a["loss"] != b["loss"])
    relative = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(custom, builtin))
    training = report["training"]["float32 reference"]
    assert statuses(report)["training beside the reference"] == "convention"
    assert training["first_parting_step"] == parted
    assert training["exact_zeros_before_parting"] == custom[parted - 1]["exact_zeros"] > 0
    assert training["steps_with_exact_zeros"] == sum(r["exact_zeros"] > 0 for r in custom)
    assert training["max_relative_difference"] == relative
    assert training["final_loss"] == custom[-1]["loss"]
    assert training["other_final_loss"] == builtin[-1]["loss"]


def test_lean_relu_matches_relu_exactly_and_saves_nothing_extra(tmp_path):
    _, report = run_check(tmp_path, "activation=lean_relu")
    by_name = statuses(report)
    assert by_name["kink at x=0"] == "pass"  # gradient 0 at x == 0, as torch.relu
    assert by_name["training beside the reference"] == "pass"
    assert report["training"]["float32 reference"]["first_parting_step"] is None
    saved = finding(report, "saved bytes per element")["detail"]
    assert saved.startswith("4 saved, 0 beyond the output")
    assert by_name["torch.func.vmap"] == "pass"


@pytest.mark.parametrize(
    ("name", "kinks"),
    [
        ("hardswish", [-3.0, 3.0]),
        ("hardsigmoid", [-3.0, 3.0]),
        ("hard_mish", [-2.0]),
        ("relu6", [0.0, 6.0]),
        ("hardtanh", [-1.0, 1.0]),
        ("pade", [-4.0, 0.0]),
        ("elu", []),
        ("softsign", []),
        ("smelu", []),
    ],
)
def test_kinks_are_found_on_the_forward_itself(tmp_path, name, kinks):
    _, report = run_check(tmp_path, *corpus.CORRECT[name])
    assert [k["x"] for k in report["kinks"]] == kinks


def test_a_different_subgradient_at_a_kink_is_right_and_a_convention_against_the_reference(
    tmp_path,
):
    _, report = run_check(tmp_path, *corpus.CORRECT["clamp_at_2"])
    assert [k["x"] for k in report["kinks"]] == [2.0]
    kink = finding(report, "kink at x=2")
    assert kink["status"] == "convention"
    assert kink["detail"] == (
        "backward at x[0]=2.0 (float64): got 0.0, reference 1.0 (the forward's derivative is 1 "
        "from the left, 0 from the right)"
    )
    # Without the reference, 0 lies between the one-sided derivatives: right.
    report = check_function(corpus.ClampAt2, training=False)
    assert next(f for f in report.findings if f.check == "kink at x=2").status == Status.PASS


def test_autograd_of_a_formula_is_not_trusted_where_a_piece_of_it_bends(tmp_path):
    """log1p(exp(-|x|)) + relu(x) is smooth at 0, where autograd of its pieces gives 1; its
    derivative there is 0.5, which the Function's sigmoid(x) gives."""
    report = check_function(corpus.SoftplusLog1pExp, training=False)
    assert report.ok, report
    edge = next(f for f in report.findings if f.check == "edge 0, -0.0, ±1.5")
    assert edge.status == Status.PASS


def test_built_ins_that_approximate_do_not_make_a_correct_function_wrong(tmp_path):
    for name in ("hardsigmoid_clamp", "softplus_log1p_exp"):
        code, report = run_check(tmp_path / name, *corpus.CORRECT[name])
        assert code == 0, report["findings"]
        same = finding(report, "same function as the reference (float64)")
        assert same["status"] == "info"
        assert "the size of a built-in's own approximations" in same["detail"]


def test_a_new_activation_is_checked_without_a_reference(tmp_path, capsys):
    code, report = run_check(tmp_path, *corpus.CORRECT["squareplus"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[-2].startswith("no reference: not compared with a built-in")
    assert finding(report, "oracle")["detail"] == (
        "the forward, differentiated by autograd in float64"
    )
    assert "reference" not in {f["group"] for f in report["findings"]}


def test_a_forward_autograd_cannot_follow_is_judged_by_finite_differences(tmp_path):
    report = check_function(corpus.NumpyCube, training=False)
    assert report.ok, report
    oracle = next(f for f in report.findings if f.check == "oracle")
    assert oracle.detail.startswith("finite differences of the forward in float64")
    assert "numpy" in oracle.detail


def test_double_backward_is_its_own_finding_and_decides_only_when_asked(tmp_path, capsys):
    code, report = run_check(tmp_path / "default", *corpus.CORRECT["quick_gelu"])
    assert code == 0
    assert statuses(report)["gradgradcheck (4, 5)"] == "double backward differs"
    assert "first derivatives are unaffected" in finding(report, "gradgradcheck (4, 5)")["detail"]
    assert "; 1 double backward differs finding," in capsys.readouterr().out
    code = command.main(
        ["--double-backward", *corpus.CORRECT["quick_gelu"], f"hydra.run.dir={tmp_path / 'asked'}"]
    )
    assert code == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("QuickGELU: DOUBLE BACKWARD DIFFERS")


def test_the_naive_tanh_is_less_precise_in_half_precision_and_says_by_how_much(tmp_path):
    _, report = run_check(tmp_path, *corpus.CORRECT["tanh_from_output"])
    half = finding(report, "parity float16")
    assert half["status"] == "precision"
    units = int(re.search(r"(\d+) units of float16 beyond", half["detail"]).group(1))
    assert units > 2
    assert "compute in float32, cast back" in half["detail"]
    assert statuses(report)["parity float32"] == statuses(report)["parity float64"] == "pass"


def test_an_overflow_near_the_dtypes_range_is_precision_and_at_ordinary_inputs_wrong(tmp_path):
    """hardswish's x * (x + 3) overflows near the largest values, where the true result is
    finite: precision; at ordinary inputs, an overflow is wrong."""
    _, report = run_check(tmp_path, *corpus.CORRECT["hardswish"])
    assert statuses(report)["large inputs float16"] == "precision"
    code, report = run_check(
        tmp_path / "overflow",
        "activation=custom",
        "activation.target=tests.corpus.SquarePlusHalfOverflow",
        "activation.reference=tests.corpus.square_plus",
        "lr=1e-12",
    )
    assert code == 1
    parity = finding(report, "parity float16")
    assert parity["status"] == "wrong" and "got -inf" in parity["detail"]


def test_a_result_past_the_dtypes_range_is_rightly_inf(tmp_path):
    """exp(100) is past float32's largest value: inf there is the right float32 result."""
    report = check_function(corpus.Exp, training=False)
    assert report.ok
    large = next(f for f in report.findings if f.check == "large inputs float32")
    assert large.status == Status.PASS


def test_training_parity_is_decided_against_the_functions_own_twin(tmp_path):
    """Swish computed in float32 drifts from the built-in by rounding alone; in float64 beside
    its own forward differentiated by autograd it parts, if at all, by rounding's size."""
    _, report = run_check(tmp_path, *corpus.CORRECT["swish"])
    training = report["training"]
    assert statuses(report)["training parity"] == "pass"
    assert training["float32 reference"]["max_relative_difference"] > 1e-6
    at_parting = training["float64 twin"]["relative_difference_at_parting"]
    assert at_parting is None or at_parting < 1e-12
    # The runs were read from the training code: nothing of them on disk.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "check.json",
        "check.md",
        "check.png",
        "events.out.tfevents.reluexp-check",
    ]


def test_runs_that_both_diverge_are_information_with_settings_that_train(tmp_path, capsys):
    code, report = run_check(tmp_path, *corpus.CORRECT["exp"])
    assert code == 0
    detail = finding(report, "training parity")["detail"]
    assert detail.startswith("both runs diverge: the experiment's settings are too large")
    assert "model.init=scaled lr=" in detail
    # 62.7: the verdict itself says what it rests on without (it said `gradients correct`).
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    settings = detail.rpartition("; ")[2]
    assert verdict.startswith(
        f"Exp: gradients correct; training parity did not run (both runs diverge; {settings}). "
    )


def test_a_declared_surrogate_is_what_the_backward_is_checked_against(tmp_path):
    code, report = run_check(tmp_path, "activation=spike")
    assert code == 0
    assert "declared surrogate" in finding(report, "gradcheck")["detail"]
    assert report["oracle"]["kind"] == "surrogate"


def test_a_step_reference_with_a_correct_surrogate_passes_without_rounding_conventions(tmp_path):
    code, report = run_check(tmp_path, *corpus.CORRECT["snntorch_fast_sigmoid"])
    assert code == 0
    assert "convention" not in {
        f["status"] for f in report["findings"] if f["group"] in ("kinks", "parity")
    }
    # Its float32 mask for a float64 input is said, not failed.
    returns = finding(report, "returns")
    assert returns["status"] == "info"
    assert "forward returns float32 for a float64 input" in returns["detail"]


def test_the_shipped_spike_passes_with_a_plain_step_reference(tmp_path):
    code, report = run_check(
        tmp_path, "activation=spike", "activation.reference=tests.corpus.heaviside"
    )
    assert code == 0, report["findings"]
    detail = finding(report, "training beside the reference")["detail"]
    assert "whose gradient is not the declared surrogate" in detail


def test_a_reference_that_refuses_an_input_is_named_and_not_compared_there(tmp_path):
    """77.4: torch's per-channel fake quantizer takes inputs of 2-D or more: where the lab
    gives it 1-D ones the reference is named as what raised, the channel-wise quantizer judged
    on its own (training beside such a reference was a lab error)."""
    code, report = run_check(tmp_path, *corpus.CORRECT["channel_quantizer"])
    assert code == 0, report["findings"]
    refused = (
        "the reference tests.corpus.channel_fake_quant raised IndexError: tuple index out of range"
    )
    details = {f["check"]: f["detail"] for f in report["findings"]}
    assert details["edge 0-dim"] == f"not compared with the reference: {refused}"
    assert details["large inputs float32"] == f"not compared with the reference: {refused}"
    assert f"not timed at (1,) ({refused})" in details["cost: forward+backward time"]
    assert "x the reference's time at (64, 100)" in details["cost: forward+backward time"]
    assert details["training beside the reference"].startswith("in float32 they part at step")


def test_a_function_of_one_width_is_checked_at_it_and_not_trained_at_another():
    """77.4: a per-channel Module (100 learnt slopes) refused the lab's (4, 5) input: `WRONG
    returns`, a shape the lab chose. Now the lab finds the width it takes among its parameters'
    sizes and lays every input out in rows of it; a network of another width is not trained,
    and the verdict says how to train it."""
    report = check_function(corpus.ChannelPReLU, params={"channels": 64}, dtypes=("float64",))
    assert report.ok, str(report)
    returns = next(f for f in report.findings if f.check == "returns")
    assert returns.detail.startswith(
        "takes inputs whose last dimension is 64 only (the size of its parameters): checked on "
        "those, other inputs laid out in rows of 64"
    )
    assert report.verdict().endswith(
        "training parity did not run (ChannelPReLU takes inputs of width 64 only, the "
        "experiment's hidden layers are [100]: model.hidden=[64] trains it)"
    )


def test_a_reference_that_raises_everywhere_is_a_caveat_of_the_verdict():
    def needs_a_gpu(x):
        raise RuntimeError("Expected a 'cuda' device")

    report = check_function(corpus.Swish, reference=needs_a_gpu, dtypes=("float64",))
    assert report.ok
    refused = (
        f"the reference {needs_a_gpu.__qualname__} raised RuntimeError: Expected a 'cuda' device"
    )
    reference = next(f for f in report.findings if f.group == "reference")
    assert (reference.status, reference.detail) == (Status.UNSUPPORTED, f"not compared: {refused}")
    assert report.verdict() == (
        f"Swish: gradients correct; {refused}: not compared there (check.md says where)"
    )


def test_a_forward_that_overflows_in_float64_is_found_without_a_reference():
    """77.5: asinh squaring its input overflows float64 past 1.34e154, where its value is 355;
    its own float64 forward was the only truth there, and it passed. A continuous function
    does not leap from 355 to NaN: past |x| = 1e4, as everywhere, precision, said. Near 0 its
    finite differences at the sign's bend are extrapolated: no precision finding there."""
    report = check_function(corpus.AsinhSquaring, dtypes=("float64",), training=False)
    found = next(f for f in report.findings if f.check == "every binade float64")
    assert found.status == Status.PRECISION
    assert re.fullmatch(
        r"forward at x\[\d+\]=1\.3407807929942597e\+154 \(float64\): got nan, the forward's "
        r"value at x=1\.00559e\+154 just below it 355\.2968\d+ \(past \|x\| = 10000 an "
        r"intermediate overflows, where the result would fit\)",
        found.detail,
    ), found.detail


def test_check_function_gives_what_the_command_gives(tmp_path, capsys):
    """From the user's own test suite: objects or dotted paths, nothing written."""
    report = check_function(corpus.DoubledSwish, reference=torch.nn.functional.silu)
    assert not report.ok and report.status == Status.WRONG
    code, written = run_check(tmp_path / "command", *corpus.PLANTED["doubled"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert str(report).splitlines()[:-1] == out[:-1]
    assert out[-1].startswith(str(report).splitlines()[-1])
    assert [f.check for f in report.findings] == [f["check"] for f in written["findings"]]
    fine = check_function(
        "tests.corpus.SnnTorchFastSigmoid",
        reference="tests.corpus.heaviside",
        surrogate="reluexp.functions.fast_sigmoid_derivative",
        params={"slope": 25.0},
        dtypes=("float32", "float64"),
        training=False,
    )
    assert fine.ok, fine
    assert {f.check for f in fine.findings} >= {"parity float32", "parity float64"}
    assert "parity float16" not in {f.check for f in fine.findings}


def test_check_function_writes_nothing_unless_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_function(corpus.Swish, reference=torch.nn.functional.silu)
    assert list(tmp_path.iterdir()) == []
    check_function(corpus.Swish, training=False, out_dir=tmp_path / "report")
    assert (tmp_path / "report" / "check.md").is_file()


def test_a_failure_of_the_lab_is_its_own_error_not_the_users_wrong(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise KeyError("a bug in the lab")

    monkeypatch.setattr("reluexp.lab.compare.judge", broken)
    code, report = run_check(tmp_path, "activation=myrelu")
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[-1].startswith("MyReLU: LAB ERROR in ")
    assert "(the lab failed, not your Function)" in out[-1]
    assert not any(line.startswith("WRONG") for line in out)
    assert "error of the lab" in statuses(report).values()
    markdown = (tmp_path / "check.md").read_text()
    assert "Traceback (most recent call last)" in markdown and "a bug in the lab" in markdown


def test_the_picture_shows_the_function_its_oracle_and_its_reference(tmp_path):
    run_check(tmp_path, *corpus.CORRECT["hardswish"])
    png = (tmp_path / "check.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
    assert "| kinks | kink at x=-3 |" in (tmp_path / "check.md").read_text()
    # The same picture and table in TensorBoard, in the check directory's own run.
    events = tensorboard(tmp_path)
    (image,) = events.Images("check/functions")
    assert image.encoded_image_string == png
    (text,) = events.Tensors("check/report")
    assert text.tensor_proto.string_val[0].decode() == (tmp_path / "check.md").read_text()


def test_gelu_with_a_wrong_constant_passes_fast_gradcheck_but_not_the_lab(tmp_path):
    """gradcheck's tolerance lets 0.4 for 1/sqrt(2 pi) through; every element does not."""
    x = sample((64, 100), torch.Generator().manual_seed(0), []).requires_grad_()
    assert torch.autograd.gradcheck(corpus.GELUWrongConstant.apply, (x,), fast_mode=True)
    code, _ = run_check(tmp_path, *corpus.PLANTED["wrong_constant"])
    assert code == 1


def test_messages_carry_the_innermost_cause():
    try:
        try:
            raise ValueError("planted failure in the user's forward")
        except ValueError as inner:
            raise RuntimeError("backend='aot_eager' raised:\n") from inner
    except RuntimeError as error:
        message = raised(error)
    assert message == (
        "raised RuntimeError: backend='aot_eager' raised: "
        "raised ValueError: planted failure in the user's forward"
    )


def test_the_report_gives_the_cost_against_the_reference(tmp_path):
    code, report = run_check(tmp_path, "activation=myrelu")
    assert code == 0
    cost = report["cost"]
    assert set(cost) == {"(1,)", "(64, 100)"}
    for measured in cost.values():
        assert measured["function_us"] > 0 and measured["reference_us"] > 0
        assert measured["ratio"] == measured["function_us"] / measured["reference_us"]
    line = finding(report, "cost: forward+backward time")["detail"]
    assert f"{cost['(64, 100)']['ratio']:.2f}x the reference's time at (64, 100)" in line


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["activation=custom"], "activation.target=None: required"),
        (["activation=nope"], "Could not find 'activation/nope'"),
        (["lr=0"], "lr=0.0: must be finite and > 0"),
        (
            ["activation=custom", "activation.target=nomod.X"],
            "activation.target=nomod.X: no module named 'nomod' was found",
        ),
        (
            ["activation=leaky_relu", "+activation.params.bogus=1"],
            "activation.params.bogus: reluexp.functions.LeakyReLU takes negative_slope",
        ),
        (
            [
                "activation=custom",
                "activation.target=tests.corpus.Squareplus",
                "activation.params.b=2",
            ],
            "activation.params.b: no such key (a new key is added with a +: "
            "+activation.params.b=2)",
        ),
        (
            ["activation=spike", "activation.surrogate=os.system"],
            "activation.surrogate=os.system: a builtin_function_or_method, not a function",
        ),
        (  # 42.6: once `WRONG returns: raised TypeError`
            ["activation=spike", "activation.surrogate=torch.nn.functional.mse_loss"],
            "activation.surrogate=torch.nn.functional.mse_loss: takes "
            f"({', '.join(inspect.signature(torch.nn.functional.mse_loss).parameters)}) besides "
            "the params it is given; a surrogate is g(x, **params)",
        ),
        (  # 31.4: a param outside the range the Function's forward accepts
            ["activation=spike", "activation.params.slope=-1"],
            "activation.params: reluexp.functions.Spike refuses them: slope=-1: the surrogate's "
            "slope must be a finite number > 0",
        ),
    ],
)
def test_usage_errors_exit_2_with_a_message(tmp_path, capsys, overrides, message):
    code, _ = run_check(tmp_path, *overrides)
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("reluexp.check: error: ") and message in err


def test_a_param_added_with_a_plus_reaches_the_function(tmp_path):
    code, report = run_check(
        tmp_path,
        "activation=custom",
        "activation.target=tests.corpus.Squareplus",
        "+activation.params.b=2.0",
    )
    assert code == 0
    # sqrt(x^2 + b) / 2 at 0: b = 2 gives sqrt(2) / 2.
    assert report["findings"][0]["status"] in ("pass", "info")


@pytest.mark.slow
def test_users_own_function_from_the_current_directory_without_compiling_it(tmp_path):
    """The default check imports no dynamo (about a second: --compile is its own stage)."""
    # torch.func's transforms apply to it (setup_context, a vmap rule): the gradient under
    # vmap, which imports dynamo, is --compile's.
    (tmp_path / "my_act.py").write_text(
        "import torch\n"
        "class Relu(torch.autograd.Function):\n"
        "    generate_vmap_rule = True\n"
        "    @staticmethod\n"
        "    def forward(x):\n"
        "        return x.clamp(min=0)\n"
        "    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n"
        "        ctx.save_for_backward(inputs[0])\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return g * (x > 0)\n"
    )
    command_line = [sys.executable, "-X", "importtime", "-m", "reluexp.check", "activation=custom"]
    command_line += ["activation.target=my_act.Relu"]
    result = subprocess.run(
        [*command_line, f"hydra.run.dir={tmp_path / 'out'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("Relu: gradients correct")
    assert re.search(r"\| +torch\._dynamo$", result.stderr, flags=re.M) is None
    assert re.search(r"\| +torch$", result.stderr, flags=re.M)  # the import times were there


@pytest.mark.slow
def test_training_refuses_an_in_place_forward(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reluexp",
            "activation=custom",
            "activation.target=tests.corpus.InPlace",
            "steps=5",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "reluexp: error: activation.target=tests.corpus.InPlace: its forward changes "
        "its input in place; autograd and the activation metrics would read values that are gone"
    )


@pytest.mark.slow
def test_training_imports_a_declared_surrogate_before_it_starts_and_never_calls_it(tmp_path):
    for surrogate, message in [
        ("does.not.Exist", "activation.surrogate=does.not.Exist: no module named 'does' was found"),
        ("os.system", "activation.surrogate=os.system: a builtin_function_or_method, not a"),
    ]:
        result = run_cli(
            "activation=spike",
            f"activation.surrogate={surrogate}",
            "steps=2",
            cwd=tmp_path,
            check=False,
        )
        assert result.returncode == 2
        assert result.stderr.startswith(f"reluexp: error: {message}")
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(("threads", "used"), [(None, 1), (2, 2)])
def test_check_function_runs_on_the_commands_threads_and_puts_the_callers_back(
    monkeypatch, threads, used
):
    """73.2: in a user's pytest it ran on torch's default threads, 1.8x the command's CPU."""
    seen = []

    def record_threads(subject, config, options):
        seen.append(torch.get_num_threads())
        raise ConfigError("stop here")

    monkeypatch.setattr(pipeline, "run_checks", record_threads)
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with pytest.raises(ConfigError):
            check_function(MyReLU, experiment=Config(device="cpu", threads=threads))
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert seen == [used]


@pytest.mark.parametrize(("overrides", "threads"), [([], 1), (["threads=2"], 2)])
def test_the_lab_runs_on_one_thread_unless_told(monkeypatch, overrides, threads):
    """33.3: the lab's tensors are small; one thread never oversubscribes a shared machine."""
    seen = []

    def record_threads(subject, config, options):
        seen.append((torch.get_num_threads(), config.threads))
        raise ConfigError("stop here")

    monkeypatch.setattr(command, "run_checks", record_threads)
    before = torch.get_num_threads()
    try:
        assert command.main(["activation=relu", *overrides]) == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [(threads, threads)]


def test_what_my_function_costs_is_one_command_from_my_directory(tmp_path):
    """76.1: the answer to "what does it cost?" was a benchmark of the shipped activations
    that failed outside the repository; --cost prints the lab's memory and time findings,
    beside the reference's, and writes nothing."""
    (tmp_path / "my_relu.py").write_text(f"import torch\n\n\n{inspect.getsource(SeedRelu)}")
    done = run_cli(
        "--cost",
        "activation=custom",
        "activation.target=my_relu.SeedRelu",
        "activation.reference=torch.relu",
        cwd=tmp_path,
        module="reluexp.check",
    )
    memory, cost = done.stdout.splitlines()
    # It saves its input (4 bytes per float32 element) where torch.relu saves only its output.
    assert memory == (
        "memory: saved for backward, bytes per element: 4 saved, 4 beyond the output; "
        "reference 4, 0 beyond the output (more than the reference)"
    )
    assert re.match(r"cost: forward\+backward: \S+x the reference's time at \(64, 100\)", cost)
    assert {p.name for p in tmp_path.iterdir()} - {"__pycache__"} == {"my_relu.py"}


def test_the_cost_of_a_function_that_cannot_be_called_is_its_returns_line(tmp_path):
    done = run_cli(
        "--cost",
        *corpus.PLANTED["tuple_return"],
        cwd=REPO_ROOT,
        module="reluexp.check",
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == "WRONG returns: forward returned a tuple of 2, not a tensor\n"


def test_an_exact_backward_at_a_bend_of_the_forwards_formula_is_no_precision_finding(tmp_path):
    """77.3: at x = 0, where a stable softplus's relu and abs bend, autograd's derivative of
    the formula is their convention and finite differences are the truth; an exact
    sigmoid(0) = 0.5 was called 87 units off their 0.5000000000000097."""
    code, report = run_check(tmp_path, *corpus.CORRECT["stable_softplus_relu"])
    assert code == 0
    precision = [f["detail"] for f in report["findings"] if f["status"] == "precision"]
    assert precision == []


def test_a_learnable_function_is_compared_with_a_parameterless_reference_at_its_values(
    tmp_path, capsys
):
    """77.2: a Swish whose beta is a Parameter starting at 1 against F.silu exited 2 (`has 0
    tensor parameter(s), the target 1: they cannot be compared`)."""
    code, report = run_check(tmp_path, *corpus.CORRECT["learnable_swish"])
    assert code == 0
    said = (
        "torch.nn.functional.silu has no parameters: compared with LearnableSwish at beta=1, "
        "its parameters' values as given (their own gradients are checked against its forward)"
    )
    assert f"info: {said}" in capsys.readouterr().out
    assert finding(report, "same function as the reference (float64)")["status"] in (
        "pass",
        "info",
    )
    assert finding(report, "gradcheck (4, 5)")["status"] == "pass"  # beta's gradient too
