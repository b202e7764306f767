#!/usr/bin/env bash
# Run the test workflow (.test/config.yaml) through profiles/slurm on a real single-node SLURM
# cluster on this machine, then check its outputs (tests/slurm/test_slurm.py).
#
# Needs root (it installs Debian's slurmctld, slurmd and munge when missing and starts them).
# The cluster's state and logs live in a temporary folder. The config is written to
# /etc/slurm/slurm.conf (job steps started by srun inside a batch job read only that path); a
# config found there is put back on exit. Every daemon started here is stopped on exit, success
# or not.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"

if [ "$(id -u)" -ne 0 ]; then
    echo "run_slurm_test.sh: must run as root (installs and starts SLURM and munge)" >&2
    exit 1
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
fi

WORK="$(mktemp -d /tmp/slurm-test.XXXXXX)"
CONF=/etc/slurm/slurm.conf
CONF_WRITTEN=0
chmod 755 "$WORK"
MUNGE_SOCKET="$WORK/munge/munge.socket.2"
MUNGED_PID=""
SLURMCTLD_PID=""
SLURMD_PID=""

stop_daemons() {
    local status=$?
    set +e
    if [ "$status" -ne 0 ]; then
        echo "--- slurmctld log (tail)"; tail -n 30 "$WORK/slurmctld.log" 2>/dev/null
        echo "--- slurmd log (tail)"; tail -n 30 "$WORK/slurmd.log" 2>/dev/null
    fi
    for pid in "$SLURMD_PID" "$SLURMCTLD_PID" "$MUNGED_PID"; do
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
    done
    for pid in "$SLURMD_PID" "$SLURMCTLD_PID" "$MUNGED_PID"; do
        [ -n "$pid" ] || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$pid" 2>/dev/null
    done
    if [ "$CONF_WRITTEN" -eq 1 ]; then
        if [ -f "$WORK/slurm.conf.saved" ]; then
            cp -p "$WORK/slurm.conf.saved" "$CONF"
        else
            rm -f "$CONF"
        fi
    fi
    rm -rf "$WORK"
    exit "$status"
}
trap stop_daemons EXIT
trap 'exit 130' INT TERM

# --- munge: its own key and socket in $WORK, run as the munge user.
mkdir -p "$WORK/munge"
dd if=/dev/urandom of="$WORK/munge/munge.key" bs=1024 count=1 status=none
chown -R munge:munge "$WORK/munge"
chmod 755 "$WORK/munge"  # clients (slurm, running as root) reach the socket in it
chmod 400 "$WORK/munge/munge.key"
runuser -u munge -- munged --foreground --force \
    --key-file="$WORK/munge/munge.key" --socket="$MUNGE_SOCKET" \
    --pid-file="$WORK/munge/munged.pid" --log-file="$WORK/munge/munged.log" \
    --seed-file="$WORK/munge/munged.seed" >"$WORK/munged.out" 2>&1 &
MUNGED_PID=$!
for _ in $(seq 50); do [ -S "$MUNGE_SOCKET" ] && break; sleep 0.2; done
[ -S "$MUNGE_SOCKET" ] || { echo "munged did not start" >&2; exit 1; }

# --- slurm.conf: one node (this host) with the memory slurmd detects and at least MIN_CPUS
# CPUs. The paper trains with `threads: 4` and tests/slurm/test_slurm.py runs a training job
# asking SLURM for 4 CPUs, which could never start on a node declared with fewer (slurmd -C
# detects 2 on a small machine). So the node is declared with more cores per socket than
# detected when needed (Boards x SocketsPerBoard x CoresPerSocket x ThreadsPerCore = CPUs), and
# SlurmdParameters=config_overrides below makes slurmd register with the declared CPUs instead
# of draining the node for having fewer. Jobs then share the real CPUs (no CPU binding here:
# TaskPlugin=task/none), which is all these tests need.
MIN_CPUS=4
HOST="$(hostname -s)"
DETECTED="$(slurmd -C | head -n 1)"
detected() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$DETECTED"; }
BOARDS="$(detected Boards)"
SOCKETS="$(detected SocketsPerBoard)"
CORES="$(detected CoresPerSocket)"
THREADS="$(detected ThreadsPerCore)"
MEMORY="$(detected RealMemory)"
for value in "$BOARDS" "$SOCKETS" "$CORES" "$THREADS" "$MEMORY"; do
    [ -n "$value" ] || { echo "cannot read the node's hardware from: $DETECTED" >&2; exit 1; }
done
PER_CORE=$((BOARDS * SOCKETS * THREADS))
if [ $((PER_CORE * CORES)) -lt "$MIN_CPUS" ]; then
    CORES=$(((MIN_CPUS + PER_CORE - 1) / PER_CORE))
fi
NODE_LINE="NodeName=$HOST CPUs=$((PER_CORE * CORES)) Boards=$BOARDS SocketsPerBoard=$SOCKETS"
NODE_LINE="$NODE_LINE CoresPerSocket=$CORES ThreadsPerCore=$THREADS RealMemory=$MEMORY"
echo "SLURM node: $NODE_LINE (slurmd -C: $DETECTED)"
mkdir -p "$WORK/state" "$WORK/spool" /etc/slurm
if [ -f "$CONF" ]; then cp -p "$CONF" "$WORK/slurm.conf.saved"; fi
CONF_WRITTEN=1
cat > "$CONF" <<EOF_CONF
ClusterName=safe-marl-test
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
# The node's CPUs are the ones declared below, not the ones slurmd detects (see above).
SlurmdParameters=config_overrides
SlurmctldDebug=info
SlurmdDebug=info
# squeue reports finished jobs for this long; the workflow reads job states from squeue.
MinJobAge=600
$NODE_LINE State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF_CONF
slurmctld -D -i -f "$CONF" >"$WORK/slurmctld.out" 2>&1 &
SLURMCTLD_PID=$!
slurmd -D -f "$CONF" >"$WORK/slurmd.out" 2>&1 &
SLURMD_PID=$!

# --- wait until the node is idle.
for _ in $(seq 60); do
    state="$(sinfo --noheader --nodes="$HOST" --format=%t 2>/dev/null || true)"
    [ "$state" = "idle" ] && break
    sleep 1
done
if [ "$state" != "idle" ]; then
    echo "SLURM node $HOST did not become idle (state: '${state:-none}')" >&2
    exit 1
fi
echo "SLURM cluster up: node $HOST idle"

# --- the workflow through the cluster profile, and the checks on its outputs.
cd "$REPO"
SAFE_MARL_SLURM_TEST=1 "$PYTHON" -m pytest -m slurm tests/slurm -p no:cacheprovider -q
