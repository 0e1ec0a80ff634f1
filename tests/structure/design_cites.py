#!/usr/bin/env python3
"""Citations of the original design in product code, and their rewrite.

Product code cited `DESIGN.md §N`, a file that is not in this repository. The repository's
own description is docs/ARCHITECTURE.md; this script moves every citation onto it, and
checks that none comes back.

  design_cites.py [--root DIR] [--list]   list every DESIGN.md citation (file:line, the
                                          citation, the section it maps to and why)
  design_cites.py [--root DIR] --rewrite  rewrite each citation inside a comment into
                                          ARCHITECTURE.md "<Section>", in place
  design_cites.py [--root DIR] --check    exit 1 when a product file mentions DESIGN.md
                                          anywhere, or an issue id (KL-<n>) in a comment

Product code: daemon/ common/ client/ coordinator/ proto/ deploy/ and the Makefile
(tracked files when DIR is a git work tree, else every file but generated *.pb-c.*).

Only comments are rewritten: a citation in a string literal or in code would change
behaviour, so it is reported and left alone (none exist today). The rewrite touches
nothing but the citation text: the comment leader of a citation that wraps over two lines
stays where it was, so the diff of a rewrite shows only comment changes.

Mapping: each DESIGN.md section maps to one ARCHITECTURE.md section (SECTION_MAP). A few
citations sit in a section of DESIGN.md that ARCHITECTURE.md splits in two (§3: write and
read paths, store; §5: catalog, authorization, keys, sessions); for those the words of the
cited line pick the section (CONTEXT_RULES, first match wins). A quoted DESIGN.md
subsection name ("Sessions", "Keys") is replaced with the rest of the citation
(SUBSECTION_MAP); any other quotation after a citation is kept as written. EXACT_MAP
rewrites a few whole citations whose words would otherwise read badly.
Stdlib only; no third-party module.
"""
import argparse
import os
import re
import subprocess
import sys

ARCH = "ARCHITECTURE.md"

# The sections of docs/ARCHITECTURE.md (others cite them by name; keep in step).
SECTIONS = (
    "Processes", "Layers and dependencies", "Write path", "Read path", "Replication",
    "Store layout", "Engine", "Sessions and RPC", "Coordinator", "Metrics", "Invariants", "Seed rules",
    "Limits",
)

# DESIGN.md section -> ARCHITECTURE.md section. DESIGN.md's sections: 1 what the system is,
# 2 processes and folders, 3 the partition daemon, 4 replication, 5 catalog, identity, keys
# and authorization, 6 queues, 7 remote transfers, 8 the coordinator, 9 errors, 10 the
# user-facing contract, 11 failpoints, 12 test budget.
SECTION_MAP = {
    "1": "Processes",
    "2": "Processes",
    "3": "Write path",
    "4": "Replication",
    "5": "Engine",
    "6": "Engine",
    "7": "Engine",
    "8": "Coordinator",
    "9": "Sessions and RPC",
    "10": "Processes",
    "11": "Processes",
    "12": "Processes",
}

# (DESIGN.md section, quoted subsection) -> ARCHITECTURE.md section; the quote is consumed.
SUBSECTION_MAP = {
    ("5", "Sessions"): "Sessions and RPC",
    ("5", "Keys"): "Processes",
}

# (DESIGN.md section, regex on the cited line) -> ARCHITECTURE.md section, first match wins.
CONTEXT_RULES = (
    ("3", r"[Rr]ead[- ]index|read barrier|fresh read|[Rr]eads \(", "Read path"),
    ("3", r"WAL|transfers paused|[Ff]eature", "Store layout"),
    ("3", r"one replica of one partition", "Processes"),
    ("5", r"[Ss]ession|Hello|sealed|Replication links|Two modes, fixed at start", "Sessions and RPC"),
    ("5", r"[Tt]ail|lease|copied into every data partition", "Replication"),
    ("5", r"cluster secret|signing key|keygen|key pair|Keys \(", "Processes"),
    ("10", r"command line", "Sessions and RPC"),
)

# Whole citations (as written, line breaks included) whose rewrite is written out here.
EXACT_MAP = {
    'DESIGN.md §3 write path': 'ARCHITECTURE.md "Write path"',
    'DESIGN.md §3 step 3': 'ARCHITECTURE.md "Write path" step 7',
    'DESIGN.md §1 "official MCP client route", §10': 'ARCHITECTURE.md "Processes"',
    'DESIGN.md §3-4': 'ARCHITECTURE.md "Replication"',
    "DESIGN.md §7's order": 'the order in ARCHITECTURE.md "Engine"',
}

# A bare DESIGN.md (no section) -> this section, chosen by the cited line.
BARE_RULES = (
    (r"[Pp]ermission", "Engine"),
)
BARE_DEFAULT = "Processes"

