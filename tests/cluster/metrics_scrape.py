#!/usr/bin/env python3
"""Scrapes one /metrics endpoint and parses it with prometheus_client's text parser
(Debian python3-prometheus-client), the parser a Prometheus user would trust.

  metrics_scrape.py URL [--token FILE] [--raw FILE] [--status-only]

Prints one JSON object: {"status": HTTP status, "samples": {"name{l=v,...}": value},
"families": {name: {"type": t, "help": h}}}. --raw FILE keeps the page as served (for
grepping), --status-only skips parsing (refusal checks). A page the parser refuses exits 3,
a connection failure exits 2."""
import json
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    args = sys.argv[1:]
    url, token, raw, status_only = args[0], None, None, False
    i = 1
    while i < len(args):
        if args[i] == "--token":
            token = open(args[i + 1]).read().strip()
            i += 2
        elif args[i] == "--raw":
            raw = args[i + 1]
            i += 2
        elif args[i] == "--status-only":
            status_only = True
            i += 1
        else:
            sys.exit("unknown argument " + args[i])
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, body, ctype = r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code, "samples": {}, "families": {}}))
        return
    except (urllib.error.URLError, OSError) as e:
        print("scrape failed: %s" % e, file=sys.stderr)
        sys.exit(2)
    if raw:
        with open(raw, "w") as f:
            f.write(body)
    out = {"status": status, "content_type": ctype, "samples": {}, "families": {}}
    if not status_only:
        try:
            for fam in text_string_to_metric_families(body):
                out["families"][fam.name] = {"type": fam.type, "help": fam.documentation}
                for s in fam.samples:
                    key = s.name + "{" + ",".join("%s=%s" % kv for kv in sorted(s.labels.items())) + "}"
                    out["samples"][key] = s.value
        except Exception as e:  # the parser's refusal is the test's failure
            print("parser refused the page: %s" % e, file=sys.stderr)
            sys.exit(3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
