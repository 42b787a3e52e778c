"""The task format: type grammar, loader, schema, digests, and prompts that never show hidden tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalkit import (
    CallTest,
    CheckTest,
    CodeTask,
    StructuredTask,
    TaskError,
    TypeSpec,
    bank_digest,
    conforms,
    load_task,
    load_tasks,
    parse_type,
    render_prompt,
    task_schema,
    validate_task_json,
)

BANK = Path(__file__).parent / "fixtures" / "tasks"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("int", "int"),
        ("list[int]", "list[int]"),
        ("dict[str, list[float]]", "dict[str,list[float]]"),
        ("optional[tuple[int,str,bool]]", "optional[tuple[int,str,bool]]"),
        (" none ", "none"),
    ],
)
def test_parse_type_round_trips(text, expected):
    assert str(parse_type(text)) == expected


@pytest.mark.parametrize(
    "bad",
    ["", "list", "list[]", "dict[int,str]", "map[int]", "list[int", "int]", "optional[int,str]", "int x"],
)
def test_parse_type_refuses(bad):
    with pytest.raises(ValueError, match="type"):
        parse_type(bad)


@pytest.mark.parametrize(
    ("value", "spec", "ok"),
    [
        (1, "int", True),
        (True, "int", False),
        (1, "float", True),
        (1.5, "int", False),
        (None, "optional[int]", True),
        ([1, "a"], "tuple[int,str]", True),
        ([1, "a", 2], "tuple[int,str]", False),
        ({"a": [1.0]}, "dict[str,list[float]]", True),
        ({"a": ["x"]}, "dict[str,list[float]]", False),
        ("x", "any", True),
    ],
)
def test_conforms(value, spec, ok):
    assert conforms(value, parse_type(spec)) is ok


def test_loads_fixture_bank_with_path_ids():
    tasks = load_tasks(BANK)
    assert [t.id for t in tasks] == [
        "code/double/001",
        "code/mean/001",
        "code/run-length-encode/001",
        "structured/person/001",
    ]
    double = tasks[0]
    assert isinstance(double, CodeTask)
    assert double.arg_types == (TypeSpec("int"),)
    assert double.hidden_tests[2] == CallTest((), {"n": 5}, 10)
    rle = tasks[2]
    assert isinstance(rle, CodeTask)
    assert isinstance(rle.public_tests[2], CheckTest)
    assert isinstance(tasks[3], StructuredTask)
    assert tasks[1].float_tolerance == 1e-9  # type: ignore[union-attr]


def test_digests_are_stable_and_change_with_content(tmp_path):
    first = bank_digest(load_tasks(BANK))
    assert first == bank_digest(load_tasks(BANK))
    copy = tmp_path / "bank"
    shutil.copytree(BANK, copy)
    assert bank_digest(load_tasks(copy)) == first  # the digest does not depend on where the bank lives
    ref = copy / "code" / "double" / "001" / "reference.py"
    ref.write_text(ref.read_text() + "\n# changed\n")
    assert bank_digest(load_tasks(copy)) != first


def test_shipped_schema_accepts_fixtures_and_names_problems():
    assert task_schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for path in BANK.rglob("task.json"):
        assert validate_task_json(json.loads(path.read_text())) == [], path
    data = json.loads((BANK / "code" / "double" / "001" / "task.json").read_text())
    del data["entry_point"]
    data["hidden_tests"][0] = {"args": [1]}
    problems = validate_task_json(data)
    assert problems, "a broken task must not validate"


def test_a_misspelled_key_is_one_short_line_naming_it_and_the_field_it_stands_for():
    data = json.loads((BANK / "code" / "double" / "001" / "task.json").read_text())
    data["entry_pont"] = data.pop("entry_point")
    assert validate_task_json(data) == ["/: field 'entry_pont' is not a task field, did you mean 'entry_point'?"]
    data = json.loads((BANK / "code" / "double" / "001" / "task.json").read_text())
    del data["signature"]
    data["colour"] = 1
    assert validate_task_json(data) == [
        (
            "/: unexpected field 'colour' (allowed: arg_types, description, entry_point, family, float_tolerance, "
            "hidden_tests, public_tests, return_type, signature)"
        ),
        "/: field 'signature' is missing",
    ]
    data = json.loads((BANK / "structured" / "person" / "001" / "task.json").read_text())
    data["public_assertions"][0]["op"] = "path_is_nice"
    (line,) = validate_task_json(data)
    assert line.startswith("/public_assertions/0/op: ") and len(line) < 300


def _write(bank: Path, task_id: str, data: dict, reference: str | None = "def f(x):\n    return x\n") -> Path:
    d = bank / task_id
    d.mkdir(parents=True)
    (d / "task.json").write_text(json.dumps(data))
    if reference is not None:
        (d / "reference.py").write_text(reference)
    return d


CODE = {
    "family": "code",
    "description": "identity",
    "entry_point": "f",
    "signature": "def f(x):",
    "arg_types": ["int"],
    "return_type": "int",
    "public_tests": [{"args": [1], "expected": 1}],
    "hidden_tests": [{"args": [2], "expected": 2}],
}


def test_loader_errors_name_file_and_field(tmp_path):
    _write(tmp_path, "code/ident/001", {**CODE, "arg_types": ["list[int"]})
    with pytest.raises(TaskError, match=r"task\.json.*arg_types"):
        load_tasks(tmp_path)


def test_loader_needs_a_reference_for_code(tmp_path):
    _write(tmp_path, "code/ident/001", CODE, reference=None)
    with pytest.raises(TaskError, match=r"reference\.py"):
        load_tasks(tmp_path)


def test_loader_refuses_bad_paths_and_family_mismatch(tmp_path):
    _write(tmp_path, "code/Bad_Slug/1", CODE)
    with pytest.raises(TaskError, match="<family>/<slug>/<NNN>"):
        load_tasks(tmp_path)
    other = tmp_path / "other"
    _write(other, "structured/ident/001", CODE)
    with pytest.raises(TaskError, match="family"):
        load_tasks(other)


def test_task_ids_come_from_real_paths_inside_the_bank(tmp_path, monkeypatch):
    """A bank named through a symlink, a trailing slash or a relative path gives the same ids; a task directory
    whose real path is outside the bank (through a symlink) is refused."""
    shutil.copytree(BANK, tmp_path / "bank")
    (tmp_path / "alias").symlink_to(tmp_path / "bank")
    monkeypatch.chdir(tmp_path)
    ids = [t.id for t in load_tasks(BANK)]
    for name in ("bank", "bank/", "alias", str(tmp_path / "alias") + "/"):
        assert [t.id for t in load_tasks(name)] == ids
    outside = tmp_path / "outside" / "001"
    shutil.copytree(BANK / "code" / "double" / "001", outside)
    (tmp_path / "bank" / "code" / "double" / "002").symlink_to(outside)
    with pytest.raises(TaskError, match="not inside the task bank"):
        load_task(tmp_path / "bank" / "code" / "double" / "002", "alias")
    assert load_task(tmp_path / "alias" / "code" / "double" / "001", "bank/").id == "code/double/001"


def test_the_bank_is_searched_as_pathlib_would_and_never_through_a_symlinked_directory(tmp_path):
    """task_dirs walks the bank with os.walk (a tenth of rglob's cost); it finds what ``sorted(rglob)`` finds, in
    the same order (path components compared one by one: "a" before "a-b"), and a task directory reached through
    a symbolic link is not loaded as if it were inside the bank."""
    from evalkit.grading._tasks import task_dirs

    bank = tmp_path / "bank"
    for rel in ("code/a-b/001", "code/a/002", "code/a/001", "code/ab/001", "structured/z/001", "code/a/001/x/003"):
        (bank / rel).mkdir(parents=True)
        (bank / rel / "task.json").write_text("{}")
    (bank / "code" / "empty").mkdir()
    (bank / "code" / "dir-named" / "task.json").mkdir(parents=True)  # a directory called task.json counts
    (bank / "code" / "broken").mkdir()
    (bank / "code" / "broken" / "task.json").symlink_to(tmp_path / "nowhere")  # a dangling link does not
    outside = tmp_path / "outside" / "001"
    outside.mkdir(parents=True)
    (outside / "task.json").write_text("{}")
    (bank / "code" / "linked").symlink_to(outside.parent)
    expected = [p.parent for p in sorted(bank.rglob("task.json"))]
    assert list(task_dirs(bank)) == expected
    assert [p.relative_to(bank).as_posix() for p in expected] == [
        "code/a/001", "code/a/001/x/003", "code/a/002", "code/a-b/001", "code/ab/001", "code/dir-named",
        "structured/z/001",
    ]

    shutil.copytree(BANK, tmp_path / "real")
    (tmp_path / "real" / "code" / "linked").symlink_to(tmp_path / "real" / "code" / "double")
    assert [t.id for t in load_tasks(tmp_path / "real")] == [t.id for t in load_tasks(BANK)]

def test_missing_bank_is_a_task_error(tmp_path):
    with pytest.raises(TaskError, match="not found"):
        load_tasks(tmp_path / "nope")


SENTINEL = "zq-hidden-sentinel-7731"


def test_prompt_never_contains_hidden_tests(tmp_path):
    code = {
        **CODE,
        "arg_types": ["str"],
        "return_type": "str",
        "public_tests": [
            {"args": ["shown-arg"], "expected": "shown-result"},
            {"check": "def check(candidate):\n    assert candidate('pub') == 'pub'\n"},
        ],
        "hidden_tests": [
            {"args": [SENTINEL + "-arg"], "expected": SENTINEL + "-expected"},
            {"args": ["x"], "kwargs": {"k": SENTINEL + "-kw"}, "expected": "x"},
            {
                "check": f"def check(candidate):\n    assert candidate('{SENTINEL}-check') == '{SENTINEL}-check'\n"
            },
        ],
    }
    structured = json.loads((BANK / "structured" / "person" / "001" / "task.json").read_text())
    structured["hidden_assertions"] = [
        {"op": "path_equals", "path": f"/{SENTINEL}-path", "value": SENTINEL + "-value"},
        {"op": "path_matches", "path": "/name", "value": SENTINEL + "-regex"},
    ]
    _write(tmp_path, "code/ident/001", code, reference="def f(x, k=None):\n    return x\n")
    _write(tmp_path, "structured/person/001", structured, reference=None)
    for task in load_tasks(tmp_path):
        prompt = render_prompt(task)
        assert SENTINEL not in prompt, f"{task.id}: a hidden test leaked into the prompt"
        assert task.description.strip() in prompt
    code_prompt = render_prompt(load_tasks(tmp_path)[0])
    assert 'f("shown-arg") == "shown-result"' in code_prompt
    assert "candidate('pub')" in code_prompt


def test_prompt_examples_for_fixture_bank():
    tasks = load_tasks(BANK)
    prompt = render_prompt(tasks[0])
    assert "double(21) == 42" in prompt
    assert "-14" not in prompt
    assert "246913578" not in prompt
    assert "n=5" not in prompt
    prompt = render_prompt(tasks[3])
    assert "path_matches /born" in prompt
    assert "path_approx" not in prompt
    assert "London, England" not in prompt
