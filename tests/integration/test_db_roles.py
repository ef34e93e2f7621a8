"""The least-privilege database roles of docs/security.md, applied with the exact
statements of ``ledger/roles.sql`` to a throwaway database and throwaway roles,
and checked against the real server: a migrator login runs ``ledgerq migrate``,
a producer enqueues, the relay, a worker and the reconciler run tasks end to end
as the service, an operator runs ``ledgerq stats`` and ``show``; and each is
refused what its role does not grant.

Role names are cluster-wide, so every group role and login user carries a
suffix of its own run; the database and the roles are dropped afterwards, even
when a test fails. Needs a PostgreSQL user that may create databases and roles
(the suite's ``postgres``); skipped otherwise.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from ledgerq import AsyncTaskContext, Registry, TaskContext, TaskSpec, enqueue, enqueue_many
from ledgerq.compose import open_ledger, open_reconciler
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.dashboard.app import create_app
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.migrations import VERSION_TABLE
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg.engines import libpq_url, sync_engine
from ledgerq.ledger.sql import ROLES, parse
from ledgerq.relay.reconciler import ReconcilerConfig
from tests.harness import Pipeline, enqueue_committed
from tests.support import ledgerq

ROOT = Path(__file__).parents[2]
SECURITY_MD = ROOT / "docs" / "security.md"
ROLES_SQL = ROOT / "ledger" / "roles.sql"
GROUPS = ("migrator", "producer", "service", "operator", "admin")
_GROUP_NAME = re.compile(r"\bledgerq_(migrator|producer|service|operator|admin)\b")


def normalized(blocks: dict[str, str]) -> dict[str, str]:
    return {name: " ".join(body.split()) for name, body in blocks.items()}


def documented_blocks() -> dict[str, str]:
    """The named SQL blocks shown in the "Database roles" section of security.md."""
    page = SECURITY_MD.read_text()
    start = page.index("\n## Database roles")
    end = page.find("\n## ", start + 1)
    section = page[start : end if end != -1 else len(page)]
    fences = re.findall(r"```sql\n(.*?)```", section, flags=re.DOTALL)
    return parse("\n".join(f for f in fences if "-- name:" in f))  # not the examples


@dataclass(frozen=True)
class Roles:
    """A migrated throwaway database, the group roles, and one login user per group."""

    suffix: str
    database: str
    admin_url: str  # the suite's own (super)user, on the throwaway database
    urls: dict[str, str]  # group -> its login user's URL

    def group(self, name: str) -> str:
        return f"ledgerq_{name}_{self.suffix}"

    def login(self, name: str) -> str:
        return f"lqtest_{name}_{self.suffix}"

    def script(self, sql_text: str) -> str:
        """A block of roles.sql with this run's group role names."""
        return _GROUP_NAME.sub(rf"ledgerq_\1_{self.suffix}", sql_text)

    def settings(self, base: Settings, group: str) -> Settings:
        return replace(base, database_url=self.urls[group])

    def admin(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(libpq_url(self.admin_url), autocommit=True)


def refused(url: str, statement: str | sql.Composed) -> bool:
    """Whether the server refuses ``statement`` to this login for lack of a privilege
    (in a transaction that is rolled back, so an allowed write leaves nothing)."""
    with psycopg.connect(libpq_url(url)) as conn:
        try:
            conn.execute(statement)
        except psycopg.errors.InsufficientPrivilege:
            return True
        finally:
            conn.rollback()
    return False


@pytest.fixture(scope="module")
def roles(base_settings: Settings) -> Iterator[Roles]:
    server = make_url(base_settings.database_url)
    suffix = uuid.uuid4().hex[:8]
    database = f"ledgerq_roles_{suffix}"
    maintenance = libpq_url(server.set(database="postgres").render_as_string(False))
    made = Roles(
        suffix,
        database,
        server.set(database=database).render_as_string(hide_password=False),
        {},
    )
    with psycopg.connect(maintenance, autocommit=True) as conn:
        row = conn.execute(
            "SELECT rolsuper OR (rolcreaterole AND rolcreatedb) FROM pg_roles "
            "WHERE rolname = current_user"
        ).fetchone()
        if not (row and row[0]):
            pytest.skip("the test database user cannot create roles and databases")
        created: list[str] = []
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
            conn.execute(made.script(ROLES.create_roles.text))
            created += [made.group(g) for g in GROUPS]
            for group in GROUPS:
                login, secret = made.login(group), uuid.uuid4().hex
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                        sql.Identifier(login),
                        sql.Literal(secret),
                        sql.Identifier(made.group(group)),
                    )
                )
                created.append(login)
                made.urls[group] = (
                    server.set(username=login, password=secret, database=database)
                ).render_as_string(hide_password=False)
            # What the migrator creates belongs to its group, whichever login ran it.
            conn.execute(
                sql.SQL("ALTER ROLE {} SET role = {}").format(
                    sql.Identifier(made.login("migrator")), sql.Literal(made.group("migrator"))
                )
            )
            with made.admin() as db:
                db.execute(made.script(ROLES.grant_schema.text))
                # The application's own table, which a handler writes through
                # ctx.session: the application grants it to its worker's login.
                db.execute(
                    "CREATE TABLE role_effects (id bigserial PRIMARY KEY, task_id bigint NOT NULL)"
                )
                db.execute(
                    sql.SQL(
                        "GRANT INSERT ON role_effects TO {0}; "
                        "GRANT USAGE ON SEQUENCE role_effects_id_seq TO {0}"
                    ).format(sql.Identifier(made.login("service")))
                )
            migrated = ledgerq(
                replace(base_settings, database_url=made.urls["migrator"]), "migrate"
            )
            assert migrated.returncode == 0, migrated.stderr
            with psycopg.connect(libpq_url(made.urls["migrator"]), autocommit=True) as db:
                db.execute(made.script(ROLES.grant_objects.text))
            yield made
        finally:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )
            for role in reversed(created):
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_security_md_shows_the_statements_ledgerq_ships() -> None:
    shipped = parse(ROLES_SQL.read_text())
    assert set(shipped) == {"create_roles", "grant_schema", "grant_objects"}
    assert normalized(documented_blocks()) == normalized(shipped)
    assert normalized({n: getattr(ROLES, n).text for n in shipped}) == normalized(shipped)
    assert VERSION_TABLE in shipped["grant_objects"]


