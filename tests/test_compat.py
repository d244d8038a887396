"""reluexp's uses of torch internals (reluexp._compat): as relied on in the installed torch, and
the public path taken, with the same numbers, when they are not."""

import inspect

import pytest
import torch
import torch.nn.functional as F

from reluexp import _compat
from reluexp.functions.activations import LeakyReLU, LeanReLU, SiLU

pytestmark = pytest.mark.compat

FAST_APPLY = [(LeanReLU, torch.relu), (SiLU, F.silu)]


@pytest.fixture(autouse=True)
def vmap_works():
    """What the Function lab does before it tries vmap (torch 2.3's first vmap of a Function
    fails otherwise: reluexp._compat.import_dynamo_outside_vmap)."""
    _compat.import_dynamo_outside_vmap()


def test_the_torch_internals_are_as_relied_on():
    if _compat.FUNCTION_INTERNALS is None:
        pytest.fail(
            f"torch {torch.__version__}: torch._C._are_functorch_transforms_active or "
            "torch._functorch.utils.unwrap_dead_wrappers is missing or has changed; "
            "reluexp falls back to Function.apply (slower): update reluexp/_compat.py"
        )
    seen = []
    torch.func.vmap(lambda x: seen.append(_compat.FUNCTION_INTERNALS.transforms_active()) or x)(
        torch.zeros(2, 3)
    )
    assert seen == [True], f"torch {torch.__version__}: transforms_active() under vmap"


