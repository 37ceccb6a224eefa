"""The documentation site (mkdocs.yml, docs/): what the API reference renders is documented,
and every config key of docs/configuration.md is found by the site's search.

The site itself is built by scripts/test.sh (`mkdocs build --strict --site-dir site`) before
pytest runs. The search-index check reads that build when it is newer than every page and
mkdocs.yml; otherwise (pytest run alone, or a page edited since) it builds the site into a
temporary directory, which takes about 20 s. Both checks skip, with the reason, where the
`docs` extra is not installed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DIRECTIVE = re.compile(r"^:::\s+(\S+)", re.M)
CONFIG_KEY = re.compile(r"^\| `([^`]+)` \|", re.M)


def rendered_modules() -> list[str]:
    """The modules the site renders (`::: module` lines of docs/api/*.md and of the guides:
    docs/python-api.md renders `surge.api`)."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        found += DIRECTIVE.findall(page.read_text())
    return found


def needs_docstring(obj) -> bool:
    """Modules, classes, functions and methods, and properties (functions too, in the code)."""
    return obj.is_module or obj.is_class or obj.is_function or "property" in obj.labels


def undocumented(obj) -> list[str]:
    """Paths of the public objects under `obj` (itself included) that have no docstring.

    Public as mkdocs.yml renders it: no name starting with `_`; imported names (aliases) are
    documented where they are defined, and submodules on their own `:::` lines.
    """
    missing = [obj.path] if needs_docstring(obj) and not obj.docstring else []
    for name, member in obj.members.items():
        if name.startswith("_") or member.is_alias or member.is_module:
            continue
        missing += undocumented(member)
    return missing


def test_api_pages_render_modules():
    modules = rendered_modules()
    assert "surge.config.schema" in modules
    assert "surge.workers.base" in modules
    if (ROOT / "surge" / "api.py").exists():
        assert "surge.api" in modules
    assert len(modules) == len(set(modules)), "a module is rendered twice"


def test_every_rendered_public_object_has_a_docstring():
    griffe = pytest.importorskip("griffe", reason="needs the docs extra (pip install -e .[docs])")
    # Load the package once (a few seconds) and look each module up in it.
    package = griffe.load("surge", search_paths=[str(ROOT)], resolve_aliases=False)
    missing = []
    for module in rendered_modules():
        path = module.removeprefix("surge").lstrip(".")
        missing += undocumented(package[path] if path else package)
    assert not missing, "public objects without a docstring:\n  " + "\n  ".join(missing)


def _site_is_fresh(site: Path) -> bool:
    index = site / "search" / "search_index.json"
    if not index.is_file():
        return False
    built = index.stat().st_mtime
    sources = [ROOT / "mkdocs.yml", *DOCS.rglob("*.md")]
    return all(p.stat().st_mtime < built for p in sources)


@pytest.fixture(scope="module")
def search_index(tmp_path_factory) -> dict:
    site = ROOT / "site"
    if not _site_is_fresh(site):
        mkdocs = Path(sys.executable).with_name("mkdocs")
        if not mkdocs.exists():
            pytest.skip("needs the docs extra (pip install -e .[docs]) to build the site")
        site = tmp_path_factory.mktemp("site")
        subprocess.run(
            [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(site)],
            cwd=ROOT,
            check=True,
            timeout=300,
        )
    return json.loads((site / "search" / "search_index.json").read_text())


def test_every_config_key_is_in_the_search_index(search_index):
    keys = CONFIG_KEY.findall((DOCS / "configuration.md").read_text())
    assert len(keys) > 100, "docs/configuration.md lists fewer keys than expected"
    page = [d for d in search_index["docs"] if d["location"].startswith("configuration/")]
    assert page, "configuration.md is not in the search index"
    text = " ".join(d["title"] + " " + d["text"] for d in page)
    missing = [k for k in keys if k not in text]
    assert not missing, f"config keys the site's search does not find: {missing}"
