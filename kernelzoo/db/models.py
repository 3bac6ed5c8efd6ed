"""Tables of the tuning database (SQLAlchemy 2.0 typed models).

Every table name starts with ``kz_``: Optuna's studies share the database and own
``studies``, ``trials``, ``version_info`` and the like. Buckets are stored as text, the
log2 sizes joined by commas ("12,4"), so a key compares as plain columns.
"""

from __future__ import annotations

import enum
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, CheckConstraint, DateTime, Enum, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Version of the tables below, also written to kz_schema_versions so that an older kernelzoo, which reads only
# that row, never writes to a newer database. Raise it with every change of them, with an alembic revision in
# kernelzoo/db/migrations/versions/ that makes the change in place.
SCHEMA_VERSION = 2


def now() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Origin(enum.Enum):
    """Where a winner came from."""

    TUNED = "tuned"  # measured on this database's machine by `kernelzoo tune`
    IMPORTED = "imported"  # `kernelzoo db import`
    SHIPPED = "shipped"  # tuning_db/ records of a matching GPU, imported on first use
    VERIFIED = "verified"  # a sibling GPU's record re-timed here by `kernelzoo tune --verify`


class Outcome(enum.Enum):
    """How a trial ended; everything but OK is a failed trial with its message."""

    OK = "ok"
    WRONG_RESULT = "wrong_result"
    UNSUPPORTED = "unsupported"
    COMPILE_ERROR = "compile_error"
    OUT_OF_RESOURCES = "out_of_resources"
    CRASH = "crash"
    TIMEOUT = "timeout"
    ERROR = "error"


class SchemaVersionModel(Base):
    """The one row saying which version of these tables the database holds."""

    __tablename__ = "kz_schema_versions"
    __table_args__ = (CheckConstraint("schema_version_id = 1"),)
    schema_version_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    library_version: Mapped[str] = mapped_column(String(64))


class DeviceModel(Base):
    """A device fingerprint; ``details`` holds every field of it."""

    __tablename__ = "kz_devices"
    device_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint_hash: Mapped[str] = mapped_column(String(32), unique=True)
    hardware_hash: Mapped[str] = mapped_column(String(32), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(256))
    details: Mapped[dict[str, Any]] = mapped_column(JSON)
    # measured bandwidth and peak rates, for devices the built-in ceilings table lacks
    ceilings: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class WinnerModel(Base):
    """The best verified config of one plugin for one key; the winner across plugins is chosen on read.

    ``source_hash`` is the hash of the kernel's code the config was measured on (Implementation.source_hash),
    not of its config space: a row is current while that code is installed and its config is in the space, and
    stale (kept, not run as tuned) after an edit. ``code_files`` holds the hash of each file of that code, so
    that a stale row names the file that changed.
    """

    __tablename__ = "kz_winners"
    __table_args__ = (UniqueConstraint("op", "plugin", "source_hash", "device_id", "dtype", "bucket", "flags"),)
    winner_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    op: Mapped[str] = mapped_column(String(128), index=True)
    plugin: Mapped[str] = mapped_column(String(128))
    source_hash: Mapped[str] = mapped_column(String(32))
    device_id: Mapped[int] = mapped_column(ForeignKey("kz_devices.device_id", ondelete="CASCADE"))
    dtype: Mapped[str] = mapped_column(String(32))
    bucket: Mapped[str] = mapped_column(String(128))
    flags: Mapped[str] = mapped_column(String(256))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    time_ms: Mapped[float] = mapped_column(Float)
    spread: Mapped[float] = mapped_column(Float)  # relative IQR of the timing: its noise
    shape: Mapped[str] = mapped_column(String(256))  # the shape that was timed
    trials: Mapped[int] = mapped_column(Integer)
    origin: Mapped[Origin] = mapped_column(Enum(Origin, name="kz_origin"))
    code_files: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    params: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # the timed call's keyword arguments
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now, onupdate=now)


class TrialModel(Base):
    """One tuning trial: a config run, checked and timed, or the reason it failed."""

    __tablename__ = "kz_trials"
    trial_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_name: Mapped[str] = mapped_column(String(512), index=True)
    op: Mapped[str] = mapped_column(String(128))
    plugin: Mapped[str] = mapped_column(String(128))
    device_id: Mapped[int] = mapped_column(ForeignKey("kz_devices.device_id", ondelete="CASCADE"))
    shape: Mapped[str] = mapped_column(String(256))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    outcome: Mapped[Outcome] = mapped_column(Enum(Outcome, name="kz_outcome"))
    message: Mapped[str] = mapped_column(String(4000), default="")
    time_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    spread: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class MissedKeyModel(Base):
    """A key that programs called without an exact tuned winner; `kernelzoo tune --pending` tunes these."""

    __tablename__ = "kz_missed_keys"
    __table_args__ = (UniqueConstraint("op", "device_id", "dtype", "bucket", "flags"),)
    missed_key_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    op: Mapped[str] = mapped_column(String(128))
    device_id: Mapped[int] = mapped_column(ForeignKey("kz_devices.device_id", ondelete="CASCADE"))
    dtype: Mapped[str] = mapped_column(String(32))
    bucket: Mapped[str] = mapped_column(String(128))
    flags: Mapped[str] = mapped_column(String(256))
    shape: Mapped[str] = mapped_column(String(256))  # a shape string of a call that missed (Op.shape_string)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)  # its keyword arguments, for Op.example
    count: Mapped[int] = mapped_column(Integer, default=0)  # processes that missed it
    last_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now, onupdate=now)


class ShippedImportModel(Base):
    """A shipped winners file already imported for a device, so it is imported once."""

    __tablename__ = "kz_shipped_imports"
    __table_args__ = (UniqueConstraint("file_hash", "device_id"),)
    shipped_import_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    file_name: Mapped[str] = mapped_column(String(256))
    file_hash: Mapped[str] = mapped_column(String(64))
    device_id: Mapped[int] = mapped_column(ForeignKey("kz_devices.device_id", ondelete="CASCADE"))
    records: Mapped[int] = mapped_column(Integer)
    imported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
