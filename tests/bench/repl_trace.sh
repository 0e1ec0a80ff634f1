#!/usr/bin/env bash
# repl_trace.sh: where a replicated write's time goes BETWEEN the members of one partition,
# from the "repl trace" lines of members started with `keyloadd --repl-trace N`
# (daemon/repl/trace.h). The lines are joined on the log index; the stamps are
# CLOCK_MONOTONIC microseconds, so the members must have run on this one host.
#
#   repl_trace.sh LOG...     (or the lines on standard input)
#
# Prints, per leg, the number of sampled indexes and the p50/p90/p99 in microseconds:
#   leader:   propose -> its own write starts, that write (start -> done),
#             propose -> the first append carrying the index leaves;
#   per follower F (the leader's send to F as time zero of F's legs):
#             transit out (leader sent -> F's transport read it), delivery (read -> the core
#             stepped it), queue (step -> F's write starts), write (start -> done),
#             ack out (done -> the acknowledgement left), transit back (ack left -> the
#             leader's transport read it), leader delivery (read -> stepped);
#   commit:   the last of the copies the commit needed (own write done, each follower's
#             acknowledgement stepped) -> commit index, commit -> applied, propose -> applied;
#   server:   per client batch committed at a sampled index (its "batch trace" line): arrived
#             (the leader began handling the request) -> the entry was proposed (evaluation,
#             waiting for the loop and for the group to close), commit -> answered (the
#             leader answers once it learns the commit, before its apply), and arrived ->
#             answered;
#   client:   with keyload-bench's "client trace" lines of one partition among the input
#             (--trace-out, --trace-every), matched to the server's by index and command id:
#             the call's start -> the server began handling it (the request's way there,
#             including the time it waited in the socket for the leader's loop), the server's
#             answer -> its arrival at the client, and the call's whole time;
#   and how often each copy was the last one the commit waited for.
# An index is counted in a leg only when both of its stamps are in the lines. Exit 2 when no
# line has a leader record. Reads its input only.
set -u
# The program is an argument, not standard input, which carries the lines.
prog=$(cat <<'EOF'
import re, sys

pair = re.compile(r'(\w+)=(\d+)')
leader, follower, batches, clients = {}, {}, {}, {}
files = sys.argv[1:] or ['-']
for path in files:
    fh = sys.stdin if path == '-' else open(path, errors='replace')
    for line in fh:
        if line.startswith('client trace '):
            kv = dict(pair.findall(line))
            cmd = re.search(r' cmd=([0-9a-f]+)', line)
            if {'index', 'sent', 'answered'} <= kv.keys() and cmd:
                clients[(int(kv['index']), cmd.group(1))] = {k: int(v) for k, v in kv.items()}
            continue
        if 'msg="batch trace"' in line:
            kv = dict(pair.findall(line.split('msg="batch trace"', 1)[1]))
            cmd = re.search(r' cmd=([0-9a-f]+)', line)
            if {'member', 'index', 'arrived', 'answered'} <= kv.keys():
                b = {k: int(v) for k, v in kv.items()}
                b['cmd'] = cmd.group(1) if cmd else ''
                batches.setdefault(int(kv['index']), []).append(b)
            continue
        if 'msg="repl trace"' not in line:
            continue
        kv = dict(pair.findall(line.split('msg="repl trace"', 1)[1]))
        role = 'leader' if 'role=leader' in line else 'follower'
        if 'index' not in kv or 'member' not in kv:
            continue
        idx, member = int(kv['index']), int(kv['member'])
        rec = {k: int(v) for k, v in kv.items()}
        if role == 'leader':
            leader.setdefault(idx, rec)          # the first line per index counts
        else:
            follower.setdefault((member, idx), rec)

if not leader:
    print('repl trace: no leader record in the input (was keyloadd started with --repl-trace N?)')
    sys.exit(2)

legs = {}
def add(name, a, b):
    if a and b:
        legs.setdefault(name, []).append(b - a)

last_copy = {}
for idx, L in leader.items():
    add('leader: propose -> own write starts', L.get('propose'), L.get('w_start'))
    add('leader: own write (start -> done)', L.get('w_start'), L.get('w_done'))
    sents = [v for k, v in L.items() if k.startswith('sent_')]
    add('leader: propose -> first append leaves', L.get('propose'), min(sents) if sents else None)
    copies = {'own write': L.get('w_done')}
    for k in sorted(L):
        if not k.startswith('sent_'):
            continue
        f = int(k[5:])
        F = follower.get((f, idx), {})
        tag = 'follower %d: ' % f
        add(tag + 'transit out (sent -> read)', L[k], F.get('read'))
        add(tag + 'delivery (read -> stepped)', F.get('read'), F.get('step'))
        add(tag + 'queue (stepped -> write starts)', F.get('step'), F.get('w_start'))
        add(tag + 'write (start -> done)', F.get('w_start'), F.get('w_done'))
        add(tag + 'ack out (done -> ack left)', F.get('w_done'), F.get('ack_sent'))
        add(tag + 'transit back (ack left -> leader read)', F.get('ack_sent'), L.get('ack_read_%d' % f))
        add(tag + 'leader delivery (read -> stepped)', L.get('ack_read_%d' % f), L.get('ack_step_%d' % f))
        add(tag + 'total (sent -> ack stepped)', L[k], L.get('ack_step_%d' % f))
        if L.get('ack_step_%d' % f):
            copies['follower %d' % f] = L['ack_step_%d' % f]
    c = L.get('commit')
    done = {k: v for k, v in copies.items() if v and c and v <= c}
    if done:
        last = max(done, key=done.get)
        last_copy[last] = last_copy.get(last, 0) + 1
        add('commit: last copy needed -> commit', done[last], c)
    add('commit: commit -> applied', c, L.get('applied'))
    add('commit: propose -> applied', L.get('propose'), L.get('applied'))
    for b in batches.get(idx, []):
        if b['member'] != L.get('member'):
            continue  # answered by a member that did not lead this index here
        add('server: arrived -> proposed', b['arrived'], L.get('propose'))
        add('server: commit -> answered', L.get('commit'), b['answered'])
        add('server: arrived -> answered', b['arrived'], b['answered'])
        C = clients.get((idx, b['cmd']))
        if C:
            add('client: call -> server began it', C['sent'], b['arrived'])
            add('client: server answered -> answer arrived', b['answered'], C['answered'])
            add('client: call -> answer arrived', C['sent'], C['answered'])

def pct(v, q):
    return v[min(len(v) - 1, int(len(v) * q))]

width = max(len(k) for k in legs)
print('repl trace: %d sampled indexes led, %d follower records' % (len(leader), len(follower)))
for name in legs:
    v = sorted(legs[name])
    print('repl trace:   %-*s n=%-5d p50=%7d p90=%7d p99=%7d us' % (width, name, len(v), pct(v, 0.5), pct(v, 0.9), pct(v, 0.99)))
total = sum(last_copy.values())
if total:
    print('repl trace:   the copy a commit waited for last: ' +
          ', '.join('%s %d%%' % (k, round(100.0 * n / total)) for k, n in sorted(last_copy.items())))
EOF
)
exec python3 -c "$prog" "$@"
