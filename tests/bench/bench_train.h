/*  bench_train.h: the pieces of pipelearn-bench (bench_train.c), which
    times training of one of our models against PyTorch's twin of it. */
#ifndef BENCH_TRAIN_H_INCLUDED
#define BENCH_TRAIN_H_INCLUDED

//  The most repeats a run takes (medians are of at most this many).
#define BENCH_MAX_REPEATS 15

//  Median of v[0..n) (sorts v).
double bench_median (double *v, int n);

//  `pipelearn-bench --worker ...` (argv[0] is "--worker"): trains our model
//  in this process alone and prints one JSON line of figures on stdout (its
//  options and fields are in bench_train_worker.c). The parent runs each
//  setting in a worker so that each side's peak RSS is its own. Returns the
//  exit code.
int bench_worker_main (int argc, char **argv);

//  One core's OpenBLAS sgemm on 1024^3, the best of 5, in GFLOP/s of the
//  calling thread's CPU time (so also on a host shared with other jobs).
double bench_sgemm_peak (void);
//  VGG5's three convolutions (28x28x1, batch 100, one thread) forward and
//  backward, the best of `repeats`, in GFLOP/s of the matrix work per
//  second of thread CPU time.
double bench_vgg5_conv_rate (int repeats);
//  `pipelearn-bench --conv-calls`: prints, per 3x3 convolution shape of
//  docs/performance.md's "Winograd" tables, the path it takes (wino4:
//  F(4x4, 3x3), winograd: F(2x2, 3x3), im2col or direct) and its forward,
//  weight and input gradient times per call.
void bench_conv_calls (int repeats);

#endif
