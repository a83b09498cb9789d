#!/usr/bin/env python3
"""meson install script: the installed zeroc.pc's libdir variable names the
directory the library went to.

meson.build runs it only when multiarch_libdir moved the library out of
meson's libdir option (lib64 on a Debian-like system without dpkg-dev, where
the library goes to lib/<multiarch>): pkg.generate writes `libdir=` from the
option (the variable is reserved, so it cannot be given), while the file's
`Libs:` already names the library's own directory. This puts that directory
into `libdir=` as well, so `pkg-config --variable=libdir zeroc` is where
libzeroc.so is.

Usage (from meson.add_install_script): pc_libdir.py PC_FILE LIBDIR, both
relative to the prefix. Reads MESON_INSTALL_DESTDIR_PREFIX. Exits 1, naming
the file, when it is missing or has not exactly one `libdir=` line.
"""
import os
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    if os.environ.get("MESON_INSTALL_DRY_RUN"):
        return 0
    root = os.environ.get("MESON_INSTALL_DESTDIR_PREFIX")
    if not root:
        print("pc_libdir.py: MESON_INSTALL_DESTDIR_PREFIX is not set (run by meson install)",
              file=sys.stderr)
        return 1
    pc, libdir = os.path.join(root, sys.argv[1]), sys.argv[2]
    try:
        with open(pc, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        print("pc_libdir.py: cannot read %s: %s" % (pc, e), file=sys.stderr)
        return 1
    at = [i for i, l in enumerate(lines) if l.startswith("libdir=")]
    if len(at) != 1:
        print("pc_libdir.py: %s has %d libdir= lines, expected one" % (pc, len(at)),
              file=sys.stderr)
        return 1
    lines[at[0]] = "libdir=" + (libdir if os.path.isabs(libdir) else "${prefix}/" + libdir)
    tmp = pc + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.replace(tmp, pc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
