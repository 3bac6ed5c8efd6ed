"""Reading and writing rows: devices, per-plugin winners, trials, missed keys.

Functions take a :class:`~kernelzoo.db.store.Store` and return plain dataclasses, never
ORM objects, so callers hold no session.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from dataclasses import replace as replace_fields
from typing import Any

from sqlalchemy import Text, delete, func, select, type_coerce
from sqlalchemy.orm import Session

from kernelzoo.db.models import DeviceModel, MissedKeyModel, Origin, Outcome, TrialModel, WinnerModel
from kernelzoo.db.store import Store
from kernelzoo.fingerprint import Fingerprint


def bucket_text(bucket: Iterable[int]) -> str:
    """(12, 4) -> '12,4': how a bucket is stored."""
    return ",".join(str(int(b)) for b in bucket)


def bucket_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(b) for b in text.split(",")) if text else ()


@dataclass(frozen=True)
class Winner:
    """The best verified config of one plugin for one key, and how fast it ran."""

    op: str
    plugin: str
    source_hash: str  # Implementation.source_hash: the kernel's code, not its config space
    device: Fingerprint
    dtype: str
    bucket: tuple[int, ...]
    flags: str
    config: Mapping[str, Any]
    time_ms: float
    spread: float  # relative IQR of the timing (Timing.spread)
    shape: str = ""  # the shape that was timed
    trials: int = 0
    origin: Origin = Origin.TUNED
    code_files: Mapping[str, str] = field(default_factory=dict)  # Implementation.code_files when it was tuned
    params: Mapping[str, Any] | None = None  # the timed call's keyword arguments (None: not recorded)

    @property
    def key(self) -> tuple:
        return (self.op, self.plugin, self.source_hash, self.device.hash, self.dtype, self.bucket, self.flags)


@dataclass(frozen=True)
class Miss:
    """A key a program called without an exact tuned winner, with a shape to tune it at."""

    op: str
    device: Fingerprint
    dtype: str
    bucket: tuple[int, ...]
    flags: str
    shape: str
    params: Mapping[str, Any] = field(default_factory=dict)
    count: int = 1


def device_id(session: Session, fp: Fingerprint, *, create: bool) -> int | None:
    """The row id of ``fp``, inserted first when ``create`` (inside a write transaction)."""
    found = session.execute(select(DeviceModel.device_id).where(DeviceModel.fingerprint_hash == fp.hash)).scalar()
    if found is not None or not create:
        return found
    row = DeviceModel(fingerprint_hash=fp.hash, hardware_hash=fp.hardware_hash, kind=fp.kind, name=fp.name,
                      details=fp.to_dict())
    session.add(row)
    session.flush()
    return row.device_id


def better(new: Winner, old: Winner) -> bool:
    """Whether ``new`` beats ``old`` by more than the noise of either timing (the rule of ranking.pick_winner)."""
    return old.time_ms > new.time_ms * (1 + max(new.spread, old.spread))


def put_winner(session: Session, winner: Winner, *, replace: Iterable[Origin] = tuple(Origin),
               better_only: bool = False) -> bool:
    """Insert ``winner``, or overwrite the row of its key if that row's origin is in ``replace``.

    With ``better_only`` (a measurement of this machine) a row measured here (tuned or verified) whose config is
    still in the space is overwritten only by a result :func:`better` than it: a slower re-run, or a tuner that
    finishes last with an older result, never replaces a faster winner. The read and the write share the
    caller's write transaction, so two tuners cannot both pass the check.
    """
    dev = device_id(session, winner.device, create=True)
    row = session.execute(select(WinnerModel).where(
        WinnerModel.op == winner.op, WinnerModel.plugin == winner.plugin,
        WinnerModel.source_hash == winner.source_hash, WinnerModel.device_id == dev,
        WinnerModel.dtype == winner.dtype, WinnerModel.bucket == bucket_text(winner.bucket),
        WinnerModel.flags == winner.flags)).scalar_one_or_none()
    if row is not None and row.origin not in set(replace):
        return False
    if better_only and row is not None and row.origin in (Origin.TUNED, Origin.VERIFIED):
        from kernelzoo.registry import registry

        old = replace_fields(winner, config=row.config, time_ms=row.time_ms, spread=row.spread)
        if registry.is_current(winner.op, winner.plugin, row.source_hash, row.config) and not better(winner, old):
            if dict(row.config) == dict(winner.config):  # the same winner: only its count of measured configs grows
                row.trials = max(row.trials, winner.trials)
            return False
    if row is None:
        row = WinnerModel(op=winner.op, plugin=winner.plugin, source_hash=winner.source_hash, device_id=dev,
                          dtype=winner.dtype, bucket=bucket_text(winner.bucket), flags=winner.flags)
        session.add(row)
    row.config, row.time_ms, row.spread = dict(winner.config), winner.time_ms, winner.spread
    row.shape, row.trials, row.origin = winner.shape, winner.trials, winner.origin
    row.code_files = dict(winner.code_files) or None
    row.params = dict(winner.params) if winner.params is not None else None
    return True


def save_winner(store: Store, winner: Winner) -> bool:
    """Store a winner measured here, unless the row of its key holds a better one; whether it was stored."""
    return store.transaction(lambda s: put_winner(s, winner, better_only=True), write=True)


def winners(store: Store, *, op: str | None = None, device_hash: str | None = None, dtype: str | None = None,
            flags: str | None = None, skipped: list[str] | None = None) -> list[Winner]:
    """Stored per-plugin winners matching the given key parts, ordered by key.

    A row is data, not trust: one that does not parse (its config or device not JSON objects, its bucket not
    integers, an unknown origin) is left out and described in ``skipped``; without ``skipped``, one warning per
    database and process says how many were (``kernelzoo doctor`` lists them).
    """
    columns = (WinnerModel.winner_id, WinnerModel.op, WinnerModel.plugin, WinnerModel.source_hash,
               type_coerce(DeviceModel.details, Text), WinnerModel.dtype, WinnerModel.bucket, WinnerModel.flags,
               type_coerce(WinnerModel.config, Text), WinnerModel.time_ms, WinnerModel.spread, WinnerModel.shape,
               WinnerModel.trials, type_coerce(WinnerModel.origin, Text), type_coerce(WinnerModel.code_files, Text),
               type_coerce(WinnerModel.params, Text))
    query = select(*columns).join(DeviceModel, WinnerModel.device_id == DeviceModel.device_id)
    for column, value in ((WinnerModel.op, op), (DeviceModel.fingerprint_hash, device_hash),
                          (WinnerModel.dtype, dtype), (WinnerModel.flags, flags)):
        if value is not None:
            query = query.where(column == value)
    query = query.order_by(WinnerModel.op, DeviceModel.device_id, WinnerModel.dtype, WinnerModel.flags,
                           WinnerModel.bucket, WinnerModel.plugin)
    bad: list[str] = []

    def read(session: Session) -> list[Winner]:
        found = []
        for row in session.execute(query):
            try:
                found.append(_winner_of(row))
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                bad.append(f"kz_winners row {row[0]} ({row[1]}/{row[2]} {row[5]} bucket {row[6]!r}): "
                           f"{type(exc).__name__}: {exc}")
        return found

    found = store.transaction(read)
    if skipped is not None:
        skipped.extend(bad)
    elif bad and "rows" not in store.warned:
        store.warned.add("rows")
        warnings.warn(f"kernelzoo: skipped {len(bad)} row(s) of the tuning database {store.display_url} that do not "
                      f"parse, e.g. {bad[0]}; `kernelzoo doctor` lists them", RuntimeWarning, stacklevel=2)
    return found


def _json_object(value: Any, what: str, optional: bool = False) -> dict[str, Any] | None:
    found = json.loads(value) if isinstance(value, (str, bytes)) else value
    if found is None and optional:
        return None
    if not isinstance(found, dict):
        raise TypeError(f"{what} is {type(found).__name__}, expected a JSON object")
    return found


def _winner_of(row: Any) -> Winner:
    """A winner of one raw row; raises TypeError, ValueError or KeyError where a field does not parse."""
    (_, op, plugin, source_hash, details, dtype, bucket, flags, config, time_ms, spread, shape, trials, origin,
     code_files, params) = row
    device = _json_object(details, "the device's details")
    if not device:
        raise ValueError("the device's details are empty")
    bucket_ints = bucket_tuple(bucket)
    if not bucket_ints:
        raise ValueError("the bucket is empty")
    origin_name = str(origin)
    found = Origin[origin_name] if origin_name in Origin.__members__ else Origin(origin_name)
    return Winner(op=op, plugin=plugin, source_hash=source_hash, device=Fingerprint.from_dict(device), dtype=dtype,
                  bucket=bucket_ints, flags=flags, config=_json_object(config, "the config"),
                  time_ms=float(time_ms), spread=float(spread), shape=shape, trials=int(trials), origin=found,
                  code_files=_json_object(code_files, "the code's file hashes", optional=True) or {},
                  params=_json_object(params, "the call's parameters", optional=True))


def delete_winners(session: Session, keys: Iterable[tuple]) -> int:
    """Delete the winners of ``keys`` (as :attr:`Winner.key` gives them); how many went."""
    n = 0
    for op, plugin, source_hash, device_hash, dtype, bucket, flags in keys:
        dev = select(DeviceModel.device_id).where(DeviceModel.fingerprint_hash == device_hash).scalar_subquery()
        n += session.execute(delete(WinnerModel).where(
            WinnerModel.op == op, WinnerModel.plugin == plugin, WinnerModel.source_hash == source_hash,
            WinnerModel.device_id == dev, WinnerModel.dtype == dtype, WinnerModel.bucket == bucket_text(bucket),
            WinnerModel.flags == flags)).rowcount
    return n


def add_trial(store: Store, *, study_name: str, op: str, plugin: str, device: Fingerprint, shape: str,
              config: Mapping[str, Any], outcome: Outcome, message: str = "", time_ms: float | None = None,
              spread: float | None = None) -> None:
    """Record one trial, ok or failed with its reason."""

    def write(session: Session) -> None:
        session.add(TrialModel(study_name=study_name, op=op, plugin=plugin,
                               device_id=device_id(session, device, create=True), shape=shape, config=dict(config),
                               outcome=outcome, message=message[:4000], time_ms=time_ms, spread=spread))

    store.transaction(write, write=True)


def record_misses(store: Store, misses: Iterable[Miss]) -> None:
    """Count each missed key once more (each process reports a key once)."""

    def write(session: Session) -> None:
        for miss in misses:
            dev = device_id(session, miss.device, create=True)
            row = session.execute(select(MissedKeyModel).where(
                MissedKeyModel.op == miss.op, MissedKeyModel.device_id == dev, MissedKeyModel.dtype == miss.dtype,
                MissedKeyModel.bucket == bucket_text(miss.bucket), MissedKeyModel.flags == miss.flags,
            )).scalar_one_or_none()
            if row is None:
                row = MissedKeyModel(op=miss.op, device_id=dev, dtype=miss.dtype, bucket=bucket_text(miss.bucket),
                                     flags=miss.flags, shape=miss.shape, params=dict(miss.params), count=0)
                session.add(row)
            row.count += miss.count

    store.transaction(write, write=True)


def missed_keys(store: Store, device_hash: str, op: str | None = None) -> list[Miss]:
    """The missed keys of one device, most called first."""
    query = select(MissedKeyModel, DeviceModel.details).join(DeviceModel).where(
        DeviceModel.fingerprint_hash == device_hash).order_by(MissedKeyModel.count.desc(), MissedKeyModel.op)
    if op is not None:
        query = query.where(MissedKeyModel.op == op)
    return store.transaction(lambda s: [
        Miss(op=m.op, device=Fingerprint.from_dict(d), dtype=m.dtype, bucket=bucket_tuple(m.bucket), flags=m.flags,
             shape=m.shape, params=m.params, count=m.count) for m, d in s.execute(query)])


def forget_miss(store: Store, miss: Miss) -> None:
    """Drop a missed key (it has been tuned)."""

    def write(session: Session) -> None:
        dev = device_id(session, miss.device, create=False)
        session.execute(delete(MissedKeyModel).where(
            MissedKeyModel.op == miss.op, MissedKeyModel.device_id == dev, MissedKeyModel.dtype == miss.dtype,
            MissedKeyModel.bucket == bucket_text(miss.bucket), MissedKeyModel.flags == miss.flags))

    store.transaction(write, write=True)


def device_ceilings(store: Store, fp: Fingerprint) -> dict[str, Any] | None:
    """The measured ceilings stored for ``fp``, if any."""
    return store.transaction(lambda s: s.execute(
        select(DeviceModel.ceilings).where(DeviceModel.fingerprint_hash == fp.hash)).scalar())


def save_device_ceilings(store: Store, fp: Fingerprint, ceilings: Mapping[str, Any]) -> None:
    def write(session: Session) -> None:
        dev = device_id(session, fp, create=True)
        session.get(DeviceModel, dev).ceilings = dict(ceilings)

    store.transaction(write, write=True)


def counts(store: Store) -> dict[str, int]:
    """Rows per table, for `kernelzoo doctor`."""
    models = {"devices": DeviceModel, "winners": WinnerModel, "trials": TrialModel, "missed keys": MissedKeyModel}
    return store.transaction(lambda s: {
        name: s.execute(select(func.count()).select_from(model)).scalar_one() for name, model in models.items()})
