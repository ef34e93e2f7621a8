"""The web-framework recipes of docs/howto.md, run as written against the real database.

Each recipe (tests/recipes/) gets a request through its framework's own test
client: on success the order row and its task exist together; when the view
fails after ``enqueue`` returned an id, the transaction rolls back and neither
exists. The how-to must show each recipe file as it is.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import re
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy.engine import make_url

import ledgerq
from ledgerq import TaskNotFoundError
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import db
from tests.recipes import fastapi_app, flask_app

with warnings.catch_warnings():
    # Starlette 1.x prefers httpx2 for its TestClient and warns on httpx, which works
    # and is what the lock file carries.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "tests" / "recipes"
SECTION = "## Enqueue from your web framework"

SHOP_DDL = "CREATE TABLE shop_orders (id bigserial PRIMARY KEY, email text NOT NULL)"


@pytest.fixture
def shop(settings: Settings) -> Iterator[Settings]:
    """The recipes' business table, empty, next to an empty ledger."""
    with db(settings) as conn:
        conn.execute("DROP TABLE IF EXISTS shop_orders")
        conn.execute(SHOP_DDL)
    yield settings
    with db(settings) as conn:
        conn.execute("DROP TABLE shop_orders")


def orders(settings: Settings) -> list[tuple[int, str]]:
    with db(settings) as conn:
        return [(int(i), str(e)) for i, e in conn.execute("SELECT id, email FROM shop_orders")]


async def task_payload(ledger: PgLedger, task_id: int) -> Any:
    try:
        return (await ledger.show(task_id))["payload"]
    except TaskNotFoundError:
        return None


class EnqueueThenFail:
    """The real ``enqueue`` (its id kept), then the view fails: the rollback must undo both."""

    def __init__(self, real: Callable[..., int]) -> None:
        self.real, self.ids = real, list[int]()

    def __call__(self, *args: Any, **kwargs: Any) -> int:
        self.ids.append(self.real(*args, **kwargs))
        raise RuntimeError("the view failed after enqueue")


class AenqueueThenFail:
    """:class:`EnqueueThenFail` for ``aenqueue``."""

    def __init__(self, real: Callable[..., Awaitable[int]]) -> None:
        self.real, self.ids = real, list[int]()

    async def __call__(self, *args: Any, **kwargs: Any) -> int:
        self.ids.append(await self.real(*args, **kwargs))
        raise RuntimeError("the view failed after enqueue")


async def assert_order_and_task_together(
    shop: Settings, ledger: PgLedger, status: int, body: dict[str, int]
) -> None:
    assert status == 201
    assert orders(shop) == [(body["order_id"], "ada@example.com")]
    assert await task_payload(ledger, body["task_id"]) == {"order_id": body["order_id"]}
    assert (await ledger.stats())["total"] == 1


async def assert_neither(shop: Settings, ledger: PgLedger, failing: Any) -> None:
    [task_id] = failing.ids  # enqueue ran and returned an id inside the transaction
    assert await task_payload(ledger, task_id) is None
    assert orders(shop) == []
    assert (await ledger.stats())["total"] == 0


# Flask with SQLAlchemy


async def test_flask_recipe_commits_the_order_and_its_task_together(
    shop: Settings, ledger: PgLedger
) -> None:
    app = flask_app.create_app(shop.database_url)
    app.config.update(TESTING=True)
    try:
        response = app.test_client().post("/orders", json={"email": "ada@example.com"})
        body = response.get_json()
        assert isinstance(body, dict)
        await assert_order_and_task_together(shop, ledger, response.status_code, body)
    finally:
        app.extensions["engine"].dispose()


