# Sourced by demo.sh and test.sh: configure a build directory so that it sees
# what is installed now.
#
# A build directory remembers what its first configure found. If Criterion
# (or liburing, hwloc, ...) was missing then and has been installed since, a
# plain `meson setup` is skipped and the build keeps working without it, e.g.
# with no tests at all. `meson setup --reconfigure` re-runs the configure
# step, which looks again for every dependency that was not found (found ones
# stay cached), so each command reconfigures the directory it uses.

# zc_configure DIR [MESON_ARGS...]
zc_configure() {
  local dir=$1
  shift
  if [[ -f "$dir/build.ninja" ]]; then
    meson setup --reconfigure "$dir" "$@"
  else
    # A first configure that was interrupted leaves meson's private files
    # but no build.ninja; start that directory again (it holds only meson's
    # own files: build directories are git-ignored outputs).
    [[ -d "$dir/meson-private" ]] && rm -rf "$dir"
    meson setup "$dir" "$@"
  fi
}

# zc_count_tests DIR SUITE: how many tests of SUITE the build in DIR defines.
zc_count_tests() {
  meson test -C "$1" --no-rebuild --list --suite "$2" 2>/dev/null | grep -c " / " || true
}
