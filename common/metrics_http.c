/* metrics_http: `GET /metrics` over nng's HTTP server (the contract is in metrics_http.h). */
#include "common/metrics_http.h"
#include "common/deadline.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { PAGE_IDLE, PAGE_WANTED, PAGE_DONE };

struct kl_metrics_http {
    uv_loop_t *loop;
    uv_async_t async;
    nng_http_server *srv;
    kl_metrics_render_fn render;
    void *ctx;
    bool has_token;
    uint8_t token_key[crypto_generichash_KEYBYTES];
    uint8_t token_hash[crypto_generichash_BYTES];
    pthread_mutex_t serial; /* one scrape at a time */
    pthread_mutex_t mu;     /* guards what follows */
    pthread_cond_t cv;
    int state;
    uint64_t gen;
    char *page;
    size_t page_len;
    bool closing;
    int active; /* scrapes between their check of closing and their answer */
    _Atomic uint64_t served;
};

kl_code kl_metrics_token_load(const char *path, char *token, size_t cap, kl_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "metrics_token_file",
                       "metrics_token_file %s cannot be read: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || (st.st_mode & 077) != 0) {
        close(fd);
        return kl_fail(err, KL_INVALID_ARGUMENT, "metrics_token_file",
                       "metrics_token_file %s must be readable by its owner only (chmod 600)", path);
    }
    char buf[KL_METRICS_TOKEN_MAX + 2];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    bool ok = n >= KL_METRICS_TOKEN_MIN && n <= KL_METRICS_TOKEN_MAX && (size_t)n < cap;
    for (ssize_t i = 0; ok && i < n; i++)
        ok = buf[i] > ' ' && buf[i] < 0x7f;
    if (ok) {
        memcpy(token, buf, (size_t)n);
        token[n] = '\0';
    }
    sodium_memzero(buf, sizeof buf);
    if (!ok)
        return kl_fail(err, KL_INVALID_ARGUMENT, "metrics_token_file",
                       "metrics_token_file %s must hold one token of %d..%d printable characters",
                       path, KL_METRICS_TOKEN_MIN, KL_METRICS_TOKEN_MAX);
    return KL_OK;
}

/* Constant time in the token's content: both sides are hashed with a process key first. */
static bool token_ok(kl_metrics_http *m, nng_http_req *req)
{
    if (!m->has_token)
        return true;
    const char *h = nng_http_req_get_header(req, "Authorization");
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    uint8_t got[crypto_generichash_BYTES];
    const char *t = h + 7;
    crypto_generichash(got, sizeof got, (const uint8_t *)t, strlen(t), m->token_key, sizeof m->token_key);
    return sodium_memcmp(got, m->token_hash, sizeof got) == 0;
}

