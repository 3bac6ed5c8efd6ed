"""The schema version: reading it, creating the tables, and upgrading an older database.

An older schema is upgraded only by ``kernelzoo db upgrade`` (the steps in MIGRATIONS, in
one transaction); a newer or unknown one is never written to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, select, update
from sqlalchemy.orm import Session

from kernelzoo.db.models import SCHEMA_VERSION, Base, SchemaVersionModel
from kernelzoo.errors import DatabaseError

if TYPE_CHECKING:
    from kernelzoo.db.store import Store

# MIGRATIONS[n] changes the tables of schema version n into those of version n + 1.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {}


@dataclass(frozen=True)
class State:
    """What a database holds: 'empty', 'current', 'older', 'newer' or 'unknown', and its version."""

    kind: str
    version: int | None = None


def _read(session: Session) -> State:
    names = set(inspect(session.connection()).get_table_names())
    if SchemaVersionModel.__tablename__ not in names:
        return State("unknown" if any(n.startswith("kz_") for n in names) else "empty")
    version = session.execute(select(SchemaVersionModel.version)).scalar_one_or_none()
    if not isinstance(version, int):
        return State("unknown")
    if version == SCHEMA_VERSION:
        return State("current", version)
    return State("older" if version < SCHEMA_VERSION else "newer", version)


def inspect_state(store: Store) -> State:
    """The schema state of ``store`` (reads only)."""
    return store.transaction(_read)


def create(session: Session) -> State:
    """Create every table and the version row, unless another process just did."""
    state = _read(session)
    if state.kind != "empty":
        return state
    Base.metadata.create_all(session.connection())
    session.add(SchemaVersionModel(schema_version_id=1, version=SCHEMA_VERSION, library_version=_library()))
    return State("current", SCHEMA_VERSION)


def require(state: State, url: str) -> None:
    """Raise DatabaseError, saying which schema version is needed, unless ``state`` is current."""
    if state.kind == "current":
        return
    if state.kind == "older":
        raise DatabaseError(
            f"the tuning database {url} has schema version {state.version}; this kernelzoo uses version "
            f"{SCHEMA_VERSION}: run `kernelzoo db upgrade --db {url}` to upgrade it")
    if state.kind == "newer":
        raise DatabaseError(
            f"the tuning database {url} has schema version {state.version}, newer than this kernelzoo "
            f"{_library()} (schema version {SCHEMA_VERSION}); it is never written to: it needs a kernelzoo "
            f"that uses schema version {state.version}, or use another database (--db or KERNELZOO_DB)")
    raise DatabaseError(
        f"the tuning database {url} has kz_ tables but no schema version this kernelzoo can read; it "
        f"needs schema version {SCHEMA_VERSION} and never writes to an unknown one: move the file away "
        "or use another database (--db or KERNELZOO_DB)")


def upgrade(store: Store) -> tuple[int, int]:
    """Bring an older (or empty) database to SCHEMA_VERSION; (version before, version after)."""

    def step(session: Session) -> tuple[int, int]:
        state = _read(session)
        if state.kind == "empty":
            create(session)
            return SCHEMA_VERSION, SCHEMA_VERSION
        if state.kind != "older":
            require(state, store.display_url)
            return SCHEMA_VERSION, SCHEMA_VERSION
        assert state.version is not None, "an older state has a version"
        for version in range(state.version, SCHEMA_VERSION):
            if version not in MIGRATIONS:
                raise DatabaseError(f"no upgrade step from schema version {version} to {version + 1}; "
                                    f"the tuning database {store.display_url} cannot be upgraded by this kernelzoo")
            MIGRATIONS[version](session.connection())
        Base.metadata.create_all(session.connection())  # tables that are new since that version
        session.execute(update(SchemaVersionModel).values(version=SCHEMA_VERSION, library_version=_library()))
        return state.version, SCHEMA_VERSION

    return store.transaction(step, write=True)


def _library() -> str:
    from kernelzoo import __version__

    return __version__