PRODUCT_DIRS = ("daemon", "common", "client", "coordinator", "proto", "deploy")
PRODUCT_FILES = ("Makefile",)

# A line break inside a comment: the newline and the next line's comment leader (" * ",
# "// ", "# "). A rewrite keeps it where it was.
_WRAP = r'(?:[ \t]*\n[ \t]*(?:\*|//|#)?)?[ \t]*'
# One section reference: §N, §N.M, §N-M, optionally followed (maybe on the next comment
# line) by a quoted name. Groups: 1 section, 2 subsection, 3 range end, 4 the text between
# the reference and the quote, 5 the quoted words.
_REF = r'§(\d+)(?:\.(\d+))?(?:-(\d+))?(?:(' + _WRAP + r')"([^"\n]*)")?'
# DESIGN.md, then optionally (possibly on the next comment line) a list of references.
# The separator may hold a line break plus the next line's comment leader (" * ", "// ",
# "# "), which the rewrite keeps.
CITE = re.compile(
    r'DESIGN\.md'
    r'(?P<sep>' + _WRAP + r')'
    r'(?P<refs>' + _REF + r'(?:[ \t]*,[ \t]*' + _REF + r')*)?'
)
REF = re.compile(_REF)
ISSUE = re.compile(r'\bKL-[0-9]+\b')
WIDE = 110  # a rewritten comment line longer than this is reported (never reflowed)


