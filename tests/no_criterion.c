/* Stands in for the test suites when the build has none: running
 * `meson test` on such a build must fail and say why, not pass with nothing
 * run. argv[1] is the reason meson.build found. */
#include <stdio.h>

int main(int argc, char **argv)
{
    fprintf(stderr,
            "zeroc: this build has no tests: %s.\nInstall what is missing (bash scripts/deps.sh "
            "--tests), configure with -Dtests=enabled (and the default -Dexamples=true "
            "-Dtools=true) and run `meson setup --reconfigure BUILD_DIR`, or use bash "
            "scripts/test.sh.\n",
            argc > 1 ? argv[1] : "no reason given");
    return 1;
}
