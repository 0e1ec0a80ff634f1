# Brace scanner: prints "LINES FILE:LINE NAME" for every function body at file scope.
# Comments, string and character literals and preprocessor lines are skipped, so braces
# inside them do not count. A function is a top-level "{" whose header (the text since
# the previous top-level ";" or "}") ends with ")" and holds no "=" (an initializer).
# A function's lines run from the first line of its header to its closing brace.
FNR == 1 { depth = 0; incomment = 0; hdr = ""; hdrline = 0; infunc = 0; cont = 0 }
{
  line = $0
  if (cont) { cont = (line ~ /\\$/); next }
  if (!incomment && line ~ /^[ \t]*#/) { cont = (line ~ /\\$/); next }
  n = length(line); i = 1
  while (i <= n) {
    c = substr(line, i, 1)
    if (incomment) {
      if (c == "*" && substr(line, i + 1, 1) == "/") { incomment = 0; i += 2; continue }
      i++; continue
    }
    if (c == "/" && substr(line, i + 1, 1) == "*") { incomment = 1; i += 2; continue }
    if (c == "/" && substr(line, i + 1, 1) == "/") break
    if (c == "\"" || c == "'") {
      q = c; i++
      while (i <= n) {
        d = substr(line, i, 1)
        if (d == "\\") { i += 2; continue }
        i++
        if (d == q) break
      }
      if (depth == 0) hdr = hdr q q
      continue
    }
    if (c == "{") {
      if (depth == 0) {
        h = hdr; gsub(/[ \t]+/, " ", h); sub(/ +$/, "", h)
        if (h ~ /\)$/ && h !~ /=/) {
          infunc = 1; fstart = hdrline ? hdrline : FNR
          g = h; gsub(/__attribute__ *\(\(([^()]|\([^()]*\))*\)\)/, "", g)
          name = g; sub(/\(.*/, "", name); sub(/.*[^A-Za-z0-9_]/, "", name)
        } else infunc = 0
      }
      depth++; i++; continue
    }
    if (c == "}") {
      depth--; i++
      if (depth == 0) {
        if (infunc) print FNR - fstart + 1, FILENAME ":" fstart, name
        infunc = 0; hdr = ""; hdrline = 0
      }
      continue
    }
    if (depth == 0) {
      if (c == ";") { hdr = ""; hdrline = 0; i++; continue }
      if (c !~ /[ \t]/ && hdrline == 0) hdrline = FNR
      hdr = hdr c
    }
    i++
  }
  if (depth == 0 && hdr != "") hdr = hdr " "
}
