/* limits: the compile-time limits of the daemon, the SDK and the tools, in one place, with
 * the relations between them checked when anything that includes this header compiles.
 * The headers that used to define them include this one, so every name is unchanged.
 * Sizes fixed by a format or by libsodium (key, signature and GUID lengths) stay beside
 * the format. Limits set in the cluster file ("limits", "connections", "timers") have their
 * defaults and ranges here; the file may lower or raise them within the ranges. What each
 * bounds: ARCHITECTURE.md "Limits". Pure macros: no include, no type. */
#ifndef KL_LIMITS_H
#define KL_LIMITS_H

/* ---------------------------------------------------------------- errors (common/status.h) */
#define KL_ERR_MESSAGE_MAX 256
#define KL_ERR_DETAIL_MAX 128

/* ---------------------------------------------------------------- names (common/names.h) */
#define KL_NAME_LEN_MAX 128
/* Longest tenant, database, queue, lane, header key and field key, in bytes. */
#define KL_SDK_NAME_MAX 128

/* ---------------------------------------------------------------- scan hints (daemon/engine/view.h) */
/* Prefixes whose first live key a leader remembers (per lane 'A' and per queue 'T' ranges
 * the Receives scan); past it the oldest is forgotten and that prefix is learnt again. */
#define KL_SCAN_HINTS_MAX 64
/* The read cache of applied catalog records, queue names and records, and meta records
 * (engine/view.h): its slots, and the longest value it keeps (a queue id is 8 bytes, the
 * outcome mark 16; a database's catalog record, with its signing key and limits, is a few
 * hundred, more with names near their 128-byte maximum, and a longer value is simply read
 * from the store each time). About 66 KiB per member. */
#define KL_READ_CACHE_SLOTS 64
#define KL_READ_CACHE_VALUE_MAX 512

/* ---------------------------------------------------------------- metrics (common/metrics.h) */
/* Queues a member reports per-queue series for (depth, in flight) in one scrape; the
 * series of the queues past it are counted in keyload_metrics_series_dropped_total. */
#define KL_METRICS_QUEUES_MAX 256
/* Records one scrape may read for the per-queue series (queue records plus leased/delayed
 * index entries): bounds the loop time a scrape takes whatever the queues hold. */
#define KL_METRICS_SCAN_RECORDS_MAX 100000
/* Distinct (code, detail) pairs of keyload_refusals_total; later pairs count as "other". */
#define KL_METRICS_REFUSALS_MAX 128
/* Buckets of one histogram, +Inf not counted. */
#define KL_METRICS_HIST_BUCKETS_MAX 24
/* Longest a scrape waits for the loop thread to render (then 503, retryable). */
#define KL_METRICS_RENDER_WAIT_MS 2000
/* Longest metrics bearer token (bytes of its file, trailing newline trimmed), and the
 * shortest accepted (a guessable token would be no protection). */
#define KL_METRICS_TOKEN_MAX 256
#define KL_METRICS_TOKEN_MIN 16

/* ---------------------------------------------------------------- cluster file (common/cluster.h) */
#define KL_CLUSTER_MAX_PARTITIONS 64
#define KL_CLUSTER_MAX_MEMBERS 9
/* Members the SDK knows per partition: the cluster file's plus those learned from Members
 * (client/sdk/member_table.h; a bit each in a 64-bit mask, so at most 64). */
#define KL_SDK_MEMBERS_MAX 32
#define KL_NAME_MAX 128
#define KL_URL_MAX 256
#define KL_PATH_MAX 512

/* "limits": the defaults of the cluster file's MaxBatchBytes .. DefaultQueueMaxBytes. */
#define KL_DEFAULT_MAX_BATCH_BYTES (1u << 20)
#define KL_DEFAULT_MAX_SCAN_RECORDS 10000
#define KL_DEFAULT_MAX_QUERY_READ_BYTES (4u << 20)
#define KL_DEFAULT_MAX_FRAME_BYTES (4u << 20)
#define KL_DEFAULT_QUEUE_MAX_MESSAGES 1000000
#define KL_DEFAULT_QUEUE_MAX_BYTES (1ull << 30)

