"""Benchmark `evalkit bundle build` on synthetic EDGAR daily index files of real-quarter size.

Writes ~300,000 filings over the SEC business days of 2023Q1 as daily ``form.YYYYMMDD.idx.gz`` (fixed width)
and ``master.YYYYMMDD.idx`` (pipe-delimited) files in a temp directory (Form 4s listed twice, under the issuer
and the reporting owner, as EDGAR lists them), then builds a release from them in a child process and prints the
build's wall time and peak memory (target: under 30 s and 2 GB).

    uv run python tools/bench/build_release.py [--rows 300000] [--types form,master] [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

START, END = dt.date(2023, 1, 3), dt.date(2023, 3, 31)
PREAMBLE = (
    "Description:           Daily Index of EDGAR Dissemination Feed by {by}\n"
    "Last Data Received:    {day}\n"
    "Comments:              webmaster@sec.gov\n"
    "Anonymous FTP:         ftp://ftp.sec.gov/edgar/\n \n \n \n \n"
)


def write_inputs(root: Path, rows: int, types: list[str]) -> int:
    from evalkit_core._synth import synth_filings

    filings = synth_filings(rows, START, END, seed=7)
    by_day: dict[dt.date, list[tuple[str, str, str, str]]] = defaultdict(list)
    for k, f in enumerate(filings):
        listed = [(f.form, f.issuer, f.cik, f.accession)]
        if f.form == "4":  # also listed under the reporting owner
            listed.append((f.form, f"OWNER PERSON {k % 50_000}", str(1_800_000 + k % 50_000), f.accession))
        by_day[f.partition_date].extend(listed)
    lines = 0
    for day, entries in sorted(by_day.items()):
        ymd = day.strftime("%Y%m%d")
        path = "edgar/data/{cik}/{acc}.txt"
        if "form" in types:
            head = f"{'Form Type':<12}{'Company Name':<62}{'CIK':<12}{'Date Filed':<12}File Name"
            body = [PREAMBLE.format(by="Form Type", day=day.isoformat()), head, "-" * 141]
            for form, name, cik, acc in sorted(entries):
                body.append(f"{form:<12}{name[:61]:<62}{cik:<12}{ymd:<12}" + path.format(cik=cik, acc=acc))
            (root / f"form.{ymd}.idx.gz").write_bytes(
                gzip.compress(("\n".join(body) + "\n").encode(), mtime=0)
            )
            lines += len(entries)
        if "master" in types:
            body = [
                PREAMBLE.format(by="Company", day=day.isoformat()),
                "CIK|Company Name|Form Type|Date Filed|File Name",
                "-" * 80,
            ]
            for form, name, cik, acc in sorted(entries, key=lambda e: (int(e[2]), e[3])):
                body.append(f"{cik}|{name}|{form}|{ymd}|" + path.format(cik=cik, acc=acc))
            (root / f"master.{ymd}.idx").write_text("\n".join(body) + "\n")
            lines += len(entries)
    return lines


def child(index: Path, out: Path) -> None:
    from evalkit_core.edgar import build_edgar_release

    t0 = time.perf_counter()
    result = build_edgar_release(out, name="bench", start=START, end=END, index=index)
    wall = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"wall_s": round(wall, 2), "peak_mb": round(peak_kb / 1024, 1), "rows": result.rows}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument(
        "--types", default="form,master", help="index types to write per day: form, master or both"
    )
    ap.add_argument("--keep", type=Path, help="write inputs and the release here instead of a temp dir")
    ap.add_argument("--child", nargs=2, metavar=("INDEX", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]))
        return
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-") as tmp:
        base = args.keep or Path(tmp)
        index = base / "index"
        index.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        lines = write_inputs(index, args.rows, args.types.split(","))
        files = sorted(index.iterdir())
        size = sum(p.stat().st_size for p in files)
        print(
            f"inputs    {len(files)} daily index files, {lines:,} index lines, {size / 1e6:.1f} MB "
            f"(generated in {time.perf_counter() - t0:.1f} s)"
        )
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(index), str(base / "release")],
            check=True,
            capture_output=True,
            text=True,
        )
        stats = json.loads(proc.stdout.strip().splitlines()[-1])
        ok = stats["wall_s"] < 30 and stats["peak_mb"] < 2048
        print(
            f"build     {stats['rows']:,} rows in {stats['wall_s']:.2f} s wall, peak RSS {stats['peak_mb']:.0f} MB "
            f"(target < 30 s, < 2048 MB: {'met' if ok else 'MISSED'})"
        )


if __name__ == "__main__":
    main()
