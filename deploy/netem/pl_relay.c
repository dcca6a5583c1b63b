/*  pipelearn-relay: a packet-level link emulator between two TAP devices,
    the lab's fallback where the kernel has no sch_netem.

    pipelearn-relay --dev-if IF [--dev-ns NS] --srv-if IF [--srv-ns NS]
                    [--up-rate MBIT] [--up-delay MS] [--up-jitter MS] [--up-loss PCT]
                    [--down-rate MBIT] [--down-delay MS] [--down-jitter MS]
                    [--down-loss PCT] [--queue-ms MS] [--limit PACKETS]
                    [--seed N] [--pid-file PATH] [--quiet]

    Opens (or creates) TAP device --dev-if inside network namespace --dev-ns
    and --srv-if inside --srv-ns (a name under /run/netns, or a path to a
    namespace file; none = the relay's own namespace), then moves Ethernet
    frames between them: frames read from the device's TAP go out of the
    server's TAP with the uplink's rate, delay, jitter and loss, and the
    other way round with the downlink's. The relay itself stays in the
    namespace it was started in; each TAP fd stays bound to the namespace it
    was opened in.

    Link model per direction (what a frame read at time t goes through):
      1. loss: dropped with probability PCT/100 (Bernoulli, like netem);
      2. rate: serialised at RATE after the frames before it (its start is
         max(t, end of the previous frame's serialisation)); a frame that
         would wait more than --queue-ms for the link is dropped (tail drop:
         the buffer is --queue-ms of data at RATE); 0 = no rate limit;
      3. delay: it leaves DELAY + U(-JITTER, +JITTER) ms after serialising,
         but never before the frame ahead of it: frames are never
         reordered (so jitter samples below the previous frame's are
         clamped, which makes the mean delay under a burst slightly larger
         than DELAY, as on a real FIFO link).
    Each direction is one time-ordered ring of at most --limit frames
    (default 2048), allocated at start: memory is bounded whatever the
    traffic. Frames longer than a slot (1536 bytes; TAP MTU 1500) are
    dropped and counted.

    One thread, one ppoll() over both TAPs and a signalfd, with the timeout
    set to the next frame's departure. SIGTERM/SIGINT/SIGHUP exit 0 after
    printing per-direction counters; SIGUSR1 prints them and goes on.
*/
#define _GNU_SOURCE
#include "nn_rng.h"
#include "pl_log.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define RELAY_SLOT_BYTES 1536
#define RELAY_BURST 64          //  frames read per fd per wakeup, for fairness

//  One direction's parameters, as given on the command line.
typedef struct {
    double rate_mbit;           //  0 = unlimited
    double delay_ms;
    double jitter_ms;
    double loss_pct;
} s_shape_t;

typedef struct {
    int64_t depart_ns;          //  CLOCK_MONOTONIC
    uint16_t size;
} s_slot_meta_t;

//  One direction: frames read from in_fd wait in a ring until their
//  departure time, then are written to out_fd.
typedef struct {
    const char *name;           //  "up" or "down", for messages
    s_shape_t shape;
    int64_t queue_ns;           //  longest wait for the link before a tail drop
    int in_fd, out_fd;
    uint8_t *frames;            //  limit * RELAY_SLOT_BYTES
    s_slot_meta_t *meta;
    size_t limit, head, count;
    int64_t link_free_ns;       //  when the link finishes the last frame
    int64_t last_depart_ns;     //  departure of the newest frame (no reorder)
    uint64_t frames_in, frames_out, bytes_out;
    uint64_t drop_loss, drop_queue, drop_full, drop_oversize, write_errors;
} s_dir_t;

typedef struct {
    const char *dev_ns, *dev_if, *srv_ns, *srv_if;
    s_shape_t up, down;
    double queue_ms;
    long limit;
    uint64_t seed;
    int have_seed;
    const char *pid_file;
    int quiet;
} s_args_t;

static int64_t
s_now_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
s_usage (FILE *f)
{
    fprintf (f,
        "usage: pipelearn-relay --dev-if IF [--dev-ns NS] --srv-if IF [--srv-ns NS]\n"
        "                       [--up-rate MBIT] [--up-delay MS] [--up-jitter MS] [--up-loss PCT]\n"
        "                       [--down-rate MBIT] [--down-delay MS] [--down-jitter MS]\n"
        "                       [--down-loss PCT] [--queue-ms MS] [--limit PACKETS]\n"
        "                       [--seed N] [--pid-file PATH] [--quiet]\n"
        "Moves frames between TAP devices IF in namespaces NS (names under /run/netns\n"
        "or paths), device->server with the up* shape, server->device with down*.\n"
        "Rates 0 = unlimited. --queue-ms: buffer before the rate limit (100 ms).\n");
}

