#!/usr/bin/env python3
"""docs/cli.md against the commands' --help (cli_docs).

Every flag `distckpt CMD --help` lists appears in a synopsis of CMD in
docs/cli.md, and every flag a synopsis gives CMD is one its --help lists
(the same for `distckpt --help` and `distckpt --FLAG <command>`). A synopsis
is a line of a fenced block starting with `distckpt CMD` (`a|b` names several
commands) and the indented lines after it; what follows a `#` is a comment.

  cli_doc_test.py DISTCKPT DOCS_CLI_MD
"""
import re
import subprocess
import sys


def help_text(exe, *args):
    out = subprocess.run([exe, *args, "--help"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"cli_docs: distckpt {' '.join(args)} --help exited {out.returncode}")
    return out.stdout


def help_flags(text):
    """The long flags of a --help's option lines, --help itself left out."""
    flags = set()
    for line in text.splitlines():
        m = re.match(r"\s+((?:-\w,)?--[\w-]+(?:,-\w)?)\s", line)
        if m:
            flags |= {f for f in m.group(1).split(",") if f.startswith("--") and f != "--help"}
    return flags


def synopsis_flags(doc):
    """command ('' = distckpt itself) -> the long flags its synopses give it."""
    flags, in_block, current = {}, False, None
    for line in doc.splitlines():
        if line.startswith("```"):
            in_block, current = not in_block, None
            continue
        if not in_block:
            continue
        code = line.split("#")[0]
        if line.startswith("distckpt "):
            words = code.split()[1:]
            current = words[0].split("|") if words and not words[0].startswith("-") else [""]
            for command in current:
                flags.setdefault(command, set())
        elif not line.startswith(" "):
            current = None
        if current is None:
            continue
        for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", code):
            for command in current:
                flags.setdefault(command, set()).add(flag)
    return flags


def main():
    exe, doc_path = sys.argv[1], sys.argv[2]
    with open(doc_path) as f:
        documented = synopsis_flags(f.read())
    top = help_text(exe)
    commands = re.findall(r"^  (\S+)\s{2,}", top.split("Subcommands:")[1], re.M)
    if len(commands) < 10:
        sys.exit(f"cli_docs: found only {commands} in distckpt --help")
    problems = []
    for command in set(documented) - set(commands) - {""}:
        problems.append(f"docs/cli.md has a synopsis of '{command}', which is no command")
    checked = 0
    for command in [""] + commands:
        name = f"distckpt {command}".strip()
        listed = help_flags(help_text(exe, command) if command else top)
        if command not in documented:
            problems.append(f"{name}: no synopsis in docs/cli.md")
            continue
        doc = documented[command]
        for flag in sorted(listed - doc):
            problems.append(f"{name} {flag}: in --help, in no synopsis of docs/cli.md")
        for flag in sorted(doc - listed):
            problems.append(f"{name} {flag}: in a docs/cli.md synopsis, not in --help")
        checked += len(listed)
    for p in problems:
        print(p)
    if problems:
        sys.exit(f"cli_docs: {len(problems)} difference(s) between docs/cli.md and --help")
    print(f"cli_docs: {len(commands)} commands, {checked} flags: docs/cli.md and --help agree")


if __name__ == "__main__":
    main()
