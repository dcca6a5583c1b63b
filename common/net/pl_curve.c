/*  pl_curve.c: CurveZMQ setup for the daemons. See pl_curve.h.

    zcert_load decodes a key's Z85 text without looking at the result: an
    invalid character leaves the key it decodes into uninitialised, and a
    public half edited apart from its secret is taken as it is. Either way
    the server answers no HELLO and every device only sees a timeout. So
    key files are read and checked here (the encoding, and that the public
    half is the secret's, by Curve25519 with libsodium) before any key is
    given to libzmq, with an error naming the file.
*/
#include "pl_curve.h"

#include "nn_alloc.h"

#include <dirent.h>
#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S_KEY_BYTES 32
#define S_KEY_Z85   40          //  Z85 text of a 32-byte key

//  An allow-list entry: a device's public key and the device id its
//  certificate binds it to (-1: none).
typedef struct {
    char key[PL_CURVE_KEY_TEXT + 1];
    int device;
} s_allowed_t;

struct _pl_curve_t {
    zsock_t *sock;              //  borrowed
    zactor_t *auth;
    char cert_path[1024];
    char allow_dir[1024];
    s_allowed_t *table;         //  the allow-list as last (re)loaded
    int allowed;                //  entries in table
};

//  The base name zcert_load wants: "keys/server_secret" -> "keys/server".
static void
s_base (char *out, size_t size, const char *path)
{
    snprintf (out, size, "%s", path);
    size_t len = strlen (out), tail = strlen ("_secret");
    if (len > tail && strcmp (out + len - tail, "_secret") == 0)
        out[len - tail] = 0;
}

//  key <- the Z85 text, if it is exactly a 32-byte key in valid Z85.
static bool
s_z85_key (uint8_t key[S_KEY_BYTES], const char *text)
{
    return text && strlen (text) == S_KEY_Z85 && zmq_z85_decode (key, text) != NULL;
}

//  The curve/public-key of the certificate file at path into key; 0, or -1
//  with a message naming the file.
static int
s_read_public (uint8_t key[S_KEY_BYTES], const char *path, const char *what,
               char *err, size_t err_size)
{
    zconfig_t *root = zconfig_load (path);
    if (!root) {
        snprintf (err, err_size, "%s: %s: cannot read a CZMQ certificate", what, path);
        return -1;
    }
    const char *text = zconfig_get (root, "/curve/public-key", NULL);
    int rc = 0;
    if (!text) {
        snprintf (err, err_size, "%s: %s: not a CZMQ certificate (no curve public-key)",
                  what, path);
        rc = -1;
    }
    else
    if (!s_z85_key (key, text)) {
        snprintf (err, err_size, "%s: %s: public-key is not a %d-character Z85 key",
                  what, path, S_KEY_Z85);
        rc = -1;
    }
    zconfig_destroy (&root);
    return rc;
}

//  Both keys of the secret certificate file at path, checked: valid Z85,
//  a secret that is not all zero, and a public half that is the secret's.
static int
s_read_pair (uint8_t public_key[S_KEY_BYTES], uint8_t secret_key[S_KEY_BYTES],
             const char *path, const char *what, char *err, size_t err_size)
{
    zconfig_t *root = zconfig_load (path);
    if (!root) {
        snprintf (err, err_size, "%s: %s: not a CZMQ certificate", what, path);
        return -1;
    }
    const char *public_text = zconfig_get (root, "/curve/public-key", NULL);
    const char *secret_text = zconfig_get (root, "/curve/secret-key", NULL);
    static const uint8_t zero[S_KEY_BYTES] = { 0 };
    uint8_t derived[S_KEY_BYTES];
    int rc = -1;
    if (!secret_text)
        snprintf (err, err_size, "%s: %s holds no secret key", what, path);
    else
    if (!s_z85_key (secret_key, secret_text))
        snprintf (err, err_size, "%s: %s: secret-key is not a %d-character Z85 key",
                  what, path, S_KEY_Z85);
    else
    if (sodium_memcmp (secret_key, zero, S_KEY_BYTES) == 0)
        snprintf (err, err_size, "%s: %s holds no secret key", what, path);
    else
    if (!public_text || !s_z85_key (public_key, public_text))
        snprintf (err, err_size, "%s: %s: public-key is %s", what, path,
                  public_text ? "not a 40-character Z85 key" : "missing");
    else
    if (crypto_scalarmult_base (derived, secret_key) != 0
    ||  sodium_memcmp (derived, public_key, S_KEY_BYTES) != 0)
        snprintf (err, err_size, "%s: %s: public-key is not the secret-key's public half "
                  "(keys from two pairs? make a new pair with pipelearn-keygen)", what, path);
    else
        rc = 0;
    sodium_memzero (derived, sizeof derived);
    zconfig_destroy (&root);
    return rc;
}

