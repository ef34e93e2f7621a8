"""The MySQL / MariaDB ledger's Alembic revisions: a history of their own, beside
PostgreSQL's (docs/design.md, "MySQL and MariaDB": that one is PL/pgSQL triggers,
partitions, SECURITY DEFINER functions and partial indexes, none of which MySQL
has in that form). Recorded in the same version table,
:data:`ledgerq.ledger.migrations.VERSION_TABLE`; the revision ids start with
``m`` so the two histories never share one.

MySQL commits each DDL statement on its own: a revision that fails half-way
leaves what it did. Each statement of a revision is therefore written to be
run again (``IF NOT EXISTS``), so running ``ledgerq migrate`` again finishes it.
"""
