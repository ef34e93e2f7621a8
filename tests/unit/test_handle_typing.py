"""What mypy sees of a ``@task`` handle (issue 26, item 2): the function's own
signature and return type when called, ``int`` from ``.enqueue``, a coroutine of
``int`` from ``.aenqueue``, every executor ``enqueue`` takes, and a misspelt or
mistyped option, or an executor of the wrong side, as an error before it runs.

mypy --strict runs on a user's module in a child process, against this checkout's
``ledgerq`` (MYPYPATH), with a cache of the test's own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

USER_MODULE = textwrap.dedent(
    """
    from typing import Any

    import psycopg
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    from ledgerq import AsyncTaskContext, TaskContext, task


    @task("t.receipt", queue="mail", priority=5)
    def send_receipt(payload: dict[str, Any], ctx: TaskContext) -> int:
        return 1


    @task("t.quote", expires=900)
    async def quote(payload: dict[str, Any], ctx: AsyncTaskContext) -> str:
        return "q"


    async def producer(
        s: Session, c: Connection, p: psycopg.Connection[Any], a: AsyncSession
    ) -> None:
        reveal_type(send_receipt({"order_id": 1}, ctx=None))  # ctx: not a TaskContext
        reveal_type(send_receipt.enqueue(s, {"order_id": 1}))
        reveal_type(send_receipt.enqueue(c, {}, priority=9, tags=["tenant:7"], expires=60))
        reveal_type(send_receipt.enqueue(p, {}, max_attempts=2, retry=[1.0, 5.0]))
        reveal_type(await quote.aenqueue(a, {}, business_key="q-1"))
        reveal_type(quote.spec({}))
        send_receipt.enqueue(s, {}, priorty=9)
        send_receipt.enqueue(s, {}, priority="9")
        send_receipt.enqueue(a, {})
        await quote.aenqueue(s, {})
    """
)


@pytest.fixture(scope="module")
def mypy_lines(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[str]]:
    folder = tmp_path_factory.mktemp("handle_typing")
    module = folder / "user_tasks.py"
    module.write_text(USER_MODULE, encoding="utf-8")
    # The project's own cache (scripts/test.sh runs mypy first) spares checking all
    # of ledgerq again, about 20 s; a copy, so the two runs never share files. A
    # cache of other options or of older code is only read where it still matches.
    if (ROOT / ".mypy_cache").is_dir():
        shutil.copytree(ROOT / ".mypy_cache", folder / "cache")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--show-error-codes",
            "--cache-dir",
            str(folder / "cache"),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            str(module),
        ],
        cwd=folder,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: errors were found
    lines: dict[int, list[str]] = {}
    for line in done.stdout.splitlines():
        match = re.match(r".*user_tasks\.py:(\d+): (.*)", line)
        assert match, line
        # "builtins.int" or "int", as the mypy version writes it
        lines.setdefault(int(match[1]), []).append(match[2].replace('"builtins.', '"'))
    return lines


def _source_line(text: str) -> int:
    """The line of USER_MODULE holding ``text`` (mypy counts from 1)."""
    [number] = [n for n, line in enumerate(USER_MODULE.splitlines(), 1) if text in line]
    return number


@pytest.mark.parametrize(
    ("call", "revealed"),
    [
        ('send_receipt({"order_id": 1}, ctx=None)', '"int"'),
        ('send_receipt.enqueue(s, {"order_id": 1})', '"int"'),
        ("send_receipt.enqueue(c, {}, priority=9", '"int"'),
        ("send_receipt.enqueue(p, {}, max_attempts=2", '"int"'),
        ("await quote.aenqueue(a", '"int"'),
        ("quote.spec({})", '"ledgerq.ledger.specs.TaskSpec"'),
    ],
)
def test_the_handle_is_typed_as_its_function_and_enqueue_returns_an_id(
    mypy_lines: dict[int, list[str]], call: str, revealed: str
) -> None:
    notes = mypy_lines.get(_source_line(call), [])
    assert f"note: Revealed type is {revealed}" in notes, notes


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ("ctx=None))", '"ctx" to "__call__" of "TaskHandle" has incompatible type "None"'),
        ("priorty=9", 'Unexpected keyword argument "priorty" for "enqueue" of "TaskHandle"'),
        ('priority="9"', 'Argument "priority" to "enqueue" of "TaskHandle" has incompatible type'),
        ("send_receipt.enqueue(a, {})", 'incompatible type "AsyncSession"'),
        ("await quote.aenqueue(s, {})", 'incompatible type "Session"'),
    ],
)
def test_a_wrong_call_is_a_mypy_error(
    mypy_lines: dict[int, list[str]], call: str, error: str
) -> None:
    found = mypy_lines.get(_source_line(call), [])
    assert any(line.startswith("error:") and error in line for line in found), found


def test_the_right_calls_are_not_errors(mypy_lines: dict[int, list[str]]) -> None:
    for call in (
        'send_receipt.enqueue(s, {"order_id": 1})',
        "send_receipt.enqueue(c, {}, priority=9",
        "send_receipt.enqueue(p, {}, max_attempts=2",
        "await quote.aenqueue(a",
        "quote.spec({})",
    ):
        found = mypy_lines.get(_source_line(call), [])
        assert not [line for line in found if line.startswith("error:")], (call, found)
