"""The authoring guide (docs/authors/) stays true: its examples run, its hook reference is
generated from the code, every hook and record field is documented, and its links resolve."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import miocore
from miocore.solver.registry import reset_default_registry
from miocore.testing import check_contract
from miocore.testing import hookref as testing_hookref

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "authors"
#: Pages whose examples run, in order: later pages build on the quick start's solver.
RUNNABLE = (
    "quickstart.md",
    "contract.md",
    "perf-configs.md",
    "kernels.md",
    "testing.md",
    "troubleshooting.md",
    "versioning.md",
)


def _python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (GUIDE / page).read_text(), flags=re.S)


def _run(page: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Execute a page's Python blocks in order in one module namespace; return it."""
    module = types.ModuleType(f"authors_docs_{page.split('.')[0].replace('-', '_')}")
    module.__dict__.update(namespace or {})
    module.__dict__["__name__"] = module.__name__
    sys.modules[module.__name__] = module  # examples use sys.modules[__name__] as a plugin
    try:
        for i, block in enumerate(_python_blocks(page)):
            exec(compile(block, f"{page} block {i + 1}", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


@pytest.fixture(scope="module")
def quickstart() -> dict[str, Any]:
    return _run("quickstart.md")


def test_every_page_is_listed_and_every_link_resolves() -> None:
    index = (GUIDE / "README.md").read_text()
    pages = sorted(p.name for p in GUIDE.glob("*.md") if p.name != "README.md")
    assert pages == sorted(set(RUNNABLE) | {"hooks.md"})
    for page in ["README.md", *pages]:
        for target in re.findall(r"\]\(([^)#]+\.md)\)", (GUIDE / page).read_text()):
            assert (GUIDE / target).is_file(), f"{page} links to missing {target}"
    for page in pages:
        assert f"]({page})" in index, f"README.md does not list {page}"


def test_hook_reference_is_generated_from_the_hookspecs() -> None:
    page = (GUIDE / "hooks.md").read_text()
    assert page == testing_hookref.render(), (
        "docs/authors/hooks.md is stale: run `python -m miocore.testing.hookref > "
        "docs/authors/hooks.md`"
    )
    for name, _, _ in testing_hookref.hooks():
        assert f"### `{name}(" in page
    for record in testing_hookref.RECORDS:
        assert f"### `miocore.{record.__name__}`" in page


def test_every_hook_and_record_field_is_documented() -> None:
    assert testing_hookref.undocumented() == []


def test_an_undocumented_field_or_hook_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from miocore.solver import hookspecs

    monkeypatch.setattr(hookspecs.KernelSourceRecord, "__doc__", "Declares kernel sources.")
    assert testing_hookref.undocumented() == [
        "KernelSourceRecord.name",
        "KernelSourceRecord.path",
        "KernelSourceRecord.builder",
    ]

    def miocore_new_things(self):  # type: ignore[no-untyped-def]
        pass

    monkeypatch.setattr(
        hookspecs.MiocoreSpecs, "miocore_new_things", miocore_new_things, raising=False
    )
    assert "hook miocore_new_things" in testing_hookref.undocumented()


def test_quickstart_examples_run(quickstart: dict[str, Any], capsys: Any) -> None:
    assert quickstart["best"].solver == "quick.pointwise"
    assert "quick.pointwise: contract kept on" in quickstart["report"].summary()


def test_quickstart_commands_name_real_files() -> None:
    text = (GUIDE / "quickstart.md").read_text()
    assert "python plugins/_template/render.py" in text
    assert (ROOT / "plugins" / "_template" / "render.py").is_file()
    assert "tox -e template" in text and "[testenv:template]" in (ROOT / "tox.ini").read_text()


def test_contract_page_example_runs(capsys: Any) -> None:
    _run("contract.md")
    assert "breaks the correctness rule on forward" in capsys.readouterr().out


def test_contract_page_lists_every_rule() -> None:
    text = (GUIDE / "contract.md").read_text()
    for rule in (
        "registration",
        "is_applicable",
        "workspace_size",
        "perf_config",
        "correctness",
        "wti",
        "inapplicable",
    ):
        assert f"| `{rule}` |" in text


def test_perf_config_page_example_tunes_and_stores() -> None:
    ns = _run("perf-configs.md")
    assert ns["entry"] is not None


def test_kernels_page_example_runs() -> None:
    ns = _run("kernels.md")
    assert ns["info"].kernel_name == "sliding_direct_fwd"


def test_testing_page_examples_run(quickstart: dict[str, Any], tmp_path: Path) -> None:
    ns = _run("testing.md", {"miocore": miocore, "PointwiseSolver": quickstart["PointwiseSolver"]})
    assert ns["pytest_plugins"] == ["miocore.testing"]
    contract_class = ns["TestMySolverContract"]
    report = check_contract(contract_class.solver, tolerance=ns["bound"], use_corpus=False)
    assert report.directions == ("forward",)

    def handle_factory(*solvers: Any) -> miocore.Handle:
        return miocore.Handle(
            "cpu",
            registry=miocore.Registry.from_solvers(solvers),
            user_db_path=tmp_path / "user",
            system_db_path=tmp_path / "system",
        )

    ns["test_find_picks_my_solver"](handle_factory)


def test_troubleshooting_page_examples_run() -> None:
    try:
        ns = _run("troubleshooting.md")
    finally:
        reset_default_registry()
    assert "doc.broken" in ns["handle"].last_report.failed


def test_versioning_page_example_runs() -> None:
    _run("versioning.md")
