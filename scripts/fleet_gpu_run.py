"""Fleet tuning on several GPUs of one host against one GPU, on a private PostgreSQL server, in one run.

    bash -c '. .ci/postgres.sh && python scripts/fleet_gpu_run.py --devices 0,1 --out fleet-run'

1. ``kernelzoo tune --devices 0`` and ``--devices 0,1`` tune the same keys with the same trials, each into a new
   database on the server; their wall times give the throughput ratio.
2. A third job (``--devices 0,1`` again, a new database) has one of its workers killed with SIGKILL once a
   quarter of its tasks are done; the job must still finish, with the lost worker's task taken over.
3. Every job: each task done once, each (study, config) measured once, the same keys stored.
4. The two-GPU job's snapshot is loaded by one process per GPU, started as a ``torch.distributed`` job (NCCL);
   ``check_same_winners()`` passes, then fails naming rank 1 when rank 1 loads a copy with one record altered.

Prints one JSON object and writes it to ``--out/fleet_run.json``. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import sqlalchemy as sa

OPS = ("attention", "attention_backward", "layer_norm", "softmax")
RANK = """
import sys, torch, torch.distributed as dist
from kernelzoo import distributed
rank, rendezvous, snapshot = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.cuda.set_device(rank)
dist.init_process_group("nccl", init_method="file://" + rendezvous, rank=rank, world_size=int(sys.argv[4]))
distributed.use_snapshot(snapshot)
try:
    print("same", distributed.check_same_winners())
except distributed.WinnersDiffer as exc:
    print("differ", exc.ranks, str(exc).replace(chr(10), " "))
dist.destroy_process_group()
"""


def new_database(admin_url: str, label: str) -> str:
    name = f"kz_fleet_{label}_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return admin_url.rsplit("/", 1)[0] + "/" + name


def rows(url: str, query: str) -> list[dict]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text(query))]
    finally:
        engine.dispose()


def tune_cmd(ops: list[str], devices: str, url: str, trials: int, lease: float) -> list[str]:
    return [sys.executable, "-m", "kernelzoo.cli", "tune", *[a for op in ops for a in ("--op", op)], "--devices",
            devices, "--trials", str(trials), "--lease", str(lease), "--quiet", "--db", url]


def run_job(cmd: list[str], url: str, kill_at: float | None) -> dict:
    """Run a tuning job; with ``kill_at``, SIGKILL the owner of a claimed task once that share of tasks is done."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    while kill_at is not None and killed is None and proc.poll() is None:
        time.sleep(1.0)
        try:
            tasks = rows(url, "SELECT task_id, state, owner FROM kz_tasks")
        except sa.exc.SQLAlchemyError:
            continue
        done = sum(t["state"] == "done" for t in tasks)
        claimed = [t for t in tasks if t["state"] == "claimed"]
        if tasks and done >= kill_at * len(tasks) and claimed:
            killed = claimed[0]
            os.kill(int(killed["owner"].split(":")[-2]), signal.SIGKILL)
    out, err = proc.communicate()
    return {"seconds": time.perf_counter() - started, "returncode": proc.returncode, "stdout": out[-3000:],
            "stderr": err[-3000:], "killed": killed}


def check_job(url: str) -> dict:
    tasks = rows(url, "SELECT task_id, key, plugin, state, attempts FROM kz_tasks")
    trials = Counter((r["study_name"], json.dumps(r["config"], sort_keys=True))
                     for r in rows(url, "SELECT study_name, config FROM kz_trials"))
    winners = rows(url, "SELECT op, plugin, dtype, bucket, flags FROM kz_winners")
    keys = sorted({(w["op"], w["dtype"], w["bucket"], w["flags"]) for w in winners})
    return {"tasks": len(tasks), "states": dict(Counter(t["state"] for t in tasks)),
            "taken_over": sum(t["attempts"] > 1 for t in tasks),
            "trials": sum(trials.values()), "configs_measured_twice": sum(n > 1 for n in trials.values()),
            "winner_rows": len(winners), "winner_rows_unique": len({tuple(w.values()) for w in winners}),
            "keys": keys}