def test_the_migrator_group_owns_every_ledger_object(roles: Roles) -> None:
    with roles.admin() as db:
        owners = dict(
            db.execute(
                "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c "
                "WHERE c.relname LIKE 'ledgerq%' AND c.relkind IN ('r', 'p', 'S') "
                "AND NOT c.relispartition"
            ).fetchall()
        )
        # History's partitions (those of the migration and the retention pass's) and
        # the functions that make and drop them.
        partitions = dict(
            db.execute(
                "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c "
                "WHERE c.relname LIKE 'ledgerq_history_%' AND c.relispartition "
                "AND c.relkind IN ('r', 'p')"
            ).fetchall()
        )
        functions = dict(
            db.execute(
                "SELECT p.proname, pg_get_userbyid(p.proowner) FROM pg_proc p "
                "WHERE p.proname LIKE 'ledgerq_history_%'"
            ).fetchall()
        )
    assert set(owners) == {
        "ledgerq_tasks", "ledgerq_history", "ledgerq_unique_keys", "ledgerq_task_id_seq",
        VERSION_TABLE, "ledgerq_audit", "ledgerq_audit_id_seq", "ledgerq_audit_tasks",
        "ledgerq_pauses", "ledgerq_kinds", "ledgerq_families",
        "ledgerq_subscriptions",
        "ledgerq_rollup_counts", "ledgerq_rollup_latency", "ledgerq_rollup_state",
        "ledgerq_ledger_shard", "ledgerq_key_releases", "ledgerq_workers",
        "ledgerq_dependencies", "ledgerq_waiting",
    }  # fmt: skip
    assert {"ledgerq_history_dead", "ledgerq_history_dead_default"} < set(partitions)
    assert len(functions) == 4
    owning = {*owners.values(), *partitions.values(), *functions.values()}
    assert owning == {roles.group("migrator")}


