#!/usr/bin/env python3
"""The "prometheus" section end to end (docs/monitoring.md).

1. Textfile: a 2-rank run with port 0 writes textfile_dir/ztrain.prom that
   `promtool check metrics` accepts, with the run's counts (steps, tokens,
   samples, checkpoints) and no GPU series when NVML cannot be loaded (said
   once in the log); a port that is in use is an error naming it.
2. /metrics: a 2-rank run serves it to a real Prometheus server started here
   (scrape interval 1 s); queries through its HTTP API return the expected
   series with sane values (the tests' fake NVML stands in for a GPU's), and
   every PromQL expression of jobs/monitoring/ztrain-dashboard.json returns
   data. The run is then stopped with SIGUSR1 (saves and exits 0).

Environment from CTest: ZTRAIN, MPIEXEC, MPI_FLAGS, SRC, ZT_FAKE_NVML.
"""
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

FAILS = []


def check(ok, what, detail=""):
    if ok:
        print("ok: " + what)
    else:
        print("FAIL: " + what + (": " + detail if detail else ""))
        FAILS.append(what)
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mpirun(np, args):
    return [os.environ["MPIEXEC"], *os.environ.get("MPI_FLAGS", "").split(), "--bind-to", "none", "-np", str(np),
            os.environ["ZTRAIN"], *args]


MODEL = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
         "fp16": {"enabled": True, "initial_scale_power": 8},
         "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab_size": 64}}


def write_config(path, **sections):
    cfg = dict(MODEL)
    cfg.update(sections)
    with open(path, "w") as f:
        json.dump(cfg, f)