async def test_flask_recipe_rolls_back_both_when_the_view_fails_after_enqueue(
    shop: Settings, ledger: PgLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = EnqueueThenFail(ledgerq.enqueue)
    monkeypatch.setattr(flask_app, "enqueue", failing)
    app = flask_app.create_app(shop.database_url)
    app.config.update(TESTING=True)
    try:
        with pytest.raises(RuntimeError, match="after enqueue"):
            app.test_client().post("/orders", json={"email": "ada@example.com"})
        await assert_neither(shop, ledger, failing)
    finally:
        app.extensions["engine"].dispose()


# FastAPI with async SQLAlchemy


async def test_fastapi_recipe_commits_the_order_and_its_task_together(
    shop: Settings, ledger: PgLedger
) -> None:
    with TestClient(fastapi_app.create_app(shop.database_url)) as client:
        response = client.post("/orders", json={"email": "ada@example.com"})
    await assert_order_and_task_together(shop, ledger, response.status_code, response.json())


async def test_fastapi_recipe_rolls_back_both_when_the_endpoint_fails_after_aenqueue(
    shop: Settings, ledger: PgLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = AenqueueThenFail(ledgerq.aenqueue)
    monkeypatch.setattr(fastapi_app, "aenqueue", failing)
    app = fastapi_app.create_app(shop.database_url)
    with TestClient(app) as client, pytest.raises(RuntimeError, match="after enqueue"):
        client.post("/orders", json={"email": "ada@example.com"})
    await assert_neither(shop, ledger, failing)


# Django: settings are configured once per process, from the SHOP_DB_* variables.


@pytest.fixture(scope="session")
def django_app(base_settings: Settings) -> ModuleType:
    url = make_url(base_settings.database_url)
    with pytest.MonkeyPatch.context() as env:
        for name, value in {
            "SHOP_DB_NAME": url.database,
            "SHOP_DB_HOST": url.host,
            "SHOP_DB_PORT": url.port,
            "SHOP_DB_USER": url.username,
            "SHOP_DB_PASSWORD": url.password,
        }.items():
            if value is not None:
                env.setenv(name, str(value))
        return importlib.import_module("tests.recipes.django_app")


def django_post(email: str) -> tuple[int, dict[str, int]]:
    """One request through Django's test client (Django's database calls must not
    run on a thread with an event loop, so the async tests call this in a thread)."""
    django_test = importlib.import_module("django.test")  # (Django ships no type hints)
    try:
        response = django_test.Client().post("/orders", {"email": email})
        return int(response.status_code), dict(response.json())
    finally:
        # This thread's connections, also after a failed request.
        importlib.import_module("django.db").connections.close_all()


async def test_django_recipe_commits_the_model_and_its_task_in_one_atomic_block(
    shop: Settings, ledger: PgLedger, django_app: ModuleType
) -> None:
    status, body = await asyncio.to_thread(django_post, "ada@example.com")
    await assert_order_and_task_together(shop, ledger, status, body)


async def test_django_recipe_rolls_back_both_when_the_view_fails_after_enqueue(
    shop: Settings, ledger: PgLedger, django_app: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = EnqueueThenFail(ledgerq.enqueue)
    monkeypatch.setattr(django_app, "enqueue", failing)
    with pytest.raises(RuntimeError, match="after enqueue"):
        await asyncio.to_thread(django_post, "ada@example.com")
    await assert_neither(shop, ledger, failing)


# The how-to shows each recipe as it is.


def howto_code_blocks() -> list[str]:
    text = (ROOT / "docs" / "howto.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end != -1 else len(text)]
    return [block for block in re.findall(r"```python\n(.*?)```", section, re.DOTALL)]


@pytest.mark.parametrize("recipe", ["flask_app.py", "fastapi_app.py", "django_app.py"])
def test_the_howto_shows_each_recipe_as_it_is(recipe: str) -> None:
    # As it is, less a first "# mypy:" line (Django ships no type hints).
    code = (RECIPES / recipe).read_text(encoding="utf-8")
    code = code.split("\n", 1)[1] if code.startswith("# mypy: ") else code
    assert code in howto_code_blocks(), f"docs/howto.md does not show tests/recipes/{recipe}"


def test_product_code_never_imports_a_web_framework() -> None:
    # The frameworks are dev dependencies, for these recipes only; Starlette is also
    # the dashboard extra's, imported in ledgerq/dashboard only, and Django the django
    # extra's, imported in ledgerq/contrib/django only (import-linter contracts), and so
    # those packages are left out here.
    frameworks = {"django", "flask", "fastapi", "starlette", "httpx", "werkzeug", "pydantic"}
    offenders = []
    allowed = (ROOT / "ledgerq" / "dashboard", ROOT / "ledgerq" / "contrib" / "django")
    for package in ("ledger", "relay", "consumers", "ledgerq"):
        for source in sorted((ROOT / package).rglob("*.py")):
            if any(source.is_relative_to(folder) for folder in allowed):
                continue
            for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
                names = (
                    [a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                    else []
                )  # fmt: skip
                offenders += [f"{source}: {n}" for n in names if n.split(".")[0] in frameworks]
    assert offenders == []
