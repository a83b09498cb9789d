#!/usr/bin/env python3
"""scripts/layout_graph.py on small made-up trees: it must pass a tree of
the engine's shape and fail - naming the files - a call cycle of three
(one-way, and made of two-way pairs), an include cycle, a file over the line
limit, a call up into the top file, a folder of src/ or of src/core that is
not a room, a file loose in src/core, a room of src/core calling up, a room
header declaring another room's function, an include of a higher layer and
one past a seam (src/offload, src/plan, from tools/ too); a cycle in a room
of CYCLES_LEFT passes. Objects are compiled with the C compiler given and
archived with ar, the way the build archives the library, so the calls are
read from real symbol tables.

usage: check_layout_graph.py LAYOUT_GRAPH_PY CC [CC_ARGS...]"""
import os
import shutil
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]
CC = sys.argv[2:]
failures = []
roots = []


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def fn(name, calls=(), includes=()):
    """A source defining name() that calls each of calls()."""
    lines = ['#include "%s"' % h for h in includes]
    lines += ["void %s(void);" % c for c in calls]
    lines += ["void %s(void);" % name, "void %s(void)" % name, "{"]
    lines += ["    %s();" % c for c in calls]
    lines += ["}"]
    return "\n".join(lines) + "\n"


def tree(files):
    """A tree with src/<path> for each entry, its objects in an archive named
    as meson names them (src/core/a.c -> src_core_a.c.o). Returns (root,
    archive)."""
    root = tempfile.mkdtemp(prefix="zc-layout-")
    roots.append(root)
    for path, text in files.items():
        write(root, path, text)
    objs = []
    for path in files:
        if path.endswith(".c"):
            obj = os.path.join(root, path.replace("/", "_") + ".o")
            subprocess.run(CC + ["-c", "-I", os.path.join(root, "src"),
                                 os.path.join(root, path), "-o", obj], check=True)
            objs.append(obj)
    archive = os.path.join(root, "libzc.a")
    subprocess.run(["ar", "rcs", archive] + objs, check=True)
    return root, archive