//  Parses a finite number >= 0 (and <= max); on error says which flag.
static int
s_parse_number (const char *flag, const char *text, double max, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod (text, &end);
    if (errno || end == text || *end != '\0' || !isfinite (v) || v < 0 || v > max) {
        pl_log_error ("relay: --%s: expected a number in [0, %g], got \"%s\"", flag, max, text);
        return -1;
    }
    *out = v;
    return 0;
}

static int
s_parse_args (int argc, char **argv, s_args_t *a)
{
    enum { O_DEV_NS = 256, O_DEV_IF, O_SRV_NS, O_SRV_IF, O_UP_RATE, O_UP_DELAY,
           O_UP_JITTER, O_UP_LOSS, O_DOWN_RATE, O_DOWN_DELAY, O_DOWN_JITTER,
           O_DOWN_LOSS, O_QUEUE_MS, O_LIMIT, O_SEED, O_PID_FILE, O_QUIET, O_HELP };
    static const struct option opts[] = {
        {"dev-ns", required_argument, NULL, O_DEV_NS},
        {"dev-if", required_argument, NULL, O_DEV_IF},
        {"srv-ns", required_argument, NULL, O_SRV_NS},
        {"srv-if", required_argument, NULL, O_SRV_IF},
        {"up-rate", required_argument, NULL, O_UP_RATE},
        {"up-delay", required_argument, NULL, O_UP_DELAY},
        {"up-jitter", required_argument, NULL, O_UP_JITTER},
        {"up-loss", required_argument, NULL, O_UP_LOSS},
        {"down-rate", required_argument, NULL, O_DOWN_RATE},
        {"down-delay", required_argument, NULL, O_DOWN_DELAY},
        {"down-jitter", required_argument, NULL, O_DOWN_JITTER},
        {"down-loss", required_argument, NULL, O_DOWN_LOSS},
        {"queue-ms", required_argument, NULL, O_QUEUE_MS},
        {"limit", required_argument, NULL, O_LIMIT},
        {"seed", required_argument, NULL, O_SEED},
        {"pid-file", required_argument, NULL, O_PID_FILE},
        {"quiet", no_argument, NULL, O_QUIET},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0}
    };
    memset (a, 0, sizeof *a);
    a->queue_ms = 100;
    a->limit = 2048;
    int c;
    double v;
    while ((c = getopt_long (argc, argv, "", opts, NULL)) != -1) {
        const char *flag = c >= 256 && c < O_HELP ? opts [c - 256].name : "?";
        int rc = 0;
        switch (c) {
            case O_DEV_NS: a->dev_ns = optarg; break;
            case O_DEV_IF: a->dev_if = optarg; break;
            case O_SRV_NS: a->srv_ns = optarg; break;
            case O_SRV_IF: a->srv_if = optarg; break;
            //  10 Gbit/s, a minute of delay and 100% loss bound what a lab needs.
            case O_UP_RATE: rc = s_parse_number (flag, optarg, 10000, &a->up.rate_mbit); break;
            case O_UP_DELAY: rc = s_parse_number (flag, optarg, 60000, &a->up.delay_ms); break;
            case O_UP_JITTER: rc = s_parse_number (flag, optarg, 60000, &a->up.jitter_ms); break;
            case O_UP_LOSS: rc = s_parse_number (flag, optarg, 100, &a->up.loss_pct); break;
            case O_DOWN_RATE: rc = s_parse_number (flag, optarg, 10000, &a->down.rate_mbit); break;
            case O_DOWN_DELAY: rc = s_parse_number (flag, optarg, 60000, &a->down.delay_ms); break;
            case O_DOWN_JITTER: rc = s_parse_number (flag, optarg, 60000, &a->down.jitter_ms); break;
            case O_DOWN_LOSS: rc = s_parse_number (flag, optarg, 100, &a->down.loss_pct); break;
            case O_QUEUE_MS:
                rc = s_parse_number (flag, optarg, 60000, &a->queue_ms);
                break;
            case O_LIMIT:
                rc = s_parse_number (flag, optarg, 1000000, &v);
                if (rc == 0 && (v < 1 || v != floor (v))) {
                    pl_log_error ("relay: --limit: expected an integer in [1, 1000000], got \"%s\"",
                                  optarg);
                    rc = -1;
                }
                a->limit = (long) v;
                break;
            case O_SEED: {
                char *end = NULL;
                errno = 0;
                unsigned long long s = strtoull (optarg, &end, 10);
                if (errno || end == optarg || *end != '\0') {
                    pl_log_error ("relay: --seed: expected an unsigned integer, got \"%s\"",
                                  optarg);
                    rc = -1;
                }
                a->seed = s;
                a->have_seed = 1;
                break;
            }
            case O_PID_FILE: a->pid_file = optarg; break;
            case O_QUIET: a->quiet = 1; break;
            case O_HELP: s_usage (stdout); exit (0);
            default: s_usage (stderr); return -1;
        }
        if (rc)
            return -1;
    }
    if (optind < argc) {
        pl_log_error ("relay: unexpected argument \"%s\"", argv [optind]);
        return -1;
    }
    if (!a->dev_if || !a->srv_if) {
        s_usage (stderr);
        return -1;
    }
    if (strlen (a->dev_if) >= IFNAMSIZ || strlen (a->srv_if) >= IFNAMSIZ) {
        pl_log_error ("relay: interface names must be shorter than %d characters", IFNAMSIZ);
        return -1;
    }
    return 0;
}

