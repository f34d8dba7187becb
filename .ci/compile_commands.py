#!/usr/bin/env python3
"""Writes compile_commands.json (for clang-tidy and editors) from Bazel's own compile actions.

`bazel aquery` lists every C++ compile of mailroom's targets with its exact arguments; each
becomes an entry run from the workspace root, where the bazel-out symlink reaches the generated
headers. Only the project's own sources are listed (not generated code). The compiler's warning
flags are dropped: GCC reports warnings in the build; clang-tidy reports its checks.
Usage: python3 .ci/compile_commands.py [BAZEL TARGET PATTERN...]  (default //...)
"""
import json
import os
import subprocess
import sys

# GCC-only flags of Bazel's auto-configured toolchain that clang does not accept.
GCC_ONLY = {"-fno-canonical-system-headers"}


def main():
    patterns = sys.argv[1:] or ["//..."]
    query = 'mnemonic("CppCompile", %s)' % " + ".join(patterns)
    out = subprocess.run(
        ["bazel", "aquery", "--output=jsonproto", "--include_artifacts=false", query],
        check=True, capture_output=True, text=True).stdout
    root = os.getcwd()
    entries = {}
    for action in json.loads(out).get("actions", []):
        args = action["arguments"]
        src = args[args.index("-c") + 1]
        if src.startswith(("bazel-out/", "external/")):
            continue  # generated or not ours
        keep = ["clang++"]
        skip = False
        for a in args[1:]:
            if skip:
                skip = False
                continue
            if a in ("-MF", "-o"):
                skip = True
                continue
            if a == "-MD" or a in GCC_ONLY or a.startswith(("-W", "-D__DATE__", "-D__TIME__",
                                                             "-D__TIMESTAMP__", "-frandom-seed")):
                continue
            keep.append(a)
        entries[src] = {"directory": root, "file": src, "arguments": keep}
    json.dump(sorted(entries.values(), key=lambda e: e["file"]), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
