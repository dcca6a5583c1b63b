/*  The slow suite: VGG5 learns Fashion-MNIST to the expected accuracy. */
#include <criterion/criterion.h>

#include "runcmd.h"

#include <cJSON.h>
#include <unistd.h>

Test (learning, vgg5_fashion_mnist_one_epoch_reaches_85_percent, .timeout = 1500)
{
    if (access ("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK))
        cr_skip_test ("dataset-fashion-mnist is not installed");
    char bin[1024], cmd[2048], out[16384];
    built ("server/pipelearn-train", bin, sizeof bin);
    char dir[] = "/tmp/pl-learn-XXXXXX";
    cr_assert_not_null (mkdtemp (dir));
    //  The setting: batch 100, lr 0.01, momentum 0.9, one epoch over
    //  all 60000 images, no augmentation.
    snprintf (cmd, sizeof cmd,
              "%s --set model=vgg5 --set dataset=fashion-mnist --set batch_size=100 "
              "--set learning_rate=0.01 --set momentum=0.9 --set augment=false "
              "--epochs 1 --results %s", bin, dir);
    int rc = runcmd (cmd, out, sizeof out);
    cr_assert_eq (rc, 0, "%s", out);
    char path[256];
    snprintf (path, sizeof path, "%s/summary.json", dir);
    FILE *f = fopen (path, "r");
    cr_assert_not_null (f);
    static char buf[1 << 16];
    buf[fread (buf, 1, sizeof buf - 1, f)] = '\0';
    fclose (f);
    cJSON *j = cJSON_Parse (buf);
    cJSON *e = cJSON_GetArrayItem (cJSON_GetObjectItem (j, "epochs"), 0);
    double acc = cJSON_GetObjectItem (e, "test_acc")->valuedouble;
    cr_log_info ("test accuracy after one epoch: %.2f%%\n", 100.0 * acc);
    cr_assert_geq (acc, 0.85, "test accuracy %.4f < 0.85\n%s", acc, out);
    cJSON_Delete (j);
    snprintf (cmd, sizeof cmd, "rm -rf %s", dir);
    runcmd (cmd, out, sizeof out);
}
