/*  pltest.h: the tests' support library (tests/support/, linked into the
    test programs that need it): temporary directories, and running the
    real pipelearn-server and pipelearn-client binaries from a test: spawn
    with logs in the run's directory, start a server on tcp://127.0.0.1:*
    and read its endpoint file, wait with deadlines, dump the logs on
    failure, kill everything at the end; read summary.json, timeline.csv
    and model.ckpt back; bind a stand-in server's ROUTER. Failures are Criterion assertions of the calling
    test.
*/
#ifndef PLTEST_H_INCLUDED
#define PLTEST_H_INCLUDED

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "nn_model.h"

#define PLTEST_MAX_PROCS 40
//  Processes started and not yet reaped, over all runs of one test process.
#define PLTEST_MAX_LIVE 256

//  Built with AddressSanitizer (gcc's macro; clang's __has_feature): the
//  daemons' RSS is the sanitizer's (shadow memory, quarantine), so memory
//  bounds are not checked.
#if defined (__SANITIZE_ADDRESS__)
#   define PLTEST_UNDER_ASAN 1
#elif defined (__has_feature)
#   if __has_feature (address_sanitizer)
#       define PLTEST_UNDER_ASAN 1
#   endif
#endif
#ifndef PLTEST_UNDER_ASAN
#   define PLTEST_UNDER_ASAN 0
#endif

//  How long a whole test run of the daemons may take.
#define PLTEST_RUN_TIMEOUT_S 240

typedef struct {
    char dir[4096];
    pid_t pids[PLTEST_MAX_PROCS];
    int count;
    int nofile;                 //  > 0: RLIMIT_NOFILE (soft and hard) of the next spawns
} pltest_run_t;

typedef struct {
    char who[16], stage[16];
    int epoch, iteration, micro_batch;
    double start_s, end_s;
    int split_point, micro_batches;     //  what the row's device ran (-1: none)
} pltest_row_t;

typedef struct {
    pltest_row_t *rows;
    int count;
} pltest_csv_t;

//  A new directory /tmp/pl_test_NAME_XXXXXX in dir (4096 bytes): each
//  test its own (Criterion runs tests in parallel processes).
void pltest_mkdtemp (char *dir, const char *name);

//  rm -r dir (best effort).
void pltest_rmtree (const char *dir);

//  out (4096 bytes) = dir/name.
void pltest_path (char *out, const char *dir, const char *name);

//  Start argv[0] with stdout+stderr to DIR/log_name.
pid_t pltest_spawn (pltest_run_t *run, const char *log_name, char *const argv[]);

//  SIGKILL and reap every process the run started that is still there.
void pltest_kill_all (pltest_run_t *run);

//  SIGKILL and reap every process pltest_spawn started from this process,
//  of any run, that is still its child. Runs by itself at exit (registered
//  with atexit at the first spawn), so a test that fails an assertion
//  leaves no daemon behind; a test process killed outright takes its
//  daemons with it (PR_SET_PDEATHSIG).
void pltest_reap_all (void);

//  Exit status of pid, waiting at most until deadline; -1 on timeout.
int pltest_wait (pltest_run_t *run, pid_t pid, double deadline);

//  Field 3 (state: R, S, Z, ...) and 22 (start time in clock ticks since
//  boot, which tells a process from a later one given the same number) of
//  /proc/pid/stat; -1 if there is no such process.
int pltest_proc_stat (pid_t pid, char *state, unsigned long long *starttime);

//  A whole file; its text (the caller frees it), or NULL.
void pltest_write (const char *path, const char *text);

char *pltest_read (const char *path);

//  DIR/sub/summary.json, parsed (the caller deletes it).
cJSON *pltest_summary (const char *dir, const char *sub);

//  A number field that must be there; the last entry of "epochs".
double pltest_num (const cJSON *obj, const char *key);

const cJSON *pltest_last_epoch (const cJSON *summary);

