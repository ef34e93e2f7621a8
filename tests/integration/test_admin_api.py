"""The admin API (issue 26 item 7) against the real ledger: every function, sync and
async, on Settings and on a bind, with typed results that say what the CLI says.

Finished tasks are made by the testing helper's drain (the worker's own claim and
finish path, in this process), so no relay or broker is needed.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine

import ledgerq
from ledgerq import Registry, TaskFilter, TaskSpec, admin
from ledgerq.core.config import Settings
from ledgerq.core.errors import InvalidFilterError, InvalidTaskError, TaskNotFoundError
from ledgerq.testing import adrain, advance, drain
from tests.harness import db, enqueue_committed
from tests.support import ledgerq as run_cli


def _registry() -> Registry:
    registry = Registry()

    @registry.task("adm.ok")
    def ok(payload: dict[str, Any], ctx: Any) -> None:
        return None

    @registry.task("adm.fail")
    def fail(payload: dict[str, Any], ctx: Any) -> None:
        raise RuntimeError("card declined")

    return registry


def _enqueue(settings: Settings) -> dict[str, list[int]]:
    ok = enqueue_committed(settings, [TaskSpec("adm.ok", {"n": n}) for n in range(2)])
    dead = enqueue_committed(
        settings, [TaskSpec("adm.fail", {"n": n}, max_attempts=1) for n in range(2)]
    )
    later = enqueue_committed(
        settings, [TaskSpec("adm.ok", {"n": 9}, delay=3600, business_key="order-9")]
    )
    return {"ok": ok, "dead": dead, "later": later}


def _seed(settings: Settings) -> dict[str, list[int]]:
    """Two succeeded tasks, two dead ones, one pending one due in an hour."""
    ids = _enqueue(settings)
    engine = create_engine(settings.database_url)
    try:
        result = drain(engine, app=_registry())
    finally:
        engine.dispose()
    assert (result.succeeded, result.dead) == (2, 2), result
    return ids


async def _aseed(settings: Settings) -> dict[str, list[int]]:
    """:func:`_seed` from async code."""
    ids = _enqueue(settings)
    engine = create_async_engine(settings.database_url)
    try:
        result = await adrain(engine, app=_registry())
    finally:
        await engine.dispose()
    assert (result.succeeded, result.dead) == (2, 2), result
    return ids


def test_the_admin_module_is_importable_from_ledgerq() -> None:
    assert ledgerq.admin is admin
    assert "admin" in ledgerq.__all__
    for name in admin.__all__:
        assert getattr(admin, name) is not None
        if name.startswith("a") and name[1:] in admin.__all__ and name != "audit":
            assert asyncio.iscoroutinefunction(getattr(admin, name)), name  # the async twin
            assert not asyncio.iscoroutinefunction(getattr(admin, name[1:])), name


def test_stats_show_list_and_audit_from_sync_code(settings: Settings) -> None:
    ids = _seed(settings)

    stats = admin.stats(settings)
    assert isinstance(stats, admin.Stats)
    assert stats.total == 5
    assert stats.by_status == {"succeeded": 2, "dead": 2, "pending": 1}
    assert stats.by_kind["adm.fail"] == {"dead": 2}
    assert [(u.kind, u.tasks) for u in stats.unserved] == []  # the pending one is not due
    assert stats.workers == () and stats.windows == ()

    detail = admin.show(settings, ids["dead"][0])
    assert isinstance(detail, admin.TaskDetail)
    assert (detail.status, detail.kind, detail.attempts, detail.location) == (
        "dead", "adm.fail", 1, "history"
    )  # fmt: skip
    assert isinstance(detail.finished_at, datetime) and detail.finished_at.tzinfo is not None
    [attempt] = detail.attempt_log
    assert attempt.outcome == "dead" and "card declined" in (attempt.error or "")
    by_key = admin.show(settings, key="order-9")
    assert by_key.id == ids["later"][0] and by_key.status == "pending"
    with pytest.raises(TaskNotFoundError):
        admin.show(settings, 10**12)
    with pytest.raises(InvalidFilterError, match="one of them"):
        admin.show(settings)

    rows = admin.list_tasks(settings, TaskFilter(statuses=("dead",)))
    assert all(isinstance(r, admin.TaskRow) for r in rows)
    assert sorted(r.id for r in rows) == sorted(ids["dead"])
    every = sorted((i for group in ids.values() for i in group), reverse=True)
    assert [r.id for r in admin.list_tasks(settings)] == every  # newest first
    page = admin.list_tasks(settings, TaskFilter(limit=2))
    assert len(page) == 2
    assert admin.list_tasks(settings, TaskFilter(before=page[-1].id, limit=10))[0].id < page[-1].id

    report = admin.retry(settings, TaskFilter(statuses=("dead",)), actor="ops:a", reason="fixed")
    assert (report.matched, report.changed) == (2, 2)
    [record] = admin.audit(settings)
    assert isinstance(record, admin.AuditRecord)
    assert (record.actor, record.action, record.reason, record.changed) == (
        "ops:a", "retry", "fixed", 2
    )  # fmt: skip
    assert record.selection == {"statuses": ["dead"]}
    assert admin.audit(settings, before=record.id) == []
    with pytest.raises(InvalidFilterError, match="limit"):
        admin.audit(settings, limit=0)


async def test_the_async_twins_read_and_act_on_a_bind(settings: Settings) -> None:
    ids = await _aseed(settings)
    engine = create_async_engine(settings.database_url)
    try:
        stats = await admin.astats(engine)
        assert stats.by_status["dead"] == 2
        detail = await admin.ashow(engine, ids["ok"][0])
        assert detail.status == "succeeded"
        rows = await admin.alist_tasks(engine, TaskFilter(kind="adm.ok", statuses=("pending",)))
        assert [r.id for r in rows] == ids["later"]

        dry = await admin.acancel(engine, TaskFilter(ids=tuple(ids["later"])), dry_run=True)
        assert (dry.dry_run, dry.matched, dry.changed) == (True, 1, 1)
        assert await admin.aaudit(engine) == []  # a dry run writes nothing
        when = datetime.now(UTC) + timedelta(days=1)
        moved = await admin.areschedule(engine, TaskFilter(ids=tuple(ids["later"])), when)
        assert moved.changed == 1
        assert (await admin.ashow(engine, ids["later"][0])).run_at == when
        assert (await admin.aset_priority(engine, TaskFilter(ids=tuple(ids["later"])), 7)).changed
        assert (await admin.aset_attempts(engine, TaskFilter(ids=tuple(ids["later"])), 9)).changed
        seen: list[int] = []
        cancelled = await admin.aact(
            engine,
            admin.Action.cancel(),
            TaskFilter(ids=tuple(ids["later"])),
            actor="ops:b",
            progress=lambda r: seen.append(r.matched),
        )
        assert cancelled.changed == 1 and seen == [1]
        after = await admin.ashow(engine, ids["later"][0])
        assert (after.status, after.priority, after.max_attempts) == ("cancelled", 7, 9)
        assert [a.action for a in after.audit] == [
            "reschedule", "set-priority", "set-attempts", "cancel"
        ]  # fmt: skip
        retried = await admin.aretry(engine, TaskFilter(statuses=("dead",)), actor="ops:b")
        assert retried.changed == 2
        assert [r.actor for r in await admin.aaudit(engine, limit=1)] == ["ops:b"]
        with pytest.raises(InvalidFilterError):
            await admin.aretry(engine, TaskFilter())  # no criterion: refused
    finally:
        await engine.dispose()


def test_a_sync_function_called_inside_a_running_loop_still_works(settings: Settings) -> None:
    _seed(settings)

    async def inside() -> admin.Stats:
        return admin.stats(settings)  # a running loop: run on a worker thread

    assert asyncio.run(inside()).total == 5


def test_pause_resume_and_rate_limits(settings: Settings) -> None:
    engine = create_engine(settings.database_url)
    try:
        report = admin.pause(engine, "queue", "emails", actor="ops:c", reason="smtp down")
        assert isinstance(report, admin.PauseReport) and report.changed and report.audit_id
        assert not admin.pause(engine, "queue", "emails").changed  # already paused
        assert admin.pause(engine, "kind", "adm.ok").changed
        [paused] = admin.pauses(engine, "queue")
        assert (paused.name, paused.actor, paused.reason) == ("emails", "ops:c", "smtp down")
        assert {p.scope for p in admin.pauses(engine)} == {"queue", "kind"}
        assert admin.resume(engine, "queue", "emails").changed
        assert not admin.resume(engine, "queue", "emails").changed
        assert admin.pauses(engine, "queue") == []

        change = admin.set_rate_limit(engine, "adm.ok", "120/m", actor="ops:c")
        assert (change.rate_per_s, change.burst) == (2.0, 2.0)
        [kind] = admin.kinds(engine)
        assert (kind.kind, kind.rate_per_s, kind.paused) == ("adm.ok", 2.0, True)
        assert admin.set_rate_limit(engine, "adm.ok", None).rate_per_s is None
        with pytest.raises(InvalidTaskError, match="rate_limit"):
            admin.set_rate_limit(engine, "adm.ok", "fast")
        with pytest.raises(InvalidTaskError, match="queue or a kind"):
            admin.pause(engine, "shard", "0")  # type: ignore[arg-type]
    finally:
        engine.dispose()


async def test_async_pause_resume_and_rate_limits(settings: Settings) -> None:
    assert (await admin.apause(settings, "kind", "adm.fail", reason="r")).changed
    assert [p.name for p in await admin.apauses(settings)] == ["adm.fail"]
    await admin.aset_rate_limit(settings, "adm.fail", "5/s", burst=10)
    [kind] = await admin.akinds(settings)
    assert (kind.rate_per_s, kind.burst, kind.paused) == (5.0, 10.0, True)
    assert (await admin.aresume(settings, "kind", "adm.fail")).changed
    assert [r.action for r in await admin.aaudit(settings)][:2] == ["resume", "set-limit"]


def _finished_long_ago(settings: Settings, ids: list[int], days: int) -> None:
    with db(settings) as conn:
        conn.execute(
            "UPDATE ledgerq_history SET finished_at = finished_at - make_interval(days => %s)"
            " WHERE id = ANY(%s)",
            (days, ids),
        )


def test_purge_counts_then_removes_only_old_finished_tasks(settings: Settings) -> None:
    ids = _seed(settings)
    _finished_long_ago(settings, ids["ok"], 40)
    counted = admin.purge(settings, "30d", dry_run=True)
    assert isinstance(counted, admin.PurgeResult)
    assert (counted.dry_run, counted.total) == (True, 2)
    assert counted.matched == {"succeeded": 2, "dead": 0, "cancelled": 0}
    assert admin.stats(settings).total == 5
    heard: list[int] = []
    done = admin.purge(settings, timedelta(days=30), ["succeeded"], progress=heard.append)
    assert (done.removed, sum(heard)) == (2, 2)
    assert admin.stats(settings).by_status == {"dead": 2, "pending": 1}
    with pytest.raises(InvalidFilterError, match="older_than"):
        admin.purge(settings, "soon")
    with pytest.raises(InvalidFilterError, match="statuses: 'pending'"):
        admin.purge(settings, "1d", ["pending"])


async def test_apurge_and_config(settings: Settings) -> None:
    ids = await _aseed(settings)
    _finished_long_ago(settings, ids["dead"], 10)
    done = await admin.apurge(settings, timedelta(days=5), ("dead",))
    assert done.removed == 2 and done.to_json()["removed"] == 2
    entries = await admin.aconfig(settings)
    assert entries["database_url"].env == "LEDGERQ_DATABASE_URL"
    assert entries["amqp_prefix"].value == settings.amqp_prefix
    secret = Settings(database_url="postgresql+psycopg://u:hunter2@db/x")
    assert "hunter2" not in str(admin.config(secret)["database_url"].value)


def test_tags_and_expiry_are_typed_fields_of_the_rows(settings: Settings) -> None:
    expired, unset = enqueue_committed(
        settings,
        [
            TaskSpec("adm.ok", {"n": 1}, tags=["tenant:7", "batch:3"], expires=3600),
            TaskSpec("adm.ok", {"n": 2}, tags=["tenant:7"], delay=7200),
        ],
    )
    engine = create_engine(settings.database_url)
    try:
        advance(engine, 3601, kinds=["adm.ok"])  # the hour passes for the first
        result = drain(engine, app=_registry(), kinds=["adm.ok"])
    finally:
        engine.dispose()
    assert (result.expired, result.ran, result.runs) == (1, 0, ())

    rows = {r.id: r for r in admin.list_tasks(settings, TaskFilter(tags=("tenant:7",)))}
    assert (rows[expired].tags, rows[expired].expired) == (["tenant:7", "batch:3"], True)
    expires_at = rows[expired].expires_at
    assert isinstance(expires_at, datetime) and expires_at.tzinfo is not None
    assert (rows[unset].tags, rows[unset].expired, rows[unset].expires_at) == (
        ["tenant:7"], False, None
    )  # fmt: skip
    assert rows[unset].max_attempts is None  # the kind's default, filled in by its claim
    assert "tags" not in rows[expired].extra and "expired" not in rows[expired].extra
    detail = admin.show(settings, expired)
    assert (detail.status, detail.expired, detail.tags) == (
        "cancelled", True, ["tenant:7", "batch:3"]
    )  # fmt: skip
    assert detail.expires_at == expires_at
    assert detail.to_json()["expires_at"] == expires_at.isoformat()


def test_a_psycopg_connection_and_a_url_are_targets_too(settings: Settings) -> None:
    _seed(settings)
    with db(settings) as conn:
        assert admin.stats(conn).total == 5
    assert admin.stats(settings.database_url).by_status["dead"] == 2


def test_a_bind_of_another_kind_is_refused_naming_the_target() -> None:
    with pytest.raises(TypeError, match="target: expected Settings"):
        admin.stats(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="PostgreSQL"):
        admin.stats("sqlite:///x.db")


def test_the_cli_prints_what_the_api_returns(settings: Settings) -> None:
    ids = _seed(settings)
    cli = json.loads(run_cli(settings, "stats", "--json").stdout)
    assert cli == admin.stats(settings).to_json()
    cli = json.loads(run_cli(settings, "show", str(ids["dead"][0]), "--json").stdout)
    assert cli == json.loads(json.dumps(admin.show(settings, ids["dead"][0]).to_json()))
    cli = json.loads(run_cli(settings, "tasks", "list", "--json").stdout)
    assert cli == [r.to_json() for r in admin.list_tasks(settings)]
