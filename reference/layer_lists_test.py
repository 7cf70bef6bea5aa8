#!/usr/bin/env python3
"""The documents' lists of layers, targets and public headers against the build (doc_lists).

reference/CMakeLists.txt adds the layers lowest first; reference/README.md
names them (the sentence and the table) and docs/api.md's "Targets:" names
their distckpt::<layer> targets, each in that order. docs/api.md's table of
public headers (a parenthesis there names internal headers a public one
includes) holds exactly the headers reference/distckpt.h includes. The CLI (cli/) calls
the public API: an include there of any other library header says why on its
line (`// internal: why`).

  layer_lists_test.py SOURCE_DIR
"""
import os
import re
import sys


def read(src, path):
    with open(os.path.join(src, path)) as f:
        return f.read()


def main():
    src = sys.argv[1]
    layers = re.findall(r"^add_subdirectory\((\w+)\)", read(src, "reference/CMakeLists.txt"), re.M)
    if len(layers) < 10:
        sys.exit(f"doc_lists: only {layers} in reference/CMakeLists.txt")
    readme = read(src, "reference/README.md")
    api = read(src, "docs/api.md")
    problems = []

    def compare(where, named):
        if named != layers:
            problems.append(f"{where} names {named}; reference/CMakeLists.txt has {layers}")

    m = re.search(r"One folder per layer, lowest first: ([^.]*)\.", readme)
    compare("reference/README.md's first sentence",
            re.split(r",\s*", " ".join(m.group(1).split())) if m else [])
    rows = re.findall(r"^\| ([a-z0-9, ]+) \| .* \|$", readme, re.M)
    compare("reference/README.md's table",
            [l for row in rows if row != "layer" for l in row.split(", ")])
    m = re.search(r"^Targets:(.*?)\n\n", api, re.M | re.S)
    targets = re.findall(r"`distckpt::(\w+)`", m.group(1)) if m else []
    compare("docs/api.md's Targets", [t for t in targets if t != "distckpt"])

    public = set(re.findall(r'^#include "([\w/]+\.h)"', read(src, "reference/distckpt.h"), re.M))
    listed = set()
    for row in re.findall(r"^\| [^|]+ \| ([^|]+) \|", api, re.M):
        listed |= set(re.findall(r"`([\w/]+\.h)`", re.sub(r"\([^)]*\)", "", row)))
    for h in sorted(listed - public):
        problems.append(f"docs/api.md lists {h} as public; reference/distckpt.h does not include it")
    for h in sorted(public - listed):
        problems.append(f"reference/distckpt.h includes {h}; docs/api.md's table does not list it")
    if len(public) < 20:
        problems.append(f"only {len(public)} headers found in reference/distckpt.h")

    cli = os.path.join(src, "cli")
    internal = 0
    for name in sorted(os.listdir(cli)):
        if not name.endswith((".cc", ".h")):
            continue
        for n, line in enumerate(read(src, os.path.join("cli", name)).splitlines(), 1):
            m = re.match(r'#include "((\w+)/[\w/]+\.h)"(.*)', line)
            if not m or m.group(2) not in layers or m.group(1) in public:
                continue
            internal += 1
            if not re.search(r"// internal: \S", m.group(3)):
                problems.append(f"cli/{name}:{n} includes the internal {m.group(1)} "
                                "without `// internal: why`")

    for p in problems:
        print(p)
    if problems:
        sys.exit(f"doc_lists: {len(problems)} difference(s)")
    print(f"doc_lists: {len(layers)} layers and {len(public)} public headers agree; "
          f"cli/ includes {internal} internal headers, each saying why")


if __name__ == "__main__":
    main()
