#!/usr/bin/env python3
"""docs/config.md embeds the key table printed by `zeroc config keys`; this
fails when the schema changed and the docs were not regenerated.
Usage: check_docs.py ZEROC DOCS_MD"""
import subprocess
import sys

zeroc, doc = sys.argv[1], sys.argv[2]
table = subprocess.run([zeroc, "config", "keys"], capture_output=True, text=True,
                       check=True).stdout
text = open(doc, encoding="utf-8").read()
begin, end = "<!-- keys:begin -->\n", "<!-- keys:end -->"
if begin not in text or end not in text:
    sys.exit("%s: key table markers missing" % doc)
embedded = text.split(begin, 1)[1].split(end, 1)[0]
if embedded != table:
    sys.exit("%s: key table differs from `zeroc config keys`; regenerate it" % doc)
print("docs key table is current (%d keys)" % (table.count("\n") - 2))
