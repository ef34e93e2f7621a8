"""``ledgerq relay --tracing MODULE[:FUNCTION]``: the relay has no ``--app``, so this
is where its OpenTelemetry tracer provider is configured (the worker's is its
``--app`` module). A path that does not load is one line and exit 64, at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ledgerq.cli.options import TracingSetupError, load_tracing


def test_the_module_is_imported_and_the_function_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lq_tracing_setup.py").write_text(
        "CALLS = []\nIMPORTED = True\ndef setup():\n    CALLS.append('setup')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    load_tracing("lq_tracing_setup:setup")
    module = sys.modules["lq_tracing_setup"]
    assert module.CALLS == ["setup"]
    load_tracing("lq_tracing_setup")  # a module alone configures as it imports
    assert module.CALLS == ["setup"]
    with pytest.raises(TracingSetupError, match="has no function 'nope'"):
        load_tracing("lq_tracing_setup:nope")


def test_a_module_that_does_not_import_stops_the_relay_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ledgerq", "relay", "--tracing", "lq_no_such_module_xyz"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 64, done.stderr
    assert done.stderr.strip().splitlines() == [
        "ledgerq: cannot import --tracing 'lq_no_such_module_xyz': ModuleNotFoundError: "
        "No module named 'lq_no_such_module_xyz'"
    ]
