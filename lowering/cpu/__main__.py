"""``python -m tr_mlir.lowering.cpu``: print the kernel registry as a Markdown table."""

from __future__ import annotations

from tr_mlir.lowering.cpu import KERNELS, KernelSpec


def _arrays(spec: KernelSpec, names: tuple[str, ...]) -> str:
    return ", ".join(f"{n}?" if n in spec.optional else n for n in names) or "-"


def table() -> str:
    """One row per kernel: name, kind, read arrays, written arrays, workspaces, static params
    (optional arrays end in ``?``; aliases of one function share their row's contents)."""
    rows = ["| kernel | kind | reads | writes | workspaces | params |", "| --- | --- | --- | --- | --- | --- |"]
    for name in sorted(KERNELS):
        s = KERNELS[name]
        params = ", ".join(f"{p}={s.defaults[p]!r}" if p in s.defaults else p for p in s.params) or "-"
        rows.append(f"| `{name}` | {s.kind} | {_arrays(s, s.reads)} | {_arrays(s, s.outputs)} | "
                    f"{_arrays(s, s.workspaces)} | {params} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