def parse_textfile(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        if not m:
            raise ValueError("bad line: " + line)
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def textfile_part(work, promtool):
    cfg = os.path.join(work, "t.json")
    write_config(cfg, prometheus={"enabled": True, "port": 0, "textfile_dir": "tf"},
                 checkpoint={"dir": "ck", "interval": 3}, train={"steps": 6, "eval_interval": 0})
    env = dict(os.environ, ZT_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    r = subprocess.run(mpirun(2, [cfg, "--log-dir", "lt"]), cwd=work, env=env, capture_output=True, text=True,
                       timeout=120)
    log = r.stdout + r.stderr
    if not check(r.returncode == 0, "textfile run exits 0", log[-2000:]):
        return
    path = os.path.join(work, "tf", "ztrain.prom")
    if not check(os.path.isfile(path), "textfile_dir/ztrain.prom written"):
        return
    check(not os.path.exists(path + ".tmp"), "no temporary file left beside ztrain.prom")
    p = subprocess.run([promtool, "check", "metrics"], stdin=open(path), capture_output=True, text=True)
    check(p.returncode == 0, "promtool check metrics passes on the textfile", p.stdout + p.stderr)
    text = open(path).read()
    m = parse_textfile(text)
    g = lambda name, **labels: m.get((name, frozenset(labels.items())))
    check(g("ztrain_steps_total") == 6, "ztrain_steps_total is the run's 6 steps", str(g("ztrain_steps_total")))
    check(g("ztrain_samples_total") == 48, "ztrain_samples_total = 6 steps x 8 sequences",
          str(g("ztrain_samples_total")))
    check(g("ztrain_tokens_total") == 6 * 8 * 16, "ztrain_tokens_total = 6 steps x 8 x 16 targets",
          str(g("ztrain_tokens_total")))
    check(g("ztrain_checkpoints_total") == 2 and g("ztrain_checkpoint_step") == 6 and
          (g("ztrain_checkpoint_size_bytes") or 0) > 0 and (g("ztrain_checkpoint_duration_seconds") or 0) > 0,
          "two checkpoints counted, the last one's step, size and duration",
          str([g(n) for n in ("ztrain_checkpoints_total", "ztrain_checkpoint_step", "ztrain_checkpoint_size_bytes")]))
    params = g("ztrain_model_parameters")
    for rank in ("0", "1"):
        # fp16 parameters: 2 bytes each, ZeRO 0 keeps them all on every rank.
        v = g("ztrain_memory_peak_bytes", rank=rank, dp_rank=rank, pp_rank="0", space="device", tag="params")
        check(params and v is not None and v >= 2 * params, "rank %s: device params peak >= 2 bytes x parameters" % rank,
              "%s vs %s parameters" % (v, params))
    check("ztrain_gpu_" not in text, "no GPU series when NVML cannot be loaded")
    said = log.count("GPU series (ztrain_gpu_*) not exported: /nonexistent/libnvidia-ml.so.1")
    check(said == 1, "the missing NVML is said once in the log", "said %d times" % said)

    # A port another process holds: the error names it, exit code 2 (bad input).
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(mpirun(2, [cfg, "--log-dir", "lp", "--set", "prometheus.port=%d" % port]), cwd=work,
                           capture_output=True, text=True, timeout=120)
    check(r.returncode == 2 and ("prometheus.port %d: cannot serve /metrics on port %d" % (port, port)) in r.stderr,
          "a port in use is an error naming it", "exit %d: %s" % (r.returncode, r.stderr[-800:]))


class Prom:
    def __init__(self, port):
        self.base = "http://127.0.0.1:%d" % port

    def get(self, path, **params):
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)

    def query(self, expr):
        r = self.get("/api/v1/query", query=expr)
        if r.get("status") != "success":
            raise RuntimeError("%s: %s" % (expr, r))
        return r["data"]["result"]

    def values(self, expr):
        """{frozenset(labels without __name__, job, instance): value}"""
        out = {}
        for s in self.query(expr):
            labels = frozenset((k, v) for k, v in s["metric"].items() if k not in ("__name__", "job", "instance"))
            out[labels] = float(s["value"][1])
        return out


def server_part(work, prometheus, dashboard):
    zport, pport = free_port(), free_port()
    cfg = os.path.join(work, "s.json")
    # Far more steps than the test waits for: it stops the run with SIGUSR1.
    write_config(cfg, prometheus={"enabled": True, "port": zport},
                 checkpoint={"dir": "cks", "interval": 25, "keep_last": 1},
                 train={"steps": 10000000, "eval_interval": 20, "eval_steps": 2})
    env = dict(os.environ, ZT_NVML_LIBRARY=os.environ["ZT_FAKE_NVML"])
    zlog = open(os.path.join(work, "ztrain.log"), "w+")
    z = subprocess.Popen(mpirun(2, [cfg, "--log-dir", "ls"]), cwd=work, env=env, stdout=zlog,
                         stderr=subprocess.STDOUT, start_new_session=True)
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: ztrain\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % zport)
    plog = open(os.path.join(work, "prometheus.log"), "w+")
    p = subprocess.Popen([prometheus, "--config.file=" + os.path.join(work, "prometheus.yml"),
                          "--storage.tsdb.path=" + os.path.join(work, "tsdb"),
                          "--web.listen-address=127.0.0.1:%d" % pport], stdout=plog, stderr=subprocess.STDOUT)
    prom = Prom(pport)
    try:
        # Three scrapes of a running trainer that has validated and saved a
        # checkpoint (every series then exists), at most 40 s (a slow start
        # on a loaded machine).
        deadline = time.time() + 40
        scrapes, seen = 0, False
        while time.time() < deadline and z.poll() is None and p.poll() is None:
            time.sleep(0.5)
            try:
                r = prom.values("count_over_time(ztrain_tokens_total[1m])")
                scrapes = int(max(r.values())) if r else 0
                seen = bool(prom.query("ztrain_checkpoint_step")) and bool(prom.query("ztrain_val_loss"))
            except OSError:
                continue
            if scrapes >= 3 and seen:
                break
        if not check(scrapes >= 3 and seen, "Prometheus scraped /metrics at least 3 times, after a validation and "
                     "a checkpoint", "%d scrapes, checkpoint and validation seen: %s; ztrain %s, prometheus %s"
                     % (scrapes, seen, z.poll(), p.poll())):
            zlog.seek(0)
            print("---- ztrain log (tail) ----\n" + zlog.read()[-1500:])
            return
        server_checks(prom)
        dashboard_checks(prom, dashboard)
    finally:
        if z.poll() is None:
            z.send_signal(signal.SIGUSR1)  # mpirun forwards it: the ranks finish the step, save and exit 0
            try:
                z.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(z.pid, signal.SIGKILL)
                z.wait()
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    zlog.seek(0)
    out = zlog.read()
    check(z.returncode == 0 and "stop signal received" in out, "the served run stops on SIGUSR1 and exits 0",
          "exit %s: %s" % (z.returncode, out[-1500:]))
    if FAILS:
        plog.seek(0)
        print("---- prometheus log (tail) ----\n" + plog.read()[-1500:])
        print("---- ztrain log (tail) ----\n" + out[-1500:])


def one(prom, expr):
    v = prom.values(expr)
    return next(iter(v.values())) if len(v) == 1 else None


