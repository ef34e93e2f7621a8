"""The dashboard over HTTP (httpx against the ASGI app, the real ledger behind it):
sign-in, sessions, CSRF, escaping, filters, actions and their audit rows, and the
overview's figures with and without the rollup."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx
import pytest

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.dashboard.app import create_app, post_routes
from ledgerq.dashboard.overview import overview_data
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.rollup import WINDOWS, bucket_of
from ledgerq.relay.rollup import Rollup, RollupConfig
from tests.dashboard_seed import SCRIPT, Seeded, seed
from tests.harness import db, enqueue_committed

PASSWORD = "correct horse battery"
TOKEN = "t" * 24
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def client(ledger: PgLedger, settings: DashboardSettings | None = None) -> httpx.AsyncClient:
    app = create_app(ledger, settings or DashboardSettings(), secrets=["db-secret-pw"])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def csrf_of(page: httpx.Response) -> str:
    match = CSRF.search(page.text)
    assert match, "the page has no CSRF field"
    return match[1]


@pytest.fixture
async def seeded(settings: Settings) -> Seeded:
    return await seed(settings)


async def test_every_state_changing_route_is_csrf_protected(ledger: PgLedger) -> None:
    app = create_app(ledger, DashboardSettings())
    routes = post_routes(app)
    assert {r.path for r in routes} == {
        "/tasks/{task_id:int}/{action:str}", "/actions/{action:str}", "/login", "/logout",
    }  # fmt: skip
    for route in routes:
        assert getattr(route.endpoint, "csrf_protected", False), route


async def test_pages_escape_a_script_payload_and_a_post_without_csrf_is_refused(
    ledger: PgLedger, seeded: Seeded
) -> None:
    async with client(ledger) as http:
        page = await http.get(f"/tasks/{seeded.script_id}")
        assert page.status_code == 200
        assert "&lt;script&gt;document.title=" in page.text
        assert SCRIPT not in page.text
        assert "content-security-policy" in page.headers
        assert "script-src 'self'" in page.headers["content-security-policy"]

        target = seeded.ids["shop.report"][0]
        refused = await http.post(f"/tasks/{target}/cancel", data={})
        wrong = await http.post(f"/tasks/{target}/cancel", data={"csrf": "x" * 43})
        assert (refused.status_code, wrong.status_code) == (403, 403)
        assert (await ledger.find(target))["status"] == "pending"

        token = csrf_of(await http.get(f"/tasks/{target}"))
        done = await http.post(f"/tasks/{target}/cancel", data={"csrf": token})
        assert done.status_code == 303 and done.headers["location"] == f"/tasks/{target}"
        shown = await http.get(f"/tasks/{target}")
        assert "cancel: done" in shown.text
    task = await ledger.find(target)
    assert task["status"] == "cancelled"
    assert [(a["actor"], a["action"], a["outcome"]) for a in task["audit"]] == [
        ("dashboard:local", "cancel", "changed")
    ]


async def test_task_list_filters_like_the_cli_and_pages_by_id(
    ledger: PgLedger, seeded: Seeded
) -> None:
    async with client(ledger) as http:
        dead = await http.get("/tasks", params={"status": "dead", "kind": "shop.sync"})
        ids = {int(i) for i in re.findall(r'href="/tasks/(\d+)"', dead.text)}
        assert ids == set(seeded.ids["shop.sync"])
        by_error = await http.get("/tasks", params={"status": "dead", "error": "403 token"})
        assert set(map(int, re.findall(r'href="/tasks/(\d+)"', by_error.text))) == {
            i for i, n in zip(seeded.ids["shop.sync"], range(99), strict=False) if n % 3 == 0
        }
        bad = await http.get("/tasks", params={"status": "lost"})
        assert bad.status_code == 400 and "unknown status &#39;lost&#39;" in bad.text
        # An error line never shows a secret the process knows (here, one that
        # came back in the filter's own message), nor a URL's password.
        leak = await http.get("/tasks", params={"status": "db-secret-pw"})
        url = await http.get("/tasks", params={"kind": "x", "since": "postgresql://u:pw1234@h/db"})
        assert leak.status_code == url.status_code == 400
        assert "db-secret-pw" not in leak.text and "unknown status" in leak.text
        assert "pw1234" not in url.text and "cannot read" in url.text
        first = seeded.ids["shop.email"][3]
        older = await http.get("/tasks", params={"before": first, "kind": "shop.email"})
        assert set(map(int, re.findall(r'href="/tasks/(\d+)"', older.text))) == set(
            seeded.ids["shop.email"][:3]
        )
        parent = await http.get(f"/tasks/{seeded.parent_id}")
        assert f'href="/tasks/{seeded.child_id}"' in parent.text
        # The children's counts by status, as `ledgerq show` prints them.
        assert re.search(
            r'id="children-counts">1: 1 (pending|published|running|succeeded)', parent.text
        )


async def test_a_bulk_action_counts_first_then_changes_and_audits(
    ledger: PgLedger, seeded: Seeded
) -> None:
    reports = seeded.ids["shop.report"]
    async with client(ledger) as http:
        preview = await http.get("/actions/cancel", params={"kind": "shop.report"})
        assert preview.status_code == 200
        assert re.search(r'id="would-change">3<', preview.text)
        assert {(await ledger.find(i))["status"] for i in reports} == {"pending"}
        form = {"csrf": csrf_of(preview), "kind": "shop.report", "reason": "report paused"}
        done = await http.post("/actions/cancel", data=form)
        assert done.status_code == 200 and "<strong>3</strong> changed" in done.text
        everything = await http.get("/actions/retry")
        assert everything.status_code == 400 and "never acts on every task" in everything.text
    for task_id in reports:
        task = await ledger.find(task_id)
        assert task["status"] == "cancelled"
        assert [(a["actor"], a["reason"]) for a in task["audit"]] == [
            ("dashboard:local", "report paused")
        ]


async def test_tags_filter_the_list_and_a_bulk_action_and_an_expired_task_is_marked(
    ledger: PgLedger, settings: Settings
) -> None:
    both, expired, other = enqueue_committed(
        settings,
        [
            TaskSpec("dash.t", tags=["tenant:7", "batch:3"], delay=3600),
            TaskSpec("dash.t", tags=["tenant:7"], expires=3600),
            TaskSpec("dash.t", tags=["tenant:8"], delay=3600),
        ],
    )
    await ledger.backdate([expired], "expires_at", 1)  # as if its hour had passed
    assert await ledger.expire_due(10) == [expired]
    async with client(ledger) as http:
        listed = await http.get("/tasks", params={"tag": "tenant:7"})
        assert set(map(int, re.findall(r'href="/tasks/(\d+)"', listed.text))) == {both, expired}
        cells = r'<a href="/tasks/(\d+)">\d+</a></td>(.*?)</tr>'
        rows = {int(i): row for i, row in re.findall(cells, listed.text, re.S)}
        assert 'class="muted expired">expired<' in rows[expired]
        assert "expired<" not in rows[both]
        assert 'href="/tasks?tag=batch%3A3"' in rows[both]  # each tag links to its list

        preview = await http.get(
            "/actions/cancel", params=[("tag", "tenant:7"), ("tag", "batch:3")]
        )
        assert preview.status_code == 200
        assert re.search(r'id="would-change">1<', preview.text)
        hidden = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', preview.text)
        assert [v for k, v in hidden if k == "tag"] == ["tenant:7", "batch:3"]
        form: dict[str, list[str]] = {}
        for key, value in hidden:  # the confirmation form, as the browser posts it
            form.setdefault(key, []).append(value)
        done = await http.post("/actions/cancel", data=form)
        assert done.status_code == 200 and "<strong>1</strong> changed" in done.text
        bad = await http.get("/actions/cancel", params={"tag": "x" * 65})
        assert bad.status_code == 400 and "at most 64 characters" in bad.text
    assert await ledger.whereabouts([both, expired, other]) == {
        both: "cancelled",
        expired: "cancelled",
        other: "pending",
    }
    assert [a["action"] for a in (await ledger.find(both))["audit"]] == ["cancel"]


async def test_sign_in_sessions_tokens_and_wrong_passwords(ledger: PgLedger) -> None:
    settings = DashboardSettings(password=PASSWORD, token=TOKEN, user="alice", secret="s" * 40)
    async with client(ledger, settings) as http:
        away = await http.get("/tasks?kind=x")
        assert away.status_code == 303
        assert away.headers["location"] == "/login?next=%2Ftasks%3Fkind%3Dx"
        assert (await http.post("/logout", data={})).status_code == 401
        login = await http.get("/login")
        token = csrf_of(login)
        no_csrf = await http.post("/login", data={"user": "alice", "password": PASSWORD})
        assert no_csrf.status_code == 403
        wrong = await http.post(
            "/login", data={"csrf": token, "user": "alice", "password": PASSWORD + "x"}
        )
        assert wrong.status_code == 401 and "wrong user name or password" in wrong.text
        assert PASSWORD not in wrong.text
        ok = await http.post(
            "/login",
            data={"csrf": token, "user": "alice", "password": PASSWORD, "next": "//evil.example"},
        )
        assert ok.status_code == 303 and ok.headers["location"] == "/"
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie
        home = await http.get("/")
        assert home.status_code == 200 and "alice" in home.text
        out = await http.post("/logout", data={"csrf": csrf_of(home)})
        assert out.status_code == 303
        assert (await http.get("/")).status_code == 303
    async with client(ledger, settings) as http:
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert (await http.get("/", headers=bearer)).status_code == 200
        bad = {"authorization": f"Bearer {TOKEN[:-1]}x"}
        assert (await http.get("/", headers=bad)).status_code == 303


async def test_the_overview_is_the_same_from_the_rollup_as_from_history(
    settings: Settings, ledger: PgLedger, seeded: Seeded
) -> None:
    window = WINDOWS["1h"]
    fresh = await overview_data(ledger, window)
    assert fresh["finished"]["dead"] == len(seeded.ids["shop.sync"])
    assert fresh["totals"]["pending"] == 3 and fresh["totals"]["due"] == 0
    kinds = {k["kind"]: k for k in fresh["latency"]}
    assert kinds["shop.sync"]["hops"][-1]["n"] == len(seeded.ids["shop.sync"])
    errors = {(e["kind"], e["error"]) for e in fresh["errors"]}
    assert ("shop.sync", "ConnectionError: warehouse API: 503 upstream unavailable") in errors
    assert fresh["workers"] and fresh["workers"][0]["finished_recently"] > 0
    # Age the finished tasks by five minutes, so whole minutes are there to roll up.
    with db(settings) as conn:
        conn.execute(
            "UPDATE ledgerq_history SET created_at = created_at - interval '5 min', "
            "run_at = run_at - interval '5 min', "
            "published_at = published_at - interval '5 min', "
            "started_at = started_at - interval '5 min', "
            "finished_at = finished_at - interval '5 min'"
        )
    # The same figures from history alone and from the rollup (its minute rows for
    # the hour's window, its hour rows for the week's).
    now = datetime.now(UTC)
    windows = (window, WINDOWS["7d"])
    before = [await overview_data(ledger, w, now) for w in windows]
    rollup = Rollup(ledger, RollupConfig(settle_s=60, backfill_s=3600))
    first = await rollup.run_once()
    assert first.tasks == len(seeded.all_finished()) and first.caught_up
    again = await rollup.run_once()
    assert again.tasks == 0
    after = [await overview_data(ledger, w, now) for w in windows]
    for old, new in zip(before, after, strict=True):
        assert new["finished"]["dead"] == len(seeded.ids["shop.sync"])
        for key in ("finished", "series", "latency"):
            assert new[key] == old[key], (new["window"], key)
    assert after[0]["errors"] == before[0]["errors"]
    assert after[0]["rollup_lag_s"] is not None and after[0]["rollup_lag_s"] < 130
    assert after[0]["rollup"] is True  # the ledger has one (MySQL's too: m0012)


async def test_sql_buckets_agree_with_python(settings: Settings) -> None:
    durations = [0.0, 0.0004, 0.001, 0.0015, 0.25, 1.0, 59.9, 3600.0, 1e6]
    with db(settings) as conn:
        got = [
            conn.execute(
                "SELECT ledgerq_latency_bucket(CAST(%s AS double precision))", (d,)
            ).fetchone()
            for d in durations
        ]
    assert [row[0] for row in got if row] == [bucket_of(d) for d in durations]
