/*  pl_curve.c: CurveZMQ setup for the daemons. See pl_curve.h. */
#include "pl_curve.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

struct _pl_curve_t {
    zsock_t *sock;              //  borrowed
    zactor_t *auth;
    char cert_path[1024];
    char allow_dir[1024];
    int allowed;
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
    zcert_t *cert = zcert_load (base);
    if (!cert) {
        snprintf (err, err_size, "%s: %s: not a CZMQ certificate", what, secret);
        return NULL;
    }
    static const char zero[41] = "0000000000000000000000000000000000000000";
    if (strcmp (zcert_secret_txt (cert), zero) == 0) {
        snprintf (err, err_size, "%s: %s holds no secret key", what, secret);
        zcert_destroy (&cert);
        return NULL;
    }
    return cert;
}

//  Certificates (files not ending in _secret) in dir, or -1 if unreadable.
static int
s_count_certs (const char *dir)
{
    DIR *d = opendir (dir);
    if (!d)
        return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir (d))) {
        size_t len = strlen (e->d_name);
        if (e->d_name[0] == '.' || (len > 7 && strcmp (e->d_name + len - 7, "_secret") == 0))
            continue;
        count++;
    }
    closedir (d);
    return count;
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
    int count = s_count_certs (self->allow_dir);
    if (count < 0) {
        snprintf (err, err_size, "--allow: %s: %s", self->allow_dir, strerror (errno));
        return -1;
    }
    //  zauth replaces its certificate store on every CURVE command.
    zstr_sendx (self->auth, "CURVE", self->allow_dir, NULL);
    zsock_wait (self->auth);
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
    if (s_count_certs (self->allow_dir) < 0) {
        snprintf (err, err_size, "--allow: %s: %s", self->allow_dir, strerror (errno));
        return -1;
    }
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

void
pl_curve_destroy (pl_curve_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zactor_destroy (&(*self_p)->auth);
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
    char base[1024];
    s_base (base, sizeof base, server_cert_path);
    zcert_t *server = zcert_load (base);
    if (!server) {
        snprintf (err, err_size, "--server-cert: %s: cannot read a CZMQ certificate", base);
        zcert_destroy (&cert);
        return -1;
    }
    zcert_apply (cert, sock);
    zsock_set_curve_serverkey (sock, zcert_public_txt (server));
    zcert_destroy (&cert);
    zcert_destroy (&server);
    return 0;
}
