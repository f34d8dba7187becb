#!/usr/bin/env bash
# Installs one verifier as its README tells a team to, into an empty project, offline, and uses
# it from there: a known-answer case of testdata/vectors.json through the installed package and
# its command line, and every JavaScript/TypeScript, Python or Go block of clients/README.md and
# the package's README run (or compiled) unless marked <!-- not run: REASON -->.
#   package_test.sh npm|python|go
set -euo pipefail
kind=$1
src=$PWD/clients
tmp=${TEST_TMPDIR:-$(mktemp -d)}
work="$tmp/$kind"
rm -rf "$work"
mkdir -p "$work"
export HOME="$tmp/home"
mkdir -p "$HOME"
vectors="$src/testdata/vectors.json"
PY=/usr/bin/python3  # Debian's: a pyenv python may be first on PATH
fail() { echo "FAIL: $*" >&2; exit 1; }

# The known-answer case every package runs: a valid password_recovery token, its code and key.
read -r KEY TOKEN CODE < <("$PY" - "$vectors" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
c = next(c for c in cases if c["action"] == "password_recovery" and c["valid"] and len(c["keys"]) == 1)
print(c["keys"][0], c["token"], c["code"])
PY
)
export MAILROOM_SECRET_KEY=$KEY
unset MAILROOM_VERIFY_KEYS
# A well-formed recovery token without its code, and a malformed spelling of it.
BAD_TOKEN="${TOKEN}="

# The package's LICENSE is the project's (Apache-2.0).
license_is_the_projects() {
  grep -q "Apache License" "$1" && grep -q "Version 2.0, January 2004" "$1" ||
    fail "$1 is not the Apache-2.0 license text"
}

# Every outcome of a command line: valid, invalid, well-formed, malformed, usage; both forms.
check_cli() {
  local rc
  [ "$("$@" --action=password_recovery --token="$TOKEN" --code="$CODE")" = valid ] ||
    fail "$*: a valid case"
  [ "$("$@" --action password_recovery --token "$TOKEN" --code "$CODE")" = valid ] ||
    fail "$*: --flag value"
  rc=0; "$@" --action=password_recovery --token="$TOKEN" 2>/dev/null || rc=$?
  [ "$rc" = 1 ] || fail "$*: a recovery token without its code verified (exit $rc)"
  [ "$(env -u MAILROOM_SECRET_KEY "$@" --well-formed --action password_recovery --token "$TOKEN")" = \
    well-formed ] || fail "$*: --well-formed without a key"
  rc=0; "$@" --well-formed --action=password_recovery --token="$BAD_TOKEN" 2>"$work/err" || rc=$?
  [ "$rc" = 1 ] && grep -q '^malformed: ' "$work/err" || fail "$*: a malformed spelling (exit $rc)"
  rc=0; "$@" --well-formed --action=Password --token="$TOKEN" 2>/dev/null || rc=$?
  [ "$rc" = 2 ] || fail "$*: an invalid action name (exit $rc, want 2)"
  echo "command line: $* ok"
}

# `go run` exits 1 for any failing program: only what it prints is the command's.
check_cli_output() {
  [ "$("$@" --action password_recovery --token "$TOKEN" --code="$CODE")" = valid ] ||
    fail "$*: a valid case"
  [ "$(env -u MAILROOM_SECRET_KEY "$@" --well-formed --action=password_recovery --token "$TOKEN")" = \
    well-formed ] || fail "$*: --well-formed without a key"
  echo "command line: $* ok"
}

snippets() {  # OUTDIR LANGS: the README blocks to run, one path a line
  "$PY" "$src/snippets.py" "$1" "$2" "$src/README.md" "$src/$kind_dir/README.md"
}

case "$kind" in
npm)
  kind_dir=js
  node_modules=${MAILROOM_NODE_MODULES:-}
  if [ -z "$node_modules" ]; then  # run outside .ci/test: the checkout's own .cache/node
    node_modules="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)/.cache/node/node_modules"
  fi
  tsc="$node_modules/typescript/bin/tsc"
  [ -f "$tsc" ] || fail "no TypeScript at $tsc (run .ci/setup)"
  license_is_the_projects "$src/js/LICENSE"
  cp -rL "$src/js" "$work/js"
  export npm_config_cache="$tmp/npm-cache" npm_config_update_notifier=false
  # As the README says: npm pack in the folder, npm install of the tarball in the application.
  (cd "$work/js" && npm pack --silent >/dev/null) || fail "npm pack"
  tgz=$(ls "$work"/js/mailroom-verify-*.tgz)
  tar -tzf "$tgz" > "$work/tgz.list"
  grep -qx 'package/LICENSE' "$work/tgz.list" || fail "the tarball has no LICENSE"
  app="$work/app"
  mkdir -p "$app"
  cd "$app"
  echo '{ "name": "app", "version": "1.0.0", "private": true, "type": "module" }' > package.json
  npm install "$tgz" --offline --no-audit --no-fund --silent || fail "npm install of the tarball"
  grep -q '"license": "Apache-2.0"' node_modules/mailroom-verify/package.json || fail "license"

  cat > vector.mjs <<'EOF'
