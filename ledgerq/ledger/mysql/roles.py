"""``roles.sql`` of the MySQL ledger, loaded as :class:`MyRoleGrants`: the
least-privilege roles (docs/security.md, "Database roles on MySQL and MariaDB").
Each block is a script of several statements without parameters; nothing in
ledgerq runs them itself (``grant_database`` names the database as
``ledgerq_database_name``, which the one who runs it replaces)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import TextClause

from ledgerq.ledger.sql import load

#: The placeholder ``grant_database`` names the ledger's database by.
DATABASE_PLACEHOLDER = "ledgerq_database_name"


@dataclass(frozen=True)
class MyRoleGrants:
    """``ledger/mysql/roles.sql``."""

    create_roles: TextClause
    grant_database: TextClause
    grant_objects: TextClause


MY_ROLES = load(MyRoleGrants, "ledgerq.ledger.mysql", "roles.sql")