/* "timers" */
#define KL_SESSION_TTL_DEFAULT_MS 3600000   /* one hour */
#define KL_SESSION_TTL_MIN_MS 1000
#define KL_SESSION_TTL_MAX_MS 86400000      /* one day */

#define KL_CATALOG_TAIL_WAIT_MS 1000      /* longest a tail asks partition 0 to hold it */
#define KL_CATALOG_LEASE_DEFAULT_MS 3000
#define KL_CATALOG_LEASE_MIN_MS 1500
/* How long a batch's outcome is kept for replay ("outcome_retention_ms"; ARCHITECTURE.md
 * "Store layout"). At least 10 s: a retry after an unknown answer must find the outcome. */
#define KL_OUTCOME_RETENTION_DEFAULT_MS 86400000ll   /* one day */
#define KL_OUTCOME_RETENTION_MIN_MS 10000ll
#define KL_OUTCOME_RETENTION_MAX_MS 31536000000ll    /* one year */
/* Expired outcomes one log entry deletes at most: bounds the apply of one entry, while
 * sweeping faster than a busy partition commits batches (one entry holds up to 64). */
#define KL_OUTCOME_SWEEP_MAX 256
/* How often (partition time) a leader sweeps while the last sweep found less than
 * KL_OUTCOME_SWEEP_MAX: each sweep reads the mark and seeks an iterator, which at
 * thousands of entries a second cost more than the deletes; a sweep that was full runs
 * again with the next entry. The mark lags by at most this, which only keeps outcomes
 * longer. */
#define KL_OUTCOME_SWEEP_EVERY_MS 100
/* How far a batch's first_sent_unix_ms may be ahead of the later of partition time and the
 * leader's wall clock: the clock skew a session Hello may have (KL_SESSION_DEFAULT_SKEW_MS).
 * Further ahead is refused UNAVAILABLE first_sent_ahead. */
#define KL_FIRST_SENT_AHEAD_MAX_MS 30000ll
/* The latest first_sent_unix_ms a clock can give: 9999-12-31T23:59:59.999Z. A later value is
 * no clock running ahead, which a retry could cure, but a malformed one: INVALID_ARGUMENT
 * "first_sent_unix_ms", in the SDK's setter and the daemon alike. */
#define KL_FIRST_SENT_LATEST_MS 253402300799999ll

/* "connections" */
#define KL_CONN_CLIENT_MAX_DEFAULT 1024
#define KL_CONN_CLIENT_IDLE_DEFAULT_MS 600000   /* ten minutes */
#define KL_CONN_PEER_MAX_DEFAULT 32             /* the peer transport's own bound */
/* Never by default: links between two followers carry nothing between elections, and a
 * closed link is redialled at once. */
#define KL_CONN_PEER_IDLE_DEFAULT_MS 0
#define KL_CONN_SESSIONS_PER_TENANT_DEFAULT 1024
#define KL_CONN_SESSIONS_MAX_DEFAULT 4096       /* the session table's size */

/* ---------------------------------------------------------------- RPC (common/rpc.h) */
#define KL_RPC_MIN_CONTEXTS 64
#define KL_RPC_MAX_METHODS 64 /* methods one RPC server serves (its sorted lookup table) */
#define KL_RPC_DEFAULT_FRAME_LIMIT (4u << 20)
/* Request contexts of a member's client port (daemon/main.c). */
#define KL_CLIENT_RPC_CONTEXTS 128
/* Longest request backtrace header the client port's TCP transport keeps and echoes
 * (common/rpc_tcp.h; nng's REP accepts at most 8 hops of 4 bytes). */
#define KL_RPC_TCP_HDR_MAX 32
/* Requests open at once on one client connection of common/rpc_direct.c (an SDK client
 * to one member); one more is refused RESOURCE_EXHAUSTED "client_requests". */
