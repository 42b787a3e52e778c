"""``evalkit export``: one decision point per session, in Inspect, promptfoo and plain-JSONL shapes."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from evalkit_core import nyse

START, END = "2023-03-01", "2023-03-10"
SESSIONS = [s.date.isoformat() for s in nyse().between(START, END)]
FIELDS = {"inspect": {"id", "input", "target", "metadata"}, "promptfoo": {"description", "vars", "metadata"},
          "lm-eval": {"id", "prompt", "metadata"}}
META = {"release", "bundle_content_digest", "arm", "clock", "session_date", "hold_sessions", "row_keys", "new_rows"}


def _export(cli, release_dir, out, *, arm="main", clock="pit", fmt="inspect", forms="8-K"):
    code, stdout, err = cli("export", "--bundle", release_dir, "--arm", arm, "--clock", clock, "--out", out,
                            "--format", fmt, "--forms", forms, "--start", START, "--end", END)
    assert (code, err) == (0, ""), err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert f"wrote {len(recs)} samples ({fmt})" in stdout
    return recs


def _prompt(rec, fmt):
    return {"inspect": rec.get("input"), "promptfoo": rec.get("vars", {}).get("prompt"), "lm-eval": rec.get("prompt")}[fmt]


def test_export_covers_every_session_of_the_requested_window(cli, synth_release_dir, tmp_path):
    """--start/--end name the sessions, as they do for `evalkit run`. No 8-K of this release is filed on 03-10,
    yet 03-10 is a session of the window, and under dump/pit the 8-Ks filed on 03-09 enter there."""
    recs = _export(cli, synth_release_dir, tmp_path / "s.jsonl", clock="dump")
    assert [r["metadata"]["session_date"] for r in recs] == SESSIONS


@pytest.mark.parametrize("fmt", ["inspect", "promptfoo", "lm-eval"])
def test_one_line_per_session_with_the_documented_fields(cli, synth_release_dir, tmp_path, fmt):
    recs = _export(cli, synth_release_dir, tmp_path / "s.jsonl", fmt=fmt)
    assert len(recs) >= len(SESSIONS) - 1
    for rec, day in zip(recs, SESSIONS, strict=False):
        assert set(rec) == FIELDS[fmt]
        assert set(rec["metadata"]) == META
        m = rec["metadata"]
        assert (m["arm"], m["clock"], m["session_date"]) == ("main", "pit", day)
        prompt = _prompt(rec, fmt)
        assert isinstance(prompt, str)
        assert f"Trading session {day}" in prompt
        for key in m["row_keys"]:
            assert key in prompt
        assert len(m["row_keys"]) == min(m["new_rows"], 50)
        ident = rec["id"] if fmt != "promptfoo" else rec["description"]
        assert ident.endswith(f"/main/pit/{day}")
    if fmt == "inspect":
        assert all(r["target"] == "" for r in recs)


def test_samples_hold_exactly_the_rows_entering_at_that_bell(cli, synth_release_dir, synth_release, tmp_path):
    from evalkit_core import entry_session

    recs = _export(cli, synth_release_dir, tmp_path / "s.jsonl", clock="dump")
    rows = synth_release.select(forms=["8-K"], start=START, end=END).arm("main")
    want: dict[str, set[str]] = {}
    for r in rows.iter_rows(named=True):
        want.setdefault(entry_session(r, "dump").date.isoformat(), set()).add(r["row_key"])
    for rec in recs:
        m = rec["metadata"]
        assert set(m["row_keys"]) == want.get(m["session_date"], set())
        assert m["new_rows"] == len(want.get(m["session_date"], set()))


def test_shifted_export_shows_shifted_dates_and_no_answer_key(
    cli, synth_release_dir, synth_release, answer_key, tmp_path
):
    from evalkit_core import nyse

    recs = _export(cli, synth_release_dir, tmp_path / "s.jsonl", arm="shifted", fmt="lm-eval", forms="8-K,10-Q")
    # Each session's image on the NYSE calendar a secret number of sessions away (a real session, over a year off).
    shifted = [synth_release.shift.session_date(dt.date.fromisoformat(d)).isoformat() for d in SESSIONS]
    assert all(nyse().session_on(dt.date.fromisoformat(d)) is not None for d in shifted)
    assert all(abs((dt.date.fromisoformat(d) - dt.date.fromisoformat(r)).days) > 365 for d, r in zip(shifted, SESSIONS, strict=True))
    assert [r["metadata"]["session_date"] for r in recs] == shifted[: len(recs)]
    assert all(r["id"].endswith(f"/shifted/pit/{r['metadata']['session_date']}") for r in recs)
    text = (tmp_path / "s.jsonl").read_text()
    assert not re.search(r"(?<![0-9A-Za-z])202[23](?![0-9A-Za-z])", re.sub(r"\br[0-9a-f]{20}\b", "", text).replace(
        '"bundle_content_digest":"sha256:', '"'))
    for rec in recs:
        for line in rec["prompt"].splitlines()[1:-1]:
            if line.startswith("{"):
                row = json.loads(line)
                assert row["entry_session"] == rec["metadata"]["session_date"]
                assert dt.date.fromisoformat(row["partition_date"]).year != 2023  # never a real year
                assert not {"issuer", "cik", "accession", "url", "ticker"} & set(row)
    _assert_no_answer_key(text, answer_key, identity=True)


@pytest.mark.parametrize("arm", ["main", "redacted"])
def test_no_answer_key_data_in_exports(cli, synth_release_dir, answer_key, tmp_path, arm):
    recs = _export(cli, synth_release_dir, tmp_path / "s.jsonl", arm=arm, forms="8-K,10-Q")
    text = (tmp_path / "s.jsonl").read_text()
    assert sum(len(r["metadata"]["row_keys"]) for r in recs) > 30
    _assert_no_answer_key(text, answer_key, identity=arm != "main")


def _assert_no_answer_key(text, answer_key, *, identity):
    assert '"ticker"' not in text
    assert '\\"ticker\\"' not in text
    assert "flags" not in text
    if identity:
        for truth in answer_key.values():
            assert truth["issuer"] not in text
            assert truth["accession"] not in text
            assert not re.search(rf"(?<!\d){truth['cik']}(?!\d)", re.sub(r"\br[0-9a-f]{20}\b", "", text).replace(
                "sha256:", "")) or truth["cik"] == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--arm", "sideways"], "arm"),
        (["--clock", "sundial"], "clock"),
        (["--format", "csv"], "format"),
        (["--forms", "NOPE"], "NOPE"),
        (["--start", "2020-01-01"], "outside"),
    ],
)
def test_export_user_errors_exit_2_and_write_nothing(cli, synth_release_dir, tmp_path, args, needle):
    out = tmp_path / "s.jsonl"
    code, _stdout, err = cli("export", "--bundle", synth_release_dir, "--out", out, *args)
    assert code == 2
    assert err.startswith("error: ")
    assert needle in err
    assert err.count("\n") == 1
    assert not out.exists()
