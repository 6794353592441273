"""The mpirun flags of launch/mpirun.flags (their one spelling, docs/design.md section 6) for
the Python tests and benchmarks. Standard library only.

    sys.path.insert(0, str(REPO / "launch"))
    import mpirun_flags
    mpirun_flags.ROOT + mpirun_flags.OVERSUBSCRIBE   # argv words (lists of str)
    dict(os.environ, **mpirun_flags.ROOT_ENV)        # the root environment (a dict)
    mpirun_flags.mca_env(mpirun_flags.LOOPBACK)      # --mca K V as OMPI_MCA_K=V variables
"""
import re
from pathlib import Path

FILE = Path(__file__).resolve().parent / "mpirun.flags"


def read(path=FILE):
    """{NAME: [word, ...]} for each MPIRUN_<NAME>=(...) line of the file."""
    groups = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"MPIRUN_([A-Z0-9_]+)=\(([^()\"'$*?\[\]]*)\)", line)
        if not m:
            raise ValueError(f"{path}:{n}: not MPIRUN_<NAME>=(plain words): {line}")
        groups[m.group(1)] = m.group(2).split()
    return groups


_GROUPS = read()
ROOT = _GROUPS["ROOT"]
OVERSUBSCRIBE = _GROUPS["OVERSUBSCRIBE"]
UNBOUND = _GROUPS["UNBOUND"]
LOOPBACK = _GROUPS["LOOPBACK"]
ROOT_ENV = dict(w.split("=", 1) for w in _GROUPS["ROOT_ENV"])


def mca_env(flags):
    """The `--mca KEY VALUE` pairs of flags as Open MPI's environment: {OMPI_MCA_KEY: VALUE}."""
    if len(flags) % 3 or any(f != "--mca" for f in flags[::3]):
        raise ValueError(f"not a list of --mca KEY VALUE triples: {flags}")
    return {"OMPI_MCA_" + k: v for k, v in zip(flags[1::3], flags[2::3])}
