// lib: what the MCP tests share: pass/fail counting with cli.sh's output shape ("ok   X",
// "FAIL X", a closing "N passed, N failed" that tests/support/test-all.sh sums), bounded
// child processes, and a real RF3 cluster started by deploy/keyload-cluster from a cluster
// file on free ports under var/, stopped by pid (the launcher's pid files), never by name.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const bin = (name) => path.join(root, 'bin', name);

let passed = 0;
let failed = 0;
export function check(name, cond, detail) {
  if (cond) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(`FAIL ${name}${detail === undefined ? '' : `: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`}`);
  }
  return !!cond;
}
export function summary() {
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 && passed > 0;
}

// Runs a program (no shell) with a timeout; resolves {code, stdout, stderr}, never rejects.
export function run(file, args, { env, timeoutMs = 60000, input } = {}) {
  return new Promise((resolve) => {
    const child = execFile(file, args, { cwd: root, env: { ...process.env, ...env }, timeout: timeoutMs,
      killSignal: 'SIGKILL', maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr,
        ...(error && typeof error.code !== 'number' ? { error: `${error.code ?? ''} ${error.signal ?? ''} ${error.message}` } : {}) });
    });
    // A program that exits before reading its input must not crash the test (EPIPE).
    child.stdin.on('error', () => {});
    if (input !== undefined) child.stdin.end(input);
  });
}

function portFree(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

// 18 consecutive free ports (9 client, 9 peer) in 16000-16899: below Linux's ephemeral range
// (32768+), where any process's outgoing connection may hold a port a member then fails to
// bind (other suites own other ranges: README, "Tests and their budgets"); starting at a
// block chosen from the pid so parallel runs rarely collide. (34000-34899, used before, made a
// cold restart fail "Address in use" while the members were down.)
async function freeBlock() {
  for (let i = 0; i < 50; i++) {
    const base = 16000 + ((process.pid + i) % 50) * 18;
    let ok = true;
    for (let p = base; ok && p < base + 18; p++) ok = await portFree(p);
    if (ok) return base;
  }
  throw new Error('no block of 18 free ports in 16000-16899');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// An RF3 cluster (3 partitions x 3 members, deploy/local-rf3.json's layout) of its own name.
export class Cluster {
  constructor() {
    this.name = `mcptest${process.pid}`;
    this.cfg = path.join(root, 'var', `mcp-${process.pid}.json`);
    this.var = path.join(root, 'var', this.name);
    this.keyed = path.join(this.var, 'cluster.json');
    fs.mkdirSync(path.join(root, 'var'), { recursive: true });
    this.keys = fs.mkdtempSync(path.join(root, 'var', 'mcp-keys-'));
    fs.chmodSync(this.keys, 0o700);
  }

  launcher(...args) {
    return run(path.join(root, 'deploy/keyload-cluster'), ['--config', this.cfg, ...args], { timeoutMs: 120000 });
  }

  async up() {
    const base = await freeBlock();
    const tmpl = JSON.parse(fs.readFileSync(path.join(root, 'deploy/local-rf3.json'), 'utf8'));
    tmpl.cluster = this.name;
    tmpl.partitions.forEach((p, pi) => p.members.forEach((m, mi) => {
      m.client = `tcp://127.0.0.1:${base + pi * 3 + mi}`;
      m.peer = `tcp://127.0.0.1:${base + 9 + pi * 3 + mi}`;
    }));
    fs.mkdirSync(path.dirname(this.cfg), { recursive: true });
    fs.writeFileSync(this.cfg, JSON.stringify(tmpl));
    const r = await this.launcher('up');
    if (r.code !== 0) throw new Error(`keyload-cluster up failed: ${r.stderr}`);
    await this.ready();
  }

  // Every partition with a leader and every member answering (at most 30 s).
  async ready() {
    for (let i = 0; i < 120; i++) {
      const st = await this.launcher('status', '--json');
      try {
        const j = JSON.parse(st.stdout);
        if (j.partitions.length === 3 && j.partitions.every((p) => p.leader !== null && p.members.every((m) => m.up)))
          return;
      } catch { /* not yet */ }
      await sleep(250);
    }
    throw new Error('the cluster did not elect a leader in every partition within 30 s');
  }

  // `keyload-cluster restart --cold`: every member stopped (by pid file), then every member
  // started again from its store; resolves once every partition has a leader again.
  async restartCold() {
    const r = await this.launcher('restart', '--cold');
    if (r.code !== 0) throw new Error(`keyload-cluster restart --cold failed: ${r.stderr}`);
    await this.ready();
  }

  // keyloadd keygen: a new principal key file (0600) and its public key (base64).
  async keygen(file) {
    const p = path.join(this.keys, file);
    const g = await run(bin('keyloadd'), ['keygen', '--secret-out', p]);
    if (g.code !== 0) throw new Error(`keygen: ${g.stderr}`);
    const pub = await run(bin('keyloadd'), ['keygen', '--public-of', p]);
    return { file: p, pub: pub.stdout.trim() };
  }

  // SIGTERM every member by its pid file through the launcher, then SIGKILL any pid still
  // there; removes the cluster's files. Safe to call twice.
  async down() {
    if (this.done) return;
    this.done = true;
    if (fs.existsSync(this.cfg)) await this.launcher('down');
    if (fs.existsSync(this.var)) {
      for (const f of fs.readdirSync(this.var).filter((f) => f.endsWith('.pid'))) {
        const pid = Number(fs.readFileSync(path.join(this.var, f), 'utf8'));
        if (pid > 0) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
      }
    }
    fs.rmSync(this.var, { recursive: true, force: true });
    fs.rmSync(this.cfg, { force: true });
    fs.rmSync(this.keys, { recursive: true, force: true });
  }
}
