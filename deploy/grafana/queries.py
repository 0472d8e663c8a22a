#!/usr/bin/env python3
"""Print every PromQL expression of the rankwatch dashboard, one per line.

Template variables are substituted so that each line can be sent as is to a
Prometheus server: $model and $surface -> .*, $k -> 10,
$__rate_interval -> 1m. ${datasource} only names the data source and never
appears in an expression. Multi-line expressions are folded onto one line.

Usage: python3 queries.py [dashboard.json]   (default: rankwatch.json next to this file)
Exits with status 1 if an expression still holds an unknown $variable.
"""
import json
import os
import re
import sys

SUBSTITUTIONS = {
    "__rate_interval": "1m",
    "model": ".*",
    "surface": ".*",
    "k": "10",
}

# $name, ${name}, ${name:format} and [[name]]
VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]")


def panels(items):
    """Yield every panel, including the ones nested in (collapsed) rows."""
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def substitute(expr):
    unknown = []

    def replace(match):
        name = match.group(1) or match.group(2) or match.group(3)
        if name in SUBSTITUTIONS:
            return SUBSTITUTIONS[name]
        unknown.append(name)
        return match.group(0)

    return VARIABLE.sub(replace, expr), unknown


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "rankwatch.json")
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    status = 0
    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            expr = target.get("expr", "").strip()
            if not expr or target.get("hide"):
                continue
            expr, unknown = substitute(" ".join(expr.split()))
            if unknown:
                print(f"panel {panel.get('title')!r}: unknown variable(s) {unknown}",
                      file=sys.stderr)
                status = 1
            print(expr)
    return status


if __name__ == "__main__":
    sys.exit(main())