#define KL_RPC_DIRECT_MAX_REQUESTS 65536

/* ---------------------------------------------------------------- sessions (common/session.h) */
#define KL_SESSION_PRINCIPAL_MAX 128   /* bytes of principal_id, without the NUL */
#define KL_SESSION_CLUSTER_MAX 127     /* bytes of cluster, without the NUL (KL_NAME_MAX - 1) */
#define KL_SESSION_AD_MAX 256          /* bytes of the caller's associated data */

/* ---------------------------------------------------------------- Q1 (common/q1.h) */
#define KL_Q1_STATEMENT_MAX 65536
#define KL_Q1_ARGS_MAX 32
#define KL_Q1_NAME_MAX 128
#define KL_Q1_JSON_DEPTH_MAX 16

/* ---------------------------------------------------------------- SDK (client/keyload.h) */
/* Redirects (NOT_LEADER with a leader address) followed per request. */
#define KL_MAX_REDIRECTS 3
/* A member that answers it is full (UNAVAILABLE "reads_full", "write_pipeline_full",
 * "max_unpersisted_entries") is asked again after a pause that starts here and doubles per
 * such answer within a call, up to the cap; its bounds free up within a replication round. */
#define KL_BUSY_PAUSE_MIN_MS 2
#define KL_BUSY_PAUSE_MAX_MS 64
/* Keys in a grant's field or header key list (kl_key_list). */
#define KL_KEY_LIST_MAX 64

/* ---------------------------------------------------------------- mutations (daemon/engine) */
#define KL_HEADER_VALUE_MAX 4096
#define KL_MAP_ENTRIES_MAX 64
#define KL_BATCH_MUTATIONS_MAX 1000
#define KL_RECEIVE_MAX 1000
#define KL_LEASE_MS_MAX (12LL * 3600 * 1000)
#define KL_LEASE_MS_DEFAULT 30000
/* Longest a Receive may wait for messages (Receive.wait_ms): below the SDK's default
 * timeout plus this wait, and short enough that a parked request never pins a client
 * context for long. The SDK's limit too (client/keyload.h). */
#define KL_RECEIVE_WAIT_MS_MAX 30000
#define KL_DELAY_MS_MAX (7LL * 24 * 3600 * 1000)
#define KL_AUTHZ_LIST_MAX 64 /* entries in one grant's fields or headers list */
/* A token never exceeds this; bigger input is refused before decoding. Intent tokens carry
 * the message, so the real bound is MaxBatchBytes, which the source checks at admission. */
#define KL_CLAIMS_TOKEN_MAX (64u * 1024 * 1024)
#define KL_TRANSFER_PENDING_PAGE_MAX 1000
/* ListCatalog (daemon/engine/catalog_read.h): records per page when the request names no
 * max, the most one may name, and the bytes of records one answer gathers (a page stops
 * early, with a cursor, before passing it; its first record always goes in). */
#define KL_CATALOG_LIST_DEFAULT 100
#define KL_CATALOG_LIST_MAX 1000
#define KL_CATALOG_LIST_ANSWER_BYTES (256u << 10)
/* A ListCatalog cursor: version byte, list kind, the last record's name. */
#define KL_CATALOG_CURSOR_MAX (2 + KL_NAME_LEN_MAX)

/* ---------------------------------------------------------------- store (daemon/store/keys.h) */
#define KL_KEY_MAX 512

/* ---------------------------------------------------------------- journal (daemon/store/journal.h) */
#define KL_JOURNAL_MIN_SEGMENT 4096u     /* smallest segment: a header, a link and a small frame */
#define KL_JOURNAL_RECORD_MAX (1u << 30) /* one record's bytes (a frame's length is a u32) */
/* Sealed segments waiting for the keeper's flush; past it an append fails (the member
 * exits, as on any failed write): reached only while flushes keep failing. */
