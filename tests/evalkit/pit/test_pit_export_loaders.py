"""``evalkit export`` files load where they claim to, offline:

- ``--format inspect``: through Inspect AI's own ``json_dataset`` (the extra ``evalkit-harness[inspect]``), and an Inspect
  eval runs over it (mockllm with custom outputs);
- ``--format lm-eval``: through ``datasets.load_dataset("json", ...)``, which is how lm-evaluation-harness reads a
  local JSONL task (``dataset_path: json`` with ``data_files``);
- ``--format promptfoo``: checked by FORMAT ONLY. promptfoo is a Node.js program installed from the npm registry;
  it is not on this machine or CI's and cannot be installed offline, so no test runs it. The check holds each
  line to promptfoo's test-case shape (``description`` text, ``vars`` of text values, ``metadata`` object, nothing
  else), which ``tests: file://samples.jsonl`` in a promptfoo config loads.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest

import machine  # pyright: ignore[reportImplicitRelativeImport]

START, END = "2023-03-01", "2023-03-10"


@pytest.fixture(autouse=True)
def _inspect_data_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inspect writes trace files under the user data directory: keep them out of the home directory."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


def _export(cli: Any, release_dir: Path, out: Path, fmt: str) -> list[dict[str, Any]]:
    code, _, err = cli("export", "--bundle", release_dir, "--arm", "shifted", "--clock", "pit", "--out", out,
                       "--format", fmt, "--forms", "8-K", "--start", START, "--end", END)
    assert (code, err) == (0, ""), err
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:Exception ignored in. <function MemoryObject:pytest.PytestUnraisableExceptionWarning")
def test_inspect_export_loads_with_json_dataset_and_runs(cli: Any, synth_release_dir: Path, tmp_path: Path) -> None:
    machine.need("inspect")
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import json_dataset
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    out = tmp_path / "samples.jsonl"
    recs = _export(cli, synth_release_dir, out, "inspect")
    dataset = json_dataset(str(out))
    samples = list(dataset)
    assert [s.id for s in samples] == [r["id"] for r in recs]
    assert [s.input for s in samples] == [r["input"] for r in recs]
    assert [s.metadata for s in samples] == [r["metadata"] for r in recs]
    assert all(s.target == "" for s in samples)
    assert len(samples) == 8  # the sessions 2023-03-01..03-10

    usage = ModelUsage(input_tokens=10, output_tokens=2, total_tokens=12)
    outputs = [ModelOutput.from_content("mockllm/model", "[]").model_copy(update={"usage": usage}) for _ in samples]
    logs = inspect_eval(
        Task(dataset=dataset, solver=generate(), scorer=includes()),
        model="mockllm/model",
        model_args={"custom_outputs": outputs},
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    gc.collect()
    assert logs[0].status == "success", logs[0].error
    assert logs[0].samples is not None
    assert sorted(str(s.id) for s in logs[0].samples) == sorted(r["id"] for r in recs)


def test_lm_eval_export_loads_with_datasets_load_dataset(cli: Any, synth_release_dir: Path, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "samples.jsonl"
    recs = _export(cli, synth_release_dir, out, "lm-eval")
    ds = datasets.load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert sorted(ds.column_names) == ["id", "metadata", "prompt"]
    assert ds.num_rows == len(recs) == 8
    assert ds["id"] == [r["id"] for r in recs]
    assert ds["prompt"] == [r["prompt"] for r in recs]
    assert [m["row_keys"] for m in ds["metadata"]] == [r["metadata"]["row_keys"] for r in recs]
    # datasets (pyarrow's JSON reader) reads the ISO session date as a timestamp: the same day
    assert [m["session_date"].date().isoformat() for m in ds["metadata"]] == [
        r["metadata"]["session_date"] for r in recs
    ]


PROMPTFOO_TEST_CASE_KEYS = {  # promptfoo's test case: what a tests file may hold
    "description", "vars", "assert", "options", "metadata", "threshold", "provider", "providers", "providerOutput",
}


def test_promptfoo_export_has_promptfoo_test_case_shape(cli: Any, synth_release_dir: Path, tmp_path: Path) -> None:
    """Format check only: promptfoo itself (npm) is not installable offline."""
    out = tmp_path / "samples.jsonl"
    recs = _export(cli, synth_release_dir, out, "promptfoo")
    assert len(recs) == 8
    for rec in recs:
        assert set(rec) <= PROMPTFOO_TEST_CASE_KEYS
        assert isinstance(rec["description"], str)
        assert rec["description"]
        assert isinstance(rec["vars"], dict)
        assert set(rec["vars"]) == {"prompt"}  # the promptfoo prompt is "{{prompt}}"
        assert all(isinstance(v, str) for v in rec["vars"].values())
        assert isinstance(rec["metadata"], dict)
    # one JSON object a line, nothing else: what promptfoo's JSONL tests loader reads
    lines = out.read_text().splitlines()
    assert all(line.startswith("{") and line.endswith("}") for line in lines)
