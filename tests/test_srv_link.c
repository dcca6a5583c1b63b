/*  test_srv_link: the timeline's transfer spans (server/srv_link.h): an
    upload runs from the end of the device's forward to the arrival at the
    server, a download from the departure to the start of the device's
    backward; a transfer without its device event is left out; rows sort
    in one total order. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "srv_link.h"

TestSuite (srv_link, .timeout = 30);

static pl_event_t
s_ev (const char *who, const char *stage, int it, int mb, double start, double end)
{
    pl_event_t e;
    memset (&e, 0, sizeof e);
    snprintf (e.who, sizeof e.who, "%s", who);
    snprintf (e.stage, sizeof e.stage, "%s", stage);
    e.epoch = 1;
    e.iteration = it;
    e.micro_batch = mb;
    e.start_s = start;
    e.end_s = end;
    return e;
}

static const pl_event_t *
s_find (const pl_event_t *ev, size_t n, const char *who, const char *stage, int mb)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp (ev[i].who, who) && !strcmp (ev[i].stage, stage) && ev[i].micro_batch == mb)
            return &ev[i];
    return NULL;
}

Test (srv_link, spans_join_the_server_end_to_the_device_end)
{
    pl_event_t ev[] = {
        s_ev ("device0", "forward", 0, 0, 1.0, 2.0),
        s_ev ("link:d0", "uplink", 0, 0, 2.5, 2.5),         //  arrived at 2.5
        s_ev ("server:d0", "compute", 0, 0, 2.5, 3.0),
        s_ev ("link:d0", "downlink", 0, 0, 3.0, 3.0),       //  left at 3.0
        s_ev ("device0", "backward", 0, 0, 3.4, 3.9),
    };
    size_t n = srv_link_spans (ev, 5);
    cr_assert_eq (n, 5);
    const pl_event_t *up = s_find (ev, n, "link:d0", "uplink", 0);
    const pl_event_t *down = s_find (ev, n, "link:d0", "downlink", 0);
    cr_assert_not_null (up);
    cr_assert_not_null (down);
    cr_assert_float_eq (up->start_s, 2.0, 1e-12);
    cr_assert_float_eq (up->end_s, 2.5, 1e-12);
    cr_assert_float_eq (down->start_s, 3.0, 1e-12);
    cr_assert_float_eq (down->end_s, 3.4, 1e-12);
    //  The server's own lanes are not touched.
    const pl_event_t *c = s_find (ev, n, "server:d0", "compute", 0);
    cr_assert_float_eq (c->start_s, 2.5, 1e-12);
}

Test (srv_link, transfers_without_their_device_event_are_left_out)
{
    pl_event_t ev[] = {
        s_ev ("link:d1", "uplink", 0, 0, 2.5, 2.5),         //  no forward of device1
        s_ev ("device1", "backward", 0, 1, 3.0, 3.5),
        s_ev ("link:d1", "downlink", 0, 1, 4.0, 4.0),       //  backward began before it left
        s_ev ("device1", "forward", 0, 2, 1.0, 2.0),
        s_ev ("link:d1", "uplink", 0, 2, 2.2, 2.2),         //  kept
    };
    size_t n = srv_link_spans (ev, 5);
    cr_assert_eq (n, 3);
    cr_assert_null (s_find (ev, n, "link:d1", "uplink", 0));
    cr_assert_null (s_find (ev, n, "link:d1", "downlink", 1));
    const pl_event_t *up = s_find (ev, n, "link:d1", "uplink", 2);
    cr_assert_not_null (up);
    cr_assert_float_eq (up->start_s, 2.0, 1e-12);
}

Test (srv_link, devices_and_micro_batches_do_not_mix)
{
    pl_event_t ev[] = {
        s_ev ("device0", "forward", 0, 0, 1.0, 2.0),
        s_ev ("device1", "forward", 0, 0, 1.0, 1.5),
        s_ev ("device0", "forward", 0, 1, 2.0, 3.0),
        s_ev ("link:d1", "uplink", 0, 0, 1.7, 1.7),
        s_ev ("link:d0", "uplink", 0, 1, 3.2, 3.2),
    };
    size_t n = srv_link_spans (ev, 5);
    cr_assert_eq (n, 5);
    cr_assert_float_eq (s_find (ev, n, "link:d1", "uplink", 0)->start_s, 1.5, 1e-12);
    cr_assert_float_eq (s_find (ev, n, "link:d0", "uplink", 1)->start_s, 3.0, 1e-12);
}

Test (srv_link, sort_is_a_total_order)
{
    pl_event_t a[] = {
        s_ev ("server:d1", "compute", 0, 0, 1.0, 2.0),
        s_ev ("device0", "forward", 0, 0, 1.0, 2.0),
        s_ev ("device0", "backward", 0, 0, 1.0, 2.0),
        s_ev ("device0", "forward", 0, 0, 1.0, 1.5),
        s_ev ("device0", "forward", 0, 0, 0.5, 3.0),
    };
    pl_event_t b[5] = { a[3], a[0], a[4], a[2], a[1] };
    srv_link_sort (a, 5);
    srv_link_sort (b, 5);
    for (int i = 0; i < 5; i++) {
        cr_assert_str_eq (a[i].who, b[i].who, "order depends on arrival (row %d)", i);
        cr_assert_str_eq (a[i].stage, b[i].stage, "order depends on arrival (row %d)", i);
        cr_assert_eq (a[i].start_s, b[i].start_s);
        cr_assert_eq (a[i].end_s, b[i].end_s);
    }
    cr_assert_float_eq (a[0].start_s, 0.5, 1e-12);
    cr_assert_float_eq (a[1].end_s, 1.5, 1e-12);
    cr_assert_str_eq (a[2].stage, "backward");      //  same times: by who, then stage
    cr_assert_str_eq (a[4].who, "server:d1");
}
