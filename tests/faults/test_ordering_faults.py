"""Ordering keys when the worker running a key's task is killed mid-run.

The key's later tasks must not start while its first task is out: not while the
killed worker's lease still runs, not while the reconciler sends the task back,
only once it has ended (here: succeeded on its next run). Then they run one at a
time, in the order their transactions committed. Tasks without a key, running
beside them, are not held back.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
from typing import Any

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from tests.faults.cluster import MakeCluster
from tests.harness import db, enqueue_committed

KEY = "account-42"


def _effects(settings: Settings, ids: list[int]) -> list[tuple[int, int]]:
    """``(task_id, attempt)`` of the handler runs that committed, in commit order."""
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT task_id, attempt FROM fault_effects WHERE task_id = ANY(%s) ORDER BY id",
            (ids,),
        ).fetchall()
    return [(int(task), int(attempt)) for task, attempt in rows]


async def test_a_killed_workers_keyed_task_holds_its_key_until_it_ends(
    settings: Settings, make_cluster: MakeCluster
) -> None:
    cluster = await make_cluster(workers=2)
    first = TaskSpec("fault.write", {"sleep": 4.0}, ordering_key=KEY, retry=[0.2])
    later = [TaskSpec("fault.write", {"sleep": 0.2}, ordering_key=KEY) for _ in range(4)]
    keyed = enqueue_committed(settings, [first, *later])
    free = enqueue_committed(settings, [TaskSpec("fault.write", {"sleep": 0.05})] * 40)

    # Wait for the first keyed task to run, then SIGKILL the worker running it.
    running: dict[str, Any] = {}
    for _ in range(200):
        running = await cluster.ledger.show(keyed[0]) or {}
        if running.get("status") == "running" and running.get("worker"):
            break
        await asyncio.sleep(0.05)
    assert running.get("status") == "running", running
    pid = int(str(running["worker"]).split(":")[1])
    [victim] = [m.role for m in cluster.members if m.proc is not None and m.proc.pid == pid]
    assert cluster.kill(victim, signal.SIGKILL)

    await cluster.settle(keyed + free, timeout=120)
    await cluster.verify(keyed + free, effects_expected=keyed + free)

    # The key's tasks committed their effects in enqueue order, once each (the
    # first's killed run wrote nothing: it died before its transaction committed).
    ran = _effects(settings, keyed)
    assert [task for task, _ in ran] == keyed, ran
    # One at a time: each later task started after the one before it ended.
    shown = [await cluster.ledger.show(task) for task in keyed]
    for before, after in itertools.pairwise(shown):
        assert before is not None and after is not None
        assert after["started_at"] >= before["finished_at"], (before, after)
    # The unkeyed tasks did not wait for the key: most had ended before its first did.
    finished_first = shown[0]["finished_at"] if shown[0] else None
    early = [
        t for t in free if (s := await cluster.ledger.show(t)) and s["finished_at"] < finished_first
    ]
    assert len(early) > len(free) // 2, (len(early), len(free))