async def test_a_producer_enqueues_in_its_own_transaction_and_can_do_nothing_else(
    settings: Settings, roles: Roles
) -> None:
    producer = roles.settings(settings, "producer")
    with psycopg.connect(libpq_url(roles.urls["service"]), autocommit=True) as listener:
        listener.execute("LISTEN ledgerq_enqueued")
        engine = sync_engine(producer, "test-producer", pool_size=1)
        try:
            with Session(engine) as session, session.begin():
                one = enqueue(session, "roles.produce", {"n": 1}, business_key="k1", unique=True)
                again = enqueue(session, "roles.produce", {"n": 2}, business_key="k1", unique=True)
                batch = enqueue_many(session, [TaskSpec("roles.produce", {"n": n}) for n in (3, 4)])
            with Session(engine) as session, session.begin():
                enqueue(session, "roles.produce", {"n": 5})
                session.rollback()
            with Session(engine) as session, session.begin():  # a permanent key
                first = enqueue(session, "roles.once", business_key="p1", once=True)
            with Session(engine) as session, session.begin():
                assert enqueue(session, "roles.once", business_key="p1", once=True) == first
        finally:
            engine.dispose()
        # The wake-up trigger fired with the producer's rights; the service hears it.
        woken = [n.channel for n in listener.notifies(timeout=5, stop_after=1)]

    assert again == one and len(set(batch)) == 2 and one not in batch
    assert set(woken) == {"ledgerq_enqueued"}
    async with open_ledger(roles.settings(settings, "operator"), "test-operator") as ledger:
        stats = await ledger.stats()
    assert stats["by_kind"]["roles.produce"] == {"pending": 3}  # the rolled back one: never
    assert stats["by_kind"]["roles.once"] == {"pending": 1}

    url = roles.urls["producer"]
    assert refused(url, "UPDATE ledgerq_tasks SET status = 'running'")
    assert refused(url, "DELETE FROM ledgerq_tasks")
    assert refused(url, "SELECT payload FROM ledgerq_history")  # finished tasks' payloads
    assert refused(url, "DELETE FROM ledgerq_history")
    # result() reads how a task ended, and announces its waiters (results.sql)
    assert not refused(url, "SELECT id, status, result, last_error FROM ledgerq_history")
    assert not refused(url, "SELECT id, status, result FROM ledgerq_tasks")
    assert not refused(url, "INSERT INTO ledgerq_waiting VALUES ('r', now())")
    assert refused(url, "SELECT payload FROM ledgerq_tasks")  # other tasks' payloads
    # (id is granted since once=True: the permanent key is taken with a nextval id that
    # the task row then carries, see insert_task_once.)
    for column in ("epoch", "attempts", "lease_until", "worker", "started_at"):
        insert = sql.SQL(
            "INSERT INTO ledgerq_tasks (kind, status, {}) VALUES ('x', 'pending', DEFAULT)"
        ).format(sql.Identifier(column))
        assert refused(url, insert), column
    assert not refused(url, "SELECT id FROM ledgerq_tasks WHERE dedupe_key = 'k1'")
    assert not refused(url, "INSERT INTO ledgerq_tasks (kind, status) VALUES ('x', 'pending')")
    assert refused(url, "DELETE FROM ledgerq_unique_keys")
    assert refused(url, "UPDATE ledgerq_unique_keys SET task_id = 1")
    assert refused(url, "SELECT ledgerq_history_purge('dead', now(), 10)")


