#!/usr/bin/python3
"""The lab suite: pipelearn-netem, pipelearn-relay and pipelearn-lab on this
host, as root, in network namespaces of their own. TAP on stdout.

  lab_tests.py dryrun    netem back-end's exact tc commands (no root needed)
  lab_tests.py shaping   2-device 4g lab over the relay: rate within 15% and
                         one-way delay within 5 ms of the profile, both ways
  lab_tests.py modes     pipelearn and sfl, short epoch, 4g, devices at 25%:
                         results (and pl-report's table and charts when
                         pl-report exists); pipelearn's epoch beats sfl's
  lab_tests.py cpu       a device's compute time grows as its quota shrinks
  lab_tests.py cleanup   SIGINT in the middle of a run leaves nothing behind
  lab_tests.py adaptive  a device's link shaped down mid-run: the server
                         re-plans its micro-batches at the next epoch end
                         and logs why
  lab_tests.py firewall  deploy/firewall/pipelearn.nft caps idle connections
                         from one address; devices elsewhere still train
  lab_tests.py plan      pipelearn-plan's epoch estimate against the lab's
                         measured epoch, three (P, N) settings on 4g and
                         one on wifi (errors printed; each within 3x)

Environment: PL_SOURCE_DIR (source tree), PL_BUILD_DIR (the build with the
binaries), both set by meson test. Tests that need root or ip netns print
"1..0 # SKIP ..." without them.
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("PL_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.realpath(__file__))))
BUILD = os.environ.get("PL_BUILD_DIR") or os.path.join(SRC, "build")
NETEM = os.path.join(SRC, "deploy", "netem", "pipelearn-netem")
LAB = os.path.join(SRC, "deploy", "lab", "pipelearn-lab")
REPORT = os.path.join(SRC, "deploy", "lab", "pl-report")
HEADLINE = os.path.join(SRC, "deploy", "lab", "headline")
RELAY = os.path.join(BUILD, "deploy", "netem", "pipelearn-relay")


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, what, diag=None):
        self.n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, what), flush=True)
        if not cond:
            self.failed += 1
            if diag:
                for line in str(diag).splitlines():
                    print("# " + line)
        return cond

    def skip(self, what, why):
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, what, why), flush=True)

    def note(self, msg):
        for line in str(msg).splitlines():
            print("# " + line, flush=True)

    def done(self):
        print("1..%d" % self.n, flush=True)
        return 1 if self.failed else 0


def skip_all(why):
    print("1..0 # SKIP %s" % why, flush=True)
    return 0


def can_lab():
    if os.geteuid() != 0:
        return "not root"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "no ip/tc (iproute2)"
    probe = "plprobe" + secrets.token_hex(3)
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "ip netns add failed: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    if not os.access(RELAY, os.X_OK):
        return "no %s (build first)" % RELAY
    return None


def run(argv, timeout=600, env=None):
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    return r, time.monotonic() - t0


def leftovers(prefix):
    """What a lab with this prefix left behind: namespaces, cgroups, relays."""
    left = []
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    left += [l.split()[0] for l in r.stdout.splitlines() if l.startswith(prefix + "-")]
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct",
                 "/sys/fs/cgroup/unified"):
        p = os.path.join(root, "pipelearn-lab-" + prefix)
        if os.path.exists(p):
            left.append(p)
    # Servers and clients run in the lab's cgroups; relays name the lab's
    # namespaces on their command line.
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open("/proc/%s/cgroup" % pid) as f:
                cg = f.read()
        except OSError:
            continue
        if "pipelearn-lab-" + prefix in cg or ("pipelearn-relay" in cmd and prefix in cmd):
            left.append("process %s: %s" % (pid, cmd[:120]))
    if os.path.exists("/run/pipelearn-lab/" + prefix):
        left.append("/run/pipelearn-lab/" + prefix)
    return left


def lab_argv(prefix, out, *extra):
    return [sys.executable, LAB, "--build", BUILD, "--out", out, "--prefix", prefix,
            "--backend", "relay"] + list(extra)


# ------------------------------------------------------------------ dryrun

EXPECTED_4G = """\
tc -n pl-dev0 qdisc del dev eth0 root
tc -n pl-dev0 qdisc add dev eth0 root handle 1: netem delay 30ms 5ms loss 0.1% limit 10000
tc -n pl-dev0 qdisc add dev eth0 parent 1:1 handle 10: tbf rate 10mbit burst 40kbit latency 100ms
tc -n pl-srv qdisc del dev vd0 root
tc -n pl-srv qdisc add dev vd0 root handle 1: netem delay 30ms 5ms loss 0.1% limit 10000
tc -n pl-srv qdisc add dev vd0 parent 1:1 handle 10: tbf rate 25mbit burst 100kbit latency 100ms
"""

EXPECTED_WIFI = """\
tc -n pl-dev0 qdisc del dev eth0 root
tc -n pl-dev0 qdisc add dev eth0 root handle 1: netem delay 3ms 1ms limit 10000
tc -n pl-dev0 qdisc add dev eth0 parent 1:1 handle 10: tbf rate 50mbit burst 200kbit latency 100ms
tc -n pl-srv qdisc del dev vd0 root
tc -n pl-srv qdisc add dev vd0 root handle 1: netem delay 3ms 1ms limit 10000
tc -n pl-srv qdisc add dev vd0 parent 1:1 handle 10: tbf rate 100mbit burst 400kbit latency 100ms
"""

# A custom profile from flags: no jitter, no loss, no downlink rate limit.
EXPECTED_CUSTOM = """\
tc -n pl-dev0 qdisc del dev eth0 root
tc -n pl-dev0 qdisc add dev eth0 root handle 1: netem delay 12.5ms limit 10000
tc -n pl-dev0 qdisc add dev eth0 parent 1:1 handle 10: tbf rate 2.5mbit burst 32kbit latency 50ms
tc -n pl-srv qdisc del dev vd0 root
tc -n pl-srv qdisc add dev vd0 root handle 1: netem delay 12.5ms limit 10000
"""

PAIR = ["--dev-ns", "pl-dev0", "--dev-if", "eth0", "--srv-ns", "pl-srv", "--srv-if", "vd0"]


def test_dryrun(t):
    for prof, want in (("4g", EXPECTED_4G), ("wifi", EXPECTED_WIFI)):
        r, _ = run([NETEM, "apply", "--profile", prof, "--backend", "netem", "--dry-run"] + PAIR)
        t.ok(r.returncode == 0 and r.stdout == want, "netem dry-run of %s prints the exact tc "
             "commands (device egress = uplink, server egress = downlink)" % prof,
             "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr))
        t.ok("back-end netem" in r.stderr, "%s: the back-end in use is printed" % prof, r.stderr)
    r, _ = run([NETEM, "apply", "--uplink", "2.5", "--downlink", "0", "--delay", "12.5",
                "--jitter", "0", "--loss", "0", "--queue-ms", "50", "--backend", "netem",
                "--dry-run"] + PAIR)
    t.ok(r.returncode == 0 and r.stdout == EXPECTED_CUSTOM, "a custom profile from flags",
         r.stdout + r.stderr)
    r, _ = run([NETEM, "apply", "--profile", "4g", "--loss", "2", "--backend", "netem",
                "--dry-run"] + PAIR)
    t.ok(r.returncode == 0 and r.stdout.count("loss 2%") == 2, "a flag overrides the profile",
         r.stdout + r.stderr)
    # The 4g-plus profile's values end up in the commands.
    r, _ = run([NETEM, "apply", "--profile", "4g-plus", "--backend", "netem", "--dry-run"] + PAIR)
    t.ok(r.returncode == 0 and "netem delay 20ms 4ms loss 0.05%" in r.stdout
         and "tbf rate 20mbit" in r.stdout and "tbf rate 60mbit" in r.stdout,
         "4g-plus: 20/60 Mbit/s, 20+-4 ms, 0.05%", r.stdout + r.stderr)

    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "slow.conf")
        with open(f, "w") as fh:
            fh.write("# a custom profile file\nuplink_mbit=1\ndownlink_mbit=2\ndelay_ms=100\n"
                     "jitter_ms=10\nloss_pct=1\n")
        r, _ = run([NETEM, "apply", "--profile", f, "--backend", "netem", "--dry-run"] + PAIR)
        t.ok(r.returncode == 0 and "netem delay 100ms 10ms loss 1%" in r.stdout
             and "tbf rate 1mbit" in r.stdout and "tbf rate 2mbit" in r.stdout,
             "a profile file", r.stdout + r.stderr)
        bad = os.path.join(d, "bad.conf")
        for text, why in (("uplink_mbit=ten\n", "a value that is not a number"),
                          ("uplink_mbit=1\nrate=5\n", "an unknown key"),
                          ("uplink_mbit=$(touch %s/pwned)\n" % d, "shell code")):
            with open(bad, "w") as fh:
                fh.write(text)
            r, _ = run([NETEM, "apply", "--profile", bad, "--backend", "netem",
                        "--dry-run"] + PAIR)
            t.ok(r.returncode != 0 and not r.stdout and not os.path.exists(d + "/pwned"),
                 "a profile with %s is refused" % why, r.stdout + r.stderr)
        r, _ = run([NETEM, "apply", "--profile", "4g", "--uplink", "1", "--backend", "netem",
                    "--dry-run"] + PAIR[:4] + ["--srv-if", "vd0"])
        t.ok(r.returncode != 0 and "refusing" in r.stderr and not r.stdout,
             "an interface outside a namespace is refused", r.stdout + r.stderr)
        r, _ = run([NETEM, "apply", "--profile", "4g", "--backend", "netem", "--dry-run",
                    "--allow-host", "--dev-if", "eth0", "--srv-if", "vd0"])
        t.ok(r.returncode == 0 and r.stdout.startswith("tc qdisc del dev eth0 root\n"),
             "--allow-host shapes host interfaces (tc without -n)", r.stdout + r.stderr)
    r, _ = run([NETEM, "apply", "--profile", "4g", "--backend", "relay", "--dry-run",
                "--relay", "/opt/pl/pipelearn-relay", "--state-dir", "/run/x"] + PAIR)
    want = ("/opt/pl/pipelearn-relay --dev-ns pl-dev0 --dev-if eth0 --srv-ns pl-srv --srv-if vd0 "
            "--up-rate 10 --up-delay 30 --up-jitter 5 --up-loss 0.1 --down-rate 25 "
            "--down-delay 30 --down-jitter 5 --down-loss 0.1 --queue-ms 100 "
            "--pid-file /run/x/relay-pl-dev0-eth0.pid\n")
    t.ok(r.returncode == 0 and r.stdout == want, "relay dry-run: the relay's command line",
         r.stdout + r.stderr)
    if os.access(RELAY, os.X_OK):
        for bad, why in ((["--dev-if", "a", "--srv-if", "b", "--up-rate", "-1"], "a negative rate"),
                         (["--dev-if", "a", "--srv-if", "b", "--up-loss", "101"], "loss > 100%"),
                         (["--dev-if", "a", "--srv-if", "b", "--up-delay", "5ms"], "a unit"),
                         (["--dev-if", "a", "--srv-if", "b", "--limit", "0"], "an empty ring"),
                         (["--dev-if", "a"], "one interface")):
            r, _ = run([RELAY] + bad)
            t.ok(r.returncode == 2, "pipelearn-relay refuses %s" % why, r.stderr)
        r, _ = run([RELAY, "--dev-ns", "pl-no-such-ns", "--dev-if", "a", "--srv-if", "b"])
        t.ok(r.returncode == 1 and "pl-no-such-ns" in r.stderr,
             "pipelearn-relay names a namespace it cannot enter", r.stderr)
    else:
        t.skip("pipelearn-relay's argument checks", "no " + RELAY)
    lab_flags(t)
    r, _ = run([NETEM, "remove", "--backend", "netem", "--dry-run"] + PAIR)
    t.ok(r.returncode == 0 and r.stdout == "tc -n pl-dev0 qdisc del dev eth0 root\n"
         "tc -n pl-srv qdisc del dev vd0 root\n", "netem remove dry-run", r.stdout + r.stderr)

    # As root, let tc itself parse every command the netem back-end would
    # run, in a scratch namespace: a kernel without sch_netem rejects the
    # netem qdisc only after tc's own parser accepted its options, so the
    # only failure allowed is the kernel's "unknown qdisc kind".
    if os.geteuid() != 0 or not shutil.which("unshare"):
        t.skip("tc accepts the generated commands", "needs root and unshare")
        return
    r, _ = run([NETEM, "apply", "--profile", "4g", "--backend", "netem", "--dry-run"] + PAIR)
    script = ["ip link add eth0 type veth peer name vd0", "set -e"]
    verdicts = []
    for line in r.stdout.splitlines():
        words = line.split()
        del words[1:3]  # no -n NS inside the scratch namespace
        if " del " in line:
            continue
        if "tbf" in words:
            # tbf under a root tbf (classful, class 1:1) instead of under netem.
            script.append("tc qdisc replace dev %s root handle 1: tbf rate 1mbit burst 32kbit "
                          "latency 50ms" % words[4])
        script.append("out=$(%s 2>&1) && echo ACCEPTED || echo \"REJECTED $out\"" % " ".join(words))
    p = subprocess.run(["unshare", "-n", "sh", "-c", "\n".join(script)], capture_output=True,
                       text=True)
    verdicts = p.stdout.splitlines()
    fine = bool(verdicts) and all(v == "ACCEPTED" or "qdisc kind is unknown" in v
                                  for v in verdicts)
    t.ok(fine, "tc's parser accepts every generated netem/tbf command",
         p.stdout + p.stderr)
    t.note("tc verdicts: " + "; ".join(verdicts))


def lab_flags(t):
    """pipelearn-lab's --mode-set and headline's lab commands, without a lab."""
    from importlib.machinery import SourceFileLoader
    from importlib.util import module_from_spec, spec_from_loader
    spec = spec_from_loader("pipelearn_lab", SourceFileLoader("pipelearn_lab", LAB))
    lab = module_from_spec(spec)
    spec.loader.exec_module(lab)
    cfg = os.path.join(SRC, "configs", "pipelearn.json")
    a = lab.parse_args(["--config", cfg, "--profile", "4g", "--modes", "fl,sfl", "--out",
                        "/tmp/x", "--set", "codec=int8", "--set", "samples=200",
                        "--mode-set", "fl:codec=none", "--mode-set", "sfl:samples=400"])
    t.ok(lab.server_sets(a, "fl") == ["codec=int8", "samples=200", "codec=none"]
         and lab.server_sets(a, "sfl") == ["codec=int8", "samples=200", "samples=400"]
         and lab.server_sets(a, "pipelearn") == ["codec=int8", "samples=200"],
         "--mode-set MODE:KEY=VALUE reaches only MODE's runs, after every --set",
         [lab.server_sets(a, m) for m in ("fl", "sfl", "pipelearn")])
    for bad in ("codec=none", "xl:codec=none", "fl:codec", "fl:mode=sfl"):
        r, _ = run([LAB, "--config", cfg, "--profile", "4g", "--modes", "fl", "--out", "/tmp/x",
                    "--mode-set", bad])
        t.ok(r.returncode == 2 and "--mode-set" in r.stderr,
             "pipelearn-lab refuses --mode-set %s" % bad, r.stderr)
    # --cpu-period-ms: the quotas' period, in lab.json; a quota under 1 ms a
    # period is refused.
    a = lab.parse_args(["--config", cfg, "--profile", "4g", "--modes", "fl", "--out", "/tmp/x",
                        "--device-cpu", "5,50", "--cpu-period-ms", "20"])
    t.ok(a.cpu_period_ms == 20 and lab.cpu_max(5, 20000) == (1000, 20000)
         and lab.cpu_max(50, 20000) == (10000, 20000)
         and lab.parse_args(["--config", cfg, "--profile", "4g", "--modes", "fl", "--out",
                             "/tmp/x"]).cpu_period_ms == 100,
         "--cpu-period-ms 20: 5% is 1 ms of every 20, 50% 10 ms; the default period 100 ms")
    for bad, why in ((["--device-cpu", "5", "--cpu-period-ms", "10"], "below the cgroup's"),
                     (["--cpu-period-ms", "1"], "expected 2..1000"),
                     (["--cpu-period-ms", "2000"], "expected 2..1000")):
        r, _ = run([LAB, "--config", cfg, "--profile", "4g", "--modes", "fl", "--out", "/tmp/x"]
                   + bad)
        t.ok(r.returncode == 2 and why in r.stderr,
             "pipelearn-lab refuses %s" % " ".join(bad), r.stderr)
    cmds = {}
    for codec in ("int8", "auto"):
        r, _ = run([HEADLINE, "--out", "/tmp/hl", "--dry-run", "--codec", codec])
        cmds[codec] = [l for l in r.stdout.splitlines() if l.startswith("$ ")]
        t.ok(r.returncode == 0 and len(cmds[codec]) == 4, "headline --dry-run --codec %s prints "
             "its four commands" % codec, r.stdout + r.stderr)
    homo = cmds["int8"][0] if cmds["int8"] else ""
    t.ok("--profile 4g --device-cpu 10 " in homo and "--modes fl,sfl,pipelearn" in homo
         and "--set split_point=auto --set micro_batches=auto --set codec=int8 "
         "--mode-set fl:codec=none" in homo,
         "headline: 2 devices at 10% on 4g, fl/sfl/pipelearn, planner's P and N, fl without "
         "codec", homo)
    diff = [(x, y) for x, y in zip(cmds["int8"], cmds["auto"]) if x != y]
    t.ok(len(diff) == 2 and all(x.replace("codec=int8", "codec=auto") == y for x, y in diff),
         "headline: --codec changes the codec of the planned runs and nothing else", diff)
    lab_runs = [c for c in cmds["auto"] if "pipelearn-lab" in c]
    t.ok(lab_runs and all("--set bn_calibration_batches=5 " in c for c in lab_runs),
         "headline: every lab run re-estimates BN statistics (bn_calibration_batches 5)",
         lab_runs)
    r, _ = run([HEADLINE, "--out", "/tmp/hl", "--dry-run", "--bn-calibration", "0"])
    t.ok(r.returncode == 0 and "bn_calibration_batches=0" in r.stdout,
         "headline --bn-calibration 0 turns it off", r.stdout + r.stderr)
    t.ok(lab_runs and all("--set codec_zstd=true " in c for c in lab_runs),
         "headline: every lab run compresses its codec payloads (codec_zstd) by default",
         lab_runs)
    t.ok(lab_runs and all("--set int8_stochastic=true " in c for c in lab_runs),
         "headline: int8 rounds stochastically by default", lab_runs)
    # A flag that sets one key in every lab run.
    for flags, key, what in ((["--zstd", "off"], "codec_zstd=false", "turns it off"),
                             (["--int8-rounding", "nearest"], "int8_stochastic=false",
                              "rounds to nearest")):
        r, _ = run([HEADLINE, "--out", "/tmp/hl", "--dry-run"] + flags)
        runs = [l for l in r.stdout.splitlines() if l.startswith("$ ") and "pipelearn-lab" in l]
        t.ok(r.returncode == 0 and runs and all("--set %s " % key in c for c in runs),
             "headline %s %s" % (" ".join(flags), what), r.stdout + r.stderr)


# ------------------------------------------------------------------ shaping

def test_shaping(t):
    prefix = "ts" + secrets.token_hex(3)
    with tempfile.TemporaryDirectory() as out:
        r, secs = run(lab_argv(prefix, out, "--verify-shaping", "--devices", "2",
                               "--profile", "4g"), timeout=300)
        t.note("pipelearn-lab --verify-shaping took %.1f s" % secs)
        t.note(r.stdout)
        t.ok(r.returncode == 0, "pipelearn-lab --verify-shaping exits 0", r.stderr[-3000:])
        t.ok("back-end relay" in r.stderr, "the relay back-end is announced", r.stderr[-2000:])
        path = os.path.join(out, "shaping-4g.json")
        try:
            with open(path) as f:
                rep = json.load(f)
        except (OSError, ValueError) as e:
            t.ok(False, "shaping-4g.json written", e)
            return
        t.ok(len(rep.get("devices", [])) == 2, "both devices measured", rep)
        want = {"up": 10.0, "down": 25.0}
        for dev in rep.get("devices", []):
            k = dev["device"]
            for direction in ("up", "down"):
                m = dev.get(direction, {})
                rate = m.get("rate_mbit_wire")
                delay = m.get("delay_ms_mean")
                t.ok(rate is not None and abs(rate - want[direction]) <= 0.15 * want[direction],
                     "dev%d %s: rate %s Mbit/s within 15%% of %g" % (
                         k, direction, "%.2f" % rate if rate else None, want[direction]), m)
                t.ok(delay is not None and abs(delay - 30.0) <= 5.0,
                     "dev%d %s: one-way delay %s ms within 5 ms of 30" % (
                         k, direction, "%.2f" % delay if delay else None), m)
                # Jitter 5 ms uniform: the spread must show, but bounded.
                # The bound is on the 95th percentile of the 50 probes: the
                # maximum is one probe, and a 2-core host running another
                # test suite once stalled one for 14 ms (49.5 ms, CI failed).
                lo, hi = m.get("delay_ms_min"), m.get("delay_ms_p95")
                t.ok(lo is not None and hi is not None and 24.0 <= lo and hi <= 45.0
                     and hi - lo >= 3.0, "dev%d %s: delays spread by the 5 ms jitter "
                     "(%s..%s ms, 95th percentile; max %s)" % (
                         k, direction, lo, hi, m.get("delay_ms_max")), m)
        # A relay prints its counters when it exits on SIGTERM: both relays
        # were stopped cleanly, and their logs kept with the results.
        logs = os.path.join(out, "relay-logs")
        texts = [open(os.path.join(logs, f)).read() for f in sorted(os.listdir(logs))] \
            if os.path.isdir(logs) else []
        t.ok(len(texts) == 2 and all("relay: up: in" in x and "relay: down: in" in x
                                     for x in texts),
             "both relays exited cleanly with their counters (relay-logs/)", texts)
        t.ok(not leftovers(prefix), "nothing left behind", leftovers(prefix))


# ------------------------------------------------------------------ modes

def read_json(path):
    with open(path) as f:
        return json.load(f)


def test_modes(t):
    prefix = "tm" + secrets.token_hex(3)
    with tempfile.TemporaryDirectory() as out:
        r, secs = run(lab_argv(prefix, out, "--config", os.path.join(SRC, "configs",
                                                                     "pipelearn.json"),
                               "--devices", "2", "--profile", "4g", "--modes", "pipelearn,sfl",
                               "--device-cpu", "25", "--repeat", "1",
                               "--set", "samples=400", "--set", "test_samples=200"),
                      timeout=600)
        t.note("pipelearn-lab took %.1f s" % secs)
        t.note(r.stdout)
        t.ok(r.returncode == 0, "pipelearn-lab exits 0", r.stderr[-4000:])
        epoch = {}
        for mode in ("pipelearn", "sfl"):
            d = os.path.join(out, "runs", "%s-4g-r1" % mode)
            have = all(os.path.isfile(os.path.join(d, f))
                       for f in ("summary.json", "timeline.csv", "lab.json"))
            t.ok(have, "%s: summary.json, timeline.csv and lab.json in runs/%s-4g-r1"
                 % (mode, mode), os.listdir(d) if os.path.isdir(d) else "no " + d)
            if not have:
                continue
            s, lab = read_json(os.path.join(d, "summary.json")), read_json(os.path.join(d, "lab.json"))
            ep = s.get("epochs", [{}])[0]
            epoch[mode] = ep.get("wall_s")
            # Four iterations teach little; that the model learns is the net
            # and slow suites' business. Here: the run is the one asked for.
            t.ok(s.get("config", {}).get("mode") == mode and len(ep.get("devices", [])) == 2
                 and all(dv.get("samples") == 200 for dv in ep.get("devices", []))
                 and 0 <= ep.get("test_acc", -1) <= 1, "%s: the server ran %s with 2 devices "
                 "of 200 samples (test acc %s)" % (mode, mode, ep.get("test_acc")), s)
            want = {"mode": mode, "profile": "4g", "profiles": ["4g", "4g"], "repeat": 1,
                    "devices": 2, "device_cpu_pct": 25, "backend": "relay",
                    "uplink_mbps": [10, 10], "downlink_mbps": [25, 25], "delay_ms": [30, 30],
                    "jitter_ms": [5, 5], "loss_pct": [0.1, 0.1], "split_point": 1,
                    "micro_batches": 4 if mode == "pipelearn" else 1}
            diff = {k: (lab.get(k), v) for k, v in want.items() if lab.get(k) != v}
            t.ok(not diff and isinstance(lab.get("wall_s"), float) and lab["wall_s"] > 0,
                 "%s: lab.json has the interface's fields and values" % mode, diff or lab)
            # Every byte went over the shaped uplink: the epoch cannot be
            # shorter than the bytes at 10 Mbit/s.
            up = max(dv["bytes_up"] for dv in ep["devices"]) * 8 / 10e6
            t.ok(ep.get("wall_s", 0) >= up * 0.95, "%s: epoch %.2f s >= uplink bytes / 10 "
                 "Mbit/s = %.2f s (the traffic went through the shaped link)"
                 % (mode, ep.get("wall_s", 0), up))
        if len(epoch) == 2:
            t.ok(epoch["pipelearn"] < epoch["sfl"], "pipelearn's epoch (%.2f s) is shorter "
                 "than sfl's (%.2f s) under 4g" % (epoch["pipelearn"], epoch["sfl"]))
        if os.access(REPORT, os.X_OK):
            svgs = [f for f in os.listdir(out) if f.endswith(".svg")]
            t.ok(os.path.isfile(os.path.join(out, "comparison.md"))
                 and os.path.isfile(os.path.join(out, "comparison.csv")) and svgs,
                 "pl-report wrote comparison.md, comparison.csv and SVG charts (%s)"
                 % ", ".join(sorted(svgs)), os.listdir(out))
        else:
            t.skip("comparison table and charts", "deploy/lab/pl-report does not exist yet")
            t.ok("pl-report" in r.stderr and "skipping" in r.stderr,
                 "the lab says it skipped the report", r.stderr[-1000:])
        t.ok(not leftovers(prefix), "nothing left behind", leftovers(prefix))


# ------------------------------------------------------------------ lossy

def test_lossy(t):
    # 1% loss and +-100 ms jitter each way (profiles/lossy.conf): TCP
    # retransmits, the pipeline stalls and catches up; the run must finish.
    prefix = "tl" + secrets.token_hex(3)
    prof = os.path.join(SRC, "deploy", "netem", "profiles", "lossy.conf")
    with tempfile.TemporaryDirectory() as out:
        r, secs = run(lab_argv(prefix, out, "--config", os.path.join(SRC, "configs",
                                                                     "pipelearn.json"),
                               "--devices", "2", "--profile", prof, "--modes", "pipelearn",
                               "--repeat", "1", "--set", "samples=400",
                               "--set", "test_samples=200"), timeout=600)
        t.note("pipelearn-lab took %.1f s" % secs)
        t.ok(r.returncode == 0, "pipelearn-lab exits 0 under 1% loss and 100 ms jitter",
             r.stderr[-4000:])
        d = os.path.join(out, "runs", "pipelearn-lossy-r1")
        s = read_json(os.path.join(d, "summary.json")) if os.path.isfile(
            os.path.join(d, "summary.json")) else {}
        ep = (s.get("epochs") or [{}])[0]
        t.ok(len(ep.get("devices", [])) == 2
             and all(dv.get("samples") == 200 and dv.get("active") for dv in ep["devices"]),
             "the epoch completed with both devices (%.1f s)" % ep.get("wall_s", -1), s)
        lab = read_json(os.path.join(d, "lab.json")) if os.path.isfile(
            os.path.join(d, "lab.json")) else {}
        t.ok(lab.get("loss_pct") == [1, 1] and lab.get("jitter_ms") == [100, 100],
             "the lossy profile was applied", lab)
        t.ok(not leftovers(prefix), "nothing left behind", leftovers(prefix))


# ------------------------------------------------------------------ cpu

def device_compute(summary):
    return [d["forward_s"] + d["backward_s"] + d["update_s"]
            for d in summary["epochs"][0]["devices"]]


def test_cpu(t):
    # fl: the whole model trains on each device, so compute dominates; the
    # wifi profile keeps the model exchange short. 100% against 10% rather
    # than 25%: on a machine busy with other work a device "at 100%" may get
    # a third of a core, and the test must still tell the quotas apart.
    # The low quota runs at a 20 ms period (--cpu-period-ms): 2 ms of every
    # 20, which the cgroup's period count must show.
    res = {}
    low = 10
    for pct in (100, low):
        prefix = "tc" + secrets.token_hex(3)
        period = ["--cpu-period-ms", "20"] if pct == low else []
        with tempfile.TemporaryDirectory() as out:
            r, secs = run(lab_argv(prefix, out, "--config", os.path.join(SRC, "configs",
                                                                         "fl.json"),
                                   "--devices", "2", "--profile", "wifi", "--modes", "fl",
                                   "--device-cpu", str(pct), "--no-report",
                                   "--set", "samples=1000", "--set", "test_samples=100",
                                   *period),
                          timeout=600)
            t.note(r.stdout)
            d = os.path.join(out, "runs", "fl-wifi-r1")
            ok = t.ok(r.returncode == 0 and os.path.isfile(os.path.join(d, "summary.json")),
                      "fl with devices at %d%% of a core ran" % pct, r.stderr[-3000:])
            if ok:
                res[pct] = (device_compute(read_json(os.path.join(d, "summary.json"))),
                            read_json(os.path.join(d, "lab.json")))
            t.ok(not leftovers(prefix), "nothing left behind", leftovers(prefix))
    if len(res) < 2:
        return
    full, slow = res[100][0], res[low][0]
    t.note("device compute s at 100%%: %s; at %d%%: %s" % (full, low, slow))
    for k in range(2):
        t.ok(slow[k] >= 2.0 * full[k], "dev%d: compute %.2f s at %d%% >= 2 x %.2f s at 100%%"
             % (k, slow[k], low, full[k]))
    cpu = res[low][1].get("cpu", {})
    if not res[low][1].get("cgroup_version"):
        # No cgroup version found: the quota was not enforced by a cgroup,
        # so its throttling and CPU-time checks cannot run; say so.
        for what in ("the %d%% devices were throttled by their cgroup" % low,
                     "a %d%% device used at most %d%% of a core over the run" % (low, low)):
            t.skip(what, "no cgroup version found (lab.json cgroup_version empty)")
    else:
        t.ok(all(cpu.get("dev%d" % k, {}).get("nr_throttled", 0) > 0 for k in range(2)),
             "the %d%% devices were throttled by their cgroup" % low, cpu)
        # The CPU time can exceed the quota's share of the run's wall time
        # by at most one period's quota (10 ms at 10%).
        wall = res[low][1]["wall_s"]
        t.ok(all(cpu.get("dev%d" % k, {}).get("cpu_s", 0) <= low / 100.0 * wall + 0.05
                 for k in range(2)), "a %d%% device used at most %d%% of a core over the "
             "run (%.2f s wall)" % (low, low, wall), cpu)
        # A 100 ms period allows at most wall / 0.1 + 1 periods; a busy
        # device at 20 ms has about five times that.
        t.ok(res[low][1].get("cpu_period_ms") == 20
             and all(cpu.get("dev%d" % k, {}).get("nr_periods", 0) > 1.5 * (wall / 0.1 + 1)
                     for k in range(2)),
             "--cpu-period-ms 20: lab.json says so and the devices' cgroups counted more "
             "periods than 100 ms ones allow in %.2f s" % wall, cpu)


# ------------------------------------------------------------------ cleanup

def test_cleanup(t):
    prefix = "tk" + secrets.token_hex(3)
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.Popen(lab_argv(prefix, out, "--config", os.path.join(SRC, "configs",
                                                                            "sfl.json"),
                                      "--devices", "2", "--profile", "4g", "--modes", "sfl",
                                      "--no-report", "--set", "samples=4000"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Wait until the devices train (their logs exist and the namespaces
        # hold a relay, a server and clients), then interrupt.
        log = os.path.join(out, "runs", "sfl-4g-r1", "device-1.log")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None and not os.path.exists(log):
            time.sleep(0.1)
        time.sleep(1.0)
        running = leftovers(prefix)
        t.ok(p.poll() is None and any("pipelearn-relay" in x for x in running)
             and any("pipelearn-client" in x for x in running),
             "the lab is up and training (namespaces, relays, clients)", running)
        p.send_signal(signal.SIGINT)
        try:
            _out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            _out, err = p.communicate()
        t.ok(p.returncode != 0 and "interrupted" in err, "SIGINT stops the lab with an error "
             "exit (%s)" % p.returncode, err[-2000:])
        left = leftovers(prefix)
        t.ok(not left, "no namespace, cgroup, relay, server or client is left", left)


# ------------------------------------------------------------------ adaptive

ADAPTIVE_DEVICE_CPU = 25          # percent of a core per device, as the lab's default
ADAPTIVE_DROPS = [(3, 6), (2, 4), (1, 2), (0.5, 1)]     # Mbit/s up/down to try, mildest first
WIFI = (50, 100, 6)               # deploy/netem/profiles/wifi: up, down Mbit/s, RTT ms


def _planned_n(costs, cfg, up, down, rtt, slowdown):
    """pipelearn-plan's micro-batch count for cfg's pinned split point on a
    link, with devices `slowdown` times slower than this host's profile."""
    r, _ = run([os.path.join(BUILD, "server", "pipelearn-plan"), "--config", cfg,
                "--costs", costs, "--uplink-mbps", str(up), "--downlink-mbps", str(down),
                "--rtt-ms", str(rtt), "--device-slowdown", str(slowdown), "--json"],
               timeout=120)
    if r.returncode != 0:
        return None, r.stderr
    return json.loads(r.stdout)["chosen"]["micro_batches"], ""


