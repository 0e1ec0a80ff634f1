# Reads the findings' inputs and prints the structure report (tests/structure/check.sh).
# Inputs, each line tagged by its first field:
#   E KIND FROM TO WHY     an edge of the include or call graph (KIND include|call), WHY
#                          the file:line of the #include or the symbol that makes it
#   F LINES FILE:LINE NAME a product function and its length
#   A LINENO PATTERN...    a line of the allowed graph ("A -> B" or "A -> B, C")
#   X LINENO WORDS...      a line of the exceptions file
#   M MODULE               a module (so that allowed-graph patterns can be checked)
#   N TEXT                 a note about the inputs (printed; fatal in strict mode)
# Variables: strict (0|1), maxlen, allowed_src, exceptions_src, print_exceptions (0|1).
# Cycles are the strongly connected components of each graph (Tarjan); each is also
# spelled out as its elementary cycles (at most CAP of them) so a reader sees the loops.

BEGIN { CAP = 12; nerr = 0 }

$1 == "E" {
  k = $2; a = $3; b = $4
  if (!((k, a, b) in edge)) {
    edge[k, a, b] = $5; nwhy[k, a, b] = 1
    outdeg[k, a]++; out[k, a, outdeg[k, a]] = b
    node[k, a] = 1; node[k, b] = 1
    nedges[k]++; allkinds[k] = 1
    ekey[++necount] = k SUBSEP a SUBSEP b
  } else nwhy[k, a, b]++
  next
}
$1 == "F" { nf++; flen[nf] = $2 + 0; fwhere[nf] = $3; fname[nf] = $4; next }
$1 == "M" { if (!($2 in module)) nmod++; module[$2] = 1; next }
$1 == "N" { $1 = ""; sub(/^ /, ""); note[++nnote] = $0; next }
$1 == "A" {
  lineno = $2; $1 = ""; $2 = ""; s = $0; sub(/#.*/, "", s); gsub(/^[ \t]+|[ \t]+$/, "", s)
  if (s == "") next
  if (split(s, lr, /[ \t]*->[ \t]*/) != 2 || lr[1] ~ /[ \t,]/ || lr[1] == "" || lr[2] == "") {
    bad_allowed[++nbad] = allowed_src ":" lineno ": not \"A -> B\": " s; next
  }
  nr = split(lr[2], rhs, /[ \t]*,[ \t]*/)
  for (j = 1; j <= nr; j++) {
    if (rhs[j] ~ /[ \t]/ || rhs[j] == "") { bad_allowed[++nbad] = allowed_src ":" lineno ": not \"A -> B\": " s; continue }
    na++; alw_a[na] = lr[1]; alw_b[na] = rhs[j]; alw_line[na] = lineno
  }
  next
}
$1 == "X" {
  lineno = $2; $1 = ""; $2 = ""; s = $0; sub(/#.*/, "", s); gsub(/^[ \t]+|[ \t]+$/, "", s)
  if (s == "") next
  nx++; xtext[nx] = s; xline[nx] = lineno; xused[nx] = 0
  nw = split(s, w, /[ \t]+/)
  xkind[nx] = w[1]
  if (w[1] == "cycle" && nw >= 4 && (w[2] == "include" || w[2] == "call")) {
    xgraph[nx] = w[2]; for (j = 3; j <= nw; j++) xset[nx, w[j]] = 1
  } else if (w[1] == "long" && nw == 3) {
    xfile[nx] = w[2]; xfunc[nx] = w[3]
  } else if (w[1] == "edge" && nw == 4 && w[3] == "->") {
    xa[nx] = w[2]; xb[nx] = w[4]
  } else { bad_exc[++nbadx] = exceptions_src ":" lineno ": not understood: " s; xkind[nx] = "" }
  next
}

# A pattern names a module, a directory of modules ("engine" covers engine/queue) or a
# shell-style glob ("client/cli/*").
function glob_re(p,   r) {
  r = p; gsub(/[.+?^$(){}|\[\]\\]/, "\\\\&", r); gsub(/\*/, ".*", r); return "^" r "$"
}
function pmatch(m, p) {
  if (m == p || index(m, p "/") == 1) return 1
  return (index(p, "*") > 0 && m ~ glob_re(p))
}
function allowed(a, b,   i) {
  for (i = 1; i <= na; i++) if (pmatch(a, alw_a[i]) && pmatch(b, alw_b[i])) { alw_used[i] = 1; return 1 }
  return 0
}

function tarjan(k, v,   i, w, comp, n, x) {
  idx[v] = low[v] = ++counter; stk[++sp] = v; onstk[v] = 1
  for (i = 1; i <= outdeg[k, v]; i++) {
    w = out[k, v, i]
    if (!(w in idx)) { tarjan(k, w); if (low[w] < low[v]) low[v] = low[w] }
    else if (onstk[w] && idx[w] < low[v]) low[v] = idx[w]
  }
  if (low[v] == idx[v]) {
    n = 0; comp = ""
    do { x = stk[sp--]; onstk[x] = 0; n++; members[n] = x } while (x != v)
    if (n > 1) {
      sortarr(members, n)
      for (i = 1; i <= n; i++) comp = comp (i > 1 ? " " : "") members[i]
      ncomp[k]++; comps[k, ncomp[k]] = comp
    }
  }
}
function sortarr(arr, n,   i, j, t) {
  for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
}
# Elementary cycles through s that visit only members ranked after s (each cycle once).
function cycles_from(k, s, v, path,   i, w) {
  for (i = 1; i <= outdeg[k, v] && ncyc < CAP; i++) {
    w = out[k, v, i]
    if (!(w in inscc)) continue
    if (w == s) { ncyc++; cyc[ncyc] = path " -> " s }
    else if (rank[w] > rank[s] && !onpath[w]) { onpath[w] = 1; cycles_from(k, s, w, path " -> " w); onpath[w] = 0 }
  }
}
function why(k, a, b,   s) {
  s = edge[k, a, b]
  if (nwhy[k, a, b] > 1) s = s " +" (nwhy[k, a, b] - 1) " more"
  return s
}
function cycle_excepted(k, comp,   i, j, n, mem, ok) {
  n = split(comp, mem, " ")
  for (i = 1; i <= nx; i++) {
    if (xkind[i] != "cycle" || xgraph[i] != k) continue
    ok = 1; for (j = 1; j <= n; j++) if (!((i, mem[j]) in xset)) { ok = 0; break }
    if (ok) { xused[i] = 1; return i }
  }
  return 0
}
function excepted_long(file, fn,   i) {
  for (i = 1; i <= nx; i++) if (xkind[i] == "long" && xfile[i] == file && xfunc[i] == fn) { xused[i] = 1; return i }
  return 0
}
function excepted_edge(a, b,   i) {
  for (i = 1; i <= nx; i++) if (xkind[i] == "edge" && xa[i] == a && xb[i] == b) { xused[i] = 1; return i }
  return 0
}
function verdict(x) { if (x) return "  [excepted: " exceptions_src ":" xline[x] "]"; return "" }

function report_cycles(k,   c, comp, n, mem, i, j, a, b, x, title) {
  delete idx; delete low; delete onstk; counter = 0; sp = 0
  for (i = 1; i <= necount; i++) { split(ekey[i], p, SUBSEP); if (p[1] == k && !(p[2] in idx)) tarjan(k, p[2]) }
  title = (k == "include") ? "include cycles (#include between modules)" : "call cycles (nm: undefined -> defining module)"
  printf "\n== %s: %d ==\n", title, ncomp[k] + 0
  for (c = 1; c <= ncomp[k]; c++) {
    comp = comps[k, c]; x = cycle_excepted(k, comp)
    if (!x) { fail[k]++; newexc[++nnew] = "cycle " k " " comp }
    printf "cycle %s {%s}%s\n", k, comp, verdict(x)
    n = split(comp, mem, " "); delete inscc; delete rank
    for (i = 1; i <= n; i++) { inscc[mem[i]] = 1; rank[mem[i]] = i }
    for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) {
      a = mem[i]; b = mem[j]
      if ((k, a, b) in edge) printf "    %s -> %s  (%s)\n", a, b, why(k, a, b)
    }
    ncyc = 0; delete onpath
    for (i = 1; i <= n && ncyc < CAP; i++) cycles_from(k, mem[i], mem[i], mem[i])
    for (i = 1; i <= ncyc; i++) printf "    loop: %s\n", cyc[i]
    if (ncyc >= CAP) printf "    (more loops not shown)\n"
  }
}

END {
  for (i = 1; i <= nnote; i++) printf "note: %s\n", note[i]
  if (strict && nnote) nerr++

  report_cycles("include")
  report_cycles("call")

  nlong = 0
  for (i = 1; i <= nf; i++) if (flen[i] > maxlen) order[++nlong] = i
  for (i = 2; i <= nlong; i++) { t = order[i]; for (j = i - 1; j >= 1 && flen[order[j]] < flen[t]; j--) order[j + 1] = order[j]; order[j + 1] = t }
  printf "\n== functions over %d lines (brace scanner, header line to closing brace): %d ==\n", maxlen, nlong
  for (i = 1; i <= nlong; i++) {
    f = order[i]; file = fwhere[f]; sub(/:[0-9]+$/, "", file)
    x = excepted_long(file, fname[f])
    if (!x) { fail["long"]++; newexc[++nnew] = "long " file " " fname[f] }
    printf "%4d %s %s%s\n", flen[f], fwhere[f], fname[f], verdict(x)
  }

  printf "\n== edges outside the allowed graph (%s, %d edges): ==\n", allowed_src, na
  for (i = 1; i <= nbad; i++) { printf "bad line: %s\n", bad_allowed[i]; fail["allowed"]++ }
  nout = 0
  for (i = 1; i <= necount; i++) {
    split(ekey[i], p, SUBSEP); a = p[2]; b = p[3]
    if (seen_pair[a, b]++) continue
    if (allowed(a, b)) continue
    kinds = ""; for (k in allkinds) if ((k, a, b) in edge) kinds = kinds (kinds == "" ? "" : ", ") k ": " why(k, a, b)
    x = excepted_edge(a, b)
    if (!x) { fail["edge"]++; newexc[++nnew] = "edge " a " -> " b }
    printf "edge %s -> %s  (%s)%s\n", a, b, kinds, verdict(x); nout++
  }
  for (i = 1; i <= na; i++) {
    hit_a = hit_b = 0
    for (m in module) { if (pmatch(m, alw_a[i])) hit_a = 1; if (pmatch(m, alw_b[i])) hit_b = 1 }
    if (!hit_a || !hit_b) printf "warning: %s:%d: %s -> %s names no module%s\n", allowed_src, alw_line[i], alw_a[i], alw_b[i], (!hit_a ? " (left)" : " (right)")
  }

  printf "\n== exceptions (%s, %d) ==\n", exceptions_src, nx
  for (i = 1; i <= nbadx; i++) { printf "bad line: %s\n", bad_exc[i]; fail["exceptions"]++ }
  for (i = 1; i <= nx; i++) if (xkind[i] != "" && !xused[i]) {
    printf "stale: %s:%d: %s (nothing matches it any more: delete the line)\n", exceptions_src, xline[i], xtext[i]
    fail["exceptions"]++
  }

  if (print_exceptions) {
    printf "\n== exceptions that would cover every new finding ==\n"
    for (i = 1; i <= nnew; i++) print newexc[i]
  }

  checks = "include call long edge allowed exceptions"; nchk = split(checks, ck, " ")
  passed = 0; failed = 0; summary = ""
  for (i = 1; i <= nchk; i++) {
    if (fail[ck[i]] > 0) { failed++; summary = summary " " ck[i] "=" fail[ck[i]] } else passed++
  }
  printf "\nstructure: %d include edges, %d call edges, %d functions, %d modules\n", nedges["include"], nedges["call"], nf, nmod
  if (strict) {
    if (nerr) { failed++; summary = summary " notes=" nnote }
    if (failed) printf "structure: FAILED (new findings:%s)\n", summary
    else printf "structure: clean apart from the listed exceptions\n"
    printf "%d passed, %d failed\n", passed, failed
    exit failed > 0
  }
  printf "structure: report mode (exit 0); strict would fail on:%s\n", summary == "" ? " nothing" : summary
}
