#!/usr/bin/env python3
"""Import circles between the modules of each crate, and between its folders (`make lint`).

Every source file under crates/*/src is a module. A file depends on another when it names it:
`crate::a::b` (the file of module a::b, or a's own file when b is an item of it), `super::x`
(a sibling module x, or an item of the parent's file) and `self::x` / a bare `x::` naming a child
module it declares. A child's declaration in its parent (`mod x;`) is not a dependency: the parent
holds it; a child naming its parent's items (implementing the trait its parent defines) is
containment too, except for a binary's main.rs, which nothing should reach back into; a library's root (lib.rs) is its facade of re-exports, so naming it is not an edge
either (a binary's main.rs is a module like any other). Test modules (`#[cfg(test)] mod tests` to the end of a file) are left out. Prints each
circle as `a -> b -> a` and exits 1 when there is one.

Floors, not only circles: inside every folder, its files and sub-folders are taken each as one
piece (a sub-folder with all it holds), and the pieces must not import each other in a circle
either, so that each folder stands above what it uses (sheaf-pg's `cluster/` under `connect/`
under `repo/` ...). And a module never names one of the crate root's re-exports (`crate::Error`
where `crate::error::Error` is meant): the root stands above every module, so that import would
run back up to it.

    scripts/module-cycles.py [crates/core ...]   # default: every crate
"""
import os
import re
import sys


def module_files(src):
    """Module path (tuple of names) -> file, for one crate's src folder."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            mods[tuple(parts)] = os.path.join(dirpath, f)
    return mods


def strip(text):
    """The file without line comments, doc comments and its test module."""
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests\b", text)[0]
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def resolve(mods, path):
    """The longest prefix of `path` that is a module."""
    path = tuple(path)
    while path and path not in mods:
        path = path[:-1]
    return path if path in mods else None


def edges(mods):
    out = {m: set() for m in mods}
    for m, file in mods.items():
        text = strip(open(file, encoding="utf-8").read())
        is_dir_module = os.path.basename(file) in ("mod.rs", "lib.rs", "main.rs")
        # The module a `super::` in this file starts from.
        here = m if is_dir_module else m
        parent = here[:-1]
        refs = []
        for mt in re.finditer(r"\bcrate((?:::\w+)+)", text):
            refs.append(mt.group(1).strip(":").split("::"))
        for mt in re.finditer(r"\bsuper((?:::\w+)+)", text):
            refs.append(list(parent) + mt.group(1).strip(":").split("::"))
        for mt in re.finditer(r"\bself((?:::\w+)+)", text):
            refs.append(list(here) + mt.group(1).strip(":").split("::"))
        # Grouped imports: `use crate::{a::X, b}` and `use super::{x, y::Z}`.
        for mt in re.finditer(r"\buse\s+(crate|super|self)::\{([^}]*)\}", text):
            base = [] if mt.group(1) == "crate" else list(parent) if mt.group(1) == "super" else list(here)
            for item in mt.group(2).split(","):
                item = item.strip().split(" as ")[0]
                if item:
                    refs.append(base + item.split("::"))
        # A child declared here, named bare (`child::Item`).
        for child in [k for k in mods if len(k) == len(here) + 1 and k[: len(here)] == here]:
            if re.search(r"(?<![\w:])" + re.escape(child[-1]) + r"::", text):
                refs.append(list(child))
        for r in refs:
            target = resolve(mods, r)
            if target is None or target == m:
                continue
            # A library's root is its facade (`crate::Error` names a re-export): not an edge.
            if target == () and os.path.basename(mods[()]) == "lib.rs":
                continue
            # Passing through an ancestor's path is not using it. Naming an ancestor's own item is
            # the pattern of a concept and its implementations (codec.rs holds the Codec trait and
            # its factory; codec/zstd.rs implements the trait): containment, not a circle. Only a
            # binary's root is held to it, since nothing should reach back into main.rs.
            if target == m[: len(target)] and (len(r) <= len(target) or target != () or os.path.basename(mods[()]) == "lib.rs"):
                continue
            out[m].add(target)
    return out


def root_reexports(mods):
    """Names the library root (lib.rs) re-exports with `pub use`."""
    if () not in mods or os.path.basename(mods[()]) != "lib.rs":
        return set()
    text = strip(open(mods[()], encoding="utf-8").read())
    names = set()
    for mt in re.finditer(r"pub use [\w:]+::\{([^}]*)\};", text):
        names.update(i.strip().split(" as ")[-1] for i in mt.group(1).split(",") if i.strip())
    for mt in re.finditer(r"pub use [\w:]+::(\w+)(?: as (\w+))?;", text):
        names.add(mt.group(2) or mt.group(1))
    return names


def through_root(mods, names):
    """(module, name) for each module that names a re-export of the crate root."""
    found = []
    # A name that is also a module (`crate::restore` the module beside `restore` the function) is
    # read as the module.
    names = {n for n in names if (n,) not in mods}
    if not names:
        return found
    pat = re.compile(r"\bcrate::(" + "|".join(sorted(names)) + r")\b")
    grp = re.compile(r"\buse\s+crate::\{([^}]*)\}")
    for m, file in mods.items():
        if m == ():
            continue
        text = strip(open(file, encoding="utf-8").read())
        hits = set(pat.findall(text))
        for g in grp.finditer(text):
            hits.update(i.strip() for i in g.group(1).split(",") if i.strip() in names)
        found.extend((m, n) for n in sorted(hits))
    return found


def folder_graphs(mods, graph):
    """For each folder (a module with children), its pieces and the imports between them: each
    child module with everything under it is one piece."""
    out = {}
    for folder in mods:
        children = {k[: len(folder) + 1] for k in mods if len(k) > len(folder) and k[: len(folder)] == folder}
        if len(children) < 2:
            continue
        piece = lambda m: m[: len(folder) + 1] if len(m) > len(folder) and m[: len(folder)] == folder else None
        g = {c: set() for c in children}
        for a, targets in graph.items():
            pa = piece(a)
            if pa is None:
                continue
            for b in targets:
                pb = piece(b)
                if pb is not None and pb != pa:
                    g[pa].add(pb)
        out[folder] = g
    return out


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def name(m):
    return "::".join(m) or "(crate root)"


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crates = sys.argv[1:] or sorted(os.path.join("crates", c) for c in os.listdir(os.path.join(root, "crates")))
    bad = 0
    for c in crates:
        src = os.path.join(root, c, "src")
        if not os.path.isdir(src):
            continue
        mods = module_files(src)
        graph = edges(mods)
        for comp in cycles(graph):
            bad += 1
            members = set(comp)
            detail = "; ".join(f"{name(a)} -> {', '.join(sorted(name(b) for b in graph[a] if b in members))}" for a in sorted(comp))
            print(f"{c}: import circle among {len(comp)} modules: {detail}")
        for folder, g in sorted(folder_graphs(mods, graph).items()):
            for comp in cycles(g):
                bad += 1
                members = set(comp)
                detail = "; ".join(f"{name(a)} -> {', '.join(sorted(name(b) for b in g[a] if b in members))}" for a in sorted(comp))
                print(f"{c}: the folders and files of {name(folder)} import each other in a circle (one cannot stand above the other): {detail}")
        for m, n in through_root(mods, root_reexports(mods)):
            bad += 1
            print(f"{c}: {os.path.relpath(mods[m], root)} names crate::{n}, the crate root's re-export: name the module that defines it (the root stands above every module)")
    if bad:
        sys.exit(1)
    print(f"no import circles in {len(crates)} crates, between modules or between the folders of one")


if __name__ == "__main__":
    main()
