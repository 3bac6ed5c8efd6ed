"""PostgreSQL under faults: a server that accepts and never answers, a lock held on kz_winners by another
connection, a server that is not there. An op call returns within a bound in each; the CLI says what is wrong
in one line. The lock case runs on the server that ``.ci/postgres.sh`` starts (tests/postgres.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
import torch
from postgres import postgres_url  # noqa: F401 - a fixture
from tuning_helpers import kernelzoo_cli, reset_lookup

import kernelzoo
from kernelzoo.db.records import Winner, save_winner
from kernelzoo.db.store import forget_stores, open_store
from kernelzoo.errors import DatabaseError
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.registry import registry

pytest.importorskip("psycopg", reason="the PostgreSQL tests use the psycopg driver (the postgres extra)")

X = torch.randn(64, 100)


def softmax_winner(plugin: str) -> Winner:
    impl, spec = registry.impl("softmax", plugin), registry.op("softmax")
    call = spec.check(X)
    return Winner(op="softmax", plugin=plugin, source_hash=impl.source_hash, device=cpu_fingerprint(),
                  dtype="float32", bucket=spec.bucket(call), flags=spec.flags(call), config=impl.config(),
                  time_ms=0.001, spread=0.01, shape="64x100", trials=1)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A local socket that accepts connections and never answers; a PostgreSQL URL pointing at it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"postgresql+psycopg://kernelzoo@127.0.0.1:{server.getsockname()[1]}/kernelzoo"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def timed_first_call(monkeypatch: pytest.MonkeyPatch, url: str) -> float:
    """Seconds of the first op call of a process whose database is ``url``; checks its result too."""
    registry.load()
    kernelzoo.ops.softmax(torch.randn(3, 5))  # imports and plugin loads kept out of the figure
    monkeypatch.setenv("KERNELZOO_DB", url)
    reset_lookup()
    start = time.perf_counter()
    out = kernelzoo.ops.softmax(X)
    took = time.perf_counter() - start
    assert torch.allclose(out, torch.softmax(X, -1), atol=1e-6)
    return took


@pytest.mark.timeout(120)
def test_a_server_that_never_answers_does_not_hold_an_op_call(silent_server, monkeypatch):
    with pytest.warns(RuntimeWarning, match="did not answer within 0.1 s"):
        took = timed_first_call(monkeypatch, silent_server)
    assert took < 2.0, f"the op call waited {took:.2f} s on a server that never answers"
    assert kernelzoo.explain("softmax", X).reason == "default order"
    reset_lookup()


@pytest.mark.timeout(120)
def test_the_cli_says_in_one_line_that_the_server_cannot_be_reached(silent_server):
    start = time.perf_counter()
    result = kernelzoo_cli("show", "--db", silent_server, timeout=60)
    assert time.perf_counter() - start < 45
    err = result.stderr.strip()
    assert result.returncode == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "cannot be reached" in err or "timeout" in err.lower(), err
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = kernelzoo_cli("show", "--db", f"postgresql+psycopg://kernelzoo@127.0.0.1:{port}/x", timeout=60)
    err = result.stderr.strip()
    assert result.returncode == 1 and len(err.splitlines()) == 1 and "cannot be reached" in err, err


@pytest.mark.timeout(120)
def test_a_lock_held_on_kz_winners_does_not_hold_an_op_call(postgres_url, monkeypatch):  # noqa: F811
    save_winner(open_store(postgres_url), softmax_winner("python"))
    forget_stores()
    holder = sa.create_engine(postgres_url)
    try:
        with holder.connect() as conn:
            conn.execute(sa.text("BEGIN"))
            conn.execute(sa.text("LOCK TABLE kz_winners IN ACCESS EXCLUSIVE MODE"))
            with pytest.warns(RuntimeWarning, match="did not answer|tuned winners are not used"):
                took = timed_first_call(monkeypatch, postgres_url)
            assert took < 2.0, f"the op call waited {took:.2f} s behind a lock"
            conn.execute(sa.text("ROLLBACK"))
    finally:
        holder.dispose()
    reset_lookup()  # the lock is gone: the winner is used
    deadline = time.monotonic() + 20
    while kernelzoo.explain("softmax", X).plugin != "python" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert kernelzoo.explain("softmax", X).plugin == "python"
    reset_lookup()
    forget_stores()


def test_a_postgres_database_holding_other_tables_is_refused(postgres_url):  # noqa: F811
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE invoices (id integer primary key)"))
    engine.dispose()
    with pytest.raises(DatabaseError, match="another application's database.*invoices"):
        open_store(postgres_url)
    forget_stores()
    engine = sa.create_engine(postgres_url)
    assert sa.inspect(engine).get_table_names() == ["invoices"]
    engine.dispose()

