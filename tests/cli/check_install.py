#!/usr/bin/env python3
"""The newcomer's install, and an outside program built with pkg-config alone.

The outside program is tests/cli/outside_trainer.c: a few parameters trained
at stage 0 and stage 3 on two ranks, printing the final master's checksum
(and its distance from a plain AdamW loop it computes itself). The same
source built inside the tree (--in-tree) is the reference: every outside
build must print the same lines, and stage 0 and stage 3 the same checksum.

1. `meson install --destdir` of the build under test: the library and
   zeroc.pc in the multiarch libdir on a Debian-like system (not lib64),
   every installed link resolving (libzeroc.so -> .so.0 -> the file whose
   SONAME is libzeroc.so.0), `--tags runtime,devel` installing the same
   files, the CUDA plugin beside the library when it was built, and the GPU
   Adam bench where the CLI runs it from. Against that copy, through
   PKG_CONFIG_SYSROOT_DIR and `pkg-config --cflags --libs zeroc` only: the
   README's program (the ```c block after the marker naming this script)
   and the outside trainer build and run, the trainer mapping the installed
   libzeroc; with a CUDA build and a stand-in NVIDIA driver (--fake-driver),
   asking for a GPU loads the installed plugin, beside the installed library.
2. The same trainer against the build tree, with
   PKG_CONFIG_PATH=BUILD/meson-uninstalled (meson's zeroc-uninstalled.pc).
3. Unless the build under test is a sanitizer build (whose run of this test
   covers 1 and 2; a second library build there would double the cost): a
   fresh library-only build, -Dexamples=false -Dtools=false
   -Dtests=disabled -Dcuda=disabled, configured without dpkg-architecture on
   a Debian-like system (as on a machine without dpkg-dev, where meson falls
   back to lib64). It must define no program, build in one `ninja`, install
   exactly the library, its links, the header and zeroc.pc under
   lib/<multiarch>, with `pkg-config --variable=libdir` naming that
   directory; the outside trainer built against it prints the reference's
   lines, and asking it for a GPU says the build has no CUDA. In a sanitizer
   build only the configure-time part runs (the install locations).

Usage: check_install.py --build DIR --source DIR --sanitize B_SANITIZE
  --buildtype T --in-tree EXE [--fake-driver DIR] -- CC [CC_ARGS...]
(the outside programs are built with the build's sanitizers, since an ASan
library cannot be loaded by a program without them).
Exits 0 on success, 77 (skip) when pkg-config is missing, 1 on a failure.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

MARKER = "tests/cli/check_install.py"
TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "outside_trainer.c")


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
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


def options(build):
    return {o["name"]: o["value"] for o in json.loads(
        run(["meson", "introspect", build, "--buildoptions"]).stdout)}


def tree(root):
    """Every file and link under root: relative path -> link target or None."""
    out = {}
    for d, dirs, files in os.walk(root):
        for f in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = os.readlink(p) if os.path.islink(p) else None
    return out


def check_links(root, libdir, what):
    """Every link resolves inside root, and the library's chain is the usual
    one: libzeroc.so -> libzeroc.so.0 -> the file whose SONAME that is."""
    for rel, target in tree(root).items():
        if target is not None and not os.path.exists(os.path.join(root, rel)):
            fail("%s: %s -> %s is a dangling link" % (what, rel, target))
    dev, so0 = os.path.join(libdir, "libzeroc.so"), os.path.join(libdir, "libzeroc.so.0")
    if os.readlink(dev) != "libzeroc.so.0" or not os.path.islink(so0):
        fail("%s: libzeroc.so -> %s, libzeroc.so.0 a link: %s; expected libzeroc.so -> "
             "libzeroc.so.0 -> the library" % (what, os.readlink(dev), os.path.islink(so0)))
    real = os.path.join(libdir, os.readlink(so0))
    if not os.path.isfile(real) or os.path.islink(real):
        fail("%s: libzeroc.so.0 -> %s, not the library file" % (what, os.readlink(so0)))
    if shutil.which("readelf"):
        dyn = run(["readelf", "-d", real]).stdout
        if "Library soname: [libzeroc.so.0]" not in dyn:
            fail("%s: %s has no SONAME libzeroc.so.0:\n%s" % (what, real, dyn))


def trainer_lines(out):
    return [l for l in out.splitlines() if l.startswith("outside_trainer stage ")]


def reference(exe):
    """The in-tree trainer's stage lines (and stage 0 = stage 3, bitwise)."""
    p = run([exe])
    lines = trainer_lines(p.stdout)
    if len(lines) != 2:
        fail("the in-tree trainer printed %r" % p.stdout)
    sums = [l.split()[l.split().index("checksum") + 1] for l in lines]
    if sums[0] != sums[1]:
        fail("the in-tree trainer's stage 0 and stage 3 masters differ: %s" % lines)
    return lines


