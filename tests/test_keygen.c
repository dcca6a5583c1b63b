/*  pipelearn-keygen as an operator uses it: a pair CZMQ loads back (with
    zcert_load, as the daemons do), a public file without the secret key, a
    secret file only its owner can read whatever the umask, no silent
    overwrite, clear errors.
*/
#include <criterion/criterion.h>

#include <czmq.h>
#include <sys/stat.h>

#include "pl_curve.h"
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

//  ---------------------------------------------------------------------
//  Loading key files (common/net/pl_curve.c). zcert_load took a key with an
//  invalid Z85 character (decoding into an uninitialised key) or a public
//  half from another pair; the server then answered no HELLO and every
//  device saw only a timeout. The daemons now refuse such files at start,
//  naming the file.

//  A fresh pair DIR/name (public) and DIR/name_secret.
static void
s_pair (char *base, char *secret, const char *name)
{
    char out[4096];
    s_file (base, name);
    snprintf (secret, 520, "%s_secret", base);
    cr_assert_eq (s_keygen ("", base, out, sizeof out), 0, "%s", out);
}

//  The Z85 text of key ("public-key" or "secret-key") in the file at path.
static void
s_key_txt (char *out, const char *path, const char *key)
{
    const char *text = s_read (path);
    char needle[64];
    snprintf (needle, sizeof needle, "%s = \"", key);
    const char *at = strstr (text, needle);
    cr_assert_not_null (at, "%s has no %s", path, key);
    snprintf (out, 41, "%s", at + strlen (needle));
}

//  Rewrite the file at path with the Z85 text of key replaced by txt.
static void
s_set_key_txt (const char *path, const char *key, const char *txt)
{
    char text[8192], needle[64];
    snprintf (text, sizeof text, "%s", s_read (path));
    snprintf (needle, sizeof needle, "%s = \"", key);
    char *at = strstr (text, needle);
    cr_assert_not_null (at, "%s has no %s", path, key);
    memcpy (at + strlen (needle), txt, 40);
    FILE *f = fopen (path, "wb");
    cr_assert_not_null (f);
    cr_assert_eq (fwrite (text, 1, strlen (text), f), strlen (text));
    cr_assert_eq (fclose (f), 0);
}

//  pl_curve_client_apply (cert, server_cert): 0, or -1 with the message.
static int
s_client_apply (const char *cert, const char *server_cert, char *err, size_t size)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    cr_assert_not_null (sock);
    err[0] = 0;
    int rc = pl_curve_client_apply (sock, cert, server_cert, err, size);
    zsock_destroy (&sock);
    return rc;
}

#define S_ASSERT_REFUSED(rc, err, path, words) do { \
    cr_assert_eq ((rc), -1, "accepted; wanted \"%s\"", (words)); \
    cr_assert (strstr ((err), (path)), "message does not name %s: %s", (path), (err)); \
    cr_assert (strstr ((err), (words)), "message lacks \"%s\": %s", (words), (err)); \
} while (0)