def ranks(snapshots: list[Path], tmp: Path, run: int) -> list[str]:
    script = tmp / "rank.py"
    script.write_text(RANK)
    rendezvous, world = str(tmp / f"rdzv{run}"), str(len(snapshots))
    procs = [subprocess.Popen([sys.executable, str(script), str(r), rendezvous, str(f), world],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r, f in enumerate(snapshots)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        outs.append(out.strip() if p.returncode == 0 else f"exit {p.returncode}: {err[-2000:]}")
    return outs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", action="append", help=f"ops to tune (default: {', '.join(OPS)})")
    p.add_argument("--devices", default="0,1", help="the GPUs of the fleet job (default 0,1)")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--lease", type=float, default=20.0, help="lease of a claim, s (default 20)")
    p.add_argument("--kill-at", type=float, default=0.25, help="share of tasks done before the kill (default 0.25)")
    p.add_argument("--out", default="fleet-run")
    args = p.parse_args()
    admin = os.environ.get("KERNELZOO_TEST_POSTGRES")
    if not admin:
        sys.exit("no PostgreSQL server: run under `. .ci/postgres.sh` (KERNELZOO_TEST_POSTGRES is unset)")
    ops = args.op or list(OPS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpus = args.devices.split(",")
    report: dict = {"ops": ops, "devices": args.devices, "trials": args.trials}
    urls = {name: new_database(admin, name) for name in ("one", "many", "killed")}
    for name, devices, kill_at in (("one", gpus[0], None), ("many", args.devices, None),
                                   ("killed", args.devices, args.kill_at)):
        run = run_job(tune_cmd(ops, devices, urls[name], args.trials, args.lease), urls[name], kill_at)
        run.update(check_job(urls[name]))
        report[name] = run
        print(f"{name}: {run['seconds']:.1f} s, exit {run['returncode']}, {run['states']}", file=sys.stderr)
    report["ratio_many_to_one"] = report["many"]["seconds"] / report["one"]["seconds"]
    snapshot = out / "winners.json"
    subprocess.run([sys.executable, "-m", "kernelzoo.cli", "db", "snapshot", str(snapshot), "--db", urls["many"]],
                   check=True, capture_output=True)
    altered = out / "winners-altered.json"
    data = json.loads(snapshot.read_text())
    data["records"][0]["time_ms"] *= 2
    altered.write_text(json.dumps(data))
    with tempfile.TemporaryDirectory() as tmp:
        report["ranks_same"] = ranks([snapshot] * len(gpus), Path(tmp), 0)
        report["ranks_altered"] = ranks([snapshot, altered, *[snapshot] * (len(gpus) - 2)], Path(tmp), 1)
    checks = {
        "throughput": report["ratio_many_to_one"] <= 0.55,
        "jobs_finished": all(report[n]["returncode"] == 0 and set(report[n]["states"]) <= {"done", "skipped"}
                             for n in ("one", "many", "killed")),
        "nothing_twice": all(report[n]["configs_measured_twice"] == 0 and report[n]["winner_rows"] ==
                             report[n]["winner_rows_unique"] for n in ("one", "many", "killed")),
        "same_keys": report["one"]["keys"] == report["many"]["keys"] == report["killed"]["keys"],
        "kill_taken_over": report["killed"]["killed"] is not None and report["killed"]["taken_over"] >= 1,
        "ranks_same": all(o.startswith("same ") for o in report["ranks_same"]),
        "ranks_altered_names_rank_1": all(o.startswith("differ [1]") for o in report["ranks_altered"]),
    }
    report["checks"] = checks
    (out / "fleet_run.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: v for k, v in report.items() if k not in ("one", "many", "killed")}, default=str))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