def build_outside(cc, san, flags, src, exe):
    """Compiles src with exactly the pkg-config flags (and the sanitizers)."""
    run(cc + [src] + shlex.split(flags) + san + ["-o", exe])


def run_trainer(exe, libdir, want_lines, want_lib_dir, what, extra_ld=None):
    ld = libdir + (os.pathsep + extra_ld if extra_ld else "")
    env = dict(os.environ, LD_LIBRARY_PATH=ld)
    p = run([exe], env=env)
    got = trainer_lines(p.stdout)
    if got != want_lines:
        fail("%s: the outside trainer printed\n  %s\nthe in-tree build printed\n  %s"
             % (what, "\n  ".join(got), "\n  ".join(want_lines)))
    lib = [l.split()[2] for l in p.stdout.splitlines() if l.startswith("outside_trainer libzeroc")]
    if len(lib) != 1 or os.path.dirname(os.path.realpath(lib[0])) != os.path.realpath(want_lib_dir):
        fail("%s: the outside trainer mapped libzeroc %s, expected the one in %s"
             % (what, lib, want_lib_dir))
    return p


def probe_plugin(exe, libdir, fake_driver, what):
    """`outside_trainer plugin` with the stand-in driver: the plugin it maps."""
    env = dict(os.environ, LD_LIBRARY_PATH=libdir + os.pathsep + fake_driver)
    p = subprocess.run([exe, "plugin"], capture_output=True, text=True, timeout=120, env=env)
    got = [l for l in p.stdout.splitlines() if l.startswith("outside_trainer cuda_device_index")]
    if p.returncode != 0 or len(got) != 1:
        fail("%s: outside_trainer plugin exited %d:\n%s%s" % (what, p.returncode, p.stdout,
                                                              p.stderr))
    return got[0].split()[-1], p.stdout


def check_installed(a, cc, san, ma, ref, tmp):
    build = a.build
    dest = os.path.join(tmp, "dest")
    run(["meson", "install", "-C", build, "--no-rebuild", "--destdir", dest])
    opts = options(build)
    prefix = opts["prefix"]
    root = dest + prefix
    pcs = [p for p in tree(dest) if os.path.basename(p) == "zeroc.pc"]
    if len(pcs) != 1:
        fail("expected one installed zeroc.pc under %s, found %s" % (dest, pcs))
    pcdir = os.path.dirname(os.path.join(dest, pcs[0]))
    libdir = os.path.dirname(pcdir)
    rel = os.path.relpath(libdir, root)
    if ma and rel != "lib/" + ma:
        fail("library installed in %s/%s; expected %s/lib/%s (Debian multiarch)"
             % (prefix, rel, prefix, ma))
    check_links(dest, libdir, "meson install")
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
    # The two tags a distribution splits the files into are all of them.
    dest2 = os.path.join(tmp, "dest-tags")
    run(["meson", "install", "-C", build, "--no-rebuild", "--tags", "runtime,devel",
         "--destdir", dest2])
    if tree(dest2) != tree(dest):
        fail("--tags runtime,devel installed %s; a plain install %s"
             % (sorted(tree(dest2)), sorted(tree(dest))))
    check_links(dest2, dest2 + prefix + "/" + rel, "meson install --tags runtime,devel")

    # The .pc names the final prefix; PKG_CONFIG_SYSROOT_DIR puts the staged
    # copy under --destdir in its place.
    env = dict(os.environ, PKG_CONFIG_PATH=pcdir, PKG_CONFIG_SYSROOT_DIR=dest)
    flags = run(["pkg-config", "--cflags", "--libs", "zeroc"], env=env).stdout
    if "-I" + root not in flags or "-L" + libdir not in flags:
        fail("pkg-config --cflags --libs zeroc gave %r; expected -I%s/... and -L%s"
             % (flags.strip(), root, libdir))
    # (pkgconf prefixes the sysroot to path variables too, pkg-config does not.)
    got_libdir = run(["pkg-config", "--variable=libdir", "zeroc"], env=env).stdout.strip()
    if got_libdir not in (prefix + "/" + rel, libdir):
        fail("pkg-config --variable=libdir zeroc is %s; the library is in %s/%s"
             % (got_libdir, prefix, rel))
    hello = os.path.join(tmp, "hello.c")
    with open(hello, "w", encoding="utf-8") as f:
        f.write(readme_program(a.source))
    exe = os.path.join(tmp, "hello")
    build_outside(cc, san, flags, hello, exe)
    out = run([exe], env=dict(os.environ, LD_LIBRARY_PATH=libdir)).stdout
    if "ZeRO stage 3" not in out:
        fail("the README program printed %r" % out)
    trainer = os.path.join(tmp, "trainer-installed")
    build_outside(cc, san, flags, TRAINER, trainer)
    run_trainer(trainer, libdir, ref, libdir, "installed copy")
    print("ok: installed in %s/%s%s; README program: %s; outside trainer: the in-tree lines"
          % (prefix, rel, " with libzeroc_cuda.so" if plugin else "", out.strip()), flush=True)
    if plugin and a.fake_driver:
        got, out = probe_plugin(trainer, libdir, a.fake_driver, "installed copy")
        if got != os.path.join(libdir, "libzeroc_cuda.so"):
            fail("installed copy: asking for a GPU mapped the plugin %s, expected the one "
                 "installed beside libzeroc in %s:\n%s" % (got, libdir, out))
        print("ok: asking the installed copy for a GPU loads the installed plugin", flush=True)