Test (keygen, bad_key_files_are_refused_naming_the_file)
{
    char dev[512], dev_secret[520], srv[512], srv_secret[520], err[512];
    s_pair (dev, dev_secret, "dev");
    s_pair (srv, srv_secret, "srv");
    cr_assert_eq (s_client_apply (dev_secret, srv, err, sizeof err), 0, "%s", err);
    char good_secret[41], good_public[41], srv_public[41];
    s_key_txt (good_secret, dev_secret, "secret-key");
    s_key_txt (good_public, dev_secret, "public-key");
    s_key_txt (srv_public, srv, "public-key");

    //  A character outside Z85 in the secret key.
    char bad[41];
    snprintf (bad, sizeof bad, "%s", good_secret);
    bad[17] = '~';
    s_set_key_txt (dev_secret, "secret-key", bad);
    int rc = s_client_apply (dev_secret, srv, err, sizeof err);
    S_ASSERT_REFUSED (rc, err, dev_secret, "secret-key is not a 40-character Z85 key");
    s_set_key_txt (dev_secret, "secret-key", good_secret);

    //  A public half that is not the secret's (another pair's).
    s_set_key_txt (dev_secret, "public-key", srv_public);
    rc = s_client_apply (dev_secret, srv, err, sizeof err);
    S_ASSERT_REFUSED (rc, err, dev_secret, "not the secret-key's public half");
    //  ... or not Z85 at all.
    snprintf (bad, sizeof bad, "%s", good_public);
    bad[0] = ' ';
    s_set_key_txt (dev_secret, "public-key", bad);
    rc = s_client_apply (dev_secret, srv, err, sizeof err);
    S_ASSERT_REFUSED (rc, err, dev_secret, "public-key is not a 40-character Z85 key");
    s_set_key_txt (dev_secret, "public-key", good_public);
    cr_assert_eq (s_client_apply (dev_secret, srv, err, sizeof err), 0, "%s", err);

    //  The public file beside the secret is another pair's: peers given it
    //  would fail every handshake.
    s_set_key_txt (dev, "public-key", srv_public);
    rc = s_client_apply (dev_secret, srv, err, sizeof err);
    S_ASSERT_REFUSED (rc, err, dev, "is not the public half of");
    s_set_key_txt (dev, "public-key", good_public);

    //  The server's public certificate as a device is given it.
    snprintf (bad, sizeof bad, "%s", srv_public);
    bad[39] = '|';
    s_set_key_txt (srv, "public-key", bad);
    rc = s_client_apply (dev_secret, srv, err, sizeof err);
    S_ASSERT_REFUSED (rc, err, srv, "--server-cert");
    cr_assert (strstr (err, "public-key is not a 40-character Z85 key"), "%s", err);
}

Test (keygen, server_refuses_a_bad_secret_or_allow_list_entry)
{
    char srv[512], srv_secret[520], dev[512], dev_secret[520], allow[512], err[512];
    char cmd[2048], out[4096];
    s_pair (srv, srv_secret, "srv");
    s_pair (dev, dev_secret, "dev");
    s_file (allow, "allow");
    snprintf (cmd, sizeof cmd, "mkdir %s && cp %s %s/dev", allow, dev, allow);
    cr_assert_eq (runcmd (cmd, out, sizeof out), 0, "%s", out);

    zsock_t *router = zsock_new (ZMQ_ROUTER);
    cr_assert_not_null (router);
    pl_curve_t *curve = pl_curve_server_new (router, srv_secret, allow, err, sizeof err);
    cr_assert_not_null (curve, "%s", err);
    cr_assert_eq (pl_curve_allowed (curve), 1);

    //  SIGHUP's reload refuses a secret edited out of Z85, keeping the old keys.
    char good[41], bad[41];
    s_key_txt (good, srv_secret, "secret-key");
    snprintf (bad, sizeof bad, "%s", good);
    bad[5] = ',';
    s_set_key_txt (srv_secret, "secret-key", bad);
    cr_assert_eq (pl_curve_server_reload (curve, err, sizeof err), -1);
    cr_assert (strstr (err, srv_secret) && strstr (err, "Z85"), "%s", err);
    s_set_key_txt (srv_secret, "secret-key", good);
    cr_assert_eq (pl_curve_server_reload (curve, err, sizeof err), 0, "%s", err);

    //  An allowed device certificate whose key is not Z85: zauth would
    //  admit whatever it decoded to.
    char entry[600], key[41];
    snprintf (entry, sizeof entry, "%s/dev", allow);
    s_key_txt (key, entry, "public-key");
    key[3] = '~';
    s_set_key_txt (entry, "public-key", key);
    cr_assert_eq (pl_curve_server_reload (curve, err, sizeof err), -1);
    cr_assert (strstr (err, entry) && strstr (err, "Z85"), "%s", err);
    pl_curve_destroy (&curve);
    zsock_destroy (&router);

    //  At start: the same errors, no server.
    router = zsock_new (ZMQ_ROUTER);
    curve = pl_curve_server_new (router, srv_secret, allow, err, sizeof err);
    cr_assert_null (curve);
    cr_assert (strstr (err, entry), "%s", err);
    zsock_destroy (&router);
}