#define KL_JOURNAL_SEALED_MAX 64u

/* ---------------------------------------------------------------- snapshots (daemon/store/snapshot.h) */
/* A snapshot chunk stops taking records once its body holds this many bytes, so a chunk is
 * at most this plus one record (KL_SNAP_CHUNK_MAX): the memory of both ends per chunk. */
#define KL_SNAP_CHUNK_BYTES (1u << 20)
/* Bytes of snapshot chunks a leader has in flight to one follower past its last
 * acknowledgement (daemon/repl/snapwire.h): a new chunk is read only while fewer are in
 * flight, so the peer queue holds at most this plus one chunk, whatever the records hold
 * (a window counted in chunks held four chunks of up to KL_SNAP_CHUNK_MAX each). */
#define KL_SNAPWIRE_WINDOW_BYTES (4u << 20)
#define KL_SNAP_CONFIG_MAX 4096          /* configuration bytes in a snapshot / log_start */
/* Largest value a snapshot record carries: a transfer intent holds its token. */
#define KL_SNAP_VALUE_MAX (KL_CLAIMS_TOKEN_MAX + (64u << 10))
#define KL_SNAP_CHUNK_OVERHEAD 128       /* fixed chunk fields and a record's two lengths */
#define KL_SNAP_CHUNK_MAX \
    (KL_SNAP_CHUNK_BYTES + KL_KEY_MAX + KL_SNAP_VALUE_MAX + KL_SNAP_CONFIG_MAX + KL_SNAP_CHUNK_OVERHEAD)
/* The receiver finishes (syncs) a staged SST file once it holds this many bytes and saves
 * its resume point then: a restart re-fetches at most this much. */
#define KL_SNAP_STAGE_FILE_BYTES (64u << 20)

/* ---------------------------------------------------------------- backups (daemon/rpc/backup_serve.c) */
/* Backup streams one member holds at once: each pins old SST files and memtables until it
 * is closed, so a few are enough (one backup needs one per partition, on its leader). */
#define KL_BACKUP_MAX_STREAMS 4
/* A stream nobody asked a chunk of for this long is closed (a killed backup tool). */
#define KL_BACKUP_IDLE_MS 30000
/* A stream is closed this long after it was opened, whatever it does: a pin kept for hours
 * would keep every overwritten file on disk. Over an hour a stream reads about 100 GiB. */
#define KL_BACKUP_STREAM_MAX_MS (3600 * 1000)
/* The longest transfer hold a backup may set (SetTransferHold.hold_ms): a backup pins every
 * partition well within it, and a hold left by a killed backup ends within it. */
#define KL_TRANSFER_HOLD_MAX_MS 120000
/* The hold `keyload admin backup` sets unless told otherwise (--hold-ms). */
#define KL_TRANSFER_HOLD_DEFAULT_MS 15000
/* Member-key records (SetMemberKey, daemon/engine/member_key.h) partition 0's catalog holds,
 * registered or removed: none is ever deleted, so the table is bounded here, then
 * RESOURCE_EXHAUSTED "member_keys_full". */
#define KL_MEMBER_KEYS_MAX 1024
/* How long `keyload admin backup` waits for one call unless --timeout says otherwise: a
 * BackupOpen answers only after its pin counted the partition's records (7 s per GiB). */
#define KL_BACKUP_CALL_TIMEOUT_MS 600000
/* What a BackupChunk answer adds to its chunk (fields, sealing), kept below the frame. */
#define KL_BACKUP_ANSWER_OVERHEAD 1024
/* Log compaction (cluster file "snapshot"; daemon/repl/driver.h): a member compacts once its
 * log holds more than threshold applied entries, keeping the last trailing ones so that a
 * follower a little behind catches up from the log rather than by snapshot. The defaults
 * are etcd's order (SnapshotCount, SnapshotCatchUpEntries). */
