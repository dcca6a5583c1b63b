/*  pltest.c: see pltest.h. */
#include "pltest.h"

#include <assert.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "nn_checkpoint.h"
#include "pl_clock.h"
#include "runcmd.h"

void
pltest_mkdtemp (char *dir, const char *name)
{
    snprintf (dir, 4096, "/tmp/pl_test_%s_XXXXXX", name);
    cr_assert_not_null (mkdtemp (dir), "mkdtemp: %s", strerror (errno));
}

void
pltest_rmtree (const char *dir)
{
    DIR *d = opendir (dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir (d)) != NULL) {
        if (strcmp (e->d_name, ".") == 0 || strcmp (e->d_name, "..") == 0)
            continue;
        char path[4096];
        int n = snprintf (path, sizeof path, "%s/%s", dir, e->d_name);
        if (n > 0 && n < (int) sizeof path && unlink (path) != 0)
            pltest_rmtree (path);
    }
    closedir (d);
    rmdir (dir);
}

void
pltest_path (char *out, const char *dir, const char *name)
{
    int n = snprintf (out, 4096, "%s/%s", dir, name);
    cr_assert (n > 0 && n < 4096, "path too long");
}

//  Every process pltest_spawn started from this process and not reaped
//  here yet, whichever run it belongs to. A test that leaves by a failed
//  assertion does not reach its own pltest_kill_all: Criterion ends the
//  test's process through exit (), so the atexit handler below kills and
//  reaps what is left. A test process killed outright (Criterion's timeout
//  sends SIGKILL; a crash) runs no handler: its daemons get SIGKILL from the
//  kernel instead (PR_SET_PDEATHSIG, set in the child before the exec).
static pid_t s_live[PLTEST_MAX_LIVE];
static bool s_atexit_set;

static void
s_live_forget (pid_t pid)
{
    for (int i = 0; i < PLTEST_MAX_LIVE; i++)
        if (s_live[i] == pid)
            s_live[i] = 0;
}

