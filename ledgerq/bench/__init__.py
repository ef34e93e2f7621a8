"""``ledgerq bench``: throughput and latency on this machine, with a raw ceiling."""
