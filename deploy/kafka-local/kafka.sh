#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft, combined broker+controller) for
# development and integration tests, run from the Apache Kafka jars that Maven
# fetches from Maven Central (see pom.xml beside this script). No Docker.
# KAFKA_BROKERS=3 makes it a cluster of three such nodes instead (see "Cluster" below).
#
#   deploy/kafka-local/kafka.sh up       start (idempotent), wait until it answers Metadata
#   deploy/kafka-local/kafka.sh down     stop by PID (SIGTERM, then SIGKILL after a bound)
#   deploy/kafka-local/kafka.sh status   exit 0 if running and answering, 3 if stopped, 1 otherwise
#   deploy/kafka-local/kafka.sh reset    down + delete the data (topics, offsets) and logs
#
# Environment:
#   KAFKA_PORT             PLAINTEXT listener on 127.0.0.1 (default 9092)
#   KAFKA_CONTROLLER_PORT  KRaft controller listener on 127.0.0.1 (default KAFKA_PORT+1)
#   KAFKA_STATE_DIR        lib/, data/, logs/, pid file, configs (default <repo>/.local/kafka)
#   KAFKA_HEAP             JVM heap flags (default "-Xmx512m -Xms256m")
#   KAFKA_AUTO_CREATE      "false" disables auto.create.topics.enable (default true)
#   KAFKA_START_TIMEOUT    seconds `up` waits for readiness (default 60)
#   KAFKA_STOP_TIMEOUT     seconds `down` waits after SIGTERM before SIGKILL (default 20)
#   KAFKA_FEATURES         feature levels set when the storage is first formatted, "name=level,..."
#                          (e.g. "share.version=0": a cluster without share groups)
#   KAFKA_CDS              "false" disables the class-data-sharing archive (default true): the
#                          first start records the classes it loads into lib/kafka.jsa when it
#                          is stopped, and later starts map it, which cuts start-up by ~40%.
#   KAFKA_SECURITY         "secured" adds, beside the PLAINTEXT listener, a SASL_SSL listener
#                          (SCRAM-SHA-512) on KAFKA_SASL_SSL_PORT (default KAFKA_PORT+2) and an
#                          mTLS listener (client certificate required) on KAFKA_SSL_PORT (default
#                          KAFKA_PORT+3), with StandardAuthorizer and no access without an ACL.
#                          The PLAINTEXT listener stays, for the broker itself and for tests' admin:
#                          its ANONYMOUS principal is a super user (loopback only: a test broker).
#   KAFKA_PKI_DIR          secured: ca.pem and broker.pem (key + chain), made by gen-certs.sh
#                          beside this script when missing (default <state dir>/pki)
#   KAFKA_SCRAM_USERS      secured: "user:password,..." created at format time (default
#                          "admin:admin-secret")
#   KAFKA_OAUTH_JWKS_URL   secured: also an OAUTHBEARER listener (SASL_SSL) on KAFKA_OAUTH_PORT
#                          (default KAFKA_PORT+4), which checks each token's signature against this
#                          JWKS (the identity provider must answer when the broker starts), its issuer
#                          against KAFKA_OAUTH_ISSUER and its audience against KAFKA_OAUTH_AUDIENCE
#                          (default "kafka"); the principal is the token's subject
#
# One node of a cluster (set by the cluster commands below for each of their nodes; by hand only
# to run a node of a cluster laid out differently):
#   KAFKA_NODE_ID          node.id (default 1)
#   KAFKA_QUORUM_VOTERS    controller.quorum.voters, "id@host:port,..." (default this node alone)
#   KAFKA_CLUSTER_ID       KRaft cluster id given to `kafka-storage format`, the same on every node
#                          (default a fixed one)
#   KAFKA_REPLICATION      replication factor of every topic, the offsets and the transaction and
#                          share-group state (default 1); min.insync.replicas is one less (at least 1)
#   KAFKA_LIB_DIR          the jars and the CDS archive (default <state dir>/lib), which several
#                          nodes may share: then node 1 alone records one (into its state dir, kept
#                          at its first clean stop) and every node maps it from then on
#
# Cluster: KAFKA_BROKERS=N (2-9; default 1, the single node above) makes up/down/status/reset act
# on N combined broker+controller nodes, all N of them voters, with KAFKA_REPLICATION defaulting to
# N (at most 3), hence min.insync.replicas 2 with three nodes. Node i (1..N) listens PLAINTEXT on
# KAFKA_PORT+2(i-1) and CONTROLLER on KAFKA_PORT+2(i-1)+1, keeps its state in <state dir>/node-i
# and shares the jars in <state dir>/lib; KAFKA_HEAP defaults to "-Xmx384m -Xms128m" per node.
# `up` starts the nodes at once (a quorum needs a majority, so no node can be awaited alone
# first), waits until each answers Metadata listing itself, and prints the bootstrap list
# "127.0.0.1:P1,127.0.0.1:P2,...". KAFKA_NODE=i restricts a command to node i: `up` then starts
# that node back into the running cluster, and `down` stops it alone. KAFKA_SECURITY=secured is
# single-node only, and KAFKA_CONTROLLER_PORT is ignored.
#
# Everything listens on 127.0.0.1 only. Processes are started and stopped by PID only.
set -euo pipefail

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd -- "$SCRIPT_DIR/../.." && pwd -P)"
POM="$SCRIPT_DIR/pom.xml"

