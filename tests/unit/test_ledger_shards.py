"""Ledger shards without a database: the URL list, the id arithmetic, routing."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from ledgerq.core.config import Settings
from ledgerq.core.errors import ConfigError, WrongShardError
from ledgerq.ledger.sharding import key_hash
from ledgerq.ledger.split.ids import (
    MAX_LEDGER_SHARDS,
    RoundRobin,
    check_placement,
    id_range,
    shard_for_key,
    shard_of_id,
    split_by_shard,
)
from ledgerq.ledger.split.router import Shards

A = "postgresql+psycopg://u:secret@db1:5432/ledger"
B = "postgresql://u:secret@db2:5432/ledger"


def test_one_url_is_one_shard_and_unchanged() -> None:
    settings = Settings(database_url=A)
    assert settings.database_urls == (A,)
    assert settings.ledger_shard_count == 1
    assert settings.ledger_shard(0) is settings


def test_a_list_is_parsed_url_by_url_and_narrowed_per_shard() -> None:
    settings = Settings(database_url=f"{A}, {B}", direct_database_url=f"{B},{A}")
    assert settings.database_urls == (A, "postgresql+psycopg://u:secret@db2:5432/ledger")
    second = settings.ledger_shard(1)
    assert second.database_url == "postgresql+psycopg://u:secret@db2:5432/ledger"
    assert second.direct_database_url == A
    assert [s.database_url for s in settings.ledger_shards()] == list(settings.database_urls)
    with pytest.raises(ConfigError, match="there is no ledger shard 2"):
        settings.ledger_shard(2)


def test_a_bad_list_is_one_line_per_problem_with_secrets_masked() -> None:
    with pytest.raises(ConfigError) as bad:
        Settings(database_url=f"{A},mysql://u:secret@db3/x")
    assert "mysql" in str(bad.value) and "secret" not in str(bad.value)
    with pytest.raises(ConfigError, match="lists a database twice"):
        Settings(database_url=f"{A},{A}")
    too_many = ",".join(f"postgresql://h/db{n}" for n in range(MAX_LEDGER_SHARDS + 1))
    with pytest.raises(ConfigError, match=f"at most {MAX_LEDGER_SHARDS} ledger shards"):
        Settings(database_url=too_many)


def test_the_direct_urls_must_match_the_shards_in_number() -> None:
    with pytest.raises(ConfigError, match=r"lists 1 database\(s\) but .* lists 2"):
        Settings(database_url=f"{A},{B}", direct_database_url=A)
    settings = Settings(database_url=A)
    with pytest.raises(ConfigError, match="give one direct URL per ledger shard"):
        replace(settings, direct_database_url=f"{A},{B}")


def test_shard_zero_keeps_todays_ids_and_ranges_never_meet() -> None:
    assert id_range(0) == (1, 2**48 - 1)
    assert id_range(1) == (2**48 + 1, 2**49 - 1)
    for k in range(MAX_LEDGER_SHARDS):
        first, last = id_range(k)
        assert shard_of_id(first) == shard_of_id(last) == k
        assert last < 2**53  # exact in a JSON number
    assert id_range(1)[0] > id_range(0)[1]
    assert shard_of_id(-5) == 0  # the benchmark's synthetic history
    with pytest.raises(ValueError, match="from 0 to"):
        id_range(MAX_LEDGER_SHARDS)


def test_a_key_routes_by_the_one_stable_hash() -> None:
    assert shard_for_key("account-42", 3) == key_hash("account-42") % 3
    assert shard_for_key("account-42", 1) == 0
    spread = {shard_for_key(f"k{n}", 4) for n in range(200)}
    assert spread == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="ledger shard count"):
        shard_for_key("k", 0)


def test_placement_is_checked_from_the_id_alone() -> None:
    key = next(f"k{n}" for n in range(100) if shard_for_key(f"k{n}", 2) == 1)
    check_placement(id_range(1)[0] + 7, key, 2)
    with pytest.raises(WrongShardError, match="belongs on shard 1 of 2"):
        check_placement(7, key, 2)


def test_round_robin_takes_every_shard_in_turn_across_threads() -> None:
    robin = RoundRobin(3)
    taken: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(100):
            shard = robin()
            with lock:
                taken.append(shard)

    threads = [threading.Thread(target=take) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken.count(k) for k in range(3)) == [100, 100, 100]


def test_batches_split_by_the_shard_in_each_id() -> None:
    one = id_range(1)[0]
    assert split_by_shard([3, one, 4, one + 1], int) == {0: [3, 4], 1: [one, one + 1]}


def test_the_router_names_each_keys_database() -> None:
    shards = Shards(f"{A},{B}")
    key = next(f"k{n}" for n in range(100) if shard_for_key(f"k{n}", 2) == 1)
    assert shards.count == 2
    assert shards.url_for(key) == shards.urls[1]
    assert [shards.shard_for(None) for _ in range(4)] == [0, 1, 0, 1]
    assert shards.check(5, None) == 5
    with pytest.raises(WrongShardError):
        shards.check(5, key)
