"""Extracts the code blocks of README files so that a package test can run or compile them.

    snippets.py OUTDIR LANG[,LANG...] README.md...

Writes every fenced block whose info string is one of LANG (js, ts, python, go) to
OUTDIR/<readme>-<n>.<ext> (a js block that calls require() gets .cjs, any other .mjs; ts: .ts;
python: .py; go: a folder <readme>-<n>/main.go) and lists the files written, one a line, on
stdout. A block preceded by the line `<!-- not run: REASON -->` is skipped (the reason is
required). Prints "snippets: N to run, M skipped (...)" on stderr.
"""

import os
import re
import sys

FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (\S.*?) -->\s*$")
ALIASES = {"javascript": "js", "mjs": "js", "cjs": "js", "typescript": "ts", "py": "python",
           "golang": "go"}


def blocks(path):
    """(language, text, skip_reason or None, line number) for every fenced block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start = i
        reason = None
        if i > 0:
            skip = NOT_RUN.match(lines[i - 1])
            if skip:
                reason = skip.group(1)
            elif lines[i - 1].startswith("<!-- not run"):
                sys.exit("%s:%d: a not-run comment needs a reason: <!-- not run: REASON -->"
                         % (path, i))
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            sys.exit("%s:%d: unterminated code block" % (path, start + 1))
        i += 1
        yield ALIASES.get(m.group(1), m.group(1)), "\n".join(body) + "\n", reason, start + 1


def main(argv):
    outdir, langs, readmes = argv[1], set(argv[2].split(",")), argv[3:]
    os.makedirs(outdir, exist_ok=True)
    run, skipped = 0, []
    for readme in readmes:
        stem = re.sub(r"[^A-Za-z0-9]+", "_", os.path.relpath(readme)).strip("_")
        n = 0
        for lang, text, reason, line in blocks(readme):
            if lang not in langs:
                continue
            if reason is not None:
                skipped.append("%s:%d %s" % (readme, line, reason))
                continue
            n += 1
            name = "%s-%d" % (stem, n)
            if lang == "js":
                path = os.path.join(outdir, name + (".cjs" if "require(" in text else ".mjs"))
            elif lang == "ts":
                path = os.path.join(outdir, name + ".ts")
            elif lang == "python":
                path = os.path.join(outdir, name + ".py")
            else:
                os.makedirs(os.path.join(outdir, name), exist_ok=True)
                path = os.path.join(outdir, name, "main.go")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(path)
            run += 1
    print("snippets: %d to run, %d skipped%s" % (
        run, len(skipped), "".join("\n  skipped: " + s for s in skipped)), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