//  Opens TAP ifname inside namespace ns (NULL or "" = ours) and returns a
//  nonblocking fd, or -1. The tun driver binds the device to the namespace
//  the fd was opened in, so the relay enters ns only for the open and the
//  ioctl and goes back before returning.
static int
s_tap_open (const char *ns, const char *ifname)
{
    int home = -1, target = -1, fd = -1;
    if (ns && *ns) {
        char path [4096];
        if (strchr (ns, '/'))
            snprintf (path, sizeof path, "%s", ns);
        else
            snprintf (path, sizeof path, "/run/netns/%s", ns);
        home = open ("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        target = open (path, O_RDONLY | O_CLOEXEC);
        if (home < 0 || target < 0) {
            pl_log_error ("relay: %s: %s", home < 0 ? "/proc/self/ns/net" : path,
                          strerror (errno));
            goto fail;
        }
        if (setns (target, CLONE_NEWNET)) {
            pl_log_error ("relay: cannot enter namespace %s: %s", path, strerror (errno));
            goto fail;
        }
    }
    fd = open ("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        pl_log_error ("relay: /dev/net/tun: %s", strerror (errno));
    else {
        struct ifreq ifr;
        memset (&ifr, 0, sizeof ifr);
        //  No packet-info header: reads and writes are bare Ethernet frames,
        //  which is also what `ip tuntap add mode tap` makes by default.
        ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
        snprintf (ifr.ifr_name, IFNAMSIZ, "%s", ifname);
        if (ioctl (fd, TUNSETIFF, &ifr) < 0) {
            pl_log_error ("relay: TAP %s%s%s: %s", ifname, ns ? " in " : "", ns ? ns : "",
                          strerror (errno));
            close (fd);
            fd = -1;
        }
    }
    if (home >= 0 && setns (home, CLONE_NEWNET)) {
        //  Staying in the wrong namespace would open the second TAP there.
        pl_log_error ("relay: cannot return to the home namespace: %s", strerror (errno));
        if (fd >= 0)
            close (fd);
        fd = -1;
    }
fail:
    if (home >= 0)
        close (home);
    if (target >= 0)
        close (target);
    return fd;
}

static int
s_dir_init (s_dir_t *self, const char *name, const s_shape_t *shape, double queue_ms,
            size_t limit, int in_fd, int out_fd)
{
    memset (self, 0, sizeof *self);
    self->name = name;
    self->shape = *shape;
    self->queue_ns = (int64_t) (queue_ms * 1e6);
    self->in_fd = in_fd;
    self->out_fd = out_fd;
    self->limit = limit;
    self->frames = malloc (limit * RELAY_SLOT_BYTES);
    self->meta = calloc (limit, sizeof *self->meta);
    if (!self->frames || !self->meta) {
        pl_log_error ("relay: out of memory for %zu frames", limit);
        return -1;
    }
    return 0;
}

static void
s_dir_free (s_dir_t *self)
{
    free (self->frames);
    free (self->meta);
    self->frames = NULL;
    self->meta = NULL;
}

//  Decides the fate of a frame of size bytes read at now: returns its
//  departure time, or -1 if the link drops it. Updates the link state.
static int64_t
s_dir_admit (s_dir_t *self, nn_rng_t *rng, size_t size, int64_t now)
{
    const s_shape_t *sh = &self->shape;
    if (sh->loss_pct > 0 && nn_rng_uniform_double (rng) * 100.0 < sh->loss_pct) {
        self->drop_loss++;
        return -1;
    }
    int64_t ready = now;
    if (sh->rate_mbit > 0) {
        int64_t start = self->link_free_ns > now ? self->link_free_ns : now;
        if (start - now > self->queue_ns) {
            self->drop_queue++;
            return -1;
        }
        //  Serialisation time of the whole frame (Ethernet header included,
        //  as tbf counts it) at the link rate.
        int64_t tx_ns = (int64_t) ((double) size * 8.0 * 1000.0 / sh->rate_mbit);
        self->link_free_ns = start + tx_ns;
        ready = self->link_free_ns;
    }
    double delay_ms = sh->delay_ms;
    if (sh->jitter_ms > 0)
        delay_ms += (2.0 * nn_rng_uniform_double (rng) - 1.0) * sh->jitter_ms;
    if (delay_ms < 0)
        delay_ms = 0;
    int64_t depart = ready + (int64_t) (delay_ms * 1e6);
    if (depart < self->last_depart_ns)
        depart = self->last_depart_ns;
    return depart;
}

//  Reads up to RELAY_BURST frames from the direction's input TAP.
//  Returns -1 on a read error other than "nothing more to read".
static int
s_dir_read (s_dir_t *self, nn_rng_t *rng)
{
    //  Big enough for any frame the kernel could hand us, so an oversize
    //  frame is read whole and dropped instead of truncated.
    uint8_t buf [65536];
    for (int i = 0; i < RELAY_BURST; i++) {
        ssize_t n = read (self->in_fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return 0;
            pl_log_error ("relay: %s: read: %s", self->name, strerror (errno));
            return -1;
        }
        if (n == 0)
            return 0;
        self->frames_in++;
        if ((size_t) n > RELAY_SLOT_BYTES) {
            self->drop_oversize++;
            continue;
        }
        int64_t now = s_now_ns ();
        int64_t depart = s_dir_admit (self, rng, (size_t) n, now);
        if (depart < 0)
            continue;
        if (self->count == self->limit) {
            //  The ring is full: drop, like a full transmit queue. The link
            //  state already counted the frame; give its slot time back so
            //  the rate stays right for the frames that do go.
            if (self->shape.rate_mbit > 0)
                self->link_free_ns -= (int64_t) ((double) n * 8.0 * 1000.0
                                                 / self->shape.rate_mbit);
            self->drop_full++;
            continue;
        }
        size_t slot = (self->head + self->count) % self->limit;
        memcpy (self->frames + slot * RELAY_SLOT_BYTES, buf, (size_t) n);
        self->meta [slot].depart_ns = depart;
        self->meta [slot].size = (uint16_t) n;
        self->count++;
        self->last_depart_ns = depart;
    }
    return 0;
}

//  Writes every frame whose departure time has come.
static void
s_dir_flush (s_dir_t *self, int64_t now)
{
    while (self->count > 0 && self->meta [self->head].depart_ns <= now) {
        const s_slot_meta_t *m = &self->meta [self->head];
        ssize_t n = write (self->out_fd, self->frames + self->head * RELAY_SLOT_BYTES, m->size);
        if (n == (ssize_t) m->size) {
            self->frames_out++;
            self->bytes_out += m->size;
        }
        else
            //  A TAP write fails only when the device is down or the frame is
            //  bad; the frame is lost either way, as on a real link.
            self->write_errors++;
        self->head = (self->head + 1) % self->limit;
        self->count--;
    }
}

static void
s_dir_report (const s_dir_t *self)
{
    pl_log_info ("relay: %s: in %llu, out %llu (%llu bytes), dropped loss %llu, "
                 "queue %llu, ring %llu, oversize %llu, write errors %llu",
                 self->name, (unsigned long long) self->frames_in,
                 (unsigned long long) self->frames_out, (unsigned long long) self->bytes_out,
                 (unsigned long long) self->drop_loss, (unsigned long long) self->drop_queue,
                 (unsigned long long) self->drop_full, (unsigned long long) self->drop_oversize,
                 (unsigned long long) self->write_errors);
}

static int
s_write_pid_file (const char *path)
{
    //  Written to a temporary name and renamed, so a reader that sees the
    //  file sees the whole pid (and knows both TAPs are open).
    char tmp [4096];
    snprintf (tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen (tmp, "w");
    if (!f || fprintf (f, "%ld\n", (long) getpid ()) < 0 || fclose (f) != 0
        || rename (tmp, path) != 0) {
        pl_log_error ("relay: pid file %s: %s", path, strerror (errno));
        return -1;
    }
    return 0;
}

int
main (int argc, char **argv)
{
    s_args_t args;
    if (s_parse_args (argc, argv, &args))
        return 2;

    //  Signals arrive through a signalfd in the poll set: no handler, no
    //  global flag, and no race between checking a flag and sleeping.
    sigset_t mask;
    sigemptyset (&mask);
    sigaddset (&mask, SIGTERM);
    sigaddset (&mask, SIGINT);
    sigaddset (&mask, SIGHUP);
    sigaddset (&mask, SIGUSR1);
    if (sigprocmask (SIG_BLOCK, &mask, NULL)) {
        pl_log_error ("relay: sigprocmask: %s", strerror (errno));
        return 1;
    }
    int sfd = signalfd (-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        pl_log_error ("relay: signalfd: %s", strerror (errno));
        return 1;
    }
    int dev_fd = s_tap_open (args.dev_ns, args.dev_if);
    int srv_fd = dev_fd < 0 ? -1 : s_tap_open (args.srv_ns, args.srv_if);
    if (dev_fd < 0 || srv_fd < 0) {
        if (dev_fd >= 0)
            close (dev_fd);
        close (sfd);
        return 1;
    }
    nn_rng_t rng;
    nn_rng_seed (&rng, args.have_seed ? args.seed
                                      : (uint64_t) s_now_ns () ^ ((uint64_t) getpid () << 32));
    s_dir_t up, down;
    int rc = 1;
    int up_ok = s_dir_init (&up, "up", &args.up, args.queue_ms, (size_t) args.limit,
                            dev_fd, srv_fd) == 0;
    int down_ok = s_dir_init (&down, "down", &args.down, args.queue_ms, (size_t) args.limit,
                              srv_fd, dev_fd) == 0;
    if (!up_ok || !down_ok)
        goto done;
    if (args.pid_file && s_write_pid_file (args.pid_file))
        goto done;
    if (!args.quiet)
        pl_log_info ("relay: %s%s%s <-> %s%s%s; up %.3g Mbit/s %.3g+-%.3g ms loss %.3g%%, "
                     "down %.3g Mbit/s %.3g+-%.3g ms loss %.3g%%; queue %.3g ms, ring %ld",
                     args.dev_ns ? args.dev_ns : "", args.dev_ns ? ":" : "", args.dev_if,
                     args.srv_ns ? args.srv_ns : "", args.srv_ns ? ":" : "", args.srv_if,
                     args.up.rate_mbit, args.up.delay_ms, args.up.jitter_ms, args.up.loss_pct,
                     args.down.rate_mbit, args.down.delay_ms, args.down.jitter_ms,
                     args.down.loss_pct, args.queue_ms, args.limit);

    for (;;) {
        int64_t now = s_now_ns ();
        s_dir_flush (&up, now);
        s_dir_flush (&down, now);
        //  Sleep until the next departure, or until a frame or signal comes.
        int64_t next = -1;
        if (up.count > 0)
            next = up.meta [up.head].depart_ns;
        if (down.count > 0 && (next < 0 || down.meta [down.head].depart_ns < next))
            next = down.meta [down.head].depart_ns;
        struct timespec ts, *tsp = NULL;
        if (next >= 0) {
            int64_t wait = next - now;
            if (wait < 0)
                wait = 0;
            ts.tv_sec = (time_t) (wait / 1000000000);
            ts.tv_nsec = (long) (wait % 1000000000);
            tsp = &ts;
        }
        struct pollfd pfd [3] = {
            {.fd = dev_fd, .events = POLLIN},
            {.fd = srv_fd, .events = POLLIN},
            {.fd = sfd, .events = POLLIN},
        };
        int n = ppoll (pfd, 3, tsp, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            pl_log_error ("relay: poll: %s", strerror (errno));
            break;
        }
        if (pfd [2].revents & POLLIN) {
            struct signalfd_siginfo si;
            int stop = 0;
            while (read (sfd, &si, sizeof si) == (ssize_t) sizeof si) {
                if (si.ssi_signo == SIGUSR1) {
                    s_dir_report (&up);
                    s_dir_report (&down);
                }
                else
                    stop = 1;
            }
            if (stop) {
                rc = 0;
                break;
            }
        }
        if ((pfd [0].revents | pfd [1].revents) & (POLLERR | POLLHUP | POLLNVAL)) {
            pl_log_error ("relay: a TAP device went away");
            break;
        }
        if ((pfd [0].revents & POLLIN) && s_dir_read (&up, &rng))
            break;
        if ((pfd [1].revents & POLLIN) && s_dir_read (&down, &rng))
            break;
    }
    if (!args.quiet || rc != 0) {
        s_dir_report (&up);
        s_dir_report (&down);
    }
done:
    if (args.pid_file)
        unlink (args.pid_file);
    s_dir_free (&up);
    s_dir_free (&down);
    close (dev_fd);
    close (srv_fd);
    close (sfd);
    return rc;
}
