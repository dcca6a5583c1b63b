/*  pipelearn-keygen: make a CurveZMQ key pair for a server or a device.

    pipelearn-keygen [--force] BASENAME

    Writes BASENAME (the public certificate: give it to the peers that must
    trust this key -- a device's goes into the server's --allow directory,
    the server's to every device as --server-cert) and BASENAME_secret
    (both keys, mode 0600: stays on this host), in CZMQ's zcert format with
    metadata name = the last component of BASENAME, created-by =
    pipelearn-keygen.

    The secret file is never readable by anyone else, not even for a
    moment: both names are claimed with O_CREAT | O_EXCL before any key is
    written, the secret one with mode 0600 under umask 077, and CZMQ then
    writes into the files we created. Claiming with O_EXCL is also what
    refuses to overwrite an existing pair (without a window between a check
    and the write); --force removes the old files first rather than writing
    through them, so an old secret file's looser mode is not inherited.
*/
#include <czmq.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

//  CZMQ builds "<name>_secret" in a 256-byte buffer when it loads a
//  certificate (zcert_load), so a longer name could be written but not read.
#define S_NAME_MAX (255 - 7)
#define S_SECRET_SUFFIX "_secret"

typedef struct {
    const char *base;
    bool force;
} s_args_t;

static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: pipelearn-keygen [--force] BASENAME\n"
        "\n"
        "Writes a CurveZMQ certificate pair (CZMQ zcert format):\n"
        "  BASENAME         the public certificate; give it to the peers that must\n"
        "                   trust this key (a device's goes into the server's --allow\n"
        "                   directory, the server's to each device as --server-cert)\n"
        "  BASENAME_secret  public and secret key, mode 0600; keep it on this host\n"
        "                   (--cert BASENAME_secret)\n"
        "\n"
        "  -f, --force      replace an existing BASENAME / BASENAME_secret\n"
        "  -h, --help       this text\n");
}

