#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, to rehearse a grid (benchmarks/scores.py --launcher slurm) before a real
# cluster, and for the tests of the Slurm launcher (tests/test_slurm.py). docs/grid.md explains its use.
#
#   eval "$(benchmarks/slurm_local.sh up /tmp/orpo-slurm)"   # install if absent, configure, start; prints the export
#   sinfo; python benchmarks/scores.py ... --launcher slurm --gpus 0 --cpus 1 --mem 2 --wait
#   benchmarks/slurm_local.sh status /tmp/orpo-slurm          # the node's state and the jobs
#   benchmarks/slurm_local.sh down /tmp/orpo-slurm            # cancel its jobs, stop the daemons
#   benchmarks/slurm_local.sh install [DIR]                    # only install slurm-wlm and munge (apt's log in DIR)
#
# `up DIR` installs Debian's slurm-wlm and munge if missing (root and apt-get), writes slurm.conf (this machine's CPUs
# and memory, no cgroups, no accounting, SlurmUser = you) and a munge key into DIR, starts munged, slurmctld and slurmd
# with all their state in DIR, waits until the node is idle, and prints `export SLURM_CONF=DIR/slurm.conf`. A daemon
# not up in SLURM_LOCAL_TIMEOUT s (60) is one line naming its log, exit 1; a tool that cannot be installed, exit 2.
# SLURM_LOCAL_PORT: slurmctld's port (slurmd the next; default the first free pair from 6817); SLURM_LOCAL_MEMORY:
# RealMemory in MB. Faster than a production cluster (docs/grid.md): cred_expire=10, sched_interval=5, KillWait=5.
set -uo pipefail

