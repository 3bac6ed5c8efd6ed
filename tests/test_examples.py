"""The training examples reach their accuracy at the reduced size CI runs (--quick); the full-size
runs are in docs/mytorch.md."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


@pytest.mark.parametrize(("example", "floor"), [
    ("mlp", 0.97),  # held-out half-moons
    ("digits_cnn", 0.95),  # 4 epochs; 12 epochs (the default) reach 0.98
    ("tiny_transformer", 0.99),  # token accuracy reversing length-5 digit strings
])
def test_example_trains_to_its_accuracy(example: str, floor: float, capsys: pytest.CaptureFixture) -> None:
    module = importlib.import_module(example)
    accuracy = module.main(["--quick", "--device", "cpu"])
    out = capsys.readouterr().out
    assert accuracy >= floor, out
    assert "plugin" in out and "total" in out  # the trace table was printed
