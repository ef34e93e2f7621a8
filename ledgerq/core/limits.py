"""The numeric limits that settings are checked against and the ledger enforces.

They live below both (the settings parser in :mod:`ledgerq.core.settings_table`
and :mod:`ledgerq.core.values`, the ledger in :mod:`ledgerq.ledger.sharding` and
:mod:`ledgerq.ledger.split.ids`), so that a setting is refused at start with the
same bound the ledger would refuse it at run time.
"""

from __future__ import annotations

#: The largest shard count (``LEDGERQ_SHARDS``) a deployment may set.
MAX_SHARDS = 1024

#: The largest number of ledger shards (task ids stay below 2**53: 48 bits of id
#: under each shard's index).
MAX_LEDGER_SHARDS = 32
