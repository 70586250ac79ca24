"""The README and the documentation site: their examples run, their links and includes
resolve, the site builds with warnings as errors, and no figure in their prose is one
that the results files they show do not hold.

Conventions checked here (docs/index.md states them for readers):
- every ```python block runs, in a fresh interpreter, unless its first line is
  ``# not run: <why>``; blocks under a ``<!-- test: ... -->`` marker are the tutorial's
  programs, run by tests/test_cli_settings.py, and may appear only there;
- ``<!-- include: PATH -->`` lines name committed files (docs/hooks.py expands them);
- on a page that includes results, every decimal figure of the prose appears, with its
  sign if it has one, in the files that page includes; the README's figures appear in
  the results files it links to.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
TUTORIAL = DOCS / "new-environment.md"
README_MAX_LINES = 150
GYMNASIUM_SECTIONS = ["Description", "Observation", "Action", "Rewards", "Episode end",
                      "Arguments", "Version history"]
NOT_RUN = "# not run:"

# A decimal figure as prose and tables write it: 0.412, +0.044, 7.39e-06, 1.638.
FIGURE = re.compile(r"(?<![\w.+-])([+-]?)(\d+\.\d+(?:e[+-]?\d+)?)(?![\w.]*\d)")
MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def load_hooks():
    """docs/hooks.py as MkDocs loads it: by path (it is not a package module)."""
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = load_hooks()


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def fenced_blocks(path: Path) -> list[dict]:
    """Every fenced block of a Markdown file: its language, code, first line number and
    the ``<!-- test: ... -->`` marker on the line above it ("" when none)."""
    blocks, lines, i = [], path.read_text(encoding="utf-8").split("\n"), 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        indent, start = opening[1], i
        marker = re.match(r"^\s*<!-- test: (.*?) -->\s*$", lines[i - 1]) if i else None
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):])
            i += 1
        blocks.append({"path": path, "line": start + 1, "lang": opening[2],
                       "code": "\n".join(body) + "\n", "marker": marker[1] if marker else ""})
        i += 1
    return blocks


def all_blocks() -> list[dict]:
    return [block for path in markdown_files() for block in fenced_blocks(path)]


def runnable_python() -> list[dict]:
    return [b for b in all_blocks() if b["lang"] == "python" and not b["marker"]
            and not b["code"].startswith(NOT_RUN)]


def block_id(block: dict) -> str:
    return f"{block['path'].relative_to(ROOT)}:{block['line']}"


def prose(markdown: str) -> str:
    """The text a reader reads as sentences and tables: without fenced code, inline code,
    HTML comments, link targets, math and mkdocstrings directives."""
    markdown = re.sub(r"^([ \t]*)```.*?^\1```", "", markdown, flags=re.S | re.M)
    markdown = re.sub(r"<!--.*?-->", "", markdown, flags=re.S)
    markdown = re.sub(r"^:::.*(\n {4}.*)*", "", markdown, flags=re.M)
    markdown = re.sub(r"`[^`\n]*`", "", markdown)
    markdown = re.sub(r"\\\(.*?\\\)|\\\[.*?\\\]", "", markdown, flags=re.S)
    return re.sub(r"\]\([^)]*\)", "]", markdown)


def figures(text: str) -> list[tuple[str, str]]:
    """(sign, number) of every decimal figure in ``text``."""
    return FIGURE.findall(text)


def unsupported_figures(text: str, sources: str) -> list[str]:
    """Figures of ``text`` that ``sources`` does not hold: an unsigned figure must appear
    with any sign, a signed one with its sign."""
    held = set(figures(sources))
    unsigned = {number for _, number in held}
    return [sign + number for sign, number in figures(text)
            if (sign and (sign, number) not in held) or (not sign and number not in unsigned)]


# -- the README ----------------------------------------------------------------------------
def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; keep it to {README_MAX_LINES} and move detail to docs/")


def readme_links() -> list[str]:
    targets = MARKDOWN_LINK.findall(README.read_text(encoding="utf-8"))
    return [t for t in targets if not re.match(r"[a-z]+:|#", t)]


def test_every_relative_link_of_the_readme_resolves():
    links = readme_links()
    assert links, "the README links into docs/ and to its results files"
    missing = [t for t in links if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_readme_quotes_only_figures_of_the_results_files_it_links():
    linked = [ROOT / t for t in readme_links()
              if t.startswith(hooks.RESULTS + "/") and t.endswith(".md")]
    assert linked, "the README names the results file beside each headline figure"
    sources = "\n".join(p.read_text(encoding="utf-8") for p in linked)
    wrong = unsupported_figures(prose(README.read_text(encoding="utf-8")), sources)
    assert not wrong, (f"README.md quotes figures that none of its linked results files "
                       f"hold (copy them as they stand there): {wrong}")


def test_the_readme_shows_the_three_headline_plots():
    images = [t for t in re.findall(r"!\[[^\]]*\]\(([^)]+)\)",
                                    README.read_text(encoding="utf-8"))]
    for plot in ("demo_learning_curve.png", "harness_compare/forest.png",
                 "harness_routing/routing_set_size.png"):
        assert any(i.endswith(plot) for i in images), f"README.md does not show {plot}"


# -- the code blocks -----------------------------------------------------------------------
@pytest.mark.parametrize("block", runnable_python(), ids=block_id)
def test_every_python_block_runs(block, tmp_path):
    """A fresh interpreter per block, in an empty folder, with its own index cache, so a
    block can rely on nothing but the installed packages and the embedded defaults."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SRPO_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-c", block["code"]], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{block_id(block)} failed:\n{result.stderr[-3000:]}"


