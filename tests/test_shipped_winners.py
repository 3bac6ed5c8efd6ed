"""The shipped winners (tuning_db/*.json) against the installed plugins: a record whose kernel code has changed
since it was tuned, or whose config left the space, is not current and is skipped at import, so an edited kernel
would silently lose its shipped winners on every GPU the files cover. Each record must name a registered op and
plugin, carry the installed code hash and a config of the plugin's space, and be the only record of its key; the
files are in the current format, so no record depends on re-keying an older hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelzoo.db.transfer import FORMAT_VERSION, read_file
from kernelzoo.registry import registry

SHIPPED = sorted((Path(__file__).resolve().parent.parent / "tuning_db").glob("*.json"))


def problems(path: Path) -> list[str]:
    """What is wrong with the records of a winners file, one line each (empty: nothing)."""
    found, seen = [], set()
    for w in read_file(path):
        name = f"{w.op}/{w.plugin} {w.dtype} {w.shape or w.bucket} {w.flags!r}"
        impl = registry.load().impls.get(w.op, {}).get(w.plugin)
        if impl is None:
            found.append(f"{name}: no such op or plugin")
            continue
        if not registry.is_current(w.op, w.plugin, w.source_hash):
            found.append(f"{name}: the kernel's code changed since it was tuned")
        unknown = sorted(set(w.config) - set(impl.default_config) - set(impl.config_space))
        outside = sorted(k for k, v in w.config.items() if k in impl.config_space and v not in impl.config_space[k])
        missing = sorted(set(impl.config_space) - set(w.config))
        if unknown or outside or missing:
            found.append(f"{name}: config keys not in the plugin's space {unknown}, values outside it {outside}"
                         + (f", space keys missing {missing}" if missing else ""))
        assert impl.in_space(w.config) == (not (unknown or outside or missing)), "Implementation.in_space agrees"
        key = (w.op, w.plugin, w.dtype, w.bucket, w.flags, w.device.hash)
        if key in seen:
            found.append(f"{name}: a second record of the same key")
        seen.add(key)
    return found


def test_there_are_shipped_files():
    assert {p.name for p in SHIPPED} >= {"h100-sxm.json", "h200.json"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_files_are_in_the_current_format(path):
    data = json.loads(path.read_text())
    assert data["version"] == FORMAT_VERSION
    assert all(r["code_files"] for r in data["records"]), "every record names the files of its code"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_records_match_the_installed_plugins(path):
    wrong = problems(path)
    assert not wrong, (f"{path.name}: {len(wrong)} record(s) the installed plugins would not use; re-tune them on "
                       "that GPU and merge them (scripts/merge_records.py FILE EXPORT), or remove them "
                       "(scripts/merge_records.py FILE --drop-stale):\n" + "\n".join(wrong[:20]))


def test_problems_names_each_kind_of_bad_record(tmp_path):
    data = json.loads(SHIPPED[0].read_text())
    good = next(r for r in data["records"] if registry.impl(r["op"], r["plugin"]).config_space)  # one with a space
    stale = {**good, "source_hash": "0" * 64}
    odd_key = {**good, "config": {**good["config"], "NO_SUCH_PARAM": 1}, "flags": "other"}
    name = next(iter(registry.impl(good["op"], good["plugin"]).config_space))
    odd_value = {**good, "config": {**good["config"], name: -1}, "flags": "another"}
    gone = {**good, "plugin": "no_such_plugin"}
    data["records"] = [good, good, stale, odd_key, odd_value, gone]
    path = tmp_path / "doctored.json"
    path.write_text(json.dumps(data))
    wrong = problems(path)
    assert len(wrong) == 6, wrong
    assert "a second record of the same key" in wrong[0]
    assert "changed since it was tuned" in wrong[1] and "a second record" in wrong[2]
    assert "keys not in the plugin's space ['NO_SUCH_PARAM'], values outside it []" in wrong[3]
    assert f"keys not in the plugin's space [], values outside it ['{name}']" in wrong[4]
    assert "no such op or plugin" in wrong[5]
