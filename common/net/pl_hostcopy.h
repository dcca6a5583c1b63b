/*  pl_hostcopy.h: what moving bytes through this host's network stack
    costs in CPU, for the planner when the server and its devices share one
    host (a lab, a demo, loopback): there a transfer is not free time on a
    wire but work for the same cores that train.

    Measured with ZeroMQ over TCP loopback, the transport the daemons use,
    along the daemons' path: a PUSH socket streams frames of the size given
    to a PULL socket in the same process, each frame copied into a heap
    buffer and handed to libzmq without a copy, each received one read in
    place from libzmq's buffer. Call pl_memory_setup first, as the daemons
    do: their buffers then come back from glibc's heap already mapped
    (fresh pages per frame cost several times more: docs/architecture.md,
    "Measurements"). The bytes are
    divided by the CPU time the process used (getrusage, all threads:
    both ends, libzmq's I/O threads, the kernel's copies). The result is
    bytes per core-second.
*/
#ifndef PL_HOSTCOPY_H_INCLUDED
#define PL_HOSTCOPY_H_INCLUDED

#include <stddef.h>

//  Bytes per CPU-second of a loopback transfer, measured for about
//  seconds (0.05 .. 10) with frames of frame_bytes, taken into 64 KiB ..
//  16 MiB (pass the size of the messages that matter, e.g. a micro-batch's
//  activations). -1 with a message if the sockets cannot be set up.
double pl_hostcopy_measure (double seconds, size_t frame_bytes, char *err, size_t err_size);

//  The copy cost the planner uses, in bytes per core-second: configured_mbps
//  if > 0, else measured for 0.3 s with frames of a quarter of
//  split_bytes (a batch's activations at the first split: a micro-batch's
//  at N = 4). -1 with a message if it cannot be measured.
double pl_hostcopy_rate (double configured_mbps, double split_bytes, char *err,
                         size_t err_size);

#endif
