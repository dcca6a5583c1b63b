/*  pl_hostcopy.h: what moving bytes through this host's network stack
    costs in CPU, for the planner when the server and its devices share one
    host (a lab, a demo, loopback): there a transfer is not free time on a
    wire but work for the same cores that train.

    Measured with ZeroMQ over TCP loopback, the transport the daemons use,
    along the daemons' path: a PUSH socket streams frames of the size given
    to a PULL socket in the same process, each frame built in fresh pages
    and handed to libzmq without a copy, each received one copied into
    fresh pages (a daemon's big buffers are mostly fresh: glibc maps and
    unmaps allocations this large, and their page faults are a large part
    of a transfer's cost, above all in a virtual machine: 30 Gbit/s per
    core with reused buffers against 1.2 with fresh ones on the development
    VM, where the daemons' own traffic costs about 1.1). The bytes are
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

#endif