def run(files, *args):
    root, archive = tree(files)
    p = subprocess.run([sys.executable, SCRIPT, root, archive] + list(args),
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def check(name, files, want_rc, needles=(), args=()):
    rc, out = run(files, *args)
    if rc != want_rc:
        failures.append("%s: exit %d, expected %d:\n%s" % (name, rc, want_rc, out))
        return
    for n in needles:
        if n not in out:
            failures.append("%s: %r missing from:\n%s" % (name, n, out))


# The shape the engine has: engine.c on top calling the rooms, rooms calling
# down, common below them; one pair calling each other; the planner below the
# engine behind its seam.
good = {
    "src/core/engine.h": "\n",
    "src/core/engine/engine.c": fn("create", ["a_build", "b_build"]),
    "src/core/loop/a.c": fn("a_build", ["base_alloc", "b_help"]) + fn("zc__a_helper"),
    "src/core/state/b.c": fn("b_build", ["base_alloc"]) + fn("b_help", ["c_pair"]),
    "src/core/state/c.c": fn("c_pair", ["b_build"]),
    "src/core/common/base.c": fn("base_alloc", [], ["plan/plan.h"]),
    "src/core/state/x.h": '#include "core/state/y.h"\n',
    "src/core/state/y.h": "\n",
    "src/offload/home.c": fn("home_read", [], ["offload/homes.h"]),
    "src/offload/homes.h": "\n",
    "src/plan/plan.h": "\n",
    "src/plan/p.c": fn("plan_bytes", ["plan_rule"], ["plan/plan.h", "offload/homes.h"]),
    "src/plan/q.c": fn("plan_rule"),
    "tools/t.c": fn("cli", [], ["plan/plan.h", "core/engine.h"]),
}
check("the engine's shape", good, 0, ["none over 700 lines", "no include or call cycle",
                                      "engine > step > loop > state > observe > common"])

three = dict(good)
three["src/core/state/c.c"] = fn("c_pair", ["a_build"])  # a -> b -> c -> a
check("a call cycle of three", three, 1,
      ["call cycle of 3 files", "src/core/loop/a.c -> src/core/state/b.c",
       "src/core/state/c.c -> src/core/loop/a.c"])

pairs = dict(good)  # a <-> b, b <-> c, c <-> a: only pairs, yet a circle of three
pairs["src/core/state/a.c"] = pairs.pop("src/core/loop/a.c")
pairs["src/core/state/a.c"] = fn("a_build", ["b_help", "c_pair"])
pairs["src/core/state/b.c"] = fn("b_build") + fn("b_help", ["a_build", "c_pair"])
pairs["src/core/state/c.c"] = fn("c_pair", ["a_build", "b_help"])
check("a circle of two-way pairs", pairs, 1, ["call cycle of 3 files"])

inc = dict(good)
inc["src/core/state/y.h"] = '#include "core/state/z.h"\n'
inc["src/core/state/z.h"] = '#include "core/state/x.h"\n'
check("an include cycle", inc, 1,
      ["include cycle of 3 files", "src/core/state/z.h -> src/core/state/x.h"])

big = dict(good)
big["src/core/common/base.c"] = fn("base_alloc") + "/* a line */\n" * 700
check("a file over the limit", big, 1, ["src/core/common/base.c has 704 lines (more than 700)"])
check("the limit is an option", big, 0, args=["--max-lines", "704"])

up = dict(good)
up["src/core/common/base.c"] = fn("base_alloc", ["create"])
check("a call up into the top", up, 1,
      ["src/core/common/base.c calls up into src/core/engine/engine.c (create)"])

room_up = dict(good)
room_up["src/core/common/base.c"] = fn("base_alloc", ["b_help"])
check("a room of src/core calling up", room_up, 1,
      ["src/core/common/base.c calls up into src/core/state: "
       "src/core/common/base.c -> src/core/state/b.c (b_help)"])

decl = dict(good)
decl["src/core/state/y.h"] = "void zc__a_helper(void);\n"
check("a room header declaring another room's function", decl, 1,
      ["src/core/state/y.h declares zc__a_helper, which src/core/loop/a.c defines"])

unknown = dict(good)
unknown["src/stray/l.c"] = fn("stray_one")
check("a folder that is not a room", unknown, 1,
      ["src/stray is not a room the layout knows"])

loose = dict(good)
loose["src/core/d.c"] = fn("d_loose")
check("a file loose in src/core", loose, 1, ["src/core/d.c sits in src/core outside its rooms"])

misc = dict(good)
misc["src/core/misc/m.c"] = fn("m_misc")
check("a folder of src/core that is not a room", misc, 1,
      ["src/core/misc is not a room of src/core"])

offload_up = dict(good)
offload_up["src/offload/home.c"] = fn("home_read", [], ["core/engine.h"])
check("offload including the engine", offload_up, 1,
      ["src/offload/home.c includes core/engine.h: src/core (layer 4) stands above "
       "src/offload (layer 2)"])

plan_up = dict(good)
plan_up["src/plan/p.c"] = fn("plan_bytes", [], ["core/engine.h"])
check("the planner including the engine", plan_up, 1,
      ["src/plan/p.c includes core/engine.h: src/core (layer 4) stands above src/plan"])

core_in = dict(good)
core_in["src/offload/home_pool.h"] = "\n"
core_in["src/core/loop/a.c"] = fn("a_build", ["base_alloc", "b_help"], ["offload/home_pool.h"])
check("the engine past the offload seam", core_in, 1,
      ["src/core/loop/a.c includes offload/home_pool.h: src/offload is reached through "
       "offload/homes.h and offload/offload.h"])

tools_in = dict(good)
tools_in["src/plan/internal.h"] = "\n"
tools_in["tools/t.c"] = fn("cli", [], ["plan/internal.h"])
check("the CLI past the planner's seam", tools_in, 1,
      ["tools/t.c includes plan/internal.h: src/plan is reached through plan/plan.h"])

plan_cycle = dict(good)
plan_cycle["src/plan/q.c"] = fn("plan_rule", ["plan_fit"])
plan_cycle["src/plan/r.c"] = fn("plan_fit", ["plan_bytes"])
check("a call cycle in the planner", plan_cycle, 1,
      ["call cycle of 3 files", "src/plan/r.c -> src/plan/p.c"])

left = dict(good)  # config holds a cycle already (CYCLES_LEFT)
left["src/config/a.c"] = fn("cfg_a", ["cfg_b"])
left["src/config/b.c"] = fn("cfg_b", ["cfg_c"])
left["src/config/c.c"] = fn("cfg_c", ["cfg_a"])
check("a cycle in a room that still holds one", left, 0)

rc, out = run(good, "--max-cycle", "3")
if rc != 2 or "--max-cycle takes 1 or 2" not in out:
    failures.append("--max-cycle 3: exit %d:\n%s" % (rc, out))

for r in roots:
    shutil.rmtree(r, ignore_errors=True)
if failures:
    print("\n".join(failures))
    sys.exit(1)
print("layout_graph.py: 19 cases as expected")