import { verifyTokenSync, verifyToken, wellFormed, parseKeys } from "mailroom-verify";
const [token, code] = process.argv.slice(2);
const keys = parseKeys(process.env.MAILROOM_SECRET_KEY ?? "");
if (verifyTokenSync(token, "password_recovery", keys, code).length !== 32) throw new Error("sync");
if ((await verifyToken(token, "password_recovery", keys, code)).length !== 32) throw new Error("async");
if (!wellFormed(token, "password_recovery") || wellFormed(token + "=", "password_recovery")) throw new Error("wellFormed");
console.log("import: ok");
EOF
  cat > vector.cjs <<'EOF'
const { verifyTokenSync, wellFormed, parseKeys, InvalidTokenError } = require("mailroom-verify");
const [token, code] = process.argv.slice(2);
const keys = parseKeys(process.env.MAILROOM_SECRET_KEY ?? "");
if (verifyTokenSync(token, "password_recovery", keys, code).length !== 32) throw new Error("sync");
try { verifyTokenSync(token, "password_recovery", keys); throw new Error("verified without code"); }
catch (e) { if (!(e instanceof InvalidTokenError) || e.kind !== "malformed") throw e; }
if (!wellFormed(token, "password_recovery")) throw new Error("wellFormed");
console.log("require: ok");
EOF
  node vector.mjs "$TOKEN" "$CODE"
  node vector.cjs "$TOKEN" "$CODE"
  check_cli ./node_modules/.bin/mailroom-verify
  check_cli_output npx --offline --no-install mailroom-verify

  # Types: a strict ESM file and a strict CommonJS one, as the README's parseKeys line.
  cat > types.ts <<'EOF'
import { parseKeys, verifyTokenSync, wellFormed, InvalidTokenError, type Action } from "mailroom-verify";
const keys: Uint8Array[] = parseKeys(process.env.MAILROOM_SECRET_KEY ?? "", process.env.MAILROOM_VERIFY_KEYS);
const action: Action = "password_recovery";
const ok: boolean = wellFormed("x", action);
export function secretOf(token: string, code?: string): Uint8Array | null {
  try { return verifyTokenSync(token, action, keys, code); }
  catch (e) { if (e instanceof InvalidTokenError && e.kind === "mismatch") return null; throw e; }
}
export { ok };
EOF
  cat > types-require.cts <<'EOF'
import { parseKeys, wellFormed } from "mailroom-verify";
export const keys: Uint8Array[] = parseKeys(process.env.MAILROOM_SECRET_KEY ?? "");
export const ok: boolean = wellFormed("x", "activation");
EOF
  mkdir -p snippets
  ran=0
  mapfile -t blocks < <(snippets "$app/snippets" js,ts)
  ts_files=(types.ts types-require.cts)
  for f in "${blocks[@]}"; do
    case "$f" in
      *.ts) ts_files+=("$f") ;;
      *) node "$f" "$TOKEN" "$CODE" >/dev/null || fail "README block $f"; ran=$((ran + 1)) ;;
    esac
  done
  for f in "${blocks[@]}"; do
    case "$f" in *.mjs)
      rc=0; node "$f" "$TOKEN" 00000 >/dev/null 2>&1 || rc=$?
      [ "$rc" = 1 ] || fail "README block $f with a wrong code: exit $rc";;
    esac
  done
  common=(--strict --noEmit --skipLibCheck false --types node --typeRoots "$node_modules/@types")
  node "$tsc" "${common[@]}" --module nodenext --moduleResolution nodenext "${ts_files[@]}" ||
    fail "tsc --module nodenext"
  bundler=()
  for f in "${ts_files[@]}"; do [[ "$f" == *.cts ]] || bundler+=("$f"); done
  node "$tsc" "${common[@]}" --module esnext --moduleResolution bundler "${bundler[@]}" ||
    fail "tsc --moduleResolution bundler"
  echo "tsc --strict: nodenext (${#ts_files[@]} files) and bundler (${#bundler[@]} files) ok"
  echo "README blocks: $ran run, $(( ${#ts_files[@]} - 2 )) type-checked"
  ;;
