"""The registry (shipped + user files), exact Decimal costs, and the worst case the budget reserves."""

from __future__ import annotations

from decimal import Decimal

import pytest

from evalkit_core import ConfigError, EvalkitError
from evalkit_core.models import (
    Prices,
    RegistryError,
    Usage,
    cost_of,
    load_registry,
    worst_case_cost,
)
from evalkit_core.models._registry import shipped_registry_text


def test_shipped_registry():
    reg = load_registry(env={})
    assert reg.prices_as_of == "2025-06-01"
    assert "check" in shipped_registry_text().lower()
    assert reg.digest.startswith("sha256:")
    assert len(reg.digest) == 71
    providers = {e.provider for e in reg.models.values()}
    assert providers == {"anthropic", "openai", "openai-compatible", "sim"}
    sims = [reg.get(m) for m in ("sim/weak", "sim/mid", "sim/strong")]
    assert all(e.simulated for e in sims)
    rates = [e.sim.success_rate for e in sims if e.sim]
    assert rates == sorted(rates)
    assert len(set(rates)) == 3
    prices = [e.prices.output for e in sims]
    assert prices == sorted(prices)
    assert len(set(prices)) == 3
    sonnet = reg.get("anthropic/claude-sonnet-4")
    assert sonnet.prices == Prices(Decimal("3.00"), Decimal("15.00"), Decimal("0.30"), Decimal("3.75"))
    assert sonnet.api_key_env == "ANTHROPIC_API_KEY"
    assert reg.get("local/ollama-llama3.1-8b").api_key_env is None


def test_user_file_merges_field_by_field(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text(
        '[models."anthropic/claude-sonnet-4"]\nprices = { output = "16.00" }\nbase_url = "http://127.0.0.1:9"\n'
        'api_key_env = "MY_PROXY_KEY"\n'
        '[models."mine/x"]\nprovider = "openai-compatible"\napi_model = "x"\nbase_url = "http://localhost:8000/v1"\n'
        'api_key_env = "MY_KEY"\ncontext_window = 8192\nmax_output = 1024\n'
        'prices = { input = "0.1", output = "0.2", cache_read = "0.1", cache_write = "0.1" }\n'
        "limits = { requests_per_minute = 60, tokens_per_minute = 1000 }\n"
    )
    base = load_registry(env={})
    reg = load_registry([user], env={})
    s = reg.get("anthropic/claude-sonnet-4")
    assert s.prices.output == Decimal("16.00")
    assert s.prices.input == Decimal("3.00")  # untouched fields survive
    assert s.base_url == "http://127.0.0.1:9"
    assert s.api_key_env == "MY_PROXY_KEY"  # the layer that moved it named the key that goes there
    assert reg.get("mine/x").requests_per_minute == 60
    assert reg.digest != base.digest
    assert reg.sources[-1] == str(user)
    # the same via $EVALKIT_REGISTRY
    assert load_registry(env={"EVALKIT_REGISTRY": str(user)}).digest == reg.digest


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            'prices = { input = 3.0, output = "1", cache_read = "1", cache_write = "1" }',
            "field 'input' = 3.0; expected a decimal string",
        ),
        ('prices = { input = "3", output = "1", cache_read = "1" }', "field 'cache_write' is missing"),
        (
            'prices = { input = "abc", output = "1", cache_read = "1", cache_write = "1" }',
            "field 'input' = 'abc'",
        ),
    ],
)
def test_bad_user_entries_name_file_and_field(tmp_path, body, needle):
    f = tmp_path / "bad.toml"
    f.write_text(
        '[models."bad/x"]\nprovider = "openai"\napi_model = "x"\nbase_url = "https://example.invalid/v1"\n'
        f'api_key_env = "K"\ncontext_window = 10\nmax_output = 10\n{body}\n'
    )
    with pytest.raises(RegistryError) as info:
        load_registry([f], env={})
    assert str(f) in str(info.value)
    assert '[models."bad/x"]' in str(info.value)
    assert needle in str(info.value)
    assert isinstance(info.value, ConfigError | EvalkitError)


def test_registry_file_errors(tmp_path):
    with pytest.raises(RegistryError, match="registry file not found"):
        load_registry([tmp_path / "nope.toml"], env={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[models\n")
    with pytest.raises(RegistryError, match="not valid TOML"):
        load_registry([broken], env={})
    bad_provider = tmp_path / "p.toml"
    bad_provider.write_text('[models."sim/weak"]\nprovider = "gemini"\n')
    with pytest.raises(
        RegistryError, match=r"field 'provider' = 'gemini'; expected one of anthropic, openai"
    ):
        load_registry([bad_provider], env={})
    with pytest.raises(RegistryError, match=r"unknown model 'nope/x'.*sim/weak"):
        load_registry(env={}).get("nope/x")


def test_cost_pinned_to_the_digit():
    sonnet = Prices(Decimal(3), Decimal(15), Decimal("0.30"), Decimal("3.75"))
    # 123457*3 + 98765*15 + 4321*0.30 + 17*3.75 = 1853206.05 per million
    assert cost_of(Usage(123457, 98765, 4321, 17), sonnet) == Decimal("1.85320605")
    mini = Prices(Decimal("0.15"), Decimal("0.60"), Decimal("0.075"), Decimal("0.15"))
    # 1 uncached + 1 output + 3 cache reads: 0.15 + 0.60 + 0.225 = 0.975 per million
    assert cost_of(Usage(1, 1, 3, 0), mini) == Decimal("0.000000975")
    assert cost_of(Usage(), mini) == 0
    assert isinstance(cost_of(Usage(10, 10), mini), Decimal)
    assert str(cost_of(Usage(1_000_000, 0), sonnet)) == "3"


def test_worst_case_bounds_the_real_cost():
    reg = load_registry(env={})
    e = reg.get("anthropic/claude-sonnet-4")
    w = worst_case_cost(e, 1000, 500)
    # (1000 + 600 overhead) bytes at the dearest input price (cache write 3.75) + 500 * 15
    assert w == (Decimal(1600) * Decimal("3.75") + Decimal(500) * 15) / Decimal(10**6)
    assert w >= cost_of(Usage(400, 500, 600, 600), e.prices)