def product_files(root):
    """Relative paths of the product files under root, sorted."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", *PRODUCT_DIRS, *PRODUCT_FILES],
                             check=True, capture_output=True).stdout
        paths = [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = []
    if not paths:  # not a git work tree (e.g. an exported copy): every file
        for d in PRODUCT_DIRS:
            for dirpath, _, names in os.walk(os.path.join(root, d)):
                for n in names:
                    paths.append(os.path.relpath(os.path.join(dirpath, n), root))
        paths += [f for f in PRODUCT_FILES if os.path.exists(os.path.join(root, f))]
    keep = []
    for p in sorted(set(paths)):
        if ".pb-c." in p or not os.path.isfile(os.path.join(root, p)):
            continue
        try:
            with open(os.path.join(root, p), "rb") as f:
                if b"\0" in f.read(8192):
                    continue  # binary
        except OSError:
            continue
        keep.append(p)
    return keep


def language(path):
    base = os.path.basename(path)
    if base.endswith((".c", ".h", ".proto", ".js", ".mjs", ".ts")):
        return "c"
    if base.endswith(".json"):
        return "none"
    return "hash"  # Makefile, shell scripts, deploy/keyload-cluster


def comment_spans(text, lang):
    """[start, end) offsets of every comment in text."""
    spans = []
    i, n = 0, len(text)
    if lang == "none":
        return spans
    if lang == "c":
        while i < n:
            c = text[i]
            if c == '"' or c == "'":
                j = i + 1
                while j < n and text[j] != c and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                i = j + 1
            elif text.startswith("//", i):
                j = text.find("\n", i)
                j = n if j < 0 else j
                spans.append((i, j))
                i = j
            elif text.startswith("/*", i):
                j = text.find("*/", i + 2)
                j = n if j < 0 else j + 2
                spans.append((i, j))
                i = j
            else:
                i += 1
        return spans
    # '#' comments (shell, make): outside quotes, at a line start or after a blank.
    for m in re.finditer(r"[^\n]*", text):
        line, base = m.group(0), m.start()
        quote = None
        for k, c in enumerate(line):
            if quote:
                if c == "\\" and quote == '"':
                    continue
                if c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif c == "#" and (k == 0 or line[k - 1] in " \t;") and not line.startswith("#!"):
                spans.append((base + k, base + len(line)))
                break
            elif c == "#" and k == 0 and line.startswith("#!"):
                break
    return spans


def in_spans(spans, start, end):
    return any(a <= start and end <= b for a, b in spans)


def line_of(text, pos):
    s = text.rfind("\n", 0, pos) + 1
    e = text.find("\n", pos)
    return text[s:] if e < 0 else text[s:e]


def map_section(num, quote, line):
    """(ARCHITECTURE.md section, whether the quote is consumed, why)."""
    if quote is not None and (num, quote) in SUBSECTION_MAP:
        return SUBSECTION_MAP[(num, quote)], True, 'subsection "%s"' % quote
    for sec, rx, target in CONTEXT_RULES:
        if sec == num and re.search(rx, line):
            return target, False, "context /%s/" % rx
    if num not in SECTION_MAP:
        return None, False, "no mapping for §%s" % num
    return SECTION_MAP[num], False, "§%s" % num


def find_citations(text):
    """(start, end, original, replacement or None, reasons) for every citation in text."""
    found = []
    for m in CITE.finditer(text):
        line = line_of(text, m.start())
        exact = next((k for k in EXACT_MAP if text.startswith(k, m.start())), None)
        if exact is not None:
            end = m.start() + len(exact)
            found.append((m.start(), end, exact, EXACT_MAP[exact], ["exact"]))
            continue
        new, why = rewrite_one(m, line)
        found.append((m.start(), m.end(), m.group(0), new, why))
    return found


def rewrite_one(m, line):
    """(replacement text, reasons) for one CITE match; replacement None when unmapped."""
    sep, refs = m.group("sep"), m.group("refs")
    if not refs:
        for rx, target in BARE_RULES:
            if re.search(rx, line):
                return '%s "%s"%s' % (ARCH, target, sep), ["bare, context /%s/" % rx]
        return '%s "%s"%s' % (ARCH, BARE_DEFAULT, sep), ["bare"]
    names, reasons, tail = [], [], ""
    for r in REF.finditer(refs):
        first, last, qsep, quote = r.group(1), r.group(3), r.group(4), r.group(5)
        nums = [first] if last is None else [str(k) for k in range(int(first), int(last) + 1)]
        for k, num in enumerate(nums):
            target, consumed, why = map_section(num, quote if k == 0 else None, line)
            if target is None:
                return None, [why]
            if consumed and "\n" in qsep:
                # The quoted name sat on the next comment line: the new name goes there.
                sep = qsep
            if target not in names:
                names.append(target)
            reasons.append(why)
            if quote is not None and not consumed and k == 0:
                tail += '%s"%s"' % (qsep, quote)  # an ordinary quotation stays as written
    cited = ", ".join('"%s"' % s for s in names)
    return "%s%s%s%s" % (ARCH, sep, cited, tail), reasons


def scan(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="surrogateescape") as f:
        text = f.read()
    return text, comment_spans(text, language(path))


def cmd_list(root, files):
    total = 0
    for p in files:
        text, spans = scan(root, p)
        for start, end, old, new, why in find_citations(text):
            where = "comment" if in_spans(spans, start, end) else "NOT IN A COMMENT"
            lineno = text.count("\n", 0, start) + 1
            print("%s:%d: %s -> %s (%s; %s)" % (p, lineno, " ".join(old.split()),
                                              " ".join(new.split()) if new else "UNMAPPED",
                                              ", ".join(why), where))
            total += 1
    print("%d citation(s) of DESIGN.md in %d product file(s) scanned" % (total, len(files)))
    return 0


def cmd_rewrite(root, files):
    changed, done, refused = 0, 0, []
    for p in files:
        text, spans = scan(root, p)
        out, last = [], 0
        for start, end, old, new, why in find_citations(text):
            lineno = text.count("\n", 0, start) + 1
            if not in_spans(spans, start, end):
                refused.append("%s:%d: not in a comment, left alone" % (p, lineno))
                continue
            if new is None:
                refused.append("%s:%d: %s" % (p, lineno, "; ".join(why)))
                continue
            out.append(text[last:start])
            out.append(new)
            last = end
            done += 1
        if last == 0:
            continue
        out.append(text[last:])
        new_text = "".join(out)
        with open(os.path.join(root, p), "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(new_text)
        changed += 1
        for k, l in enumerate(new_text.split("\n"), 1):
            if ARCH in l and len(l) > WIDE and len(l) > len(text.split("\n")[k - 1]):
                print("%s:%d: now %d columns (reflow by hand if wanted)" % (p, k, len(l)))
    for r in refused:
        print(r, file=sys.stderr)
    print("rewrote %d citation(s) in %d file(s)" % (done, changed))
    return 1 if refused else 0


def cmd_check(root, files):
    bad = 0
    for p in files:
        text, spans = scan(root, p)
        for m in re.finditer(r"DESIGN\.md", text):
            print("%s:%d: cites DESIGN.md (not in this repository; cite docs/ARCHITECTURE.md)"
                  % (p, text.count("\n", 0, m.start()) + 1))
            bad += 1
        for a, b in spans:
            for m in ISSUE.finditer(text, a, b):
                print("%s:%d: comment mentions issue %s (say why, not which issue)"
                      % (p, text.count("\n", 0, m.start()) + 1, m.group(0)))
                bad += 1
    print("%d finding(s) in %d product file(s)" % (bad, len(files)))
    return 1 if bad else 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."),
                    help="repository root (default: this script's repository)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="list every citation (default)")
    mode.add_argument("--rewrite", action="store_true", help="rewrite the citations in place")
    mode.add_argument("--check", action="store_true", help="exit 1 on any citation or issue id in a comment")
    a = ap.parse_args(argv)
    root = os.path.abspath(a.root)
    files = product_files(root)
    if a.rewrite:
        return cmd_rewrite(root, files)
    if a.check:
        return cmd_check(root, files)
    return cmd_list(root, files)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