python)
  kind_dir=python
  license_is_the_projects "$src/python/LICENSE"
  cp -rL "$src/python" "$work/python"
  # As the README says: a wheel built offline, installed into a fresh venv.
  "$PY" -m pip wheel --no-build-isolation --no-deps --no-index -q -w "$work/dist" "$work/python" ||
    fail "pip wheel"
  "$PY" -m venv "$work/venv"
  "$work/venv/bin/pip" install -q --no-index "$work"/dist/*.whl || fail "pip install of the wheel"
  cd "$work"  # away from the sources: only the installed package can be imported
  "$work/venv/bin/python" -c 'import mailroom_verify, sys; assert "/venv/" in mailroom_verify.__file__, mailroom_verify.__file__'
  "$work/venv/bin/python" -c 'import importlib.metadata as m; assert m.metadata("mailroom-verify")["License"] == "Apache-2.0"' ||
    fail "the wheel's license is not Apache-2.0"
  "$PY" -c 'import sys, zipfile; sys.exit(not any(n.endswith(".dist-info/LICENSE") for n in zipfile.ZipFile(sys.argv[1]).namelist()))' \
    "$work"/dist/*.whl || fail "the wheel has no LICENSE"
  "$work/venv/bin/python" - "$TOKEN" "$CODE" <<'PY'
import os, sys
from mailroom_verify import parse_keys, verify_token, well_formed, InvalidToken
token, code = sys.argv[1:]
keys = parse_keys(os.environ["MAILROOM_SECRET_KEY"])
assert len(verify_token(token, "password_recovery", keys, code)) == 32
assert well_formed(token, "password_recovery") and not well_formed(token + "=", "password_recovery")
try:
    verify_token(token, "password_recovery", keys)
    raise SystemExit("verified without its code")
except InvalidToken as e:
    assert e.kind == "malformed"
print("import: ok")
PY
  check_cli "$work/venv/bin/mailroom-verify"
  check_cli "$work/venv/bin/python" -m mailroom_verify
  ran=0
  while read -r f; do
    "$work/venv/bin/python" "$f" "$TOKEN" "$CODE" >/dev/null || fail "README block $f"
    ran=$((ran + 1))
  done < <(snippets "$work/snippets" python)
  echo "README blocks: $ran run"
  ;;
go)
  kind_dir=go
  license_is_the_projects "$src/go/LICENSE"
  cp -rL "$src/go" "$work/mailroomverify"
  module=$(sed -n 's/^module //p' "$work/mailroomverify/go.mod")
  export GOCACHE="$tmp/gocache" GOPATH="$tmp/gopath" GOFLAGS=-mod=mod GOTOOLCHAIN=local \
    GOPROXY=off GO111MODULE=on
  # As the README says: require the module path (here replaced by the local copy).
  app="$work/app"
  mkdir -p "$app"
  cd "$app"
  cat > go.mod <<EOF
module example.com/app

go 1.19

require $module v0.0.0

replace $module => $work/mailroomverify
EOF
  cat > main.go <<EOF
package main

import (
	"fmt"
	"os"

	mailroomverify "$module"
)

func main() {
	keys, err := mailroomverify.ParseKeys(os.Getenv("MAILROOM_SECRET_KEY"), "")
	if err != nil {
		panic(err)
	}
	secret, err := mailroomverify.Verify(os.Args[1], "password_recovery", keys, os.Args[2])
	if err != nil || len(secret) != 32 || !mailroomverify.WellFormed(os.Args[1], "password_recovery") {
		fmt.Println("not verified:", err)
		os.Exit(1)
	}
	fmt.Println("import: ok")
}
EOF
  go build -o "$work/app-bin" . || fail "go build of a module that requires $module"
  "$work/app-bin" "$TOKEN" "$CODE"
  go run . "$TOKEN" "$CODE" >/dev/null || fail "go run"
  go build -o "$work/mailroom-verify" "$module/cmd/mailroom-verify" || fail "go build of the command"
  check_cli "$work/mailroom-verify"
  check_cli_output go run "$module/cmd/mailroom-verify"
  # From clients/ as clients/README.md's table says.
  mkdir -p "$work/clients"
  cp -rL "$src/go" "$work/clients/go"
  cp "$src/go.work" "$work/clients/go.work"
  (cd "$work/clients" && unset GOFLAGS && check_cli_output go run ./go/cmd/mailroom-verify)
  ran=0
  n=0
  while read -r f; do
    n=$((n + 1))
    d=$(dirname "$f")
    sed "s#^module example.com/app#module example.com/snippet$n#" "$app/go.mod" > "$d/go.mod"
    (cd "$d" && go vet . && go run . "$TOKEN" "$CODE" >/dev/null) || fail "README block $f"
    ran=$((ran + 1))
  done < <(snippets "$work/snippets" go)
  echo "README blocks: $ran run"
  ;;
*) echo "package_test.sh: unknown package $kind" >&2; exit 2 ;;
esac
echo "PASS: $kind package"