def check_uninstalled(a, cc, san, ref, tmp):
    build = os.path.abspath(a.build)
    pc = os.path.join(build, "meson-uninstalled", "zeroc-uninstalled.pc")
    if not os.path.isfile(pc):
        fail("no %s (meson's pkgconfig module writes it)" % pc)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pc))
    env.pop("PKG_CONFIG_SYSROOT_DIR", None)
    flags = run(["pkg-config", "--cflags", "--libs", "zeroc"], env=env).stdout
    trainer = os.path.join(tmp, "trainer-uninstalled")
    build_outside(cc, san, flags, TRAINER, trainer)
    run_trainer(trainer, build, ref, build, "build tree (zeroc-uninstalled.pc)")
    if os.path.exists(os.path.join(build, "libzeroc_cuda.so")) and a.fake_driver:
        got, out = probe_plugin(trainer, build, a.fake_driver, "build tree")
        if got != os.path.join(build, "libzeroc_cuda.so"):
            fail("build tree: asking for a GPU mapped the plugin %s, expected %s/"
                 "libzeroc_cuda.so:\n%s" % (got, build, out))
    print("ok: built against %s (flags %s), same lines" % (pc, flags.strip()), flush=True)


def fake_dpkg_env(tmp, ma):
    """PATH with a dpkg-architecture that fails, on a multiarch system."""
    if not ma:
        return dict(os.environ)
    fake = os.path.join(tmp, "fakebin")
    os.makedirs(fake, exist_ok=True)
    link = os.path.join(fake, "dpkg-architecture")
    if not os.path.lexists(link):
        os.symlink(shutil.which("false"), link)
    return dict(os.environ, PATH=fake + os.pathsep + os.environ.get("PATH", ""))


def check_locations(b, ma, what):
    """The configured install locations (lib/<multiarch> without dpkg)."""
    opts = options(b)
    inst = json.loads(run(["meson", "introspect", b, "--installed"]).stdout)
    libs = [dst for dst in inst.values() if os.path.basename(dst) == "libzeroc.so"]
    pcs = [dst for dst in inst.values() if os.path.basename(dst) == "zeroc.pc"]
    want = os.path.join(opts["prefix"], "lib", ma) if ma else None
    if want and (len(libs) != 1 or os.path.dirname(libs[0]) != want):
        fail("%s (meson's libdir %s): libzeroc.so installs to %s; expected %s"
             % (what, opts["libdir"], libs, want))
    if want and (len(pcs) != 1 or os.path.dirname(pcs[0]) != os.path.join(want, "pkgconfig")):
        fail("%s: zeroc.pc installs to %s; expected %s/pkgconfig" % (what, pcs, want))
    return opts