def test_fast_apply_skips_the_signature_binding_and_torchs_own_apply_binds(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("inspect.signature on a call")

    x = torch.randn(8, requires_grad=True)
    monkeypatch.setattr(torch.autograd.function.inspect, "signature", refuse)
    for function, _ in FAST_APPLY:
        function.apply(x).sum().backward()
    # torch's own apply binds on every call (LeakyReLU takes a keyword argument).
    with pytest.raises(AssertionError, match="inspect.signature on a call"):
        LeakyReLU.apply(x)


def test_missing_internals_mean_the_public_path(monkeypatch):
    monkeypatch.delattr(torch._C, "_are_functorch_transforms_active")
    assert _compat.function_internals() is None


@pytest.mark.parametrize("internals", ["present", "missing"])
def test_the_functions_give_the_builtins_numbers_either_way(monkeypatch, internals):
    if internals == "missing":
        monkeypatch.setattr(_compat, "FUNCTION_INTERNALS", None)
        bindings = []
        signature = inspect.signature
        monkeypatch.setattr(
            torch.autograd.function.inspect,
            "signature",
            lambda fn: bindings.append(fn) or signature(fn),
        )
    x = torch.randn(64, 100, generator=torch.Generator().manual_seed(0))
    x[0, :3] = 0.0
    for function, builtin in FAST_APPLY:
        leaf, ref_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
        y, y_ref = function.apply(leaf), builtin(ref_leaf)
        grad_output = torch.randn_like(x)
        y.backward(grad_output)
        y_ref.backward(grad_output)
        torch.testing.assert_close(y, y_ref, rtol=1.3e-6, atol=1e-6)
        torch.testing.assert_close(leaf.grad, ref_leaf.grad, rtol=1.3e-6, atol=1e-6)
        batched = torch.func.vmap(function.apply)(x)
        torch.testing.assert_close(batched, y.detach(), rtol=0, atol=0)
    if internals == "missing":
        assert len(bindings) >= len(FAST_APPLY)  # torch's own apply ran


def test_hydras_grid_split_is_as_relied_on_and_the_copy_agrees():
    """reluexp._compat.grid_jobs: Hydra's own BasicSweeper.split_arguments, and the copy used
    where it is gone, give the same jobs in the same order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if _compat.HYDRA_SPLIT_ARGUMENTS is None:
        pytest.fail(
            "hydra's BasicSweeper.split_arguments is missing or has changed; reluexp falls "
            "back to its copy (_compat.grid): check that the copy still orders jobs as Hydra does"
        )
    overrides = OverridesParser.create().parse_overrides(
        ["seed=0,1,2", "activation=myrelu,relu", "lr=1e-3", "seed=3,4"]
    )
    jobs = _compat.grid_jobs(overrides)
    assert jobs == _compat.grid(overrides)
    assert jobs[:3] == [
        ["seed=3", "activation=myrelu", "lr=0.001"],
        ["seed=3", "activation=relu", "lr=0.001"],
        ["seed=4", "activation=myrelu", "lr=0.001"],
    ]


def test_torchs_multi_tensor_norm_is_as_relied_on():
    if torch.__version__.startswith("2.3."):
        pytest.skip("torch 2.3's _foreach_norm takes no dtype: the fallback runs (tested below)")
    if _compat.FOREACH_FLOAT64_NORM is None:
        pytest.fail(
            f"torch {torch.__version__}: torch._foreach_norm takes no dtype or does not "
            "accumulate in it; accelerator runs fall back to one vector_norm per parameter "
            "(slower): update reluexp/_compat.py"
        )


@pytest.mark.parametrize("multi_tensor", [True, False])
def test_float64_norms_are_the_float64_norms_either_way(monkeypatch, multi_tensor):
    # Squares that overflow float32, squares below its normal range, an ordinary tensor and a
    # float64 one: each norm as the dot product of the tensor in float64 gives it.
    if not multi_tensor:
        monkeypatch.setattr(_compat, "FOREACH_FLOAT64_NORM", None)
    generator = torch.Generator().manual_seed(0)
    vectors = [
        torch.full((1000,), 1e20),
        torch.full((1000,), 1e-25),
        torch.randn(5000, generator=generator),
        torch.randn(7, generator=generator, dtype=torch.float64),
    ]
    norms = _compat.float64_norms(vectors)
    assert [norm.dtype for norm in norms] == [torch.float64] * 4
    expected = [torch.dot(v.double(), v.double()).sqrt().item() for v in vectors]
    assert [norm.item() for norm in norms] == pytest.approx(expected, rel=1e-12)
    assert norms[0].item() == pytest.approx(vectors[0][0].item() * 1000**0.5, rel=1e-12)


def test_torchs_custom_op_classes_are_as_relied_on():
    """What torch.library.custom_op returns, and an operator under torch.ops, are instances of
    the classes opcheck takes: a custom op is recognised as one (lab/compiled.py)."""
    if not hasattr(torch.library, "custom_op"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (torch 2.4's)")
    assert len(_compat.CUSTOM_OP_TYPES) == 3, f"torch {torch.__version__} moved them"

    @torch.library.custom_op("reluexp_compat::identity", mutates_args=())
    def identity(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    assert isinstance(identity, _compat.CUSTOM_OP_TYPES)
    assert isinstance(torch.ops.aten.relu.default, _compat.CUSTOM_OP_TYPES)
    assert not isinstance(torch.relu, _compat.CUSTOM_OP_TYPES)
    # Without a fake kernel, opcheck's report (not a raise) says which test fails.
    found = torch.library.opcheck(identity, (torch.ones(2),), raise_exception=False)
    assert found["test_schema"] == "SUCCESS" and found["test_faketensor"] != "SUCCESS"


def test_vmaps_fallback_switches_are_as_relied_on():
    """An op without a batching rule raises, naming itself, with vmap's fallback refused, and
    runs with it allowed (the lab says which op loops, torch's C++ warning kept off stderr)."""
    if not hasattr(torch.library, "custom_op"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (torch 2.4's)")

    @torch.library.custom_op("reluexp_compat::looped", mutates_args=())
    def looped(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.numpy(force=True) * 2)

    with _compat.vmap_fallback(allowed=False), pytest.raises(RuntimeError) as refused:
        torch.func.vmap(looped)(torch.ones(3, 2))
    assert str(refused.value) == "reluexp_compat::looped" + _compat.VMAP_FALLBACK_REFUSED
    with _compat.vmap_fallback(allowed=True):
        assert torch.equal(torch.func.vmap(looped)(torch.ones(3, 2)), torch.full((3, 2), 2.0))
