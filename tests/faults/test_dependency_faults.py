"""Dependencies under faults (issue 27): a dependent is released exactly once when
a worker is SIGKILLed while finishing the last dependency (inside the commit of
its terminal status, or just after it), when dependencies end at the same
instant on two workers, and with reconciler passes in between (the cluster runs
one every half second; its safety net must find nothing to do: every release
was made by the dependency's own terminal write)."""

from __future__ import annotations

import signal

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.faults.cluster import Cluster, MakeCluster
from tests.harness import db, enqueue_committed


def _markers(settings: Settings, task_id: int) -> list[str | None]:
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT marker FROM fault_effects WHERE task_id = %s ORDER BY id", (task_id,)
        )
        return [r[0] for r in rows]


def _no_missed_release(cluster: Cluster) -> None:
    assert sum(c.waiting_moved for c in cluster.reconciles) == 0


async def test_a_worker_killed_inside_the_last_dependencys_commit_releases_the_join_once(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster
) -> None:
    cluster = await make_cluster(workers=1)
    [first] = enqueue_committed(settings, [TaskSpec("fault.dep", retry=[0.2])])
    [last] = enqueue_committed(
        settings, [TaskSpec("fault.dep", {"kill_in_commit": True}, retry=[0.2], after=[first])]
    )
    [join] = enqueue_committed(settings, [TaskSpec("fault.dep", after=[first, last])])
    await cluster.settle([first, last, join])

    assert cluster.members[1].exits[:1] == [-signal.SIGKILL]  # killed in the commit
    shown = await ledger.show(last)
    assert shown["status"] == "succeeded" and shown["attempts"] == 2
    assert _markers(settings, join) == [f"{first}={first},{last}={last}"]  # ran once
    verdict = await cluster.verify([first, last, join], effects_expected=[first, last, join])
    assert verdict.terminal == {"succeeded": 3}
    _no_missed_release(cluster)


async def test_a_worker_killed_after_committing_the_last_dependency_releases_the_join_once(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster
) -> None:
    cluster = await make_cluster(workers=1, worker_env={"LEDGERQ_CRASH_AT": "worker.after_commit"})
    [dep] = enqueue_committed(settings, [TaskSpec("fault.dep", retry=[0.2])])
    [join] = enqueue_committed(settings, [TaskSpec("fault.dep", after=[dep])])
    await cluster.settle([dep, join])

    assert cluster.members[1].exits[:1] == [-signal.SIGKILL]
    assert (await ledger.show(dep))["attempts"] == 1  # committed before the kill
    assert _markers(settings, join) == [f"{dep}={dep}"]
    await cluster.verify([dep, join], effects_expected=[dep, join])
    _no_missed_release(cluster)


async def test_joins_whose_dependencies_end_at_once_on_two_workers_run_once_each(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster
) -> None:
    cluster = await make_cluster(workers=2)
    groups = 30
    deps = enqueue_committed(settings, [TaskSpec("fault.dep") for _ in range(groups * 2)])
    joins = enqueue_committed(
        settings,
        [TaskSpec("fault.dep", after=deps[2 * g : 2 * g + 2]) for g in range(groups)],
    )
    everything = [*deps, *joins]
    await cluster.settle(everything)
    await cluster.reconcile()  # one more pass after the last release

    for g, join in enumerate(joins):
        a, b = deps[2 * g : 2 * g + 2]
        assert _markers(settings, join) == [f"{a}={a},{b}={b}"]
    verdict = await cluster.verify(everything, effects_expected=everything)
    assert verdict.terminal == {"succeeded": len(everything)}
    _no_missed_release(cluster)
    workers = {pid for (pid,) in _pids(settings, deps)}
    assert len(workers) == 2  # the dependencies really ended on both workers


def _pids(settings: Settings, ids: list[int]) -> list[tuple[int]]:
    with db(settings) as conn:
        return list(
            conn.execute("SELECT DISTINCT pid FROM fault_effects WHERE task_id = ANY(%s)", (ids,))
        )
