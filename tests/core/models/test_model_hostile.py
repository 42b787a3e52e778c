"""The model layer against a provider that lies, fails, trickles, cuts connections, redirects and echoes keys.

The provider is ``tests/fake_provider.py`` on 127.0.0.1 (started and stopped here). What must hold whatever
it does: the cap is never passed (``spent + reserved <= cap``), every reservation is settled, an answer with
unusable usage is kept and charged at the bound, an attempt is bounded by its deadline, and the key appears
nowhere: not in errors, logs, the store, stdout or stderr.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from evalkit_core.models import (
    BudgetExceeded,
    ModelClient,
    ModelError,
    Request,
    RetryPolicy,
    Timeouts,
    budget_status,
    call_attempts,
    list_calls,
    load_registry,
    redact,
    set_budget_cap,
)
from evalkit_core.store import Store
from fake_provider import FakeProvider, registry_toml  # pyright: ignore[reportImportCycles]

CANARY = "CANARY-9f3a7c1e5b2d4a6c8e0f1a3b5c7d9e1f"
KEY_ENV = "FAKE_KEY"
BIG = "2" * 25  # 10**24-ish: far beyond 2**63
SCENARIOS = [
    "ok", "usage:5000000:10", "usage:-5:3", "usage:12.5:3", f"usage:{BIG}:1", 'usage:"12":3', "usage:null:3",
    "usage:10:5000000", "nousage", "badjson", "trickle:0.05", "cut:before", "cut:headers", "cut:body",
    "status:500", "status:400", "redirect:301", "redirect:307", "chunked", "gzip", "echousage", "slow:0.3",
    *[f"echo:{n}" for n in (0, 7, 250, 292, 295, 299, 300, 301, 900)],
    *[f"echoraw:{n}" for n in (0, 296, 300, 5000)],
    *[f"echo200:{n}" for n in (0, 299, 300)],
]  # fmt: skip
FAST = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.002)


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def client(provider: FakeProvider, store: Store, tmp_path: Path, **kwargs: Any) -> ModelClient:
    path = tmp_path / "fake.toml"
    path.write_text(registry_toml(provider.base, SCENARIOS, key_env=KEY_ENV))
    options: dict[str, Any] = {
        "retry": FAST,
        "timeouts": Timeouts(connect=2, attempt=3, call=10),
        "env": {KEY_ENV: CANARY},
        "seed": 0,
    }
    options.update(kwargs)
    return ModelClient(registry=load_registry([path], env={}), store=store, **options)


def call(
    provider: FakeProvider, store: Store, tmp_path: Path, model: str, request: Request, **kw: Any
) -> Any:
    async def go() -> Any:
        async with client(provider, store, tmp_path, **kw) as c:
            return await c.complete(model, request)

    return asyncio.run(go())


def _ledger_holds(store: Store) -> None:
    """spent + reserved <= cap, nothing left reserved, and the totals are the ledger's sums."""
    status = budget_status(store)
    assert status.reserved == 0
    assert status.outstanding == 0
    if status.cap is not None:
        assert status.spent + status.reserved <= status.cap
    calls = list_calls(store)
    assert sum((c.charged for c in calls), Decimal(0)) == status.spent
    for c in calls:
        assert sum((a.charged for a in call_attempts(store, c.call_id)), Decimal(0)) == c.charged
        assert c.worst_case is not None
        assert c.charged <= c.worst_case * c.attempts  # never more than what was reserved


# ------------------------------------------------------------------------------------------ usage


