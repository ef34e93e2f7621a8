"""A SIGKILLed worker's running tasks are back in seconds, not after a lease
(issue 28 item 2), and a worker that was only stalled cannot write over the rescue.

Real relay and worker processes with the default 60 s lease; the test runs the
reconciler itself once a second (as ``ledgerq reconcile --every 1`` would) and
does not restart the killed worker, so its tasks can only run on the other one.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Sequence

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.faults.cluster import WORKER_ARGS, Cluster, MakeCluster, terminal_count
from tests.harness import db, enqueue_committed

#: The fault suite's worker, with the default lease (60 s) instead of its 2 s.
LEASE_60 = tuple(
    "60" if i > 0 and WORKER_ARGS[i - 1] == "--lease" else arg for i, arg in enumerate(WORKER_ARGS)
)
#: Far below the lease: the worker's liveness silence (5 s), a beat, a reconciler
#: pass, a relay poll, and the rescued suspects run one after another. Half the
#: 60 s lease: what the test tells apart is a rescue by liveness
#: from one that waited for the lease, and a loaded machine stretches the rest.
BOUND_S = 30.0


def _running_on(settings: Settings, pid: int) -> list[int]:
    """The ids running under the worker process ``pid`` (its id is host:pid:token)."""
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT id FROM ledgerq_tasks WHERE status = 'running' AND worker LIKE %s",
            (f"%:{pid}:%",),
        ).fetchall()
    return [int(r[0]) for r in rows]


def _pids_of_effects(settings: Settings, ids: Sequence[int]) -> set[int]:
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT DISTINCT pid FROM fault_effects WHERE task_id = ANY(%s)", (list(ids),)
        ).fetchall()
    return {int(r[0]) for r in rows}


async def _victim_holding(settings: Settings, cluster: Cluster, at_least: int) -> list[int]:
    """Wait until worker-0 runs ``at_least`` tasks; their ids."""
    pid = cluster.members[1].proc.pid  # type: ignore[union-attr]
    async with asyncio.timeout(30):
        while len(held := _running_on(settings, pid)) < at_least:
            await asyncio.sleep(0.05)
    return held


async def _reconcile_until_terminal(cluster: Cluster, ids: Sequence[int], timeout: float) -> float:
    """Reconcile once a second until every id is terminal; the seconds it took."""
    started = time.monotonic()
    last = 0.0
    while await terminal_count(cluster.ledger, ids) < len(ids):
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not terminal within {timeout} s")
        if time.monotonic() - last >= 1.0:
            last = time.monotonic()
            await cluster.reconcile()
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_a_killed_workers_running_tasks_run_on_the_other_within_seconds(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster
) -> None:
    cluster = await make_cluster(workers=2, worker_args=LEASE_60)
    ids = enqueue_committed(
        settings,
        [TaskSpec("fault.write", {"n": i, "sleep": 1.0}, max_attempts=3) for i in range(8)],
    )
    held = await _victim_holding(settings, cluster, at_least=2)
    survivor = cluster.members[2].proc.pid  # type: ignore[union-attr]
    assert cluster.kill("worker-0", signal.SIGKILL)  # mid-task: none of them has finished

    took = await _reconcile_until_terminal(cluster, held, timeout=45)
    print(f"{len(held)} tasks of the killed worker terminal {took:.1f} s after the SIGKILL")
    assert took < BOUND_S, took
    await _reconcile_until_terminal(cluster, ids, timeout=30)

    verdict = await cluster.verify(ids, effects_expected=ids)  # each once, one effect each
    assert verdict.terminal == {"succeeded": len(ids)}
    assert _pids_of_effects(settings, held) == {survivor}
    rows = [await ledger.show(i) for i in held]
    assert all("presumed dead" in (r["attempt_log"][0]["error"] or "") for r in rows), rows
    assert sum(c.orphaned for c in cluster.reconciles) == len(held)
    with db(settings) as conn:
        [(audited,)] = conn.execute(
            "SELECT count(*) FROM ledgerq_audit_tasks t JOIN ledgerq_audit a ON a.id = t.audit_id"
            " WHERE a.action = 'rescue_dead_worker' AND a.actor = 'ledgerq'"
        ).fetchall()
    assert audited == len(held)


async def test_a_stalled_worker_presumed_dead_cannot_write_over_the_rescue(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster
) -> None:
    """SIGSTOP, not SIGKILL: the worker is alive but silent past its liveness window.
    Its tasks are rescued and run on the other worker; resumed, its handlers' writes
    and finishes lose their fences, so each task still ends once, with one effect."""
    cluster = await make_cluster(workers=2, worker_args=LEASE_60)
    ids = enqueue_committed(
        settings,
        [TaskSpec("fault.write", {"n": i, "sleep": 1.0}, max_attempts=3) for i in range(6)],
    )
    held = await _victim_holding(settings, cluster, at_least=2)
    stalled = cluster.members[1].proc
    assert stalled is not None
    stalled.send_signal(signal.SIGSTOP)
    try:
        await _reconcile_until_terminal(cluster, held, timeout=45)
    finally:
        stalled.send_signal(signal.SIGCONT)
    await _reconcile_until_terminal(cluster, ids, timeout=30)
    await asyncio.sleep(3)  # the resumed worker's handlers end, and their finishes lose
    verdict = await cluster.verify(ids, effects_expected=ids)
    assert verdict.terminal == {"succeeded": len(ids)}
    assert stalled.poll() is None  # it lives on, and serves again
    assert _pids_of_effects(settings, held) == {cluster.members[2].proc.pid}  # type: ignore[union-attr]
