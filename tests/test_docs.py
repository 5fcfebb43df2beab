"""The README stays true: its settings table is the one generated from the settings model."""

from __future__ import annotations

import re

from proxy.settings import settings_table
from tests.conftest import ROOT


def test_readme_settings_table_is_current():
    readme = (ROOT / "README.md").read_text()
    m = re.search(
        r"<!-- settings-table:start -->\n(.*?)\n<!-- settings-table:end -->", readme, re.S
    )
    assert m, "README lacks the settings table markers"
    assert m.group(1).strip() == settings_table().strip(), (
        "README settings table is stale: run `shrink-proxy settings-table --update README.md`"
    )


def test_readme_quick_start_matches_ci():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("##", 1)[0]
    commands = re.findall(r"^(make \w+)", quick, re.M)
    assert commands == ["make run", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()
