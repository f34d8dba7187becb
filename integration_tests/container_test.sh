#!/usr/bin/env bash
# Container proof: builds the images in deploy/containers/ on a local Debian 12 base
# (no registry is reachable), starts compose.yaml with podman-compose, creates an account in the
# containerised PostgreSQL and waits for its activation email in the mail catcher; then runs a
# single-pod variant of kube.yaml with `podman play kube` and checks the same delivery there.
# Both run gRPC between sender and collector over TLS with a certificate made for this run
# (make-test-cert.sh: throwaway CA, server certificate naming `collector` and
# `mailroom-collector`); the test checks that the collector's port refuses plaintext and serves
# TLS only to a client that trusts that CA and expects that name.
#
#   bash integration_tests/container_test.sh        # as root; prints PASS/FAIL lines, timings
#
# Installs podman, buildah, runc, podman-compose, debootstrap, catatonit, iptables and the netavark
# network backend with its DNS server aardvark-dns if missing, and selects netavark in its own
# configuration: compose's services find each other by name only through aardvark-dns, and a
# machine whose podman was installed before may be on the CNI backend, which has no name
# resolution without the dnsname plugin ("could not translate host name"). /etc/containers is
# not touched: a machine podman set to cni, or one that already has containers (it records its
# backend in its storage), stays on CNI; only a podman without any state would pick netavark.
# Uses its own podman storage root, run directory, network directory and configuration under a
# temporary directory (never /var/lib/containers or /etc/containers/networks), and always
# removes every container, pod, network and that directory again, also on failure or Ctrl-C.
# The debootstrapped base rootfs is cached in .cache/containers/ (git-ignored;
# MAILROOM_REBUILD_BASE=1 redoes it).
# Nothing is published on the host's interfaces; the test reaches the containers with
# `podman exec` (and buf curl on their bridge addresses for the gRPC health checks).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HERE=$ROOT/deploy/containers
CACHE=$ROOT/.cache/containers
SUITE=bookworm
BASE_TAG=docker.io/library/debian:bookworm-slim
PROJECT=mailroomct$$
FAILS=0
OUR_BAZEL=

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
note() { printf '[%6.1fs] %s\n' "$(awk -v a="$T0" -v b="$(now)" 'BEGIN{print b-a}')" "$*"; }
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
T0=$(now)

[ "$(id -u)" = 0 ] || { echo "container_test: must run as root (rootful podman)" >&2; exit 2; }

# --- tools ------------------------------------------------------------------------------------
missing=()
for p in podman buildah runc podman-compose debootstrap catatonit iptables netavark aardvark-dns; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  note "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- private podman configuration -------------------------------------------------------------
W=$(mktemp -d /tmp/mailroom-containers.XXXXXX)
chmod 755 "$W"
CTX=$W/ctx
mkdir -p "$W/storage" "$W/run" "$W/tmp" "$W/networks" "$CTX"
cat >"$W/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$W/storage"
runroot = "$W/run/storage"
EOF
cat >"$W/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
log_driver = "k8s-file"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$W/run/libpod"
volume_path = "$W/storage/volumes"
[network]
# Explicit, whatever the machine's podman uses: netavark + aardvark-dns give the compose network
# name resolution (CNI would need the dnsname plugin). CONTAINERS_CONF makes podman 4.3 read
# this file only, not /etc/containers/containers.conf.
network_backend = "netavark"
network_config_dir = "$W/networks"
EOF
cat >"$W/registries.conf" <<EOF
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
EOF
export CONTAINERS_STORAGE_CONF=$W/storage.conf CONTAINERS_CONF=$W/containers.conf
export CONTAINERS_REGISTRIES_CONF=$W/registries.conf TMPDIR=$W/tmp
# Host state rootful podman touches whatever the configuration says (Podman 4.3): the blob info
# cache /var/lib/containers/cache, netavark's /run/containers/networks, /run/netns, runc's
# /run/runc, /run/mount (mount's utab, also debootstrap), generic NETAVARK iptables chains and
# net.ipv4.ip_forward. Whatever of it this run creates or changes is undone at the end.
# Subdirectories count too: on a machine whose podman ran before, /run/containers exists but
# netavark's networks/ (ipam.db, aardvark-dns) in it may be this run's.
HOST_PATHS=(/var/lib/containers /var/lib/containers/cache /etc/containers/networks /run/containers
  /run/containers/networks /run/libpod /run/netns /run/runc /run/mount)
