"""ledgerq's relay: publishes due ledger rows to RabbitMQ with publisher confirms."""

from __future__ import annotations

from relay.service import Relay, RelayConfig, RelayCounts

__all__ = ["Relay", "RelayConfig", "RelayCounts"]
