/*  test_srv_round: the server's round bookkeeping (server/srv_round.h):
    where a round ends, which PARAMS may close it, when it is complete, and
    whose turn is next in sl. */
#include <criterion/criterion.h>
#include <string.h>

#include "srv_round.h"

TestSuite (srv_round, .timeout = 30);

Test (srv_round, ends_at_the_next_aggregation_point_or_the_epoch_end)
{
    srv_round_t r = { .epoch_iterations = 10, .aggregation_frequency = 4, .round_iter = 0 };
    cr_assert_eq (srv_round_end (&r), 4);
    r.round_iter = 4;
    cr_assert_eq (srv_round_end (&r), 8);
    r.round_iter = 8;
    cr_assert_eq (srv_round_end (&r), 10, "the last round ends with the epoch");
    r.aggregation_frequency = -1;
    r.round_iter = 0;
    cr_assert_eq (srv_round_end (&r), 10, "once per epoch");
    r.aggregation_frequency = 4;
    r.sl = true;
    cr_assert_eq (srv_round_end (&r), 10, "sl: a round is a device's epoch");
    r.epoch_iterations = 0;
    cr_assert_eq (srv_round_end (&r), 0, "unknown iterations");
}

Test (srv_round, a_params_must_close_the_round_where_it_ends)
{
    char why[256];
    srv_round_t r = { .epoch_iterations = 10, .aggregation_frequency = 4, .round_iter = 4 };
    cr_assert_eq (srv_round_check_close (&r, 8, why, sizeof why), 0);
    cr_assert_eq (srv_round_check_close (&r, 9, why, sizeof why), -1);
    cr_assert (strstr (why, "began at iteration 4 and ends at 8"), "%s", why);
    cr_assert_eq (srv_round_check_close (&r, 4, why, sizeof why), -1);
}

Test (srv_round, unknown_iterations_bound_the_round_loosely)
{
    char why[256];
    srv_round_t r = { .epoch_iterations = 0, .aggregation_frequency = 4, .round_iter = 4 };
    cr_assert_eq (srv_round_check_close (&r, 5, why, sizeof why), 0);
    cr_assert_eq (srv_round_check_close (&r, 8, why, sizeof why), 0);
    cr_assert_eq (srv_round_check_close (&r, 4, why, sizeof why), -1, "no progress");
    cr_assert_eq (srv_round_check_close (&r, 9, why, sizeof why), -1, "past the interval");
    cr_assert_eq (srv_round_check_close (&r, 0x80000000u, why, sizeof why), -1);
    r.aggregation_frequency = -1;
    cr_assert_eq (srv_round_check_close (&r, 1000, why, sizeof why), 0);
}

Test (srv_round, complete_when_every_active_device_is_in)
{
    bool active[3] = { true, false, true };
    bool in[3] = { true, false, false };
    cr_assert_not (srv_round_complete (active, in, 3));
    in[2] = true;
    cr_assert (srv_round_complete (active, in, 3), "an inactive device is not waited for");
}

Test (srv_round, sl_turns_skip_devices_that_left)
{
    bool active[4] = { false, true, false, true };
    cr_assert_eq (srv_round_next_turn (active, 4, -1), 1);
    cr_assert_eq (srv_round_next_turn (active, 4, 1), 3);
    cr_assert_eq (srv_round_next_turn (active, 4, 3), 4, "the epoch's turns are over");
    bool none[2] = { false, false };
    cr_assert_eq (srv_round_next_turn (none, 2, -1), 2);
}
