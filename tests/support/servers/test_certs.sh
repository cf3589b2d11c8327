# shellcheck shell=bash
# Sourced by the server scripts (redis.sh, postgres.sh): the test certificates their TLS ports
# use. The sourcing script defines die MESSAGE. OPENSSL names the openssl CLI (default: the one
# on PATH).

# make_test_certs DIR CLIENT_CN: in DIR (created when missing), EC P-256 keys (quick to make) and
# certificates valid for two days:
#   ca.crt/.key          the test CA
#   other-ca.crt/.key    an unrelated CA that signed nothing, for tests of a wrong trust anchor
#   server.crt/.key      signed by the test CA for DNS:localhost only (so verify-full to
#                        127.0.0.1 is a hostname mismatch), serverAuth
#   client.crt/.key      signed by the test CA with the subject /CN=CLIENT_CN, clientAuth
# The keys are mode 600 (servers and clients refuse a key others can read); openssl's output
# goes to DIR/openssl.log.
make_test_certs() {
  local tls=$1 client_cn=$2
  local openssl=${OPENSSL:-openssl} log="$1/openssl.log"
  command -v "$openssl" >/dev/null 2>&1 ||
    die "$openssl not found (install Debian's openssl package)"
  mkdir -p "$tls" || die "cannot create $tls"
  : >"$log"
  local ca
  for ca in ca other-ca; do
    "$openssl" req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
      -keyout "$tls/$ca.key" -out "$tls/$ca.crt" -subj "/CN=idempotency test $ca" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
      >>"$log" 2>&1 || die "openssl: making the $ca failed: $(tail -n 1 "$log")"
  done
  printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    >"$tls/server.ext"
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >"$tls/client.ext"
  local who subject
  for who in server client; do
    subject="/CN=idempotency test server"
    [[ $who == server ]] || subject="/CN=$client_cn"
    "$openssl" req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -keyout "$tls/$who.key" -out "$tls/$who.csr" -subj "$subject" >>"$log" 2>&1 ||
      die "openssl: making the $who key failed: $(tail -n 1 "$log")"
    "$openssl" x509 -req -in "$tls/$who.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
      -set_serial "0x$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" -days 2 \
      -extfile "$tls/$who.ext" -out "$tls/$who.crt" >>"$log" 2>&1 ||
      die "openssl: signing the $who certificate failed: $(tail -n 1 "$log")"
  done
  chmod 600 "$tls"/*.key
}

# url_path PATH: PATH with the characters a URL's query cannot hold as such percent-encoded.
url_path() {
  local p=${1//%/%25}
  p=${p//&/%26}
  p=${p//#/%23}
  p=${p//\?/%3F}
  p=${p//@/%40}
  printf '%s' "${p// /%20}"
}