@pytest.mark.parametrize("provider_kind", ["anthropic", "openai"])
@pytest.mark.parametrize(
    ("scenario", "why"),
    [
        ("usage:5000000:10", "beyond what the request could cost"),
        ("usage:10:5000000", "beyond what the request could cost"),
        (f"usage:{BIG}:1", "beyond what the request could cost"),
        ("usage:-5:3", "expected a non-negative integer"),
        ("usage:12.5:3", "expected a non-negative integer"),
        ('usage:"12":3', "expected a non-negative integer"),
        ("usage:null:3", "is missing"),
        ("nousage", "no 'usage' object"),
    ],
)
def test_impossible_or_unusable_usage_keeps_the_answer_charged_at_the_bound(
    provider, tmp_path, provider_kind, scenario, why
):
    with Store.open(tmp_path / "home") as store:
        request = Request.of("What is 2 + 2?", max_tokens=50)
        done = call(provider, store, tmp_path, f"fake-{provider_kind}/{scenario}", request)
        c = client(provider, store, tmp_path)
        worst = c.worst_case(f"fake-{provider_kind}/{scenario}", request)
        asyncio.run(c.aclose())
        assert done.text == "Hello."  # the answer is kept
        assert done.cost == worst  # charged at the bound: the most the request could cost
        assert done.anomaly is not None
        assert why in done.anomaly
        [record] = list_calls(store)
        assert record.status == "ok"
        assert record.cost == worst
        assert record.anomaly == done.anomaly  # shown by `evalkit calls list`
        assert record.usage is None  # the reported numbers are not stored as usage
        _ledger_holds(store)


def test_a_provider_over_reporting_usage_never_takes_spend_past_the_cap(provider, tmp_path):
    """The issue's case: 5M reported input tokens against a tiny cap. Every call fits the cap only by its
    bound, so the cap holds exactly and the refused call sends nothing."""
    with Store.open(tmp_path / "home") as store:
        request = Request.of("tiny 0", max_tokens=20)  # every request below has this length
        c = client(provider, store, tmp_path)
        worst = c.worst_case("fake-anthropic/usage:5000000:10", request)
        asyncio.run(c.aclose())
        cap = worst * 3 + worst / 2
        set_budget_cap(store, cap)
        before = provider.hits("usage:5000000:10")

        async def go() -> tuple[int, BudgetExceeded | None]:
            n = 0
            async with client(provider, store, tmp_path) as cl:
                for i in range(10):
                    try:
                        await cl.complete(
                            "fake-anthropic/usage:5000000:10", Request.of(f"tiny {i}", max_tokens=20)
                        )
                    except BudgetExceeded as exc:
                        return n, exc
                    n += 1
            return n, None

        n, refusal = asyncio.run(go())
        assert n == 3
        assert refusal is not None
        assert provider.hits("usage:5000000:10") - before == 3
        status = budget_status(store)
        assert status.spent == worst * 3 <= cap
        _ledger_holds(store)


# ------------------------------------------------------------------------------------------ failures


@pytest.mark.parametrize(
    ("scenario", "message", "billed"),
    [
        ("badjson", "malformed JSON", True),
        ("cut:before", "after the request was sent", True),
        ("cut:headers", "after the request was sent", True),
        ("cut:body", "after the request was sent", True),
        ("status:500", "HTTP 500", False),
    ],
)
def test_failures_after_the_request_left_are_charged_in_full_before_it_not_at_all(
    provider, tmp_path, scenario, message, billed
):
    with Store.open(tmp_path / "home") as store:
        request = Request.of("fail please", max_tokens=30)
        with pytest.raises(ModelError, match=message) as info:
            call(provider, store, tmp_path, f"fake-openai/{scenario}", request)
        assert info.value.attempts == 2  # retried once (FAST: two attempts)
        [record] = list_calls(store)
        assert record.status == "error"
        assert record.worst_case is not None
        assert record.charged == (record.worst_case * 2 if billed else 0)
        assert info.value.charged == record.charged
        _ledger_holds(store)


def test_a_4xx_is_not_retried_and_not_charged(provider, tmp_path):
    with Store.open(tmp_path / "home") as store:
        with pytest.raises(ModelError, match=r"HTTP 400.*after 1 attempt\)"):
            call(provider, store, tmp_path, "fake-anthropic/status:400", Request.of("bad"))
        [record] = list_calls(store)
        assert record.charged == 0


@pytest.mark.parametrize("code", [301, 307])
def test_redirects_are_never_followed(provider, tmp_path, code):
    with Store.open(tmp_path / "home") as store:
        before = len(provider.log())
        with pytest.raises(ModelError, match=f"HTTP {code} .*redirects are never followed") as info:
            call(provider, store, tmp_path, f"fake-openai/redirect:{code}", Request.of("go"))
        assert info.value.attempts == 1
        assert len(provider.log()) - before == 1  # nothing went to the Location
        assert CANARY[:8] not in str(info.value)


