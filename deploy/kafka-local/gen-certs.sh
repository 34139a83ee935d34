#!/usr/bin/env bash
# A throw-away PKI for the secured local broker (kafka.sh with KAFKA_SECURITY=secured), valid 2 days:
#   gen-certs.sh DIR  ->  DIR/ca.pem, ca.key: the CA the broker trusts
#                         DIR/broker.pem: the broker's key + certificate (SAN IP:127.0.0.1, DNS:localhost) + CA
#                         DIR/alice.crt, alice.key: a client certificate (CN=alice) signed by the CA, its key
#                           encrypted with $CLIENT_KEY_PASSWORD (default alice-keypass)
#                         DIR/rogue-ca.pem, mallory.crt, mallory.key: a CA the broker does not trust, and a
#                           client certificate it signed
# openssl only; nothing is sent anywhere.
set -euo pipefail
D="${1:?usage: gen-certs.sh DIR}"; mkdir -p "$D"; cd "$D"
DAYS=2
KEYPASS="${CLIENT_KEY_PASSWORD:-alice-keypass}"

# CA (and a rogue CA that the broker does not trust)
for ca in ca rogue-ca; do
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$DAYS" \
    -keyout "$ca.key" -out "$ca.pem" -subj "/CN=$ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
done

# Broker: unencrypted PKCS#8 key, cert with SAN IP:127.0.0.1,DNS:localhost
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out broker.key 2>/dev/null
openssl req -new -key broker.key -subj "/CN=broker" -out broker.csr
cat > broker.ext <<X
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
X
openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
  -days "$DAYS" -sha256 -extfile broker.ext -out broker.crt 2>/dev/null
# Kafka PEM keystore file = private key + cert chain in one file
cat broker.key broker.crt ca.pem > broker.pem
# Client certs: alice (signed by CA), mallory (signed by rogue CA); encrypted PKCS#8 keys
client() { # name signer
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 \
    -aes-256-cbc -pass "pass:$KEYPASS" -out "$1.key" 2>/dev/null
  openssl req -new -key "$1.key" -passin "pass:$KEYPASS" -subj "/CN=$1" -out "$1.csr"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > client.ext
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
    -days "$DAYS" -sha256 -extfile client.ext -out "$1.crt" 2>/dev/null
}
client alice ca
client mallory rogue-ca
rm -f ./*.csr ./*.srl broker.ext client.ext
echo "certs in $PWD"
