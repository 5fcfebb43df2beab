"""Regenerate the test runners' reports in this directory: real runs on a small failing project.

    .venv/bin/python tests/pipeline/data/make_reports.py

Writes a tiny package (`ledger`: a codec and a client that posts to a closed port through
requests and urllib3), its pytest and unittest tests (1,000+ passing, 8 failing: assertions,
exceptions in the package, a regex mismatch, deep urllib3 tracebacks), runs them the ways agents
do and stores each output gzipped, paths scrubbed to /home/user, with the `[exit code: N]` line
an agent's shell tool appends. Object addresses and timings are whatever the run gave.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = {
    "ledger/__init__.py": '''\
"""A tiny ledger package, the code under test."""
''',
    "ledger/codec.py": '''\
"""Decode settlement batches."""
from decimal import Decimal


class BatchError(ValueError):
    pass


def parse_amount(raw: str) -> Decimal:
    cents = int(raw.replace(".", ""))
    return Decimal(cents) / 100


def parse_entry(line: str) -> dict:
    fields = line.split(";")
    header = {"account": fields[0], "currency": fields[1]}
    header["amount"] = parse_amount(fields[2])
    header["memo"] = fields[3]
    return header


def decode_batch(payload: bytes, encoding: str = "utf-8") -> list[dict]:
    text = payload.decode(encoding)
    entries = [parse_entry(line) for line in text.splitlines() if line.strip()]
    if not entries:
        raise BatchError("empty batch")
    return entries


def split_shares(total: Decimal, parts: int) -> list[Decimal]:
    share = total / parts
    return [round(share, 2)] * parts
''',
    "ledger/sync.py": '''\
"""Push settled batches to the clearing service."""
import requests

CLEARING_URL = "http://127.0.0.1:9/v1/batches"


class ClearingClient:
    def __init__(self, base_url: str = CLEARING_URL, timeout: float = 2.0) -> None:
        self.base_url = base_url
        self.timeout = timeout
        self.session = requests.Session()

    def push(self, batch_id: str, entries: list[dict]) -> dict:
        body = {"batch": batch_id, "entries": [str(e) for e in entries]}
        response = self.session.post(self.base_url, json=body, timeout=self.timeout)
        response.raise_for_status()
        return response.json()


def fetch_rates(url: str = "http://127.0.0.1:9/v1/rates") -> dict:
    return requests.get(url, timeout=1.5).json()
''',
    "tests/test_codec.py": """\
from decimal import Decimal

import pytest

from ledger import codec

ACCOUNTS = [f"ACC-{n:04d}" for n in range(160)]
CURRENCIES = ["EUR", "USD", "GBP", "CHF"]


@pytest.mark.parametrize("account", ACCOUNTS)
@pytest.mark.parametrize("currency", CURRENCIES)
def test_parse_entry_roundtrip(account, currency):
    entry = codec.parse_entry(f"{account};{currency};12.50;rent")
    assert entry["account"] == account
    assert entry["amount"] == Decimal("12.50")


AMOUNTS = [(f"{n}.{n % 100:02d}", n * 100 + n % 100) for n in range(120)]


@pytest.mark.parametrize("raw,cents", AMOUNTS)
def test_parse_amount(raw, cents):
    assert codec.parse_amount(raw) == Decimal(cents) / 100


def test_decode_batch_latin1():
    payload = "ACC-0001;EUR;3.20;caf\\u00e9\\n".encode("latin-1")
    entries = codec.decode_batch(payload)
    assert entries[0]["memo"] == "caf\\u00e9"


def test_split_shares_sum_to_total():
    total = Decimal("100.00")
    parts = 3
    shares = codec.split_shares(total, parts)
    assert len(shares) == parts
    assert sum(shares) == total


def test_empty_batch_is_rejected():
    with pytest.raises(codec.BatchError, match="no entries"):
        codec.decode_batch(b"\\n\\n")


