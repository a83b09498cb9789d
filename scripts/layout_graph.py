#!/usr/bin/env python3
"""The shape of the source tree, measured: file sizes, the rooms of src/ and
their layers and seams, and the include and call graphs inside them.

    scripts/layout_graph.py SOURCE_ROOT ARCHIVE [--max-lines 700]
                            [--max-cycle 2] [--top FILE] [--report]

The rooms. Every folder of src/ is a room of ROOMS below: a layer and the
seam headers through which the files of other rooms (and tools/) reach it.
A new concept gets a folder of its own with one seam header and an entry
here (DEVELOPERS.md, "Rooms"); older rooms grew several seams. src/core is
split into the rooms of CORE_ROOMS, ordered from the top (the engine's
lifecycle) down; its seam for the rooms above it is core/engine.h, which
includes the headers of its rooms.

How it measures:
  sizes     lines of every .c and .h file under SOURCE_ROOT/src.
  rooms     every folder of src/ is in ROOMS; every file of src/core sits in
            one of CORE_ROOMS (but core/engine.h, the seam).
  layers    a file includes headers of its own room and of rooms of a lower
            or the same layer only (tools/ stands above every room).
  seams     a file outside a room includes, of that room, its seam headers
            only.
  includes  every `#include "dir/name.h"` line; an edge from the including
            file to the header (file level: engine.h and engine.c are two
            nodes), for the cycle check among the files of one room.
  calls     from the static archive the build links (`nm -A -P ARCHIVE`): an
            object's undefined symbols against the global symbols another
            object defines. An edge a.c -> b.c says a.c calls (or takes the
            address of, or reads) something b.c defines. Calls through a
            function pointer or a static inline function in a header are not
            seen: the stage-policy table is the engine's one way to a stage,
            and it appears as a reference to the table's symbol.
  cycles    in each room (src/core as one, its rooms together), no include
            or call cycle of more than --max-cycle files (CYCLES_LEFT names
            the two older rooms that still hold one). Exact, without
            enumerating cycles: inside one strongly connected component, a
            one-way edge u -> v closes a cycle of length >= 3 with the
            shortest path v ~> u; with only two-way edges, a cycle of length
            >= 3 exists where the two-way pairs form an undirected cycle. Only
            --max-cycle 2 (and 1) are supported: the question is whether the
            files call each other only in pairs.
  core      a room of src/core calls only into itself and the rooms after it
            in CORE_ROOMS; a header of a room of src/core declares only
            functions its own room defines.
  top       nothing in the archive refers to a symbol --top defines
            (src/core/engine/engine.c: create, build and destroy call the
            rooms, no room calls back up).

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

# room: (layer, seam headers; None: every header is a seam). A room includes
# only rooms of its layer or below; tools/ includes any room's seams.
ROOMS = {
    "base": (0, None),  # status, errors, logging, env, checked arithmetic, files
    "config": (1, ["config/config.h", "config/scheduler.h", "config/internal.h"]),
    # The machine: devices, communicators, optimizer kernels, the offload
    # engine, the lazily loaded CUDA part (they call each other's seams).
    "device": (2, ["device/device.h", "device/cuda_guard.h"]),
    "comm": (2, ["comm/comm.h", "comm/bootstrap.h", "comm/mpi.h", "comm/nccl.h",
                 "comm/rendezvous.h"]),
    "optim": (2, ["optim/adam.h", "optim/adam_pace.h", "optim/lion.h", "optim/adagrad.h"]),
    "offload": (2, ["offload/homes.h", "offload/offload.h"]),
    "cuda_plugin": (2, ["cuda_plugin/load.h"]),
    # The timeline and the comms logger: the engine and the machine rooms
    # write into it, so it stands beside them, below the engine.
    "trace": (2, ["trace/trace.h"]),
    # Quantized communication (ZeRO++ qwZ, qgZ): DeepSpeed's integer groups,
    # a machine-level transform beside the communicators that move them.
    "quant": (2, ["quant/quant.h"]),
    "plan": (3, ["plan/plan.h"]),
    # The activation store: the engine reserves it at build and the planner
    # counts it, so it stands below both callers (it drives src/offload's
    # activation homes; src/act/act.h says why).
    "act": (3, ["act/act.h"]),
    "core": (4, ["core/engine.h"]),
    "zero1": (5, ["zero1/zero1.h"]),
    "zero2": (5, ["zero2/zero2.h"]),
    "zero3": (5, ["zero3/zero3.h"]),
    "ckpt": (5, ["ckpt/dirwrite.h", "ckpt/format.h", "ckpt/source.h", "ckpt/ring_mem.h",
                  "ckpt/export.h"]),
    # Importing weights: safetensors into the shards (it drives an engine).
    "load": (5, ["load/load.h"]),
}
TOOLS_LAYER = 9
# Rooms whose files are not yet cycle-free, with the cycle they hold; every
# other room keeps the cycle rule. Do not add to it: break the cycle.
CYCLES_LEFT = {
    # config.c -> apply.c -> load.c -> bigint.c -> config.c
    "config": "the key walk and the big-integer messages",
    # nvme_open.c -> nvme_engine.c -> nvme_store.c -> nvme_open.c
    "offload": "the NVMe store's open, engine and requests",
}

# The rooms of src/core, from the top down: each calls only itself and the
# rooms after it.
CORE_ROOMS = ["engine", "step", "loop", "state", "observe", "common"]
CORE_SEAM = "src/core/engine.h"

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# A function declared at column 0 of a header: its name.
DECLARED = re.compile(r"^(?!static|typedef|#|/|\s)[A-Za-z_][\w\s\*]*?\b(zc_\w+)\s*\(")


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


def tool_files(root):
    """The CLI's sources (tools/), which stand above every room."""
    d = os.path.join(root, "tools")
    if not os.path.isdir(d):
        return []
    return sorted(os.path.relpath(os.path.join(d, n), root) for n in os.listdir(d)
                  if n.endswith((".c", ".h")))


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
    (src/core/loop/grads.c -> src_core_loop_grads.c.o)."""
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


def room_of(f):
    """The room of a path under src/ ("core", "plan", ...), or None."""
    parts = f.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "src" else None


def core_room_of(f):
    """The room of src/core a file sits in, or None (core/engine.h, or a file
    outside src/core)."""
    parts = f.split("/")
    if len(parts) > 3 and parts[:2] == ["src", "core"]:
        return parts[2]
    return None


def check_rooms(files):
    breaches = []
    folders = sorted({room_of(f) for f in files if room_of(f)})
    for d in folders:
        if d not in ROOMS:
            breaches.append("src/%s is not a room the layout knows: give it one seam header "
                            "and add it to ROOMS in scripts/layout_graph.py with its layer "
                            "(DEVELOPERS.md, \"Rooms\")" % d)
    for f in files:
        if room_of(f) != "core" or f == CORE_SEAM:
            continue
        r = core_room_of(f)
        if r is None:
            breaches.append("%s sits in src/core outside its rooms (%s)" % (
                f, ", ".join(CORE_ROOMS)))
        elif r not in CORE_ROOMS:
            breaches.append("src/core/%s is not a room of src/core (%s): add it to CORE_ROOMS "
                            "at its place in the order" % (r, ", ".join(CORE_ROOMS)))
    return breaches


def check_layers_and_seams(root, files, tools):
    breaches = []
    for f in files + tools:
        mine = room_of(f)
        layer = ROOMS[mine][0] if mine in ROOMS else (TOOLS_LAYER if f in tools else None)
        if layer is None:
            continue
        for h in includes_of(os.path.join(root, f)):
            theirs = h.split("/")[0]
            if theirs == mine or theirs not in ROOMS:
                continue
            their_layer, seams = ROOMS[theirs]
            if their_layer > layer:
                breaches.append("%s includes %s: src/%s (layer %d) stands above src/%s "
                                "(layer %d)" % (f, h, theirs, their_layer, mine, layer))
            elif seams is not None and h not in seams:
                breaches.append("%s includes %s: src/%s is reached through %s" % (
                    f, h, theirs, " and ".join(seams)))
    return breaches


def graphs(root, nodes, defined, undefined, owner):
    node_set = set(nodes)
    inc = {n: set() for n in nodes}
    for n in nodes:
        for h in includes_of(os.path.join(root, n)):
            target = "src/" + h
            if target in node_set and target != n:
                inc[n].add(target)
    calls = {n: set() for n in nodes}
    via = collections.defaultdict(list)
    for n in nodes:
        for s in sorted(undefined.get(n, ())):
            o = owner.get(s)
            if o in node_set and o != n:
                calls[n].add(o)
                via[(n, o)].append(s)
    return inc, calls, via


def why_of(via):
    def why(x, y):
        syms = via[(x, y)]
        more = " +%d" % (len(syms) - 3) if len(syms) > 3 else ""
        return " (%s%s)" % (", ".join(syms[:3]), more)
    return why


def check_core(root, files, calls, why, owner):
    """Calls among src/core's rooms go down CORE_ROOMS; a room's headers
    declare what the room defines."""
    breaches = []
    rank = {r: i for i, r in enumerate(CORE_ROOMS)}
    for a in sorted(calls):
        ra = core_room_of(a)
        for b in sorted(calls[a]):
            rb = core_room_of(b)
            if ra in rank and rb in rank and rank[rb] < rank[ra]:
                breaches.append("%s calls up into src/core/%s: %s -> %s%s" % (
                    a, rb, a, b, why(a, b)))
    for f in files:
        r = core_room_of(f)
        if not f.endswith(".h") or r not in rank:
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = DECLARED.match(line)
                if not m:
                    continue
                o = owner.get(m.group(1))
                if o and core_room_of(o) != r:
                    breaches.append("%s declares %s, which %s defines: it belongs in a header "
                                    "of src/core/%s" % (f, m.group(1), o, core_room_of(o)))
    return breaches


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("archive")
    ap.add_argument("--max-lines", type=int, default=700)
    ap.add_argument("--max-cycle", type=int, default=2)
    ap.add_argument("--top", default="src/core/engine/engine.c")
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
    tools = tool_files(a.root)
    breaches = []

    sizes = {f: line_count(os.path.join(a.root, f)) for f in files}
    for f in files:
        if sizes[f] > a.max_lines:
            breaches.append("%s has %d lines (more than %d)" % (f, sizes[f], a.max_lines))

    breaches += check_rooms(files)
    breaches += check_layers_and_seams(a.root, files, tools)

    defined, undefined = symbol_tables(a.archive, files)
    owner = {}
    for f, syms in defined.items():
        for s in syms:
            owner.setdefault(s, f)

    report = []
    for room in sorted({room_of(f) for f in files if room_of(f)}):
        nodes = [f for f in files if room_of(f) == room]
        inc, calls, via = graphs(a.root, nodes, defined, undefined, owner)
        why = why_of(via)
        if room not in CYCLES_LEFT:
            breaches += check_cycles("include", nodes, inc, a.max_cycle, lambda x, y: "")
            breaches += check_cycles("call", nodes, calls, a.max_cycle, why)
        if room == "core":
            breaches += check_core(a.root, nodes, calls, why, owner)
            report = [(n, inc[n], calls[n], why) for n in nodes]

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

    if a.report:
        print("largest files:")
        for f in sorted(files, key=lambda x: -sizes[x])[:15]:
            print("  %5d %s" % (sizes[f], f))
        print("includes among src/core:")
        for n, inc_n, _, _ in report:
            if inc_n:
                print("  %s -> %s" % (n, " ".join(sorted(inc_n))))
        print("calls among src/core:")
        for n, _, calls_n, why in report:
            for o in sorted(calls_n):
                print("  %s -> %s%s" % (n, o, why(n, o)))

    if breaches:
        for b in breaches:
            print("layout: " + b)
        return 1
    rooms = sorted({room_of(f) for f in files if room_of(f)})
    print("layout: %d files, none over %d lines; %d rooms (%s), each included through its "
          "seams and only from its layer or above; src/core in %d rooms (%s) calling only "
          "down; no include or call cycle of more than %d files in any room but %s%s" % (
              len(files), a.max_lines, len(rooms), ", ".join(rooms), len(CORE_ROOMS),
              " > ".join(CORE_ROOMS), a.max_cycle, " and ".join(sorted(CYCLES_LEFT)),
              "; nothing calls into %s" % a.top if a.top else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
