from __future__ import annotations

from ledgerq.cli import main

main()
