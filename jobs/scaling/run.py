#!/usr/bin/env python3
"""Scaling study: runs ztrain over ranks x ZeRO stages x pipeline layouts, in
weak scaling (micro-batch and accumulation per data-parallel rank fixed, the
global batch grows with the data-parallel size) and strong scaling (the
global batch of the largest run, fixed), and writes a markdown report, a TSV
of the raw numbers and PNG plots. Every number comes from the runs'
metrics.jsonl and from `ztrain --estimate-memory`. See jobs/scaling/README.md.

  jobs/scaling/run.py [--ranks "1 2 4 8"] [--models "tiny ..."] [--stages "0 1 2 3"]
                      [--pipeline "1:1 2:1 2:2"] [--mode weak|strong|both] [--steps N]
                      [--device cpu|cuda|auto] [--launcher "mpirun ... -np"] [--ztrain PATH]
                      [--config FILE] [--set KEY=VALUE]... [--out FILE.md] [--raw DIR]
                      [--plots DIR] [--busbw-gbs X] [--keep-going] [--dry-run]

Runs execute in the current directory (the shipped configs name their data
relative to the repository root: run it from there). Needs Python 3 and, for
the plots, matplotlib (Debian's python3-matplotlib).
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TAGS = ["params", "grads", "optim", "activations", "comm", "workspace", "offload"]


class BadOption(Exception):
    pass


def die(msg):
    print(f"scaling: {msg}", file=sys.stderr)
    sys.exit(2)


def quote(args):
    """Shell words, quoted only where needed (for the report and the command lists)."""
    out = []
    for a in args:
        a = str(a)
        out.append(a if re.fullmatch(r"[A-Za-z0-9_./:=,+@%-]+", a) else "'" + a.replace("'", "'\\''") + "'")
    return " ".join(out)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 2 with the driver's prefix, as every bad option does
        die(f"{message} (see --help)")


def parse_args(argv):
    p = Parser(prog="run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
               allow_abbrev=False)
    p.add_argument("--ranks", default="1 2 4 8", help='process (GPU) counts ["1 2 4 8"]')
    p.add_argument("--models", default="", help="model presets, set as model.preset [the config's model]")
    p.add_argument("--stages", default="0 1 2 3", help='ZeRO stages ["0 1 2 3"]')
    p.add_argument("--pipeline", default="1:1",
                   help='pipeline size : chunks per stage (V>1: interleaved, or P:V:SCHEDULE) ["1:1"]')
    p.add_argument("--mode", default="both", help="weak, strong or both [both]")
    p.add_argument("--steps", default="10", help="optimizer steps per run, >= 2; step 1 is warm-up [10]")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto [cpu]")
    p.add_argument("--launcher", default="",
                   help="launcher, the rank count is appended (split on blanks) "
                        "[$MPIEXEC $MPI_FLAGS -np, else mpirun --allow-run-as-root --oversubscribe -np]")
    p.add_argument("--ztrain", default=os.path.join(REPO, "build/bin/ztrain"), help="the ztrain binary")
    p.add_argument("--config", default=os.path.join(REPO, "data/configs/tiny.json"), help="base config")
    p.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE",
                   help="extra ztrain override for every run (repeatable; the driver's own keys win)")
    p.add_argument("--out", default=os.path.join(REPO, "runs/scaling/report.md"),
                   help="markdown report [runs/scaling/report.md; docs/scaling.md is written by hand]")
    p.add_argument("--raw", default="", help="keep logs, metrics and results.tsv in DIR [a temporary "
                   "directory, removed when every run succeeded; the TSV then goes next to --out]")
    p.add_argument("--plots", default="", help="directory of the PNG plots [next to --out: OUT_STEM-plots/]")
    p.add_argument("--no-plots", action="store_true", help="write no plots")
    p.add_argument("--busbw-gbs", default="", help="measured bus bandwidth in GB/s (zbench), for the "
                   "communication-time and hidden-communication estimates")
    p.add_argument("--keep-going", action="store_true", help="on a failed run, report it and go on (exit 1)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    a = p.parse_args(argv)

    a.modes = {"weak": ["weak"], "strong": ["strong"], "both": ["weak", "strong"]}.get(a.mode)
    if a.modes is None:
        die(f"--mode must be weak, strong or both, not '{a.mode}'")
    if a.device not in ("cpu", "cuda", "auto"):
        die(f"--device must be cpu, cuda or auto, not '{a.device}'")
    if not re.fullmatch(r"[0-9]+", a.steps) or int(a.steps) < 2:
        die(f"--steps must be an integer >= 2 (step 1 is left out as warm-up), not '{a.steps}'")
    a.steps = int(a.steps)
    if not a.ranks.split():
        die("--ranks is empty")
    for n in a.ranks.split():
        if not re.fullmatch(r"[0-9]+", n) or int(n) < 1:
            die(f"--ranks: '{n}' is not a positive integer")
    a.rank_list = [int(n) for n in a.ranks.split()]
    if not a.stages.split():
        die("--stages is empty")
    a.stage_list = a.stages.split()  # passed through: ztrain judges a bad stage (and the run fails)
    a.layouts = []
    for pv in a.pipeline.split():
        if not re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*(:[a-z0-9]+)?", pv):
            die(f"--pipeline: '{pv}' is not P:V or P:V:SCHEDULE")
        parts = pv.split(":")
        P, V = int(parts[0]), int(parts[1])
        sched = parts[2] if len(parts) > 2 else ("interleaved" if V > 1 else "1f1b")
        a.layouts.append((P, V, sched))
    if a.busbw_gbs:
        try:
            a.busbw = float(a.busbw_gbs)
        except ValueError:
            a.busbw = 0.0
        if not a.busbw > 0:
            die(f"--busbw-gbs must be a positive number, not '{a.busbw_gbs}'")
    else:
        a.busbw = None
    if not os.path.isfile(a.config):
        die(f"config '{a.config}' not found")
    if not a.dry_run and not os.access(a.ztrain, os.X_OK):
        die(f"ztrain binary '{a.ztrain}' not found or not executable (build it, or pass --ztrain)")
    for s in a.sets:
        if "=" not in s:
            die(f"--set '{s}' is not KEY=VALUE")
    if not a.launcher:
        if os.environ.get("MPIEXEC"):
            a.launcher = f"{os.environ['MPIEXEC']} {os.environ.get('MPI_FLAGS', '')} -np"
        else:
            a.launcher = "mpirun --allow-run-as-root --oversubscribe -np"
    a.launch = shlex.split(a.launcher)
    if not a.no_plots and not a.dry_run:
        try:  # before the runs, not after them
            import matplotlib  # noqa: F401
        except ImportError:
            die(f"the plots need matplotlib, which {sys.executable} cannot import "
                "(Debian: apt-get install python3-matplotlib; or pass --no-plots)")
    return a


# ---- the base batch: DeepSpeed's triplet resolved for one data-parallel rank ----
def base_batch(a):
    try:
        with open(a.config) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{a.config}: cannot read it as JSON ({e})")

    def key(k):  # a top-level key of the config, or the last --set of it; None for "auto"/absent
        v = cfg.get(k)
        for s in a.sets:
            name, _, val = s.partition("=")
            if name == k:
                try:
                    v = json.loads(val)
                except ValueError:
                    v = val
        if v is None or (isinstance(v, str) and v.strip().lower() in ("auto", "")):
            return None
        if isinstance(v, str) and re.fullmatch(r"[0-9]+", v.strip()):
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            die(f"{a.config}: cannot read the batch sizes ('{k}': {v!r})")
        return v

    bt, bm, ba = key("train_batch_size"), key("train_micro_batch_size_per_gpu"), key("gradient_accumulation_steps")
    if bt is not None and bm is not None and ba is not None:
        if bt != bm * ba:
            die(f"{a.config}: train_batch_size {bt} != micro {bm} x accumulation {ba} at one data-parallel rank")
        return bm, ba, cfg
    if bt is not None and bm is not None:
        if bt % bm:
            die(f"{a.config}: train_batch_size {bt} is not a multiple of the micro-batch {bm}")
        return bm, bt // bm, cfg
    if bt is not None and ba is not None:
        if bt % ba:
            die(f"{a.config}: train_batch_size {bt} is not a multiple of the accumulation {ba}")
        return bt // ba, ba, cfg
    if bt is not None:
        return bt, 1, cfg
    return (bm if bm is not None else 4), (ba if ba is not None else 1), cfg


# ---- the plan: one row per (model, mode, layout, stage, ranks) ----
def plan(a, mb0, acc0, models):
    per_rank = mb0 * acc0
    dp_max = max([n // P for (P, _, _) in a.layouts for n in a.rank_list if n % P == 0], default=0)
    if dp_max == 0:
        die("no --ranks value is a multiple of any --pipeline size")
    g_strong = per_rank * dp_max
    rows, skipped = [], []
    for model in models:
        for m in a.modes:
            for (P, V, sched) in a.layouts:
                for stage in a.stage_list:
                    for n in a.rank_list:
                        where = f"{n} rank(s) with P:V {P}:{V}, ZeRO stage {stage}"
                        if n % P:
                            skipped.append((m, model, f"{where}: {n} is not a multiple of P={P}"))
                            continue
                        dp = n // P
                        if m == "weak":
                            micro, accum = mb0, acc0
                        else:
                            if g_strong % dp:
                                skipped.append((m, model, f"{where}: global batch {g_strong} is not a multiple of dp {dp}"))
                                continue
                            s = g_strong // dp
                            micro = mb0
                            while s % micro:
                                micro -= 1
                            accum = s // micro
                        tail = "" if sched in ("1f1b", "interleaved") else f"-{sched}"
                        key = f"{model}-n{n}-p{P}v{V}{tail}-z{stage}-m{micro}a{accum}"
                        rows.append(dict(mode=m, model=model, n=n, P=P, V=V, sched=sched, dp=dp, stage=stage,
                                         micro=micro, accum=accum, global_batch=micro * accum * dp, key=key))
    return rows, skipped, per_rank, g_strong


# ---- metrics.jsonl -> the numbers of one run ----
def median(xs):
    return statistics.median(xs) if xs else None


def summarize(path):
    s = dict(steps=0, ended=False, losses=[], peak={}, final_loss=None)
    tok, red, stp, bub = [], [], [], []
    csec, cwait, chid = [], [], []
    comm = {}
    bsched = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("event") == "end":
                s["ended"] = True
                s["peak"] = r.get("peak_bytes", {}) or {}
                continue
            if "tokens_per_s" not in r:
                continue
            s["steps"] += 1
            s["losses"].append(r.get("loss"))
            s["final_loss"] = r.get("loss")
            if r.get("step", 0) <= 1:  # warm-up
                continue
            tok.append(float(r["tokens_per_s"]))
            tb = r.get("time_breakdown_s")
            if isinstance(tb, dict):
                red.append(float(tb.get("reduce", 0.0)))
                stp.append(float(tb.get("step", 0.0)))
            cb = r.get("comm_bytes")
            if isinstance(cb, dict):
                comm = cb
            # The collectives' measured time and the part waited for (ztrain's
            # [Note: communication time]); the hidden fraction only where dp > 1.
            cs, cw = r.get("comm_seconds"), r.get("comm_waited_s")
            if isinstance(cs, dict) and isinstance(cw, dict):
                csec.append(sum(float(v) for v in cs.values()))
                cwait.append(sum(float(v) for v in cw.values()))
            if r.get("comm_hidden_fraction") is not None:
                chid.append(float(r["comm_hidden_fraction"]))
            if r.get("bubble_measured") is not None:
                bub.append(float(r["bubble_measured"]))
            if r.get("bubble_schedule") is not None:
                bsched = float(r["bubble_schedule"])
    s.update(tokens_per_s=median(tok), reduce_s=median(red), step_s=median(stp),
             comm_all_reduce=comm.get("all_reduce"), comm_reduce_scatter=comm.get("reduce_scatter"),
             comm_all_gather=comm.get("all_gather"), bubble_measured=median(bub), bubble_schedule=bsched,
             comm_measured_s=median(csec), comm_waited_s=median(cwait), hidden_measured=median(chid))
    return s


def estimate_total(path, stage):
    """The DEVICE total (bytes) of the configured stage in `ztrain --estimate-memory`."""
    unit = None
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("memory per rank (GiB)"):
                    unit = 1 << 30
                elif line.startswith("memory per rank (MiB)"):
                    unit = 1 << 20
                w = line.split()
                if unit and len(w) >= 10 and w[0] == str(stage) and w[1] in ("none", "none/none") and w[2] != "n/a:":
                    return round(float(w[9]) * unit)
    except (OSError, ValueError):
        return None
    return None


def fmt(f, x):
    return "n/a" if x is None else f % x


def tsvv(x):
    return "" if x is None else str(x)


def main(argv):
    a = parse_args(argv)
    cmdline = quote([sys.argv[0]] + argv)
    mb0, acc0, cfg = base_batch(a)
    if a.models:
        models, set_model = a.models.split(), True
    else:
        preset = (cfg.get("model") or {}).get("preset") if isinstance(cfg.get("model"), dict) else None
        models, set_model = [preset or os.path.splitext(os.path.basename(a.config))[0]], False
    rows, skipped, per_rank, g_strong = plan(a, mb0, acc0, models)

    own_raw = False
    if a.dry_run:
        raw = a.raw or "RAW"
    elif not a.raw:
        raw = tempfile.mkdtemp(prefix="ztrain-scaling.", dir=os.environ.get("TMPDIR", "/tmp"))
        own_raw = True
    else:
        raw = a.raw
        os.makedirs(raw, exist_ok=True)

    # ---- run ----
    runs = {}  # key -> dict(status, cmd, summary, est)
    failures = 0
    for row in rows:
        key = row["key"]
        if key in runs:
            continue
        sets = []
        for s in a.sets:
            sets += ["--set", s]
        if set_model:
            sets += ["--set", f"model.preset={row['model']}"]
        for k, v in (("zero_optimization.stage", row["stage"]), ("pipeline.parallel_size", row["P"]),
                     ("pipeline.num_chunks", row["V"]), ("pipeline.pipe_schedule_name", row["sched"]),
                     ("train_batch_size", row["global_batch"]), ("train_micro_batch_size_per_gpu", row["micro"]),
                     ("gradient_accumulation_steps", row["accum"]), ("steps_per_print", 1),
                     ("wall_clock_breakdown", "true")):
            sets += ["--set", f"{k}={v}"]
        rundir = os.path.join(raw, key)
        run_cmd = a.launch + [str(row["n"]), a.ztrain, a.config, "--device", a.device, "--steps", str(a.steps),
                              "--log-dir", rundir] + sets
        est_cmd = a.launch + ["1", a.ztrain, a.config, "--estimate-memory", "--device", a.device,
                              "--world", str(row["n"])] + sets
        r = runs[key] = dict(status=None, cmd=quote(run_cmd), summary=None, est=None, log=rundir + ".log")
        what = (f"model {row['model']}, {row['n']} rank(s), P:V {row['P']}:{row['V']} ({row['sched']}), "
                f"dp {row['dp']}, ZeRO stage {row['stage']}, micro {row['micro']} x accum {row['accum']} "
                f"(global batch {row['global_batch']})")
        if a.dry_run:
            print(r["cmd"])
            print(quote(est_cmd))
            print()
            continue
        print(f"scaling: running {what}", file=sys.stderr, flush=True)
        shutil.rmtree(rundir, ignore_errors=True)
        os.makedirs(rundir)
        with open(r["log"], "w") as log:
            rc = subprocess.call(run_cmd, stdout=log, stderr=subprocess.STDOUT)
        metrics = os.path.join(rundir, "metrics.jsonl")
        summ = summarize(metrics) if rc == 0 and os.path.isfile(metrics) else None
        if rc != 0 or summ is None or not summ["ended"] or summ["steps"] != a.steps:
            r["status"] = "FAILED"
            failures += 1
            why = f"exit code {rc}" if rc != 0 else f"no complete metrics in {metrics}"
            with open(r["log"], errors="replace") as f:
                lines = f.read().splitlines()
            errs = [l for l in lines if re.search(r"error|Error|ERROR", l)][:5] or lines[-8:]
            print(f"scaling: FAILED: {what} ({why}); log: {r['log']}", file=sys.stderr)
            for l in errs:
                print(f"  | {l}", file=sys.stderr)
            if not a.keep_going:
                print("scaling: stopping (pass --keep-going to run the other configurations)", file=sys.stderr)
                if own_raw:
                    print(f"scaling: logs kept in {raw}", file=sys.stderr)
                sys.exit(1)
            continue
        r["status"] = "ok"
        r["summary"] = summ
        est_file = os.path.join(raw, key + ".estimate.txt")
        with open(est_file, "w") as f:
            erc = subprocess.call(est_cmd, stdout=f, stderr=subprocess.STDOUT)
        if erc != 0:
            print(f"scaling: warning: memory estimate failed for {what} (see {est_file})", file=sys.stderr)
        r["est"] = estimate_total(est_file, row["stage"])
    if a.dry_run:
        return 0

    # ---- derived numbers per row ----
    def ok(k):
        return runs.get(k, {}).get("status") == "ok"

    def loss_diff(k, ref):
        """max |loss - ref| / |ref| over the steps; None when the curves differ in length."""
        x, y = runs[k]["summary"]["losses"], runs[ref]["summary"]["losses"]
        if len(x) != len(y) or not x:
            return None
        m = 0.0
        for u, v in zip(x, y):
            d = abs(u - v)
            m = max(m, d / abs(v) if v != 0 else d)
        return m

    def ref_of(model, glob):
        """Among the successful runs of the same model and global batch (either mode), the one
        with the fewest ranks, then the smallest P, then the lowest ZeRO stage; and how many."""
        cands = {r["key"]: r for r in rows if r["model"] == model and r["global_batch"] == glob and ok(r["key"])}
        if not cands:
            return None, 0
        best = min(cands.values(), key=lambda r: (r["n"], r["P"], str(r["stage"])))
        return best["key"], len(cands)

    def base_of(m, model, stage):
        """Efficiency baseline: the 1-rank run of the same model, mode and ZeRO stage."""
        for r in rows:
            if r["mode"] == m and r["model"] == model and r["stage"] == stage and r["n"] == 1 and ok(r["key"]):
                return r["key"]
        return None

    out = a.out
    tsv = os.path.join(raw, "results.tsv")
    if own_raw:
        tsv = (out[:-3] if out.endswith(".md") else out) + ".tsv"
    for d in (os.path.dirname(out), os.path.dirname(tsv)):
        if d:
            os.makedirs(d, exist_ok=True)
    header = (["mode", "model", "run", "status", "ranks", "P", "V", "schedule", "dp", "zero_stage", "micro", "accum",
               "global_batch", "steps", "final_loss", "ref_run", "max_rel_loss_diff", "tokens_per_s",
               "tokens_per_s_per_rank", "efficiency", "step_s", "reduce_s", "comm_all_reduce_bytes",
               "comm_reduce_scatter_bytes", "comm_all_gather_bytes", "comm_s", "comm_waited_s", "hidden_fraction",
               "comm_busbw_s", "hidden_busbw",
               "bubble_measured", "bubble_schedule", "peak_total_bytes"]
              + [f"peak_{t}_bytes" for t in TAGS] + ["est_device_bytes", "measured_over_estimate", "log", "command"])
    tsv_lines = ["\t".join(header)]
    md, cm = {}, {}
    for row in rows:
        key, m, model, n, dp = row["key"], row["mode"], row["model"], row["n"], row["dp"]
        r = runs[key]
        cm.setdefault((m, model), []).append(f"- `{key}`: `{r['cmd']}`")
        lead = [m, model, key]
        geo = [n, row["P"], row["V"], row["sched"], dp, row["stage"], row["micro"], row["accum"], row["global_batch"],
               a.steps]
        if r["status"] != "ok":
            md.setdefault((m, model), []).append(
                f"| `{key}` | {n} | {row['P']}:{row['V']} | {dp} | {row['stage']} | {row['micro']}×{row['accum']} "
                f"| {row['global_batch']} | FAILED: see `{r['log']}` |")
            tsv_lines.append("\t".join(map(str, lead + ["FAILED"] + geo + [""] * (len(header) - 16) + [r["log"], r["cmd"]])))
            continue
        s = r["summary"]
        tok, red = s["tokens_per_s"], s["reduce_s"]
        ar, rs, ag = s["comm_all_reduce"], s["comm_reduce_scatter"], s["comm_all_gather"]
        peak = s["peak"].get("total")
        est = r["est"]
        ref, peers = ref_of(model, row["global_batch"])
        diff = None
        if peers < 2:
            ref, refcell = None, f"n/a (no other run with global batch {row['global_batch']})"
        elif ref == key:
            refcell = "ref"
        else:
            diff = loss_diff(key, ref)
            refcell = f"{fmt('%.1e', diff)} (vs `{ref}`)"
        base = base_of(m, model, row["stage"])
        eff = None
        if base and tok is not None and runs[base]["summary"]["tokens_per_s"]:
            eff = tok / n / runs[base]["summary"]["tokens_per_s"]
        per = tok / n if tok is not None else None
        # Communication time at the bus bandwidth: all_reduce moves 2(dp-1)/dp of its
        # bytes per rank, reduce_scatter and all_gather (dp-1)/dp (zbench's busbw).
        bus_s = bus_hidden = None
        if a.busbw and ar is not None:
            t = (2 * ar + (rs or 0) + (ag or 0)) * (dp - 1) / dp / (a.busbw * 1e9)
            if t > 0:
                bus_s = t
                if red is not None:
                    bus_hidden = min(1.0, max(0.0, 1 - red / t))
        # Measured: the collectives' time and the time waited for them, per step.
        comm_s, waited_s, hidden = s["comm_measured_s"], s["comm_waited_s"], s["hidden_measured"]
        if dp == 1:
            comm_s = waited_s = hidden = None
        ratio = peak / est if (peak is not None and est) else None
        bytag = ", ".join(f"{t} {s['peak'][t] / 1048576:.2f}" for t in TAGS if s["peak"].get(t))
        bub = "–"
        if row["P"] != 1:
            bm_, bs_ = s["bubble_measured"], s["bubble_schedule"]
            bub = f"{fmt('%.1f%%', None if bm_ is None else bm_ * 100)} / {fmt('%.1f%%', None if bs_ is None else bs_ * 100)}"
        hcell = "no comm" if dp == 1 else fmt("%.2f", hidden)
        if dp > 1 and bus_hidden is not None:
            hcell += f" (busbw: {bus_hidden:.2f})"
        ctcell = "–" if dp == 1 else f"{fmt('%.2f', None if comm_s is None else comm_s * 1e3)} " \
                                     f"({fmt('%.2f', None if waited_s is None else waited_s * 1e3)})"
        commcell = "n/a" if (ar, rs, ag) == (None, None, None) else f"{((ar or 0) + (rs or 0) + (ag or 0)) / 1e6:.3f}"
        row.update(tokens_per_s=tok, efficiency=eff, peak=peak, est=est, reduce_s=red, comm_s=comm_s, waited_s=waited_s,
                   hidden=hidden, bus_s=bus_s, bus_hidden=bus_hidden)
        md.setdefault((m, model), []).append(
            f"| `{key}` | {n} | {row['P']}:{row['V']} | {dp} | {row['stage']} | {row['micro']}×{row['accum']} "
            f"| {row['global_batch']} | {fmt('%.0f', tok)} | {fmt('%.0f', per)} | {fmt('%.2f', eff)} "
            f"| {fmt('%.4f', s['final_loss'])} | {refcell} | {fmt('%.2f', None if peak is None else peak / 1048576)} "
            f"| {fmt('%.2f', None if est is None else est / 1048576)} | {fmt('%.2f', ratio)} | {bytag} "
            f"| {fmt('%.2f', None if red is None else red * 1e3)} | {commcell} | {ctcell} | {hcell} | {bub} |")
        vals = (lead + ["ok"] + geo + [s["final_loss"], ref, None if diff is None else f"{diff:.3e}", tok,
                None if per is None else f"{per:.2f}", None if eff is None else f"{eff:.4f}", s["step_s"], red,
                ar, rs, ag, None if comm_s is None else f"{comm_s:.6g}", None if waited_s is None else f"{waited_s:.6g}",
                None if hidden is None else f"{hidden:.4f}", None if bus_s is None else f"{bus_s:.6g}",
                None if bus_hidden is None else f"{bus_hidden:.4f}",
                s["bubble_measured"], s["bubble_schedule"], peak] + [s["peak"].get(t) for t in TAGS]
                + [est, None if ratio is None else f"{ratio:.4f}", r["log"], r["cmd"]])
        tsv_lines.append("\t".join(tsvv(v) for v in vals))
    with open(tsv, "w") as f:
        f.write("\n".join(tsv_lines) + "\n")

    # ---- plots ----
    plots = []
    if not a.no_plots:
        plot_dir = a.plots or (out[:-3] if out.endswith(".md") else out) + "-plots"
        plots = write_plots(a, rows, models, plot_dir, out)

    # ---- the report ----
    commit = git(["rev-parse", "HEAD"]) or "unknown"
    if commit != "unknown" and git(["status", "--porcelain", "--untracked-files=no"]):
        commit += " (with uncommitted changes)"
    gpus = ""
    if shutil.which("nvidia-smi"):
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    try:
        version = subprocess.run([a.ztrain, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        version = ""
    L = ["# ztrain scaling study", "",
         f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%a %b %d %H:%M:%S UTC %Y')}",
         f"- machine: {socket.gethostname()}, {os.cpu_count()} CPUs" + (f" ({cpu})" if cpu else "")]
    if gpus:
        L.append("- GPUs:")
        L += [f"  - {g}" for g in gpus.splitlines()]
    else:
        L.append("- GPUs: none visible (no nvidia-smi)")
    L += [f"- commit: {commit}",
          f"- ztrain: `{a.ztrain}`" + (f" ({version})" if version else "") +
          f", device {a.device}, base config `{a.config}`, {a.steps} steps per run",
          f"- command: `{cmdline}`",
          f"- launcher: `{a.launcher} N`",
          f"- raw numbers: `{tsv}`" + ("" if own_raw else f", logs and metrics in `{raw}`"), "",
          "How the columns are computed (every number from the runs' `metrics.jsonl`, one record per step):", "",
          f"- tokens/s: median over steps 2..{a.steps} of `tokens_per_s` (global batch tokens over step time; "
          "step 1 is warm-up). Per rank: divided by the ranks.",
          "- efficiency: tokens/s per rank over that of the 1-rank run of the same model, mode and ZeRO stage "
          "(n/a without one).",
          "- Δloss: max over steps of |loss − loss_ref| / |loss_ref|, against the run of the same model and global "
          "batch with the fewest ranks (then smallest P, lowest stage) in either mode (for strong scaling the "
          "1-rank run when --ranks has 1); \"ref\" marks that run, n/a when no other run has that global batch.",
          "- peak MiB: `peak_bytes.total` of the end record (max over ranks), by tag beside it; est. MiB: the "
          "DEVICE total of `ztrain --estimate-memory CONFIG --world N` with the same overrides.",
          "- reduce ms: median of `time_breakdown_s.reduce`, the time blocked between the last backward and the "
          "optimizer (outstanding gradient reductions and the norm). comm MB: bytes per rank and step over "
          "all_reduce + reduce_scatter + all_gather (`comm_bytes`)."]
    L.append("- comm ms (waited): medians of the sums over all_reduce, reduce_scatter and all_gather of "
             "`comm_seconds` (each collective's time: on the CPU from the call to the completion the rank saw, on a "
             "GPU the time it ran on the communication stream) and `comm_waited_s` (the part of it the rank waited "
             "for: the host blocked, or the GPU's compute stream stalled), every wait in the step counted, the "
             "gathers inside forward and backward too.")
    L.append("- hidden: 1 − waited / time over those collectives, the median of `comm_hidden_fraction`; "
             "\"no comm\" with one data-parallel rank.")
    if a.busbw:
        L.append(f"- hidden (busbw): the estimate 1 − exposed / total, clamped to [0, 1], with total = (2·all_reduce "
                 f"+ reduce_scatter + all_gather bytes) · (dp−1)/dp / busbw (busbw = {a.busbw_gbs} GB/s, as "
                 "`--busbw-gbs`) and exposed = the reduce time, which leaves out the stage-3 gathers waited for "
                 "inside forward and backward (for stage 3 an upper bound).")
    L.append("- bubble (pipeline only): median of `bubble_measured` (idle over compute, averaged over stages) / "
             "the schedule's (P−1)/(V·M), as `report_pipeline_timing` writes them.")
    if plots:
        L += ["", "## Plots", ""]
        for (title, rel) in plots:
            L += [f"![{title}]({rel})", ""]
        L.pop()
    for model in models:
        L += ["", f"## Model `{model}`"]
        for m in a.modes:
            L.append("")
            if m == "weak":
                L.append(f"### Weak scaling: micro-batch {mb0} × accumulation {acc0} per data-parallel rank, "
                         f"global batch {per_rank} × dp")
            else:
                L.append(f"### Strong scaling: global batch {g_strong} (micro-batch lowered only where it does not "
                         "divide the batch per rank)")
            L += ["", "| run | ranks | P:V | dp | ZeRO | micro×accum | global batch | tokens/s | tokens/s/rank | "
                  "efficiency | final loss | max rel. Δloss | peak MiB/rank | est. MiB | measured/est. | peak by tag "
                  "(MiB) | reduce ms/step | comm MB/step | comm ms/step (waited) | hidden | bubble meas. / sched. |",
                  "| --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | "
                  "---: | --- | ---: | ---: | ---: | ---: | --- |"]
            L += md.get((m, model), [])
            for (sm, smodel, text) in skipped:
                if (sm, smodel) == (m, model):
                    L += ["", f"Not run: {text}."]
            L += ["", "Commands:", ""]
            L += cm.get((m, model), [])
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write("\n".join(L) + "\n")
    os.replace(tmp, out)
    print(f"scaling: wrote {out} and {tsv}" + (f" and {len(plots)} plots" if plots else ""), file=sys.stderr)
    if own_raw:
        if failures == 0:
            shutil.rmtree(raw, ignore_errors=True)
        else:
            print(f"scaling: logs kept in {raw}", file=sys.stderr)
    if failures:
        print(f"scaling: {failures} configuration(s) failed (see FAILED above and in {out})", file=sys.stderr)
        return 1
    return 0


def git(args):
    try:
        p = subprocess.run(["git", "-C", REPO] + args, capture_output=True, text=True)
    except OSError:
        return ""
    return p.stdout.strip() if p.returncode == 0 else ""


def write_plots(a, rows, models, plot_dir, out):
    """PNG plots of the successful rows; returns (title, path relative to the report) per file."""
    import matplotlib
    matplotlib.use("Agg")  # no display
    import matplotlib.pyplot as plt

    os.makedirs(plot_dir, exist_ok=True)
    done = [r for r in rows if r.get("tokens_per_s") is not None]
    files = []

    def series(m, model):
        """One line per (layout, stage), points sorted by ranks."""
        out_ = {}
        for r in done:
            if r["mode"] == m and r["model"] == model:
                out_.setdefault((r["P"], r["V"], r["sched"], r["stage"]), []).append(r)
        return {k: sorted(v, key=lambda r: r["n"]) for k, v in sorted(out_.items(), key=lambda kv: str(kv[0]))}

    def label(k):
        P, V, sched, stage = k
        return f"ZeRO-{stage}" + ("" if P == 1 else f", P={P} V={V} ({sched})")

    def save(fig, name, title):
        # One legend for the figure, beside the panels (inside, it would hide the lines).
        handles, labels = [], []
        for ax in fig.axes:
            for h, l in zip(*ax.get_legend_handles_labels()):
                if l not in labels:
                    handles.append(h)
                    labels.append(l)
        if handles:
            fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
        path = os.path.join(plot_dir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=80, bbox_inches="tight")
        plt.close(fig)
        files.append((title, os.path.relpath(path, os.path.dirname(os.path.abspath(out)) or ".")))

    ranks = sorted({r["n"] for r in done})
    for model in models:
        # Tokens/s and efficiency against ranks, weak and strong side by side.
        for what, ylab, field in (("tokens", "tokens/s (all ranks)", "tokens_per_s"),
                                  ("efficiency", "efficiency (tokens/s per rank / 1 rank)", "efficiency")):
            fig, axes = plt.subplots(1, len(a.modes), figsize=(5.2 * len(a.modes), 3.6), squeeze=False)
            any_ = False
            for ax, m in zip(axes[0], a.modes):
                for k, pts in series(m, model).items():
                    xs = [r["n"] for r in pts if r.get(field) is not None]
                    ys = [r[field] for r in pts if r.get(field) is not None]
                    if xs:
                        ax.plot(xs, ys, marker="o", label=label(k))
                        any_ = True
                if field == "efficiency":
                    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
                    ax.set_ylim(bottom=0)
                ax.set_xscale("log", base=2)
                ax.set_xticks(ranks)
                ax.set_xticklabels([str(n) for n in ranks])
                ax.set_xlabel("ranks")
                ax.set_ylabel(ylab)
                ax.set_title(f"{model}: {m} scaling")
                ax.grid(alpha=0.3)
            if any_:
                save(fig, f"{model}-{what}.png", f"{model}: {ylab} against ranks")
            else:
                plt.close(fig)
        # Memory per rank: measured peak against the estimator's device total.
        fig, axes = plt.subplots(1, len(a.modes), figsize=(5.2 * len(a.modes), 3.6), squeeze=False)
        for ax, m in zip(axes[0], a.modes):
            for i, (k, pts) in enumerate(series(m, model).items()):
                c = f"C{i % 10}"
                xs = [r["n"] for r in pts if r["peak"] is not None]
                ax.plot(xs, [r["peak"] / 1048576 for r in pts if r["peak"] is not None], marker="o", color=c,
                        label=f"{label(k)} measured")
                xe = [r["n"] for r in pts if r["est"]]
                ax.plot(xe, [r["est"] / 1048576 for r in pts if r["est"]], marker="x", ls="--", color=c,
                        label=f"{label(k)} estimate")
            ax.set_xscale("log", base=2)
            ax.set_xticks(ranks)
            ax.set_xticklabels([str(n) for n in ranks])
            ax.set_xlabel("ranks")
            ax.set_ylabel("peak device MiB per rank")
            ax.set_ylim(bottom=0)
            ax.set_title(f"{model}: {m} scaling, memory")
            ax.grid(alpha=0.3)
        save(fig, f"{model}-memory.png", f"{model}: memory per rank, measured and estimated")
        # Communication: the collectives' measured time and the part waited
        # for, the exposed reduce phase, the hidden fraction (measured; the
        # bus-bandwidth estimate dotted where --busbw-gbs was given).
        fig, axes = plt.subplots(1, 2, figsize=(10.4, 3.6))

        def curve(ax, pts, field, scale, **kw):
            xs = [r["n"] for r in pts if r[field] is not None]
            if xs:
                ax.plot(xs, [r[field] * scale for r in pts if r[field] is not None], **kw)

        for i, (m, ls) in enumerate(zip(a.modes, ("-", "--"))):
            for j, (k, pts) in enumerate(series(m, model).items()):
                c = f"C{j % 10}"
                name = f"{label(k)} {m}"
                curve(axes[0], pts, "comm_s", 1e3, marker="o", ls=ls, color=c, label=f"{name}: collectives")
                curve(axes[0], pts, "waited_s", 1e3, marker="v", ls=ls, color=c, alpha=0.6, label=f"{name}: waited")
                curve(axes[0], pts, "reduce_s", 1e3, marker="s", ls=":", color=c, label=f"{name}: reduce phase")
                curve(axes[1], pts, "hidden", 1, marker="o", ls=ls, color=c, label=name)
                curve(axes[1], pts, "bus_hidden", 1, marker="x", ls=":", color=c, label=f"{name} (busbw estimate)")
        axes[0].set_ylabel("ms per step")
        # Lifetimes of prefetched gathers on the CPU reach seconds, waits a
        # millisecond: both visible on one axis.
        axes[0].set_yscale("symlog", linthresh=1.0)
        axes[0].set_title(f"{model}: communication time")
        axes[1].set_ylabel("hidden fraction")
        axes[1].set_ylim(-0.05, 1.05)
        axes[1].set_title(f"{model}: hidden communication")
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.set_xticks(ranks)
            ax.set_xticklabels([str(n) for n in ranks])
            ax.set_xlabel("ranks")
            ax.grid(alpha=0.3)
        save(fig, f"{model}-comm.png", f"{model}: communication time and hidden fraction")
    return files


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
