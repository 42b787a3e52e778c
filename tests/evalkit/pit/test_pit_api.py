"""The documented Python integration path, RunConfig's JSON round trip and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from evalkit.pit import RunConfig, load_config, run, stub_agent
from evalkit_core import ConfigError, EvalkitError, Release, read_receipt

RUN_START, RUN_END = "2023-03-01", "2023-03-10"


def test_issue_snippet_runs_in_exactly_that_shape(synth_release_dir, synth_prices_path, in_tmp, capsys):
    release_path, prices_path = str(synth_release_dir), str(synth_prices_path)
    # --- the issue's snippet, with only the two paths filled in ---
    from pit_harness import Bundle, RunConfig, load_prices, run
    from pit_harness.adapters.plain import from_callable
    bundle = Bundle.load(release_path, forms=["8-K"], start="2023-03-01", end="2023-03-10")
    prices = load_prices(prices_path, source="your vendor", pulled_at="2026-08-27")
    def my_agent(prompt, tools):
        return [r["row_key"] for r in tools.pit_list(limit=20)["rows"]]
    result = run(from_callable(my_agent),
                 RunConfig(bundle_path=bundle.root, forms=("8-K",), start="2023-03-01", end="2023-03-10",
                           trajectory_path="trajectory.jsonl", receipt_path="receipt.json"),
                 bundle, prices)
    print(result.receipt["body_sha256"], result.total_return("main", "pit"))
    # --- end of snippet ---
    out = capsys.readouterr().out.split()
    assert out[0] == result.receipt["body_sha256"]
    assert out[0].startswith("sha256:")
    assert len(out[0]) == 7 + 64
    total = result.total_return("main", "pit")
    assert isinstance(total, float)
    assert out[1] == repr(total)
    assert (in_tmp / "trajectory.jsonl").is_file()
    assert read_receipt(in_tmp / "receipt.json") == result.receipt
    body = result.receipt["body"]
    assert body["valid"] is True
    assert body["completed"] is True
    assert len(body["cells"]) == 9
    assert body["prices"] == {"source": "your vendor", "pulled_at": "2026-08-27", "sha256": body["binding"]["prices_sha256"]}
    main_pit = result.cell("main", "pit")
    assert main_pit["trades"] > 0
    assert main_pit["scored_trades"] > 0
    assert set(main_pit["trades_by_form"]) == {"8-K"}


def test_without_prices_every_cell_runs_and_total_return_is_none(synth_release_dir, in_tmp):
    cfg = RunConfig(bundle_path=synth_release_dir, forms=("8-K",), start=RUN_START, end=RUN_END)
    result = run(stub_agent, cfg)
    body = result.body
    assert body["valid"] is True
    assert body["prices"] is None
    assert body["binding"]["prices_sha256"] is None
    assert [(c["arm"], c["clock"]) for c in body["cells"]] == [
        (a, c) for a in ("main", "redacted", "shifted") for c in ("leaky", "dump", "pit")
    ]
    for c in body["cells"]:
        # 2023-03-01..03-10 holds 8 NYSE sessions; a served shifted cell runs the hidden days around them too
        assert c["agent_calls"] == c["sessions"] == (8 if c["arm"] != "shifted" else 8 + 26)
        assert c["total_return"] is None
        assert c["scored_trades"] == 0
        assert c["unpriced_trades"] == c["trades"] > 0
        assert result.total_return(c["arm"], c["clock"]) is None
    assert all(v == {"main_minus_shifted": None, "main_minus_redacted": None} for v in body["contamination"].values())
    # Declared nothing: both protocol gaps are listed and window_ends_before_cutoff is unknown.
    assert body["protocol_gaps"] == ["P1_model_version", "P2_training_cutoffs"]
    assert body["protocol_complete"] is False
    assert body["window_ends_before_cutoff"] is None
    # the published shape: an integer version, the harness's public name, the design's policy vocabulary
    assert body["receipt_version"] == 4  # both masked arms served (the default)
    assert isinstance(body["receipt_version"], int)
    assert body["harness"]["name"] == "pit-harness"
    assert body["network"]["policy"] == "fail_closed"
    assert set(body["network"]) == {"guard", "policy", "clean", "egress_attempts", "attempts", "scope"}
    # the schema holds the shape: another version, a version as text, another name or vocabulary is refused
    import jsonschema

    from evalkit.pit import receipt_schema

    validator = jsonschema.Draft202012Validator(receipt_schema())
    assert not list(validator.iter_errors(body))
    for path, value in ((("receipt_version",), "2"), (("receipt_version",), True), (("receipt_version",), 1),
                        (("receipt_version",), "evalkit-pit-receipt/3"), (("harness", "name"), "evalkit-pit"),
                        (("network", "policy"), "abort")):
        changed = json.loads(json.dumps(body))
        *parents, last = path
        target = changed
        for p in parents:
            target = target[p]
        target[last] = value
        assert list(validator.iter_errors(changed)), (path, value)


def test_declared_cutoff_after_window_end_is_flagged(synth_release_dir, in_tmp):
    cfg = RunConfig(
        bundle_path=synth_release_dir, forms=("8-K",), start=RUN_START, end=RUN_END, arms=("main",), clocks=("pit",),
        model_version="m-2024-01", training_cutoff="2023-06-30", probe_items=0,
    )
    body = run(stub_agent, cfg).body
    assert body["protocol_gaps"] == []
    assert body["protocol_complete"] is True
    assert body["window_ends_before_cutoff"] is True
    assert body["protocol"]["P2_training_cutoff"]["window_ends_before_cutoff"] is True
    assert body["protocol"]["P1_model_version"]["declared"] == "m-2024-01"
    cfg2 = RunConfig(**{**cfg.to_json(), "training_cutoff": "2023-01-31"})
    assert run(stub_agent, cfg2).body["window_ends_before_cutoff"] is False


def test_only_requested_arms_and_clocks_run(synth_release_dir, in_tmp):
    cfg = RunConfig(bundle_path=synth_release_dir, forms=("8-K",), start=RUN_START, end=RUN_END,
                    arms=("redacted", "main"), clocks=("pit",))
    body = run(stub_agent, cfg).body
    # Cells run in the canonical arm order whatever order the config lists them in.
    assert [(c["arm"], c["clock"]) for c in body["cells"]] == [("main", "pit"), ("redacted", "pit")]
    assert body["probe"]["verdict"] == "not_run"


# --- RunConfig --------------------------------------------------------------------------------------------------


def _full_config() -> RunConfig:
    return RunConfig(
        bundle_path="rel", forms=("8-K", "10-Q"), start="2023-03-01", end="2023-03-10", arms=("main", "shifted"),
        clocks=("pit", "dump"), hold_sessions=3, agent="mymod:agent", probe_items=4, network_policy="continue",
        model_version="m1", training_cutoff="2023-01-01", prices_path="p.csv", price_source="vendor",
        prices_pulled_at="2026-01-02", trajectory_path="t.jsonl", receipt_path="r.json",
    )


def test_runconfig_json_round_trip(tmp_path):
    cfg = _full_config()
    assert RunConfig.from_json(cfg.to_json()) == cfg
    assert RunConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    cfg.dump(tmp_path / "run.json")
    # A config file's relative inputs resolve against its own directory (outputs stay where the run starts).
    loaded = load_config(tmp_path / "run.json")
    assert loaded == attrs.evolve(cfg, bundle_path=str(tmp_path / "rel"), prices_path=str(tmp_path / "p.csv"))
    assert loaded.digest() == cfg.digest()
    assert set(cfg.to_json()) == {
        "bundle_path", "forms", "start", "end", "arms", "clocks", "hold_sessions", "agent", "probe_items",
        "network_policy", "model_version", "training_cutoff", "training_cutoff_source", "prices_path", "price_source", "prices_pulled_at",
        "mask_decoys", "mask_redacted", "trajectory_path", "receipt_path",
    }


def test_runconfig_defaults():
    cfg = RunConfig(bundle_path="x")
    assert cfg.arms == ("main", "redacted", "shifted")
    assert cfg.clocks == ("leaky", "dump", "pit")
    assert (cfg.hold_sessions, cfg.agent, cfg.probe_items, cfg.network_policy) == (5, "stub", 10, "abort")


def test_the_receipts_policy_names_are_accepted_in_a_config():
    for design, config in (("fail_closed", "abort"), ("record_and_continue", "continue")):
        named = RunConfig(**{**_full_config().to_json(), "network_policy": design})
        assert named.network_policy == config
        assert named == RunConfig(**{**_full_config().to_json(), "network_policy": config})
        assert named.digest() == RunConfig(**{**_full_config().to_json(), "network_policy": config}).digest()


def test_config_digest_ignores_locations_only():
    cfg = _full_config()
    moved = RunConfig(**{**cfg.to_json(), "bundle_path": "/elsewhere", "trajectory_path": "x/t.jsonl",
                         "receipt_path": "x/r.json", "prices_path": "/else/p.csv"})
    assert moved.digest() == cfg.digest()
    for field, value in (("hold_sessions", 4), ("agent", "stub"), ("forms", ["8-K"]), ("network_policy", "abort"),
                         ("probe_items", 5), ("model_version", "m2"), ("end", "2023-03-09")):
        changed = RunConfig(**{**cfg.to_json(), field: value})
        assert changed.digest() != cfg.digest(), field


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"arms": ["main", "sideways"]}, "arms"),
        ({"clocks": ["pit", "sundial"]}, "clocks"),
        ({"hold_sessions": "5"}, "hold_sessions"),
        ({"hold_sessions": 0}, "hold_sessions"),
        ({"probe_items": -1}, "probe_items"),
        ({"network_policy": "allow"}, "network_policy"),
        ({"start": "2023-13-01"}, "start"),
        ({"end": "March 10"}, "end"),
        ({"training_cutoff": "soon"}, "training_cutoff"),
        ({"forms": 8}, "forms"),
        ({"prices_path": "p.csv"}, "price_source"),
        ({"colour": "red"}, "colour"),
        ({"agent": 5}, "agent"),
        ({"agent": None}, "agent"),
        ({"agent": ""}, "agent"),
    ],
)
def test_malformed_config_names_the_field(tmp_path, patch, field):
    data = {"bundle_path": "rel", **patch}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert field in msg
    assert "\n" not in msg


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ConfigError, match="JSON object"):
        load_config(tmp_path / "list.json")
    (tmp_path / "nobundle.json").write_text("{}")
    with pytest.raises(ConfigError, match="bundle_path"):
        load_config(tmp_path / "nobundle.json")


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"forms": ("8-K", "NOPE")}, "NOPE"),
        ({"start": "2022-12-01", "end": "2023-01-10"}, "outside"),
        ({"start": "2023-03-10", "end": "2023-03-01"}, "after"),
        ({"start": "2023-03-04", "end": "2023-03-05"}, "no NYSE session"),
    ],
)
def test_release_dependent_errors_write_nothing(synth_release_dir, in_tmp, patch, needle):
    cfg = RunConfig(**{"bundle_path": str(synth_release_dir), "start": RUN_START, "end": RUN_END, **patch})
    with pytest.raises(EvalkitError, match=needle):
        run(stub_agent, cfg)
    assert not (in_tmp / "receipt.json").exists()
    assert not (in_tmp / "trajectory.jsonl").exists()
    assert list(in_tmp.iterdir()) == []


def test_run_with_prices_path_in_config_loads_them(synth_release_dir, synth_prices_path, in_tmp):
    cfg = RunConfig(bundle_path=synth_release_dir, forms=("8-K",), start=RUN_START, end=RUN_END, arms=("main",),
                    clocks=("pit",), prices_path=str(synth_prices_path), price_source="synthetic", probe_items=0)
    body = run(stub_agent, cfg, Release.load(synth_release_dir)).body
    assert body["prices"]["source"] == "synthetic"
    assert isinstance(body["cells"][0]["total_return"], float)
    assert Path(cfg.receipt_path).is_file()