def test_blocks_that_do_not_run_say_why_and_markers_stay_in_the_tutorial():
    blocks = all_blocks()
    assert len(runnable_python()) >= 8, "the README and the env pages have runnable examples"
    for block in blocks:
        if block["code"].startswith(NOT_RUN):
            reason = block["code"].split("\n", 1)[0][len(NOT_RUN):].strip()
            assert reason, f"{block_id(block)}: say why after '{NOT_RUN}'"
        if block["marker"]:
            # tests/test_cli_settings.py runs the tutorial's marked programs, and only those
            assert block["path"] == TUTORIAL, (
                f"{block_id(block)}: <!-- test: ... --> blocks are run only in "
                f"{TUTORIAL.name}; use a plain ```python block (run by this file)")


def test_srpo_commands_in_the_docs_parse():
    """Every ``srpo ...`` line of a bash block is a command the CLI accepts."""
    from srpo_agents.cli import build_parser

    commands = []
    for block in all_blocks():
        if block["lang"] not in ("bash", "sh"):
            continue
        for line in block["code"].replace("\\\n", " ").split("\n"):
            words = shlex.split(line, comments=True)
            for separator in ("|", "&&", ";"):
                words = words[:words.index(separator)] if separator in words else words
            if words[:1] == ["srpo"]:
                commands.append((block_id(block), words[1:]))
    assert len(commands) >= 10
    for where, argv in commands:
        try:
            build_parser().parse_args(argv)
        except SystemExit as exit_:
            raise AssertionError(f"{where}: `srpo {shlex.join(argv)}` does not parse "
                                 f"(exit {exit_.code})") from None


