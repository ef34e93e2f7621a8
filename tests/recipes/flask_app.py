"""Flask with SQLAlchemy: a view saves an order and enqueues its receipt in one transaction."""

from __future__ import annotations

from flask import Flask, request
from sqlalchemy import create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, scoped_session, sessionmaker

from ledgerq import enqueue


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "shop_orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]


def create_app(database_url: str) -> Flask:
    app = Flask(__name__)
    engine = create_engine(database_url)  # postgresql+psycopg://..., the ledger's database
    db_session = scoped_session(sessionmaker(engine))
    app.extensions["engine"] = engine

    @app.teardown_appcontext
    def remove_session(exc: BaseException | None) -> None:
        db_session.remove()

    @app.post("/orders")
    def place_order() -> tuple[dict[str, int], int]:
        with db_session.begin():  # commits the order and its task together, or neither
            order = Order(email=request.get_json()["email"])
            db_session.add(order)
            db_session.flush()  # assigns order.id
            task_id = enqueue(db_session, "send_receipt", {"order_id": order.id})
            return {"order_id": order.id, "task_id": task_id}, 201

    return app
