"""The registry and dispatch: third-party plugins through entry points, forcing a plugin,
the default order, and the errors a user sees."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
from tuning_helpers import temporary_db

import kernelzoo
from kernelzoo import dispatch, errors
from kernelzoo.db.ranking import pick_winner
from kernelzoo.dispatch import DEFAULT_ORDER
from kernelzoo.registry import registry

TOY_PLUGIN = textwrap.dedent('''
    """A third-party relu, registered only through the kernelzoo.plugins entry point."""
    import torch
    from kernelzoo.registry import Implementation

    class ToyRelu(Implementation):
        op = "relu"
        plugin = "toy"
        dtypes = {"cpu": (torch.float32,)}
        config_space = {"chunks": [1, 3]}
        default_config = {"chunks": 3}

        def run(self, call, config):
            x = call.inputs["x"].contiguous().view(-1)
            y = call.empty(x.shape)
            for part_x, part_y in zip(x.chunk(config["chunks"]), y.chunk(config["chunks"])):
                part_y.copy_(part_x.clamp_min(0).where(~part_x.isnan(), part_x))
            return y.view(call.inputs["x"].shape)
''')


@pytest.fixture
def toy_plugin(tmp_path, monkeypatch):
    """Install a toy distribution with a ``kernelzoo.plugins`` entry point on sys.path."""
    (tmp_path / "kz_toy_plugin.py").write_text(TOY_PLUGIN)
    dist = tmp_path / "kz_toy_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kz-toy-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[kernelzoo.plugins]\ntoy = kz_toy_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    registry.reload()
    yield registry.impl("relu", "toy")
    monkeypatch.undo()
    sys.modules.pop("kz_toy_plugin", None)
    registry.reload()


def test_builtin_plugins_come_from_the_entry_point():
    from importlib.metadata import entry_points

    assert "kernelzoo_plugins" in {ep.value for ep in entry_points(group="kernelzoo.plugins")}
    ops = set(registry.load().ops)
    assert "relu" in ops
    for op in ops:
        assert {"python", "torch"} <= {i.plugin for i in registry.implementations(op)}, op


def test_third_party_plugin_is_discovered_and_runs(toy_plugin):
    assert toy_plugin.plugin == "toy"
    x = torch.randn(1023, 17)
    x[0, 0] = float("nan")
    with kernelzoo.use("toy"):
        assert kernelzoo.explain("relu", x).plugin == "toy"
        y = kernelzoo.ops.relu(x)
    assert torch.equal(y, torch.relu(x)) or torch.allclose(y, torch.relu(x), equal_nan=True)
    # never ahead of the built-in kinds in the automatic order (relu's own CPU order puts torch first)
    assert kernelzoo.explain("relu", x).plugin == dispatch.plugin_order("cpu", ["toy", "python", "openmp", "torch"],
                                                                         "relu")[0] == "torch"


def test_third_party_plugin_is_listed(toy_plugin):
    from kernelzoo.commands.listing import rows

    assert {"op": "relu", "plugin": "toy", "available": True}.items() <= next(
        r for r in rows(["relu"]) if r["plugin"] == "toy").items()


def test_an_op_s_own_default_order_comes_before_the_global_one(tmp_path, monkeypatch):
    """Untuned, linear runs torch first on the CPU (its benchmarks put it ahead of openmp there); gelu, with no
    order of its own, runs DEFAULT_ORDER's first plugin. The op's order also breaks ties in the database."""
    x, w = torch.randn(8, 16), torch.randn(4, 16)
    with temporary_db(tmp_path, monkeypatch):  # nothing tuned
        choice = kernelzoo.explain("linear", x, w)
        assert (choice.plugin, choice.reason) == ("torch", "default order")
        assert kernelzoo.explain("gelu", torch.randn(8)).plugin == DEFAULT_ORDER["cpu"][0]
        assert kernelzoo.explain("relu", torch.randn(8)).plugin == "torch"  # relu's own CPU order
    assert dispatch.plugin_order("cpu", ["python", "openmp", "torch"], "linear") == ["torch", "openmp", "python"]
    assert dispatch.plugin_order("cpu", ["python", "openmp", "torch"]) == ["openmp", "torch", "python"]
    assert dispatch.plugin_order("cuda", ["cuda", "torch", "triton"], "conv2d")[0] == "triton"  # CPU-only order
    tie = [SimpleNamespace(plugin=p, time_ms=1.0, spread=0.05) for p in ("openmp", "torch")]
    assert pick_winner(tie, "cpu", "linear").plugin == "torch"
    assert pick_winner(tie, "cpu").plugin == "openmp"


def test_use_and_env_force_a_plugin(monkeypatch):
    x = torch.randn(64)
    assert kernelzoo.explain("relu", x).reason == "default order"
    with kernelzoo.use("python"):
        choice = kernelzoo.explain("relu", x)
        assert (choice.plugin, choice.reason) == ("python", "forced")
        with kernelzoo.use("torch"):
            assert kernelzoo.explain("relu", x).plugin == "torch"
        assert kernelzoo.explain("relu", x).plugin == "python"
    monkeypatch.setenv("KERNELZOO_PLUGIN", "torch")
    assert kernelzoo.explain("relu", x).plugin == "torch"


def test_forcing_an_unknown_plugin_lists_the_known_ones():
    with kernelzoo.use("nope"), pytest.raises(errors.UnknownError, match="its plugins: .*openmp.*python"):
        kernelzoo.ops.relu(torch.randn(3))


def test_unknown_op_lists_the_known_ones():
    with pytest.raises(AttributeError, match="known ops: .*relu"):
        _ = kernelzoo.ops.no_such_op


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_forcing_a_plugin_that_cannot_run_gives_the_reason():
    with kernelzoo.use("cuda"), pytest.raises(errors.UnsupportedError, match="forced but is not available"):
        kernelzoo.ops.relu(torch.randn(3))


def test_forcing_a_plugin_that_cannot_take_the_dtype():
    with kernelzoo.use("openmp"), pytest.raises(errors.UnsupportedError, match="takes float32 on cpu, not float16"):
        kernelzoo.ops.relu(torch.randn(3).half())


def test_automatic_choice_skips_plugins_that_cannot_run_the_call():
    choice = kernelzoo.explain("relu", torch.randn(3).half())  # openmp is float32 only
    assert choice.plugin == "torch"


def test_ops_carry_the_signature_and_doc():
    import inspect

    assert "x" in inspect.signature(kernelzoo.ops.relu).parameters
    assert "relu" in kernelzoo.ops.relu.__doc__
    assert "relu" in dir(kernelzoo.ops)


def test_cli_list_json_has_every_op_and_plugin():
    out = subprocess.run([sys.executable, "-m", "kernelzoo.cli", "list", "--json"],
                         capture_output=True, text=True, check=True).stdout
    found = json.loads(out)
    assert all({"op", "plugin", "available", "reason"} <= set(r) for r in found)
    pairs = {(r["op"], r["plugin"]) for r in found}
    for op in ("relu", "gelu", "add", "softmax", "matmul"):  # the first ops have every kind
        assert {(op, p) for p in ("python", "openmp", "cuda", "triton", "torch")} <= pairs, op
    assert all(r["reason"] for r in found if not r["available"])


def test_automatic_choice_falls_back_when_run_finds_it_unsupported(monkeypatch):
    from kernelzoo import dispatch
    from kernelzoo.errors import UnsupportedError

    openmp = registry.impl("gelu", "openmp")  # gelu: openmp first on the CPU, then torch

    class Refusing(type(openmp)):
        def run(self, call, config):
            raise UnsupportedError("tile does not fit")

    monkeypatch.setitem(registry.impls["gelu"], "openmp", Refusing())
    dispatch.clear_cache()
    x = torch.randn(100)
    try:
        with pytest.warns(RuntimeWarning, match="openmp cannot run .* running torch"):
            assert torch.equal(kernelzoo.ops.gelu(x), torch.nn.functional.gelu(x))
        with kernelzoo.use("openmp"), pytest.raises(UnsupportedError, match="tile does not fit"):
            kernelzoo.ops.gelu(x)
    finally:
        monkeypatch.undo()
        dispatch.clear_cache()


@pytest.mark.parametrize("op_name", ["relu", "gelu", "add", "softmax", "matmul"])
def test_shape_strings_round_trip(op_name):
    """``kernelzoo tune --shape`` and ``--pending`` rebuild calls from ``Op.shape_string``."""
    op = registry.op(op_name)
    for shape in op.shapes["cpu"]:
        call = op.example(shape, torch.float32, "cpu")
        again = op.example(op.parse_shape(op.shape_string(call)), torch.float32, "cpu")
        assert op.sizes(again) == op.sizes(call) and op.bucket(again) == op.bucket(call), shape


def test_add_shape_strings_name_both_operands_when_they_differ():
    op = registry.op("add")
    call = op.example(((17, 1), (1, 1023)), torch.float32, "cpu")
    assert op.shape_string(call) == "17x1+1x1023"
    again = op.example(op.parse_shape("17x1+1x1023"), torch.float32, "cpu")
    assert again.inputs["b"].shape == (1, 1023)
    assert op.parse_shape("scalar+5x7") == ((), (5, 7))


def test_observe_reports_each_run_with_the_plugin_that_ran() -> None:
    seen = []
    x = torch.randn(5, 3)
    with kernelzoo.use("python"), kernelzoo.dispatch.observe(lambda op, call, choice, s: seen.append(
            (op.name, choice.plugin, call.inputs["x"].shape, s))):
        kernelzoo.ops.relu(x)
        kernelzoo.ops.gelu(x)
    kernelzoo.ops.relu(x)  # outside the block: not reported
    assert [(name, plugin, shape) for name, plugin, shape, _ in seen] == [
        ("relu", "python", (5, 3)), ("gelu", "python", (5, 3))]
    assert all(s >= 0 for *_, s in seen)


def test_run_op_returns_every_output_without_torch_autograd() -> None:
    x = torch.randn(4, 6, requires_grad=True)
    y, mean, rstd = kernelzoo.dispatch.run_op("layer_norm", x, 6)
    assert y.shape == (4, 6) and mean.shape == rstd.shape and mean.numel() == 4
    assert not y.requires_grad


def test_value_range_reads_once_per_tensor_until_it_is_written(monkeypatch) -> None:
    reg = sys.modules["kernelzoo.spec"]  # the module value_range lives in
    reads = []
    aminmax = torch.aminmax
    monkeypatch.setattr(reg.torch, "aminmax", lambda t: reads.append(1) or aminmax(t))
    t = torch.tensor([3, -100, 7, 1])
    assert reg.value_range(t) == (-100, 7)
    assert reg.value_range(t) == (-100, 7) and len(reads) == 1
    assert reg.value_range(t, ignore=-100) == (0, 7) and len(reads) == 2  # another question: read again
    t[1] = 9  # a write through the tensor itself
    assert reg.value_range(t) == (1, 9) and len(reads) == 3
    t.view(2, 2)[0, 0] = 12  # a write through a view moves the shared version counter too
    assert reg.value_range(t) == (1, 12) and len(reads) == 4
    assert reg.value_range(t.clone()) == (1, 12) and len(reads) == 5  # another tensor
    key = id(t)
    del t
    assert key not in reg._ranges  # forgotten with the tensor


def test_a_backward_reuses_its_forwards_index_check(monkeypatch) -> None:
    from kernelzoo import ops

    reg = sys.modules["kernelzoo.spec"]  # the module value_range lives in
    reads = []
    aminmax = torch.aminmax
    monkeypatch.setattr(reg.torch, "aminmax", lambda t: reads.append(1) or aminmax(t))
    indices = torch.tensor([[0, 4, 2], [4, 4, 1]])
    weight = torch.randn(5, 3, requires_grad=True)
    ops.embedding(indices, weight).sum().backward()
    assert len(reads) == 1
    with pytest.raises(errors.ArgumentError, match="indices hold 5"):
        indices[0, 0] = 5
        ops.embedding(indices, weight)
