"""The README as a newcomer reads it: the first commands, the order of the Telegram steps, its contents, every
sub-command the CLI has (read from bot/cli.py's argparse calls), what is not supported, its pictures."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _code_blocks(kind: str = "sh") -> list[str]:
    return [body for lang, body in _FENCE.findall(README) if lang == kind]


def _prose() -> str:
    """The README without its fenced blocks (a `# comment` in a block is no heading)."""
    return _FENCE.sub("", README)


def _section(title: str) -> str:
    prose = _prose()
    start = prose.index(f"\n## {title}\n")
    end = prose.find("\n## ", start + 1)
    return prose[start : end if end > 0 else None]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _cli() -> dict[str, tuple[set[str], set[str]]]:
    """Each sub-command in bot/cli.py -> (its positional choices, its --options), from the argparse calls;
    the options every command shares under the name "*"."""
    tree = ast.parse((REPO / "bot" / "cli.py").read_text())
    names: dict[str, str] = {}  # variable -> sub-command
    found: dict[str, tuple[set[str], set[str]]] = {"*": (set(), set())}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        first = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        if node.func.attr == "add_parser" and isinstance(first, str):
            found.setdefault(first, (set(), set()))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            call = node.value
            if isinstance(call.func, ast.Attribute) and call.func.attr == "add_parser":
                target = node.targets[0]
                name = call.args[0]
                if isinstance(target, ast.Name) and isinstance(name, ast.Constant):
                    names[target.id] = str(name.value)
    names["common"] = "*"
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in names
        ):
            continue
        choices_of, options = found[names[node.func.value.id]]
        first = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        if isinstance(first, str) and first.startswith("--"):
            options.add(first)
        for keyword in node.keywords:
            if keyword.arg == "choices" and isinstance(keyword.value, ast.List) and first == "action":
                choices_of.update(str(e.value) for e in keyword.value.elts if isinstance(e, ast.Constant))
    return found


def test_the_other_commands_list_every_sub_command_action_and_option_of_the_cli() -> None:
    """Every `add_parser` of bot/cli.py is named as `toolnexus-bot NAME`, its actions (`audit checkpoint`,
    `db upgrade`) and every option it takes are in "Command line"."""
    cli = _cli()
    assert {"run", "check", "console", "audit", "db", "keygen"} <= cli.keys()
    section = _section("Command line")
    for command, (actions, options) in cli.items():
        if command != "*":
            assert f"`toolnexus-bot {command}" in section, command
        for action in actions:
            assert f"{command} {action}" in section, (command, action)
        for option in options:
            assert option in section, (command, option)


def test_the_first_command_is_the_console_and_the_second_runs_the_tests() -> None:
    """The first command block runs the bridge in the terminal with no token; the second is `bash .ci/run`."""
    first, second = _code_blocks()[:2]
    assert "toolnexus-bot console" in first and "TELEGRAM_BOT_TOKEN" not in first
    assert second.strip() == "bash .ci/run"


def test_the_user_id_is_found_before_the_command_that_needs_it() -> None:
    """How to learn your Telegram user id comes before the first command that asks for it."""
    needs_it = README.index("TOOLNEXUS_ALLOWED_USERS=<")
    assert README.index("@userinfobot") < needs_it
    assert README.index("Your Telegram user id is") < needs_it


def test_the_contents_link_every_section_the_operations_guide_and_the_changelog() -> None:
    """Every `##` section is in the contents, every contents link leads to a heading, and the operations
    guide and the changelog are linked and there."""
    contents = _section("Contents")
    headings = re.findall(r"^#{2,4} (.+)$", _prose(), re.MULTILINE)
    anchors = {_slug(h) for h in headings}
    linked = set(re.findall(r"\]\(#([^)]+)\)", contents))
    assert linked <= anchors, linked - anchors
    sections = {_slug(h) for h in re.findall(r"^## (.+)$", _prose(), re.MULTILINE)} - {"contents"}
    assert sections <= linked, sections - linked
    for document in ("deploy/README.md", "CHANGELOG.md"):
        assert f"]({document})" in contents and (REPO / document).is_file(), document


def test_what_is_not_supported_is_said() -> None:
    """Sampling, roots, MCP Apps and tasks are listed as not supported."""
    section = _section("What is not supported")
    for feature in ("Sampling", "Roots", "MCP Apps", "Tasks"):
        assert f"**{feature}**" in section, feature


def test_every_picture_is_in_the_repository_and_the_chat_is_one_of_them() -> None:
    """The README's images exist; one is the chat screenshot, beside the Mini App's."""
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert "tests/telegram/chat-deploy.png" in pictures and "tests/web/miniapp-form.png" in pictures
    for picture in pictures:
        assert (REPO / picture).is_file(), picture


def test_the_docker_check_passes_the_token_check_needs() -> None:
    """`check` validates the config as `run` does, token included: the Docker example passes it."""
    checks = [
        line
        for block in _code_blocks()
        for line in block.splitlines()
        if "docker run" in line and " check" in line
    ]
    assert checks and all("-e TELEGRAM_BOT_TOKEN" in line for line in checks), checks


DOCS = [
    REPO / "README.md",
    REPO / "CONTRIBUTING.md",
    REPO / "bench" / "README.md",
    REPO / "deploy" / "README.md",
]
DOCS += sorted((REPO / "docs").glob("*.md"))
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (fenced blocks left out; a repeated heading gets -1, -2)."""
    text = _FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        slug = _slug(re.sub(r"`|\*\*", "", heading))
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_every_link_of_the_readme_and_the_docs_leads_to_a_file_and_heading_that_are_there() -> None:
    """Each relative link in README.md, CONTRIBUTING.md, docs/, bench/README.md and deploy/README.md names a
    file in the repository and, with `#anchor`, one of that file's headings."""
    broken = []
    for doc in DOCS:
        for target in _LINK.findall(_FENCE.sub("", doc.read_text())):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            where = (doc.parent / path).resolve() if path else doc
            if not where.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_is_for_users_and_operators_about_400_lines() -> None:
    """Contributor material lives in CONTRIBUTING.md and docs/: the README stays a newcomer's read."""
    assert len(README.splitlines()) <= 450


