/* Stands in for the test suites when the build found no Criterion: running
 * `meson test` on such a build must fail and say why, not pass with nothing
 * run. */
#include <stdio.h>

int main(void)
{
    fputs("zeroc: this build has no tests: Criterion (libcriterion-dev) was not found when it "
          "was configured.\nInstall it (bash scripts/deps.sh --tests) and run "
          "`meson setup --reconfigure BUILD_DIR`, or use bash scripts/test.sh.\n",
          stderr);
    return 1;
}
