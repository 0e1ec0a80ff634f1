/* keygen: `keyloadd keygen`, the key files a cluster needs (ARCHITECTURE.md "Processes").
 *
 *   keyloadd keygen --secret-out FILE           a member's Ed25519 key pair: the 64-byte
 *                                               secret key goes to FILE, the public key is
 *                                               printed as standard base64 on stdout
 *   keyloadd keygen --cluster-secret-out FILE   the cluster secret: 32 random bytes
 *   keyloadd keygen --public-of FILE            prints the public key of a member key file
 *
 * Files are created with O_CREAT|O_EXCL and mode 0600: an existing file is never
 * overwritten (common/keys.h). Nothing secret is printed. Exit status: 0 done, 1 failed
 * (e.g. the file exists), 2 usage error. */
#ifndef KL_KEYGEN_H
#define KL_KEYGEN_H

#include "common/status.h"

#include <stddef.h>

/* argv[0] is "keygen". Returns the process exit status. */
int kl_keygen_main(int argc, char **argv);

/* Generates a member key pair, writes its secret key to secret_path and puts the public
 * key's base64 (NUL-terminated) into public_b64 (at least KL_KEYGEN_PUBLIC_B64 bytes). */
#define KL_KEYGEN_PUBLIC_B64 48
kl_code kl_keygen_member(const char *secret_path, char *public_b64, size_t cap, kl_err *err);
/* Generates the cluster secret into path. */
kl_code kl_keygen_cluster_secret(const char *path, kl_err *err);

#endif