def check_lean(a, cc, ma, ref, tmp):
    b = os.path.join(tmp, "build-lean")
    env = fake_dpkg_env(tmp, ma)
    t0 = time.monotonic()
    run(["meson", "setup", b, a.source, "-Dexamples=false", "-Dtools=false", "-Dtests=disabled",
         "-Dcuda=disabled", "-Dnccl=disabled", "-Dbuildtype=" + a.buildtype], env=env)
    opts = check_locations(b, ma, "library-only build without dpkg-architecture")
    targets = json.loads(run(["meson", "introspect", b, "--targets"]).stdout)
    progs = [t["name"] for t in targets if t["type"] not in ("static library", "shared library")]
    shared = [t["name"] for t in targets if t["type"] == "shared library"]
    if progs or shared != ["zeroc"]:
        fail("the library-only build defines programs %s and shared libraries %s; expected "
             "libzeroc alone" % (progs, shared))
    run(["ninja", "-C", b], env=env)
    if "no work to do" not in run(["ninja", "-C", b, "-n"], env=env).stdout:
        fail("a second ninja in the library-only build still has work to do")
    dest = os.path.join(tmp, "dest-lean")
    run(["meson", "install", "-C", b, "--no-rebuild", "--destdir", dest], env=env)
    prefix = opts["prefix"]
    rel = "lib/" + ma if ma else opts["libdir"]
    libdir = os.path.join(dest + prefix, rel)
    files = tree(dest)
    base = os.path.relpath(libdir, dest)
    inc = os.path.relpath(os.path.join(dest + prefix, opts["includedir"]), dest)
    version = json.loads(run(["meson", "introspect", b, "--projectinfo"]).stdout)["version"]
    want = {base + "/libzeroc.so", base + "/libzeroc.so.0", base + "/libzeroc.so." + version,
            base + "/pkgconfig/zeroc.pc", inc + "/zeroc/zeroc.h"}
    if set(files) != want:
        fail("the library-only build installed %s; expected exactly %s"
             % (sorted(files), sorted(want)))
    check_links(dest, libdir, "library-only install")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"),
               PKG_CONFIG_SYSROOT_DIR=dest)
    got_libdir = run(["pkg-config", "--variable=libdir", "zeroc"], env=env).stdout.strip()
    if got_libdir not in (prefix + "/" + rel, libdir):
        fail("library-only install: pkg-config --variable=libdir zeroc is %s; the library is "
             "in %s/%s" % (got_libdir, prefix, rel))
    flags = run(["pkg-config", "--cflags", "--libs", "zeroc"], env=env).stdout
    trainer = os.path.join(tmp, "trainer-lean")
    build_outside(cc, [], flags, TRAINER, trainer)
    run_trainer(trainer, libdir, ref, libdir, "library-only -Dcuda=disabled build")
    p = subprocess.run([trainer, "plugin"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, LD_LIBRARY_PATH=libdir))
    if "cuda_device_index unsupported plugin none" not in p.stdout:
        fail("library-only -Dcuda=disabled build: asking for a GPU printed %r" % p.stdout)
    print("ok: library-only -Dcuda=disabled build (meson's libdir %s): %d targets, installs "
          "%s under %s/%s, same lines; %.0f s" % (opts["libdir"], len(targets),
                                                  ", ".join(sorted(os.path.basename(f) for f in files)),
                                                  prefix, rel, time.monotonic() - t0), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sanitize", required=True)
    ap.add_argument("--buildtype", required=True)
    ap.add_argument("--in-tree", required=True)
    ap.add_argument("--fake-driver", default="")
    ap.add_argument("cc", nargs="+")
    a = ap.parse_args()
    if not shutil.which("pkg-config"):
        print("skip: pkg-config not installed")
        return 77
    cc = a.cc
    san = ["-fsanitize=" + a.sanitize] if a.sanitize and a.sanitize != "none" else []
    ma = multiarch(cc)
    with tempfile.TemporaryDirectory(prefix="zc_install.") as tmp:
        ref = reference(a.in_tree)
        check_installed(a, cc, san, ma, ref, tmp)
        check_uninstalled(a, cc, san, ref, tmp)
        if san:
            b = os.path.join(tmp, "build-nodpkg")
            run(["meson", "setup", b, a.source, "-Dtests=disabled", "-Dexamples=false",
                 "-Dtools=false", "-Dcuda=disabled", "-Dnccl=disabled", "-Dmpi=disabled"],
                env=fake_dpkg_env(tmp, ma))
            opts = check_locations(b, ma, "a configure without dpkg-architecture")
            print("ok: without dpkg-architecture (meson's libdir %s) the library installs to "
                  "lib/%s (configured only: a sanitizer build)" % (opts["libdir"], ma))
        else:
            check_lean(a, cc, ma, ref, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
