"""A worker SIGKILLed while its handler spawns children leaves all of that
attempt's children or none: the spawns ride in the handler's transaction
(``ctx.spawn`` goes through ``ctx.session``), which dies with the process. The
next attempt (after the lease runs out and the reconciler re-queues the parent)
spawns the whole family, and the family's ``on_children_done`` callback runs
exactly once.
"""

from __future__ import annotations

import signal

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.faults.cluster import MakeCluster
from tests.harness import db, enqueue_committed


async def test_a_worker_killed_mid_spawn_leaves_all_children_or_none(
    settings: Settings, ledger: PgLedger, make_cluster: MakeCluster
) -> None:
    cluster = await make_cluster(workers=1)
    payload = {"n": 50, "kill_after": 30, "pace": 0.01}
    [parent] = enqueue_committed(settings, [TaskSpec("fault.spawn", payload, retry=[0.2])])
    await cluster.settle([parent])
    assert cluster.members[1].exits[:1] == [-signal.SIGKILL]  # killed mid-spawn
    shown = await ledger.show(parent)
    assert shown["status"] == "succeeded" and shown["attempts"] == 2

    children = [int(c["id"]) for c in await ledger.children(parent, limit=1000)]
    assert len(children) == 50  # none of the killed attempt's 30, all of the second's
    with db(settings) as conn:
        attempts = {
            int(row[0])
            for row in conn.execute(
                "SELECT payload->>'attempt' FROM ledgerq_tasks WHERE parent_id = %s "
                "UNION ALL SELECT payload->>'attempt' FROM ledgerq_history WHERE parent_id = %s",
                (parent, parent),
            )
        }
    assert attempts == {2}
    await cluster.settle(children)

    family = (await ledger.find(parent))["children"]
    assert family["by_status"] == {"succeeded": 50}
    callback = family["callback_id"]
    assert callback is not None
    await cluster.settle([callback])
    everything = [parent, *children, callback]
    verdict = await cluster.verify(everything, effects_expected=[*children, callback])
    assert verdict.terminal == {"succeeded": 52}