def test_a_trickling_body_cannot_stretch_an_attempt_past_its_deadline(provider, tmp_path):
    with Store.open(tmp_path / "home") as store:
        t0 = time.monotonic()
        with pytest.raises(ModelError, match=r"within the attempt deadline of 0.4s.*after 2 attempts"):
            call(
                provider, store, tmp_path, "fake-anthropic/trickle:0.05", Request.of("slowly"),
                timeouts=Timeouts(attempt=0.4, call=10),
            )  # fmt: skip
        elapsed = time.monotonic() - t0
        assert elapsed < 2.5  # two attempts of 0.4 s (the body alone would take ~10 s each)
        [record] = list_calls(store)
        assert record.worst_case is not None
        assert record.charged == record.worst_case * 2  # the request had left: billing unknown
        _ledger_holds(store)


def test_the_call_deadline_bounds_all_attempts_together(provider, tmp_path):
    with Store.open(tmp_path / "home") as store:
        t0 = time.monotonic()
        with pytest.raises(ModelError, match=r"call deadline of 1s") as info:
            call(
                provider, store, tmp_path, "fake-openai/slow:0.3", Request.of("x"),
                timeouts=Timeouts(attempt=0.2, call=1.0),
                retry=RetryPolicy(max_attempts=50, base_delay=0.001, max_delay=0.002),
            )  # fmt: skip
        assert time.monotonic() - t0 < 2.0
        assert 2 <= info.value.attempts <= 6
        _ledger_holds(store)


@pytest.mark.parametrize("scenario", ["chunked", "gzip", "ok"])
def test_transport_framings_parse(provider, tmp_path, scenario):
    with Store.open(tmp_path / "home") as store:
        done = call(provider, store, tmp_path, f"fake-openai/{scenario}", Request.of("framing " * 20))
        assert done.text == "Hello."
        assert done.anomaly is None
        assert done.usage.output_tokens == 5


# ------------------------------------------------------------------------------------------ keys


def test_redact_takes_the_key_and_every_long_prefix_of_it():
    key = CANARY
    text = f"a {key} b {key[:8]} c {key[:7]} d {key[:20]}X e {key}{key}"
    out = redact(text, key)
    assert key[:8] not in out
    assert key[:7] in out  # a 7-character prefix is not a secret on its own
    assert out.count("[redacted]") == 5
    cut = redact("." * 295 + key, key)[:300]  # redaction before truncation: nothing of the key survives
    assert "CANARY" not in cut