//  A certificate with its secret key, or NULL with a message.
static zcert_t *
s_load_secret (const char *path, const char *what, char *err, size_t err_size)
{
    char base[1024], secret[1100];
    s_base (base, sizeof base, path);
    snprintf (secret, sizeof secret, "%s_secret", base);
    struct stat st;
    if (stat (secret, &st)) {
        snprintf (err, err_size, "%s: %s: %s (make one with pipelearn-keygen)", what,
                  secret, strerror (errno));
        return NULL;
    }
    //  Like ssh with its private keys: a secret anyone can read is no secret.
    //  (Group access is left to the operator, e.g. a service's group.)
    if (st.st_mode & 007) {
        snprintf (err, err_size, "%s: %s is readable by every user (chmod 600 it)", what,
                  secret);
        return NULL;
    }
    uint8_t public_key[S_KEY_BYTES], secret_key[S_KEY_BYTES];
    if (s_read_pair (public_key, secret_key, secret, what, err, err_size)) {
        sodium_memzero (secret_key, sizeof secret_key);
        return NULL;
    }
    //  The public file beside it is what peers are given: one that is not
    //  this pair's would fail every handshake just the same.
    uint8_t given[S_KEY_BYTES];
    int rc = 0;
    if (stat (base, &st) == 0) {
        rc = s_read_public (given, base, what, err, err_size);
        if (rc == 0 && memcmp (given, public_key, S_KEY_BYTES) != 0) {
            snprintf (err, err_size, "%s: %s is not the public half of %s (the pair "
                      "was mixed up: peers given %s would fail every handshake)",
                      what, base, secret, base);
            rc = -1;
        }
    }
    if (rc) {
        sodium_memzero (secret_key, sizeof secret_key);
        return NULL;
    }
    zcert_t *cert = zcert_new_from (public_key, secret_key);
    sodium_memzero (secret_key, sizeof secret_key);
    if (!cert)
        snprintf (err, err_size, "%s: %s: cannot make a certificate", what, secret);
    return cert;
}

//  The certificates (files not ending in _secret) in dir, into a new
//  table (the caller frees it) and count; -1 with a message if dir is
//  unreadable, a certificate's public key is not valid Z85 (zauth would
//  admit whatever key the bad text decoded to), or its device-id is not an
//  integer in [0, 65535] or names a device another key already has.
static int
s_scan_allow (const char *dir, s_allowed_t **table_out, int *count_out, char *err,
              size_t err_size)
{
    *table_out = NULL;
    *count_out = 0;
    DIR *d = opendir (dir);
    if (!d) {
        snprintf (err, err_size, "--allow: %s: %s", dir, strerror (errno));
        return -1;
    }
    s_allowed_t *table = NULL;
    int count = 0, capacity = 0;
    bool bad = false;
    struct dirent *e;
    while (!bad && (e = readdir (d))) {
        size_t len = strlen (e->d_name);
        if (e->d_name[0] == '.' || (len > 7 && strcmp (e->d_name + len - 7, "_secret") == 0))
            continue;
        char path[2048];
        snprintf (path, sizeof path, "%s/%s", dir, e->d_name);
        zconfig_t *root = zconfig_load (path);
        const char *text = root ? zconfig_get (root, "/curve/public-key", NULL) : NULL;
        const char *dev = root ? zconfig_get (root, "/metadata/device-id", NULL) : NULL;
        uint8_t key[S_KEY_BYTES];
        char *end = NULL;
        long id = dev ? strtol (dev, &end, 10) : -1;
        if (text && !s_z85_key (key, text)) {
            snprintf (err, err_size, "--allow: %s: public-key is not a %d-character Z85 key",
                      path, S_KEY_Z85);
            bad = true;
        }
        else
        if (dev && (!*dev || *end || id < 0 || id > 65535)) {
            snprintf (err, err_size, "--allow: %s: device-id \"%s\" is not a device id "
                      "(an integer >= 0)", path, dev);
            bad = true;
        }
        for (int i = 0; !bad && text && id >= 0 && i < count; i++)
            if (table[i].device == id) {
                snprintf (err, err_size, "--allow: %s: device-id %ld is already another "
                          "key's", path, id);
                bad = true;
            }
        if (!bad && text) {
            if (count == capacity) {
                capacity = capacity ? 2 * capacity : 16;
                table = nn_realloc (table, sizeof *table * (size_t) capacity);
            }
            snprintf (table[count].key, sizeof table[count].key, "%s", text);
            table[count].device = (int) id;
            count++;
        }
        zconfig_destroy (&root);
    }
    closedir (d);
    if (bad) {
        nn_free (table);
        return -1;
    }
    *table_out = table;
    *count_out = count;
    return 0;
}

