"""Schema version 2: a winner's hash covers the kernel's code only; its files and call arguments are kept; the
'verified' origin.

Each winner of the old hash (code and config space) whose kernel is the installed one is re-keyed to the
installed code hash with its file hashes; the others keep their old hash and show as stale. Nothing is
deleted.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    op.add_column("kz_winners", sa.Column("code_files", sa.JSON, nullable=True))
    op.add_column("kz_winners", sa.Column("params", sa.JSON, nullable=True))
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TYPE kz_origin ADD VALUE IF NOT EXISTS 'VERIFIED'")
    from kernelzoo.db.legacy import rekey

    winners = sa.table("kz_winners", sa.column("winner_id", sa.Integer), sa.column("op", sa.String),
                       sa.column("plugin", sa.String), sa.column("source_hash", sa.String),
                       sa.column("code_files", sa.JSON))
    found: dict[tuple[str, str, str], tuple[str, dict[str, str]] | None] = {}
    for row in bind.execute(sa.select(winners.c.winner_id, winners.c.op, winners.c.plugin, winners.c.source_hash)):
        key = (row.op, row.plugin, row.source_hash)
        if key not in found:
            found[key] = rekey(*key)
        if found[key] is not None:
            code_hash, files = found[key]
            bind.execute(winners.update().where(winners.c.winner_id == row.winner_id).values(
                source_hash=code_hash, code_files=files))
    op.execute(sa.text("UPDATE kz_schema_versions SET version = 2"))
