#!/usr/bin/env python3
"""scripts/layout_graph.py on small made-up trees: it must pass a tree with
no cycle longer than two files and fail - naming the files - a call cycle of
three (one-way, and made of two-way pairs), an include cycle, a file over the
line limit, a call up into the top file, and an include across the offload
seam. Objects are compiled with the C compiler given and archived with ar,
the way the build archives the library, so the calls are read from real
symbol tables.

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


# The shape the engine has: engine.c on top calling the modules, modules
# calling down, a base below them; one pair calling each other.
good = {
    "src/core/engine.c": fn("create", ["a_build", "b_build"]),
    "src/core/a.c": fn("a_build", ["base_alloc", "b_help"]),
    "src/core/b.c": fn("b_build", ["base_alloc"]) + fn("b_help", ["c_pair"]),
    "src/core/c.c": fn("c_pair", ["b_build"]),
    "src/core/base.c": fn("base_alloc"),
    "src/core/x.h": '#include "core/y.h"\n',
    "src/core/y.h": "\n",
    "src/offload/home.c": fn("home_read", [], ["offload/homes.h"]),
    "src/offload/homes.h": "\n",
}
check("the engine's shape", good, 0, ["none over 700 lines", "no include or call cycle"])

three = dict(good)
three["src/core/c.c"] = fn("c_pair", ["a_build"])  # a -> b -> c -> a
check("a call cycle of three", three, 1,
      ["call cycle of 3 files", "src/core/a.c -> src/core/b.c", "src/core/c.c -> src/core/a.c"])

pairs = dict(good)  # a <-> b, b <-> c, c <-> a: only pairs, yet a circle of three
pairs["src/core/a.c"] = fn("a_build", ["b_help", "c_pair"])
pairs["src/core/b.c"] = fn("b_build") + fn("b_help", ["a_build", "c_pair"])
pairs["src/core/c.c"] = fn("c_pair", ["a_build", "b_help"])
check("a circle of two-way pairs", pairs, 1, ["call cycle of 3 files"])

inc = dict(good)
inc["src/core/y.h"] = '#include "core/z.h"\n'
inc["src/core/z.h"] = '#include "core/x.h"\n'
check("an include cycle", inc, 1, ["include cycle of 3 files", "src/core/z.h -> src/core/x.h"])

big = dict(good)
big["src/core/base.c"] = fn("base_alloc") + "/* a line */\n" * 700
check("a file over the limit", big, 1, ["src/core/base.c has 704 lines (more than 700)"])
check("the limit is an option", big, 0, args=["--max-lines", "704"])

up = dict(good)
up["src/core/base.c"] = fn("base_alloc", ["create"])
check("a call up into the top", up, 1,
      ["src/core/base.c calls up into src/core/engine.c (create)"])

offload_up = dict(good)
offload_up["src/offload/home.c"] = fn("home_read", [], ["core/x.h"])
check("offload including the engine", offload_up, 1,
      ["src/offload/home.c includes core/x.h: src/offload stands below the engine"])

core_in = dict(good)
core_in["src/offload/home_pool.h"] = "\n"
core_in["src/core/a.c"] = fn("a_build", ["base_alloc", "b_help"], ["offload/home_pool.h"])
check("the engine past the offload seam", core_in, 1,
      ["src/core/a.c includes offload/home_pool.h"])

rc, out = run(good, "--max-cycle", "3")
if rc != 2 or "--max-cycle takes 1 or 2" not in out:
    failures.append("--max-cycle 3: exit %d:\n%s" % (rc, out))

for r in roots:
    shutil.rmtree(r, ignore_errors=True)
if failures:
    print("\n".join(failures))
    sys.exit(1)
print("layout_graph.py: 10 cases as expected")