static int
s_parse_args (int argc, char **argv, s_args_t *args)
{
    static const struct option options[] = {
        { "force", no_argument, NULL, 'f' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    memset (args, 0, sizeof *args);
    int c;
    while ((c = getopt_long (argc, argv, "fh", options, NULL)) != -1) {
        switch (c) {
            case 'f': args->force = true; break;
            case 'h': s_usage (stdout); exit (0);
            default:  s_usage (stderr); return -1;
        }
    }
    if (optind != argc - 1) {
        fprintf (stderr, "pipelearn-keygen: expected one BASENAME, got %d argument(s)\n",
                 argc - optind);
        s_usage (stderr);
        return -1;
    }
    args->base = argv[optind];
    size_t len = strlen (args->base);
    //  "-" would make CZMQ write the certificate to stdout.
    if (len == 0 || strcmp (args->base, "-") == 0 || args->base[len - 1] == '/') {
        fprintf (stderr, "pipelearn-keygen: BASENAME \"%s\" is not a file name\n",
                 args->base);
        return -1;
    }
    if (len > S_NAME_MAX) {
        fprintf (stderr, "pipelearn-keygen: BASENAME is %zu bytes; at most %d "
                 "(CZMQ cannot load longer certificate names)\n", len, S_NAME_MAX);
        return -1;
    }
    return 0;
}

//  --force: remove path if it exists; a directory (or anything we cannot
//  remove) is an error rather than something to write into.
static int
s_remove_old (const char *path)
{
    struct stat st;
    if (lstat (path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (S_ISDIR (st.st_mode)) {
        fprintf (stderr, "pipelearn-keygen: %s is a directory; not replacing it\n", path);
        return -1;
    }
    if (unlink (path) != 0) {
        fprintf (stderr, "pipelearn-keygen: cannot remove %s: %s\n", path, strerror (errno));
        return -1;
    }
    return 0;
}

//  Create path, which must not exist yet. Returns the descriptor or -1
//  with the reason printed.
static int
s_claim (const char *path, mode_t mode)
{
    int fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0)
        return fd;
    if (errno == EEXIST)
        fprintf (stderr, "pipelearn-keygen: %s already exists; not overwriting it "
                 "(--force replaces the pair)\n", path);
    else
        fprintf (stderr, "pipelearn-keygen: cannot create %s: %s\n", path, strerror (errno));
    return -1;
}

//  The last path component: what the certificate calls itself.
static const char *
s_leaf (const char *path)
{
    const char *slash = strrchr (path, '/');
    return slash ? slash + 1 : path;
}

//  Write the pair into the claimed files. 0 or -1 with the reason printed.
static int
s_write_pair (const char *pub, const char *sec, int sec_fd)
{
    if (!zsys_has_curve ()) {
        fprintf (stderr, "pipelearn-keygen: this libzmq has no CURVE support\n");
        return -1;
    }
    zcert_t *cert = zcert_new ();
    if (!cert) {
        fprintf (stderr, "pipelearn-keygen: cannot generate a key pair\n");
        return -1;
    }
    zcert_set_meta (cert, "name", "%s", s_leaf (pub));
    zcert_set_meta (cert, "created-by", "%s", "pipelearn-keygen");
    int rc = 0;
    if (zcert_save_public (cert, pub) != 0) {
        fprintf (stderr, "pipelearn-keygen: cannot write %s: %s\n", pub, strerror (errno));
        rc = -1;
    }
    else
    if (zcert_save_secret (cert, sec) != 0) {
        fprintf (stderr, "pipelearn-keygen: cannot write %s: %s\n", sec, strerror (errno));
        rc = -1;
    }
    //  The file was created 0600; say so again on the inode and by name in
    //  case CZMQ ever replaces the file instead of writing into it.
    struct stat st;
    if (rc == 0 && (fchmod (sec_fd, 0600) != 0 || chmod (sec, 0600) != 0
                    || stat (sec, &st) != 0 || (st.st_mode & 0777) != 0600)) {
        fprintf (stderr, "pipelearn-keygen: cannot make %s mode 0600: %s\n", sec,
                 strerror (errno));
        rc = -1;
    }
    if (rc == 0)
        printf ("pipelearn-keygen: wrote %s (public) and %s (secret, mode 0600)\n"
                "public-key = \"%s\"\n", pub, sec, zcert_public_txt (cert));
    zcert_destroy (&cert);
    return rc;
}

int
main (int argc, char **argv)
{
    s_args_t args;
    if (s_parse_args (argc, argv, &args))
        return 2;
    char pub[S_NAME_MAX + 1], sec[S_NAME_MAX + sizeof S_SECRET_SUFFIX];
    snprintf (pub, sizeof pub, "%s", args.base);
    snprintf (sec, sizeof sec, "%s%s", args.base, S_SECRET_SUFFIX);

    if (args.force && (s_remove_old (sec) || s_remove_old (pub)))
        return 1;
    //  Secret first, under umask 077 whatever the caller's umask is.
    mode_t old_umask = umask (077);
    int sec_fd = s_claim (sec, 0600);
    umask (old_umask);
    if (sec_fd < 0)
        return 1;
    int pub_fd = s_claim (pub, 0644);
    if (pub_fd < 0) {
        close (sec_fd);
        unlink (sec);
        return 1;
    }
    umask (077);
    int rc = s_write_pair (pub, sec, sec_fd);
    umask (old_umask);
    if (fsync (sec_fd) != 0 || fsync (pub_fd) != 0) {
        if (rc == 0)
            fprintf (stderr, "pipelearn-keygen: fsync: %s\n", strerror (errno));
        rc = -1;
    }
    close (sec_fd);
    close (pub_fd);
    if (rc) {
        //  Never leave half a pair behind: both names were ours.
        unlink (sec);
        unlink (pub);
        return 1;
    }
    return 0;
}