# -- the pages -----------------------------------------------------------------------------
def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def page_uri(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def test_every_include_marker_names_a_committed_file_and_expands():
    markers = 0
    for page in doc_pages():
        markdown = page.read_text(encoding="utf-8")
        for path in hooks.include_paths(markdown):
            markers += 1
            assert (ROOT / path).is_file(), f"{page_uri(page)}: <!-- include: {path} --> " \
                                            f"names no file"
        expanded = hooks.expand_includes(markdown, page_uri(page))
        assert not hooks.INCLUDE.search(expanded), f"{page_uri(page)}: a marker is left"
    assert markers >= 20


def test_every_committed_results_table_is_shown_in_the_docs():
    included = {path for page in doc_pages()
                for path in hooks.include_paths(page.read_text(encoding="utf-8"))}
    tables = {p.relative_to(ROOT).as_posix() for p in hooks.published_results()
              if p.suffix == ".md"}
    missing = sorted(tables - included)
    assert not missing, (f"results tables no docs page includes (add an "
                         f"<!-- include: ... --> line to docs/results.md): {missing}")


def test_prose_figures_of_a_measured_page_appear_in_its_included_files():
    checked = 0
    for page in doc_pages():
        markdown = page.read_text(encoding="utf-8")
        paths = hooks.include_paths(markdown)
        if not paths:
            continue
        checked += 1
        sources = "\n".join(hooks.render_file(p, page_uri(page)) for p in paths)
        wrong = unsupported_figures(prose(markdown), sources)
        assert not wrong, (f"docs/{page_uri(page)} quotes figures that its included "
                           f"results files do not hold: {wrong}")
    assert checked >= 5


@pytest.mark.parametrize("page", ["math", "search", "countdown"])
def test_env_pages_have_the_gymnasium_sections(page):
    markdown = (DOCS / "envs" / f"{page}.md").read_text(encoding="utf-8")
    sections = [text for level, text in hooks.headings(markdown) if level == 2]
    assert sections == GYMNASIUM_SECTIONS


def test_the_algorithm_page_names_every_registered_objective():
    from srpo_agents.learning.objective import (
        ADVANTAGE_ESTIMATORS,
        ALGORITHMS,
        KAPPAS,
        POLICY_LOSSES,
    )

    markdown = (DOCS / "algorithm.md").read_text(encoding="utf-8")
    for name in [*ALGORITHMS, *ADVANTAGE_ESTIMATORS, *POLICY_LOSSES, *KAPPAS]:
        assert f"`{name}`" in markdown, f"docs/algorithm.md does not describe `{name}`"


# -- the include hook itself ---------------------------------------------------------------
def test_an_include_drops_the_title_nests_headings_and_rebases_links(tmp_path):
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "t.md").write_text("# Title\n\n| a |\n|---|\n| 0.5 |\n\n## Part\n\n"
                                  "See [other](other.md) and [site](https://x.org).\n"
                                  "```text\n# not a heading\n```\n")
    page = "# Page\n\n## Section\n\n<!-- include: benchmarks/results/t.md -->\n"
    out = hooks.expand_includes(page, "sub/page.md", repo=tmp_path)
    assert "Title" not in out and "| 0.5 |" in out
    assert "\n### Part\n" in out                         # under the page's ## Section
    assert "[other](../results/other.md)" in out         # relative to docs/sub/page.md
    assert "[site](https://x.org)" in out and "\n# not a heading\n" in out


def test_an_include_of_a_missing_file_or_an_unpublished_link_fails(tmp_path):
    with pytest.raises(hooks.IncludeError, match="does not exist"):
        hooks.expand_includes("<!-- include: benchmarks/results/none.md -->\n", "p.md",
                              repo=tmp_path)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "t.md").write_text("[code](../../setup.py)\n")
    with pytest.raises(hooks.IncludeError, match="does not publish"):
        hooks.expand_includes("<!-- include: benchmarks/results/t.md -->\n", "p.md",
                              repo=tmp_path)


def test_a_json_include_is_a_table_of_its_top_level_figures(tmp_path):
    (tmp_path / "r.json").write_text('{"episodes": 10000, "growth_mb": 0.34765625, '
                                     '"readings": [[0, 1.0]], "machine": "x86_64"}')
    out = hooks.expand_includes("<!-- include: r.json -->\n", "p.md", repo=tmp_path)
    assert "| `episodes` | 10,000 |" in out and "| `growth_mb` | 0.3477 |" in out
    assert "readings" not in out and "| `machine` | x86_64 |" in out


def test_the_figure_check_catches_a_changed_or_resigned_figure():
    table = "| srpo | +0.044 ± 0.011 | 0.386 |"
    assert unsupported_figures("gained +0.044 from 0.386", table) == []
    assert unsupported_figures("gained 0.044", table) == []
    assert unsupported_figures("gained +0.045", table) == ["+0.045"]
    assert unsupported_figures("lost -0.044", table) == ["-0.044"]
    assert unsupported_figures(prose("`lr 0.2` in code"), table) == []  # prose only
    assert unsupported_figures(prose("```text\n0.2\n```\n"), table) == []


# -- the site ------------------------------------------------------------------------------
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    missing = [m for m in ("mkdocs", "material", "mkdocstrings_handlers.python")
               if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        pytest.skip(f"the docs extra is not installed ({', '.join(missing)}); `make docs` "
                    f"installs it and builds the site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                             "--config-file", str(ROOT / "mkdocs.yml"),
                             "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    site = tmp_path / "site"
    assert (site / "results" / "harness_compare" / "forest.png").is_file()
    comparison = (site / "comparison" / "index.html").read_text(encoding="utf-8")
    assert "<!-- include:" not in comparison and "The noise floor" in comparison
    assert "srpo_envs.transition.Transition" in (site / "api" / "index.html").read_text(
        encoding="utf-8")
