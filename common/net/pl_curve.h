/*  pl_curve.h: CurveZMQ for the daemons (CZMQ zcert + zauth).

    Keys are CZMQ certificate files as pipelearn-keygen writes them: NAME
    (public key, shareable) and NAME_secret (both keys, mode 0600). Wherever
    a certificate path is asked for, NAME and NAME_secret are both accepted.

    The server authenticates devices against an allow-list directory of
    device public certificates (zauth's CURVE store); a device pins the
    server's public key. Encryption and authentication are libzmq's CURVE
    mechanism. An allow-list certificate may bind its key to one device id
    with a metadata entry `device-id = "N"` (pl_curve_key_device). Key files are checked before use: keys must be valid Z85,
    a secret file's public key must be its secret key's public half
    (libsodium's crypto_scalarmult_base), and a public file beside it must
    hold the same key; any failure is an error naming the file.
*/
#ifndef PL_CURVE_H_INCLUDED
#define PL_CURVE_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct _pl_curve_t pl_curve_t;

//  Make sock (not yet bound) a CURVE server with the secret certificate at
//  cert_path, admitting only clients whose public certificate is in
//  allow_dir. Starts a zauth actor, which the returned object owns. NULL
//  with a message naming the file or directory on failure.
pl_curve_t *pl_curve_server_new (zsock_t *sock, const char *cert_path,
                                 const char *allow_dir, char *err, size_t err_size);
//  Re-read the allow-list directory and the server certificate (SIGHUP).
//  A new server key applies to connections made after the call. On failure
//  the previous keys stay in force; -1 with a message.
int pl_curve_server_reload (pl_curve_t *self, char *err, size_t err_size);
//  Number of device certificates in the allow-list at the last (re)load.
int pl_curve_allowed (const pl_curve_t *self);

//  Z85 text of a CURVE public key, as libzmq's "User-Id" metadata gives it
//  for a CURVE peer that zauth admitted.
#define PL_CURVE_KEY_TEXT 40

//  Is the public key (Z85 text) in the allow-list as last (re)loaded?
bool pl_curve_key_allowed (const pl_curve_t *self, const char *key);
//  The device id an allow-list certificate assigns to key (its metadata
//  "device-id"; docs/deploy.md), or -1 when it assigns none (the key may
//  take any free slot) or the key is not in the list.
int pl_curve_key_device (const pl_curve_t *self, const char *key);
//  The key (Z85 text) the allow-list binds to device id, or NULL when no
//  certificate names that id. Borrowed until the next (re)load.
const char *pl_curve_device_key (const pl_curve_t *self, int device);
void pl_curve_destroy (pl_curve_t **self_p);

//  Make sock (not yet connected) a CURVE client with its own secret
//  certificate, trusting only the server whose public certificate is at
//  server_cert_path. 0, or -1 with a message.
int pl_curve_client_apply (zsock_t *sock, const char *cert_path,
                           const char *server_cert_path, char *err, size_t err_size);

#endif
