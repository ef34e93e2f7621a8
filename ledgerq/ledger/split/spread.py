"""How a call on a sharded ledger spreads over its shards, written once.

:class:`Shards` holds one ledger per shard and calls them: every shard at once
(:meth:`Shards._each`), or each shard with the items whose ids are its own
(:meth:`Shards._by_id`). The descriptors make a sharded method of one line that
names no signature: :func:`everywhere`, :func:`by_ids`, :func:`on_shard_of` and
:func:`on_first` each call the same-named method of the shards with the
caller's arguments as they came (so the shards' defaults, which are the
protocol's, apply) and merge the answers. mypy sees these attributes as
``Any``; the conformance suite (tests/conformance/) checks what they do on the
sharded ledger, method by method.

Races: the calls on several shards run concurrently and each is atomic on its
own shard only (see :mod:`ledgerq.ledger.split.ledger`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.split.ids import shard_of_id, split_by_shard

log = logging.getLogger("ledgerq")

T = TypeVar("T")
R = TypeVar("R")
L = TypeVar("L")

Merge = Callable[[list[Any]], Any]


class _Spread:
    """A method that calls the same-named method of the shards with the caller's
    arguments (the protocol declares it; nothing is restated here)."""

    name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, shards: Any, owner: type | None = None) -> Any:
        if shards is None:
            return self
        spread = self

        async def method(*args: Any, **kwargs: Any) -> Any:
            return await spread.call(shards, *args, **kwargs)

        method.__name__ = method.__qualname__ = self.name
        return method

    async def call(self, shards: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class _Everywhere(_Spread):
    def __init__(self, merge: Merge) -> None:
        self.merge = merge

    async def call(self, shards: Any, *args: Any, **kwargs: Any) -> Any:
        name = self.name
        return self.merge(await shards._each(lambda s: getattr(s, name)(*args, **kwargs)))


class _ByIds(_Spread):
    def __init__(self, key: Callable[[Any], int], merge: Merge) -> None:
        self.key, self.merge = key, merge

    async def call(self, shards: Any, items: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        name = self.name
        parts = await shards._by_id(
            items, self.key, lambda s, part: getattr(s, name)(part, *args, **kwargs)
        )
        return self.merge(parts)


class _OnShardOf(_Spread):
    def __init__(self, key: Callable[[Any], int]) -> None:
        self.key = key

    async def call(self, shards: Any, first: Any, *args: Any, **kwargs: Any) -> Any:
        shard = shards._shard(shard_of_id(self.key(first)))
        return await getattr(shard, self.name)(first, *args, **kwargs)


class _OnFirst(_Spread):
    async def call(self, shards: Any, *args: Any, **kwargs: Any) -> Any:
        return await getattr(shards.shards[0], self.name)(*args, **kwargs)


def everywhere(merge: Merge = lambda parts: None) -> Any:
    """Ask every shard, concurrently; ``merge`` the answers (in shard order)."""
    return _Everywhere(merge)


def by_ids(key: Callable[[Any], int] = int, merge: Merge = lambda parts: parts) -> Any:
    """Split the first argument's items by the shard in each id (``key``), call each
    shard that has some with its part, concurrently; ``merge`` the answers."""
    return _ByIds(key, merge)


def on_shard_of(key: Callable[[Any], int] = int) -> Any:
    """Call the shard of the first argument's id."""
    return _OnShardOf(key)


def on_first() -> Any:
    """Call shard 0 (what must happen once: a worker beats on every shard)."""
    return _OnFirst()


class Shards(Generic[L]):
    """Ledgers, one per shard (``shards[k]`` is shard k's), and the ways to call them."""

    def __init__(self, shards: Sequence[L]) -> None:
        if not shards:
            raise ValueError("a sharded ledger needs at least one shard")
        self.shards = list(shards)

    def _shard(self, index: int) -> L:
        if index >= len(self.shards):
            raise TaskNotFoundError(
                f"ids of ledger shard {index} cannot exist here: {len(self.shards)} "
                "ledger shard(s) are configured"
            )
        return self.shards[index]

    async def _each(self, call: Callable[[L], Awaitable[R]]) -> list[R]:
        """``call`` on every shard, concurrently; the answers in shard order."""
        return list(await asyncio.gather(*(call(shard) for shard in self.shards)))

    async def _by_id(
        self,
        items: Iterable[T],
        key: Callable[[T], int],
        call: Callable[[L, list[T]], Awaitable[R]],
    ) -> list[R]:
        """``call`` once per shard that ``items`` (by id ``key``) touch, concurrently.
        Ids of a shard this ledger does not have (a message from another deployment
        on a shared broker, say) match no row: they are left out, as a lost
        compare-and-set would be, and logged."""
        groups = split_by_shard(items, key)
        unknown = sorted(k for k in groups if k >= len(self.shards))
        if unknown:
            log.warning(
                "ids of ledger shard(s) %s ignored: %d ledger shard(s) are configured "
                "(is every process given the same LEDGERQ_DATABASE_URL list?)",
                ", ".join(map(str, unknown)),
                len(self.shards),
            )
        return list(
            await asyncio.gather(
                *(call(self.shards[k], part) for k, part in groups.items() if k < len(self.shards))
            )
        )
