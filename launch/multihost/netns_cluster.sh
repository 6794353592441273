#!/usr/bin/env bash
# launch/multihost/netns_cluster.sh: several "machines" on this one, for the multi-host path.
#   netns_cluster.sh [--hosts N] [--timeout S] [--] COMMAND...
# Makes N network namespaces (hosts h1..hN) joined by a bridge that lives in a namespace of
# its own (the root namespace gets no link and no address), gives host i the address
# 10.231.0.i/24 on a veth pair, and runs COMMAND as host h1 (inside its namespace, under
# `unshare --uts` with its own hostname: Open MPI names per-host session directories after
# the hostname, and namespaces share /tmp, so each needs its own; see docs/experiments.md).
# COMMAND sees:
#   NETNS_HOSTFILE   an Open MPI hostfile "hI slots=1" per host
#   NETNS_MPI_ARGS   the mpirun arguments for this cluster: the launch agent
#                    (plm_rsh_agent = netns_agent.sh, which runs Open MPI's daemon in the
#                    host's namespace with its hostname), TCP only, restricted to the subnet
#   NETNS_HOSTS      the host names
#   NETNS_COUNTERS   a command printing each host's veth rx/tx bytes (proof of TCP traffic)
# Bounded (timeout S, default 300) and self-cleaning (a trap kills what still runs in the
# hosts, deletes the namespaces, the links and this run's Open MPI session directories).
# Needs root and iproute2; exits 77 with one line saying what failed when the sandbox refuses
# namespaces.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N=2
TIMEOUT=300
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) N="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -gt 0 ]] || { echo "netns_cluster: error: no COMMAND given (see --help)" >&2; exit 2; }
[[ "$N" =~ ^[0-9]+$ && "$N" -ge 2 && "$N" -le 8 ]] || { echo "netns_cluster: error: --hosts must be 2..8" >&2; exit 2; }

skip() { echo "netns_cluster: SKIP: $*" >&2; exit 77; }
[[ "$(id -u)" == 0 ]] || skip "needs root (ip netns add); running as uid $(id -u)"
command -v ip >/dev/null || skip "no 'ip' command (install iproute2)"
command -v unshare >/dev/null || skip "no 'unshare' command (util-linux)"

ID="ls$$"              # unique per invocation: concurrent clusters never share a name
BR="${ID}br"           # the bridge's namespace (and the bridge device in it)
HOSTS=()
for i in $(seq 1 "$N"); do HOSTS+=("${ID}h$i"); done
WORK="$(mktemp -d /tmp/netns_cluster.XXXXXX)"

cleanup() {
  local h
  # Whatever COMMAND left running in the hosts (a job still waiting on a cut link when the
  # timeout struck, a daemon of a host that lost its link): deleting a namespace does not
  # end its processes.
  for h in "${HOSTS[@]}"; do
    ip netns pids "$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  done
  for h in "${HOSTS[@]}"; do ip netns del "$h" 2>/dev/null || true; done
  ip netns del "$BR" 2>/dev/null || true
  rm -rf "$WORK"
  # Open MPI session directories named after our hostnames.
  local d
  for h in "${HOSTS[@]}"; do
    for d in /tmp/ompi.${h}* /tmp/ompi.${h}.*; do [[ -e "$d" ]] && rm -rf "$d"; done
  done
  true
}
trap cleanup EXIT INT TERM

ip netns add "$BR" 2>"$WORK/err" || skip "ip netns add refused: $(cat "$WORK/err")"
ip -n "$BR" link add br0 type bridge 2>"$WORK/err" || skip "bridge refused: $(cat "$WORK/err")"
ip -n "$BR" link set br0 up
ip -n "$BR" link set lo up
for i in $(seq 1 "$N"); do
  h="${HOSTS[$((i - 1))]}"
  ip netns add "$h" || skip "ip netns add $h refused"
  ip link add "${ID}a$i" type veth peer name "${ID}b$i" 2>"$WORK/err" ||
    skip "veth pair refused: $(cat "$WORK/err")"
  ip link set "${ID}a$i" netns "$h"
  ip link set "${ID}b$i" netns "$BR"
  ip -n "$BR" link set "${ID}b$i" master br0
  ip -n "$BR" link set "${ID}b$i" up
  ip -n "$h" link set lo up
  ip -n "$h" link set "${ID}a$i" name eth0
  ip -n "$h" addr add "10.231.0.$i/24" dev eth0
  ip -n "$h" link set eth0 up
  echo "$h slots=1" >>"$WORK/hostfile"
done
# Every host can reach every other (bash /dev/tcp: no ping binary here).
for i in $(seq 2 "$N"); do
  ok=0
  for _ in $(seq 1 50); do
    out="$(ip netns exec "${HOSTS[0]}" bash -c "exec 3<>/dev/tcp/10.231.0.$i/9" 2>&1 || true)"
    if [[ "$out" == *refused* ]]; then
      ok=1; break
    fi
    sleep 0.1
  done
  [[ $ok == 1 ]] || { echo "netns_cluster: error: host 1 cannot reach 10.231.0.$i" >&2; exit 1; }
done

cat >"$WORK/agent.sh" <<AGENT
#!/usr/bin/env bash
# Open MPI's launch agent for this cluster (called like ssh: AGENT [ssh options] HOST COMMAND...).
while [[ "\$1" == -* ]]; do shift; done
host="\$1"; shift
exec ip netns exec "\$host" unshare --uts sh -c "hostname \$host && \$*"
AGENT
chmod +x "$WORK/agent.sh"
cat >"$WORK/counters.sh" <<COUNTERS
#!/usr/bin/env bash
for h in ${HOSTS[*]}; do
  printf '%s rx %s tx %s\n' "\$h" "\$(ip netns exec \$h cat /sys/class/net/eth0/statistics/rx_bytes)" \
    "\$(ip netns exec \$h cat /sys/class/net/eth0/statistics/tx_bytes)"
done
COUNTERS
chmod +x "$WORK/counters.sh"

export NETNS_HOSTFILE="$WORK/hostfile"
export NETNS_HOSTS="${HOSTS[*]}"
export NETNS_COUNTERS="$WORK/counters.sh"
export NETNS_MPI_ARGS="--mca plm_rsh_agent $WORK/agent.sh --mca btl tcp,self --mca btl_tcp_if_include 10.231.0.0/24 --mca oob_tcp_if_include 10.231.0.0/24"
source "$HERE/../mpirun.flags"  # MPIRUN_ROOT_ENV: the root environment's one spelling
if [[ "$(id -u)" == 0 ]]; then export "${MPIRUN_ROOT_ENV[@]}"; fi
echo "netns_cluster: $N hosts (${HOSTS[*]}) on 10.231.0.0/24, bridge in namespace $BR; running as ${HOSTS[0]}"
rc=0
timeout "$TIMEOUT" ip netns exec "${HOSTS[0]}" unshare --uts \
  bash -c 'hostname "$0" && exec "$@"' "${HOSTS[0]}" "$@" || rc=$?
[[ $rc == 124 ]] && echo "netns_cluster: error: COMMAND ran past ${TIMEOUT}s and was stopped" >&2
exit "$rc"