static void answer(nng_aio *aio, uint16_t status, const char *page, size_t len)
{
    nng_http_res *res = NULL;
    int rv = status == 200 ? nng_http_res_alloc(&res) : nng_http_res_alloc_error(&res, status);
    if (rv == 0 && status == 200)
        rv = nng_http_res_set_header(res, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    if (rv == 0 && status == 200)
        rv = nng_http_res_copy_data(res, page, len);
    if (rv == 0 && status == 401)
        rv = nng_http_res_set_header(res, "WWW-Authenticate", "Bearer");
    if (rv != 0) {
        if (res)
            nng_http_res_free(res);
        nng_aio_finish(aio, rv);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

/* A request holds the endpoint between enter and leave: kl_metrics_http_stop waits for
 * every holder to leave before it stops the server, and refuses new ones. */
static bool enter(kl_metrics_http *m)
{
    pthread_mutex_lock(&m->mu);
    bool ok = !m->closing;
    if (ok)
        m->active++;
    pthread_mutex_unlock(&m->mu);
    return ok;
}

static void leave(kl_metrics_http *m)
{
    pthread_mutex_lock(&m->mu);
    m->active--;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

/* Waits (bounded) for the loop to render; the page (malloc'd) or NULL with *status. */
static char *await_page(kl_metrics_http *m, size_t *len, uint16_t *status)
{
    char *page = NULL;
    *status = 503;
    pthread_mutex_lock(&m->serial);
    pthread_mutex_lock(&m->mu);
    if (!m->closing) {
        m->state = PAGE_WANTED;
        m->gen++;
        uv_async_send(&m->async);
        struct timespec dl;
        kl_deadline_after_ms(&dl, KL_METRICS_RENDER_WAIT_MS);
        while (m->state == PAGE_WANTED && !m->closing &&
               pthread_cond_timedwait(&m->cv, &m->mu, &dl) != ETIMEDOUT)
            ;
        if (m->state == PAGE_DONE) {
            page = m->page;
            *len = m->page_len;
            *status = page != NULL ? 200 : 500;
            m->page = NULL;
        }
        m->state = PAGE_IDLE; /* a render still running finds it abandoned */
    }
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_unlock(&m->serial);
    return page;
}

/* nng worker thread. */
static void on_request(nng_aio *aio)
{
    nng_http_req *req = nng_aio_get_input(aio, 0);
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    kl_metrics_http *m = nng_http_handler_get_data(h);
    if (!enter(m)) {
        answer(aio, 503, NULL, 0);
        return;
    }
    if (!token_ok(m, req)) {
        leave(m);
        answer(aio, 401, NULL, 0);
        return;
    }
    size_t len = 0;
    uint16_t status;
    char *page = await_page(m, &len, &status);
    if (status == 200)
        atomic_fetch_add(&m->served, 1);
    leave(m);
    answer(aio, status, page, len);
    free(page);
}

/* Loop thread: renders when a scrape waits. */
static void on_async(uv_async_t *a)
{
    kl_metrics_http *m = a->data;
    pthread_mutex_lock(&m->mu);
    bool wanted = m->state == PAGE_WANTED;
    uint64_t gen = m->gen;
    pthread_mutex_unlock(&m->mu);
    if (!wanted)
        return;
    kl_metrics_buf b = {0};
    m->render(m->ctx, &b);
    size_t len;
    char *page = kl_metrics_buf_take(&b, &len);
    pthread_mutex_lock(&m->mu);
    if (m->state == PAGE_WANTED && m->gen == gen) {
        m->page = page;
        m->page_len = len;
        m->state = PAGE_DONE;
        page = NULL;
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    free(page);
}

static kl_code load_token(kl_metrics_http *m, const char *addr, const char *token_file, kl_err *err)
{
    if (token_file == NULL || token_file[0] == '\0') {
        if (!kl_metrics_addr_is_loopback(addr))
            return kl_fail(err, KL_INVALID_ARGUMENT, "metrics_token_file",
                           "metrics address %s is not loopback: give a metrics_token_file", addr);
        return KL_OK;
    }
    char token[KL_METRICS_TOKEN_MAX + 1];
    kl_code rc = kl_metrics_token_load(token_file, token, sizeof token, err);
    if (rc == KL_OK) {
        randombytes_buf(m->token_key, sizeof m->token_key);
        crypto_generichash(m->token_hash, sizeof m->token_hash, (const uint8_t *)token, strlen(token),
                           m->token_key, sizeof m->token_key);
        m->has_token = true;
    }
    sodium_memzero(token, sizeof token);
    return rc;
}

static kl_code start_server(kl_metrics_http *m, const char *addr, kl_err *err)
{
    char url[KL_URL_MAX + 16];
    snprintf(url, sizeof url, "http://%s", addr);
    nng_url *u = NULL;
    nng_http_handler *h = NULL;
    int rv = nng_url_parse(&u, url);
    if (rv == 0)
        rv = nng_http_server_hold(&m->srv, u);
    nng_url_free(u);
    if (rv == 0 && (rv = nng_http_handler_alloc(&h, "/metrics", on_request)) == 0) {
        nng_http_handler_set_data(h, m, NULL);
        if ((rv = nng_http_server_add_handler(m->srv, h)) != 0)
            nng_http_handler_free(h);
    }
    if (rv == 0)
        rv = nng_http_server_start(m->srv);
    if (rv != 0) {
        if (m->srv)
            nng_http_server_release(m->srv);
        m->srv = NULL;
        return kl_fail(err, KL_UNAVAILABLE, "metrics", "metrics address %s cannot be served: %s", addr,
                       nng_strerror(rv));
    }
    return KL_OK;
}

kl_code kl_metrics_http_start(uv_loop_t *loop, const char *addr, const char *token_file,
                              kl_metrics_render_fn render, void *ctx, kl_metrics_http **out,
                              kl_err *err)
{
    *out = NULL;
    kl_code rc = kl_metrics_addr_check(addr, "metrics", err);
    if (rc != KL_OK)
        return rc;
    kl_metrics_http *m = calloc(1, sizeof *m);
    if (m == NULL)
        return kl_fail(err, KL_INTERNAL, "out_of_memory", "out of memory");
    m->loop = loop;
    m->render = render;
    m->ctx = ctx;
    if ((rc = load_token(m, addr, token_file, err)) != KL_OK) {
        free(m);
        return rc;
    }
    pthread_mutex_init(&m->serial, NULL);
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    uv_async_init(loop, &m->async, on_async);
    m->async.data = m;
    if ((rc = start_server(m, addr, err)) != KL_OK) {
        kl_metrics_http_stop(m);
        return rc;
    }
    KL_INFO("metrics", "listen=http://%s/metrics token=%s", addr, m->has_token ? "required" : "none");
    *out = m;
    return KL_OK;
}

static void on_closed(uv_handle_t *h)
{
    kl_metrics_http *m = h->data;
    free(m->page);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->serial);
    sodium_memzero(m, sizeof *m);
    free(m);
}

void kl_metrics_http_stop(kl_metrics_http *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->closing = true;
    pthread_cond_broadcast(&m->cv);
    while (m->active > 0)
        pthread_cond_wait(&m->cv, &m->mu);
    pthread_mutex_unlock(&m->mu);
    if (m->srv) {
        nng_http_server_stop(m->srv);
        nng_http_server_release(m->srv);
        m->srv = NULL;
    }
    uv_close((uv_handle_t *)&m->async, on_closed);
}

uint64_t kl_metrics_http_served(kl_metrics_http *m) { return atomic_load(&m->served); }