HOST=127.0.0.1
KAFKA_PORT="${KAFKA_PORT:-9092}"
[[ "$KAFKA_PORT" =~ ^[0-9]{1,5}$ ]] || {
    echo "kafka-local: error: KAFKA_PORT must be a TCP port number, got '$KAFKA_PORT'" >&2
    exit 1
}
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((10#$KAFKA_PORT + 1))}"
STATE_DIR="${KAFKA_STATE_DIR:-$REPO_ROOT/.local/kafka}"
[[ "$STATE_DIR" == /* ]] || STATE_DIR="$PWD/$STATE_DIR"
BROKERS="${KAFKA_BROKERS:-1}"
[[ "$BROKERS" =~ ^[1-9]$ ]] || {
    echo "kafka-local: error: KAFKA_BROKERS must be 1-9, got '$BROKERS'" >&2
    exit 1
}
if ((BROKERS > 1)); then
    KAFKA_HEAP="${KAFKA_HEAP:--Xmx384m -Xms128m}"
else
    KAFKA_HEAP="${KAFKA_HEAP:--Xmx512m -Xms256m}"
fi
KAFKA_AUTO_CREATE="${KAFKA_AUTO_CREATE:-true}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-60}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-20}"
KAFKA_CDS="${KAFKA_CDS:-true}"
KAFKA_SECURITY="${KAFKA_SECURITY:-plain}"
KAFKA_FEATURES="${KAFKA_FEATURES:-}"
KAFKA_SASL_SSL_PORT="${KAFKA_SASL_SSL_PORT:-$((10#$KAFKA_PORT + 2))}"
KAFKA_SSL_PORT="${KAFKA_SSL_PORT:-$((10#$KAFKA_PORT + 3))}"
KAFKA_SCRAM_USERS="${KAFKA_SCRAM_USERS:-admin:admin-secret}"
KAFKA_OAUTH_JWKS_URL="${KAFKA_OAUTH_JWKS_URL:-}"
KAFKA_OAUTH_ISSUER="${KAFKA_OAUTH_ISSUER:-}"
KAFKA_OAUTH_AUDIENCE="${KAFKA_OAUTH_AUDIENCE:-kafka}"
KAFKA_OAUTH_PORT="${KAFKA_OAUTH_PORT:-$((10#$KAFKA_PORT + 4))}"

LIB_DIR="${KAFKA_LIB_DIR:-$STATE_DIR/lib}"
LIB_MARKER="$LIB_DIR/.complete"
CDS_ARCHIVE="$LIB_DIR/kafka.jsa"
if [[ -n "${KAFKA_LIB_DIR:-}" ]]; then
    CDS_RECORDING="$STATE_DIR/kafka.jsa.new" # jars shared by several nodes: each records its own
else
    CDS_RECORDING="$CDS_ARCHIVE.new"
fi
DATA_DIR="$STATE_DIR/data"
LOG_DIR="$STATE_DIR/logs"
PID_FILE="$STATE_DIR/kafka.pid"
PKI_DIR="${KAFKA_PKI_DIR:-$STATE_DIR/pki}"
PROPS="$STATE_DIR/server.properties"
LOG4J_CONF="$STATE_DIR/log4j2.xml"
LOCK_FILE="$STATE_DIR/.lock"
SERVER_LOG="$LOG_DIR/server.log"
STDOUT_LOG="$LOG_DIR/kafka.out"

# A fixed KRaft cluster id (base64url of 16 bytes): the data dirs are local.
CLUSTER_ID="${KAFKA_CLUSTER_ID:-bWljcm9iYXRjaC1kZXYwMQ}"
NODE_ID="${KAFKA_NODE_ID:-1}"
QUORUM_VOTERS="${KAFKA_QUORUM_VOTERS:-$NODE_ID@$HOST:$KAFKA_CONTROLLER_PORT}"
REPLICATION="${KAFKA_REPLICATION:-$((BROKERS < 3 ? BROKERS : 3))}"

log() { printf 'kafka-local: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

case "$KAFKA_SECURITY" in
plain) SECURED=false ;;
secured) SECURED=true ;;
*)
    echo "kafka-local: error: KAFKA_SECURITY must be plain or secured, got '$KAFKA_SECURITY'" >&2
    exit 1
    ;;
esac

for port_var in KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_SASL_SSL_PORT KAFKA_SSL_PORT KAFKA_OAUTH_PORT; do
    if ! [[ "${!port_var}" =~ ^[0-9]{1,5}$ ]] || ((10#${!port_var} < 1 || 10#${!port_var} > 65535)); then
        die "$port_var must be a TCP port number, got '${!port_var}'"
    fi
done
[[ "$KAFKA_PORT" != "$KAFKA_CONTROLLER_PORT" ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must differ"
[[ "$NODE_ID" =~ ^[0-9]{1,9}$ ]] || die "KAFKA_NODE_ID must be a number, got '$NODE_ID'"
[[ "$REPLICATION" =~ ^[1-9]$ ]] || die "KAFKA_REPLICATION must be 1-9, got '$REPLICATION'"
MIN_ISR=$((REPLICATION > 1 ? REPLICATION - 1 : 1))

# ---------------------------------------------------------------------------- helpers

# Serialise up/down/reset on one state dir (two test sessions starting at once).
take_lock() {
    mkdir -p "$STATE_DIR"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$LOCK_FILE"
        flock -w 180 9 || die "timed out waiting for the lock $LOCK_FILE"
    fi
}

read_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(tr -dc '0-9' <"$PID_FILE")"
    [[ -n "$pid" ]] || return 1
    printf '%s\n' "$pid"
}

# True if PID is alive AND is the broker started from this state dir (guards against PID reuse).
is_our_broker() {
    local pid="$1" args
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r "/proc/$pid/cmdline" ]]; then
        args="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    else
        args="$(ps -ww -o args= -p "$pid" 2>/dev/null)" || return 1
    fi
    [[ "$args" == *kafka.Kafka*"$PROPS"* ]]
}

# PID of the running broker of this state dir, or failure.
running_pid() {
    local pid
    pid="$(read_pid)" || return 1
    is_our_broker "$pid" || return 1
    printf '%s\n' "$pid"
}

# True if something accepts TCP connections on 127.0.0.1:$1.
port_open() {
    (exec 3<>"/dev/tcp/$HOST/$1") >/dev/null 2>&1
}

# The port this state dir's broker was configured with (from the last server.properties).
configured_port() {
    [[ -f "$PROPS" ]] || return 1
    sed -n 's|^listeners=PLAINTEXT://[^:]*:\([0-9]*\).*|\1|p' "$PROPS" | head -n 1
}

# Readiness: a real Kafka Metadata (v4) round trip whose live brokers include this node (probe.py), i.e.
# the broker is registered with the KRaft controller and unfenced. Uses only the Python standard library;
# falls back to "port open + 'Kafka Server started' in the log".
broker_ready() {
    local port="${1:-$KAFKA_PORT}"
    if command -v python3 >/dev/null 2>&1; then
        python3 "$SCRIPT_DIR/probe.py" "$HOST" "$port" "$NODE_ID" >/dev/null 2>&1
    else
        port_open "$port" && grep -q 'Kafka Server started' "$SERVER_LOG" 2>/dev/null
    fi
}

# Lines of server.log written before this start, so that failures show only this run's lines.
SERVER_LOG_SKIP=0

show_logs() {
    if [[ -s "$STDOUT_LOG" ]]; then
        log "---- last 40 lines of $STDOUT_LOG ----"
        tail -n 40 "$STDOUT_LOG" >&2
    fi
    if [[ -s "$SERVER_LOG" ]] && (($(wc -l <"$SERVER_LOG") > SERVER_LOG_SKIP)); then
        log "---- last 40 lines of $SERVER_LOG (this start) ----"
        tail -n "+$((SERVER_LOG_SKIP + 1))" "$SERVER_LOG" | tail -n 40 >&2
    fi
}

who_listens() {
    if command -v ss >/dev/null 2>&1; then
        ss -H -ltnp "sport = :$1" 2>/dev/null | head -n 3 >&2 || true
    fi
}

# ---------------------------------------------------------------------------- jars

pom_hash() {
    cksum <"$POM" | cut -d' ' -f1
}

ensure_jars() {
    local want
    want="$(pom_hash)"
    if [[ -f "$LIB_MARKER" && "$(cat "$LIB_MARKER")" == "$want" ]]; then
        return 0
    fi
    command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is needed to fetch the Kafka jars"
    log "fetching the Kafka jars with Maven into $LIB_DIR ..."
    local tmp="$STATE_DIR/lib.partial" out="$STATE_DIR/maven.out"
    rm -rf "$tmp"
    # -q still prints a few colour escapes with Debian's Maven 3.8: keep the output in a file.
    if ! mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
        -DoutputDirectory="$tmp" -DincludeScope=runtime >"$out" 2>&1; then
        cat "$out" >&2
        rm -rf "$tmp"
        die "Maven could not fetch the Kafka jars (output above, also in $out)"
    fi
    compgen -G "$tmp/kafka_2.13-*.jar" >/dev/null || die "Maven finished but no kafka_2.13 jar is in $tmp"
    printf '%s\n' "$want" >"$tmp/.complete"
    rm -rf "$LIB_DIR"
    mv "$tmp" "$LIB_DIR"
}

# ---------------------------------------------------------------------------- configs

write_configs() {
    mkdir -p "$DATA_DIR" "$LOG_DIR"
    local auto_create=true
    if [[ "${KAFKA_AUTO_CREATE,,}" == "false" || "$KAFKA_AUTO_CREATE" == "0" ]]; then
        auto_create=false
    fi
    local secured_listeners="" secured_map=""
    if [[ "$SECURED" == true ]]; then
        secured_listeners=",SASL_SSL://$HOST:$KAFKA_SASL_SSL_PORT,SSL://$HOST:$KAFKA_SSL_PORT"
        secured_map=",SASL_SSL:SASL_SSL,SSL:SSL"
        if [[ -n "$KAFKA_OAUTH_JWKS_URL" ]]; then
            secured_listeners+=",OAUTH://$HOST:$KAFKA_OAUTH_PORT"
            secured_map+=",OAUTH:SASL_SSL"
        fi
    fi
    cat >"$PROPS" <<EOF
# Written by deploy/kafka-local/kafka.sh on every 'up'; edits are overwritten.
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.voters=$QUORUM_VOTERS
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT$secured_listeners
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT$secured_listeners
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT$secured_map
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$DATA_DIR
num.partitions=1
default.replication.factor=$REPLICATION
min.insync.replicas=$MIN_ISR
auto.create.topics.enable=$auto_create
delete.topic.enable=true
offsets.topic.replication.factor=$REPLICATION
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$REPLICATION
transaction.state.log.min.isr=$MIN_ISR
share.coordinator.state.topic.replication.factor=$REPLICATION
share.coordinator.state.topic.min.isr=$MIN_ISR
group.initial.rebalance.delay.ms=0
# Single node on a small machine: fewer threads, quicker unfencing at start.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
broker.heartbeat.interval.ms=500
log.retention.hours=24
log.segment.bytes=67108864
# The log cleaner (compacting __consumer_offsets) keeps its dedupe buffer on the heap for good: 128 MiB
# by default, a quarter of this heap, which left G1 a few MiB of young space and made it collect and
# mark back to back under load (pauses of 100-300 ms that stalled every client). 16 MiB holds the keys
# of ~700,000 offset records per cleaning, far more than a development broker commits between two.
log.cleaner.dedupe.buffer.size=16777216
EOF
    if [[ "$SECURED" == true ]]; then
        cat >>"$PROPS" <<EOF
# KAFKA_SECURITY=secured
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:ANONYMOUS
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$PKI_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$PKI_DIR/ca.pem
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+).*\$/\$1/,DEFAULT
EOF
    fi
    if [[ "$SECURED" == true && -n "$KAFKA_OAUTH_JWKS_URL" ]]; then
        cat >>"$PROPS" <<EOF
# KAFKA_OAUTH_JWKS_URL: OAUTHBEARER on the OAUTH listener, tokens checked against the provider's keys
listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER
listener.name.oauth.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.oauth.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=$KAFKA_OAUTH_JWKS_URL
sasl.oauthbearer.expected.issuer=$KAFKA_OAUTH_ISSUER
sasl.oauthbearer.expected.audience=$KAFKA_OAUTH_AUDIENCE
EOF
    fi
    cat >"$LOG4J_CONF" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by deploy/kafka-local/kafka.sh. -->
<Configuration status="WARN">
  <Appenders>
    <RollingFile name="server" fileName="$SERVER_LOG" filePattern="$LOG_DIR/server.log.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="20 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Logger name="org.apache.kafka.common.config.AbstractConfig" level="WARN"/>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="kafka.network.RequestChannel\$" level="WARN"/>
    <Logger name="org.apache.kafka.controller" level="INFO"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.authorizer.logger" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
EOF
}

format_storage() {
    [[ -f "$DATA_DIR/meta.properties" ]] && return 0
    log "formatting KRaft storage in $DATA_DIR (cluster id $CLUSTER_ID)"
    local scram=() features=() listed=() user users feature
    if [[ -n "$KAFKA_FEATURES" ]]; then
        IFS=, read -ra listed <<<"$KAFKA_FEATURES"
        for feature in "${listed[@]}"; do
            features+=(--feature "$feature")
        done
    fi
    if [[ "$SECURED" == true ]]; then
        IFS=, read -ra users <<<"$KAFKA_SCRAM_USERS"
        for user in "${users[@]}"; do
            scram+=(--add-scram "SCRAM-SHA-512=[name=${user%%:*},password=${user#*:}]")
        done
    fi
    # The tool prints the SCRAM salts and keys: its output stays in the logs dir.
    if ! java -Xmx256m -Dlog4j2.configurationFile="$LOG4J_CONF" -cp "$LIB_DIR/*" \
        kafka.tools.StorageTool format --config "$PROPS" --cluster-id "$CLUSTER_ID" \
        "${scram[@]}" "${features[@]}" --ignore-formatted >"$LOG_DIR/format.out" 2>&1; then
        cat "$LOG_DIR/format.out" >&2
        die "kafka-storage format failed"
    fi
}

# ---------------------------------------------------------------------------- commands

cmd_up() {
    local t0=$SECONDS pid
    command -v java >/dev/null 2>&1 || die "java (17 or newer) is needed"
    take_lock

    if pid="$(running_pid)"; then
        local port
        port="$(configured_port || true)"
        if [[ "$port" != "$KAFKA_PORT" ]]; then
            die "the broker of $STATE_DIR is already running (pid $pid) on port ${port:-?}," \
                "not $KAFKA_PORT; run '$0 down' first or use another KAFKA_STATE_DIR"
        fi
        if broker_ready "$KAFKA_PORT"; then
            log "already running (pid $pid) on $HOST:$KAFKA_PORT"
            echo "$HOST:$KAFKA_PORT"
            return 0
        fi
        log "running (pid $pid) but not answering yet; waiting"
    else
        rm -f "$PID_FILE"
        local p
        local ports=("$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT")
        [[ "$SECURED" == true ]] && ports+=("$KAFKA_SASL_SSL_PORT" "$KAFKA_SSL_PORT")
        [[ "$SECURED" == true && -n "$KAFKA_OAUTH_JWKS_URL" ]] && ports+=("$KAFKA_OAUTH_PORT")
        for p in "${ports[@]}"; do
            if port_open "$p"; then
                who_listens "$p"
                die "port $HOST:$p is already in use by another process (not the broker of" \
                    "$STATE_DIR); stop it or choose KAFKA_PORT / KAFKA_CONTROLLER_PORT"
            fi
        done

        ensure_jars
        if [[ "$SECURED" == true && ! -s "$PKI_DIR/broker.pem" ]]; then
            command -v openssl >/dev/null 2>&1 || die "openssl is needed for the secured broker's certificates"
            bash "$SCRIPT_DIR/gen-certs.sh" "$PKI_DIR" >/dev/null || die "gen-certs.sh failed"
        fi
        write_configs
        format_storage

        # shellcheck disable=SC2206 # word splitting of the heap flags is intended
        local heap=($KAFKA_HEAP)
        local jvm=(
            "${heap[@]}"
            -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExplicitGCInvokesConcurrent
            -XX:+ExitOnOutOfMemoryError
            -Djava.awt.headless=true
            -Dlog4j2.configurationFile="$LOG4J_CONF"
            -Dkafka.logs.dir="$LOG_DIR"
        )
        # Kafka 4 fetches no OAuth URL that this system property does not list.
        if [[ "$SECURED" == true && -n "$KAFKA_OAUTH_JWKS_URL" ]]; then
            jvm+=(-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="$KAFKA_OAUTH_JWKS_URL")
        fi
        # Class-data sharing: map the archive if a previous clean stop wrote one, else record
        # one (the JVM writes it when it exits; 'down' keeps it only after a clean exit).
        rm -f "$CDS_RECORDING"
        if [[ "${KAFKA_CDS,,}" != "false" && "$KAFKA_CDS" != "0" ]]; then
            if [[ -s "$CDS_ARCHIVE" ]]; then
                jvm+=(-XX:SharedArchiveFile="$CDS_ARCHIVE")
            elif [[ -z "${KAFKA_LIB_DIR:-}" || "$NODE_ID" == 1 ]]; then
                # Shared jars: node 1 alone records (writing the archive adds seconds to a stop).
                jvm+=(-XX:ArchiveClassesAtExit="$CDS_RECORDING")
            fi
            jvm+=(-Xlog:cds=off -Xlog:cds+dynamic=off)
        fi
        local launcher=(nohup)
        command -v setsid >/dev/null 2>&1 && launcher=(setsid nohup)
        : >"$STDOUT_LOG"
        if [[ -f "$SERVER_LOG" ]]; then SERVER_LOG_SKIP="$(wc -l <"$SERVER_LOG")"; fi
        # 9>&-: the broker must not inherit (and so hold) the state dir lock.
        "${launcher[@]}" java "${jvm[@]}" -cp "$LIB_DIR/*" kafka.Kafka "$PROPS" \
            >>"$STDOUT_LOG" 2>&1 </dev/null 9>&- &
        pid=$!
        printf '%s\n' "$pid" >"$PID_FILE"
        log "started broker pid $pid on $HOST:$KAFKA_PORT (controller $HOST:$KAFKA_CONTROLLER_PORT)"
    fi

    local deadline=$((SECONDS + START_TIMEOUT))
    while ! broker_ready "$KAFKA_PORT"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE" "$CDS_RECORDING"
            show_logs
            die "the broker exited during start-up"
        fi
        if ((SECONDS >= deadline)); then
            show_logs
            log "not ready after ${START_TIMEOUT}s; stopping pid $pid"
            stop_pid "$pid" || true
            rm -f "$PID_FILE" "$CDS_RECORDING"
            die "the broker did not become ready on $HOST:$KAFKA_PORT within ${START_TIMEOUT}s"
        fi
        sleep 0.2
    done
    log "ready on $HOST:$KAFKA_PORT after $((SECONDS - t0))s"
    echo "$HOST:$KAFKA_PORT"
}

# SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL. Returns 1 if SIGKILL was needed.
stop_pid() {
    local pid="$1" deadline _
    kill -TERM "$pid" 2>/dev/null || return 0
    deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "pid $pid still alive ${STOP_TIMEOUT}s after SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for _ in $(seq 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            return 1
        fi
        sleep 0.2
    done
}

# Keep a CDS archive only if the JVM that wrote it exited cleanly.
settle_cds_archive() {
    if [[ "${1:-clean}" == clean && -s "$CDS_RECORDING" ]]; then
        mv -f "$CDS_RECORDING" "$CDS_ARCHIVE"
    fi
    rm -f "$CDS_RECORDING"
}

cmd_down() {
    take_lock
    local pid
    if ! pid="$(read_pid)"; then
        log "not running"
        return 0
    fi
    if is_our_broker "$pid"; then
        log "stopping broker pid $pid"
        if stop_pid "$pid"; then
            settle_cds_archive clean
        else
            settle_cds_archive killed
        fi
        log "stopped"
    else
        log "stale pid file (pid $pid is not this state dir's broker); removing it"
        settle_cds_archive stale
    fi
    rm -f "$PID_FILE"
}

cmd_status() {
    local pid port
    if pid="$(running_pid)"; then
        port="$(configured_port || echo "$KAFKA_PORT")"
        if broker_ready "$port"; then
            echo "running: pid $pid, bootstrap $HOST:$port, state $STATE_DIR"
            return 0
        fi
        echo "running but not answering: pid $pid, port $port, state $STATE_DIR"
        return 1
    fi
    echo "stopped (state $STATE_DIR)"
    return 3
}

cmd_reset() {
    cmd_down
    log "deleting $DATA_DIR and $LOG_DIR"
    rm -rf "$DATA_DIR" "$LOG_DIR"
}

# ---------------------------------------------------------------------------- cluster

# Each node of a cluster is this script run as a single node with the environment below.
SELF="$SCRIPT_DIR/$(basename -- "${BASH_SOURCE[0]}")"

node_port() { echo $((10#$KAFKA_PORT + 2 * ($1 - 1))); }

# The environment of node $1, one VAR=value a line.
node_env() {
    local port n voters=""
    port="$(node_port "$1")"
    for ((n = 1; n <= BROKERS; n++)); do
        voters+="${voters:+,}$n@$HOST:$(($(node_port "$n") + 1))"
    done
    printf '%s\n' KAFKA_BROKERS=1 KAFKA_NODE= "KAFKA_NODE_ID=$1" "KAFKA_PORT=$port" \
        "KAFKA_CONTROLLER_PORT=$((port + 1))" "KAFKA_STATE_DIR=$STATE_DIR/node-$1" \
        "KAFKA_LIB_DIR=$LIB_DIR" "KAFKA_QUORUM_VOTERS=$voters" "KAFKA_REPLICATION=$REPLICATION" \
        "KAFKA_CLUSTER_ID=$CLUSTER_ID" "KAFKA_HEAP=$KAFKA_HEAP"
}

# Run command $1 on every selected node at once, each one's messages marked with its node.
# Fails if any of them failed.
on_nodes() {
    local cmd="$1" i rc=0 vars pids=()
    for i in "${NODES[@]}"; do
        mapfile -t vars < <(node_env "$i")
        (env "${vars[@]}" bash "$SELF" "$cmd" 2>&1 >/dev/null |
            sed -u "s/^kafka-local: /kafka-local: node-$i: /" >&2) &
        pids+=($!)
    done
    for i in "${pids[@]}"; do
        wait "$i" || rc=1
    done
    return "$rc"
}

cluster_up() {
    command -v java >/dev/null 2>&1 || die "java (17 or newer) is needed"
    take_lock
    ensure_jars # once, before the nodes share the jars
    on_nodes up || die "not every node started (above); '$0 down' with the same KAFKA_BROKERS stops the rest"
    local i bootstrap=""
    for i in "${NODES[@]}"; do
        bootstrap+="${bootstrap:+,}$HOST:$(node_port "$i")"
    done
    log "cluster of $BROKERS ready on $bootstrap (replication factor $REPLICATION, min.insync.replicas $MIN_ISR)"
    echo "$bootstrap"
}

# Exit 0 if every selected node is running and answering, 3 if all are stopped, 1 otherwise.
cluster_status() {
    local i out rc running=0 stopped=0 vars
    for i in "${NODES[@]}"; do
        mapfile -t vars < <(node_env "$i")
        rc=0
        out="$(env "${vars[@]}" bash "$SELF" status)" || rc=$?
        echo "node-$i: $out"
        ((rc == 0)) && running=$((running + 1))
        ((rc == 3)) && stopped=$((stopped + 1))
    done
    ((running == ${#NODES[@]})) && return 0
    ((stopped == ${#NODES[@]})) && return 3
    return 1
}

if ((BROKERS > 1)); then
    [[ "$SECURED" == false ]] || die "KAFKA_SECURITY=secured is single-node only (KAFKA_BROKERS=1)"
    (($(node_port "$BROKERS") + 1 <= 65535)) || die "KAFKA_PORT $KAFKA_PORT leaves no room for $BROKERS nodes"
    if [[ -n "${KAFKA_NODE:-}" ]]; then
        if ! [[ "$KAFKA_NODE" =~ ^[1-9]$ ]] || ((KAFKA_NODE > BROKERS)); then
            die "KAFKA_NODE must be a node of the cluster, 1-$BROKERS, got '$KAFKA_NODE'"
        fi
        NODES=("$KAFKA_NODE")
    else
        mapfile -t NODES < <(seq "$BROKERS")
    fi
    case "${1:-}" in
    up) cluster_up ;;
    down) take_lock && on_nodes down ;;
    status) cluster_status ;;
    reset) take_lock && on_nodes reset ;;
    *)
        echo "usage: KAFKA_BROKERS=$BROKERS [KAFKA_NODE=i] $0 {up|down|status|reset}" >&2
        exit 2
        ;;
    esac
    exit
fi

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
reset) cmd_reset ;;
*)
    echo "usage: $0 {up|down|status|reset}" >&2
    exit 2
    ;;
esac
