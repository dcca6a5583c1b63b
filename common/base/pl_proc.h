/*  pl_proc.h: the process's memory. */
#ifndef PL_PROC_H_INCLUDED
#define PL_PROC_H_INCLUDED

//  Peak resident set size of this process, in KiB.
long pl_peak_rss_kb (void);
//  Keep message-sized buffers (0.1-8 MiB, one or two per message) in
//  glibc's heap and reuse them: below 8 MiB nothing is mmapped, and up to
//  32 MiB of free heap top is kept rather than trimmed, because a fresh
//  mapping per message page-faults on every page it touches (the cost is
//  in docs/architecture.md, "Measurements"). At most two arenas bound what
//  the threads can hold. Call first in main.
void pl_memory_setup (void);

#endif
