#!/usr/bin/env bash
# Makes a test certificate authority for kolod's Peer plane and one
# certificate per daemon, signed by it:
#
#   tools/make_test_ca.sh OUTDIR [NAMES...]
#
# OUTDIR/ca.pem and OUTDIR/ca.key are the CA (made once; reused when
# present); for each NAME (default: "node"), OUTDIR/NAME.pem and
# OUTDIR/NAME.key are a certificate and key for both ends of a TLS link
# (serverAuth and clientAuth), with subject CN=NAME and subject alternative
# names 127.0.0.1, ::1, localhost and NAME. Give each daemon its pair and
# the CA:
#
#   kolod --peer_address=HOST:PORT --peer_tls_ca=OUTDIR/ca.pem \
#         --peer_tls_cert=OUTDIR/NAME.pem --peer_tls_key=OUTDIR/NAME.key
#
# Member daemons check that the coordinator's certificate names the host of
# the address they dial, so on a cluster set EXTRA_SANS to that host's
# addresses, e.g. EXTRA_SANS="IP:10.0.0.7,DNS:node7.cluster". Keys are
# EC P-256, certificates last DAYS days (default 30). For tests and for
# operators learning the setup; a production CA keeps its key elsewhere.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUTDIR [NAMES...]" >&2
  exit 2
fi
out="$1"
shift
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(node)
days="${DAYS:-30}"
mkdir -p "$out"
umask 077

if [[ ! -f "$out/ca.pem" || ! -f "$out/ca.key" ]]; then
  openssl ecparam -name prime256v1 -genkey -noout -out "$out/ca.key"
  openssl req -x509 -new -key "$out/ca.key" -sha256 -days "$days" \
    -subj "/CN=kolo test peer CA $(basename "$out")" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$out/ca.pem" 2>/dev/null
fi

for name in "${names[@]}"; do
  if [[ ! "$name" =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "$0: a name is letters, digits, '.', '_' or '-': $name" >&2
    exit 2
  fi
  sans="IP:127.0.0.1,IP:::1,DNS:localhost,DNS:$name"
  [[ -z "${EXTRA_SANS:-}" ]] || sans="$sans,$EXTRA_SANS"
  ext="$out/$name.ext"
  cat >"$ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$sans
EXT
  openssl ecparam -name prime256v1 -genkey -noout -out "$out/$name.key.tmp"
  # PKCS#8, which every TLS library reads.
  openssl pkcs8 -topk8 -nocrypt -in "$out/$name.key.tmp" -out "$out/$name.key"
  rm -f "$out/$name.key.tmp"
  openssl req -new -key "$out/$name.key" -subj "/CN=$name" -out "$out/$name.csr" 2>/dev/null
  openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
    -CAcreateserial -sha256 -days "$days" -extfile "$ext" -out "$out/$name.pem" 2>/dev/null
  rm -f "$out/$name.csr" "$ext"
done
rm -f "$out/ca.srl"
# The certificates are public; the keys stay 0600.
chmod 0644 "$out"/*.pem