//  DIR/sub/model.ckpt loaded into a model of model_name for 28x28x1 inputs.
nn_model_t *pltest_load_model (const char *dir, const char *sub, const char *model_name);
//  The same for side x side x 1 inputs (images padded with "pad_to").
nn_model_t *pltest_load_model_side (const char *dir, const char *sub, const char *model_name,
                                    int side);

//  Largest |a - b| / (1 + |a|) over the weights, and the largest change
//  from the initial weights is not compared here (the exactness tests
//  check training happened through the summary's loss).
double pltest_max_rel_diff (nn_model_t *a, nn_model_t *b);
//  The same measure over two arrays of n floats (a NaN reads as the worst).
double pltest_max_rel_diff_floats (const float *a, const float *b, size_t n);

//  Does DIR/log contain needle?
bool pltest_log_has (pltest_run_t *run, const char *log, const char *needle);

//  Wait until DIR/log contains needle; false at the deadline.
bool pltest_wait_log (pltest_run_t *run, const char *log, const char *needle,
                      double timeout_s);

//  Parse DIR/sub/timeline.csv; every line must be a well-formed row. The
//  caller frees rows.
pltest_csv_t pltest_load_csv (const char *dir, const char *sub);
//  The device a row is about (deviceN, server:dN, link:dN), or -1 (the
//  server's own rows).
int pltest_row_device (const pltest_row_t *row);
//  Every device row of DIR/sub/timeline.csv ran split point S(epoch,
//  device) and `micro` micro-batches, and each device has rows: with
//  epochs > 0, S(e, d) is split[(e - 1) * devices + d], every row's epoch
//  is 1..epochs and each epoch has rows of each device; with epochs 0,
//  S(e, d) is split[d] whatever the epoch and rows are counted over the
//  run. A row of a device id >= devices fails the test.
void pltest_expect_timeline_split (const char *dir, const char *sub, int devices, int epochs,
                                   const int *split, int micro);

//  The daemons' logs of the run, to stderr (for a failing test).
void pltest_dump_logs (pltest_run_t *run);

//  Wait for pid to exit with status want (dumps the logs if not).
void pltest_expect_exit (pltest_run_t *run, pid_t pid, int want, const char *who);

//  Start the server for config_json with results in DIR/sub; returns its
//  endpoint in endpoint (waits for the endpoint file). cert NULL: --insecure;
//  else CurveZMQ with that secret certificate and the allow directory.
pid_t pltest_start_server_full (pltest_run_t *run, const char *sub, const char *config_json,
                                char *endpoint, size_t size, const char *cert,
                                const char *allow, const char *bind, bool resume);

pid_t pltest_start_server_sec (pltest_run_t *run, const char *sub, const char *config_json,
                               char *endpoint, size_t size, const char *cert,
                               const char *allow);

pid_t pltest_start_server (pltest_run_t *run, const char *sub, const char *config_json,
                           char *endpoint, size_t size);

//  A device; cert NULL: --insecure, else CurveZMQ with this secret
//  certificate, trusting the server certificate server_cert. Gives up
//  after timeout seconds of silence.
pid_t pltest_start_client_sec (pltest_run_t *run, int index, const char *endpoint,
                               const char *cert, const char *server_cert,
                               const char *timeout);

pid_t pltest_start_client (pltest_run_t *run, int index, const char *endpoint);

//  Wait for the server and `devices` clients; asserts every exit status 0
//  (dumps the logs and kills what is left first if not).
void pltest_finish_run (pltest_run_t *run, const char *sub, pid_t server,
                        const pid_t *clients, int devices);

//  Server + `devices` real clients (--insecure), run to the end.
void pltest_run_daemons (pltest_run_t *run, const char *sub, const char *config_json,
                         int devices);

//  A stand-in server for a test that speaks the protocol by hand: a new
//  ROUTER socket of the libzmq context ctx, linger 0, bound to
//  tcp://127.0.0.1:* (the test fails if it cannot bind); its endpoint in
//  endpoint (size bytes). The caller closes the socket (zmq_close) before
//  it terminates ctx.
void *pltest_router_bind (void *ctx, char *endpoint, size_t size);

#endif
