"""Alembic revisions of kernelzoo's own tables (``kz_*``), recorded in ``kz_alembic_version``.

Optuna keeps its tables and its own ``alembic_version`` in the same database; kernelzoo's version
table is separate so that neither upgrade sees the other's revisions. :mod:`kernelzoo.db.schema`
runs these revisions without an ``env.py``.
"""
