/*  pl_stop: a signal reaches every run attached at that moment, and only
    those; a run's own flag is its own. */
#include <criterion/criterion.h>

#include "pl_stop.h"

#include <signal.h>

Test (stop, a_signal_stops_every_attached_run_and_only_those)
{
    pl_stop_t server, device, later;
    cr_assert_eq (pl_stop_attach (&server, true), 0);
    cr_assert_eq (pl_stop_attach (&device, false), 0);
    raise (SIGTERM);                //  handled: the test process goes on
    cr_assert (server.stop && device.stop);
    cr_assert (!server.reload);
    pl_stop_detach (&device);
    //  A run that starts after the signal starts with clear flags.
    cr_assert_eq (pl_stop_attach (&later, false), 0);
    cr_assert (!later.stop);
    //  SIGHUP reloads only a run that asked for it, and stops none.
    raise (SIGHUP);
    cr_assert (server.reload);
    cr_assert (!later.stop && !later.reload);
    pl_stop_detach (&later);
    pl_stop_detach (&server);
}

Test (stop, setting_one_runs_flag_leaves_the_other_running)
{
    pl_stop_t a, b;
    cr_assert_eq (pl_stop_attach (&a, false), 0);
    cr_assert_eq (pl_stop_attach (&b, false), 0);
    a.stop = 1;
    cr_assert (!b.stop);
    pl_stop_detach (&a);
    pl_stop_detach (&b);
}

Test (stop, the_last_detach_restores_the_process_handlers)
{
    struct sigaction before, during, after;
    sigaction (SIGINT, NULL, &before);
    pl_stop_t a;
    cr_assert_eq (pl_stop_attach (&a, false), 0);
    sigaction (SIGINT, NULL, &during);
    cr_assert (during.sa_handler != before.sa_handler);
    pl_stop_detach (&a);
    sigaction (SIGINT, NULL, &after);
    cr_assert (after.sa_handler == before.sa_handler);
}

Test (stop, a_full_table_refuses_and_changes_nothing)
{
    static pl_stop_t runs[PL_STOP_MAX_RUNS + 1];
    for (int i = 0; i < PL_STOP_MAX_RUNS; i++)
        cr_assert_eq (pl_stop_attach (&runs[i], false), 0);
    cr_assert_eq (pl_stop_attach (&runs[PL_STOP_MAX_RUNS], false), -1);
    raise (SIGINT);
    cr_assert (runs[0].stop && runs[PL_STOP_MAX_RUNS - 1].stop);
    cr_assert (!runs[PL_STOP_MAX_RUNS].stop);
    for (int i = 0; i <= PL_STOP_MAX_RUNS; i++)
        pl_stop_detach (&runs[i]);
}
