/* node_ctx: who a request acts as, the limits it runs under, and the one way an evaluation
 * context is built for it, shared by the write path (node_submit.c) and the reads
 * (node_read.c), so that a batch and a read of the same queue see the same subject, limits,
 * time and keys. */
#include "daemon/node_internal.h"

#include "daemon/engine/catalog.h"

#include <string.h>

/* The limits a batch or read of database tenant/db runs under: the cluster file's,
 * tightened by the database's own (DatabaseLimits, from this partition's catalog copy). */
kl_code node_database_limits(kl_node *n, kl_view *v, const char *tenant, const char *db, kl_limits *out,
                             kl_err *err)
{
    *out = n->cfg.limits;
    if (tenant == NULL)
        return KL_OK;
    const Keyload__V1__CatalogDatabase *d;
    bool found;
    kl_code rc = kl_subject_cache_database(n->subjects, v, tenant, db, &d, &found, err);
    v->scanned = 0;
    if (rc != KL_OK || !found)
        return rc;
    const Keyload__V1__DatabaseLimits *l = d->limits;
    if (l && l->max_scan_records && l->max_scan_records < out->max_scan_records)
        out->max_scan_records = l->max_scan_records;
    if (l && l->max_batch_bytes && l->max_batch_bytes < out->max_batch_bytes)
        out->max_batch_bytes = l->max_batch_bytes;
    if (l && l->max_query_read_bytes && l->max_query_read_bytes < out->max_query_read_bytes)
        out->max_query_read_bytes = l->max_query_read_bytes;
    return KL_OK;
}



static bool bootstrap_only(const Keyload__V1__BatchRequest *b)
{
    for (size_t i = 0; i < b->n_mutations; i++)
        if (b->mutations[i]->kind_case != KEYLOAD__V1__MUTATION__KIND_BOOTSTRAP)
            return false;
    return b->n_mutations > 0;
}

/* Requests without a session act as the local principal: allowed only on an
 * insecure_local_admin cluster, or for a batch that is only a Bootstrap (its proof of the
 * cluster secret is its authentication). UNAUTHENTICATED "principal" when a session's
 * principal is gone from the catalog (its sessions end at the gate too). */
static kl_code subject_load(kl_node *n, kl_view *v, const char *principal,
                            const Keyload__V1__BatchRequest *b, node_subject *out, kl_err *err);

kl_code node_subject_load(kl_node *n, kl_view *v, const char *principal,
                          const Keyload__V1__BatchRequest *b, node_subject *out, kl_err *err)
{
    uint64_t t0 = node_mono_ns();
    kl_code rc = subject_load(n, v, principal, b, out, err);
    n->authz_requests++;
    n->authz_ns += node_mono_ns() - t0;
    return rc;
}

static kl_code subject_load(kl_node *n, kl_view *v, const char *principal,
                            const Keyload__V1__BatchRequest *b, node_subject *out, kl_err *err)
{
    memset(out, 0, sizeof *out);
    if (strcmp(principal, KL_CATALOG_RESERVED_PRINCIPAL) == 0) {
        if (n->cfg.insecure_local_admin || (b != NULL && bootstrap_only(b)))
            return KL_OK;
        return kl_fail(err, KL_UNAUTHENTICATED, "session_required",
                       "this cluster requires a session: say Hello with a principal's key first "
                       "(keyload --principal ID --key FILE)");
    }
    bool found;
    kl_code rc = kl_subject_cache_principal(n->subjects, v, principal, &out->record, &found, err);
    if (rc != KL_OK)
        return rc;
    if (!found)
        return kl_fail(err, KL_UNAUTHENTICATED, "principal",
                       "the session's principal no longer exists in this partition's catalog");
    out->subject.principal = out->record;
    out->who = &out->subject;
    out->policy_epoch = out->record->policy_epoch;
    return KL_OK;
}

void node_subject_free(node_subject *s)
{
    s->record = NULL; /* the cache owns it */
}

/* The evaluation context of a request of subj at partition time now_ms over view, under
 * limits: every field a batch and a read share. A batch adds where its entry lands (index,
 * term) and, on partition 0, its catalog batch; a read leaves them 0 and NULL. */
kl_eval_ctx node_eval_ctx(kl_node *n, kl_view *view, const kl_limits *limits,
                          const node_subject *subj, int64_t now_ms)
{
    kl_eval_ctx ctx = {.view = view, .limits = limits, .partition = n->cfg.partition,
                       .partition_count = n->cfg.partition_count, .now_ms = now_ms,
                       .random = n->io.random, .cluster_secret = n->cfg.cluster_secret,
                       .who = subj->who, .clock_ns = node_mono_ns, .signing = &n->signing};
    return ctx;
}