async def test_relay_worker_and_reconciler_run_tasks_end_to_end_as_the_service(
    settings: Settings, roles: Roles
) -> None:
    producer, service = roles.settings(settings, "producer"), roles.settings(settings, "service")
    registry = Registry()
    ran: list[tuple[str, int]] = []

    @registry.task("roles.write")
    def write(payload: Any, ctx: TaskContext) -> None:
        ctx.session.execute(text("INSERT INTO role_effects (task_id) VALUES (:id)"), {"id": ctx.id})
        ran.append(("write", ctx.attempt))

    @registry.task("roles.flaky")
    async def flaky(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(("flaky", ctx.attempt))
        if ctx.attempt == 1:
            raise ValueError("the first attempt fails")

    @registry.task("roles.doomed")
    async def doomed(payload: Any, ctx: AsyncTaskContext) -> None:
        raise ValueError(f"doomed on attempt {ctx.attempt}")

    @registry.task("roles.late")
    async def late(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(("late", ctx.id))

    @registry.task("roles.join")
    def join(payload: Any, ctx: TaskContext) -> None:
        ran.append(("join", len(ctx.dependencies)))  # the results, read as the service

    def produce(*specs: TaskSpec) -> list[int]:
        return enqueue_committed(producer, specs)  # as the producer's login

    write_id, flaky_id, doomed_id = produce(
        TaskSpec("roles.write"),
        TaskSpec("roles.flaky", retry=[0.05]),
        TaskSpec("roles.doomed", max_attempts=2, retry=[0.05]),
    )
    # after=: the producer's check and edges run as the migrator (SECURITY DEFINER)
    join_id, blocked_id = produce(
        TaskSpec("roles.join", after=[write_id, flaky_id]),
        TaskSpec("roles.join", after=[doomed_id]),
    )
    worker = WorkerConfig(concurrency=4, lease_s=30, heartbeat_s=5, grace_s=2)
    async with Pipeline(service, registry, worker=worker) as pipe:
        done = await pipe.settle([write_id, flaky_id, doomed_id, join_id, blocked_id], timeout=10)
        assert done == {
            write_id: "succeeded",
            flaky_id: "succeeded",
            doomed_id: "dead",
            join_id: "succeeded",
            blocked_id: "cancelled",
        }

        # Work for the reconciler: an overdue pending row (no relay published it),
        # a published row whose message stalled (on the worker's live route), a
        # published row whose route nobody serves any more (taken back, audited),
        # and a running row whose lease ran out (the last three injected by the
        # suite's own user).
        overdue, stalled, unserved, expired = produce(
            TaskSpec("roles.late", run_at=datetime.now(UTC) - timedelta(hours=1)),
            TaskSpec("roles.late", delay=3600),
            TaskSpec("roles.late", delay=3600),
            TaskSpec("roles.late", delay=3600, max_attempts=1),
        )
        with roles.admin() as db:
            db.execute(
                "UPDATE ledgerq_tasks SET status = 'published', run_at = now(), route = %s, "
                "published_at = now() - interval '1 hour' WHERE id = %s",
                (pipe.worker.subscriptions[0].route, stalled),
            )
            db.execute(
                "UPDATE ledgerq_tasks SET status = 'published', run_at = now(), "
                "route = 'r-gone', published_at = now() WHERE id = %s",
                (unserved,),
            )
            db.execute(
                "UPDATE ledgerq_tasks SET status = 'running', epoch = epoch + 1, attempts = 1, "
                "lease_until = now() - interval '1 second' WHERE id = %s",
                (expired,),
            )
        async with open_reconciler(service, ReconcilerConfig(stall_s=60)) as reconciler:
            counts = await reconciler.run_once()
        assert counts.acted
        assert (counts.overdue_published, counts.republished) == (1, 1)
        assert counts.unpublished == 1
        assert (counts.expired, counts.dead) == (1, 1)
        later = await pipe.settle([overdue, stalled, unserved, expired], timeout=10)
        assert later == {
            overdue: "succeeded",
            stalled: "succeeded",
            unserved: "succeeded",
            expired: "dead",
        }

        # The seam's remaining worker statements: heartbeat and checkpoint.
        [seam_id] = produce(TaskSpec("roles.seam"))
        [claimed] = await pipe.ledger.claim([(seam_id, 0)], "test-seam", 30)
        assert await pipe.ledger.heartbeat([claimed.fence], 30) == frozenset({seam_id})
        assert await pipe.ledger.save_checkpoint(claimed.fence, {"step": 1})
        [finished] = await pipe.ledger.finish([Outcome.succeeded(claimed.fence)])
        assert finished.status == "succeeded"

    assert sorted(ran) == sorted(
        [
            ("write", 1),
            ("join", 2),
            ("flaky", 1),
            ("flaky", 2),
            ("late", overdue),
            ("late", stalled),
            ("late", unserved),
        ]
    )
    with roles.admin() as db:
        effects = [r[0] for r in db.execute("SELECT task_id FROM role_effects")]
        checkpoint = db.execute(
            "SELECT checkpoint FROM ledgerq_history WHERE id = %s", (seam_id,)
        ).fetchone()
    assert effects == [write_id]
    assert checkpoint == ({"step": 1},)

    url = roles.urls["service"]
    assert refused(url, "ALTER TABLE ledgerq_tasks ADD COLUMN spy text")
    assert refused(url, "DROP TABLE ledgerq_history")
    assert refused(url, "TRUNCATE ledgerq_tasks")
    assert refused(url, "INSERT INTO ledgerq_tasks (kind, status) VALUES ('x', 'pending')")
    what_a_task_is = ("kind", "payload", "queue", "priority", "max_attempts", "retry")
    for column in (*what_a_task_is, "timeout_s", "business_key", "dedupe_key", "parent_id"):
        update = sql.SQL("UPDATE ledgerq_tasks SET {0} = {0}").format(sql.Identifier(column))
        assert refused(url, update), column
    assert refused(url, "UPDATE ledgerq_history SET status = 'dead'")
    assert refused(url, "DELETE FROM ledgerq_history")
    assert refused(url, "SELECT payload FROM ledgerq_history")
    assert not refused(url, "SELECT id, status FROM ledgerq_history")


async def test_the_operator_reads_stats_and_show_from_the_cli_and_cannot_write(
    settings: Settings, roles: Roles
) -> None:
    engine = sync_engine(roles.settings(settings, "producer"), "test-producer", pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            task_id = enqueue(session, "roles.inspect", {"who": "operator"})
    finally:
        engine.dispose()
    operator = roles.settings(settings, "operator")

    stats = ledgerq(operator, "stats", "--json")
    shown = ledgerq(operator, "show", str(task_id), "--json")

    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["by_kind"]["roles.inspect"] == {"pending": 1}
    assert shown.returncode == 0, shown.stderr
    task = json.loads(shown.stdout)
    assert (task["id"], task["payload"], task["location"]) == (task_id, {"who": "operator"}, "live")

    purged = ledgerq(operator, "purge", "--older-than", "1d", "--yes", "--json")
    assert purged.returncode == 0, purged.stderr
    assert json.loads(purged.stdout)["removed"] == 0

    url = roles.urls["operator"]
    assert refused(url, "INSERT INTO ledgerq_tasks (kind, status) VALUES ('x', 'pending')")
    assert refused(url, "UPDATE ledgerq_tasks SET status = 'pending'")
    assert refused(url, "DELETE FROM ledgerq_history")
    assert refused(url, "SELECT nextval('ledgerq_task_id_seq')")
    assert not refused(url, "SELECT count(*) FROM ledgerq_history")


def test_a_login_without_its_grants_gets_one_line_and_exit_78_not_endless_retries(
    settings: Settings, roles: Roles
) -> None:
    # The producer may not read the schema's version table: refused at start.
    at_start = ledgerq(roles.settings(settings, "producer"), "relay")
    # The operator may read it, but not lock rows: the relay's first batch is refused
    # while running, and the relay stops instead of retrying forever.
    running = ledgerq(roles.settings(settings, "operator"), "relay")

    for result in (at_start, running):
        assert result.returncode == 78, (result.returncode, result.stderr)
        assert "permission denied" in result.stderr
        assert "grant the login its ledgerq role" in result.stderr
        assert "Traceback" not in result.stderr


def test_the_admin_acts_and_is_audited_while_the_operator_only_lists(
    settings: Settings, roles: Roles
) -> None:
    engine = sync_engine(roles.settings(settings, "producer"), "test-producer", pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            task_id = enqueue(session, "roles.act", {"who": "admin"}, delay=600)
    finally:
        engine.dispose()
    operator, admin = roles.settings(settings, "operator"), roles.settings(settings, "admin")

    # Earlier tests on this database may have left records (the reconciler's own):
    # only those added from here on are this test's.
    earlier = ledgerq(operator, "tasks", "audit", "--json")
    assert earlier.returncode == 0, earlier.stderr
    last_earlier = max((a["id"] for a in json.loads(earlier.stdout)), default=0)
    listed = ledgerq(operator, "tasks", "list", "--kind", "roles.act", "--json")
    refused_cancel = ledgerq(operator, "tasks", "cancel", str(task_id))
    actions = [
        ledgerq(admin, "tasks", *args, str(task_id), "--json")
        for args in (
            ("reschedule", "--in", "1h"),
            ("set-attempts", "--to", "3"),
            ("set-priority", "--to", "2"),
            ("cancel",),
            ("retry",),
        )
    ]
    audit = ledgerq(operator, "tasks", "audit", "--json")

    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["id"] == task_id
    assert refused_cancel.returncode == 78 and "permission denied" in refused_cancel.stderr
    for done in actions:
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["changed"] == 1
    assert audit.returncode == 0
    assert [a["action"] for a in json.loads(audit.stdout) if a["id"] > last_earlier] == [
        "retry", "cancel", "set-priority", "set-attempts", "reschedule"
    ]  # fmt: skip


async def test_the_dashboard_reads_as_the_operator_and_acts_only_as_the_admin(
    settings: Settings, roles: Roles
) -> None:
    producer = roles.settings(settings, "producer")
    [task_id] = enqueue_committed(producer, [TaskSpec("roles.dash", delay=600)])
    reconciler = roles.settings(settings, "service")
    async with open_reconciler(reconciler, ReconcilerConfig()) as pass_:
        assert (await pass_.run_once()).rollup is not None  # the service may roll up
    for role, expected in (("operator", 403), ("admin", 303)):
        async with open_ledger(roles.settings(settings, role), "test-dashboard") as ledger:
            app = create_app(ledger, DashboardSettings())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                overview = await http.get("/", params={"window": "7d"})
                page = await http.get(f"/tasks/{task_id}")
                assert (overview.status_code, page.status_code) == (200, 200), role
                token = re.search(r'name="csrf" value="([^"]+)"', page.text)
                assert token is not None
                done = await http.post(f"/tasks/{task_id}/cancel", data={"csrf": token[1]})
                assert done.status_code == expected, (role, done.text)
                if role == "operator":
                    assert "permission denied" in done.text
