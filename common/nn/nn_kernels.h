/*  nn_kernels.h: the numerical kernels of the training core.

    llm.c style: free functions over raw pointers, outputs first, const
    inputs, shape last, scratch passed in. All activations are NHWC.
    Backward kernels accumulate (+=) into parameter gradients; an input
    gradient (din) is overwritten, and may be NULL when the caller does not
    need it. Every BLAS-backed kernel has a naive twin (suffix _naive, in
    nn_kernels_naive.c) that the tests compare against.
*/
#ifndef NN_KERNELS_H_INCLUDED
#define NN_KERNELS_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn_rng.h"

typedef struct {
    int n;              //  batch
    int h, w, c;        //  input sample (H, W, C)
    int k, r, s;        //  output channels, kernel height, width
    int stride, pad;
    int p, q;           //  output height, width
    int groups;         //  0 or 1: dense; g: c/g input channels per output
                        //  channel (g == c == k: depthwise)
} nn_conv_shape_t;

//  Fill p, q from the rest and make groups 0 into 1; -1 if the kernel does
//  not fit or groups does not divide c and k.
int nn_conv_shape_finish (nn_conv_shape_t *s);

//  Floats of scratch nn_conv2d_forward/backward need for a batch of n.
size_t nn_conv2d_scratch_count (const nn_conv_shape_t *s);

//  Weights are w (k,r,s,c/groups): output channel j is in group
//  i = j / (k/groups) and sees input channels [i*c/groups, (i+1)*c/groups).
//  A 1x1 stride-1 unpadded convolution is one GEMM on the input itself
//  (no im2col); depthwise ones (groups == c == k) run a direct kernel.
//  in (n,h,w,c), w (k,r,s,c/groups), b (k) or NULL -> out (n,p,q,k).
void nn_conv2d_forward (float *out, const float *in, const float *w,
                        const float *b, const nn_conv_shape_t *s, float *scratch);
//  dout (n,p,q,k), in (n,h,w,c) -> dw += (k,r,s,c/groups), db += (k) (if not NULL),
//  din = (n,h,w,c) (if not NULL).
void nn_conv2d_backward (float *din, float *dw, float *db, const float *dout,
                         const float *in, const float *w,
                         const nn_conv_shape_t *s, float *scratch);
//  Parts of the two kernels above for callers that split one batch across
//  threads at any pixel rather than at image boundaries (a batch of 25 on
//  two threads is 12.5 images each). Pointers are to the whole batch;
//  rows are the n*p*q output pixels of out (n,p,q,k).
//  forward_rows: out rows [r0, r1) only.
void nn_conv2d_forward_rows (float *out, const float *in, const float *w,
                             const float *b, const nn_conv_shape_t *s, int r0,
                             int r1, float *scratch);
//  dw += , db += (if not NULL) over output rows [r0, r1) only.
void nn_conv2d_backward_weights_rows (float *dw, float *db, const float *dout,
                                      const float *in, const nn_conv_shape_t *s,
                                      int r0, int r1, float *scratch);
//  din = (n,h,w,c) of the s->n images only. A split by image: col2im
//  scatters across rows, and a gather (dout im2col) was 15% slower for
//  VGG5's second conv (sgemm with 32 output columns).
void nn_conv2d_backward_input (float *din, const float *dout, const float *w,
                               const nn_conv_shape_t *s, float *scratch);
void nn_conv2d_forward_naive (float *out, const float *in, const float *w,
                              const float *b, const nn_conv_shape_t *s);
void nn_conv2d_backward_naive (float *din, float *dw, float *db,
                               const float *dout, const float *in,
                               const float *w, const nn_conv_shape_t *s);

//  in (n,i), w (o,i), b (o) or NULL -> out (n,o).
void nn_dense_forward (float *out, const float *in, const float *w,
                       const float *b, int n, int i, int o);
//  dout (n,o) -> dw += (o,i), db += (o), din = (n,i) if not NULL.
void nn_dense_backward (float *din, float *dw, float *db, const float *dout,
                        const float *in, const float *w, int n, int i, int o);
