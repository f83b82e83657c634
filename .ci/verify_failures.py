"""Read `kbase verify --junit` output: print each bad run with its output tail (to stderr, so a CI
log's tail shows why), and the names of the skills they belong to (to stdout, for a re-run)."""

import sys
import xml.etree.ElementTree as ET

names: list[str] = []
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    for bad in (*case.findall("failure"), *case.findall("error")):
        skill = case.get("classname", "").removeprefix("skills.")
        print(f"--- {bad.get('type')}: {skill} [{case.get('name')}] {bad.get('message')}",
              file=sys.stderr)
        print("\n".join((bad.text or "").splitlines()[-40:]), file=sys.stderr)
        if skill != "lint" and skill not in names:
            names.append(skill)
print(" ".join(names))
