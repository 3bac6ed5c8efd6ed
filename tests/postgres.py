"""A fresh PostgreSQL database per test, on the server that ``.ci/postgres.sh`` starts.

``KERNELZOO_TEST_POSTGRES`` names that server (an admin URL; `.ci/run` sources the script, and a developer can
too). Without it the PostgreSQL tests skip with the reason, except on CI (``CI`` set), where a missing server
is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

ENV = "KERNELZOO_TEST_POSTGRES"


def server_url() -> str:
    url = os.environ.get(ENV)
    if not url:
        reason = f"no PostgreSQL server: source .ci/postgres.sh to start one ({ENV} is unset)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of a new, empty database on the test server, dropped after the test."""
    import sqlalchemy as sa

    admin_url = server_url()
    name = f"kz_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield admin_url.rsplit("/", 1)[0] + "/" + name
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