NEW_PATHS=()
for p in "${HOST_PATHS[@]}"; do [ -e "$p" ] || NEW_PATHS+=("$p"); done
IP_FORWARD=$(cat /proc/sys/net/ipv4/ip_forward)
# netavark starts aardvark-dns for a network with DNS and stops it when the last container on
# such a network goes; one already serving the machine's own podman is left alone.
AARDVARK_BEFORE=" $(pgrep -x aardvark-dns | tr '\n' ' ' || true)"
NETAVARK_CHAINS_EXISTED=0
iptables-save 2>/dev/null | grep -q '^:NETAVARK' && NETAVARK_CHAINS_EXISTED=1
# Deletes the rules that jump to NETAVARK chains and the (by then empty) chains themselves.
remove_netavark_chains() {
  local table
  for table in filter nat; do
    iptables-save -t "$table" | grep '^-A ' | grep -v '^-A NETAVARK' | grep NETAVARK |
      while read -r rule; do eval "iptables -t $table ${rule/#-A/-D}"; done
    for chain in $(iptables-save -t "$table" | awk -F'[: ]' '/^:NETAVARK/ {print $2}'); do
      iptables -t "$table" -F "$chain"
    done
    for chain in $(iptables-save -t "$table" | awk -F'[: ]' '/^:NETAVARK/ {print $2}'); do
      iptables -t "$table" -X "$chain"
    done
  done
}

COMPOSE=(podman-compose -p "$PROJECT" -f "$CTX/compose.yaml")
KUBE_FILE=$W/kube-pod.yaml
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  note "tearing down"
  if [ -f "$CTX/compose.yaml" ]; then
    "${COMPOSE[@]}" down -v -t 1 >"$W/compose-down.log" 2>&1
  fi
  [ -f "$KUBE_FILE" ] && podman play kube --down "$KUBE_FILE" >/dev/null 2>&1
  # This storage root is ours alone: -a only reaches what this test created.
  podman pod rm -f -a -t 1 >/dev/null 2>&1
  podman rm -f -a -t 1 >/dev/null 2>&1
  podman network prune -f >/dev/null 2>&1
  podman volume prune -f >/dev/null 2>&1
  podman rmi -a -f >/dev/null 2>&1
  # Overlay (and the storage's private bind) mounts under $W, deepest first.
  awk -v w="$W" '$2 ~ "^"w {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null
  done
  if [ "${MAILROOM_KEEP:-0}" = 1 ]; then
    echo "kept $W (logs)"
  else
    rm -rf "$W"
  fi
  for p in "${NEW_PATHS[@]}"; do
    awk -v p="$p" '$2 == p || index($2, p "/") == 1 {print $2}' /proc/mounts | sort -r |
      while read -r m; do umount -l "$m"; done
    rm -rf "$p"
  done
  [ "$NETAVARK_CHAINS_EXISTED" = 0 ] && remove_netavark_chains 2>/dev/null
  echo "$IP_FORWARD" >/proc/sys/net/ipv4/ip_forward
  # stage.sh starts a Bazel server with --max_idle_secs=15 when none was running: wait for it
  # to go (only for that one; a server someone else started is left alone).
  if [ -n "$OUR_BAZEL" ]; then
    for _ in $(seq 1 60); do
      kill -0 "$OUR_BAZEL" 2>/dev/null || break
      sleep 0.5
    done
  fi
  for _ in $(seq 1 40); do
    new_dns=$(for pid in $(pgrep -x aardvark-dns); do
      [[ "$AARDVARK_BEFORE" == *" $pid "* ]] || echo "$pid"; done)
    [ -z "$new_dns" ] && break
    sleep 0.25
  done
  if [ -n "$new_dns" ]; then
    echo "FAIL: aardvark-dns left running: $new_dns"
    rc=1
  fi
  left=$(pgrep -f "$W" | grep -v "^$$\$" || true)
  if [ -n "$left" ]; then
    echo "FAIL: processes left running: $left"
    rc=1
  fi
  note "done (exit $rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

