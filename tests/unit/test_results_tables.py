"""The results tables in README.md and docs/ are what benchmarks/results_tables.py writes."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location(
        "results_tables", ROOT / "benchmarks" / "results_tables.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_tables"] = module
    spec.loader.exec_module(module)
    return module


def test_tables_are_up_to_date(capsys):
    rc = _module().main(["--check"])
    assert rc == 0, capsys.readouterr().out


def test_every_table_names_machine_date_and_command():
    module = _module()
    used = set()
    for path in module.markdown_files():
        used |= {m.group("name") for m in module.MARKER.finditer(path.read_text())}
    assert used, "no results markers found"
    assert used <= set(module.TABLES)
    for name in sorted(used):
        assert "Measured on " in module.TABLES[name](), name
    source = (ROOT / "benchmarks" / "results_tables.py").read_text()
    files = set(re.findall(r'"([\w.-]+\.json)"', source))
    assert files
    for name in sorted(files):
        p = module.provenance(name)
        assert p["machine"] and p["date"] and p["command"], name


def test_check_reports_a_stale_table(tmp_path, monkeypatch, capsys):
    module = _module()
    page = tmp_path / "page.md"
    page.write_text("<!-- results:suite -->\nold\n<!-- /results:suite -->\n")
    monkeypatch.setattr(module, "markdown_files", lambda: [page])
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "plot_changes", lambda: [])
    assert module.main(["--check"]) == 1
    assert "-old" in capsys.readouterr().out
    assert module.main([]) == 0
    assert module.main(["--check"]) == 0
    assert "Measured on" in page.read_text()
