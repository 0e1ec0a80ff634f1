/* failpoint: named cut points for recovery tests (ARCHITECTURE.md "Processes").
 *
 * Armed only by the environment variable KEYLOAD_FAILPOINTS, read once by
 * kl_failpoint_init():  KEYLOAD_FAILPOINTS="name=action[,name=action...]"
 * where action is one of
 *   exit          _exit(77) at once (like kill -9: no flush, no cleanup)
 *   abort         abort()
 *   sleep(MS)     sleep MS milliseconds, then continue
 *   error(CODE)   make the site fail with status CODE (e.g. error(UNAVAILABLE))
 *   N*action      act only on the N-th hit (1-based), pass before and after
 * Unarmed, a site costs one predictable branch on a global flag. A name that is not one of
 * the sites below is refused (failpoint.c keeps the list; add a new site there too).
 *
 * The daemon's sites (keyloadd), in the order a client's batch passes them (all but the
 * first only for entries a caller waits on, so a leader's no-op never trips them):
 *   daemon.before_append            entry evaluated, not yet proposed to the log
 *   daemon.after_append_before_apply  entry committed (durable on a quorum), no caller
 *                                   answered, state not yet applied here
 *   daemon.after_append_before_reply  same stage, named for tests that cut before any answer
 *   daemon.before_reply             answer encoded, not yet handed to the transport
 *   daemon.after_reply_before_apply   callers answered at the commit, the entry not yet
 *                                   applied here (the leader answers before it applies)
 * Storage (daemon/store/store.c):
 *   store.log_write                 the synced log write of a replication round (entries, hard
 *                                   state); error(CODE) fails it as if the write or its fsync
 *                                   returned EIO, and the member exits (any CODE: the site
 *                                   always reports an I/O error)
 *   store.install_begun             snapshot install: old state and log deleted with the
 *                                   install marker (synced), staged files not yet ingested
 *   store.install_ingested          staged files ingested, applied/log start not yet moved
 *   store.install_finished          install complete and synced, staging not yet removed
 * Replication (daemon/repl/driver.c, snapwire.c):
 *   repl.compact_flush              a compaction's flush of the applied state, on the thread
 *                                   pool, before it starts (sleep(MS): a slow flush; the
 *                                   loop goes on)
 *   repl.after_compact              the log was just compacted (entries deleted, synced)
 *   repl.snapshot_open              a leader opens a snapshot reader for a follower, on the
 *                                   thread pool (sleep(MS): a large state's key count; the
 *                                   loop and its heartbeats go on)
 *   repl.snapshot_chunk_staged      a follower staged one more chunk of a snapshot stream
 *                                   (exit: the receiver dies mid-install)
 * Replication transport (daemon/repl/peer.c):
 *   peer.before_close               on the loop, before a stopping member closes its peer
 *                                   links (sleep(MS): a close that takes long)
 * RPC client (common/rpc.c):
 *   rpc.dial_returned               on a bounded dial's helper thread, after nng's dial
 *                                   returned (sleep(MS): a dial that does not end when its
 *                                   dialer is closed, as nng 1.5.2's sometimes does not)
 * Coordinator sites (keyload-coordinator, coordinator/turn.c; each worker turn passes them in
 * this order; run with "workers": 1 when a test needs the N-th hit to be an exact transfer):
 *   coord.before_accept             no receipt was found; the Accept batch (deterministic
 *                                   command id) is built but not yet sent
 *   coord.after_accept_sent         the Accept was answered OK (committed), before the
 *                                   receipt is reread: exit here = "after Accept committed but
 *                                   before its answer was used"
 *   coord.before_complete           receipt read and both proofs rechecked; the Complete
 *                                   batch is not yet sent
 *   coord.after_complete_sent       the Complete was answered OK (Delivered committed),
 *                                   before the coordinator counts or logs it
 * and on the recovery path of a retained quota/permission failure:
 *   coord.before_advance            a failure witness was issued; the Advance batch is not
 *                                   yet sent ("between witness and Advance")
 *   coord.after_advance             the Advance was answered OK (next generation committed),
 *                                   before the turn ends ("between Advance and the next
 *                                   Accept", which a later turn sends)
 * error(CODE) at a before_ site is handled like that batch refused with CODE (a terminal code
 * is recorded as a terminal failure, others are retried); at an after_ site the answer is
 * set aside and the turn retried later with the same command id. */
#ifndef KL_FAILPOINT_H
#define KL_FAILPOINT_H

#include "common/status.h"

#include <stdbool.h>

extern bool kl_failpoints_armed;

/* Parses KEYLOAD_FAILPOINTS. Returns KL_INVALID_ARGUMENT (naming the bad item) on a
 * malformed value; a process should refuse to start then. */
kl_code kl_failpoint_init(kl_err *err);
/* Same, from an explicit spec string (tests). NULL or "" disarms everything. */
kl_code kl_failpoint_configure(const char *spec, kl_err *err);

/* Evaluates the failpoint: exits/aborts/sleeps as armed; returns KL_OK or the armed
 * error code (then err is filled). */
kl_code kl_failpoint_eval(const char *name, kl_err *err);

#define KL_FAILPOINT(name, errp) \
    (__builtin_expect(kl_failpoints_armed, 0) ? kl_failpoint_eval((name), (errp)) : KL_OK)

#endif
