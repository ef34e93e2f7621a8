"""ledgerq's Alembic migrations (plain DDL, no metadata).

:data:`VERSION_TABLE` is the one place the name of ledgerq's own version table is
written: ``env.py`` records the migrations there, and
:mod:`ledgerq.ledger.autogenerate` keeps it out of an application's autogenerate.
"""

#: Alembic's version table for ledgerq's migrations, apart from the application's own.
VERSION_TABLE = "ledgerq_alembic_version"
