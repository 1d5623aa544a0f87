#!/usr/bin/env bash
# Regenerates the test PEMs of this folder (see README.md). Needs openssl 3.
# Every key is EC P-256 (PKCS#8); every certificate is valid for 100 years.
set -euo pipefail
cd "$(dirname "$0")"
DAYS=36500
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

ca() { # name subject
  key "$1-key.pem"
  openssl req -x509 -new -key "$1-key.pem" -subj "/CN=$2" -days "$DAYS" -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$1.pem"
}

leaf() { # name subject ca extensions
  key "$1-key.pem"
  openssl req -new -key "$1-key.pem" -subj "/CN=$2" -out "$tmp/$1.csr"
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" "$4" > "$tmp/$1.ext"
  openssl x509 -req -in "$tmp/$1.csr" -CA "$3.pem" -CAkey "$3-key.pem" -CAcreateserial \
    -days "$DAYS" -sha256 -extfile "$tmp/$1.ext" -out "$1.pem"
}

ca ca "mcm-rs test CA"
ca other-ca "another test CA"
leaf server "mcm-rs test driver" ca "extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
leaf client "mcm-rs test controller" ca "extendedKeyUsage=clientAuth"
leaf other-client "a client of another CA" other-ca "extendedKeyUsage=clientAuth"
rm -f ./*.srl ca-key.pem other-ca-key.pem