static int
s_apply_server_cert (pl_curve_t *self, char *err, size_t err_size)
{
    zcert_t *cert = s_load_secret (self->cert_path, "--cert", err, err_size);
    if (!cert)
        return -1;
    zcert_apply (cert, self->sock);
    zsock_set_curve_server (self->sock, 1);
    zcert_destroy (&cert);
    return 0;
}

static int
s_load_allow (pl_curve_t *self, char *err, size_t err_size)
{
    s_allowed_t *table;
    int count;
    if (s_scan_allow (self->allow_dir, &table, &count, err, err_size))
        return -1;
    //  zauth replaces its certificate store on every CURVE command.
    zstr_sendx (self->auth, "CURVE", self->allow_dir, NULL);
    zsock_wait (self->auth);
    nn_free (self->table);
    self->table = table;
    self->allowed = count;
    return 0;
}

pl_curve_t *
pl_curve_server_new (zsock_t *sock, const char *cert_path, const char *allow_dir,
                     char *err, size_t err_size)
{
    pl_curve_t *self = zmalloc (sizeof *self);
    self->sock = sock;
    snprintf (self->cert_path, sizeof self->cert_path, "%s", cert_path);
    snprintf (self->allow_dir, sizeof self->allow_dir, "%s", allow_dir);
    self->auth = zactor_new (zauth, NULL);
    if (!self->auth) {
        snprintf (err, err_size, "cannot start the ZAP authenticator");
        pl_curve_destroy (&self);
        return NULL;
    }
    if (s_apply_server_cert (self, err, err_size) || s_load_allow (self, err, err_size)) {
        pl_curve_destroy (&self);
        return NULL;
    }
    return self;
}

int
pl_curve_server_reload (pl_curve_t *self, char *err, size_t err_size)
{
    s_allowed_t *table;
    int count;
    if (s_scan_allow (self->allow_dir, &table, &count, err, err_size))
        return -1;
    nn_free (table);
    zcert_t *cert = s_load_secret (self->cert_path, "--cert", err, err_size);
    if (!cert)
        return -1;
    zcert_destroy (&cert);
    if (s_apply_server_cert (self, err, err_size))
        return -1;
    return s_load_allow (self, err, err_size);
}

int
pl_curve_allowed (const pl_curve_t *self)
{
    return self->allowed;
}

static const s_allowed_t *
s_lookup (const pl_curve_t *self, const char *key)
{
    for (int i = 0; key && i < self->allowed; i++)
        if (strcmp (self->table[i].key, key) == 0)
            return &self->table[i];
    return NULL;
}

bool
pl_curve_key_allowed (const pl_curve_t *self, const char *key)
{
    return s_lookup (self, key) != NULL;
}

int
pl_curve_key_device (const pl_curve_t *self, const char *key)
{
    const s_allowed_t *a = s_lookup (self, key);
    return a ? a->device : -1;
}

const char *
pl_curve_device_key (const pl_curve_t *self, int device)
{
    for (int i = 0; device >= 0 && i < self->allowed; i++)
        if (self->table[i].device == device)
            return self->table[i].key;
    return NULL;
}

void
pl_curve_destroy (pl_curve_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zactor_destroy (&(*self_p)->auth);
    nn_free ((*self_p)->table);
    free (*self_p);
    *self_p = NULL;
}

int
pl_curve_client_apply (zsock_t *sock, const char *cert_path, const char *server_cert_path,
                       char *err, size_t err_size)
{
    zcert_t *cert = s_load_secret (cert_path, "--cert", err, err_size);
    if (!cert)
        return -1;
    //  The server's public file; its secret file also holds the public key
    //  (zcert_load read whichever of the two exists, the secret first).
    char base[1024], secret[1100];
    s_base (base, sizeof base, server_cert_path);
    snprintf (secret, sizeof secret, "%s_secret", base);
    struct stat st;
    const char *file = stat (base, &st) != 0 && stat (secret, &st) == 0 ? secret : base;
    uint8_t server_key[S_KEY_BYTES];
    if (s_read_public (server_key, file, "--server-cert", err, err_size)) {
        zcert_destroy (&cert);
        return -1;
    }
    zcert_apply (cert, sock);
    zsock_set_curve_serverkey_bin (sock, server_key);
    zcert_destroy (&cert);
    return 0;
}
