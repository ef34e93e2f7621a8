"""The pure parts of ``ledgerq worker --processes`` (ledgerq/compose/supervisor.py,
ledgerq/processes.py): the restart back-off, the children's command line, the
report a child leaves when its hung watchdog ends it. The processes themselves:
tests/faults/test_processes.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ledgerq.compose.supervisor import SupervisorConfig
from ledgerq.processes import child_argv, report_hung


def test_a_crash_loop_backs_off_doubling_up_to_the_cap() -> None:
    config = SupervisorConfig(2, backoff_s=0.5, backoff_max_s=30.0)
    delays = [config.restart_delay(n) for n in range(10)]
    assert delays == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert config.restart_delay(10_000) == 30.0


@pytest.mark.parametrize("bad", [{"processes": 0}, {"processes": -1}, {"backoff_s": 0}])
def test_the_config_refuses_what_cannot_run(bad: dict[str, float]) -> None:
    options = {"processes": 2, **bad}
    with pytest.raises(ValueError):
        SupervisorConfig(**options)  # type: ignore[arg-type]


def test_children_get_the_command_line_minus_the_supervisors_options() -> None:
    argv = ["-v", "worker", "--app", "m", "--processes", "3", "--metrics-port=9100"]
    argv += ["--concurrency", "4", "--processes=2", "--metrics-port", "9101", "--grace", "5"]
    assert child_argv(argv) == ["-v", "worker", "--app", "m", "--concurrency", "4", "--grace", "5"]


def test_a_child_reports_its_hung_line_to_the_supervisor(tmp_path: Path) -> None:
    report = tmp_path / "child.report"
    logger = logging.getLogger("ledgerq.worker")
    before = list(logger.handlers)
    report_hung(str(report))
    try:
        logger.warning("not this one")
        logger.critical("task 7 (k) attempt 1: its sync handler still runs")
    finally:
        logger.handlers[:] = before
    assert report.read_text() == "task 7 (k) attempt 1: its sync handler still runs\n"
