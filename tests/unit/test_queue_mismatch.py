"""The one line an operator reads when RabbitMQ refuses a queue's arguments
(``PRECONDITION_FAILED``): what ledgerq declares, never an empty "with ."."""

from __future__ import annotations

import pytest

from ledgerq.broker.topology import Topology, mismatch

DETAIL = "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"


def test_a_quorum_dead_letter_queue_has_no_other_arguments_to_list() -> None:
    line = mismatch(Topology("lq", "quorum").dead_letter_queue, DETAIL)
    assert "with ." not in line and "with  " not in line
    assert "durable, quorum (LEDGERQ_QUEUE_TYPE), and no other arguments. Stop" in line
    assert "rabbitmqctl delete_queue lq.dead-letters" in line


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_task_queue_lists_the_arguments_ledgerq_declares(queue_type: str) -> None:
    spec = Topology("lq", queue_type).task_queue("default")
    line = mismatch(spec, DETAIL)
    assert f"'lq.q.default' ({DETAIL})" in line
    assert f"durable, {queue_type} (LEDGERQ_QUEUE_TYPE), with x-dead-letter-exchange=lq.dlx" in line
    assert "\n" not in line


def test_a_classic_dead_letter_queue_has_no_arguments_either() -> None:
    line = mismatch(Topology("lq").dead_letter_queue, DETAIL)
    assert "durable, classic (LEDGERQ_QUEUE_TYPE), and no other arguments." in line