def test_the_key_appears_nowhere_whatever_the_provider_echoes(provider, tmp_path, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    echoes = [s for s in SCENARIOS if s.startswith(("echo", "redirect", "usage"))] + ["echousage"]
    errors: list[str] = []
    answers: list[str] = []
    with Store.open(tmp_path / "home") as store:
        for scenario in echoes:
            for kind in ("anthropic", "openai"):
                try:
                    done = call(provider, store, tmp_path, f"fake-{kind}/{scenario}", Request.of("who am i"))
                    answers.append(repr(done))
                except ModelError as exc:
                    errors.append(str(exc) + repr(exc.args))
        calls = list_calls(store)
    assert any(r["key"] == CANARY for r in provider.log())  # the provider really had it
    assert errors  # the error paths ran
    assert any("[redacted]" in a for a in answers)  # and the echoing answers too
    assert sum(1 for c in calls if c.anomaly and "echoed the API key" in c.anomaly) >= 6
    out, err = capfd.readouterr()
    haystacks = [*errors, *answers, caplog.text, out, err, *(repr(c) for c in calls)]
    for text in haystacks:
        assert CANARY[:8] not in text, text[:2000]
    for f in (tmp_path / "home").iterdir():
        assert CANARY[:8].encode() not in f.read_bytes(), f


def test_a_key_with_a_line_break_is_never_sent(provider, tmp_path):
    with Store.open(tmp_path / "home") as store:
        before = len(provider.log())
        with pytest.raises(ModelError, match="control character"):
            call(
                provider,
                store,
                tmp_path,
                "fake-openai/ok",
                Request.of("x"),
                env={KEY_ENV: "abc\r\nx-evil: 1"},
            )
        assert len(provider.log()) == before
        assert list_calls(store) == []


# ------------------------------------------------------------------------------------------ every exit settles


def test_deadlines_come_from_the_registry_entry(provider, tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(
        registry_toml(provider.base, ["trickle:0.05"], provider="openai")
        + '\n[models."fake-openai/trickle:0.05".timeouts]\nattempt = 0.3\n'
    )
    reg = load_registry([path], env={})
    assert reg.get("fake-openai/trickle:0.05").timeouts == Timeouts(connect=10.0, attempt=0.3, call=1800.0)
    with Store.open(tmp_path / "home") as store:

        async def go() -> None:
            async with ModelClient(registry=reg, store=store, env={KEY_ENV: CANARY}, retry=FAST) as c:
                await c.complete("fake-openai/trickle:0.05", Request.of("x"))

        with pytest.raises(ModelError, match=r"attempt deadline of 0\.3s"):
            asyncio.run(go())


@pytest.mark.parametrize("how", ["cancel", "aclose", "bug"])
def test_a_call_cut_short_by_cancellation_shutdown_or_a_bug_is_settled(provider, tmp_path, monkeypatch, how):
    with Store.open(tmp_path / "home") as store:
        if how == "bug":
            import evalkit_core.models._client as client_module

            def broken(*_a: object) -> Decimal:
                raise OverflowError("a bug after the reply arrived")

            monkeypatch.setattr(client_module, "cost_of", broken)

        async def go() -> None:
            c = client(provider, store, tmp_path)
            task = asyncio.create_task(c.complete("fake-openai/slow:0.3", Request.of("wait")))
            if how == "bug":
                try:
                    await task
                finally:
                    await c.aclose()
                return
            while provider.hits("slow:0.3") == before:  # noqa: ASYNC110 - polling the fake, not an event
                await asyncio.sleep(0.01)
            if how == "cancel":
                task.cancel()
            await c.aclose()  # cancels what is still in flight and settles it before closing
            with pytest.raises(asyncio.CancelledError):
                await task

        before = provider.hits("slow:0.3")
        if how == "bug":
            with pytest.raises(OverflowError):
                asyncio.run(go())
        else:
            asyncio.run(go())
        [record] = list_calls(store)
        assert record.status == "error"
        assert record.worst_case is not None
        assert record.charged == record.worst_case  # it had been sent: charged in full, never leaked
        assert ("cancelled" if how != "bug" else "internal error (OverflowError)") in (record.error or "")
        _ledger_holds(store)


def test_ctrl_c_settles_calls_in_flight_before_the_cli_exits(provider, tmp_path):
    """SIGINT during a campaign: exit 130, and the process itself settled every reservation it held."""
    import os
    import signal
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "router"))
    from campaign_support import write_campaign  # pyright: ignore[reportImplicitRelativeImport]

    home = tmp_path / "home"
    path = write_campaign(
        tmp_path / "c", models=("fake-openai/slow:5",), k=2,
        registry=registry_toml(provider.base, ["slow:5"], provider="openai", key_env=KEY_ENV),
    )  # fmt: skip
    before = provider.hits("slow:5")
    env = {**os.environ, "EVALKIT_HOME": str(home), KEY_ENV: CANARY}
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalkit_cli", "campaign", "run", str(path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while provider.hits("slow:5") - before < 4:
        assert time.monotonic() < deadline, "the requests never arrived"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    import sqlite3

    with sqlite3.connect(home / "evalkit.sqlite3") as db:  # read as is: no reconcile in between
        (left,) = db.execute("SELECT count(*) FROM budget_reservations").fetchone()
        statuses = [s for (s,) in db.execute("SELECT status FROM model_calls")]
        spent, reserved = db.execute("SELECT spent, reserved FROM budget").fetchone()
    assert left == 0
    assert Decimal(reserved) == 0
    assert statuses == ["error"] * 4  # settled as cancelled (charged in full), not left for a reconcile
    assert Decimal(spent) > 0
