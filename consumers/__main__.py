from __future__ import annotations

from consumers.cli import main

main()