def adaptive_drop(t, cfg, out):
    """The premise, from this host's speed: the mildest drop of device 0's
    link after which the planner gives it at least twice the micro-batches
    it has on wifi. Asked for devices as fast as this host's profile and as
    slow as the quota makes them (a device profiles itself under its quota;
    where its figures land between the two depends on the CPU), so the
    growth holds for either. On a fast CPU 3/6 Mbit/s is enough; where
    compute dominates longer (an AVX2-only EPYC kept N = 2 at 3/6) a deeper
    drop is needed. None if no drop moves N on this host."""
    costs = os.path.join(out, "costs.json")
    r, _ = run([os.path.join(BUILD, "server", "pipelearn-plan"), "--config", cfg,
                "--write-costs", costs], timeout=300)
    if not t.ok(r.returncode == 0, "this host profiled (pipelearn-plan --write-costs)",
                r.stderr):
        return None
    slowdowns = (1, 100.0 / ADAPTIVE_DEVICE_CPU)
    before = {}
    for sd in slowdowns:
        before[sd], err = _planned_n(costs, cfg, *WIFI, sd)
        if before[sd] is None:
            t.ok(False, "pipelearn-plan answers for wifi", err)
            return None
    tried = []
    for up, down in ADAPTIVE_DROPS:
        after = {sd: _planned_n(costs, cfg, up, down, WIFI[2], sd)[0] for sd in slowdowns}
        tried.append("%g/%g Mbit/s: N %s" % (up, down, ", ".join(
            "%s -> %s (slowdown %g)" % (before[sd], after[sd], sd) for sd in slowdowns)))
        if all(after[sd] is not None and after[sd] >= 2 * before[sd] for sd in slowdowns):
            t.note("premise from the planner on this host: " + tried[-1])
            return up, down, before
    t.ok(False, "some link drop makes the planner give device 0 more micro-batches",
         "\n".join(tried))
    return None


