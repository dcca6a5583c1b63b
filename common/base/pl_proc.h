/*  pl_proc.h: the process's memory. */
#ifndef PL_PROC_H_INCLUDED
#define PL_PROC_H_INCLUDED

//  Peak resident set size of this process, in KiB.
long pl_peak_rss_kb (void);
//  Keep message-sized buffers (0.1-8 MiB, one or two per message) in
//  glibc's heap and reuse them: below 8 MiB nothing is mmapped, and up to
//  32 MiB of free heap top is kept rather than trimmed. A fresh mapping per
//  message page-faults on every page it touches: with a fixed 256 KiB
//  threshold, loopback pipelearn (1 GB per epoch) spent 2.5x the trainer's
//  epoch time, most of it in faults (11.0 -> 4.5 s per epoch with reuse).
//  At most two arenas bound what the threads can hold. Call first in main.
void pl_memory_setup (void);

#endif
