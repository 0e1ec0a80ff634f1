// pg.mjs: the PostgreSQL outbox side of `make peers` (tests/bench/peers/peers.sh starts the
// private cluster; unix socket in --host, user postgres, trust authentication).
//
//   node pg.mjs setup    --host DIR
//       Creates the outbox schema: transfers (the source's intents), dedup (one row per
//       transfer id at the destination) and messages (the destination queue).
//   node pg.mjs transfer --host DIR --clients N --seconds S [--warmup S] [--body-size B]
//                        [--lat-out FILE]
//       N clients (one connection each), one transfer at a time. A transfer is three
//       commits, each synchronous (synchronous_commit=on, fsync=on): the intent insert; the
//       destination's dedup row (INSERT ... ON CONFLICT DO NOTHING on the transfer id) and,
//       when it was new, the message row, in one transaction; the source's update to
//       delivered. Prints one "pg:" line: transfers/s, p50/p99/max in microseconds, errors.
// Exit code 0 when the run completed (errors are counted), 1 when it could not run.
import pg from "pg";
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";

const args = process.argv.slice(2);
const cmd = args.shift();
const opt = {};
for (let i = 0; i < args.length; i += 2) opt[args[i].replace(/^--/, "")] = args[i + 1];
const conn = { host: opt.host, user: "postgres", database: "postgres" };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function pct(sorted, p) {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.ceil(p / 100 * sorted.length) - 1);
  return sorted[Math.max(0, i)];
}

async function setup() {
  const c = new pg.Client(conn);
  await c.connect();
  await c.query(`CREATE TABLE IF NOT EXISTS transfers (id uuid PRIMARY KEY, source text NOT NULL,
                   dest text NOT NULL, body bytea NOT NULL, state text NOT NULL)`);
  await c.query("CREATE TABLE IF NOT EXISTS dedup (transfer_id uuid PRIMARY KEY)");
  await c.query(`CREATE TABLE IF NOT EXISTS messages (id bigserial PRIMARY KEY, queue text NOT NULL,
                   body bytea NOT NULL, transfer_id uuid NOT NULL)`);
  const s = await c.query("SELECT current_setting('fsync') f, current_setting('synchronous_commit') s");
  if (s.rows[0].f !== "on" || s.rows[0].s !== "on") throw new Error(`fsync=${s.rows[0].f} synchronous_commit=${s.rows[0].s}`);
  await c.end();
}

async function transferOne(c, body) {
  const id = randomUUID();
  await c.query("INSERT INTO transfers (id, source, dest, body, state) VALUES ($1, 'src', 'dst', $2, 'pending')",
                [id, body]);
  await c.query("BEGIN");
  try {
    const r = await c.query("INSERT INTO dedup (transfer_id) VALUES ($1) ON CONFLICT DO NOTHING", [id]);
    if (r.rowCount === 1)
      await c.query("INSERT INTO messages (queue, body, transfer_id) VALUES ('dst', $1, $2)", [body, id]);
    await c.query("COMMIT");
  } catch (e) {
    await c.query("ROLLBACK").catch(() => {});
    throw e;
  }
  const u = await c.query("UPDATE transfers SET state = 'delivered' WHERE id = $1 AND state = 'pending'", [id]);
  if (u.rowCount !== 1) throw new Error(`transfer ${id} was not pending at its update`);
}

async function transfer() {
  const clients = Number(opt.clients || 1);
  const seconds = Number(opt.seconds || 5);
  const warmup = Number(opt.warmup || 1);
  const body = Buffer.alloc(Number(opt["body-size"] || 100), 120);
  const cs = [];
  for (let i = 0; i < clients; i++) {
    const c = new pg.Client(conn);
    await c.connect();
    cs.push(c);
  }
  const lat = [];
  let ok = 0, errors = 0, firstErr = "", measuring = false, stop = false;
  async function worker(c) {
    while (!stop) {
      const s = process.hrtime.bigint();
      try {
        await transferOne(c, body);
        if (measuring) { lat.push(Number(process.hrtime.bigint() - s) / 1e3); ok++; }
      } catch (e) {
        if (measuring) errors++;
        if (!firstErr) firstErr = String(e && e.message || e);
        await sleep(10);
      }
    }
  }
  const ws = cs.map(worker);
  await sleep(warmup * 1000);
  const m0 = process.hrtime.bigint();
  measuring = true;
  await sleep(seconds * 1000);
  measuring = false;
  const secs = Number(process.hrtime.bigint() - m0) / 1e9;
  stop = true;
  await Promise.all(ws);
  await Promise.all(cs.map((c) => c.end()));
  lat.sort((a, b) => a - b);
  if (opt["lat-out"]) writeFileSync(opt["lat-out"], lat.map((v) => v.toFixed(1)).join("\n") + "\n");
  console.log(`pg: clients=${clients} body=${body.length} seconds=${secs.toFixed(2)} transfers=${ok} ` +
              `transfers_per_s=${(ok / secs).toFixed(1)} p50_us=${pct(lat, 50).toFixed(1)} ` +
              `p99_us=${pct(lat, 99).toFixed(1)} max_us=${(lat[lat.length - 1] || 0).toFixed(1)} errors=${errors}`);
  if (firstErr) console.error(`pg: first error: ${firstErr}`);
}

try {
  if (cmd === "setup") await setup();
  else if (cmd === "transfer") await transfer();
  else throw new Error(`unknown command ${cmd}: setup or transfer`);
} catch (e) {
  console.error(`pg: ${cmd}: ${e && e.message || e}`);
  process.exit(1);
}