def test_adaptive(t):
    """micro_batches "auto" on wifi, split point 4 (small activations:
    compute dominates, few micro-batches), then device 0's link drops after
    the first epoch's re-probe: at the next epoch end the server probes,
    sees the drift and gives device 0 more micro-batches (transfer now
    dominates), with the reason in its log and summary.json. How deep the
    drop must be for N to grow depends on the CPU (compute against bytes):
    the test asks pipelearn-plan, with this host's profile, before it runs
    (adaptive_drop). The planner takes the fewest micro-batches within 1% of
    the fastest epoch, and an epoch also uploads and downloads the device's
    1.6 MB part for FedAvg: 2000 samples per device (20 iterations) keep
    the iterations a large enough share of the epoch that N matters."""
    prefix = "ta" + secrets.token_hex(3)
    with tempfile.TemporaryDirectory() as out:
        cfg = os.path.join(out, "adaptive.json")
        with open(cfg, "w") as f:
            json.dump({"model": "vgg5", "dataset": "fashion-mnist", "mode": "pipelearn",
                       "devices": 2, "split_point": 4, "micro_batches": "auto",
                       "batch_size": 100, "epochs": 3, "samples": 4000,
                       "test_samples": 500, "seed": 1,
                       # The adaptive mechanics, whatever floor the model's
                       # registry entry puts under the micro-batch.
                       "min_micro_batch": 2}, f)
        drop = adaptive_drop(t, cfg, out)
        if drop is None:
            return
        up, down, _before = drop
        p = subprocess.Popen(lab_argv(prefix, out, "--config", cfg, "--devices", "2",
                                      "--profile", "wifi", "--modes", "pipelearn",
                                      "--device-cpu", str(ADAPTIVE_DEVICE_CPU),
                                      "--repeat", "1", "--no-report", "--timeout", "500"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        log = os.path.join(out, "runs", "pipelearn-wifi-r1", "server.log")
        deadline = time.monotonic() + 240
        # After epoch 1's line the server probes both links again; reshape
        # once those probes are done, not in the middle of one.
        first = False
        while time.monotonic() < deadline and p.poll() is None and not first:
            time.sleep(0.2)
            if os.path.exists(log):
                with open(log) as f:
                    lines = f.read().splitlines()
                at = [i for i, l in enumerate(lines) if l.startswith("    1 ")]
                first = bool(at) and sum("link: uplink" in l for l in lines[at[0]:]) >= 2
        t.ok(first, "epoch 1 finished on wifi and the links were probed again")
        change = subprocess.run(
            [NETEM, "apply", "--uplink", str(up), "--downlink", str(down), "--delay", "3",
             "--jitter", "0", "--loss", "0", "--dev-ns", prefix + "-dev0", "--dev-if", "eth0",
             "--srv-ns", prefix + "-srv", "--srv-if", "td0", "--backend", "relay",
             "--state-dir", "/run/pipelearn-lab/" + prefix, "--relay", RELAY,
             "--seed", "1000"], capture_output=True, text=True)
        t.ok(change.returncode == 0, "device 0's link reshaped to %g/%g Mbit/s mid-run"
             % (up, down), change.stderr)
        try:
            _o, err = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()
            _o, err = p.communicate()
        t.ok(p.returncode == 0, "pipelearn-lab exits 0", err[-3000:])
        text = open(log).read() if os.path.exists(log) else ""
        summary = os.path.join(out, "runs", "pipelearn-wifi-r1", "summary.json")
        s = read_json(summary) if os.path.exists(summary) else {}
        plan = s.get("plan", {})
        before = [d.get("micro_batches") for d in plan.get("devices", [])]
        t.ok(len(before) == 2 and plan.get("measured_links") is True,
             "the first plan came from probed links (micro-batches %s)" % before, plan)
        # The first re-plan of device 0 that changed N, at an epoch end
        # after the change; its reason names the uplink's drop.
        hits = []
        for e in s.get("epochs", []):
            for r in e.get("replanned_before") or []:
                if r.get("device") == 0 and r.get("what") == "micro_batches" \
                        and r.get("after") != r.get("before"):
                    hits.append((e["epoch"], r))
        t.note("re-plans: %s" % hits)
        ok = bool(hits) and hits[0][1]["after"] > hits[0][1]["before"] \
            and "uplink" in hits[0][1].get("reason", "") and hits[0][0] <= 3
        t.ok(ok, "device 0 got more micro-batches at the next epoch end (epoch %s: %s)"
             % (hits[0][0] if hits else None, hits[0][1] if hits else None),
             [e.get("replanned_before") for e in s.get("epochs", [])])
        logged = [l for l in text.splitlines() if "re-plan at epoch" in l and "device 0" in l
                  and "micro-batches" in l and "->" in l.split("micro-batches")[1]]
        t.ok(bool(logged), "the server logged the re-plan with its reason", text[-3000:])
        for l in logged[:1]:
            t.note(l)
        last = s.get("epochs", [{}])[-1].get("devices", [{}])
        t.ok(last and last[0].get("micro_batches", 0) > (before[0] if before else 0),
             "device 0 trains the last epoch with its new micro-batch count (%s)"
             % (last[0].get("micro_batches") if last else None))
        t.ok(not leftovers(prefix), "nothing left behind", leftovers(prefix))


# ------------------------------------------------------------------ plan

PLAN_SETTINGS = [("4g", 4, 1), ("4g", 4, 10), ("4g", 3, 2), ("wifi", 3, 5)]
# A sanity bound, as tests/bench/plan_accuracy.py --sanity: the estimate
# within a factor of 3 of the measured epoch. The error itself is a
# benchmark figure, printed below; the devices here run without a CPU
# quota, so other work on the host adds to the measured time.
PLAN_MAX_FACTOR = 3.0


def _fmt(value, spec, scale=1.0):
    return spec % (scale * value) if value is not None else "-"


def test_plan(t):
    """The planner's estimate versus a measured epoch under a shaped link.
    The devices run without a CPU quota in namespaces of this host, so the
    plan is asked with --host-cores (everything shares this host's cores);
    the costs are profiled once. Epoch 2 is measured (epoch 1 has start-up
    effects: slow start, page faults). The errors are printed for the
    record; the test fails only when an estimate is more than
    PLAN_MAX_FACTOR off, which no amount of host noise explains."""
    plan_bin = os.path.join(BUILD, "server", "pipelearn-plan")
    cores = os.cpu_count() or 1
    sets = ["samples=1000", "test_samples=200", "epochs=2", "batch_size=100"]
    with tempfile.TemporaryDirectory() as out:
        costs = os.path.join(out, "costs.json")
        cfg = os.path.join(SRC, "configs", "pipelearn.json")
        r, _ = run([plan_bin, "--config", cfg, "--write-costs", costs], timeout=300)
        t.ok(r.returncode == 0, "this host profiled (pipelearn-plan --write-costs)", r.stderr)
        rows = []
        for profile, p, n in PLAN_SETTINGS:
            pinned = []
            for kv in sets + ["split_point=%d" % p, "micro_batches=%d" % n]:
                pinned += ["--set", kv]
            r, _ = run([plan_bin, "--config", cfg, "--costs", costs, "--link", profile,
                        "--host-cores", str(cores), "--json"] + pinned, timeout=120)
            est = json.loads(r.stdout)["chosen"]["estimated_epoch_s"] if r.returncode == 0 \
                else None
            prefix = "tp" + secrets.token_hex(3)
            lab_out = os.path.join(out, "%s-P%d-N%d" % (profile, p, n))
            extra = ["--config", cfg, "--devices", "2", "--profile", profile, "--modes",
                     "pipelearn", "--device-cpu", "0", "--repeat", "1", "--no-report"] + pinned
            r, secs = run(lab_argv(prefix, lab_out, *extra), timeout=600)
            summary = os.path.join(lab_out, "runs", "pipelearn-%s-r1" % profile,
                                   "summary.json")
            meas = None
            if r.returncode == 0 and os.path.exists(summary):
                meas = read_json(summary)["epochs"][-1]["wall_s"]
            ok = est is not None and meas is not None and meas > 0
            err = (est - meas) / meas if ok else None
            rows.append((profile, p, n, est, meas, err))
            sane = ok and est > 0 and max(est / meas, meas / est) <= PLAN_MAX_FACTOR
            t.ok(sane, "%s P=%d N=%d: predicted %s s, measured %s s, error %s (sanity "
                 "bound: within %gx)" % (profile, p, n, _fmt(est, "%.2f"), _fmt(meas, "%.2f"),
                                        _fmt(err, "%+.1f%%", 100), PLAN_MAX_FACTOR),
                 r.stderr[-3000:])
            t.ok(not leftovers(prefix), "nothing left behind", leftovers(prefix))
        t.note("profile   P   N  predicted_s  measured_s   error")
        for profile, p, n, est, meas, err in rows:
            t.note("%-8s %2d %3d %12s %11s %8s" % (
                profile, p, n, _fmt(est, "%.2f"), _fmt(meas, "%.2f"),
                _fmt(err, "%+.1f%%", 100)))


# ------------------------------------------------------------------ firewall

FIREWALL = os.path.join(SRC, "deploy", "firewall", "pipelearn.nft")
FIREWALL_PORT = 5555


def test_firewall(t):
    """deploy/firewall/pipelearn.nft in a namespace of its own, in front of
    a real pipelearn-server: 20 idle TCP connections from one address (no
    CurveZMQ handshake: what exhausts a server's descriptors without a key)
    get 8 through; two devices from other addresses (127.0.0.2, .3 via
    ZeroMQ's source-address syntax) still join and train to the end."""
    if not shutil.which("nft"):
        t.ok(False, "nft (Debian package nftables) is installed")
        return
    ns = "tf" + secrets.token_hex(3)
    r = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    if not t.ok(r.returncode == 0, "namespace %s" % ns, r.stderr):
        return
    procs, idle = [], []
    try:
        nsx = ["ip", "netns", "exec", ns]
        subprocess.run(nsx + ["ip", "link", "set", "lo", "up"], check=True)
        with open(FIREWALL) as f:
            rules = f.read().replace("define pipelearn_port = 5555",
                                     "define pipelearn_port = %d" % FIREWALL_PORT)
        r = subprocess.run(nsx + ["nft", "-f", "-"], input=rules, capture_output=True,
                           text=True)
        t.ok(r.returncode == 0, "the shipped rules load", r.stderr)
        with tempfile.TemporaryDirectory() as out:
            cfg = os.path.join(out, "fw.json")
            with open(cfg, "w") as f:
                json.dump({"model": "vgg5", "dataset": "synthetic", "mode": "pipelearn",
                           "devices": 2, "split_point": 2, "micro_batches": 2,
                           "batch_size": 50, "epochs": 2, "samples": 400,
                           "test_samples": 100, "seed": 1}, f)
            log = open(os.path.join(out, "server.log"), "w")
            procs.append(subprocess.Popen(
                nsx + [os.path.join(BUILD, "server", "pipelearn-server"), "--config", cfg,
                       "--bind", "tcp://127.0.0.1:%d" % FIREWALL_PORT, "--insecure",
                       "--results", os.path.join(out, "run")],
                stdout=log, stderr=subprocess.STDOUT))
            # Bound once it says so (a connection refused before the bind
            # would count as one the cap stopped).
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and procs[-1].poll() is None:
                with open(os.path.join(out, "server.log")) as f:
                    if "server: listening on" in f.read():
                        break
                time.sleep(0.05)
            # 20 idle connections from 127.0.0.1, held open by a helper in
            # the namespace; it prints how many got through.
            holder = subprocess.Popen(
                nsx + [sys.executable, "-c",
                       "import socket,sys,time\n"
                       "ok=0;keep=[]\n"
                       "for i in range(20):\n"
                       "  c=socket.socket();c.settimeout(3)\n"
                       "  try:\n"
                       "    c.connect(('127.0.0.1',%d));keep.append(c);ok+=1\n"
                       "  except OSError: pass\n"
                       "print(ok,flush=True)\n"
                       "sys.stdin.read()\n" % FIREWALL_PORT],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            idle.append(holder)
            got = holder.stdout.readline().strip()
            t.ok(got == "8", "20 idle connections from one address: %s got through "
                 "(the cap is 8)" % got)
            for k in range(2):
                clog = open(os.path.join(out, "client%d.log" % k), "w")
                procs.append(subprocess.Popen(
                    nsx + [os.path.join(BUILD, "client", "pipelearn-client"), "--connect",
                           "tcp://127.0.0.%d:0;127.0.0.1:%d" % (k + 2, FIREWALL_PORT),
                           "--device-id", str(k), "--insecure", "--timeout", "60"],
                    stdout=clog, stderr=subprocess.STDOUT))
            rcs = []
            for p in procs:
                try:
                    rcs.append(p.wait(timeout=240))
                except subprocess.TimeoutExpired:
                    rcs.append(None)
            text = open(os.path.join(out, "server.log")).read()
            t.ok(rcs == [0, 0, 0], "the server and both devices exit 0 (%s)" % rcs,
                 text[-2000:])
            summary = os.path.join(out, "run", "summary.json")
            s = read_json(summary) if os.path.exists(summary) else {}
            t.ok(len(s.get("epochs", [])) == 2, "both epochs in summary.json")
    finally:
        for p in procs + idle:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def main(argv):
    tests = {"dryrun": test_dryrun, "shaping": test_shaping, "modes": test_modes,
             "cpu": test_cpu, "cleanup": test_cleanup, "lossy": test_lossy,
             "adaptive": test_adaptive, "plan": test_plan, "firewall": test_firewall}
    if len(argv) != 1 or argv[0] not in tests:
        print("usage: lab_tests.py %s" % "|".join(tests), file=sys.stderr)
        return 2
    if argv[0] != "dryrun":
        why = can_lab()
        if why:
            return skip_all(why)
    t = Tap()
    try:
        tests[argv[0]](t)
    except subprocess.TimeoutExpired as e:
        t.ok(False, "timed out: %s" % e)
    return t.done()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
