"""Fail when any two modules of ``miocore`` import each other, directly or through others.

The layers contract in ``pyproject.toml`` (``lint-imports``) keeps the rooms in order; this
check keeps the modules inside each room free of circles too. Run from the repository root.
"""

from __future__ import annotations

import sys

import grimp


def cycles(package: str = "miocore") -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    # An import under TYPE_CHECKING (for annotations only) never runs: not a circle.
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def main() -> int:
    sys.path.insert(0, ".")
    found = cycles()
    for group in found:
        print("import circle: " + " <-> ".join(group))
    print(f"{len(found)} import circles")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
