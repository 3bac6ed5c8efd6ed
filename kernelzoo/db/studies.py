"""Optuna's storage on the tuning database: the studies of ``kernelzoo tune`` live beside kernelzoo's tables."""

from __future__ import annotations

import functools
import time
from typing import Any

import optuna
from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError

from kernelzoo.db.store import display_url, sqlite_path
from kernelzoo.errors import DatabaseError


@functools.cache
def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage on the tuning database, with the same SQLite settings as kernelzoo's own engine."""
    sqlite = sqlite_path(url) is not None
    kwargs = {"connect_args": {"timeout": 30}} if sqlite else {"pool_pre_ping": True}
    for attempt in range(6):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
            break
        except SQLAlchemyError as exc:  # two tuners creating Optuna's tables at once: one waits
            if attempt == 5:
                raise DatabaseError(f"cannot open Optuna's storage in {display_url(url)}: {exc}") from exc
            time.sleep(0.2 * 2**attempt)
    if sqlite:
        @event.listens_for(storage.engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None
            dbapi_connection.execute("PRAGMA busy_timeout = 30000")

        @event.listens_for(storage.engine, "begin")
        def _begin(connection: Any) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")  # Optuna reads then writes: take the lock first

        storage.engine.dispose()  # connections made before the listeners are dropped
    return storage