def server_checks(prom):
    check(one(prom, 'up{job="ztrain"}') == 1, "up{job=\"ztrain\"} is 1")
    t = one(prom, "ztrain_tokens_total")
    check(t is not None and t > 0, "ztrain_tokens_total > 0", str(t))
    rate = one(prom, "rate(ztrain_tokens_total[1m])")
    check(rate is not None and rate > 0, "ztrain_tokens_total increases (rate > 0)", str(rate))
    ratio = one(prom, "ztrain_samples_total / ztrain_steps_total")
    check(ratio == 8, "ztrain_samples_total / ztrain_steps_total = the global batch of 8", str(ratio))
    loss = one(prom, "ztrain_loss")
    check(loss is not None and math.isfinite(loss) and 0 < loss < 10, "ztrain_loss finite, in (0, 10)", str(loss))
    val = one(prom, "ztrain_val_loss")
    check(val is not None and math.isfinite(val) and 0 < val < 10, "ztrain_val_loss finite, in (0, 10)", str(val))
    check(one(prom, "ztrain_learning_rate") == 1e-3, "ztrain_learning_rate is the config's 1e-3")
    scale = one(prom, "ztrain_loss_scale")
    check(scale is not None and scale >= 1, "ztrain_loss_scale >= 1 with fp16", str(scale))
    gn = one(prom, "ztrain_grad_norm")
    check(gn is not None and math.isfinite(gn) and gn > 0, "ztrain_grad_norm finite, > 0", str(gn))
    st = one(prom, "ztrain_step_seconds")
    check(st is not None and 0 < st < 10, "ztrain_step_seconds in (0, 10)", str(st))
    params = one(prom, "ztrain_model_parameters")
    mem = prom.values('ztrain_memory_bytes{space="device",tag="params"}')
    want = {frozenset({("rank", r), ("dp_rank", r), ("pp_rank", "0"), ("space", "device"), ("tag", "params")})
            for r in ("0", "1")}
    check(set(mem) == want, "device params memory of ranks 0 and 1 with their dp and pp coordinates", str(mem))
    check(params and all(v == 2 * params for v in mem.values()),
          "each rank holds 2 bytes x parameters (fp16, ZeRO 0)", "%s vs %s" % (mem, params))
    comm = prom.values('ztrain_comm_bytes_total{op="all_reduce"}')
    check(len(comm) == 2 and all(v > 0 for v in comm.values()), "all-reduce bytes counted on both ranks", str(comm))
    # [Note: communication time]: each rank's all-reduces took time, at most all of it waited for.
    secs = prom.values('ztrain_comm_seconds{op="all_reduce"}')
    waited = prom.values('ztrain_comm_wait_seconds{op="all_reduce"}')
    check(len(secs) == 2 and all(v > 0 for v in secs.values()), "all-reduce time of both ranks > 0", str(secs))
    check(len(waited) == 2 and all(0 <= waited[k] <= secs.get(k, -1) for k in waited),
          "time waited for the all-reduces in [0, their time] on both ranks", "%s vs %s" % (waited, secs))
    hidden = prom.values("ztrain_comm_hidden_ratio")
    check(len(hidden) == 2 and all(0 <= v <= 1 for v in hidden.values()), "ztrain_comm_hidden_ratio of both ranks "
          "in [0, 1]", str(hidden))
    phases = prom.values('ztrain_phase_seconds{rank="0"}')
    check({dict(k)["phase"] for k in phases} == {"forward", "backward", "reduce", "optimizer", "p2p_wait"} and
          all(v >= 0 for v in phases.values()), "rank 0's phase times", str(phases))
    for name, want_v in (("ztrain_gpu_utilization_ratio", 0.37), ("ztrain_gpu_power_watts", 250.0),
                         ("ztrain_gpu_memory_used_bytes", 3.0 * 2 ** 30), ("ztrain_gpu_memory_total_bytes", 80.0 * 2 ** 30)):
        v = prom.values(name)
        check(len(v) == 2 and all(abs(x - want_v) < 1e-9 * want_v for x in v.values()),
              "%s of both ranks from (fake) NVML" % name, str(v))


def dashboard_checks(prom, dashboard):
    with open(dashboard) as f:
        d = json.load(f)
    exprs = [(p["title"], t["expr"]) for p in d["panels"] for t in p.get("targets", [])]
    check(len(exprs) >= 10, "the dashboard has its panels' expressions", str(len(exprs)))
    # Grafana's variables as a dashboard with job "ztrain" would set them.
    for title, expr in exprs:
        q = expr.replace("$__rate_interval", "1m").replace("$job", "ztrain")
        try:
            r = prom.query(q)
        except Exception as e:  # a parse error comes back as HTTP 400
            r, q = [], q + " (" + str(e) + ")"
        check(len(r) > 0, "dashboard panel '%s': %s returns data" % (title, expr), q)
    jobs = prom.get("/api/v1/label/job/values", **{"match[]": "ztrain_steps_total"})["data"]
    check(jobs == ["ztrain"], "the dashboard's job variable (label_values(ztrain_steps_total, job)) lists the job",
          str(jobs))


def main():
    src = os.environ["SRC"]
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        print("FAIL: the prometheus and promtool programs are not on PATH; install Debian's prometheus package "
              "(jobs/setup.sh does)")
        return 1
    work = tempfile.mkdtemp(prefix="zt-prom.")
    try:
        textfile_part(work, promtool)
        server_part(work, prometheus, os.path.join(src, "jobs", "monitoring", "ztrain-dashboard.json"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
