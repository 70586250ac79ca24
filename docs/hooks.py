"""MkDocs hooks: the measured pages are built from the committed results, never pasted.

- ``on_files`` publishes the committed ``benchmarks/results/`` plots and tables under
  ``results/`` in the site, so pages show them without copies in ``docs/``.
- ``on_page_markdown`` replaces each marker line ``<!-- include: PATH -->`` (a path from
  the repository root) with that file's content: a Markdown file without its ``#``
  title, its headings moved down to sit under the heading the marker stands under, or
  a JSON file's top-level figures as a table. A missing file stops the build. A rerun
  of a benchmark therefore updates every page that shows it.

The functions below the hooks take plain strings and paths, so ``tests/test_docs.py``
checks the same expansion without MkDocs.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = "benchmarks/results"
SITE_RESULTS = "results"
# Published from benchmarks/results/: the plots and the tables. Run folders, warm-start
# checkpoints and raw rows stay in the repository.
PUBLISHED_SUFFIXES = (".png", ".md")
SKIPPED_FOLDERS = {"runs", "warmstart", "before"}

INCLUDE = re.compile(r"^<!-- include: (?P<path>\S+) -->$", re.MULTILINE)
HEADING = re.compile(r"^(#{1,6}) ")
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")


class IncludeError(Exception):
    """An include marker whose file is missing or cannot be shown."""


# -- MkDocs hooks -------------------------------------------------------------------------
def on_files(files, config):
    from mkdocs.structure.files import File, InclusionLevel

    for path in published_results():
        src_uri = site_path(path.relative_to(REPO).as_posix())
        files.append(File.generated(config, src_uri, abs_src_path=str(path),
                                    inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def on_page_markdown(markdown, page, config, files):
    from mkdocs.exceptions import PluginError

    try:
        return expand_includes(markdown, page.file.src_uri)
    except IncludeError as error:
        raise PluginError(f"docs/{page.file.src_uri}: {error}") from error


# -- the expansion ------------------------------------------------------------------------
def published_results() -> list[Path]:
    """The committed result files the site publishes, in a stable order."""
    root = REPO / RESULTS
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and p.suffix in PUBLISHED_SUFFIXES
                  and not SKIPPED_FOLDERS & set(p.relative_to(root).parts[:-1]))


def site_path(repo_path: str) -> str | None:
    """Where a repository file under benchmarks/results/ lives in the site, else None."""
    if not repo_path.startswith(RESULTS + "/"):
        return None
    return SITE_RESULTS + repo_path[len(RESULTS):]


def include_paths(markdown: str) -> list[str]:
    """The repository paths a page's include markers name, in order."""
    return [m["path"] for m in INCLUDE.finditer(markdown)]


def expand_includes(markdown: str, page_uri: str, repo: Path = REPO) -> str:
    """``markdown`` with every include marker replaced by the file it names.

    ``page_uri`` is the page's path inside ``docs/``: links in an included file are
    rewritten to be relative to that page."""

    def replace(match: re.Match) -> str:
        level = heading_level_at(markdown[:match.start()])
        return render_file(match["path"], page_uri, repo, level)

    return INCLUDE.sub(replace, markdown)


def headings(markdown: str) -> list[tuple[int, str]]:
    """(level, text) of the ATX headings of ``markdown``, skipping fenced code (where a
    ``# comment`` is not a heading)."""
    found, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append((len(match[1]), line[match.end():].strip()))
    return found


def heading_level_at(markdown_before: str) -> int:
    """The level of the last heading before a point of a page (1 when there is none)."""
    levels = [level for level, _ in headings(markdown_before)]
    return levels[-1] if levels else 1


def render_file(repo_path: str, page_uri: str, repo: Path = REPO, level: int = 2) -> str:
    """The Markdown that replaces the include marker of ``repo_path`` on the page
    ``page_uri``, under a heading of ``level``."""
    path = repo / repo_path
    if not path.is_file():
        raise IncludeError(f"<!-- include: {repo_path} --> names a file that does not "
                           f"exist ({path}); rerun the benchmark that writes it or fix "
                           f"the path")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json_table(text, repo_path)
    if path.suffix != ".md":
        raise IncludeError(f"<!-- include: {repo_path} -->: only .md and .json files can "
                           f"be included")
    return rebase_links(demote(text, level), repo_path, page_uri)


def demote(markdown: str, level: int) -> str:
    """Drop a leading ``# title`` (the including page's heading stands for it) and move
    every other heading down so that the file's ``##`` lands at ``level + 1``."""
    lines = markdown.lstrip("\n").split("\n")
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    shift = level - 1
    out, fenced = [], False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            depth = min(len(match[1]) + shift, 6)
            line = "#" * depth + " " + line[match.end():]
        out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def rebase_links(markdown: str, repo_path: str, page_uri: str) -> str:
    """Relative links of a file at ``repo_path``, rewritten for the page at ``page_uri``:
    a link to another published result points at its copy in the site."""
    source_dir = posixpath.dirname(repo_path)
    page_dir = posixpath.dirname(page_uri)

    def rebase(match: re.Match) -> str:
        target = match[2]
        if re.match(r"[a-z]+:|#|/", target):
            return match[0]
        path, _, anchor = target.partition("#")
        published = site_path(posixpath.normpath(posixpath.join(source_dir, path)))
        if published is None:
            raise IncludeError(f"{repo_path} links to {target}, which the site does not "
                               f"publish")
        relative = posixpath.relpath(published, page_dir or ".")
        return f"{match[1]}{relative}{'#' + anchor if anchor else ''}{match[3]}"

    return LINK.sub(rebase, markdown)


def json_table(text: str, repo_path: str) -> str:
    """A JSON result's top-level figures (numbers, strings, booleans) as a two-column
    table; lists and nested objects are left to the file itself."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise IncludeError(f"{repo_path}: expected a JSON object at the top level")
    rows = ["| field | value |", "|---|---:|"]
    for key, value in data.items():
        if isinstance(value, bool) or isinstance(value, str):
            rows.append(f"| `{key}` | {value} |")
        elif isinstance(value, int):
            rows.append(f"| `{key}` | {value:,} |")
        elif isinstance(value, float):
            rows.append(f"| `{key}` | {value:.4g} |")
    return "\n".join(rows) + f"\n\nFrom `{repo_path}`.\n"
