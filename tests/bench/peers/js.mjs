// js.mjs: the NATS JetStream side of `make peers` (tests/bench/run.sh starts the servers).
//
//   node js.mjs setup   --servers URL,URL,URL
//       Creates stream BENCH (subjects bench.>, file storage, 3 replicas) if missing.
//   node js.mjs publish --servers URL,URL,URL --in-flight N --seconds S [--warmup S]
//                       [--body-size B] [--pids PID,PID,PID] [--lat-out FILE] [--msg-id 0|1]
//       N publishers, each one acknowledged publish at a time (closed loop, as KeyLoad's
//       bench clients), bodies of B bytes (default 100). Prints one "js:" line: msgs/s,
//       p50/p99/max in microseconds, errors and, with --pids, the user+sys CPU of those
//       processes (/proc/PID/stat, before and after the measured window) per acknowledged
//       message, and the client's own CPU (client_cpu_pct: 100 = one core busy, so the
//       client and not the servers limited the rate). --lat-out writes every measured latency (microseconds, one per line).
//       --msg-id 1 (the default) sends each message with a unique Nats-Msg-Id, so JetStream
//       does the duplicate tracking KeyLoad's command ids get (its window is 2 minutes).
//   node js.mjs source  --servers URL,URL,URL [--timeout-s S]
//       Creates stream COPY sourcing BENCH (asynchronous, no receipt) and times how long it
//       takes to hold every message BENCH holds: one "js_source:" line.
// Exit code 0 when the run completed (errors are counted), 1 when it could not run.
import { connect, StorageType, RetentionPolicy } from "nats";
import { readFileSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";

const args = process.argv.slice(2);
const cmd = args.shift();
const opt = {};
for (let i = 0; i < args.length; i += 2) opt[args[i].replace(/^--/, "")] = args[i + 1];
const servers = (opt.servers || "").split(",").filter(Boolean);
const clkTck = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;

function cpuUs(pids) {  // user+sys of each pid in microseconds (clock-tick resolution)
  let sum = 0;
  for (const p of pids) {
    const s = readFileSync(`/proc/${p}/stat`, "utf8");
    const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
    sum += (Number(f[11]) + Number(f[12])) * 1e6 / clkTck;  // fields 14 and 15 of stat(5)
  }
  return sum;
}
function pct(sorted, p) {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.ceil(p / 100 * sorted.length) - 1);
  return sorted[Math.max(0, i)];
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function setup(nc) {
  const jsm = await nc.jetstreamManager();
  try {
    await jsm.streams.info("BENCH");
  } catch {
    await jsm.streams.add({ name: "BENCH", subjects: ["bench.>"], storage: StorageType.File,
                            num_replicas: 3, retention: RetentionPolicy.Limits });
  }
  // The stream has a leader once an info call answers with one (bounded by the caller).
  for (let i = 0; i < 200; i++) {
    const si = await jsm.streams.info("BENCH");
    if (si.cluster && si.cluster.leader && (si.cluster.replicas || []).length === 2) return;
    await sleep(100);
  }
  throw new Error("stream BENCH has no leader with two replicas after 20 s");
}

async function publish(nc) {
  const js = nc.jetstream();
  const inFlight = Number(opt["in-flight"] || 1);
  const seconds = Number(opt.seconds || 5);
  const warmup = Number(opt.warmup || 1);
  const body = new Uint8Array(Number(opt["body-size"] || 100)).fill(120);
  const pids = (opt.pids || "").split(",").filter(Boolean);
  const msgId = (opt["msg-id"] || "1") !== "0";
  const lat = [];
  let ok = 0, errors = 0, firstErr = "";
  let measuring = false, stop = false;
  const t0 = process.hrtime.bigint();
  async function worker(id) {
    let seq = 0;
    while (!stop) {
      const s = process.hrtime.bigint();
      try {
        const o = msgId ? { msgID: `${process.pid}-${id}-${seq++}-${t0}` } : {};
        await js.publish(`bench.w${id}`, body, o);
        if (measuring) { lat.push(Number(process.hrtime.bigint() - s) / 1e3); ok++; }
      } catch (e) {
        if (measuring) errors++;
        if (!firstErr) firstErr = String(e && e.message || e);
      }
    }
  }
  const ws = [];
  for (let i = 0; i < inFlight; i++) ws.push(worker(i));
  await sleep(warmup * 1000);
  const c0 = pids.length ? cpuUs(pids) : 0;
  const u0 = process.cpuUsage();
  const m0 = process.hrtime.bigint();
  measuring = true;
  await sleep(seconds * 1000);
  measuring = false;
  const m1 = process.hrtime.bigint();
  const c1 = pids.length ? cpuUs(pids) : 0;
  const u1 = process.cpuUsage(u0);
  stop = true;
  await Promise.all(ws);
  const secs = Number(m1 - m0) / 1e9;
  lat.sort((a, b) => a - b);
  if (opt["lat-out"]) writeFileSync(opt["lat-out"], lat.map((v) => v.toFixed(1)).join("\n") + "\n");
  const cpu = pids.length && ok ? ((c1 - c0) / ok).toFixed(1) : "n/a";
  console.log(`js: in_flight=${inFlight} body=${body.length} seconds=${secs.toFixed(2)} msgs=${ok} ` +
              `msgs_per_s=${(ok / secs).toFixed(1)} p50_us=${pct(lat, 50).toFixed(1)} ` +
              `p99_us=${pct(lat, 99).toFixed(1)} max_us=${(lat[lat.length - 1] || 0).toFixed(1)} ` +
              `errors=${errors} cpu_us_per_msg=${cpu} cpu_pids=${pids.length} msg_id=${msgId ? 1 : 0} ` +
              `client_cpu_pct=${((u1.user + u1.system) / 1e4 / secs).toFixed(0)}`);
  if (firstErr) console.error(`js: first error: ${firstErr}`);
}

async function source(nc) {
  const jsm = await nc.jetstreamManager();
  const want = (await jsm.streams.info("BENCH")).state.messages;
  const timeout = Number(opt["timeout-s"] || 60) * 1000;
  const s = Date.now();
  await jsm.streams.add({ name: "COPY", storage: StorageType.File, num_replicas: 3,
                          sources: [{ name: "BENCH" }] });
  let have = 0;
  while (Date.now() - s < timeout) {
    have = (await jsm.streams.info("COPY")).state.messages;
    if (have >= want) break;
    await sleep(20);
  }
  const secs = (Date.now() - s) / 1e3;
  console.log(`js_source: msgs=${want} copied=${have} seconds=${secs.toFixed(2)} ` +
              `msgs_per_s=${(have / secs).toFixed(1)} complete=${have >= want ? 1 : 0}`);
}

let nc;
try {
  nc = await connect({ servers, timeout: 5000, maxReconnectAttempts: 10 });
  if (cmd === "setup") await setup(nc);
  else if (cmd === "publish") await publish(nc);
  else if (cmd === "source") await source(nc);
  else throw new Error(`unknown command ${cmd}: setup, publish or source`);
  await nc.drain();
} catch (e) {
  console.error(`js: ${cmd}: ${e && e.message || e}`);
  if (nc) await nc.close().catch(() => {});
  process.exit(1);
}
