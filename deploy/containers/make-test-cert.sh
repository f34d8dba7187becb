#!/usr/bin/env bash
# A throwaway CA and a collector server certificate signed by it, for the test stack and for
# trying the manifests out; a real deployment uses its own CA (or cert-manager). The CA's key
# is deleted once the certificate is signed, so nothing else can ever be signed by that CA.
#
#   bash deploy/containers/make-test-cert.sh DIR [DNS-NAME ...]
#
# DNS names (subjectAltName) default to `collector` (compose.yaml's service) and
# `mailroom-collector` (kube.yaml's Service); give the name in the sender's
# MAILROOM_COLLECTOR_ADDRESS (e.g. mailroom-collector.NAMESPACE.svc) if it differs. Writes, in
# the key names of a Kubernetes TLS Secret:
#   DIR/ca.crt    the CA certificate: the sender's MAILROOM_COLLECTOR_CA
#   DIR/tls.crt   the server certificate: the collector's MAILROOM_TLS_CERT
#   DIR/tls.key   its private key (mode 0600): the collector's MAILROOM_TLS_KEY
# Valid for 30 days. ECDSA P-256.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [DNS-NAME ...]" >&2; exit 2; }
DIR=$1
shift
NAMES=("$@")
((${#NAMES[@]})) || NAMES=(collector mailroom-collector)
mkdir -p "$DIR"
umask 077
CA_KEY=$(mktemp)
CSR=$(mktemp)
EXT=$(mktemp)
trap 'rm -f "$CA_KEY" "$CSR" "$EXT" "$DIR/ca.srl"' EXIT
san=$(printf 'DNS:%s,' "${NAMES[@]}")
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -subj "/CN=mailroom test CA" -keyout "$CA_KEY" -out "$DIR/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=${NAMES[0]}" -keyout "$DIR/tls.key" -out "$CSR" 2>/dev/null
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
  "${san%,}" >"$EXT"
openssl x509 -req -in "$CSR" -CA "$DIR/ca.crt" -CAkey "$CA_KEY" -CAserial "$DIR/ca.srl" \
  -CAcreateserial -days 30 -extfile "$EXT" -out "$DIR/tls.crt" 2>/dev/null
chmod 0644 "$DIR/ca.crt" "$DIR/tls.crt"
chmod 0600 "$DIR/tls.key"
echo "make-test-cert: $DIR/{ca.crt,tls.crt,tls.key} for ${NAMES[*]}"
