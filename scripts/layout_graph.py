#!/usr/bin/env python3
"""The shape of the source tree, measured: file sizes, and the include and
call graphs among the files of one folder (src/core by default).

    scripts/layout_graph.py SOURCE_ROOT ARCHIVE [--dir src/core]
                            [--max-lines 700] [--max-cycle 2] [--report]

How it measures:
  sizes     lines of every .c and .h file under SOURCE_ROOT/src.
  includes  every `#include "dir/name.h"` line of the folder's files; an edge
            from the including file to the header when the header is in the
            folder too (file level: engine.h and engine.c are two nodes).
  calls     from the static archive the build links (`nm -A -P ARCHIVE`): an
            object's undefined symbols against the global symbols another
            object defines. An edge a.c -> b.c says a.c calls (or takes the
            address of, or reads) something b.c defines. Calls through a
            function pointer or a static inline function in a header are not
            seen: the stage-policy table is the engine's one way to a stage,
            and it appears as a reference to the table's symbol.
  cycles    a simple cycle of more than --max-cycle files. Exact, without
            enumerating cycles: inside one strongly connected component, a
            one-way edge u -> v closes a cycle of length >= 3 with the
            shortest path v ~> u; with only two-way edges, a cycle of length
            >= 3 exists where the two-way pairs form an undirected cycle. Only
            --max-cycle 2 (and 1) are supported: the question is whether the
            files call each other only in pairs.
  top       nothing in the archive refers to a symbol --top defines
            (src/core/engine.c: create, build and destroy call the modules,
            no module calls back up).
  offload   the files of src/offload include no header of src/core (the
            offload engine stands below the engine), and src/core reaches
            src/offload through its seams only: homes.h (the homes) and
            offload.h (the pinned pool, the store, host memory limits).

Exit status 0 when the tree keeps the shape, 1 naming every breach, 2 for bad
arguments or an archive that cannot be read. --report also prints the edges
and the largest files.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def fail_usage(msg):
    print("layout_graph.py: " + msg, file=sys.stderr)
    sys.exit(2)


def source_files(root):
    out = []
    for d, _, names in os.walk(os.path.join(root, "src")):
        for n in names:
            if n.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def line_count(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def includes_of(path):
    found = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = INCLUDE.match(line)
            if m:
                found.append(m.group(1))
    return found


def symbol_tables(archive, files):
    """{source file: (defined globals, undefined)} from the archive's objects.
    Meson names an object after its source path with '/' as '_'
    (src/core/grads.c -> src_core_grads.c.o)."""
    by_object = {f.replace("/", "_") + ".o": f for f in files if f.endswith(".c")}
    try:
        p = subprocess.run(["nm", "-A", "-P", archive], capture_output=True, text=True)
    except OSError as e:
        fail_usage("cannot run nm: %s" % e)
    if p.returncode != 0:
        fail_usage("nm %s failed: %s" % (archive, p.stderr.strip()[:500]))
    defined = collections.defaultdict(set)
    undefined = collections.defaultdict(set)
    for line in p.stdout.splitlines():
        head, sep, rest = line.partition("]: ")
        if not sep or "[" not in head:
            continue
        member = os.path.basename(head.split("[", 1)[1])
        src = by_object.get(member)
        if src is None:
            continue
        parts = rest.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined[src].add(name)
        elif kind in "TDBRCVWGS":  # global (upper case) definitions
            defined[src].add(name)
    if not defined:
        fail_usage("%s holds no object of a source under src/" % archive)
    return defined, undefined


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(edges[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            u, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on:
                    low[u] = min(low[u], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[u])
            if low[u] == index[u]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == u:
                        break
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def shortest_path(edges, comp, src, dst):
    prev = {src: None}
    queue = collections.deque([src])
    while queue:
        u = queue.popleft()
        if u == dst:
            path = []
            while u is not None:
                path.append(u)
                u = prev[u]
            return path[::-1]
        for w in sorted(edges[u]):
            if w in comp and w not in prev:
                prev[w] = u
                queue.append(w)
    return None


def long_cycle(edges, comp):
    """A simple cycle of three or more nodes inside the component, or None."""
    comp = set(comp)
    for u in sorted(comp):
        for v in sorted(edges[u] & comp):
            if u not in edges[v]:
                path = shortest_path(edges, comp, v, u)  # v ... u, length >= 2
                return [u] + path
    # Only two-way edges: an undirected cycle among them.
    parent = {}
    for root in sorted(comp):
        if root in parent:
            continue
        parent[root] = None
        stack = [root]
        while stack:
            u = stack.pop()
            for w in sorted(edges[u] & comp):
                if w == parent[u]:
                    continue
                if w in parent:
                    # u ... lca ... w: walk both up to their common ancestor.
                    up_u, a = [], u
                    while a is not None:
                        up_u.append(a)
                        a = parent[a]
                    up_w, b = [], w
                    while b not in up_u:
                        up_w.append(b)
                        b = parent[b]
                    cyc = up_u[:up_u.index(b) + 1] + up_w[::-1]
                    return cyc + [cyc[0]]
                parent[w] = u
                stack.append(w)
    return None


def check_cycles(kind, nodes, edges, max_cycle, why):
    breaches = []
    for comp in sccs(nodes, edges):
        if len(comp) <= max_cycle:
            continue
        cyc = long_cycle(edges, comp)
        if cyc is None:
            continue
        steps = []
        for a, b in zip(cyc, cyc[1:]):
            steps.append("%s -> %s%s" % (a, b, why(a, b)))
        breaches.append("%s cycle of %d files (component of %d: %s):\n    %s" % (
            kind, len(cyc) - 1, len(comp), " ".join(comp), "\n    ".join(steps)))
    return breaches


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("archive")
    ap.add_argument("--dir", default="src/core")
    ap.add_argument("--max-lines", type=int, default=700)
    ap.add_argument("--max-cycle", type=int, default=2)
    ap.add_argument("--top", default="src/core/engine.c")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    if a.max_cycle not in (1, 2):
        fail_usage("--max-cycle takes 1 or 2")
    if a.max_lines < 1:
        fail_usage("--max-lines takes a positive number")
    if not os.path.isdir(os.path.join(a.root, "src")):
        fail_usage("%s has no src/ folder" % a.root)
    if not os.path.isfile(a.archive):
        fail_usage("%s is not a file (build the library first)" % a.archive)

    files = source_files(a.root)
    breaches = []

    sizes = {f: line_count(os.path.join(a.root, f)) for f in files}
    for f in files:
        if sizes[f] > a.max_lines:
            breaches.append("%s has %d lines (more than %d)" % (f, sizes[f], a.max_lines))

    folder = a.dir.rstrip("/") + "/"
    nodes = [f for f in files if f.startswith(folder) and "/" not in f[len(folder):]]
    if not nodes:
        fail_usage("%s holds no source file" % a.dir)
    node_set = set(nodes)

    inc = {n: set() for n in nodes}
    for n in nodes:
        for h in includes_of(os.path.join(a.root, n)):
            target = "src/" + h
            if target in node_set and target != n:
                inc[n].add(target)
    breaches += check_cycles("include", nodes, inc, a.max_cycle, lambda x, y: "")

    defined, undefined = symbol_tables(a.archive, files)
    owner = {}
    for f, syms in defined.items():
        for s in syms:
            owner.setdefault(s, f)
    calls = {n: set() for n in nodes}
    via = collections.defaultdict(list)
    for n in nodes:
        for s in sorted(undefined.get(n, ())):
            o = owner.get(s)
            if o in node_set and o != n:
                calls[n].add(o)
                via[(n, o)].append(s)

    def why(x, y):
        syms = via[(x, y)]
        more = " +%d" % (len(syms) - 3) if len(syms) > 3 else ""
        return " (%s%s)" % (", ".join(syms[:3]), more)

    breaches += check_cycles("call", nodes, calls, a.max_cycle, why)

    if a.top:
        if a.top not in files:
            fail_usage("--top %s is not a source file" % a.top)
        for f in files:
            if f == a.top:
                continue
            up = sorted(s for s in undefined.get(f, ()) if owner.get(s) == a.top)
            if up:
                breaches.append("%s calls up into %s (%s): only the build calls down" % (
                    f, a.top, ", ".join(up[:3])))

    seams = {"offload/homes.h", "offload/offload.h"}
    for f in files:
        for h in includes_of(os.path.join(a.root, f)):
            if f.startswith("src/offload/") and h.startswith("core/"):
                breaches.append("%s includes %s: src/offload stands below the engine" % (f, h))
            if f.startswith("src/core/") and h.startswith("offload/") and h not in seams:
                breaches.append("%s includes %s: src/core reaches src/offload through %s" % (
                    f, h, " and ".join(sorted(seams))))

    if a.report:
        print("largest files:")
        for f in sorted(files, key=lambda x: -sizes[x])[:15]:
            print("  %5d %s" % (sizes[f], f))
        print("includes among %s:" % a.dir)
        for n in nodes:
            if inc[n]:
                print("  %s -> %s" % (n, " ".join(sorted(inc[n]))))
        print("calls among %s:" % a.dir)
        for n in nodes:
            for o in sorted(calls[n]):
                print("  %s -> %s%s" % (n, o, why(n, o)))

    if breaches:
        for b in breaches:
            print("layout: " + b)
        return 1
    print("layout: %d files, none over %d lines; %s: no include or call cycle of more than "
          "%d files%s; src/offload includes nothing of src/core" % (
              len(files), a.max_lines, a.dir, a.max_cycle,
              ", nothing calls into %s" % a.top if a.top else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
