"""A host lost mid-run (issue 22): on the network-namespace cluster
(launch/multihost/netns_cluster.sh, 2 hosts, one rank each) a supervised DP2 job
(`--max-restarts 2 --elastic 1:2`) loses host 2 when its link is taken down; Open MPI notices
the lost daemon (the short TCP keepalives that lockstep run passes to a supervised multi-host
job, launch/mpirun.flags MPIRUN_HOST_LOSS: ~25 s), the supervisor's probe finds host 2
silent and relaunches on host 1 alone at 1x1 from the newest checkpoint (G4), and the final
trace equals the uninterrupted DP2 run's byte for byte. Bounded (the cluster's timeout; with
Open MPI's own keepalives the job would wait ~8 minutes for the lost host) and self-cleaning
(the cluster kills what still runs in its hosts and removes its namespaces; checked here: no
process, no namespace, no cluster directory left). Exits 77 (ctest: skipped) when the sandbox refuses
namespaces or this is not root.
Usage: fault_multihost.py BINARY MPIRUN SOURCE_DIR WORK_DIR"""
import json
import os
import re
import shutil
import subprocess
import sys

from common import run_on_cluster

binary, mpirun, src, work = sys.argv[1:5]
tiny = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
sets = "--set run.steps=60 --set ckpt.interval=10 --set ckpt.keep=2"
script = f"""
set -u
H2=${{NETNS_HOSTS##* }}
echo "cluster dir ${{NETNS_HOSTFILE%/*}}"
run() {{ {binary} run --np 2 --threads 1 --hostfile "$NETNS_HOSTFILE" \\
  --mpi-arg="$NETNS_MPI_ARGS" {tiny} {sets} "$@"; }}
run --set run.out={work}/ref > {work}/ref.log 2>&1 || {{ echo "reference run failed"; tail -20 {work}/ref.log; exit 1; }}
run --max-restarts 2 --elastic 1:2 --set run.out={work}/lost > {work}/lost.stdout 2> {work}/lost.stderr &
job=$!
n=0
for i in $(seq 1 1200); do  # at most 120 s to reach step 25
  [ -f {work}/lost/trace.jsonl ] && n=$(wc -l < {work}/lost/trace.jsonl)
  [ "$n" -ge 25 ] && break
  kill -0 $job 2>/dev/null || {{ echo "the job ended before step 25"; exit 1; }}
  sleep 0.1
done
echo "taking $H2 down after step $n"
cut=$(date +%s%N)
ip -n "$H2" link set eth0 down
while kill -0 $job 2>/dev/null && ! grep -q relaunch {work}/lost/restarts.jsonl 2>/dev/null; do
  sleep 0.1
done
echo "relaunch decided $(( ($(date +%s%N) - cut) / 1000000 )) ms after the cut"
wait $job; rc=$?
echo "supervised run exit $rc, $(( ($(date +%s%N) - cut) / 1000000 )) ms after the cut"
echo "processes left on $H2: $(ip netns pids "$H2" | wc -l)"
exit $rc
"""
res = run_on_cluster(src, script)
# Self-cleaning: no process of this test, no namespace and no cluster directory left.
cluster_id = re.search(r"bridge in namespace (ls\d+)br", res.stdout)
cluster_dir = re.search(r"cluster dir (\S+)", res.stdout)
left = []
mine = set()  # this process and its ancestors (ctest, a timeout wrapper) name the work dir too
pid = os.getpid()
while pid > 1:
    mine.add(pid)
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) in mine:
        continue
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        continue
    if work in cmd or (cluster_id and cluster_id.group(1) in cmd):
        left.append(f"{pid}: {cmd[:120]}")
netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def read(path, missing):
    return open(path, "rb").read() if os.path.exists(path) else missing


stderr = read(f"{work}/lost.stderr", b"").decode()
stdout = read(f"{work}/lost.stdout", b"").decode()
print(stderr)
ok = res.returncode == 0
ref = read(f"{work}/ref/trace.jsonl", b"?")
got = read(f"{work}/lost/trace.jsonl", b"")
events = [json.loads(l) for l in open(f"{work}/lost/restarts.jsonl")] \
    if os.path.exists(f"{work}/lost/restarts.jsonl") else []
relaunch = [e for e in events if e["event"] == "relaunch"]
failure = [e for e in events if e["event"] == "failure"]
checks = [
    (ok, "the supervised run finished (exit 0) after the host was lost"),
    ("--mca oob_tcp_keepalive_time 10" in stdout,
     "lockstep run passed its short keepalives to the supervised multi-host job"),
    (ref == got, "trace.jsonl equals the uninterrupted DP2 run's, byte for byte"),
    (len(failure) == 1 and failure[0]["host"].endswith("h2")
     and "lost contact" in failure[0]["reason"],
     f"restarts.jsonl: one failure, contact with host 2 lost ({failure})"),
    (len(relaunch) == 1 and relaunch[0]["np"] == 1 and len(relaunch[0]["hosts"]) == 1
     and relaunch[0]["hosts"][0].endswith("h1"),
     f"restarts.jsonl: one relaunch, on host 1 alone at 1x1 ({relaunch})"),
    ("did not answer" in stderr and "(G4)" in stderr,
     "the relaunch line names the silent host and G4"),
    ("MPI_ABORT" not in stderr and "ORTE" not in stderr, "no Open MPI banner on stderr"),
    (not left, f"no process left behind {left}"),
    (bool(cluster_id) and cluster_id.group(1) not in netns, "the cluster's namespaces are gone"),
    (bool(cluster_dir) and not os.path.exists(cluster_dir.group(1)),
     "the cluster's directory is gone"),
]
for good, what in checks:
    print(("  ok    " if good else "  FAIL  ") + what)
if not all(g for g, _ in checks):
    raise SystemExit("FAIL: the lost-host restart")
print("PASS: host lost, relaunched on the other at 1x1, same trace")
