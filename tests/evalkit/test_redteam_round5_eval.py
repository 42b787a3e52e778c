"""Round five against ``evalkit eval`` (issue 29, items 1 and 2): attacks that held, kept as regression guards.

One real ``evalkit eval --solver replay:FILE`` run over the fixture bank mixes honest answers with answers that
attack the host from every side the round's brief names and the earlier rounds did not: exceptions whose
``__str__`` raises, returns a non-string or ten million characters, whose type's ``__name__`` raises, whose
``__cause__``/``__context__`` loop; every BaseException a candidate can raise (SystemExit of an object and of 2**64,
KeyboardInterrupt, GeneratorExit, its own BaseException whose ``__str__`` raises), at load and in a call; str, int,
float, list and dict subclasses with lying dunders; self-containing containers; closed, dup'ed and overwritten
protocol and output fds; garbage, half and forged replies (with forged evidence codes) written to the reply pipe by
hand; replies forged to the checker naming StopIteration, SystemExit, ExceptionGroup or a type that is no name;
a hostile ``sys.stdout``; builtins and the zygote's own globals monkeypatched; completions with several fences,
a fence inside a string, a BOM, a NUL, five megabytes. And structured answers with odd JSON: duplicate keys,
``1e400``, ``-0``, an exponent that underflows, NaN and Infinity literals, a hundred-thousand-digit fraction,
``"\\ud800"`` escapes, NUL, a BOM, deep nesting, tagged-looking objects.

Every answer gets its verdict in ``results.jsonl`` (none lost, none a host error), the honest ones pass, and the
hidden tests' details hold nothing of the hidden inputs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import pytest
from typer.testing import CliRunner

from evalkit import verify_eval_receipt
from evalkit.wall import EVIDENCE
from evalkit_cli import app

pytestmark = pytest.mark.needs("root", "bwrap", "seccomp")  # attacks on the full wall

BANK = Path(__file__).parent / "fixtures" / "tasks"
DOUBLE = "def double(n):\n    return 2 * n\n"
RLE = "import itertools\ndef rle(s):\n    return ''.join(f'{len(list(g))}{k}' for k, g in itertools.groupby(s))\n"
PERSON = {"name": "Ada Lovelace", "born": "1815-12-10", "city": "London", "topics": ["Analytical Engine"],
          "height_m": 1.65}  # fmt: skip
REASONS = {"ok", "wrong_answer", "exception", "timeout", "crash", "no_code", "no_json", "schema", "assertion"}

_ON_DOUBLE = [
    # exceptions the host cannot print
    "class E(Exception):\n    def __str__(self): raise E()\ndef double(n):\n    raise E()\n",
    "class E(Exception):\n    def __str__(self): return 5\ndef double(n):\n    raise E()\n",
    "class E(Exception):\n    def __str__(self): return 'x' * 10**7\ndef double(n):\n    raise E()\n",
    (
        "class M(type):\n    @property\n    def __name__(cls): raise RuntimeError\n"
        "class E(Exception, metaclass=M): pass\ndef double(n):\n    raise E('m')\n"
    ),
    (
        "def double(n):\n    e, f = ValueError('a'), ValueError('b')\n    e.__cause__ = f; f.__cause__ = e; e.__context__ = f\n"
        "    raise e\n"
    ),
    # every BaseException, in a call and at load
    "import sys\ndef double(n):\n    sys.exit(object())\n",
    "def double(n):\n    raise SystemExit(2**64)\n",
    "def double(n):\n    raise KeyboardInterrupt\n",
    "def double(n):\n    raise GeneratorExit\n",
    "def double(n):\n    raise BaseException('x')\n",
    "import sys\nsys.exit(3)\ndef double(n): return 2*n\n",
    "class B(BaseException):\n    def __str__(self): raise B()\nraise B()\ndef double(n): return 2*n\n",
    # subclasses with lying dunders; containers holding themselves; what is no data
    "class S(str):\n    def __eq__(s, o): return True\n    __hash__ = str.__hash__\ndef double(n):\n    return S('x')\n",
    "class I(int):\n    def __eq__(s, o): return True\ndef double(n):\n    return I(2 * n)\n",
    "class F(float):\n    def __repr__(s): raise RuntimeError\ndef double(n):\n    return F(2 * n)\n",
    "class L(list):\n    def __iter__(s): raise RuntimeError\ndef double(n):\n    return L([1])\n",
    "class D(dict):\n    def items(s): raise RuntimeError\ndef double(n):\n    return D(a=1)\n",
    "def double(n):\n    x = []; x.append(x); return x\n",
    "def double(n):\n    d = {}; d['a'] = d; return d\n",
    "def double(n):\n    return {(1, 2): 3, frozenset({1}): [b'x', bytearray(b'y'), 1j]}\n",
    "def double(n):\n    return [2 * n, print]\n",
    "def double(n):\n    raise type('\\ud800\\n\\x00', (Exception,), {})('\\udfff')\n",
    "def double(n):\n    raise type('x' * 100000, (Exception,), {})('x')\n",
    # descriptors and the reply pipe
    "import os\ndef double(n):\n    os.close(4)\n    return 2 * n\n",
    "import os\ndef double(n):\n    os.close(1); os.close(2)\n    return 2 * n\n",
    "import os\ndef double(n):\n    os.dup2(1, 4)\n    print('[\"value\",' + str(2 * n + 1) + ',[]]')\n    return 2 * n\n",
    "import os\ndef double(n):\n    os.write(4, b'\\xff\\xfe garbage\\n')\n    return 2 * n\n",
    "import os\ndef double(n):\n    os.write(4, b'[\"value\",')\n    os._exit(0)\n",
    (
        'import os\ndef double(n):\n    os.write(4, b\'["value",\' + str(2 * n).encode() + b\',["exit","refused:read","zz"]]\\n\')\n'
        "    os._exit(0)\n"
    ),
    'import os\nos.write(4, b\'["loaded","ok",[]]\\n\')\ndef double(n): return 2 * n\n',
    "import os\nos.dup2(3, 0)\nos.close(3)\ndef double(n): return 2 * n\n",
    # the candidate's streams, builtins and the zygote's globals
    (
        "import sys\nclass W:\n    def write(s, x): raise RuntimeError\n    def flush(s): raise SystemExit\n"
        "sys.stdout = W(); sys.stderr = W()\ndef double(n):\n    print('hi'); return 2 * n\n"
    ),
    (
        "import builtins, json\nbuiltins.str = lambda *a: 1 / 0\nbuiltins.len = None\njson.dumps = None\n"
        "def double(n): return 2 * n\n"
    ),
    (
        "import __main__\nfor k in list(vars(__main__)):\n    try: setattr(__main__, k, None)\n    except Exception: pass\n"
        "def double(n): return 2 * n\n"
    ),
    (
        "import sys, os\nm = sys.modules['__main__']\nm._write = lambda fd, d: os.write(fd, d.replace(b'value', b'raised'))\n"
        "def double(n): return 2 * n\n"
    ),
    # what the extractor reads
    "```python\ndef double(n):\n    return 3 * n\n```\n```python\ndef double(n):\n    return 2 * n\n```\n",
    "```python\ns = '```'\ndef double(n):\n    return 2 * n\n```",
    "x" * (5 << 20),
    "\ufeffdef double(n):\n    return 2 * n\n",
    "def double(n):\n    return 2 * n\x00\n",
]

_FORGED_TO_CHECKER = [
    b'["raised","StopIteration","x",[]]', b'["raised","SystemExit","x",[]]', b'["raised","GeneratorExit","x",[]]',
    b'["raised","ExceptionGroup","x",[]]', b'["raised","UnicodeDecodeError","x",[]]', b'["raised",["a"],{"$d":[]},[]]',
    b'["raised","CandidateGone","x",[]]', b'["value",{"$d":[[{"$t":[]},1]]},[]]', b'["timeout",[]]',
    b'["unplain",5,[]]', b'["loaded","ok",[]]', b"[]", b'["value"]',
]  # fmt: skip
_ON_RLE = [
    *(
        "import os\ndef rle(s):\n    os.write(4, " + repr(line + b"\n") + ")\n    os._exit(0)\n"
        for line in _FORGED_TO_CHECKER
    ),
    "def rle(s):\n    raise type('StopIteration', (Exception,), {})()\n",
    "def rle(s):\n    return '\\ud800' * (1 << 17)\n",
]

_GOOD = json.dumps(PERSON)
_ON_PERSON = [
    _GOOD[:-1] + ', "name": "Ada Lovelace", "name": "x"}',
    *(
        _GOOD.replace("1.65", v)
        for v in ("1e400", "-0", "1.65e-400", "NaN", "Infinity", "1." + "6" * 100_000)
    ),
    "\ufeff" + _GOOD,
    _GOOD.replace('"London"', '"\\ud800"'),
    _GOOD.replace('"London"', '"Lon\\u0000don"'),
    _GOOD.replace("Ada Lovelace", "Ada\\nLovelace ```json\\n{}\\n```"),
    "```json\n" + _GOOD + '\n```\n```json\n{"name": 1}\n```',
    "[" * 10_000 + "]" * 10_000,
    '{"a":' * 63 + _GOOD + "}" * 63,
    '{"name": {"$t": [1]}, "born": {"$f": "nan"}}',
    '{"\\ud800": 1}',
]


def _run(tmp_path: Path, lines: list[dict[str, str]]) -> list[dict[str, Any]]:
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    out, receipt = tmp_path / "results.jsonl", tmp_path / "receipt.json"
    args = ["eval", "--tasks", str(BANK), "--solver", f"replay:{replay}", "--out", str(out), "--receipt", str(receipt),
            "--workers", "2"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [name for name, ok, _ in verify_eval_receipt(receipt) if not ok] == []
    return [json.loads(line) for line in out.read_bytes().decode("utf-8").splitlines()]


def _reasons(row: dict[str, Any]) -> list[str]:
    return [t["reason"] for t in (*row["public"]["tests"], *row["hidden"]["tests"])]


def test_hostile_answers_mixed_with_honest_ones_in_one_run(tmp_path: Path) -> None:
    lines: list[dict[str, str]] = []
    for task, honest, hostile in (
        ("code/double/001", DOUBLE, _ON_DOUBLE),
        ("code/run-length-encode/001", RLE, _ON_RLE),
        ("structured/person/001", _GOOD, _ON_PERSON),
    ):
        lines += [{"task_id": task, "completion": c} for c in (honest, *hostile, honest)]
    rows = _run(tmp_path, lines)
    assert [(r["task_id"], r["sample"]) for r in rows] == [
        (x["task_id"], i)
        for task in ("code/double/001", "code/run-length-encode/001", "structured/person/001")
        for i, x in enumerate(x for x in lines if x["task_id"] == task)
    ]  # every verdict, in order
    for row in rows:
        assert row["infra_error"] is None, row
        assert "host_error" not in row, row
        assert set(_reasons(row)) <= REASONS, row
        for test in (*row["public"]["tests"], *row["hidden"]["tests"]):
            assert set(test.get("evidence") or ()) <= set(EVIDENCE), test  # forged unknown codes are dropped
    last: dict[str, dict[str, Any]] = {}
    for row in rows:
        last[row["task_id"]] = row
    # the first and the last answer of each task are honest
    for row in [*(r for r in rows if r["sample"] == 0), *last.values()]:
        assert set(_reasons(row)) == {"ok"}, row
    hostile = [r for r in rows if r["sample"] != 0 and r is not last[r["task_id"]]]
    # only the ones that merely looked odd pass (a BOM, two fences, a fence in a string, a duplicate key, ...)
    assert sum(set(_reasons(r)) == {"ok"} for r in hostile) <= 8
    shown = " ".join(_texts(rows))
    for hidden in ("123456789", "246913578", "aaaaaaaaaaaa", "1112", "3112", "London, England"):
        assert hidden not in shown, hidden  # hidden inputs and expected values stay out of the results


def _texts(value: object) -> list[str]:
    """Every string and number in ``value`` but the digests (whose hex may hold any short run of digits)."""
    if isinstance(value, dict):
        items = cast("dict[str, object]", value).items()
        return [t for k, v in items if k not in ("task_digest", "settings_digest") for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in cast("list[object]", value) for t in _texts(v)]
    text = str(value)
    return [re.sub(r"(hmac-)?sha256:[0-9a-f]{64}", "", text)]
