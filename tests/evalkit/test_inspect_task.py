"""The task bank as an Inspect AI task (``evalkit.inspect_tasks``), graded by evalkit's sandboxed verifiers, offline.

The model is Inspect's ``mockllm/model`` with custom outputs (each carries its usage: without it mockllm counts
tokens with tiktoken, which downloads its encoding). The task is found by name, as ``inspect eval
evalkit/verifier_tasks`` finds it (evalkit's ``inspect_ai`` entry point).
"""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path

import pytest

import machine  # pyright: ignore[reportImplicitRelativeImport]

pytest.importorskip("inspect_ai", reason=machine.importorskip_reason("inspect"))

from inspect_ai import eval as inspect_eval
from inspect_ai.model import ModelOutput, ModelUsage

from evalkit.inspect_tasks import evalkit_inspect_task
from evalkit_core import ConfigError

# Inspect's retry passes tenacity an argument tenacity now deprecates, and Inspect's eval loop leaves anyio memory
# streams for the collector to close: not ours to fix, and not failures of the code under test
pytestmark = [
    pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function MemoryObject:pytest.PytestUnraisableExceptionWarning"
    ),
]

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"
HIDDEN_ARG = "sesame-hidden-arg-7f31"
HIDDEN_EXPECTED = "label-for-" + HIDDEN_ARG
CANARY = {
    "family": "code",
    "description": "Return the label for a code word.",
    "entry_point": "label",
    "signature": "def label(word: str) -> str:",
    "arg_types": ["str"],
    "return_type": "str",
    "public_tests": [{"args": ["open"], "expected": "label-for-open"}],
    "hidden_tests": [{"args": [HIDDEN_ARG], "expected": HIDDEN_EXPECTED}],
}


