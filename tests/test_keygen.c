/*  pipelearn-keygen as an operator uses it: a pair CZMQ loads back (with
    zcert_load, as the daemons do), a public file without the secret key, a
    secret file only its owner can read whatever the umask, no silent
    overwrite, clear errors.
*/
#include <criterion/criterion.h>

#include <czmq.h>
#include <sys/stat.h>

#include "runcmd.h"

#define S_ZEROES "0000000000000000000000000000000000000000"   //  Z85 of a null key

static char s_dir[64];

static void
s_setup (void)
{
    snprintf (s_dir, sizeof s_dir, "/tmp/pl_test_keygen_XXXXXX");
    cr_assert_not_null (mkdtemp (s_dir));
}

static void
s_teardown (void)
{
    char cmd[128], out[256];
    snprintf (cmd, sizeof cmd, "rm -rf %s", s_dir);
    runcmd (cmd, out, sizeof out);
}

TestSuite (keygen, .init = s_setup, .fini = s_teardown);

//  Run "[prefix] pipelearn-keygen args"; returns its exit status.
static int
s_keygen (const char *prefix, const char *args, char *out, size_t size)
{
    char bin[1024], cmd[4096];
    built ("server/pipelearn-keygen", bin, sizeof bin);
    snprintf (cmd, sizeof cmd, "%s%s %s", prefix, bin, args);
    return runcmd (cmd, out, size);
}

