"""The MySQL ledger's least-privilege roles (docs/security.md, "Database roles on
MySQL and MariaDB"), applied with the exact statements of ``ledger/mysql/roles.sql``
to a throwaway database on the real MariaDB, with throwaway roles and users: a
migrator user runs ``ledgerq migrate``, a producer enqueues (plain, ``unique``,
``once``, a batch, one ``after=`` another, a child of it) and waits with ``result()``, a
``--direct`` worker and the reconciler (rescue, retention's partitions, the rollup) run
as the service, an operator reads; and each is refused what its role does not grant.

Roles and users are server-wide, so each carries a suffix of its own run; the
database, users and roles are dropped afterwards, even when a test fails."""

from __future__ import annotations

import json
import re
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pymysql
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.mysql.roles import DATABASE_PLACEHOLDER, MY_ROLES
from ledgerq.ledger.sql import parse
from tests.support import ledgerq as run_ledgerq
from tests.support import spawn

ROOT = Path(__file__).parents[2]
GROUPS = ("migrator", "producer", "service", "operator", "admin")
_GROUP = re.compile(r"\bledgerq_(migrator|producer|service|operator|admin)\b")
#: MySQL's "access denied" errors: to a command, a table, a column.
DENIED = (1044, 1142, 1143)


def statements(script: str, suffix: str, database: str) -> list[str]:
    """``script``'s statements, its roles renamed for this run, its database named."""
    body = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("--"))
    body = _GROUP.sub(lambda m: f"lq{suffix}_{m.group(1)}", body)
    body = body.replace(DATABASE_PLACEHOLDER, database)
    return [s.strip() for s in body.split(";") if s.strip()]


def _root(settings: Settings, database: str | None = None) -> Any:
    url = make_url(settings.database_url)
    return pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=database,
        autocommit=True,
    )


@dataclass(frozen=True)
class Roles:
    """A throwaway database, the group roles, and one login user per group."""

    base: Settings
    database: str
    suffix: str
    password: str

    def url(self, group: str) -> str:
        given = make_url(self.base.database_url)
        return URL.create(
            given.drivername,
            f"lq{self.suffix}u_{group}",
            self.password,
            given.host,
            given.port,
            self.database,
        ).render_as_string(hide_password=False)

    def settings(self, group: str) -> Settings:
        # the suite's broker: the reconciler connects to it (it publishes), a
        # --direct worker does not
        return replace(self.base, database_url=self.url(group))

    def as_root(self, script: str) -> None:
        with _root(self.base, self.database) as conn, conn.cursor() as cursor:
            for statement in statements(script, self.suffix, self.database):
                cursor.execute(statement)


@pytest.fixture
def roles(mariadb_settings: Settings) -> Iterator[Roles]:
    suffix = secrets.token_hex(3)
    made = Roles(mariadb_settings, f"lq_roles_{suffix}", suffix, secrets.token_hex(8))
    with _root(mariadb_settings) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {made.database}")
        try:
            for statement in statements(MY_ROLES.create_roles.text, suffix, made.database):
                cursor.execute(statement)
            for group in GROUPS:
                user = f"'lq{suffix}u_{group}'@'%'"
                cursor.execute(f"CREATE USER {user} IDENTIFIED BY '{made.password}'")
                cursor.execute(f"GRANT lq{suffix}_{group} TO {user}")
                cursor.execute(f"SET DEFAULT ROLE lq{suffix}_{group} FOR {user}")
            made.as_root(MY_ROLES.grant_database.text)
            yield made
        finally:
            cursor.execute(f"DROP DATABASE IF EXISTS {made.database}")
            for group in GROUPS:
                cursor.execute(f"DROP USER IF EXISTS 'lq{suffix}u_{group}'@'%'")
                cursor.execute(f"DROP ROLE IF EXISTS lq{suffix}_{group}")


def _denied(url: str, statement: str) -> int:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(statement))
    except Exception as exc:  # the driver's error, wrapped by SQLAlchemy
        return int(getattr(getattr(exc, "orig", None), "args", [0])[0])
    finally:
        engine.dispose()
    return 0


