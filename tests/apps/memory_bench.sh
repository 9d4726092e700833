#!/usr/bin/env bash
# jobs/bench/memory.sh (docs/memory.md) on the CPU, its nine cases scaled
# down to a small GPT: every case has an estimate and an end record, each
# offload case shows the host or NVMe column its mode fills (pinned, pageable,
# NVMe files) with the estimate equal to the measured peak, the cases without
# offload show none, the NVMe swap files are gone after the run, and an
# unknown case is refused.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat >ztrain_small <<SH
#!/usr/bin/env bash
exec "$ZTRAIN" "\$@" --set model.n_layer=2 --set model.d_model=256 --set model.n_head=4 \
  --set train_micro_batch_size_per_gpu=1 --set model.seq_len=64 --set model.vocab_size=4096
SH
chmod +x ztrain_small
ZTRAIN_DEVICE=cpu OMP_NUM_THREADS=1 bash "$SRC/jobs/bench/memory.sh" ./ztrain_small m >out 2>&1 || fail "memory.sh: exit $?"
python3 - m/memory.tsv <<'PY' >check.txt || { cat check.txt; fail "memory.sh's table"; }
import re, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
want = {"z2": set(), "z2-cpu": {"pinned"}, "z3": set(), "z3-cpu-cpu": {"pinned"}, "z3-group": {"pinned"},
        "z3-350m": set(), "z3-cpu-cpu-350m": {"pinned"}, "z3-pageable-350m": {"pageable"},
        "z3-nvme-350m": {"nvme"}}
bad = 0
seen = set()
for r in rows:
    name = r[0]
    seen.add(name)
    if len(r) != 6 or not re.fullmatch(r"[0-9.]+", r[3]):
        print(f"{name}: no estimate against a measured peak: {r}")
        bad += 1
        continue
    host = dict((t, float(q)) for t, q in re.findall(r"(pinned|pageable|nvme) [0-9.]+/[0-9.]+ \(([0-9.]+)\)", r[4]))
    if not want.get(name, {"?"}) <= set(host):
        print(f"{name}: host columns {sorted(host)}, expected {sorted(want.get(name, {'?'}))}: {r[4]}")
        bad += 1
    if not want.get(name) and r[4] != "none":
        print(f"{name}: host memory without offload: {r[4]}")
        bad += 1
    for t, q in host.items():
        if abs(q - 1.0) > 0.01:
            print(f"{name}: {t} estimate / measured {q}")
            bad += 1
if seen != set(want):
    print(f"cases {sorted(seen)}, expected {sorted(want)}")
    bad += 1
print(f"{len(rows)} cases checked")
sys.exit(1 if bad else 0)
PY
echo "ok: memory.sh's nine cases: $(tail -1 check.txt)"
if [ -z "$(ls -A m/nvme)" ]; then echo "ok: the NVMe case's swap files are removed"; else fail "left in m/nvme: $(ls m/nvme)"; fi
set +e
bash "$SRC/jobs/bench/memory.sh" ./ztrain_small m2 z9 >out 2>&1
rc=$?
set -e
if [ $rc = 2 ] && grep -q "unknown case 'z9'" out; then echo "ok: an unknown case exits 2, named"; else fail "unknown case: exit $rc"; fi
finish