static char *
s_read (const char *path)
{
    FILE *f = fopen (path, "rb");
    cr_assert_not_null (f, "cannot open %s", path);
    static char buf[8192];
    size_t n = fread (buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose (f);
    return buf;
}

//  DIR/name into out (512 bytes).
static void
s_file (char *out, const char *name)
{
    snprintf (out, 512, "%s/%s", s_dir, name);
}

static mode_t
s_mode (const char *path)
{
    struct stat st;
    cr_assert_eq (stat (path, &st), 0, "cannot stat %s", path);
    return st.st_mode & 07777;
}

static bool
s_exists (const char *path)
{
    struct stat st;
    return lstat (path, &st) == 0;
}

Test (keygen, writes_a_pair_that_czmq_loads_back)
{
    char base[512], secret[520], out[4096];
    s_file (base, "device1");
    snprintf (secret, sizeof secret, "%s_secret", base);
    int rc = s_keygen ("", base, out, sizeof out);
    cr_assert_eq (rc, 0, "%s", out);
    cr_assert (strstr (out, "public-key"), "no public key printed: %s", out);

    //  zcert_load (base) reads base_secret when it exists: both keys.
    zcert_t *cert = zcert_load (base);
    cr_assert_not_null (cert, "zcert_load %s failed", base);
    char pub_txt[41], sec_txt[41];
    snprintf (pub_txt, sizeof pub_txt, "%s", zcert_public_txt (cert));
    snprintf (sec_txt, sizeof sec_txt, "%s", zcert_secret_txt (cert));
    cr_assert_eq (strlen (pub_txt), 40);
    cr_assert_eq (strlen (sec_txt), 40);
    cr_assert_str_neq (sec_txt, S_ZEROES, "the secret file holds no secret key");
    cr_assert_str_eq (zcert_meta (cert, "name"), "device1");
    cr_assert_str_eq (zcert_meta (cert, "created-by"), "pipelearn-keygen");
    zcert_destroy (&cert);
    cr_assert (strstr (out, pub_txt), "printed key is not the file's: %s", out);

    //  The public file alone, as a peer receives it: same public key, no secret.
    char subdir[512], copy[600], cmd[2048];
    s_file (subdir, "peer");
    snprintf (copy, sizeof copy, "%s/device1", subdir);
    snprintf (cmd, sizeof cmd, "mkdir %s && cp %s %s", subdir, base, copy);
    cr_assert_eq (runcmd (cmd, out, sizeof out), 0, "%s", out);
    cert = zcert_load (copy);
    cr_assert_not_null (cert, "zcert_load of the public file failed");
    cr_assert_str_eq (zcert_public_txt (cert), pub_txt);
    cr_assert_str_eq (zcert_secret_txt (cert), S_ZEROES,
                      "the public file carries a secret key");
    zcert_destroy (&cert);

    const char *text = s_read (base);
    cr_assert_null (strstr (text, "secret-key"), "public file names a secret key:\n%s", text);
    cr_assert_null (strstr (text, sec_txt), "public file contains the secret key");
    text = s_read (secret);
    cr_assert (strstr (text, sec_txt), "secret file lacks the secret key");
}

Test (keygen, secret_is_0600_even_under_umask_000)
{
    char base[512], secret[520], out[4096];
    s_file (base, "server");
    snprintf (secret, sizeof secret, "%s_secret", base);
    int rc = s_keygen ("umask 000 && ", base, out, sizeof out);
    cr_assert_eq (rc, 0, "%s", out);
    cr_assert_eq (s_mode (secret), 0600, "secret mode %o", (unsigned) s_mode (secret));
    //  The public file follows the caller's umask: 0644 at most.
    cr_assert_eq (s_mode (base) & 0133, 0, "public mode %o", (unsigned) s_mode (base));
}

Test (keygen, refuses_to_overwrite_without_force)
{
    char base[512], secret[520], out[4096];
    s_file (base, "dev");
    snprintf (secret, sizeof secret, "%s_secret", base);
    cr_assert_eq (s_keygen ("", base, out, sizeof out), 0, "%s", out);
    char before[8192];
    snprintf (before, sizeof before, "%s", s_read (secret));

    int rc = s_keygen ("", base, out, sizeof out);
    cr_assert_eq (rc, 1, "second run: rc %d: %s", rc, out);
    cr_assert (strstr (out, "already exists") && strstr (out, "--force"),
               "unclear refusal: %s", out);
    cr_assert_str_eq (s_read (secret), before, "the secret file changed");

    //  Only the public half there: still refused, and nothing left behind.
    cr_assert_eq (unlink (secret), 0);
    rc = s_keygen ("", base, out, sizeof out);
    cr_assert_eq (rc, 1, "%s", out);
    cr_assert (!s_exists (secret), "a refused run left %s behind", secret);
}

Test (keygen, force_replaces_the_pair_and_tightens_the_mode)
{
    char base[512], secret[520], out[4096];
    s_file (base, "dev");
    snprintf (secret, sizeof secret, "%s_secret", base);
    cr_assert_eq (s_keygen ("", base, out, sizeof out), 0, "%s", out);
    char before[8192];
    snprintf (before, sizeof before, "%s", s_read (secret));
    cr_assert_eq (chmod (secret, 0644), 0);     //  someone loosened it

    char args[600];
    snprintf (args, sizeof args, "--force %s", base);
    int rc = s_keygen ("", args, out, sizeof out);
    cr_assert_eq (rc, 0, "%s", out);
    cr_assert_str_neq (s_read (secret), before, "--force kept the old key");
    cr_assert_eq (s_mode (secret), 0600, "secret mode %o", (unsigned) s_mode (secret));
}

Test (keygen, usage_and_clear_errors)
{
    char out[4096];
    cr_assert_eq (s_keygen ("", "--help", out, sizeof out), 0, "%s", out);
    cr_assert (strstr (out, "usage: pipelearn-keygen"), "%s", out);
    cr_assert_eq (s_keygen ("", "", out, sizeof out), 2, "%s", out);
    cr_assert_eq (s_keygen ("", "--bogus x", out, sizeof out), 2, "%s", out);
    cr_assert_eq (s_keygen ("", "a b", out, sizeof out), 2, "%s", out);
    cr_assert_eq (s_keygen ("", "-- -", out, sizeof out), 2, "%s", out);

    char base[512];
    s_file (base, "missing-dir/dev");
    int rc = s_keygen ("", base, out, sizeof out);
    cr_assert_eq (rc, 1, "%s", out);
    cr_assert (strstr (out, "cannot create") && strstr (out, "No such file"),
               "unclear error: %s", out);
}
