#include "coordinator/coord.h"

#include "common/clock.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t kl_coord_now_ms(void)
{
    return kl_clock_ms(CLOCK_MONOTONIC);
}

int64_t kl_coord_unix_ms(void)
{
    return kl_clock_ms(CLOCK_REALTIME);
}

uint32_t kl_coord_worker_of(const kl_coord *co, const uint8_t key[KL_COORD_KEY_LEN])
{
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h = (h << 8) | key[i];
    return (uint32_t)(h % co->cfg.workers);
}

static void free_buffers(kl_coord *co, uint32_t n)
{
    for (uint32_t i = n; i > 0; i--)
        kl_coord_buffer_free(co->buffers[i - 1]);
    free(co->buffers);
    co->buffers = NULL;
}

kl_code kl_coord_open(const kl_coord_config *cfg, kl_coord **out, kl_err *err)
{
    *out = NULL;
    kl_code rc = KL_INTERNAL;
    kl_coord *co = calloc(1, sizeof *co);
    if (co == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "coordinator: out of memory");
        goto fail_struct;
    }
    co->cfg = *cfg;
    co->started_unix_ms = kl_coord_unix_ms();
    atomic_init(&co->stopping, false);
    if (pthread_mutex_init(&co->lanes_mu, NULL) != 0) {
        rc = kl_fail(err, KL_INTERNAL, "mutex", "coordinator: cannot create a mutex");
        goto fail_mutex;
    }
    co->cluster = malloc(sizeof *co->cluster);
    if (co->cluster == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "coordinator: out of memory");
        goto fail_cluster;
    }
    if ((rc = kl_cluster_load(cfg->cluster_file, NULL, co->cluster, err)) != KL_OK)
        goto fail_load;
    if ((rc = kl_coord_failed_new(KL_COORD_FAILED_DEFAULT_CAPACITY, &co->failed, err)) != KL_OK)
        goto fail_failed;
    if (!cfg->has_principal) {
        *out = co; /* idle: no client, no buffers */
        return KL_OK;
    }
    co->buffers = calloc(cfg->workers, sizeof *co->buffers);
    if (co->buffers == NULL) {
        rc = kl_fail(err, KL_INTERNAL, "memory", "coordinator: out of memory");
        goto fail_buffers;
    }
    for (uint32_t i = 0; i < cfg->workers; i++)
        if ((rc = kl_coord_buffer_new(cfg->buffer_capacity, &co->buffers[i], err)) != KL_OK) {
            free_buffers(co, i);
            goto fail_buffers;
        }
    /* The principal is only selected: opening a client with its key creates nothing. */
    if ((rc = kl_client_open_principal(cfg->cluster_file, cfg->database,
                                       (int)cfg->call_timeout_ms, cfg->principal_id,
                                       cfg->principal_key_file, &co->client, err)) != KL_OK)
        goto fail_client;
    *out = co;
    return KL_OK;

fail_client:
    free_buffers(co, cfg->workers);
fail_buffers:
    kl_coord_failed_free(co->failed);
fail_failed:
fail_load:
    free(co->cluster);
fail_cluster:
    pthread_mutex_destroy(&co->lanes_mu);
fail_mutex:
    free(co);
fail_struct:
    return rc;
}

void kl_coord_close(kl_coord *co)
{
    if (co == NULL)
        return;
    kl_client_close(co->client);
    if (co->buffers != NULL)
        free_buffers(co, co->cfg.workers);
    kl_coord_failed_free(co->failed);
    free(co->cluster);
    pthread_mutex_destroy(&co->lanes_mu);
    free(co);
}

void kl_coord_publish_lanes(kl_coord *co, const kl_coord_lane_count *lanes, size_t n,
                            uint64_t other)
{
    if (n > KL_COORD_LANES_MAX)
        n = KL_COORD_LANES_MAX;
    pthread_mutex_lock(&co->lanes_mu);
    memcpy(co->lanes, lanes, n * sizeof *lanes);
    co->n_lanes = n;
    co->other_lanes_pending = other;
    co->lanes_unix_ms = kl_coord_unix_ms();
    pthread_mutex_unlock(&co->lanes_mu);
}