#define KL_SNAP_THRESHOLD_DEFAULT 10000u
#define KL_SNAP_TRAILING_DEFAULT 5000u
#define KL_SNAP_THRESHOLD_MIN 8u
#define KL_SNAP_THRESHOLD_MAX 1000000000u
/* The same in bytes of log written since the snapshot point, whatever the entry count: a
 * leader's entry groups many batches (of up to KL_DEFAULT_MAX_BATCH_BYTES each), so under
 * load 5000 entries may hold tens of MiB or GiB (24 batches of 100-byte cycles per entry at
 * 128 clients, 14 KiB each: 72 MB in the default trailing window). A member compacts once more than
 * KL_SNAP_LOG_BYTES were logged since its snapshot point and keeps at most
 * KL_SNAP_TRAILING_BYTES of trailing entries (and at most the trailing count); the bytes
 * are counted in samples of about KL_SNAP_LOG_SAMPLE_BYTES (driver.c), since a restart or
 * an install (the log before them is not counted: the entry count still bounds it). */
#define KL_SNAP_LOG_BYTES (16u << 20)
#define KL_SNAP_TRAILING_BYTES (8u << 20)
#define KL_SNAP_LOG_SAMPLE_BYTES 4096u

/* ---------------------------------------------------------------- parked Receives (daemon/park.h) */
/* Parked requests per member. Each holds one of the client port's KL_CLIENT_RPC_CONTEXTS
 * request contexts while it waits; with the KL_SERVICE_MAX_READS reads waiting for their
 * barrier this leaves the rest for batches, MemberStatus and Hello. */
#define KL_PARK_MAX 48
/* Queues one parked request watches; a batch reading more is woken by any queue's change. */
#define KL_PARK_WATCH_MAX 8

/* ---------------------------------------------------------------- service (daemon/rpc) */
/* Fresh reads waiting for their read-index round: well below the client port's contexts,
 * so waiting reads never take the last ones and MemberStatus and Hello always find one. */
#define KL_SERVICE_MAX_READS 48
#define KL_SERVICE_MAX_TAILS 64      /* parked CatalogTail long-polls (partition 0) */
#define KL_SERVICE_MAX_BARRIERS 256  /* catalog batches waiting for the data partitions */
#define KL_TAIL_WAIT_MAX_MS 2000     /* longest a CatalogTail is held empty */
#define KL_TAIL_MAX_CHANGES 64       /* changes per CatalogTail answer */
#define KL_SESSIONS_MAX 4096
#define KL_SESSIONS_PER_PRINCIPAL 64

/* ---------------------------------------------------------------- replication (daemon/repl) */
#define KL_RAFT_MAX_MEMBERS 9
#define KL_RAFT_MAX_INFLIGHT 256     /* append messages in flight per follower, upper bound */
#define KL_RAFT_MAX_READIES 4        /* readies a core hands out before the first is advanced */
#define KL_RAFT_MAX_MSG_ENTRIES 1024 /* entries in one append message */
/* Configuration entries a member's log may hold past its snapshot point (raft_conf.h):
 * changes commit one at a time, so a handful suffice; compaction folds older ones. */
#define KL_RAFT_MAX_CONF_HISTORY 16
/* A configuration entry's encoding: an 8-byte header, then voters, learners and outgoing
 * voters as u64 ids (daemon/repl/raft_conf.c). */
#define KL_RAFT_CONF_MAX_BYTES (8 + 3 * 8 * KL_RAFT_MAX_MEMBERS)
/* A member URL in a configuration's member directory (membership.proto MemberInfo). */
#define KL_MEMBER_URL_MAX 160
/* One MemberInfo encoded: id (tag + varint), two URLs and a key (tag + length + bytes). */
#define KL_MEMBER_INFO_MAX (1 + 10 + 2 * (1 + 2 + KL_MEMBER_URL_MAX) + 1 + 1 + 32)
/* Members whose addresses and keys a member remembers from the directories it saw (the
 * configurations of a change in flight name at most 3 x KL_RAFT_MAX_MEMBERS distinct ones). */
