/*  OpenBLAS core selection: the decision, and that binaries log the core
    and respect a user's OPENBLAS_CORETYPE. */
#include <criterion/criterion.h>

#include "pl_blas.h"
#include "runcmd.h"

Test (blas, generic_core_on_capable_cpu_is_replaced)
{
    cr_assert_str_eq (pl_blas_choose_coretype ("Prescott", true, true), "SkylakeX");
    cr_assert_str_eq (pl_blas_choose_coretype ("Prescott", true, false), "Haswell");
    cr_assert_str_eq (pl_blas_choose_coretype ("Sandybridge", true, false), "Haswell");
    cr_assert_str_eq (pl_blas_choose_coretype ("CORE2", true, true), "SkylakeX");
}

Test (blas, right_core_or_old_cpu_is_left_alone)
{
    cr_assert_null (pl_blas_choose_coretype ("Haswell", true, false));
    cr_assert_null (pl_blas_choose_coretype ("Zen", true, false));
    cr_assert_null (pl_blas_choose_coretype ("SkylakeX", true, true));
    cr_assert_null (pl_blas_choose_coretype ("Prescott", false, false));
    cr_assert_null (pl_blas_choose_coretype (NULL, true, true));
}

//  x86 core names: on aarch64 OpenBLAS keeps its own choice (pl_blas.c).
#if defined(__x86_64__)
Test (blas, binary_logs_core_and_respects_user_setting)
{
    char bin[1024], cmd[2048], out[8192];
    built ("server/pipelearn-train", bin, sizeof bin);
    //  A user's choice wins, is not re-executed, and is logged as theirs.
    snprintf (cmd, sizeof cmd,
              "OPENBLAS_CORETYPE=Haswell %s --set dataset=synthetic --set samples=200 "
              "--set test_samples=100 --set batch_size=50 --results /tmp/pl-blas-$$", bin);
    int rc = runcmd (cmd, out, sizeof out);
    cr_assert_eq (rc, 0, "%s", out);
    cr_assert (strstr (out, "openblas: core Haswell (OPENBLAS_CORETYPE=Haswell set by the user)"),
               "%s", out);
    //  Forcing the slow generic core is also the user's right.
    snprintf (cmd, sizeof cmd,
              "OPENBLAS_CORETYPE=Prescott %s --set dataset=synthetic --set samples=100 "
              "--set test_samples=50 --set batch_size=50 --results /tmp/pl-blas-$$", bin);
    rc = runcmd (cmd, out, sizeof out);
    cr_assert_eq (rc, 0, "%s", out);
    cr_assert (strstr (out, "core Prescott"), "%s", out);
    cr_assert_null (strstr (out, "re-running"), "%s", out);
    runcmd ("rm -rf /tmp/pl-blas-*", out, sizeof out);
}
#endif

//  The re-exec (here for GOMP_SPINCOUNT) keeps the daemon's own name: the
//  kernel names a process after the file it executes, and through
//  /proc/self/exe every daemon was "exe" to ps, pgrep and systemctl.
Test (blas, reexecuted_daemon_keeps_its_name)
{
    char bin[1024], cmd[4096], out[8192];
    built ("server/pipelearn-server", bin, sizeof bin);
    snprintf (cmd, sizeof cmd,
              "d=$(mktemp -d /tmp/pl-blas-name-XXXXXX); "
              "env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY %s --set dataset=synthetic "
              "--set samples=200 --set test_samples=100 --bind 'tcp://127.0.0.1:*' "
              "--insecure --results $d/r >$d/log 2>&1 & pid=$!; "
              "for i in $(seq 200); do grep -q 'kernels:' $d/log && break; sleep 0.05; done; "
              "cat /proc/$pid/comm; kill $pid; "
              "for i in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; "
              "if kill -0 $pid 2>/dev/null; then echo 'SIGTERM-IGNORED'; kill -9 $pid; fi; "
              "wait $pid; cat $d/log; rm -rf $d", bin);
    int rc = runcmd (cmd, out, sizeof out);
    (void) rc;
    cr_assert (strncmp (out, "pipelearn-serve", 15) == 0,
               "process name after the re-exec: %s", out);
    //  The SIGTERM comes early (right after the 'kernels:' line, around
    //  zsys_init): the server still stops, within 30 s (it used to spin at
    //  100 % CPU for ever when the signal landed in CZMQ's handler).
    cr_assert_null (strstr (out, "SIGTERM-IGNORED"), "the server ignored an early SIGTERM: %s",
                    out);
}
