#!/usr/bin/env python3
"""Tests of design_cites.py on a small made-up tree: every spelling of a citation that
occurs in the product code, the comment/string distinction, and --check's exit codes.

Run: python3 tests/structure/test_design_cites.py"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "design_cites.py")

FILES = {
    "daemon/a.h": (
        "/* a: one replica of one partition (DESIGN.md §3).\n"
        " * Reads pass the read-index barrier first (DESIGN.md §3): applied state only.\n"
        " * Who asks (DESIGN.md §5): the stored record. */\n"
        "#define A_MAX 3 /* a limit (DESIGN.md §9) */\n"
        "/* grants[] ({database, permission (DESIGN.md name), queue_pattern}) */\n"
    ),
    "daemon/b.c": (
        "/* b: the table (DESIGN.md §5\n"
        " * \"Sessions\"). Pure. */\n"
        "/* c: the list (DESIGN.md\n"
        " * §5, §10). Every change. */\n"
        "/* d: the range (DESIGN.md §3-4, KL-2). */\n"
        "/* e: DESIGN.md §7's order: caller first. */\n"
        "/* f: evaluator (DESIGN.md §3 step 3). Layers */\n"
        "/* g: names (Permission as in DESIGN.md:\n"
        " * QueuePublish). */\n"
        "static const char *s = \"see DESIGN.md §5 and KL-4\"; // KL-7 in a line comment\n"
        "int x = 1; /* KL-123 */\n"
    ),
    "common/k.h": "/* k: keys (DESIGN.md §5 \"Keys\"), derived. */\nint k;\n",
    "proto/p.proto": "// Wire envelope (DESIGN.md §9).\nmessage P {}\n",
    "deploy/run": "#!/bin/sh\n# Keys (DESIGN.md §5): created once.\necho \"# not a comment KL-9\"\n",
    "Makefile": "# the peers (DESIGN.md §2)\nall:\n\techo ok\n",
    "tests/t.c": "/* tests are not product code: DESIGN.md §1, KL-1 */\n",
}


def run(root, *args):
    return subprocess.run([sys.executable, SCRIPT, "--root", root, *args], capture_output=True, text=True)


class DesignCites(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        for path, text in FILES.items():
            full = os.path.join(self.root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(text)

    def tearDown(self):
        self.tmp.cleanup()

    def read(self, path):
        with open(os.path.join(self.root, path), encoding="utf-8") as f:
            return f.read()

    def test_list_finds_every_citation(self):
        r = run(self.root, "--list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("16 citation(s) of DESIGN.md", r.stdout)
        self.assertIn("daemon/b.c:10: DESIGN.md §5 -> ", r.stdout)
        self.assertIn("NOT IN A COMMENT", r.stdout)
        self.assertNotIn("tests/t.c", r.stdout)

    def test_rewrite_spellings(self):
        r = run(self.root, "--rewrite")
        # The citation inside a string literal is refused, so the rewrite says so.
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("daemon/b.c:10: not in a comment", r.stderr)
        a = self.read("daemon/a.h")
        self.assertIn('(ARCHITECTURE.md "Processes").', a)
        self.assertIn('barrier first (ARCHITECTURE.md "Read path")', a)
        self.assertIn('Who asks (ARCHITECTURE.md "Engine")', a)
        self.assertIn('a limit (ARCHITECTURE.md "Sessions and RPC")', a)
        self.assertIn('permission (ARCHITECTURE.md "Engine" name), queue', a)
        b = self.read("daemon/b.c")
        self.assertIn('(ARCHITECTURE.md\n * "Sessions and RPC"). Pure.', b)
        self.assertIn('(ARCHITECTURE.md\n * "Engine", "Processes"). Every', b)
        self.assertIn('(ARCHITECTURE.md "Replication", KL-2)', b)
        self.assertIn('the order in ARCHITECTURE.md "Engine": caller', b)
        self.assertIn('(ARCHITECTURE.md "Write path" step 7). Layers', b)
        self.assertIn('Permission as in ARCHITECTURE.md "Engine":\n', b)
        self.assertIn('"see DESIGN.md §5 and KL-4"', b)  # code is never rewritten
        self.assertIn('(ARCHITECTURE.md "Processes"), derived', self.read("common/k.h"))
        self.assertIn('// Wire envelope (ARCHITECTURE.md "Sessions and RPC").', self.read("proto/p.proto"))
        self.assertIn('# Keys (ARCHITECTURE.md "Processes"): created', self.read("deploy/run"))
        self.assertIn('# the peers (ARCHITECTURE.md "Processes")', self.read("Makefile"))
        self.assertEqual(self.read("tests/t.c"), FILES["tests/t.c"])
        for path, text in FILES.items():
            self.assertEqual(self.read(path).count("\n"), text.count("\n"), path)

    def test_rewrite_is_idempotent(self):
        run(self.root, "--rewrite")
        once = {p: self.read(p) for p in FILES}
        run(self.root, "--rewrite")
        self.assertEqual(once, {p: self.read(p) for p in FILES})

    def test_check(self):
        r = run(self.root, "--check")
        self.assertEqual(r.returncode, 1)
        self.assertIn("daemon/a.h:1: cites DESIGN.md", r.stdout)
        self.assertIn("daemon/b.c:5: comment mentions issue KL-2", r.stdout)
        self.assertIn("daemon/b.c:10: comment mentions issue KL-7", r.stdout)
        self.assertIn("daemon/b.c:11: comment mentions issue KL-123", r.stdout)
        self.assertNotIn("KL-4", r.stdout)  # in a string: not a comment
        self.assertNotIn("KL-9", r.stdout)  # inside quotes in a shell script
        self.assertNotIn("tests/t.c", r.stdout)

    def test_check_passes_on_a_clean_tree(self):
        for path in FILES:
            with open(os.path.join(self.root, path), "w", encoding="utf-8") as f:
                f.write("/* see ARCHITECTURE.md \"Engine\" */\nconst char *s = \"KL-1\";\n"
                        if path.endswith((".c", ".h")) else "# nothing to see\n")
        r = run(self.root, "--check")
        self.assertEqual(r.returncode, 0, r.stdout)


class ArchitectureDoc(unittest.TestCase):
    """docs/ARCHITECTURE.md has the sections others cite, every mapping target is one of
    them, and its dependency block is well formed and acyclic."""

    def setUp(self):
        sys.path.insert(0, os.path.dirname(SCRIPT))
        import design_cites
        self.dc = design_cites
        root = os.path.join(os.path.dirname(SCRIPT), "..", "..")
        with open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
            self.doc = f.read()

    def test_sections(self):
        heads = [l[3:].strip() for l in self.doc.split("\n") if l.startswith("## ")]
        self.assertEqual(tuple(heads), self.dc.SECTIONS)

    def test_mapping_targets_are_sections(self):
        dc = self.dc
        targets = list(dc.SECTION_MAP.values()) + list(dc.SUBSECTION_MAP.values())
        targets += [t for _, _, t in dc.CONTEXT_RULES] + [t for _, t in dc.BARE_RULES] + [dc.BARE_DEFAULT]
        targets += [re.search(r'"([^"]+)"', v).group(1) for v in dc.EXACT_MAP.values()]
        for t in targets:
            self.assertIn(t, dc.SECTIONS)
        for n in range(1, 13):  # every section of DESIGN.md has a home
            self.assertIn(str(n), dc.SECTION_MAP)

    def test_deps_block(self):
        m = re.search(r"^```deps\n(.*?)^```$", self.doc, re.S | re.M)
        self.assertIsNotNone(m, "no ```deps block")
        edges = {}
        for line in m.group(1).splitlines():
            e = re.fullmatch(r"([a-z0-9_]+(?:/[a-z0-9_]+)*) -> ([a-z0-9_]+(?:/[a-z0-9_]+)*)", line)
            self.assertIsNotNone(e, "not an edge: %r" % line)
            self.assertNotEqual(e.group(1), e.group(2))
            edges.setdefault(e.group(1), set()).add(e.group(2))
        state = {}

        def visit(v, path):
            state[v] = 1
            for w in sorted(edges.get(v, ())):
                self.assertNotEqual(state.get(w), 1, "cycle: %s" % " -> ".join(path + [w]))
                if w not in state:
                    visit(w, path + [w])
            state[v] = 2

        for v in sorted(edges):
            if v not in state:
                visit(v, [v])
        # Upward edges the target graph forbids.
        for a, b in (("engine/queue", "engine/catalog"), ("engine/queue", "engine/transfer"),
                     ("engine/catalog", "engine/transfer"), ("repl/raft_log", "repl/raft"),
                     ("park", "node"), ("rpc/tailer", "rpc/service"), ("rpc/lease", "rpc/service"), ("store/store", "engine/view")):
            self.assertNotIn(b, edges.get(a, set()), "%s -> %s is allowed" % (a, b))


if __name__ == "__main__":
    unittest.main()