void
pltest_reap_all (void)
{
    for (int i = 0; i < PLTEST_MAX_LIVE; i++) {
        pid_t pid = s_live[i];
        if (pid <= 0)
            continue;
        s_live[i] = 0;
        //  Still our child (0) or already exited and now reaped (pid)?
        //  -1 (ECHILD): a test reaped it with its own waitpid, and the
        //  number may belong to another process by now: leave it alone.
        if (waitpid (pid, NULL, WNOHANG) == 0) {
            kill (pid, SIGKILL);
            while (waitpid (pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
    }
}

static void
s_live_add (pid_t pid)
{
    if (!s_atexit_set) {
        cr_assert_eq (atexit (pltest_reap_all), 0, "atexit");
        s_atexit_set = true;
    }
    for (int i = 0; i < PLTEST_MAX_LIVE; i++)
        if (s_live[i] == 0) {
            s_live[i] = pid;
            return;
        }
    kill (pid, SIGKILL);
    waitpid (pid, NULL, 0);
    cr_assert_fail ("more than %d processes started by one test process", PLTEST_MAX_LIVE);
}

//  Start argv[0] with stdout+stderr to DIR/log_name.
pid_t
pltest_spawn (pltest_run_t *run, const char *log_name, char *const argv[])
{
    char log[4096];
    pltest_path (log, run->dir, log_name);
    //  Opened (and emptied) before the fork: a caller that reads the log
    //  right after this returns sees this process's lines, never those of
    //  an earlier process that wrote the same log.
    int fd = open (log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert (fd >= 0, "%s: %s", log, strerror (errno));
    pid_t parent = getpid ();
    pid_t pid = fork ();
    cr_assert (pid >= 0, "fork: %s", strerror (errno));
    if (pid == 0) {
        //  Dies with the test's process however that ends (the signal is
        //  kept across execv); a parent already gone before the prctl
        //  would never send it.
        if (prctl (PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid () != parent)
            _exit (125);
        dup2 (fd, 1);
        dup2 (fd, 2);
        close (fd);
        if (run->nofile > 0) {
            struct rlimit rl = { (rlim_t) run->nofile, (rlim_t) run->nofile };
            if (setrlimit (RLIMIT_NOFILE, &rl))
                _exit (126);
        }
        execv (argv[0], argv);
        _exit (127);
    }
    close (fd);
    s_live_add (pid);
    if (run->count == PLTEST_MAX_PROCS) {
        kill (pid, SIGKILL);
        cr_assert_fail ("more than %d processes in one run", PLTEST_MAX_PROCS);
    }
    run->pids[run->count++] = pid;
    return pid;
}

void
pltest_kill_all (pltest_run_t *run)
{
    for (int i = 0; i < run->count; i++)
        if (run->pids[i] > 0) {
            kill (run->pids[i], SIGKILL);
            waitpid (run->pids[i], NULL, 0);
            s_live_forget (run->pids[i]);
            run->pids[i] = 0;
        }
}

//  Exit status of pid, waiting at most until deadline; -1 on timeout.
int
pltest_wait (pltest_run_t *run, pid_t pid, double deadline)
{
    do {
        int st;
        pid_t r = waitpid (pid, &st, WNOHANG);
        if (r == pid) {
            s_live_forget (pid);
            for (int i = 0; i < run->count; i++)
                if (run->pids[i] == pid)
                    run->pids[i] = 0;
            return WIFEXITED (st) ? WEXITSTATUS (st) : 128 + WTERMSIG (st);
        }
        usleep (20000);
    } while (pl_monotonic () < deadline);
    return -1;
}

int
pltest_proc_stat (pid_t pid, char *state, unsigned long long *starttime)
{
    char path[64], text[1024];
    snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
    //  read (), not pltest_read: /proc files have no size to seek to.
    int fd = open (path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read (fd, text, sizeof text - 1);
    close (fd);
    if (n <= 0)
        return -1;
    text[n] = '\0';
    //  After the ')' that ends the command name: state ppid pgrp session
    //  tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    //  cstime priority nice threads itrealvalue starttime.
    const char *p = strrchr (text, ')');
    if (!p || sscanf (p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                      "%*d %*d %*d %*d %llu", state, starttime) != 2)
        return -1;
    return 0;
}

void
pltest_write (const char *path, const char *text)
{
    FILE *f = fopen (path, "w");
    cr_assert_not_null (f, "%s: %s", path, strerror (errno));
    fputs (text, f);
    fclose (f);
}

char *
pltest_read (const char *path)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return NULL;
    fseek (f, 0, SEEK_END);
    long n = ftell (f);
    fseek (f, 0, SEEK_SET);
    char *buf = malloc ((size_t) n + 1);
    size_t got = fread (buf, 1, (size_t) n, f);
    buf[got] = '\0';
    fclose (f);
    return buf;
}

//  DIR/sub/summary.json, parsed (the caller deletes it).
cJSON *
pltest_summary (const char *dir, const char *sub)
{
    char path[4096], name[128];
    snprintf (name, sizeof name, "%s/summary.json", sub);
    pltest_path (path, dir, name);
    char *text = pltest_read (path);
    cr_assert_not_null (text, "no %s", path);
    cJSON *json = cJSON_Parse (text);
    free (text);
    cr_assert_not_null (json, "%s is not JSON", path);
    return json;
}

double
pltest_num (const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive (obj, key);
    cr_assert (cJSON_IsNumber (v), "summary: field \"%s\" missing or not a number", key);
    return v->valuedouble;
}

const cJSON *
pltest_last_epoch (const cJSON *summary)
{
    const cJSON *epochs = cJSON_GetObjectItemCaseSensitive (summary, "epochs");
    cr_assert (cJSON_IsArray (epochs) && cJSON_GetArraySize (epochs) > 0,
               "summary: no epochs");
    return cJSON_GetArrayItem (epochs, cJSON_GetArraySize (epochs) - 1);
}

//  DIR/sub/model.ckpt loaded into a model of model_name for 28x28x1 inputs.
nn_model_t *
pltest_load_model (const char *dir, const char *sub, const char *model_name)
{
    return pltest_load_model_side (dir, sub, model_name, 28);
}

nn_model_t *
pltest_load_model_side (const char *dir, const char *sub, const char *model_name, int side)
{
    char path[4096], name[128], err[512];
    snprintf (name, sizeof name, "%s/model.ckpt", sub);
    pltest_path (path, dir, name);
    nn_model_spec_t spec;
    cr_assert_eq (nn_model_spec_by_name (&spec, model_name, 1, side, side, 10, err,
                                         sizeof err), 0, "%s", err);
    nn_model_t *m = nn_model_new (&spec, 0, spec.units_count, 1, err, sizeof err);
    cr_assert_not_null (m, "%s", err);
    cr_assert_eq (nn_checkpoint_load (path, m, err, sizeof err), 0, "%s", err);
    return m;
}

//  Largest |a - b| / (1 + |a|) over the weights, and the largest change
//  from the initial weights is not compared here (the exactness tests
//  check training happened through the summary's loss).
double
pltest_max_rel_diff (nn_model_t *a, nn_model_t *b)
{
    cr_assert_eq (nn_model_weights_count (a), nn_model_weights_count (b));
    return pltest_max_rel_diff_floats (nn_model_weights_const (a), nn_model_weights_const (b),
                                       nn_model_weights_count (a));
}

double
pltest_max_rel_diff_floats (const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs ((double) a[i] - b[i]) / (1.0 + fabs ((double) a[i]));
        if (!(d <= worst))
            worst = d;      //  NaN propagates as worst
    }
    return worst;
}


//  Does DIR/log contain needle?
bool
pltest_log_has (pltest_run_t *run, const char *log, const char *needle)
{
    char path[4096];
    pltest_path (path, run->dir, log);
    char *text = pltest_read (path);
    bool has = text && strstr (text, needle);
    free (text);
    return has;
}

//  Wait until DIR/log contains needle; false at the deadline.
bool
pltest_wait_log (pltest_run_t *run, const char *log, const char *needle, double timeout_s)
{
    double deadline = pl_monotonic () + timeout_s;
    while (!pltest_log_has (run, log, needle)) {
        if (pl_monotonic () > deadline)
            return false;
        usleep (20000);
    }
    return true;
}

//  timeline.csv, as read back by the tests


static const char pltest_header[] = "who,stage,epoch,iteration,micro_batch,start_s,end_s,"
                                    "split_point,micro_batches\n";

int
pltest_row_device (const pltest_row_t *row)
{
    int id = -1;
    if (sscanf (row->who, "device%d", &id) != 1 && sscanf (row->who, "server:d%d", &id) != 1
    &&  sscanf (row->who, "link:d%d", &id) != 1)
        return -1;
    return id;
}

//  Parse DIR/sub/timeline.csv; every line must be a well-formed row. The
//  caller frees rows.
pltest_csv_t
pltest_load_csv (const char *dir, const char *sub)
{
    char path[4096], name[128];
    snprintf (name, sizeof name, "%s/timeline.csv", sub);
    pltest_path (path, dir, name);
    char *text = pltest_read (path);
    cr_assert_not_null (text, "no %s", path);
    cr_assert (strncmp (text, pltest_header, strlen (pltest_header)) == 0, "%s: header", path);
    pltest_csv_t csv = { .rows = NULL, .count = 0 };
    int capacity = 0;
    char *save = NULL;
    int line_no = 1;
    for (char *line = strtok_r (text + strlen (pltest_header), "\n", &save); line;
         line = strtok_r (NULL, "\n", &save)) {
        line_no++;
        if (csv.count == capacity) {
            capacity = capacity ? 2 * capacity : 1024;
            csv.rows = realloc (csv.rows, sizeof (pltest_row_t) * (size_t) capacity);
            cr_assert_not_null (csv.rows);
        }
        pltest_row_t *r = &csv.rows[csv.count];
        int used = 0;
        int n = sscanf (line, "%15[^,],%15[^,],%d,%d,%d,%lf,%lf,%d,%d%n", r->who, r->stage,
                        &r->epoch, &r->iteration, &r->micro_batch, &r->start_s, &r->end_s,
                        &r->split_point, &r->micro_batches, &used);
        cr_assert (n == 9 && line[used] == '\0', "%s:%d: malformed row \"%s\"", path,
                   line_no, line);
        csv.count++;
    }
    free (text);
    return csv;
}

void
pltest_expect_timeline_split (const char *dir, const char *sub, int devices, int epochs,
                              const int *split, int micro)
{
    assert (devices > 0 && epochs >= 0);
    pltest_csv_t csv = pltest_load_csv (dir, sub);
    const int groups = epochs > 0 ? epochs : 1;
    int *seen = calloc ((size_t) (groups * devices), sizeof *seen);
    cr_assert_not_null (seen);
    for (int k = 0; k < csv.count; k++) {
        const pltest_row_t *r = &csv.rows[k];
        int id = pltest_row_device (r);
        if (id < 0)
            continue;
        cr_assert (id < devices, "timeline.csv: row of %s", r->who);
        if (epochs > 0)
            cr_assert (r->epoch >= 1 && r->epoch <= epochs, "timeline.csv: %s row of epoch %d",
                       r->who, r->epoch);
        int g = epochs > 0 ? r->epoch - 1 : 0;
        cr_assert_eq (r->split_point, split[g * devices + id], "timeline.csv: %s %s in epoch "
                      "%d ran at split point %d", r->who, r->stage, r->epoch, r->split_point);
        cr_assert_eq (r->micro_batches, micro, "timeline.csv: %s %s ran %d micro-batches",
                      r->who, r->stage, r->micro_batches);
        seen[g * devices + id]++;
    }
    for (int g = 0; g < groups; g++) {
        char counts[512] = "";
        bool each = true;
        for (int d = 0; d < devices; d++) {
            size_t used = strlen (counts);
            snprintf (counts + used, sizeof counts - used, "%sdevice %d %d", d ? ", " : "", d,
                      seen[g * devices + d]);
            each = each && seen[g * devices + d] > 0;
        }
        if (epochs > 0)
            cr_expect (each, "timeline.csv: epoch %d rows of %s", g + 1, counts);
        else
            cr_expect (each, "timeline.csv: rows of %s", counts);
    }
    free (seen);
    free (csv.rows);
}

void
pltest_dump_logs (pltest_run_t *run)
{
    const char *names[] = { "server.log", "client0.log", "client1.log", "client2.log",
                            "train.log" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4096];
        pltest_path (path, run->dir, names[i]);
        char *text = pltest_read (path);
        if (text) {
            fprintf (stderr, "---- %s\n%s", names[i], text);
            free (text);
        }
    }
}

//  Wait for pid to exit with status want (dumps the logs if not).
void
pltest_expect_exit (pltest_run_t *run, pid_t pid, int want, const char *who)
{
    int rc = pltest_wait (run, pid, pl_monotonic () + 180);
    if (rc != want) {
        pltest_dump_logs (run);
        pltest_kill_all (run);
    }
    cr_assert_eq (rc, want, "%s: exit status %d, want %d", who, rc, want);
}

//  Start the server for config_json with results in DIR/sub; returns its
//  endpoint in endpoint (waits for the endpoint file). cert NULL: --insecure;
//  else CurveZMQ with that secret certificate and the allow directory.
pid_t
pltest_start_server_full (pltest_run_t *run, const char *sub, const char *config_json,
                          char *endpoint, size_t size, const char *cert, const char *allow,
                          const char *bind, bool resume)
{
    char cfg[4096], res[4096], ep[4096], bin[4096];
    char name[64];
    snprintf (name, sizeof name, "%s.json", sub);
    pltest_path (cfg, run->dir, name);
    pltest_write (cfg, config_json);
    pltest_path (res, run->dir, sub);
    snprintf (name, sizeof name, "%s.endpoint", sub);
    pltest_path (ep, run->dir, name);
    built ("server/pipelearn-server", bin, sizeof bin);
    char *argv[20] = { bin, "--config", cfg, "--bind",
                       (char *) (bind ? bind : "tcp://127.0.0.1:*"), "--results", res,
                       "--endpoint-file", ep, "--quiet", "--insecure", NULL };
    int at = cert ? 10 : 11;        //  keys replace --insecure
    if (cert) {
        argv[at++] = "--cert", argv[at++] = (char *) cert;
        argv[at++] = "--allow", argv[at++] = (char *) allow;
    }
    if (resume)
        argv[at++] = "--resume";
    argv[at] = NULL;
    unlink (ep);
    pid_t pid = pltest_spawn (run, "server.log", argv);
    double deadline = pl_monotonic () + 30;
    while (pl_monotonic () < deadline) {
        int st;
        if (waitpid (pid, &st, WNOHANG) == pid) {
            s_live_forget (pid);
            run->pids[run->count - 1] = 0;
            pltest_dump_logs (run);
            pltest_kill_all (run);
            cr_assert_fail ("the server exited before binding");
        }
        char *text = pltest_read (ep);
        if (text && *text) {
            snprintf (endpoint, size, "%s", text);
            free (text);
            return pid;
        }
        free (text);
        usleep (20000);
    }
    pltest_dump_logs (run);
    pltest_kill_all (run);
    cr_assert_fail ("the server wrote no endpoint file");
    return -1;
}

pid_t
pltest_start_server_sec (pltest_run_t *run, const char *sub, const char *config_json,
                         char *endpoint, size_t size, const char *cert, const char *allow)
{
    return pltest_start_server_full (run, sub, config_json, endpoint, size, cert, allow, NULL,
                                false);
}

pid_t
pltest_start_server (pltest_run_t *run, const char *sub, const char *config_json,
                     char *endpoint, size_t size)
{
    return pltest_start_server_full (run, sub, config_json, endpoint, size, NULL, NULL, NULL,
                                false);
}

//  A device; cert NULL: --insecure, else CurveZMQ with this secret
//  certificate, trusting the server certificate server_cert. Gives up
//  after timeout seconds of silence.
pid_t
pltest_start_client_sec (pltest_run_t *run, int index, const char *endpoint,
                         const char *cert, const char *server_cert, const char *timeout)
{
    char bin[4096], log[64], id[16];
    built ("client/pipelearn-client", bin, sizeof bin);
    snprintf (log, sizeof log, "client%d.log", index);
    snprintf (id, sizeof id, "%d", index);
    char *argv[16] = { bin, "--connect", (char *) endpoint, "--device-id", id,
                       "--timeout", (char *) timeout, "--insecure", NULL };
    if (cert) {
        argv[7] = "--cert", argv[8] = (char *) cert;
        argv[9] = "--server-cert", argv[10] = (char *) server_cert, argv[11] = NULL;
    }
    return pltest_spawn (run, log, argv);
}

pid_t
pltest_start_client (pltest_run_t *run, int index, const char *endpoint)
{
    return pltest_start_client_sec (run, index, endpoint, NULL, NULL, "60");
}


//  Wait for the server and `devices` clients; asserts every exit status 0
//  (dumps the logs and kills what is left first if not).
void
pltest_finish_run (pltest_run_t *run, const char *sub, pid_t server, const pid_t *clients,
                   int devices)
{
    int src = pltest_wait (run, server, pl_monotonic () + PLTEST_RUN_TIMEOUT_S);
    int crc[PLTEST_MAX_PROCS];
    bool ok = src == 0;
    for (int i = 0; i < devices; i++) {
        crc[i] = pltest_wait (run, clients[i], pl_monotonic () + 20);
        ok = ok && crc[i] == 0;
    }
    if (!ok) {
        pltest_dump_logs (run);
        pltest_kill_all (run);
    }
    cr_assert (src == 0, "%s: server exit status %d", sub, src);
    for (int i = 0; i < devices; i++)
        cr_assert (crc[i] == 0, "%s: client %d exit status %d", sub, i, crc[i]);
}

//  Server + `devices` real clients (--insecure), run to the end.
void
pltest_run_daemons (pltest_run_t *run, const char *sub, const char *config_json, int devices)
{
    char endpoint[256];
    pid_t server = pltest_start_server (run, sub, config_json, endpoint, sizeof endpoint);
    pid_t clients[PLTEST_MAX_PROCS];
    for (int i = 0; i < devices; i++)
        clients[i] = pltest_start_client (run, i, endpoint);
    pltest_finish_run (run, sub, server, clients, devices);
}

void *
pltest_router_bind (void *ctx, char *endpoint, size_t size)
{
    void *router = zmq_socket (ctx, ZMQ_ROUTER);
    cr_assert_not_null (router);
    zmq_setsockopt (router, ZMQ_LINGER, &(int) { 0 }, sizeof (int));
    cr_assert_eq (zmq_bind (router, "tcp://127.0.0.1:*"), 0);
    size_t len = size;
    cr_assert_eq (zmq_getsockopt (router, ZMQ_LAST_ENDPOINT, endpoint, &len), 0);
    return router;
}