//  The two halves of nn_dense_backward, for callers that split the work:
//  dw (o, i) += dout^T . in and db (o) += over n samples, where dout rows
//  have stride ldo (a column slice of a wider dout); din = dout . w.
void nn_dense_backward_weights (float *dw, float *db, const float *dout,
                                const float *in, int n, int i, int o, int ldo);
void nn_dense_backward_input (float *din, const float *dout, const float *w,
                              int n, int i, int o);
//  Column slices, for callers that split the work by unit rather than by
//  sample (at small batches a split by sample has each thread read all of
//  w): out columns [o0, o1) of (n, o); din columns [i0, i1) of (n, i).
void nn_dense_forward_cols (float *out, const float *in, const float *w,
                            const float *b, int n, int i, int o, int o0, int o1);
void nn_dense_backward_input_cols (float *din, const float *dout, const float *w,
                                   int n, int i, int o, int i0, int i1);
void nn_dense_forward_naive (float *out, const float *in, const float *w,
                             const float *b, int n, int i, int o);
void nn_dense_backward_naive (float *din, float *dw, float *db,
                              const float *dout, const float *in,
                              const float *w, int n, int i, int o);

//  Batch normalisation over the channel axis of m rows of c channels
//  (m = n*h*w). Training: batch statistics (biased variance), xhat (m,c)
//  saved for backward, mean_invstd (2c) saved, running averages updated
//  with `momentum` (running var with the unbiased variance, as PyTorch).
//  out may alias in.
void nn_batchnorm_forward_train (float *out, float *xhat, float *mean_invstd,
                                 float *running_mean, float *running_var,
                                 const float *in, const float *gamma,
                                 const float *beta, int m, int c,
                                 float momentum, float eps);
//  Evaluation: running statistics. out may alias in.
void nn_batchnorm_forward_eval (float *out, const float *in,
                                const float *gamma, const float *beta,
                                const float *running_mean,
                                const float *running_var, int m, int c,
                                float eps);
//  The pieces of the two kernels above, for callers that split the rows
//  across threads: per-channel sums of x and x^2 over m rows (+= into
//  double accumulators); statistics from the totals over m_total rows
//  (also updates the running averages); normalisation of m rows.
void nn_batchnorm_moments (double *sum, double *sumsq, const float *in, int m, int c);
void nn_batchnorm_finish (float *mean_invstd, float *running_mean, float *running_var,
                          const double *sum, const double *sumsq, int m_total, int c,
                          float momentum, float eps);
//  relu: also apply ReLU to the output (BN+ReLU fused in one pass).
void nn_batchnorm_normalize (float *out, float *xhat, const float *in,
                             const float *mean_invstd, const float *gamma,
                             const float *beta, int m, int c, bool relu);
//  Backward pieces: sums of dout and dout*xhat (+=), then din for m rows of
//  a batch of m_total rows. din may alias dout.
void nn_batchnorm_backward_sums (double *sdy, double *sdyx, const float *dout,
                                 const float *xhat, int m, int c);
void nn_batchnorm_backward_apply (float *din, const float *dout, const float *xhat,
                                  const float *mean_invstd, const float *gamma,
                                  const double *sdy, const double *sdyx, int m,
                                  int m_total, int c);

//  dout (m,c) -> dgamma += , dbeta += , din = (m,c) if not NULL (may
//  alias dout).
void nn_batchnorm_backward (float *din, float *dgamma, float *dbeta,
                            const float *dout, const float *xhat,
                            const float *mean_invstd, const float *gamma,
                            int m, int c);

//  out may alias in; backward uses the forward output (out > 0).
void nn_relu_forward (float *out, const float *in, size_t count);
void nn_relu_backward (float *din, const float *dout, const float *out,
                       size_t count);

