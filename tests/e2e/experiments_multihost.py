"""Several machines for real: launch/multihost/netns_cluster.sh makes 2 network namespaces
("hosts") joined by a bridge; `lockstep run --hostfile` starts one rank in each (Open MPI's
launch agent enters the namespace) with TCP between them, and `layout-check` runs 1x1 vs DP2
vs TP2 across them. Exits 77 (ctest: skipped) with the reason when the sandbox refuses
namespaces or this is not root. Usage: experiments_multihost.py BINARY MPIRUN SOURCE_DIR WORK_DIR"""
import os
import re
import shutil
import sys

from common import run_on_cluster

binary, mpirun, src, work = sys.argv[1:5]
tiny = os.path.join(src, "launch", "configs", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

script = f"""
set -e
$NETNS_COUNTERS > {work}/counters.before
{binary} run --np 2 --threads 1 --hostfile "$NETNS_HOSTFILE" --mpi-arg="$NETNS_MPI_ARGS" {tiny} \
  --set run.steps=3 --set run.out={work}/dp2 --set ckpt.save=false
$NETNS_COUNTERS > {work}/counters.after
{binary} layout-check --layouts 1x1,1x2,2x1,2x2 --steps 3 --out {work}/layouts \
  --hostfile "$NETNS_HOSTFILE" --mpi-arg="$NETNS_MPI_ARGS" {tiny} --set run.threads=1
"""
res = run_on_cluster(src, script)
if res.returncode != 0:
    raise SystemExit(f"FAIL: the multi-host run exited {res.returncode}")


def counters(path):
    out = {}
    for line in open(path):
        host, _, rx, _, tx = line.split()
        out[host] = (int(rx), int(tx))
    return out


before, after = counters(f"{work}/counters.before"), counters(f"{work}/counters.after")
for host in before:
    grew = after[host][1] - before[host][1]
    print(f"  {host}: {grew} bytes sent over its veth during the 2-rank job")
    if grew < 100_000:
        raise SystemExit(f"FAIL: {host} sent only {grew} bytes: the ranks did not talk over TCP")
if "--hostfile" not in res.stdout or "layout-check: PASS" not in res.stdout:
    raise SystemExit("FAIL: expected the hostfile launch and a layout-check PASS")
if not re.search(r"ls\d+h1\s+rx", open(f"{work}/counters.after").read()):
    raise SystemExit("FAIL: counters do not name the namespace hosts")
print("PASS: 2 hosts, TCP between namespaces, layout-check PASS across them")
