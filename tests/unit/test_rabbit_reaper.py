"""The fault suite's private broker nodes are reaped when their test process died."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from tests.rabbit import reap_orphans


def _dir(prefix: str, owner: int) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    (path / "owner").write_text(str(owner))
    return path


def test_directories_of_dead_owners_are_reaped_and_live_ones_kept() -> None:
    prefix = f"lq-reaper-{uuid.uuid4().hex[:8]}-"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    dead_owner = _dir(prefix, int(gone.stdout))
    live_owner = _dir(prefix, os.getpid())
    # A pid file naming a process that is not a broker node: never killed.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (dead_owner / "rabbitmq").mkdir()
        (dead_owner / "rabbitmq" / "pid").write_text(str(bystander.pid))

        assert reap_orphans(prefix) == [dead_owner]

        assert not dead_owner.exists() and live_owner.exists()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
        for path in Path(tempfile.gettempdir()).glob(prefix + "*"):
            (path / "owner").unlink()
            path.rmdir()
