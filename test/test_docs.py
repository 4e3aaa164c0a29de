"""The README and docs/ against the code: the transition row table, links and cited paths."""

import os
import re

import pytest

from loco_policy import transition

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, 'README.md')
DOCS = os.path.join(ROOT, 'docs')
PAGES = ('architecture', 'simulator', 'training', 'deployment', 'actuator', 'benchmarks')
"""The docs/ pages, one per part."""
PATH_PREFIXES = ('loco_policy/', 'loco_train/', 'config/', 'launch/', 'docs/', 'test/')
"""Backticked text starting with one of these is a project path that must exist."""
PLACEHOLDER = re.compile(r'[<>*{}…]|\.\.\.|\|')
"""Marks of a pattern or placeholder (`<run>`, `eval_*_ppo.png`, `{a, b}`), not a path."""
HISTORY = re.compile(
    r'\bstop \d+\b|\bissues?\b|\bsessions?\b|\bthis task\b|\bwas lent\b', re.IGNORECASE
)
"""Words about how the project was made, which its documents never use."""
README_MAX_LINES = 250


def read(path):
    """The text of a file."""
    with open(path, encoding='utf-8') as handle:
        return handle.read()


def documents():
    """(path, text) of README.md, every docs/*.md and the shipped policies' README."""
    paths = [README, os.path.join(ROOT, 'loco_policy', 'policies', 'README.md')]
    paths += sorted(os.path.join(DOCS, name) for name in os.listdir(DOCS) if name.endswith('.md'))
    return [(path, read(path)) for path in paths]


def without_code_blocks(text):
    """The text with fenced code blocks removed (inline code stays)."""
    return re.sub(r'^```.*?^```[^\n]*$', '', text, flags=re.MULTILINE | re.DOTALL)


def markdown_table(text, header):
    """Rows (lists of cell strings) of the first table whose header starts with `header`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if line.lstrip().startswith('|') and cells[: len(header)] == list(header):
            rows = []
            for body in lines[i + 2 :]:
                if not body.lstrip().startswith('|'):
                    break
                rows.append([c.strip() for c in body.strip().strip('|').split('|')])
            return rows
    raise AssertionError(f'no table with header {header} found')


def test_transition_row_table_equals_the_code():
    text = read(os.path.join(DOCS, 'architecture.md'))
    rows = markdown_table(text, ('field', 'width'))
    documented = [(name.strip('`'), int(width)) for name, width, *_ in rows]
    assert documented == list(transition.FIELDS)
    widths = re.findall(r'^Row width: (\d+)\s*$', text, flags=re.MULTILINE)
    assert widths == [str(transition.ROW_WIDTH)]
    assert sum(width for _, width in documented) == transition.ROW_WIDTH
    assert transition.SCHEMA in text


def test_markdown_table_parser_refuses_a_missing_table():
    with pytest.raises(AssertionError, match='no table'):
        markdown_table('| name | size |\n|---|---|\n| a | 1 |\n', ('field', 'width'))
    assert markdown_table('x\n| field | width |\n|---|---|\n| `a` | 2 |\n\n', ('field', 'width'))


def test_every_page_exists_and_the_readme_links_each():
    links = re.findall(r'\]\((docs/[^)#\s]+\.md)(?:#[^)]*)?\)', read(README))
    assert {f'docs/{page}.md' for page in PAGES} <= set(links)
    for link in links:
        assert os.path.isfile(os.path.join(ROOT, link)), f'README.md links missing {link}'


def anchors(text):
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to '-'."""
    headings = re.findall(r'^#+ (.+)$', without_code_blocks(text), flags=re.MULTILINE)
    return {re.sub(r'[^\w\- ]', '', h.strip().lower()).replace(' ', '-') for h in headings}


def test_anchors_follow_github():
    text = "# The operator's sequence\n### `/replay/transitions`\n```\n# not a heading\n```"
    assert anchors(text) == {'the-operators-sequence', 'replaytransitions'}


def test_relative_links_and_their_anchors_resolve():
    for path, text in documents():
        for link in re.findall(r'\]\(([^)\s]+)\)', without_code_blocks(text)):
            target, _, anchor = link.partition('#')
            if re.match(r'[a-z]+:', target):
                continue  # a URL
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), target or path))
            where = f'{os.path.relpath(path, ROOT)} links {link}'
            assert os.path.exists(resolved), where
            if anchor:
                assert resolved.endswith('.md') and anchor in anchors(read(resolved)), where


def cited_paths(text):
    """Project paths written in backticks (outside code blocks), placeholders skipped."""
    paths = []
    for span in re.findall(r'`([^`\n]+)`', without_code_blocks(text)):
        token = span.split()[0] if span.split() else ''
        if token.startswith(PATH_PREFIXES) and not PLACEHOLDER.search(token):
            paths.append(token.rstrip('.,:;'))
    return paths


def test_cited_paths_skips_placeholders_and_commands():
    text = '`loco_train/a.py`, `docs/figures/eval_*_ppo.png`, `logs/<run>`, `config/<n>.yaml`'
    text += ', `loco_policy/x.py --flag`, `python -m loco_train.cli`\n```\n`test/in_code.py`\n```'
    assert cited_paths(text) == ['loco_train/a.py', 'loco_policy/x.py']


def test_every_cited_project_path_exists():
    missing = []
    for path, text in documents():
        for cited in cited_paths(text):
            if not os.path.exists(os.path.join(ROOT, cited)):
                missing.append(f'{os.path.relpath(path, ROOT)}: {cited}')
    assert not missing, 'paths cited but absent:\n' + '\n'.join(missing)


def test_readme_is_a_short_front_door():
    lines = read(README).splitlines()
    assert len(lines) <= README_MAX_LINES, f'README.md has {len(lines)} lines'


def test_documents_do_not_speak_of_how_they_were_made():
    found = []
    for path, text in documents():
        for number, line in enumerate(text.splitlines(), 1):
            if HISTORY.search(line):
                found.append(f'{os.path.relpath(path, ROOT)}:{number}: {line.strip()}')
    assert not found, '\n'.join(found)
