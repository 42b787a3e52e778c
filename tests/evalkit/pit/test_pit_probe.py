"""The mask-leak probe: answer scoring, item choice, and verdicts for an honest stub and a cheating agent."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from evalkit.pit import RunConfig, choose_items, from_callable, run, score_answer, stub_agent
from evalkit_core import ANSWER_KEY_FILE, Release

TRUTH = {"issuer": "APPLE INC", "ticker": "AAPL", "cik": "0000320193", "partition_date": dt.date(2023, 3, 10)}


@pytest.mark.parametrize(
    "text",
    [
        "It was filed on 2023-03-10.",
        "March 10, 2023 by someone",
        "march 10 2023",
        "Mar 10 2023",
        "Mar. 10, 2023",
        "10 March 2023",
        "the 10th of March, 2023",
        "03/10/2023",
        "3/10/2023",
        "2023/03/10",
        "20230310",
    ],
)
def test_full_date_renderings_are_date_recovered(text):
    s = score_answer(text, TRUTH)
    assert s["date_recovered"] is True
    assert s["year_only"] is False
    assert s["issuer_recovered"] is False


@pytest.mark.parametrize(
    "text",
    [
        "Sometime in 2023, I think.",
        "2023",
        "March 2023",
        "2023-03",
        "March 11, 2023",  # a different day
        "2023-03-11",
        "03/10/2022",  # a different year... but 2023 is not there
    ],
)
def test_partial_or_wrong_dates_are_not_date_recovered(text):
    s = score_answer(text, TRUTH)
    assert s["date_recovered"] is False
    assert s["year_only"] is ("2023" in text)


def test_bare_year_is_year_only_and_not_a_leak():
    s = score_answer("It was in 2023.", TRUTH)
    assert s == {"date_recovered": False, "year_only": True, "issuer_recovered": False, "issuer_matched_by": []}
    assert score_answer("in 20231", TRUTH)["year_only"] is False  # not the year as a word


def test_shifted_date_is_not_the_real_date():
    s = score_answer("Filed 2033-03-10 by [ISSUER].", TRUTH)
    assert s["date_recovered"] is False
    assert s["year_only"] is False
    assert s["issuer_recovered"] is False


@pytest.mark.parametrize(
    ("text", "by"),
    [
        ("Apple", ["name"]),
        ("I believe it is Apple.", ["name"]),
        ("APPLE INC", ["name"]),
        ("Apple Inc.", ["name"]),
        ("apple, incorporated", ["name"]),
        ("ticker AAPL", ["ticker"]),
        ("(AAPL)", ["ticker"]),
        ("CIK 320193", ["cik"]),
        ("CIK 0000320193", ["cik"]),
        ("Apple (AAPL, CIK 320193)", ["name", "ticker", "cik"]),
    ],
)
def test_issuer_recovered(text, by):
    s = score_answer(text, TRUTH)
    assert s["issuer_recovered"] is True
    assert s["issuer_matched_by"] == by


@pytest.mark.parametrize(
    "text",
    [
        "Pineapple Holdings",  # the name only inside another word
        "AAPLX fund",  # the ticker as part of another word
        "XAAPL",
        "aapl",  # tickers are upper-case symbols
        "CIK 3201930",
        "CIK 1320193",
        "A company in the fruit business",
        "",
    ],
)
def test_issuer_not_recovered(text):
    assert score_answer(text, TRUTH)["issuer_recovered"] is False


def test_multi_word_names_and_suffixes():
    truth = {"issuer": "ACME ENERGY HOLDINGS INC", "ticker": None, "cik": "1234567", "partition_date": "2023-01-05"}
    assert score_answer("Acme Energy Holdings", truth)["issuer_recovered"] is True
    assert score_answer("acme energy holdings, inc.", truth)["issuer_recovered"] is True
    assert score_answer("Acme Energy", truth)["issuer_recovered"] is False
    assert score_answer("January 5, 2023", truth)["date_recovered"] is True
    assert score_answer("01/05/2023", truth)["date_recovered"] is True
    amp = {"issuer": "AT&T INC", "ticker": "T", "cik": "732717", "partition_date": "2023-01-05"}
    assert "name" in score_answer("AT&T", amp)["issuer_matched_by"]
    assert score_answer("AT and T", amp)["issuer_recovered"] is True
    assert score_answer("It is T.", amp)["issuer_matched_by"] == ["ticker"]
    assert score_answer("Tuesday", amp)["issuer_recovered"] is False


@pytest.mark.parametrize(
    ("n", "k", "want"),
    [
        (0, 10, []),
        (5, 0, []),
        (5, 10, [0, 1, 2, 3, 4]),
        (10, 10, list(range(10))),
        (25, 10, [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]),
        (100, 10, [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]),
        (7, 3, [0, 2, 4]),
    ],
)
def test_item_choice_is_the_documented_stride(n, k, want):
    served = [f"k{i}" for i in range(n)]
    assert choose_items(served, k) == [f"k{i}" for i in want]


def _cfg(release_dir, **kw) -> RunConfig:
    base = {"bundle_path": str(release_dir), "forms": ("8-K",), "start": "2023-03-01", "end": "2023-03-10"}
    return RunConfig(**{**base, **kw})


def test_stub_holds_the_mask(synth_release_dir, in_tmp, events_of):
    result = run(stub_agent, _cfg(synth_release_dir))
    probe = result.body["probe"]
    assert probe["verdict"] == "mask_holds"
    assert probe["items_asked"] == 10 == len(probe["items"])
    assert probe["date_recovered"] == probe["issuer_recovered"] == probe["year_only"] == 0
    assert "stride" in probe["stride_rule"]
    # Items follow the documented stride over the rows served in shifted-arm answers, first-served order.
    served: list[str] = []
    events = events_of(result.trajectory_path)
    for e in events:
        if e["type"] == "tool_call" and e.get("arm") == "shifted" and "probe_item" not in e:
            for r in e["result"].get("rows", []) if isinstance(e["result"].get("rows"), list) else []:
                if r["row_key"] not in served:
                    served.append(r["row_key"])
            if "row" in e["result"] and e["result"]["row"]["row_key"] not in served:
                served.append(e["result"]["row"]["row_key"])
    # only real rows count (the masks are served by default: decoys have no answer, so the probe never asks one)
    real = set(Release.load(synth_release_dir).answer_key.get_column("row_key").to_list())
    served = [k for k in served if k in real]
    assert probe["rows_served_in_shifted_arm"] == len(served)
    assert [i["row_key"] for i in probe["items"]] == choose_items(served, 10)
    items = [e for e in events if e["type"] == "probe_item"]
    assert [i["row_key"] for i in items] == [i["row_key"] for i in probe["items"]]
    for item in probe["items"]:
        assert set(item) >= {"item", "row_key", "answer", "date_recovered", "year_only", "issuer_recovered"}
        assert item["answer"].startswith("I am the evalkit stub agent")
    # The probe prompts show the shifted row only: no real year, no issuer.
    prompts = [e["prompt"] for e in events if e["type"] == "agent_call" and "probe_item" in e]
    assert len(prompts) == 10
    for p in prompts:
        assert "2023-" not in p
        assert "[ISSUER]" in p


def test_cheating_agent_that_reads_the_answer_key_leaks_the_mask(synth_release_dir, in_tmp):
    key = {}
    for line in (synth_release_dir / ANSWER_KEY_FILE).read_text().splitlines():
        row = json.loads(line)
        key[row["row_key"]] = row

    def cheat(prompt, tools):
        if "real filing date" not in prompt:
            return stub_agent(prompt, tools)
        row_key = next(line.split(":", 1)[1].strip() for line in prompt.splitlines() if line.strip().startswith("row_key:"))
        truth = key[row_key]
        d = dt.date.fromisoformat(truth["partition_date"])
        return f"That was {truth['issuer']}, filed {d.strftime('%B %d, %Y')}."

    result = run(from_callable(cheat, name="cheat"), _cfg(synth_release_dir))
    probe = result.body["probe"]
    assert probe["verdict"] == "mask_leaks"
    assert probe["items_asked"] == 10
    assert probe["date_recovered"] == 10
    assert probe["issuer_recovered"] == 10
    assert all(i["issuer_matched_by"] == ["name"] for i in probe["items"])
    # A leak is a finding, not an invalid run.
    assert result.body["valid"] is True


def test_year_only_answers_do_not_flip_the_verdict(synth_release_dir, in_tmp):
    def vague(prompt, tools):
        if "real filing date" in prompt:
            return "Probably 2023."
        tools.pit_list(limit=5)
        return []

    result = run(from_callable(vague), _cfg(synth_release_dir, probe_items=4))
    probe = result.body["probe"]
    assert probe["verdict"] == "mask_holds"
    assert probe["year_only"] == 4
    assert probe["items_asked"] == 4


def test_probe_not_run_without_shifted_rows_served(synth_release_dir, in_tmp):
    result = run(from_callable(lambda p, t: []), _cfg(synth_release_dir))
    probe = result.body["probe"]
    assert probe["verdict"] == "not_run"
    assert probe["items"] == []
    assert "served" in probe["reason"]
    result = run(stub_agent, _cfg(synth_release_dir, probe_items=0))
    assert result.body["probe"]["verdict"] == "not_run"
