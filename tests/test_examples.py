"""The training examples reach their accuracy on the CPU: digits_cnn at full size (1.4 s on 2 idle
cores), the MLP and the transformer at the reduced size of --quick (a few seconds each); the full-size
runs are in docs/mytorch.md."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


@pytest.mark.parametrize(("example", "args", "floor"), [
    ("mlp", ["--quick"], 0.97),  # held-out half-moons
    ("digits_cnn", [], 0.97),  # the bar a small CNN clears on these digits: 97 % test accuracy
    ("tiny_transformer", ["--quick"], 0.99),  # token accuracy reversing length-5 digit strings
])
def test_example_trains_to_its_accuracy(example: str, args: list[str], floor: float,
                                        capsys: pytest.CaptureFixture) -> None:
    module = importlib.import_module(example)
    accuracy = module.main([*args, "--device", "cpu"])
    out = capsys.readouterr().out
    assert accuracy >= floor, out
    assert "plugin" in out and "total" in out  # the trace table was printed
