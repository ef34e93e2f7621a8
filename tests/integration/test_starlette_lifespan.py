"""``ledgerq.contrib.starlette.lifespan``: the app's engine opened at startup, disposed at
shutdown, and an endpoint's order and task committed together (or neither), through
Starlette's own TestClient against the real database."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ledgerq import ConfigError, aenqueue
from ledgerq.contrib.starlette import LedgerqState, lifespan
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import db

with warnings.catch_warnings():
    # Starlette 1.x prefers httpx2 for its TestClient and warns on httpx (as in test_recipes).
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient


@pytest.fixture
def orders(settings: Settings) -> Iterator[Settings]:
    with db(settings) as conn:
        conn.execute("DROP TABLE IF EXISTS shop_orders")
        conn.execute("CREATE TABLE shop_orders (id bigserial PRIMARY KEY, email text NOT NULL)")
    yield settings
    with db(settings) as conn:
        conn.execute("DROP TABLE shop_orders")


async def place_order(request: Request) -> JSONResponse:
    state: LedgerqState = request.state.ledgerq
    body = await request.json()
    async with state.begin() as session:  # commits the order and its task, or neither
        order_id = (
            await session.execute(
                text("INSERT INTO shop_orders (email) VALUES (:email) RETURNING id"),
                {"email": body["email"]},
            )
        ).scalar_one()
        task_id = await aenqueue(session, "send_receipt", {"order_id": order_id})
        if body.get("fail"):
            raise RuntimeError(f"the endpoint failed after enqueue: {task_id}")
    return JSONResponse({"order_id": order_id, "task_id": task_id}, status_code=201)


async def test_the_lifespan_opens_the_engine_for_requests_and_disposes_it(
    orders: Settings, ledger: PgLedger
) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def own(app: Any) -> AsyncIterator[dict[str, Any]]:
        events.append("own start")
        yield {"greeting": "hello"}
        events.append("own stop")

    app = Starlette(
        routes=[Route("/orders", place_order, methods=["POST"])],
        lifespan=lifespan(orders.database_url, wrap=own, pool_size=2),
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        created = client.post("/orders", json={"email": "ada@example.com"})
        failed = client.post("/orders", json={"email": "bob@example.com", "fail": True})
        state: LedgerqState = client.app_state["ledgerq"]
        assert client.app_state["greeting"] == "hello"  # the app's own lifespan state
        assert state.engine.pool.checkedin() == 1  # type: ignore[attr-defined]
    assert events == ["own start", "own stop"]
    assert state.engine.pool.checkedin() == 0  # type: ignore[attr-defined]  # disposed
    assert created.status_code == 201 and failed.status_code == 500
    body = created.json()
    assert (await ledger.show(body["task_id"]))["payload"] == {"order_id": body["order_id"]}
    assert (await ledger.stats())["total"] == 1
    with db(orders) as conn:
        assert conn.execute("SELECT id, email FROM shop_orders").fetchall() == [
            (body["order_id"], "ada@example.com")
        ]


def test_the_url_is_checked_when_the_lifespan_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="mysql"):
        lifespan("mysql://db/shop")
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", "postgresql://a/one,postgresql://b/two")
    with pytest.raises(ConfigError, match="split across 2 databases"):
        lifespan()
