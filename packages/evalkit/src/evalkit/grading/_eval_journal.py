"""Finished verdicts kept as they are made: the journal beside an eval's results file, and grading that feeds it.

``evalkit eval`` grades many candidates over minutes; an interrupt must not lose the verdicts already made. Each
verdict is appended to ``<results>.partial`` as one canonical JSON line the moment it is made (so an interrupt or a
crash of this process loses none), and the file is fsync'd as soon as no other verdict is waiting to be appended
(one flush for the verdicts that finished together, not one each: a flush per verdict held the main thread for
2-3 ms of every 3 ms on HumanEval, so a slower disk made it the whole run's bottleneck). A run given
the same results path finds the journal, keeps every verdict whose task, sample and candidate text are the same
(under the same bank, verifier settings and solver), grades only the rest, writes the results file and deletes the
journal. A kept row is the row that went in, byte for byte, so a resumed run writes the same results file as an
uninterrupted one.

The journal is an input to a signed receipt, so it is not trusted as found: each line carries an HMAC whose key is
derived from the signing key (an Ed25519 signature is deterministic, so the key is the same run after run and
only the holder of the private key can make it) over the line and the journal's header. A line that does not
check, and everything after it, is graded again; a torn last line (an interrupt mid-write) is cut off.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import cast

from evalkit.grading._tasks import JSON, CodeTask, Task
from evalkit.grading._verifiers import (
    Reason,
    TestVerdict,
    Verdict,
    VerifierSettings,
    finish,
    isolation_text,
    prepare,
)
from evalkit.wall import Sandbox, SandboxJob, SandboxRun
from evalkit_core import ConfigError, SigningKey, canonical_bytes, canonical_object, canonical_string, digest

__all__ = [
    "JOURNAL_KIND",
    "JOURNAL_SUFFIX",
    "EvalInterrupted",
    "Journal",
    "grade_each",
    "item_key",
    "journal_path",
    "journal_running",
    "verdict_from_json",
]

JOURNAL_SUFFIX = ".partial"
JOURNAL_KIND = "evalkit.eval.journal"
JOURNAL_FORMAT = 1


class EvalInterrupted(KeyboardInterrupt):
    """Ctrl-C during an eval: ``kept`` finished verdicts are in ``journal``; the same command resumes from it."""

    def __init__(self, journal: Path, kept: int) -> None:
        super().__init__(f"{kept} finished verdict(s) kept in {journal}")
        self.journal = journal
        self.kept = kept


def journal_running(path: Path) -> bool:
    """Is an eval writing this journal now (it holds its lock)? Reads nothing and writes nothing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


def journal_path(results: Path) -> Path:
    return results.with_name(results.name + JOURNAL_SUFFIX)


