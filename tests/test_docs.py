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


def test_readme_documents_every_metric_and_stats_figure():
    """Every metric the proxy exports has a row in the README's metrics table, and every figure
    the dashboard reads from /stats' totals is explained there."""
    from proxy.metrics import Metrics

    readme = (ROOT / "README.md").read_text()
    table = readme.split("### Metrics", 1)[1].split("###", 1)[0]
    body, _ = Metrics(process_metrics=False).render()
    families = set(re.findall(r"^# TYPE (shrink_\w+)", body.decode(), re.M))
    names = {re.sub(r"_(total|created)$", "", n) for n in families}
    missing = sorted(n for n in names if f"`{n}`" not in table and f"{n}`" not in table)
    assert not missing, f"metrics missing from the README's table: {missing}"
    cards = readme.split("### What each number on the dashboard means", 1)[1].split("###", 1)[0]
    for figure in ("fit as sent", "client disconnects", "cut moves", "calibration changes"):
        assert figure in cards, figure
