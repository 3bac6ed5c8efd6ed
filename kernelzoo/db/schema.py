"""The schema: reading its state, creating the tables, and upgrading an older database in place.

kernelzoo's tables are managed by alembic (the revisions in ``kernelzoo/db/migrations/versions``)
with its own version table, ``kz_alembic_version``: Optuna's ``alembic_version`` in the same
database is never touched. A database of kernelzoo 0.1.0, which has no revision, is recognised
by its ``kz_schema_versions`` row and upgraded from there. ``kz_schema_versions`` still carries
the schema version, so an older kernelzoo refuses a newer database instead of writing to it.

Creating or upgrading happens in one write transaction that first takes a lock (SQLite:
``BEGIN IMMEDIATE``, PostgreSQL: ``pg_advisory_xact_lock``) and then looks again, so two
processes that start on a new database at once create it once. A newer or unknown schema is
never written to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, inspect, select, text, update
from sqlalchemy.orm import Session

from kernelzoo.db.models import SCHEMA_VERSION, Base, SchemaVersionModel
from kernelzoo.errors import DatabaseError

if TYPE_CHECKING:
    from kernelzoo.db.store import Store

VERSION_TABLE = "kz_alembic_version"
MIGRATIONS = Path(__file__).with_name("migrations")
# The key of the PostgreSQL advisory lock held while the schema is created or upgraded: any fixed number
# that other applications of the database are unlikely to use ("kzschema" in ASCII, as an int64).
LOCK_KEY = int.from_bytes(b"kzschema", "big") & 0x7FFF_FFFF_FFFF_FFFF
# The alembic revision of each schema version.
REVISIONS = {1: "0001", 2: "0002"}


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


def _lock(connection: Connection) -> None:
    """Hold the schema lock until the transaction ends (SQLite's write transactions already hold the file's)."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})


def create(session: Session) -> State:
    """Under the schema lock: create every table in an empty database, or upgrade an older one in place.

    The state is read again after the lock is taken, so another process that created or upgraded the
    database first is seen and nothing is done twice. Returns the state after.
    """
    connection = session.connection()
    _lock(connection)
    state = _read(session)
    if state.kind == "empty":
        Base.metadata.create_all(connection)
        session.add(SchemaVersionModel(schema_version_id=1, version=SCHEMA_VERSION, library_version=_library()))
        session.flush()
        _stamp(connection, REVISIONS[SCHEMA_VERSION])
        return State("current", SCHEMA_VERSION)
    if state.kind == "older":
        assert state.version is not None, "an older state has a version"
        if VERSION_TABLE not in set(inspect(connection).get_table_names()):
            if state.version not in REVISIONS:
                raise DatabaseError(f"no upgrade from schema version {state.version}: this kernelzoo upgrades "
                                    f"versions {', '.join(map(str, sorted(REVISIONS)))}")
            _stamp(connection, REVISIONS[state.version])  # a database of a release before alembic
        _upgrade(connection)
        session.execute(update(SchemaVersionModel).values(version=SCHEMA_VERSION, library_version=_library()))
        return State("current", SCHEMA_VERSION)
    return state


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
        before = _read(session)
        after = create(session)
        require(after, store.display_url)
        return (before.version if before.version is not None else SCHEMA_VERSION), SCHEMA_VERSION

    return store.transaction(step, write=True)


def revision(store: Store) -> str | None:
    """The alembic revision recorded in ``kz_alembic_version`` (None before the first)."""
    from alembic.runtime.migration import MigrationContext

    def read(session: Session) -> str | None:
        context = MigrationContext.configure(session.connection(), opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()

    return store.transaction(read)


def _script() -> tuple[Any, Any]:
    """alembic's Config and ScriptDirectory of the migrations (alembic is imported late: it loads slowly)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config, ScriptDirectory.from_config(config)


def _stamp(connection: Connection, rev: str) -> None:
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    context.stamp(_script()[1], rev)


def _upgrade(connection: Connection, target: str = "head") -> None:
    """Run every revision after the recorded one up to ``target``, inside the caller's transaction."""
    from alembic.runtime.environment import EnvironmentContext

    config, script = _script()

    def steps(rev: Any, _context: Any) -> Any:
        return script._upgrade_revs(target, rev)

    with EnvironmentContext(config, script, fn=steps, destination_rev=target) as env:
        env.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
        env.run_migrations()


def _library() -> str:
    from kernelzoo import __version__

    return __version__