#define KL_MEMBER_MAX_KNOWN (4 * KL_RAFT_MAX_MEMBERS)
/* How long the leader runs one membership change (its learner's catch-up included) before
 * it abandons it; the entries already in the log stay, and a retry resumes from them. */
#define KL_MEMBER_CHANGE_MS 600000u
/* A configuration blob (a CONF entry's data, 'M'"log_start"'s and a snapshot's
 * configuration): the conf encoding, then a MemberDirectory of every member of both halves. */
#define KL_MEMBER_CONF_BLOB_MAX \
    (KL_RAFT_CONF_MAX_BYTES + KL_RAFT_MAX_MEMBERS * (1 + 2 + KL_MEMBER_INFO_MAX))
#define KL_PEER_MAX_PEERS 9
#define KL_PEER_MAX_CLUSTER 255
#define KL_PEER_AUTH_CLUSTER_MAX 255
#define KL_PEER_DEFAULT_MAX_FRAME (4u << 20)
/* Queued frames one peer DATA frame may carry (daemon/repl/peer.c batches what waited
 * behind the 2-frame window), besides the max_frame byte bound. */
#define KL_PEER_BATCH_MAX_FRAMES 256
#define KL_PEER_DEFAULT_MAX_SKEW_MS 30000 /* hello clocks, authenticated mode */
/* A replication frame carries a batch's entry plus the append message around it: the peer
 * frame limit is the cluster's MaxFrameBytes plus this (daemon/main.c). */
#define KL_REPL_FRAME_OVERHEAD (64u << 10)
/* The replication trace (daemon/repl/trace.h, keyloadd --repl-trace N): it samples at most
 * every KL_TRACE_EVERY_MAX-th log index, and a record keeps per-peer stamps for every other
 * member of a partition. */
#define KL_TRACE_EVERY_MAX 1000000u
#define KL_TRACE_MAX_PEERS (KL_PEER_MAX_PEERS - 1)

/* ---------------------------------------------------------------- relations */
/* Every Raft message a leader streams to one follower in a window fits one batch. */
_Static_assert(KL_PEER_BATCH_MAX_FRAMES >= KL_RAFT_MAX_INFLIGHT, "one batch carries a whole window");
/* A snapshot record's key is a store key; the chunk bound holds the largest record. */
_Static_assert(KL_SNAP_VALUE_MAX >= KL_CLAIMS_TOKEN_MAX, "a snapshot carries every stored value");
_Static_assert(KL_SNAP_CHUNK_BYTES < KL_SNAP_STAGE_FILE_BYTES, "a staged file holds whole chunks");
_Static_assert(KL_SNAP_CHUNK_MAX < (1ull << 32), "chunk lengths are u32");
_Static_assert(KL_SNAPWIRE_WINDOW_BYTES >= 2 * KL_SNAP_CHUNK_BYTES, "the window holds two ordinary chunks");
/* A chunk of ordinary records fits a client frame; one holding a record over about 3 MiB
 * is refused by the stream (INTERNAL "backup_chunk_frame"), never cut. */
_Static_assert(KL_SNAP_CHUNK_BYTES * 2 + KL_SNAP_CONFIG_MAX + KL_BACKUP_ANSWER_OVERHEAD <= KL_RPC_DEFAULT_FRAME_LIMIT,
               "a backup chunk answer fits a client frame");
_Static_assert(KL_BACKUP_IDLE_MS < KL_BACKUP_STREAM_MAX_MS, "the idle close comes first");
_Static_assert(KL_TRANSFER_HOLD_DEFAULT_MS <= KL_TRANSFER_HOLD_MAX_MS, "the default hold is allowed");
/* The default compaction keeps a trailing window below its threshold, so every compaction
 * drops at least threshold - trailing entries (a trailing window at or past the threshold
 * would compact nothing, every round). */
