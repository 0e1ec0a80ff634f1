/* log_writer: the one thread that runs a member's synced log writes (driver.h, "the
 * log-persistence worker") and hands each finished write back to the member's libuv loop.
 *
 * Why a thread of its own rather than libuv's shared pool: a log write must never queue
 * behind the pool's other jobs (a compaction's flush, snapshot and backup reads), and one
 * thread doing every write keeps one malloc arena warm for the log family's memtable, where
 * rotating pool threads each grew their own (twice the page faults per message).
 *
 * Owns one thread and one uv_async_t on the loop. Invariants (asserted): at most one job is
 * outstanding, since the loop submits the next only after the previous one's done callback
 * ran, which keeps the writes in submission order and never two at once, whichever thread
 * runs them (kl_log_writer_submit_here); done runs on the loop thread, exactly once per job,
 * unless the writer was stopped first.
 *
 * Thread-safety: every kl_log_writer_* function is called on the loop thread; run(job) is
 * called on the writer thread, or on the loop thread for a job submitted with
 * kl_log_writer_submit_here. */
#ifndef KL_REPL_LOG_WRITER_H
#define KL_REPL_LOG_WRITER_H

#include "common/status.h"

#include <stdbool.h>
#include <uv.h>

typedef struct kl_log_writer kl_log_writer;

typedef void (*kl_log_writer_fn)(void *job);

/* Starts the thread: run(job) on it for each submitted job, then done(job) on the loop.
 * Fails (KL_INTERNAL, "log_writer") when the handle or the thread cannot be made. */
kl_code kl_log_writer_start(uv_loop_t *loop, kl_log_writer_fn run, kl_log_writer_fn done, kl_log_writer **out,
                            kl_err *err);
/* Hands job to the thread. None may be outstanding (kl_log_writer_busy is false). */
void kl_log_writer_submit(kl_log_writer *w, void *job);
/* Runs job on the loop thread itself, in the loop's next poll phase: run(job) then done(job),
 * as the thread would, minus the two thread hand-offs (a wake-up each way, about 20-30 us
 * apiece where the other CPU sleeps). The loop is blocked for the length of run(job), so the
 * caller uses it only where nothing else on the loop should overtake the write anyway and
 * the write is known to be quick. None may be outstanding. */
void kl_log_writer_submit_here(kl_log_writer *w, void *job);
/* A job was submitted and its done callback has not run yet. */
bool kl_log_writer_busy(const kl_log_writer *w);
/* Ends the writer without blocking the loop: the thread finishes the job it runs (a write
 * cannot be abandoned halfway), gets no done callback for it, and exits; then the handle
 * closes, the memory goes and closed(ctx) runs on the loop (closed may be NULL). Accepts
 * NULL. */
void kl_log_writer_stop(kl_log_writer *w, void (*closed)(void *ctx), void *ctx);

#endif
