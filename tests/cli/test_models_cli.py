"""``evalkit models list``, ``evalkit budget show|set`` and ``evalkit calls list``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from decimal import Decimal

from typer.testing import CliRunner

from evalkit_cli._app import app
from evalkit_core.models import ModelClient, Request, SimContext

runner = CliRunner()


def _invoke(*args: str, home=None):
    env = {"EVALKIT_HOME": str(home)} if home is not None else None
    result = runner.invoke(app, list(args), env=env)
    return result


def test_models_list_labels_sims_and_prices():
    r = _invoke("models", "list")
    assert r.exit_code == 0, r.output
    assert "as of 2025-06-01" in r.output
    assert "check them" in r.output
    sim_lines = [line for line in r.output.splitlines() if line.startswith("sim/")]
    assert len(sim_lines) == 3
    assert all("SIMULATED" in line for line in sim_lines)
    sonnet = next(line for line in r.output.splitlines() if line.startswith("anthropic/claude-sonnet-4"))
    assert "3.00" in sonnet
    assert "15.00" in sonnet
    assert "0.30" in sonnet
    assert "3.75" in sonnet
    assert not any("SIMULATED" in line for line in r.output.splitlines() if line.startswith("openai/"))


def test_models_list_json_with_user_registry(tmp_path):
    user = tmp_path / "r.toml"
    user.write_text('[models."openai/gpt-4o"]\nprices = { input = "2.75" }\n')
    r = _invoke("models", "list", "--json", "--registry", str(user))
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    models = {m["id"]: m for m in data["models"]}
    assert models["openai/gpt-4o"]["prices"]["input"] == "2.75"
    assert models["sim/strong"]["simulated"] is True
    assert data["sources"][-1] == str(user)
    assert data["prices_unit"] == "USD per million tokens"


def test_budget_set_show_and_calls_list(tmp_path):
    home = tmp_path / "home"
    r = _invoke("budget", "show", "--json", home=home)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["cap"] is None
    r = _invoke("budget", "set", "0.50", "--json", home=home)
    assert json.loads(r.stdout)["cap"] == "0.5"

    async def spend():
        async with ModelClient(home=home, env={}) as c:
            req = Request.of("t", sim_context=SimContext(reference="def f():\n    return 1\n"))
            return [await c.complete("sim/weak", req) for _ in range(3)]

    done = asyncio.run(spend())
    total = sum(c.cost for c in done)
    r = _invoke("budget", "show", "--json", home=home)
    data = json.loads(r.stdout)
    assert data["spent"] == str(total)
    assert data["remaining"] == str(Decimal("0.5") - total)
    r = _invoke("budget", "show", home=home)
    assert "cap        $0.5" in r.output

    r = _invoke("calls", "list", home=home)
    assert r.exit_code == 0, r.output
    lines = [line for line in r.output.splitlines() if "sim/weak" in line]
    assert len(lines) == 3
    assert all("[SIMULATED]" in line and " ok " in line for line in lines)
    r = _invoke("calls", "list", "--json", "--since", "1h", home=home)
    assert [c["call_id"] for c in json.loads(r.stdout)] == [c.call_id for c in done]
    r = _invoke("calls", "list", "--json", "--since", "2999-01-01", home=home)
    assert json.loads(r.stdout) == []
    r = _invoke("calls", "list", "--limit", "1", "--json", home=home)
    assert [c["call_id"] for c in json.loads(r.stdout)] == [done[-1].call_id]


def test_user_errors_exit_2_with_one_line(tmp_path):
    env = {"EVALKIT_HOME": str(tmp_path / "home"), "PATH": ""}
    for args, needle in (
        (["budget", "set", "lots"], "budget cap: expected a decimal amount"),
        (["calls", "list", "--since", "last tuesday"], "--since: expected an ISO date"),
        (["models", "list", "--registry", str(tmp_path / "missing.toml")], "registry file not found"),
    ):
        p = subprocess.run(
            [sys.executable, "-m", "evalkit_cli", *args], capture_output=True, text=True, env=env, check=False
        )
        assert p.returncode == 2, (args, p.stderr)
        assert needle in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1


def _dead_call(home, call_id: str = "c1", amount: str = "0.75") -> None:
    """A call whose process reserved its worst case and died (a real process that exits without settling)."""
    code = (
        "import sys, os\nfrom decimal import Decimal\nfrom evalkit_core.store import Store, utc_now\n"
        "from evalkit_core.models._budget import try_reserve\ns = Store.open(sys.argv[1])\n"
        "with s.transaction() as db:\n"
        "    db.execute(\"INSERT OR IGNORE INTO registries VALUES ('sha256:r', '{}', 'x')\")\n"
        '    db.execute("INSERT INTO model_calls (call_id, started_at, model_id, provider, api_model, simulated, status,'
        " attempts, request_digest, registry_digest, charged, owner_id) VALUES (?, ?, 'm', 'openai', 'm', 0,"
        " 'pending', 0, 'd', 'sha256:r', '0', ?)\", (sys.argv[2], utc_now(), s.owner_id))\n"
        "    try_reserve(db, call_id=sys.argv[2], model_id='m', amount=Decimal(sys.argv[3]), now=utc_now(),"
        " owner_id=s.owner_id)\nos._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(home), call_id, amount], check=True, timeout=60)


def test_budget_reconcile_charges_dead_calls_and_settles_them_from_an_invoice(tmp_path):
    home = tmp_path / "home"
    _dead_call(home)
    shown = _invoke("budget", "show", home=home)
    assert shown.exit_code == 0, shown.output
    assert "unknown    1 call(s) whose process died" in shown.output
    assert "call c1  m  $0.75  outcome unknown" in shown.output
    listed = _invoke("calls", "list", home=home)
    assert "unknown" in listed.output
    assert "process died in flight: charged at worst case" in listed.output
    r = _invoke("budget", "reconcile", home=home)
    assert "nothing to reconcile" in r.output  # `budget show` did it already
    invoice = tmp_path / "invoice.csv"
    invoice.write_text("call_id,cost_usd\nc1,0.02\n")
    r = _invoke("budget", "reconcile", "--actual", str(invoice), "--json", home=home)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["spent"] == "0.02"
    assert [u["call_id"] for u in data["settled_from_invoice"]] == ["c1"]
    env = {"EVALKIT_HOME": str(home), "PATH": ""}
    again = subprocess.run(
        [sys.executable, "-m", "evalkit_cli", "budget", "reconcile", "--actual", str(invoice)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1
    assert f"{invoice}: line 2: call c1: already settled from" in again.stderr