_Static_assert(KL_SNAP_THRESHOLD_MIN <= KL_SNAP_THRESHOLD_DEFAULT &&
                   KL_SNAP_THRESHOLD_DEFAULT <= KL_SNAP_THRESHOLD_MAX, "default threshold in range");
_Static_assert(KL_SNAP_TRAILING_DEFAULT < KL_SNAP_THRESHOLD_DEFAULT, "default trailing window below the threshold");
/* A byte-triggered compaction drops at least KL_SNAP_LOG_BYTES - KL_SNAP_TRAILING_BYTES. */
_Static_assert(KL_SNAP_TRAILING_BYTES < KL_SNAP_LOG_BYTES, "trailing bytes below the byte threshold");
_Static_assert(KL_SNAP_LOG_SAMPLE_BYTES * 64 <= KL_SNAP_TRAILING_BYTES, "samples fine against the window");
/* Every member of a partition fits the Raft configuration, its per-member bitmask (a
 * uint32_t in raft.c) and the peer transport's member table. */
_Static_assert(KL_CLUSTER_MAX_MEMBERS <= KL_RAFT_MAX_MEMBERS, "a partition's members fit the Raft config");
_Static_assert(KL_RAFT_MAX_MEMBERS <= 32, "raft.c keeps one bit per member in a uint32_t");
/* A configuration entry encodes each count in one byte (raft_conf.c). */
_Static_assert(KL_RAFT_MAX_MEMBERS <= 255, "configuration counts fit a byte");
_Static_assert(KL_MEMBER_CONF_BLOB_MAX <= KL_SNAP_CONFIG_MAX,
               "a configuration with its member directory fits a snapshot's configuration");
_Static_assert(KL_RAFT_MAX_CONF_HISTORY >= 3, "a change in flight needs its entry and two predecessors");
_Static_assert(KL_CLUSTER_MAX_MEMBERS <= KL_PEER_MAX_PEERS, "a partition's members fit the peer table");
/* A cluster name (a KL_NAME_MAX buffer with its NUL) fits the session Hello and the peer
 * handshake; the driver and the handshake agree on the bound. */
_Static_assert(KL_SESSION_CLUSTER_MAX == KL_NAME_MAX - 1, "session cluster bound is a cluster name");
_Static_assert(KL_NAME_MAX - 1 <= KL_PEER_MAX_CLUSTER, "a cluster name fits the peer handshake");
_Static_assert(KL_PEER_MAX_CLUSTER == KL_PEER_AUTH_CLUSTER_MAX, "cluster name bound");
/* Every name the daemon accepts fits the SDK's name buffers, and the SDK's key lists hold
 * exactly what a grant may hold. */
_Static_assert(KL_NAME_LEN_MAX <= KL_SDK_NAME_MAX, "valid names fit the SDK's buffers");
_Static_assert(KL_KEY_LIST_MAX == KL_AUTHZ_LIST_MAX, "SDK key list and grant list agree");
/* The default limits pass the cluster file's own check (MaxFrameBytes > MaxBatchBytes), and
 * a frame of the default size is accepted by the RPC and the replication transports. */
_Static_assert(KL_DEFAULT_MAX_FRAME_BYTES > KL_DEFAULT_MAX_BATCH_BYTES, "default frame holds a batch");
_Static_assert(KL_DEFAULT_MAX_FRAME_BYTES <= KL_RPC_DEFAULT_FRAME_LIMIT, "default frame fits the RPC default");
_Static_assert(KL_DEFAULT_MAX_BATCH_BYTES + KL_REPL_FRAME_OVERHEAD <= KL_PEER_DEFAULT_MAX_FRAME,
               "a default batch with its append overhead fits the peer default frame");
/* A snapshot chunk of ordinary records travels in one default replication frame; one
 * holding a large value (up to KL_SNAP_CHUNK_MAX, past any frame) or any chunk over a
 * smaller frame limit goes in pieces (daemon/repl/snapwire.h). */