def test_no_document_or_module_points_at_a_design_section_that_is_not_in_the_repository() -> None:
    """A reference to a design section by number named a document that is not shipped: docs/ says it instead."""
    mark = "DESIGN " + "§"
    sources = [
        *REPO.glob("*.md"),
        *REPO.glob("docs/*.md"),
        *REPO.glob("bot/**/*.py"),
        *REPO.glob("tests/**/*.py"),
    ]
    assert [str(p.relative_to(REPO)) for p in sources if mark in p.read_text()] == []


def test_the_glossary_says_each_of_the_houses_own_words_in_one_line() -> None:
    glossary = (REPO / "docs" / "glossary.md").read_text()
    for word in ("Book", "Keeper", "Flight", "Vet", "Lean", "fold", "taps", "round", "partition", "epoch"):
        assert re.search(rf"^- \*\*{word}\*\*", glossary, re.MULTILINE), word


def test_the_complexity_exceptions_are_counted_as_many_as_the_code_has() -> None:
    """The docs and pyproject's comment say how many functions carry the complexity `noqa`: as many as there are."""
    words = {
        1: "one",
        2: "two",
        3: "three",
        4: "four",
        5: "five",
        6: "six",
        7: "seven",
        8: "eight",
        9: "nine",
        10: "ten",
    }
    code = [*REPO.glob("bot/**/*.py"), *REPO.glob("mapping/**/*.py"), *REPO.glob("tests/**/*.py")]
    count = sum(p.read_text().count("noqa: " + "C901") for p in [*code, *REPO.glob("bench/**/*.py")])
    said = {
        "pyproject.toml": (REPO / "pyproject.toml").read_text(),
        "CONTRIBUTING.md": (REPO / "CONTRIBUTING.md").read_text(),
        "docs/architecture.md": (REPO / "docs" / "architecture.md").read_text(),
    }
    for name, text in said.items():
        assert re.search(rf"\b{words[count]}\s+(above 15|exceptions)", text), name
