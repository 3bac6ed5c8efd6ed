"""The tables of kernelzoo 0.1.0 (schema version 1), whose databases carry no alembic revision.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ORIGINS = ("TUNED", "IMPORTED", "SHIPPED")
OUTCOMES = ("OK", "WRONG_RESULT", "UNSUPPORTED", "COMPILE_ERROR", "OUT_OF_RESOURCES", "CRASH", "TIMEOUT", "ERROR")


def upgrade() -> None:
    when = sa.DateTime(timezone=True)
    op.create_table(
        "kz_schema_versions",
        sa.Column("schema_version_id", sa.Integer, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("library_version", sa.String(64), nullable=False),
        sa.CheckConstraint("schema_version_id = 1"))
    op.create_table(
        "kz_devices",
        sa.Column("device_id", sa.Integer, primary_key=True),
        sa.Column("fingerprint_hash", sa.String(32), nullable=False, unique=True),
        sa.Column("hardware_hash", sa.String(32), nullable=False, index=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
        sa.Column("ceilings", sa.JSON, nullable=True),
        sa.Column("created_at", when, nullable=False))

    def device() -> sa.ForeignKey:
        return sa.ForeignKey("kz_devices.device_id", ondelete="CASCADE")

    op.create_table(
        "kz_winners",
        sa.Column("winner_id", sa.Integer, primary_key=True),
        sa.Column("op", sa.String(128), nullable=False, index=True),
        sa.Column("plugin", sa.String(128), nullable=False),
        sa.Column("source_hash", sa.String(32), nullable=False),
        sa.Column("device_id", sa.Integer, device(), nullable=False),
        sa.Column("dtype", sa.String(32), nullable=False),
        sa.Column("bucket", sa.String(128), nullable=False),
        sa.Column("flags", sa.String(256), nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("time_ms", sa.Float, nullable=False),
        sa.Column("spread", sa.Float, nullable=False),
        sa.Column("shape", sa.String(256), nullable=False),
        sa.Column("trials", sa.Integer, nullable=False),
        sa.Column("origin", sa.Enum(*ORIGINS, name="kz_origin"), nullable=False),
        sa.Column("updated_at", when, nullable=False),
        sa.UniqueConstraint("op", "plugin", "source_hash", "device_id", "dtype", "bucket", "flags"))
    op.create_table(
        "kz_trials",
        sa.Column("trial_id", sa.Integer, primary_key=True),
        sa.Column("study_name", sa.String(512), nullable=False, index=True),
        sa.Column("op", sa.String(128), nullable=False),
        sa.Column("plugin", sa.String(128), nullable=False),
        sa.Column("device_id", sa.Integer, device(), nullable=False),
        sa.Column("shape", sa.String(256), nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("outcome", sa.Enum(*OUTCOMES, name="kz_outcome"), nullable=False),
        sa.Column("message", sa.String(4000), nullable=False),
        sa.Column("time_ms", sa.Float, nullable=True),
        sa.Column("spread", sa.Float, nullable=True),
        sa.Column("created_at", when, nullable=False))
    op.create_table(
        "kz_missed_keys",
        sa.Column("missed_key_id", sa.Integer, primary_key=True),
        sa.Column("op", sa.String(128), nullable=False),
        sa.Column("device_id", sa.Integer, device(), nullable=False),
        sa.Column("dtype", sa.String(32), nullable=False),
        sa.Column("bucket", sa.String(128), nullable=False),
        sa.Column("flags", sa.String(256), nullable=False),
        sa.Column("shape", sa.String(256), nullable=False),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("count", sa.Integer, nullable=False),
        sa.Column("last_seen", when, nullable=False),
        sa.UniqueConstraint("op", "device_id", "dtype", "bucket", "flags"))
    op.create_table(
        "kz_shipped_imports",
        sa.Column("shipped_import_id", sa.Integer, primary_key=True),
        sa.Column("file_name", sa.String(256), nullable=False),
        sa.Column("file_hash", sa.String(64), nullable=False),
        sa.Column("device_id", sa.Integer, device(), nullable=False),
        sa.Column("records", sa.Integer, nullable=False),
        sa.Column("imported_at", when, nullable=False),
        sa.UniqueConstraint("file_hash", "device_id"))
    op.execute(sa.text("INSERT INTO kz_schema_versions (schema_version_id, version, library_version) "
                       "VALUES (1, 1, '0.1.0')"))