def _stop(worker: subprocess.Popen[str]) -> str:
    worker.send_signal(signal.SIGTERM)
    try:
        return worker.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        worker.kill()
        return worker.communicate()[0]


def test_each_process_runs_under_its_role_and_is_refused_the_rest(roles: Roles) -> None:
    migrated = run_ledgerq(roles.settings("migrator"), "migrate")
    assert migrated.returncode == 0, migrated.stderr
    roles.as_root(MY_ROLES.grant_objects.text)
    effects = "CREATE TABLE mariadb_effects (id BIGINT AUTO_INCREMENT PRIMARY KEY,"
    effects += " task_id BIGINT NOT NULL, attempt INT NOT NULL, n INT NOT NULL)"
    with _root(roles.base, roles.database) as conn, conn.cursor() as cursor:
        cursor.execute(effects)  # the application's own table, its own grant
        cursor.execute(f"GRANT INSERT ON mariadb_effects TO lq{roles.suffix}_service")

    producer = create_engine(roles.url("producer"))
    try:
        with Session(producer) as session, session.begin():
            plain = ledgerq.enqueue(session, "my.effect", {"n": 1})
            unique = ledgerq.enqueue(session, "my.effect", {"n": 2}, business_key="k", unique=True)
            again = ledgerq.enqueue(session, "my.effect", {"n": 3}, business_key="k", unique=True)
            once = ledgerq.enqueue(session, "my.effect", {"n": 4}, business_key="o", once=True)
            batch = ledgerq.enqueue_many(
                session, [TaskSpec("my.effect", {"n": 10 + i}) for i in range(5)]
            )
            after = ledgerq.enqueue(session, "my.effect", {"n": 5}, after=[plain])
            child = ledgerq.enqueue(session, "my.effect", {"n": 6}, parent_id=plain)
        assert again == unique
        ids = [plain, unique, once, *batch, after, child]

        worker = spawn(roles.settings("service"), "worker", "--direct", "--app",
                       "tests.apps.mariadb_app")  # fmt: skip
        try:
            for task_id in ids:
                ended = ledgerq.result(producer, task_id, timeout=60)
                assert ended.status == "succeeded", (task_id, ended)
        finally:
            output = _stop(worker)
        assert worker.returncode == 0, output
        assert "Traceback" not in output, output
    finally:
        producer.dispose()

    reconciled = run_ledgerq(roles.settings("service"), "reconcile", "--json")
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
    assert json.loads(reconciled.stdout)["rollup"] is not None  # the service may roll up

    # what each role is refused
    producer_url, operator_url = roles.url("producer"), roles.url("operator")
    assert _denied(producer_url, "UPDATE ledgerq_tasks SET status = 'succeeded'") in DENIED
    assert _denied(producer_url, "DELETE FROM ledgerq_history") in DENIED
    assert _denied(producer_url, "SELECT payload FROM ledgerq_history") in DENIED
    assert _denied(operator_url, "SELECT COUNT(*) FROM ledgerq_history") == 0
    assert _denied(operator_url, "DELETE FROM ledgerq_tasks") in DENIED
    assert _denied(roles.url("service"), "DROP TABLE ledgerq_tasks") in DENIED
    assert _denied(roles.url("admin"), "SELECT COUNT(*) FROM ledgerq_workers") == 0


def test_security_md_shows_the_statements_of_roles_sql() -> None:
    page = (ROOT / "docs" / "security.md").read_text()
    start = page.index("\n## Database roles on MySQL and MariaDB")
    end = page.find("\n## ", start + 1)
    section = page[start : end if end != -1 else len(page)]
    fences = re.findall(r"```sql\n(.*?)```", section, flags=re.DOTALL)
    shown = parse("\n".join(f for f in fences if "-- name:" in f))
    source = parse((ROOT / "ledgerq" / "ledger" / "mysql" / "roles.sql").read_text())

    def words(blocks: dict[str, str]) -> dict[str, str]:
        return {name: " ".join(body.split()) for name, body in blocks.items()}

    assert words(shown) == words(source)
