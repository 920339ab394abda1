"""The documentation's examples run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def test_writing_a_plugin_example_runs(capsys) -> None:  # type: ignore[no-untyped-def]
    blocks = _python_blocks(DOCS / "writing-a-plugin.md")
    assert len(blocks) == 3
    module = types.ModuleType("docs_plugin_example")
    sys.modules[module.__name__] = module
    try:
        for block in blocks:
            exec(compile(block, "writing-a-plugin.md", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    assert "example.pointwise (gemm)" in capsys.readouterr().out


def test_readme_quick_start_has_exactly_two_commands() -> None:
    readme = (DOCS.parent / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert [len(c.strip().splitlines()) for c in commands] == [1, 1]
    assert "miocore conv" in commands[0] and "-V 1" in commands[0]
    assert "tox" in commands[1]
    assert commands[1].strip() in (DOCS.parent / ".ci" / "run").read_text()