backend=$(podman info --format '{{.Host.NetworkBackend}}' 2>&1 || true)
if [ "$backend" != netavark ]; then
  fail "podman's network backend is '$backend', not netavark (no name resolution for compose)"
  exit 1
fi
note "podman network backend: $backend"

# --- base image: debootstrap --variant=minbase, cached -----------------------------------------
# The host's Debian mirror (deb822 .sources first, then one-line .list files).
srcs() { cat /etc/apt/sources.list.d/*.sources 2>/dev/null; }
lists() { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null; }
mirror=$(srcs | awk '/^URIs:/ && $2 ~ /\/debian\/?$/ {print $2; exit}')
[ -n "$mirror" ] || mirror=$(lists | awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}')
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
mirror=${mirror%/}
security=$(srcs | awk '/^URIs:/ && $2 ~ /debian-security\/?$/ {print $2; exit}')
[ -n "$security" ] || security=$(lists | awk '$1 == "deb" && $2 ~ /debian-security\/?$/ {print $2; exit}')
[ -n "$security" ] || security=${mirror%/debian}/debian-security
BASE_TAR=$CACHE/debian-$SUITE-minbase.tar
mkdir -p "$CACHE"
if [ ! -s "$BASE_TAR" ] || [ "${MAILROOM_REBUILD_BASE:-0}" = 1 ]; then
  t=$(now)
  note "debootstrap --variant=minbase $SUITE from $mirror"
  R=$W/rootfs
  if ! debootstrap --variant=minbase "$SUITE" "$R" "$mirror" >"$W/debootstrap.log" 2>&1; then
    tail -20 "$W/debootstrap.log"
    fail "debootstrap"
    exit 1
  fi
  # The same suites as the host (updates, security), so the runtime libraries match the ones
  # the binaries were linked against; no documentation, like the official -slim images.
  rm -f "$R/etc/apt/sources.list"
  cat >"$R/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$R/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
  cat >"$R/etc/apt/apt.conf.d/docker-clean" <<'EOF'
APT::Install-Recommends "false";
Acquire::Languages "none";
EOF
  rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin "$R"/var/cache/apt/archives/*.deb \
    "$R"/var/log/* "$R"/usr/share/doc/* "$R"/usr/share/man/* "$R"/usr/share/info/*
  tar --numeric-owner -C "$R" -cf "$BASE_TAR.tmp" .
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf "$R"
  note "TIMING debootstrap + tarball: $(since "$t") s ($(du -h "$BASE_TAR" | cut -f1))"
else
  note "base rootfs from cache: $BASE_TAR"
fi
t=$(now)
podman import --change 'CMD ["/bin/bash"]' "$BASE_TAR" "$BASE_TAG" >/dev/null
note "TIMING podman import: $(since "$t") s"

# --- binaries and build context -----------------------------------------------------------------
t=$(now)
tar -C "$HERE" --exclude=./bin --exclude=./tls --exclude=./feedback-tls --exclude=./nginx \
  --exclude='*.env' --exclude=.env -cf - . |
  tar -C "$CTX" -xf -
bash "$HERE/stage.sh" "$CTX" >/dev/null || { fail "bazel build -c opt (stage.sh)"; exit 1; }
for pid in $(pgrep -f -- "--workspace_directory=$ROOT( |\$)"); do
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qx -- --max_idle_secs=15 && OUR_BAZEL=$pid
done
note "TIMING bazel build + staging: $(since "$t") s"

# --- images -------------------------------------------------------------------------------------
t=$(now)
pids=()
for img in postgres catcher collector sender feedback-proxy; do
  podman build --pull=never --layers -t "localhost/mailroom-$img:latest" \
    -f "$CTX/$img.Containerfile" "$CTX" >"$W/build-$img.log" 2>&1 &
  pids+=($!)
done
i=0
build_ok=1
for img in postgres catcher collector sender feedback-proxy; do
  if wait "${pids[$i]}"; then
    pass "image mailroom-$img built ($(podman image inspect -f '{{.Size}}' "localhost/mailroom-$img:latest" | awk '{printf "%d MB", $1/1e6}'))"
  else
    fail "image mailroom-$img (log: build-$img.log)"
    tail -20 "$W/build-$img.log"
    build_ok=0
  fi
  i=$((i + 1))
done
note "TIMING image builds (5 in parallel): $(since "$t") s"
[ "$build_ok" = 1 ] || exit 1

# --- secrets: generated for this run, never in an image, never printed ---------------------------
KEY=$(openssl rand -hex 32)
TOKEN=$(openssl rand -hex 24)
FEEDBACK=whsec_$(openssl rand -base64 32)
(umask 077
 printf 'MAILROOM_SECRET_KEY=%s\nMAILROOM_SUBSCRIBER_TOKENS=%s@mailroom:sender\nMAILROOM_FEEDBACK_HTTP_SECRET=%s\n' \
   "$KEY" "$TOKEN" "$FEEDBACK" >"$CTX/collector.env"
 printf 'MAILROOM_COLLECTOR_TOKEN=%s\n' "$TOKEN" >"$CTX/sender.env")
if podman image inspect localhost/mailroom-{collector,sender,postgres,catcher}:latest | grep -qF "$KEY"; then
  fail "an image contains the signing key"
fi
# The collector's certificate (compose mounts tls/ files; the kube pod gets them as its Secret
# volumes would be). The key is readable by the collector's uid only.
bash "$HERE/make-test-cert.sh" "$CTX/tls" collector mailroom-collector >/dev/null
chown 10001:10001 "$CTX/tls/tls.key"
# The feedback proxy's certificate (compose mounts feedback-tls/ files; the kube pod gets them as
# the Secret mailroom-feedback-tls); its key is readable by the proxy's uid only.
bash "$HERE/make-test-cert.sh" "$CTX/feedback-tls" feedback.example.test >/dev/null
chown 10002:10002 "$CTX/feedback-tls/tls.key"

# Runs python inside the catcher; prints the activation link sent to $1 (token shortened), or
# nothing. The bodies are base64 MIME parts, so they are decoded, not grepped.
find_mail() {
  podman exec -i "$1" python3 - "$2" <<'EOF' 2>/dev/null
import email, email.policy, glob, json, re, sys
want = sys.argv[1]
for env in sorted(glob.glob("/var/spool/catcher/*.json")):
    if want not in json.load(open(env))["to"]:
        continue
    msg = email.message_from_binary_file(open(env[:-5] + ".eml", "rb"), policy=email.policy.default)
    for part in msg.walk():
        if part.get_content_type() == "text/plain":
            m = re.search(r"https?://\S*[?&]token=[A-Za-z0-9_=-]+", part.get_content())
            if m:
                link = m.group(0)
                print(msg["Subject"], "|", link[:link.index("token=") + 14] + "...")
                sys.exit(0)
EOF
}

# $1 container running psql; waits for the schema, then inserts the account.
insert_account() {
  local c=$1 dsn=$2
  for _ in $(seq 1 60); do
    if podman exec "$c" psql -qAt -X "$dsn" -c 'SELECT 1 FROM mailroom.accounts LIMIT 0' >/dev/null 2>&1; then
      podman exec "$c" psql -q -X -v ON_ERROR_STOP=1 "$dsn" \
        -c "INSERT INTO mailroom.accounts (email, login) VALUES ('a@example.test','a')" && return 0
      return 1
    fi
    sleep 1
  done
  return 1
}

# $1 catcher container; waits up to 60 s for a@example.test's email.
wait_mail() {
  local c=$1 got=""
  for _ in $(seq 1 120); do
    got=$(find_mail "$c" a@example.test || true)
    [ -n "$got" ] && { echo "$got"; return 0; }
    sleep 0.5
  done
  return 1
}

BUF=$ROOT/.cache/node/node_modules/.bin/buf
# gRPC health check of $1 (container) on port $2 from the host, over the bridge network:
# plaintext, or with $3 TLS trusting only this run's CA and expecting server name $3.
grpc_health() {
  local ip tls=(--http2-prior-knowledge) scheme=http
  ip=$(podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1")
  [ -n "${3:-}" ] && tls=(--cacert "$CTX/tls/ca.crt" --servername "$3") scheme=https
  timeout 30 "$BUF" curl --protocol grpc "${tls[@]}" \
    --schema "$ROOT/proto/grpc/health/v1/health.proto" \
    -d '{}' "$scheme://$ip:$2/grpc.health.v1.Health/Check" 2>&1 || true
}

# $1 label, $2 collector's container, $3 sender's container, $4 server name in the
# certificate: the collector's port 50051 serves TLS with this run's certificate and refuses
# plaintext and a client expecting another name; its port 50053 answers health in plaintext
# (kube.yaml's readiness probe); the sender's 50052 is SERVING (it has reached the collector).
# A delivery report signed with the run's MAILROOM_FEEDBACK_HTTP_SECRET, posted over TLS through
# the feedback proxy by the catcher's python (the secret on stdin, never on a command line),
# trusting the run's feedback CA ($3, copied in): "200 unmatched" (no such message) shows TLS,
# the proxy's routing and limits, and the collector's report path working together. Retried
# for up to 30 s while the proxy or the collector starts.
FEEDBACK_REPORT_PY='
import base64, hashlib, hmac, json, ssl, sys, time, urllib.error, urllib.request
key = base64.b64decode(sys.stdin.read().strip()[len("whsec_"):])
body = json.dumps({"type": "email.bounced", "message_id": "no-such-message",
                   "recipients": ["nobody@example.test"], "bounce_type": "transient"}).encode()
mid, ts = "evt_container_%d" % time.time_ns(), str(int(time.time()))
sig = base64.b64encode(hmac.new(key, b"%s.%s.%s" % (mid.encode(), ts.encode(), body),
                                hashlib.sha256).digest()).decode()
req = urllib.request.Request(sys.argv[1], data=body, method="POST", headers={
    "webhook-id": mid, "webhook-timestamp": ts, "webhook-signature": "v1," + sig,
    "Content-Type": "application/json"})
ctx = ssl.create_default_context(cafile=sys.argv[2])
ctx.check_hostname = False  # the certificate names feedback.example.test
try:
    r = urllib.request.urlopen(req, context=ctx, timeout=10)
    print(r.status, r.read().decode().strip())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
except Exception as e:
    print(0, type(e).__name__)
'
check_feedback_proxy() {  # LABEL CONTAINER URL
  local got="" i
  podman cp "$CTX/feedback-tls/ca.crt" "$2:/tmp/feedback-ca.crt" >/dev/null 2>&1
  for i in $(seq 30); do
    got=$(printf '%s' "$FEEDBACK" | podman exec -i "$2" python3 -c "$FEEDBACK_REPORT_PY" "$3" \
          /tmp/feedback-ca.crt 2>&1)
    [ "$got" = "200 unmatched" ] && break
    sleep 1
  done
  if [ "$got" = "200 unmatched" ]; then
    pass "$1: a signed delivery report through the feedback proxy (TLS) was answered: $got"
  else
    fail "$1: a delivery report through the feedback proxy: ${got:-no answer}"
  fi
}

check_grpc_tls() {
  local label=$1 c=$2 s=$3 name=$4 tls plain wrong h3 h2
  tls=$(grpc_health "$c" 50051 "$name")
  plain=$(grpc_health "$c" 50051)
  wrong=$(grpc_health "$c" 50051 not-the-collector)
  if grep -q '"SERVING"' <<<"$tls" && ! grep -q SERVING <<<"$plain" && ! grep -q SERVING <<<"$wrong"; then
    pass "$label: collector:50051 serves TLS for \"$name\" only (plaintext refused: $(grep -o '"message": *"[^"]*"' <<<"$plain" | cut -c1-100); wrong name refused)"
  else
    fail "$label: collector:50051: TLS: $tls / plaintext: $plain / wrong name: $wrong"
  fi
  h3=$(grpc_health "$c" 50053)
  h2=$(grpc_health "$s" 50052)
  if grep -q '"SERVING"' <<<"$h3" && grep -q '"SERVING"' <<<"$h2"; then
    pass "$label: gRPC health SERVING in plaintext on collector:50053 and sender:50052 (what kube.yaml probes)"
  else
    fail "$label: gRPC health: collector:50053: $h3 / sender:50052: $h2"
  fi
}

# $1 label, $2 collector's container: its start line says TLS is on.
expect_tls_log() {
  local started
  started=$(podman logs "$2" 2>&1 | grep 'msg="collector started"' | tail -1)
  if grep -q ' tls=on' <<<"$started"; then
    pass "$1: the collector started with tls=on"
  else
    fail "$1: collector's start line: ${started:-none}"
  fi
}

# Keeps the logs of containers "$@" in $W/log-CONTAINER (kept with MAILROOM_KEEP=1).
save_logs() {
  local c
  for c in "$@"; do podman logs "$c" >"$W/log-$c" 2>&1 || true; done
}

show_logs() {
  for c in "$@"; do
    echo "--- logs of $c"
    podman logs --tail 15 "$c" 2>&1 | sed 's/^/    /' || true
  done
}

# --- compose stack ------------------------------------------------------------------------------
t=$(now)
note "podman-compose up -d (project $PROJECT)"
if ! "${COMPOSE[@]}" up -d >"$W/compose-up.log" 2>&1; then
  tail -20 "$W/compose-up.log"
  fail "podman-compose up"
  exit 1
fi
C() { echo "${PROJECT}_$1_1"; }
if insert_account "$(C postgres)" postgresql://postgres@127.0.0.1/postgres; then
  pass "compose: migrations applied, account inserted after $(since "$t") s"
else
  fail "compose: could not insert the account"
fi
if got=$(wait_mail "$(C mailcatcher)"); then
  pass "compose: email for a@example.test with a token link in the catcher: $got"
  note "TIMING compose up -> email delivered: $(since "$t") s"
else
  fail "compose: no email for a@example.test with token= within 60 s"
  show_logs "$(C migrate)" "$(C collector)" "$(C sender)" "$(C mailcatcher)"
fi
st=$(podman inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$(C migrate)" 2>&1)
[ "$st" = "exited 0" ] && pass "compose: migrate ran once and exited 0" || fail "compose: migrate state: $st"
check_feedback_proxy compose "$(C mailcatcher)" https://feedback-proxy:8443/feedback/http
users=$(for s in postgres mailcatcher collector sender feedback-proxy; do
  podman top "$(C "$s")" user comm 2>/dev/null | awk 'NR > 1 && $2 != "catatonit" {print $1}'
done | sort -u | tr '\n' ' ')
case " $users " in
  *" root "*|"  ") fail "compose: service processes run as: ${users:-?}" ;;
  *) pass "compose: no service process runs as root (users: ${users% })" ;;
esac
expect_tls_log "compose" "$(C collector)"
if [ -x "$BUF" ]; then
  check_grpc_tls compose "$(C collector)" "$(C sender)" collector
fi
save_logs "$(C collector)" "$(C sender)"
echo "info: compose: restarts: collector $(podman inspect -f '{{.RestartCount}}' "$(C collector)"), sender $(podman inspect -f '{{.RestartCount}}' "$(C sender)")"
"${COMPOSE[@]}" down -v -t 1 >"$W/compose-down.log" 2>&1 || fail "compose: down"
left=$(podman ps -aq | wc -l)
[ "$left" = 0 ] && pass "compose: down removed every container" || fail "compose: $left containers left after down"

# --- podman play kube: kube.yaml's containers in one pod ----------------------------------------
# podman play kube (4.3) runs Deployments as one pod each (replicas and Services are not
# implemented), so the check merges kube.yaml's containers into one Pod where they share
# localhost: the migrate init container becomes a plain container (an init container would run
# before PostgreSQL, which is in the same pod), the Secret gets this run's values, the
# addresses point at 127.0.0.1, and the name mailroom-collector (the sender's address, which
# its TLS check expects in the certificate) resolves to 127.0.0.1 through hostAliases. Secret
# volumes become hostPath directories holding the Secret's items with the modes and group
# (fsGroup) Kubernetes would give them. PostgreSQL and the catcher are added from the test images.
# The Secret: Podman 4.3 stores a played `kind: Secret` as YAML but reads secretKeyRef values as
# JSON (containers/podman#16623), so the test creates the podman secret itself in
# the form secretKeyRef reads (a JSON object of base64 values) with the keys of kube.yaml's Secret.
# The database URL is kube.yaml's own with only the credentials, host and database replaced:
# its TLS options (sslmode=verify-full, sslrootcert in the mounted Secret mailroom-db-ca) stay,
# the test PostgreSQL serves TLS with a certificate for `postgres` (resolved to the pod's
# 127.0.0.1 through hostAliases) signed by a CA made for the run, and that CA is the Secret's.
t=$(now)
bash "$HERE/make-test-cert.sh" "$W/db-tls" postgres >/dev/null
chown 999:999 "$W/db-tls/tls.key"  # the test PostgreSQL's uid; PostgreSQL wants it 0600
(umask 077
 KUBE_KEY=$KEY KUBE_TOKEN=$TOKEN KUBE_FEEDBACK=$FEEDBACK /usr/bin/python3 - "$HERE/kube.yaml" \
   "$KUBE_FILE" "$W/secret.json" "$CTX/tls" "$W/kube-volumes" "$W/db-tls" "$CTX/feedback-tls" <<'EOF'
import base64, json, os, shutil, sys, urllib.parse, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs}
secret = kinds[("Secret", "mailroom-secrets")]
url = urllib.parse.urlsplit(secret["stringData"]["MAILROOM_DATABASE_URL"])
query = urllib.parse.parse_qs(url.query)
assert query.get("sslmode") == ["verify-full"], url.query
assert query.get("sslrootcert") == ["/etc/mailroom/db-ca/ca.crt"], url.query
values = {
    "MAILROOM_SECRET_KEY": os.environ["KUBE_KEY"],
    "MAILROOM_SUBSCRIBER_TOKENS": os.environ["KUBE_TOKEN"] + "@mailroom:sender",
    "MAILROOM_COLLECTOR_TOKEN": os.environ["KUBE_TOKEN"],
    "MAILROOM_FEEDBACK_HTTP_SECRET": os.environ["KUBE_FEEDBACK"],
    "MAILROOM_DATABASE_URL": urllib.parse.urlunsplit(
        (url.scheme, "postgres@postgres:5432", "/postgres", url.query, "")),
}
assert sorted(secret["stringData"]) == sorted(values), secret["stringData"].keys()
json.dump({k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
          open(sys.argv[3], "w"))
override = {
    "MAILROOM_SMTP_URL": "smtp://127.0.0.1:2525",
    "MAILROOM_FROM": "Example <no-reply@example.test>",
    "MAILROOM_LINK_BASE_URL": "https://app.example.test",
    "MAILROOM_BATCH_TIMEOUT": "200",
}
db_tls = sys.argv[6]
containers = [
    {"name": "postgres", "image": "localhost/mailroom-postgres:latest",
     "args": ["-c", "ssl=on", "-c", "ssl_cert_file=/etc/pg-tls/tls.crt",
              "-c", "ssl_key_file=/etc/pg-tls/tls.key"],
     "volumeMounts": [{"name": "pg-tls", "mountPath": "/etc/pg-tls", "readOnly": True}]},
    {"name": "mailcatcher", "image": "localhost/mailroom-catcher:latest"},
]
volumes = [{"name": "pg-tls", "hostPath": {"path": db_tls, "type": "Directory"}}]
tls_files, volume_root = sys.argv[4], sys.argv[5]
# Where each Secret volume's items come from: the run's collector certificate, the run's
# database CA, the run's feedback proxy certificate.
secret_files = {"mailroom-collector-tls": tls_files, "mailroom-db-ca": db_tls,
                "mailroom-feedback-tls": sys.argv[7]}
for dep, replicas in (("mailroom-collector", 2), ("mailroom-sender", 2)):
    d = kinds[("Deployment", dep)]
    assert d["spec"]["replicas"] == replicas, dep
    spec = d["spec"]["template"]["spec"]
    pod_sc = spec.get("securityContext", {})
    for v in spec.get("volumes", []):
        assert v["name"] not in [x["name"] for x in volumes], v["name"]
        sec = v["secret"]
        assert sec["secretName"] in secret_files, sec
        host = os.path.join(volume_root, v["name"])
        os.makedirs(host)
        os.chmod(host, 0o755)
        for item in sec["items"]:
            dst = os.path.join(host, item["path"])
            shutil.copyfile(os.path.join(secret_files[sec["secretName"]], item["key"]), dst)
            os.chown(dst, 0, pod_sc.get("fsGroup", 0))
            os.chmod(dst, item.get("mode", sec.get("defaultMode", 0o644)))
        volumes.append({"name": v["name"], "hostPath": {"path": host, "type": "Directory"}})
    for c in spec.get("initContainers", []) + spec["containers"]:
        sc = dict(c.get("securityContext", {}))
        sc.update({k: v for k, v in pod_sc.items() if k in ("runAsUser", "runAsGroup", "runAsNonRoot")})
        c["securityContext"] = sc
        env = {e["name"]: e for e in c.get("env", [])}
        for k, v in override.items():
            if k in env or (k == "MAILROOM_BATCH_TIMEOUT" and c["name"] == "collector"):
                env[k] = {"name": k, "value": v}
        if c["name"] == "sender":
            env["MAILROOM_SMTP_ALLOW_PLAIN"] = {"name": "MAILROOM_SMTP_ALLOW_PLAIN", "value": "true"}
        c["env"] = list(env.values())
        containers.append(c)
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "mailroom-kube", "labels": {"app.kubernetes.io/name": "mailroom"}},
       "spec": {"restartPolicy": "OnFailure", "containers": containers, "volumes": volumes,
                "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["mailroom-collector", "postgres"]}]}}
yaml.safe_dump(pod, open(sys.argv[2], "w"), sort_keys=False)
EOF
)
podman secret create mailroom-secrets "$W/secret.json" >/dev/null
rm -f "$W/secret.json"
note "podman play kube (single-pod variant of kube.yaml)"
K() { echo "mailroom-kube-$1"; }
if podman play kube "$KUBE_FILE" >"$W/kube-play.log" 2>&1; then
  pass "kube: podman play kube started pod mailroom-kube ($(podman pod inspect -f '{{.NumContainers}}' mailroom-kube) containers with infra)"
else
  fail "kube: podman play kube"
  sed 's/^/    /' "$W/kube-play.log" | tail -20
  exit 1
fi
if insert_account "$(K postgres)" postgresql://postgres@127.0.0.1/postgres; then
  pass "kube: migrate container applied the migrations, account inserted after $(since "$t") s"
else
  fail "kube: could not insert the account"
fi
if got=$(wait_mail "$(K mailcatcher)"); then
  pass "kube: email for a@example.test with a token link in the catcher: $got"
  note "TIMING play kube -> email delivered: $(since "$t") s"
else
  fail "kube: no email for a@example.test with token= within 60 s"
  show_logs "$(K migrate)" "$(K collector)" "$(K sender)"
fi
# Every client connection PostgreSQL has over TCP (the collector's; psql here uses the socket)
# is TLS: kube.yaml's sslmode=verify-full was honoured, with the run's CA and the name postgres.
tls_counts=$(podman exec "$(K postgres)" psql -qAt -X -h /var/run/postgresql -U postgres -c \
  "SELECT count(*) FILTER (WHERE s.ssl) || ' ' || count(*) FILTER (WHERE NOT s.ssl)
     FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.client_addr IS NOT NULL" 2>&1)
if [[ "$tls_counts" =~ ^([1-9][0-9]*)\ 0$ ]]; then
  pass "kube: the collector's ${BASH_REMATCH[1]} database connections are TLS (sslmode=verify-full), none in clear"
else
  fail "kube: database connections TLS / in clear: $tls_counts"
fi
expect_tls_log kube "$(K collector)"
check_feedback_proxy kube "$(K mailcatcher)" https://127.0.0.1:8443/feedback/http
if [ -x "$BUF" ]; then
  infra=$(podman pod inspect -f '{{.InfraContainerID}}' mailroom-kube)
  check_grpc_tls kube "$infra" "$infra" mailroom-collector
fi
save_logs "$(K collector)" "$(K sender)"
for c in collector sender; do
  echo "info: kube: podman's healthcheck for $c (from its probes): $(podman inspect -f '{{.Config.Healthcheck}}' "$(K $c)" 2>&1)"
done
podman play kube --down "$KUBE_FILE" >/dev/null 2>&1 || fail "kube: play kube --down"

echo
note "TIMING total: $(since "$T0") s"
if [ "$FAILS" = 0 ]; then
  echo "container_test: PASS"
else
  echo "container_test: FAIL ($FAILS)"
  exit 1
fi
