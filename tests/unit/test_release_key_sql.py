"""Migration 0015 changes the due rule in one place only: a released death no
longer holds its ordering key. The view it installs is 0014's, word for word,
plus that clause, so the rule cannot drift while being restated."""

from __future__ import annotations

import importlib

from ledgerq.ledger.sql import OQ

RELEASE = importlib.import_module("ledgerq.ledger.migrations.versions.0015_release_key")


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_view_is_0014s_plus_the_released_clause() -> None:
    assert RELEASE._READY.count(RELEASE.RELEASED) == 1
    without = RELEASE._READY.replace(RELEASE.RELEASED, "")
    assert _words(without) == _words(RELEASE.previous_ready())


def test_the_release_is_fenced_and_looks_up_deaths_as_the_view_does() -> None:
    release = OQ.release_key.text
    assert "h.id = m.id AND h.epoch = m.epoch" in release and "h.status = 'dead'" in release
    assert "ON CONFLICT (task_id, epoch) DO NOTHING" in release
    holders = OQ.key_holders.text
    assert "ordering = 'block'" in holders and "r.epoch = h.epoch" in holders