def test_entry_without_memo():
    entry = codec.parse_entry("ACC-0002;USD;1.00")
    assert entry["memo"] == ""
""",
    "tests/test_sync.py": """\
import pytest

from ledger import codec, sync


class TestClearingClient:
    def setup_method(self):
        self.client = sync.ClearingClient()
        self.entries = [codec.parse_entry(f"ACC-{n:04d};EUR;{n}.00;batch") for n in range(3)]

    def test_push_returns_receipt(self):
        receipt = self.client.push("B-2026-11-30", self.entries)
        assert receipt["status"] == "accepted"

    @pytest.mark.parametrize("batch", [f"B-{n}" for n in range(40)])
    def test_batch_ids(self, batch):
        assert batch.startswith("B-")


def test_fetch_rates():
    rates = sync.fetch_rates()
    assert rates["EUR"] > 0


def test_config_merge():
    defaults = {"timeout": 2.0, "retries": 3, "url": sync.CLEARING_URL, "verify": True}
    override = {"retries": 5, "verify": False}
    merged = {**defaults, **override, "timeout": 2}
    assert merged == {"timeout": 2.0, "retries": 5, "url": sync.CLEARING_URL, "verify": True}
""",
    "tests/test_reports.py": """\
import pytest

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]


@pytest.mark.parametrize("month", MONTHS)
@pytest.mark.parametrize("year", range(2010, 2030))
def test_report_name(month, year):
    assert f"{year}-{month}".count("-") == 1


def test_report_totals_by_month():
    totals = {m: len(m) * 10 for m in MONTHS}
    totals["sep"] += 1
    for month, total in totals.items():
        assert total % 10 == 0, f"{month} total {total} is not whole tens"
""",
    "ut/test_ledger_unittest.py": """\
import unittest
from decimal import Decimal

from ledger import codec, sync


class CodecTests(unittest.TestCase):
    def test_split(self):
        total = Decimal("100.00")
        self.assertEqual(sum(codec.split_shares(total, 3)), total)

    def test_latin1(self):
        codec.decode_batch("ACC;EUR;1.00;caf\\u00e9\\n".encode("latin-1"))


def _amount(n):
    def test(self):
        self.assertEqual(codec.parse_amount(f"{n}.00"), Decimal(n))

    return test


for _n in range(300):
    setattr(CodecTests, f"test_amount_{_n:03d}", _amount(_n))


class SyncTests(unittest.TestCase):
    def test_rates(self):
        self.assertGreater(sync.fetch_rates()["EUR"], 0)
""",
}
RUNS = {
    "pytest-v-long-showlocals": ["-m", "pytest", "-v", "--tb=long", "--showlocals", "tests"],
    "pytest-q-long-showlocals": ["-m", "pytest", "-q", "--tb=long", "--showlocals", "tests"],
    "pytest-v-short": ["-m", "pytest", "-v", "--tb=short", "tests"],
    "pytest-q-native": ["-m", "pytest", "-q", "--tb=native", "tests"],
    "unittest-v": ["-m", "unittest", "-v", "ut.test_ledger_unittest"],
}


def main() -> None:
    venv = sys.prefix
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, text in FILES.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        for name, args in RUNS.items():
            run = subprocess.run(
                [sys.executable, *args, *(["-p", "no:cacheprovider"] if "pytest" in args else [])],
                cwd=root,
                capture_output=True,
                text=True,
                check=False,
            )
            out = run.stdout + run.stderr + f"[exit code: {run.returncode}]\n"
            for real, fake in (
                (str(root), "/home/user/ledger"),
                (venv, "/home/user/venv"),
                (sys.base_prefix, "/usr"),
            ):
                out = out.replace(real, fake)
            (HERE / f"{name}.txt.gz").write_bytes(gzip.compress(out.encode(), mtime=0))
            print(name, len(out), "characters")


if __name__ == "__main__":
    main()
