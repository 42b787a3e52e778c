"""Build releases from real SEC EDGAR metadata: index files, submissions JSON and the ticker map.

The work lives in private modules: ``_index`` (daily and full-index files), ``_submissions`` (per-company JSON,
page files, the bulk zip), ``_tickers`` (company_tickers.json), ``_rules`` (acceptance stamp checks) and
``_build`` (the merge and :func:`build_edgar_release`, which writes through :func:`evalkit_core.write_release`).
"""

from evalkit_core.edgar._build import (
    BUILDER,
    DISSEMINATION_RULE,
    FILING_DATE_RULE,
    EdgarBuild,
    assemble_filings,
    build_edgar_release,
)
from evalkit_core.edgar._index import IndexEntry, IndexFile, find_index_files, parse_index, read_index_file
from evalkit_core.edgar._inputs import InputFile
from evalkit_core.edgar._rules import (
    EXTENDED_CUTOFF_FORMS,
    FLAG_REASONS,
    SEC_GENERATED_FORMS,
    AcceptanceCheck,
    check_acceptance,
    expected_filing_date,
    is_sec_generated,
)
from evalkit_core.edgar._submissions import (
    Company,
    FormerName,
    SubmissionFiling,
    Submissions,
    read_submissions,
)
from evalkit_core.edgar._tickers import TickerMap, read_ticker_map

__all__ = [
    "BUILDER",
    "DISSEMINATION_RULE",
    "EXTENDED_CUTOFF_FORMS",
    "FILING_DATE_RULE",
    "FLAG_REASONS",
    "SEC_GENERATED_FORMS",
    "AcceptanceCheck",
    "Company",
    "EdgarBuild",
    "FormerName",
    "IndexEntry",
    "IndexFile",
    "InputFile",
    "SubmissionFiling",
    "Submissions",
    "TickerMap",
    "assemble_filings",
    "build_edgar_release",
    "check_acceptance",
    "expected_filing_date",
    "find_index_files",
    "is_sec_generated",
    "parse_index",
    "read_index_file",
    "read_submissions",
    "read_ticker_map",
]