usage() {
    echo "usage: $0 up|down|status|install DIR, or $0 install" >&2
    exit 2
}
[ $# -eq 2 ] || { [ $# -eq 1 ] && [ "$1" = install ]; } || usage  # install's DIR: where apt's log goes
cmd=$1
dir=$(realpath -m "${2:-${TMPDIR:-/tmp}/slurm_local_install}")
port=${SLURM_LOCAL_PORT:-6817}
timeout_s=${SLURM_LOCAL_TIMEOUT:-60}
conf=$dir/slurm.conf
say() { echo "slurm_local: $*" >&2; }
fail() { # one line and the exit status
    echo "error: slurm_local: $2" >&2
    exit "$1"
}

pid_of() { # the live pid in a pid file, else nothing
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

last_error() { # the last line of a log that says what went wrong (or its last line)
    local line
    line=$(grep -aiE "error|fatal|refused|failed|unable" "$1" 2>/dev/null | tail -n 1)
    [ -n "$line" ] || line=$(tail -n 1 "$1" 2>/dev/null)
    echo "${line:-(empty log)}" | cut -c1-300
}

install_if_missing() {
    local missing=()
    for tool in munged slurmctld slurmd sbatch sinfo; do
        command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        fail 2 "${missing[*]} not installed, and installing needs root and apt-get (apt-get install slurm-wlm munge)"
    fi
    say "installing slurm-wlm and munge (missing: ${missing[*]})"
    mkdir -p "$dir"
    local log=$dir/apt.log
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q slurm-wlm munge >"$log" 2>&1; then
        apt-get update -q >>"$log" 2>&1
        apt-get install -y -q slurm-wlm munge >>"$log" 2>&1 ||
            fail 2 "apt-get install slurm-wlm munge failed: $(last_error "$log"); see $log"
    fi
}

write_config() {
    local node hw cpus boards sockets cores threads mem user
    node=$(hostname -s)
    hw=$(slurmd -C 2>/dev/null | head -n 1)
    cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
    boards=$(sed -n 's/.* Boards=\([0-9]*\).*/\1/p' <<<"$hw")
    sockets=$(sed -n 's/.* SocketsPerBoard=\([0-9]*\).*/\1/p' <<<"$hw")
    cores=$(sed -n 's/.* CoresPerSocket=\([0-9]*\).*/\1/p' <<<"$hw")
    threads=$(sed -n 's/.* ThreadsPerCore=\([0-9]*\).*/\1/p' <<<"$hw")
    mem=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
    [ -n "$cpus" ] && [ -n "$mem" ] || fail 1 "slurmd -C did not describe this machine: '$hw'"
    mem=${SLURM_LOCAL_MEMORY:-$((mem > 1024 ? mem - 512 : mem))}
    user=$(id -un)
    mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
    chmod 700 "$dir/munge"
    if [ ! -s "$dir/munge/munge.key" ]; then
        dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
        chmod 400 "$dir/munge/munge.key"
    fi
    cat >"$conf" <<EOF
# a one-node cluster written by benchmarks/slurm_local.sh ($(date -u '+%Y-%m-%d %H:%M UTC'))
ClusterName=orpo-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerParameters=sched_interval=5
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
JobRequeue=1
KillWait=5
OverTimeLimit=0
MinJobAge=300
InactiveLimit=0
SlurmdTimeout=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus Boards=${boards:-1} SocketsPerBoard=${sockets:-1} CoresPerSocket=${cores:-$cpus} ThreadsPerCore=${threads:-1} RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

in_use() { # something listens on 127.0.0.1:$1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

node_state() { # the node's state as sinfo reports it ("idle", "down*", ...), empty while slurmctld does not answer
    SLURM_CONF=$conf timeout 10 sinfo -h -N -o %T 2>/dev/null | head -n 1
}

up() {
    mkdir -p "$dir" || fail 2 "cannot make $dir"
    install_if_missing
    [ "$(id -u)" = 0 ] || fail 2 "a one-node cluster needs root here (slurmd runs its jobs as root; SlurmdUser=root)"
    export PATH=$PATH:/usr/sbin
    if [ -f "$conf" ] && [ "$(node_state)" = idle ] && pid_of "$dir/slurmctld.pid" >/dev/null; then
        say "already up ($conf)"
        echo "export SLURM_CONF=$conf"
        return 0
    fi
    # two free ports: SLURM_LOCAL_PORT's, else the first free pair from 6817 (another Slurm may hold 6817-6818)
    local tries=50
    [ -n "${SLURM_LOCAL_PORT:-}" ] && tries=1
    while in_use "$port" || in_use $((port + 1)); do
        tries=$((tries - 1))
        [ "$tries" -gt 0 ] || fail 1 "port $port or $((port + 1)) is in use (another Slurm? stop it, or set SLURM_LOCAL_PORT)"
        port=$((port + 2))
    done
    write_config
    export SLURM_CONF=$conf
    local t0=$SECONDS
    if ! pid_of "$dir/munged.pid" >/dev/null; then
        munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
            --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/munged.seed" \
            >>"$dir/munged.log" 2>&1 || fail 1 "munged did not start: $(last_error "$dir/munged.log"); see $dir/munged.log"
    fi
    pid_of "$dir/slurmctld.pid" >/dev/null || slurmctld -i >>"$dir/slurmctld.log" 2>&1
    pid_of "$dir/slurmd.pid" >/dev/null || slurmd -N "$(hostname -s)" >>"$dir/slurmd.log" 2>&1
    local state=""
    while [ $((SECONDS - t0)) -lt "$timeout_s" ]; do
        state=$(node_state)
        [ "$state" = idle ] && break
        sleep 0.5
    done
    if [ "$state" != idle ]; then
        if ! pid_of "$dir/munged.pid" >/dev/null; then
            fail 1 "munged did not come up within ${timeout_s} s ($(last_error "$dir/munged.log")); see $dir/munged.log"
        elif ! pid_of "$dir/slurmctld.pid" >/dev/null || [ -z "$state" ]; then
            fail 1 "slurmctld did not come up within ${timeout_s} s ($(last_error "$dir/slurmctld.log")); see $dir/slurmctld.log"
        fi
        # slurmctld answers, the node is not idle: slurmd did not start or did not register, or was refused
        local reason
        reason=$(SLURM_CONF=$conf timeout 10 sinfo -h -N -o %E 2>/dev/null | head -n 1)
        [ -n "$reason" ] && [ "$reason" != none ] || reason=$(last_error "$dir/slurmd.log")
        fail 1 "slurmd did not come up within ${timeout_s} s (node state '$state': $reason); see $dir/slurmd.log and $dir/slurmctld.log"
    fi
    say "up in $((SECONDS - t0)) s: node $(hostname -s) idle ($conf)"
    echo "export SLURM_CONF=$conf"
}

down() {
    export PATH=$PATH:/usr/sbin SLURM_CONF=$conf
    if [ -f "$conf" ] && pid_of "$dir/slurmctld.pid" >/dev/null; then
        local jobs
        jobs=$(timeout 10 squeue -h -o %A 2>/dev/null | sort -u)
        if [ -n "$jobs" ]; then
            timeout 10 scancel $jobs 2>/dev/null
            for _ in $(seq 40); do # KillWait is 5 s
                [ -z "$(timeout 10 squeue -h -o %A 2>/dev/null)" ] && break
                sleep 0.25
            done
        fi
    fi
    for daemon in slurmd slurmctld munged; do
        local pid
        pid=$(pid_of "$dir/$daemon.pid") || continue
        kill "$pid"
        for _ in $(seq 40); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    done
    say "down ($dir)"
}

status() {
    export PATH=$PATH:/usr/sbin SLURM_CONF=$conf
    [ -f "$conf" ] || fail 1 "no cluster in $dir (run: $0 up $dir)"
    local state
    state=$(node_state)
    [ -n "$state" ] || fail 1 "slurmctld does not answer; see $dir/slurmctld.log"
    echo "node $(hostname -s): $state"
    squeue
    [ "$state" = idle ] || [ "$state" = mixed ] || [ "$state" = allocated ]
}

case $cmd in
install) install_if_missing ;;
up) up ;;
down) down ;;
status) status ;;
*) usage ;;
esac