def item_key(task_id: str, sample: int, text: str) -> str:
    """What a kept verdict answers: this task, this sample, this exact candidate text."""
    # surrogatepass: a candidate's text may hold lone surrogates; its key must still be made, and stay one-to-one
    return digest({"task_id": task_id, "sample": sample, "text_sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()})


def _mac_key(key: SigningKey) -> bytes:
    return hashlib.sha256(key.sign(b"evalkit eval journal: line key, format 1")).digest()


class Journal:
    """The journal of one results path: the rows it held that still apply (``kept``), and an appender."""

    def __init__(self, path: Path, header: Mapping[str, JSON], key: SigningKey) -> None:
        self.path = path
        self._header = canonical_bytes({"kind": JOURNAL_KIND, "format": JOURNAL_FORMAT, **header})
        self._mac = hmac.new(_mac_key(key), self._header, hashlib.sha256).digest()
        self.kept: dict[str, dict[str, JSON]] = {}
        self.written = 0
        self._unsynced = False
        path.parent.mkdir(parents=True, exist_ok=True)
        try:  # never through a symbolic link planted where the journal goes
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise ConfigError(f"--out: cannot write the journal {path} ({exc.strerror})") from None
        self._lock()
        good = self._read()  # under the lock: what another run left is read once that run is done with it
        if good == 0:
            os.ftruncate(self._fd, 0)
            os.write(self._fd, self._header + b"\n")
        else:  # keep the lines that check; what followed them (a torn or foreign line) is graded again
            os.ftruncate(self._fd, good)
        os.lseek(self._fd, 0, os.SEEK_END)
        os.fsync(self._fd)

    def _lock(self) -> None:
        """Hold the journal for this run's life: a second eval on the same results path is refused, and
        ``evalkit view`` tells a run in progress (locked) from an interrupted one (not locked). A reader's shared
        lock is held for an instant: a few tries ride over it."""
        for _ in range(50):
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(0.02)
                continue
            return
        os.close(self._fd)
        self._fd = -1
        raise ConfigError(f"--out: {self.path} is being written by another evalkit eval (wait for it, or choose "
                          "another --out)")  # fmt: skip

    def _tag(self, line: bytes) -> str:
        return hmac.new(self._mac, line, hashlib.sha256).hexdigest()

    def _read(self) -> int:
        """Load the kept rows; the length of the prefix that checks (0: no journal, or another run's)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        first, sep, rest = data.partition(b"\n")
        if not sep or first != self._header:
            return 0  # another bank, other settings, another solver: nothing in it applies
        good = len(first) + 1
        for raw in rest.split(b"\n")[:-1]:  # the part after the last newline is torn
            try:
                entry = json.loads(raw)
                body = canonical_bytes({"key": entry["key"], "row": entry["row"]})
            except (ValueError, KeyError, TypeError):
                break
            if not isinstance(entry.get("mac"), str) or not hmac.compare_digest(entry["mac"], self._tag(body)):
                break
            self.kept[cast("str", entry["key"])] = cast("dict[str, JSON]", entry["row"])
            good += len(raw) + 1
        return good

    def append(self, key: str, row: dict[str, JSON]) -> bytes:
        """Append one verdict's row; returns the row's canonical bytes (what the results file holds for it). The
        row is encoded once: the MAC's body and the line are assembled from its text and the key's, which is
        ``canonical_bytes`` of each whole object byte for byte (their keys are plain ASCII), rather than normalised
        and encoded twice more."""
        row_bytes = canonical_bytes(row)
        row_text, key_text = row_bytes.decode(), canonical_string(key)
        body = canonical_object({"key": key_text, "row": row_text}).encode()
        mac = canonical_string(self._tag(body))
        line = canonical_object({"key": key_text, "mac": mac, "row": row_text}).encode() + b"\n"
        os.write(self._fd, line)
        self._unsynced = True
        self.written += 1
        return row_bytes

    def sync(self) -> None:
        """Flush what was appended since the last flush to the disk (nothing to do when nothing was)."""
        if self._unsynced and self._fd >= 0:
            os.fsync(self._fd)
            self._unsynced = False

    def count(self) -> int:
        """How many verdicts the file holds that check, read again (an interrupt can land between a line's write
        and the count kept in memory)."""
        self.kept = {}
        self._read()
        return len(self.kept)

    def close(self) -> None:
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
            self._fd = -1

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)  # while still locked: a reader never sees it as interrupted
        # closed without a flush: the file is gone, and the results file that replaces it was written whole and
        # flushed (atomic_write_bytes) before this; its last verdicts' fsync was 4-12 ms of the run's serial tail
        self._unsynced = False
        self.close()


def verdict_from_json(row: Mapping[str, JSON]) -> Verdict:
    """The verdict a results row (or journal row) was made from (its sandbox output is not in the row)."""

    def tests(block: JSON) -> tuple[TestVerdict, ...]:
        items = cast("list[dict[str, JSON]]", cast("dict[str, JSON]", block)["tests"])
        return tuple(
            TestVerdict(str(t["name"]), bool(t["passed"]), cast("Reason", t["reason"]), str(t["detail"]),
                        cast("str | None", t["actual"]), tuple(cast("list[str]", t.get("evidence") or [])))
            for t in items
        )  # fmt: skip

    return Verdict(
        task_id=str(row["task_id"]),
        task_digest=str(row["task_digest"]),
        settings_digest=str(row["settings_digest"]),
        public=tests(row["public"]),
        hidden=tests(row["hidden"]),
        infra_error=cast("str | None", row["infra_error"]),
        isolation=str(row["isolation"]),
        host_error=cast("str | None", row.get("host_error")),
    )


def grade_each(
    items: Sequence[tuple[Task, str]],
    sandbox: Sandbox,
    settings: VerifierSettings,
    *,
    extract: bool,
    on_verdict: Callable[[int, Verdict], None],
    on_idle: Callable[[], None] | None = None,
) -> None:
    """Grade every ``(task, text)`` pair as :func:`evalkit.grade_many` does, calling ``on_verdict(index, verdict)``
    in the calling thread as each verdict is made, in the order they finish, and ``on_idle()`` there whenever no
    other verdict is waiting (the journal's flush). An interrupt stops at once: no job starts after it, and the
    caller's closing of the sandbox ends the ones running."""
    code: list[tuple[int, CodeTask, SandboxJob]] = []
    for i, (task, text) in enumerate(items):
        first = prepare(task, text, settings, extract=extract)  # contained, as in grade_many
        if isinstance(first, Verdict):
            on_verdict(i, first)
        else:
            assert isinstance(task, CodeTask)
            code.append((i, task, first))
    if not code:
        if on_idle is not None:
            on_idle()
        return
    isolation = isolation_text(sandbox)
    work: queue.SimpleQueue[tuple[int, CodeTask, SandboxJob]] = queue.SimpleQueue()
    for entry in code:
        work.put(entry)
    made: queue.SimpleQueue[tuple[int, CodeTask, SandboxRun | BaseException]] = queue.SimpleQueue()
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            try:
                i, task, job = work.get_nowait()
            except queue.Empty:
                return
            try:
                made.put((i, task, sandbox.run(job)))
            except BaseException as exc:  # handed to the calling thread, which raises it
                made.put((i, task, exc))
                return

    # daemon threads, not a ThreadPoolExecutor (whose threads the interpreter joins at exit): after an interrupt
    # the process must not wait for a job still running in a jail that the sandbox's closing is tearing down
    for n in range(min(sandbox.workers, len(code))):
        threading.Thread(target=worker, name=f"evalkit-grade-{n}", daemon=True).start()
    try:
        for _ in code:
            while True:
                try:
                    i, task, got = made.get(timeout=0.25)  # a bounded wait: Ctrl-C is seen at once
                    break
                except queue.Empty:
                    continue
            if isinstance(got, BaseException):
                raise got
            on_verdict(i, finish(task, settings, got, items[i][1], isolation))
            if on_idle is not None and made.empty():
                on_idle()
    finally:
        stop.set()