_Static_assert(KL_SNAP_CHUNK_BYTES + KL_REPL_FRAME_OVERHEAD <= KL_PEER_DEFAULT_MAX_FRAME,
               "an ordinary snapshot chunk fits a default peer frame");
_Static_assert(KL_DEFAULT_MAX_QUERY_READ_BYTES <= KL_DEFAULT_MAX_FRAME_BYTES, "a full read fits a frame");
_Static_assert(KL_CATALOG_LIST_DEFAULT <= KL_CATALOG_LIST_MAX, "the default page is allowed");
_Static_assert(KL_CATALOG_LIST_ANSWER_BYTES * 2 <= KL_DEFAULT_MAX_FRAME_BYTES,
               "a catalog page (with its one record over the bound) fits a default frame");
/* Parked Receives and waiting reads never take every client context: Hello and
 * MemberStatus always find one. */
_Static_assert(KL_PARK_MAX + KL_SERVICE_MAX_READS < KL_CLIENT_RPC_CONTEXTS, "contexts left for batches and Hello");
_Static_assert(KL_RPC_MIN_CONTEXTS <= KL_CLIENT_RPC_CONTEXTS, "the client port opens at least the minimum");
/* Defaults within their ranges; the catalog lease outlives the longest tail it waits on. */
_Static_assert(KL_SESSION_TTL_MIN_MS <= KL_SESSION_TTL_DEFAULT_MS && KL_SESSION_TTL_DEFAULT_MS <= KL_SESSION_TTL_MAX_MS,
               "session TTL default in range");
_Static_assert(KL_CATALOG_LEASE_MIN_MS <= KL_CATALOG_LEASE_DEFAULT_MS, "catalog lease default in range");
_Static_assert(KL_CATALOG_TAIL_WAIT_MS < KL_CATALOG_LEASE_MIN_MS, "a lease outlives one tail's hold");
_Static_assert(KL_CATALOG_TAIL_WAIT_MS <= KL_TAIL_WAIT_MAX_MS, "partition 0 holds a tail as long as asked");
_Static_assert(KL_CONN_SESSIONS_PER_TENANT_DEFAULT <= KL_CONN_SESSIONS_MAX_DEFAULT, "tenant share within the table");
_Static_assert(KL_CONN_SESSIONS_MAX_DEFAULT <= KL_SESSIONS_MAX, "default session table within its maximum");
_Static_assert(KL_SESSIONS_PER_PRINCIPAL <= KL_SESSIONS_MAX, "per-principal sessions within the table");
_Static_assert(KL_LEASE_MS_DEFAULT <= KL_LEASE_MS_MAX, "default lease within the maximum");
_Static_assert(KL_OUTCOME_RETENTION_MIN_MS <= KL_OUTCOME_RETENTION_DEFAULT_MS &&
                   KL_OUTCOME_RETENTION_DEFAULT_MS <= KL_OUTCOME_RETENTION_MAX_MS,
               "outcome retention default in range");
/* The sweep keeps up: one entry deletes at least as many outcomes as it can add. */
_Static_assert(KL_OUTCOME_SWEEP_MAX >= 64, "an entry sweeps at least a full group's outcomes");

/* A scrape answers before a scraper's usual 10 s timeout; a token is at least its minimum. */
_Static_assert(KL_METRICS_RENDER_WAIT_MS < 10000, "a scrape answers within a scraper's timeout");
_Static_assert(KL_METRICS_TOKEN_MIN <= KL_METRICS_TOKEN_MAX, "metrics token bounds");
_Static_assert(KL_SCAN_HINTS_MAX >= 2, "a Receive's two ranges (its lane's and its queue's) fit at once");
_Static_assert(KL_METRICS_QUEUES_MAX >= 1, "at least one queue's series");
_Static_assert(KL_METRICS_SCAN_RECORDS_MAX > KL_METRICS_QUEUES_MAX, "the scan budget reads every capped queue record");

#endif
