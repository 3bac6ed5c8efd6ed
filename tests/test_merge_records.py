"""scripts/merge_records.py, which writes tuning_db/h100-sxm.json: an export's records replace the shipped ones of
their key in place, new keys are appended, and records whose plugin source changed since tuning are named; and
scripts/check_shipped.py's rebuilding of a record's call."""

from __future__ import annotations

import json
import subprocess
import sys

from tuning_helpers import ROOT, load_file

from kernelzoo.registry import registry

SCRIPT = ROOT / "scripts" / "merge_records.py"


def record(shape: str, time_ms: float, plugin: str = "torch", source_hash: str | None = None) -> dict:
    impl = registry.impl("relu", plugin)
    return {"op": "relu", "plugin": plugin, "dtype": "float32", "shape": shape, "bucket": [int(shape).bit_length()],
            "flags": "", "device_hash": "d0", "device": {"name": "test"}, "config": {}, "origin": "tuned",
            "source_hash": source_hash or impl.source_hash, "time_ms": time_ms, "spread": 0.01, "trials": 1}


def test_fresh_records_replace_theirs_in_place_and_new_ones_follow(tmp_path):
    shipped, fresh = tmp_path / "shipped.json", tmp_path / "fresh.json"
    old = [record("1024", 1.0), record("4096", 2.0), record("65536", 3.0, source_hash="0" * 16)]
    shipped.write_text(json.dumps({"format": 1, "records": old}, indent=1) + "\n")
    fresh.write_text(json.dumps({"records": [record("4096", 1.5), record("16384", 4.0)]}))

    out = subprocess.run([sys.executable, str(SCRIPT), str(shipped), str(fresh)], capture_output=True, text=True,
                         check=True).stdout

    merged = json.loads(shipped.read_text())
    assert [(r["shape"], r["time_ms"]) for r in merged["records"]] == [
        ("1024", 1.0), ("4096", 1.5), ("65536", 3.0), ("16384", 4.0)]
    assert merged["format"] == 1 and shipped.read_text().endswith("}\n")
    assert "1 replaced, 1 added, 4 records, 1 with a changed source" in out
    assert "changed since tuned: relu/torch float32 65536" in out


def test_drop_stale_removes_only_the_records_whose_source_changed(tmp_path):
    shipped = tmp_path / "shipped.json"
    old = [record("1024", 1.0), record("4096", 2.0, source_hash="0" * 16), record("65536", 3.0)]
    shipped.write_text(json.dumps({"format": 1, "records": old}, indent=1) + "\n")

    out = subprocess.run([sys.executable, str(SCRIPT), str(shipped), "--drop-stale"], capture_output=True, text=True,
                         check=True).stdout

    assert [r["shape"] for r in json.loads(shipped.read_text())["records"]] == ["1024", "65536"]
    assert "dropped 1 record(s) with a changed source" in out and "dropped: relu/torch float32 4096" in out
    assert "0 replaced, 0 added, 2 records, 0 with a changed source" in out


def test_check_shipped_rebuilds_a_key_whose_flags_hold_params_the_shape_text_does_not():
    """conv2d's shape text holds its 7 sizes; stride and padding are in the key's flags. The check rebuilds such a
    key from the op's representative shapes, and gives up (None) on flags none of them has."""
    check = load_file(ROOT / "scripts" / "check_shipped.py")
    op = registry.op("conv2d")
    record = {"op": "conv2d", "dtype": "float32", "shape": "4x64x56x56x64x3x3",
              "flags": "stride=1x1-padding=1x1-dilation=1x1"}
    call = check.rebuild(op, record, "cpu")
    assert call is not None and call.params["padding"] == (1, 1)
    assert op.shape_string(call) == record["shape"] and op.flags(call) == record["flags"]
    assert check.rebuild(op, {**record, "flags": "stride=3x3-padding=1x1-dilation=1x1"}, "cpu") is None
    plain = check.rebuild(registry.op("relu"), {"op": "relu", "dtype": "float32", "shape": "64x64", "flags": ""}, "cpu")
    assert plain is not None and tuple(plain.inputs["x"].shape) == (64, 64)
