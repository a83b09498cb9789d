#!/usr/bin/env python3
"""The newcomer's install, end to end.

1. `meson install --destdir TMP` of the build under test; the library and
   zeroc.pc must land in the multiarch libdir on a Debian-like system (not
   lib64), and the program the README shows (the ```c block after the marker
   comment naming this script) must build with exactly
   `cc hello.c $(pkg-config --cflags --libs zeroc)` against that copy and run.
2. A fresh `meson setup` of the source with a dpkg-architecture that fails
   (as on a machine without dpkg-dev, where meson falls back to lib64) must
   still install the library under lib/<multiarch>.

Usage: check_install.py BUILD_DIR SOURCE_DIR SANITIZE CC [CC_ARGS...]
(SANITIZE is the build's b_sanitize: the test program is built with the same
sanitizers, since an ASan library cannot be loaded by a program without them).
Exits 0 on success, 77 (skip) when pkg-config is missing, 1 on a failure.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

MARKER = "tests/cli/check_install.py"


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if p.returncode != 0:
        fail("%s exited %d:\n%s%s" % (" ".join(map(shlex.quote, cmd)), p.returncode, p.stdout,
                                      p.stderr))
    return p


def multiarch(cc):
    p = subprocess.run(cc + ["-print-multiarch"], capture_output=True, text=True)
    ma = p.stdout.strip() if p.returncode == 0 else ""
    return ma if ma and "/" not in ma and os.path.isdir("/usr/lib/" + ma) else ""


def readme_program(src):
    text = open(os.path.join(src, "README.md"), encoding="utf-8").read()
    i = text.find(MARKER)
    if i < 0:
        fail("README.md has no program marked for " + MARKER)
    m = re.search(r"```c\n(.*?)```", text[i:], re.S)
    if not m:
        fail("README.md: no ```c block after the marker")
    return m.group(1)


def check_installed(build, src, sanitize, cc, ma, tmp):
    dest = os.path.join(tmp, "dest")
    run(["meson", "install", "-C", build, "--no-rebuild", "--destdir", dest])
    opts = {o["name"]: o["value"] for o in json.loads(
        run(["meson", "introspect", build, "--buildoptions"]).stdout)}
    prefix = opts["prefix"]
    root = dest + prefix
    pcs = []
    for d, _, files in os.walk(dest):
        pcs += [os.path.join(d, f) for f in files if f == "zeroc.pc"]
    if len(pcs) != 1:
        fail("expected one installed zeroc.pc under %s, found %s" % (dest, pcs))
    pcdir = os.path.dirname(pcs[0])
    libdir = os.path.dirname(pcdir)
    rel = os.path.relpath(libdir, root)
    if ma and rel != "lib/" + ma:
        fail("library installed in %s/%s; expected %s/lib/%s (Debian multiarch)"
             % (prefix, rel, prefix, ma))
    if not os.path.exists(os.path.join(libdir, "libzeroc.so")):
        fail("no libzeroc.so beside zeroc.pc in " + libdir)
    # A CUDA build's plugin goes beside the library, where libzeroc looks for
    # it (src/cuda_plugin/load.h).
    plugin = os.path.exists(os.path.join(build, "libzeroc_cuda.so"))
    if plugin and not os.path.isfile(os.path.join(libdir, "libzeroc_cuda.so")):
        fail("no libzeroc_cuda.so beside libzeroc.so in " + libdir)
    # And the GPU Adam bench where `zeroc bench adam --device cuda` runs it
    # from (tools/cmd_bench_adam_cuda.c: libexecdir/zeroc).
    if os.path.exists(os.path.join(build, "bench", "gpu_adam", "bench_gpu_adam")):
        gpu_bench = os.path.join(root, opts["libexecdir"], "zeroc", "bench_gpu_adam")
        if not os.access(gpu_bench, os.X_OK):
            fail("no executable %s for `zeroc bench adam --device cuda`" % gpu_bench)

    hello = os.path.join(tmp, "hello.c")
    with open(hello, "w", encoding="utf-8") as f:
        f.write(readme_program(src))
    env = dict(os.environ, PKG_CONFIG_PATH=pcdir)
    # The .pc names the final prefix; the copy under --destdir stands in for it.
    flags = run(["pkg-config", "--define-variable=prefix=" + root, "--cflags", "--libs", "zeroc"],
                env=env).stdout
    if "-I" + root not in flags or "-L" + libdir not in flags:
        fail("pkg-config --cflags --libs zeroc gave %r; expected -I%s/... and -L%s"
             % (flags.strip(), root, libdir))
    exe = os.path.join(tmp, "hello")
    san = ["-fsanitize=" + sanitize] if sanitize and sanitize != "none" else []
    run(cc + [hello] + shlex.split(flags) + san + ["-o", exe])
    out = run([exe], env=dict(os.environ, LD_LIBRARY_PATH=libdir)).stdout
    if "ZeRO stage 3" not in out:
        fail("the README program printed %r" % out)
    print("ok: installed in %s/%s%s, README program: %s"
          % (prefix, rel, " with libzeroc_cuda.so" if plugin else "", out.strip()))


def check_without_dpkg(src, ma, tmp):
    if not ma:
        print("skip: not a Debian-like multiarch system")
        return
    fake = os.path.join(tmp, "fakebin")
    os.mkdir(fake)
    false = shutil.which("false")
    os.symlink(false, os.path.join(fake, "dpkg-architecture"))
    env = dict(os.environ, PATH=fake + os.pathsep + os.environ.get("PATH", ""))
    b = os.path.join(tmp, "build-nodpkg")
    run(["meson", "setup", b, src, "-Dtests=disabled", "-Dcuda=disabled", "-Dnccl=disabled",
         "-Dmpi=disabled", "-Db_sanitize=none"], env=env)
    opts = {o["name"]: o["value"] for o in json.loads(
        run(["meson", "introspect", b, "--buildoptions"]).stdout)}
    inst = json.loads(run(["meson", "introspect", b, "--installed"]).stdout)
    libs = [dst for dst in inst.values() if os.path.basename(dst) == "libzeroc.so"]
    pcs = [dst for dst in inst.values() if os.path.basename(dst) == "zeroc.pc"]
    want = os.path.join(opts["prefix"], "lib", ma)
    if len(libs) != 1 or os.path.dirname(libs[0]) != want:
        fail("without dpkg-architecture (meson's libdir %s) libzeroc.so installs to %s; "
             "expected %s" % (opts["libdir"], libs, want))
    if len(pcs) != 1 or os.path.dirname(pcs[0]) != os.path.join(want, "pkgconfig"):
        fail("without dpkg-architecture zeroc.pc installs to %s; expected %s/pkgconfig"
             % (pcs, want))
    print("ok: without dpkg-architecture (meson's libdir %s) the library installs to %s"
          % (opts["libdir"], want))


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        return 2
    build, src, sanitize = sys.argv[1], sys.argv[2], sys.argv[3]
    cc = sys.argv[4:]
    if not shutil.which("pkg-config"):
        print("skip: pkg-config not installed")
        return 77
    ma = multiarch(cc)
    with tempfile.TemporaryDirectory(prefix="zc_install.") as tmp:
        check_installed(build, src, sanitize, cc, ma, tmp)
        check_without_dpkg(src, ma, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