//  PyTorch's Hardswish, x * relu6 (x + 3) / 6, and Hardsigmoid,
//  relu6 (x + 3) / 6, elementwise over count floats. out may alias in.
//  Backward reads the forward input and overwrites din (may alias dout);
//  at the kinks it takes PyTorch's values: hardswish' is x/3 + 1/2 on
//  [-3, 3] (so -1/2 at -3 and 3/2 at 3), 0 below, 1 above; hardsigmoid'
//  is 1/6 on (-3, 3) and 0 elsewhere, the kinks included.
void nn_hswish_forward (float *out, const float *in, size_t count);
void nn_hswish_backward (float *din, const float *dout, const float *in, size_t count);
void nn_hsigmoid_forward (float *out, const float *in, size_t count);
void nn_hsigmoid_backward (float *din, const float *dout, const float *in, size_t count);
void nn_hswish_forward_naive (float *out, const float *in, size_t count);
void nn_hswish_backward_naive (float *din, const float *dout, const float *in,
                               size_t count);
void nn_hsigmoid_forward_naive (float *out, const float *in, size_t count);
void nn_hsigmoid_backward_naive (float *din, const float *dout, const float *in,
                                 size_t count);

//  Channel-wise multiply (squeeze-excite): x (n,hw,c), s (n,c) ->
//  out (n,hw,c) = x * s. out may alias x.
void nn_channel_scale_forward (float *out, const float *x, const float *s, int n, int hw,
                               int c);
//  dout (n,hw,c) -> dx (n,hw,c) = dout * s, ds (n,c) = sum over hw of
//  dout * x; both overwritten, either may be NULL (dx may alias dout).
void nn_channel_scale_backward (float *dx, float *ds, const float *dout, const float *x,
                                const float *s, int n, int hw, int c);
void nn_channel_scale_forward_naive (float *out, const float *x, const float *s, int n,
                                     int hw, int c);
void nn_channel_scale_backward_naive (float *dx, float *ds, const float *dout,
                                      const float *x, const float *s, int n, int hw, int c);

typedef struct {
    int n, h, w, c;
    int kernel, stride, pad;    //  kernel 0: global (the whole h x w)
    int p, q;
} nn_pool_shape_t;

int nn_pool_shape_finish (nn_pool_shape_t *s);
//  in (n,h,w,c) -> out (n,p,q,c); win (n,p,q,c) holds where in its
//  window each max was, one byte: dh * width + dw from the window's
//  unpadded corner (width = kernel, or w for global pooling), so a window
//  may hold at most NN_POOL_MAX_WINDOW pixels (nn_pool_shape_finish checks
//  max-pool shapes with nn_maxpool_fits). Padding never wins (it is -inf,
//  as PyTorch). drop_nonpositive: a winner <= 0 gets NN_POOL_NO_WINNER and
//  no gradient later (the backward of a ReLU before the pool, folded in:
//  its output is 0 exactly where its gradient is 0).
#define NN_POOL_MAX_WINDOW 255
#define NN_POOL_NO_WINNER 255
bool nn_maxpool_fits (const nn_pool_shape_t *s);
void nn_maxpool_forward (float *out, uint8_t *win, const float *in,
                         const nn_pool_shape_t *s, bool drop_nonpositive);
//  Scatters dout to the winners; NN_POOL_NO_WINNER receives nothing.
void nn_maxpool_backward (float *din, const float *dout, const uint8_t *win,
                          const nn_pool_shape_t *s);
//  Average over the window, padding counted (PyTorch count_include_pad).
void nn_avgpool_forward (float *out, const float *in, const nn_pool_shape_t *s);
void nn_avgpool_backward (float *din, const float *dout,
                          const nn_pool_shape_t *s);

//  Inverted dropout: mask (count) holds 0 or 1/(1-p). out may alias in.
void nn_dropout_forward (float *out, float *mask, const float *in, size_t count,
                         float p, nn_rng_t *rng);
void nn_dropout_backward (float *din, const float *dout, const float *mask,
                          size_t count);

//  Softmax cross-entropy over logits (n, classes), labels (n) in range.
//  Returns scale * mean loss; if dlogits is not NULL it receives
//  scale * (softmax - onehot) / n, the gradient of that value. With N
//  micro-batches of one mini-batch, scale = 1/N makes the sum of the
//  micro-batch losses (and gradients) the mini-batch mean. If correct is not
//  NULL it is incremented by the number of argmax hits.
float nn_softmax_xent (float *dlogits, const float *logits, const int *labels,
                       int n, int classes, float scale, int *correct);

#endif
