"""FastAPI with async SQLAlchemy: an endpoint saves an order and enqueues in one transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ledgerq import aenqueue


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "shop_orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]


class NewOrder(BaseModel):
    email: str


def create_app(database_url: str) -> FastAPI:
    engine = create_async_engine(database_url)  # postgresql+psycopg://..., the ledger's database
    sessions = async_sessionmaker(engine)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await engine.dispose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders", status_code=201)
    async def place_order(new: NewOrder) -> dict[str, int]:
        # Commits the order and its task together, or neither.
        async with sessions() as session, session.begin():
            order = Order(email=new.email)
            session.add(order)
            await session.flush()  # assigns order.id
            task_id = await aenqueue(session, "send_receipt", {"order_id": order.id})
            return {"order_id": order.id, "task_id": task_id}

    return app
