/* The service manager's readiness datagram (daemon/notify.h) against a real AF_UNIX
 * datagram socket standing in for systemd: a path socket, an abstract one, no manager, and
 * the refusals. */
#include "daemon/notify.h"
#include "tests/unit/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* Binds a datagram socket at name (a path, or "@x" for the abstract namespace). */
static int bind_manager(const char *name)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    size_t len = strlen(name);
    memcpy(a.sun_path, name, len);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    if (name[0] == '@')
        a.sun_path[0] = '\0';
    else
        alen++;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, alen), 0);
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void expect_datagram(int fd, const char *want)
{
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    ck_assert_int_eq(n, (ssize_t)strlen(want));
    buf[n] = '\0';
    ck_assert_str_eq(buf, want);
}

START_TEST(test_notify_path_socket)
{
    char dir[96], path[108];
    th_tmpdir_named(dir, sizeof dir, "kl-notify");
    snprintf(path, sizeof path, "%s/m.sock", dir);
    int fd = bind_manager(path);
    setenv("NOTIFY_SOCKET", path, 1);
    kl_err err;
    kl_err_clear(&err);
    ck_assert_int_eq(kl_notify("READY=1\nSTATUS=started", &err), KL_OK);
    expect_datagram(fd, "READY=1\nSTATUS=started");
    ck_assert_int_eq(kl_notify("STOPPING=1", &err), KL_OK);
    expect_datagram(fd, "STOPPING=1");
    unsetenv("NOTIFY_SOCKET");
    close(fd);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_notify_abstract_socket)
{
    char name[64];
    snprintf(name, sizeof name, "@kl-notify-test-%d", (int)getpid());
    int fd = bind_manager(name);
    setenv("NOTIFY_SOCKET", name, 1);
    kl_err err;
    kl_err_clear(&err);
    ck_assert_int_eq(kl_notify("READY=1", &err), KL_OK);
    expect_datagram(fd, "READY=1");
    unsetenv("NOTIFY_SOCKET");
    close(fd);
}
END_TEST

START_TEST(test_notify_without_manager_and_refusals)
{
    kl_err err;
    kl_err_clear(&err);
    unsetenv("NOTIFY_SOCKET");
    ck_assert_int_eq(kl_notify("READY=1", &err), KL_OK); /* nobody to tell: nothing to do */
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    ck_assert_int_eq(kl_notify("READY=1", &err), KL_INVALID_ARGUMENT);
    ck_assert_str_eq(err.detail, "notify_socket");
    char longp[200];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    setenv("NOTIFY_SOCKET", longp, 1);
    ck_assert_int_eq(kl_notify("READY=1", &err), KL_INVALID_ARGUMENT);
    setenv("NOTIFY_SOCKET", "/nonexistent-dir-kl/notify.sock", 1);
    ck_assert_int_eq(kl_notify("READY=1", &err), KL_UNAVAILABLE);
    ck_assert_str_eq(err.detail, "notify_send");
    unsetenv("NOTIFY_SOCKET");
}
END_TEST

Suite *suite_notify(void)
{
    Suite *s = suite_create("notify");
    TCase *tc = tcase_create("notify");
    tcase_add_test(tc, test_notify_path_socket);
    tcase_add_test(tc, test_notify_abstract_socket);
    tcase_add_test(tc, test_notify_without_manager_and_refusals);
    suite_add_tcase(s, tc);
    return s;
}
