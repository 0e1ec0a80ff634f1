/* notify: the service manager's readiness protocol (notify.h). */
#include "daemon/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

kl_code kl_notify(const char *state, kl_err *err)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return KL_OK;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof addr.sun_path)
        return kl_fail(err, KL_INVALID_ARGUMENT, "notify_socket",
                       "NOTIFY_SOCKET must be an absolute path or @name of at most %zu bytes",
                       sizeof addr.sun_path - 1);
    memcpy(addr.sun_path, path, len);
    if (path[0] == '@')
        addr.sun_path[0] = '\0'; /* abstract namespace: the name is not NUL-terminated */
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/' ? 1 : 0));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return kl_fail(err, KL_UNAVAILABLE, "notify_send", "cannot open a socket for NOTIFY_SOCKET: %s",
                       strerror(errno));
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&addr, alen);
    int saved = errno;
    close(fd);
    if (n < 0)
        return kl_fail(err, KL_UNAVAILABLE, "notify_send", "cannot send to NOTIFY_SOCKET %s: %s", path,
                       strerror(saved));
    return KL_OK;
}