@pytest.fixture(autouse=True)
def _inspect_data_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inspect writes trace files under the user data directory: keep them out of the home directory."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    """Three tasks: a canary whose hidden test is distinctive, the fixture `double`, and the fixture `person`."""
    root = tmp_path / "bank"
    (root / "code/canary/001").mkdir(parents=True)
    (root / "code/canary/001/task.json").write_text(json.dumps(CANARY))
    (root / "code/canary/001/reference.py").write_text('def label(word: str) -> str:\n    return "label-for-" + word\n')
    shutil.copytree(FIXTURES / "code/double", root / "code/double")
    shutil.copytree(FIXTURES / "structured/person", root / "structured/person")
    return root


def _out(text: str) -> ModelOutput:
    out = ModelOutput.from_content("mockllm/model", text)
    return out.model_copy(update={"usage": ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)})


def test_inspect_eval_grades_with_the_sandboxed_verifiers(bank: Path, tmp_path: Path) -> None:
    outputs = [  # in sample order (id order; one sample at a time)
        _out("Here:\n```python\ndef label(word: str) -> str:\n    return 'label-for-' + word\n```"),
        # fits the public tests only: a gap the hidden tests catch
        _out("```python\ndef double(n: int) -> int:\n    return {1: 2, 0: 0, 21: 42}[n]\n```"),
        _out('{"name": "Ada Lovelace", "born": "1815-12-10", "city": "London", "topics": ["Analytical Engine"], '
             '"height_m": 1.65}'),
    ]
    logs = inspect_eval(
        "evalkit/verifier_tasks",
        task_args={"bank": str(bank)},
        model="mockllm/model",
        model_args={"custom_outputs": outputs},
        log_dir=str(tmp_path / "logs"),
        log_format="json",
        max_samples=1,
        display="none",
    )
    gc.collect()  # Inspect's leftover streams are closed here, under this test's filters, not in a later test
    log = logs[0]
    assert log.status == "success", log.error
    assert log.results is not None
    metrics = {s.name: {k: m.value for k, m in s.metrics.items()} for s in log.results.scores}
    assert metrics["public"]["mean"] == 1.0
    assert metrics["hidden"]["mean"] == pytest.approx(2 / 3)
    assert log.samples is not None
    by_id = {str(s.id): s for s in log.samples}
    assert sorted(by_id) == ["code/canary/001", "code/double/001", "structured/person/001"]
    scores = {i: next(iter(s.scores.values())) for i, s in by_id.items() if s.scores}
    assert {i: sc.value for i, sc in scores.items()} == {
        "code/canary/001": {"public": 1.0, "hidden": 1.0},
        "code/double/001": {"public": 1.0, "hidden": 0.0},
        "structured/person/001": {"public": 1.0, "hidden": 1.0},
    }
    double = scores["code/double/001"].metadata["verdict"]  # type: ignore[index]
    assert double["public"]["passed"] == 3
    assert (double["hidden"]["passed"], double["hidden"]["total"]) == (0, 3)
    assert [t["reason"] for t in double["hidden"]["tests"]] == ["exception"] * 3
    assert double["isolation"] != "none needed"  # the candidate's code ran behind the sandbox's wall
    # the hidden test's input and expected value are nowhere in what Inspect wrote (prompt, target, scores)
    written = "".join(p.read_text() for p in (tmp_path / "logs").glob("*.json"))
    assert written
    assert "label-for-open" in written  # the public test is in the prompt
    assert HIDDEN_ARG not in written
    assert HIDDEN_EXPECTED not in written
    assert "246913578" not in written  # a hidden expected value of `double`


def test_the_task_selects_by_family_and_ids_and_refuses_unknown_ones(bank: Path) -> None:
    code = evalkit_inspect_task(bank, family="code")
    assert [s.id for s in code.dataset] == ["code/canary/001", "code/double/001"]
    one = evalkit_inspect_task(bank, ids=["structured/person/001"])
    sample = next(iter(one.dataset))
    assert sample.target == ""
    assert sample.metadata is not None
    assert (sample.metadata["task_id"], sample.metadata["family"]) == ("structured/person/001", "structured")
    assert sample.metadata["task_digest"].startswith("sha256:")
    assert "1815-12-10" not in str(sample.input)  # a hidden assertion's value
    with pytest.raises(ConfigError, match="family"):
        evalkit_inspect_task(bank, family="poetry")
    with pytest.raises(ConfigError, match="code/nope/001"):
        evalkit_inspect_task(bank, ids=["code/nope/001"])


def test_the_mock_without_usage_is_counted_offline_and_no_other_model_is_touched(
    bank: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`inspect eval evalkit/verifier_tasks --model mockllm/model` with the mock's default answers: tiktoken would
    download its encoding to count them; the task's default solver gives the mock an offline count instead. The
    tiktoken cache is an empty directory of the test's own, and the conftest guard fails any outside connection."""
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    logs = inspect_eval("evalkit/verifier_tasks", task_args={"bank": str(bank)}, model="mockllm/model",
                        log_dir=str(tmp_path / "logs"), display="none")  # fmt: skip
    log = logs[0]
    assert log.status == "success", log.error
    assert log.samples is not None and len(log.samples) == 3
    for sample in log.samples:
        usage = sample.output.usage
        assert usage is not None
        text = sample.output.completion
        assert usage.output_tokens == len(text)  # the mock's own count of its answer, in characters
        assert 0 < usage.input_tokens < len(str(sample.input)) // 2  # about four characters a token
    assert list(cache.iterdir()) == []  # nothing was downloaded into it (and nothing could have been)
    assert {s.name: s.metrics["mean"].value for s in log.results.scores} == {"public": 0.0, "hidden": 0.0}  # type: ignore[union-attr]
    # the count is the mock's alone: the class, and so every other model instance, keeps Inspect's own
    from inspect_ai.model._model import ModelAPI
    from inspect_ai.model._providers.mockllm import MockLLM

    assert "count_text_tokens" not in vars(MockLLM)
    assert ModelAPI.count_text_tokens.__module__ == "inspect_ai.model._model"
