/* notify: the service manager's readiness protocol (systemd's sd_notify datagram), without
 * libsystemd: one datagram of "KEY=VALUE" lines to the AF_UNIX socket named by
 * $NOTIFY_SOCKET (a path, or "@name" for the abstract namespace).
 *
 * Owns nothing between calls: every call opens, sends and closes its own socket, so it is
 * safe from any thread and costs one socket per call (a member sends two in its life).
 * Without $NOTIFY_SOCKET (not started by systemd with Type=notify) a call does nothing and
 * succeeds. */
#ifndef KL_DAEMON_NOTIFY_H
#define KL_DAEMON_NOTIFY_H

#include "common/status.h"

/* Sends state (e.g. "READY=1\nSTATUS=serving") to the service manager. KL_OK also when
 * there is no manager to tell; KL_INVALID_ARGUMENT (detail "notify_socket") when
 * $NOTIFY_SOCKET is malformed or too long; KL_UNAVAILABLE (detail "notify_send") when the
 * send fails. The caller logs a failure and goes on: readiness is advice to the manager,
 * never a reason to stop serving. */
kl_code kl_notify(const char *state, kl_err *err);

#endif
