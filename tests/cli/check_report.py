#!/usr/bin/env python3
"""`zeroc report --json` against the machine, measured here another way.

    check_report.py ZEROC

  - the version is `zeroc version`'s; the host Adam selected is usable and
    compiled, and avx512 / avx2 are usable exactly when /proc/cpuinfo has
    their flags (and the build compiled them);
  - cpus_allowed is `nproc`, cpus_online `nproc --all`, hwloc's PUs `nproc`,
    its NUMA nodes the node directories of /sys/devices/system/node;
  - MemTotal is /proc/meminfo's, MemAvailable within 10% of MemTotal of it;
    the memlock limit is getrlimit(RLIMIT_MEMLOCK)'s;
  - io_uring works exactly when io_uring_setup(2), called here through
    ctypes, makes a ring;
  - a --nvme-path directory takes O_DIRECT exactly when an O_TMPFILE |
    O_DIRECT open of it does here; the probe moved bytes both ways and left
    nothing in the directory;
  - the CUDA driver is found exactly when libcuda.so.1 loads here (ctypes),
    and without it the plugin does not load and says why;
  - mpirun is the one on PATH;
  - the text report has every section; a bad --probe-seconds and an unknown
    argument are usage errors (status 2).
Takes about 2 s."""
import ctypes
import errno
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

zeroc = sys.argv[1]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def meminfo(key):
    for line in open("/proc/meminfo"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return None


tmp = tempfile.mkdtemp(prefix="zc-report-", dir=os.getcwd())
r = subprocess.run([zeroc, "report", "--json", "--nvme-path", tmp, "--probe-seconds", "0.4"],
                   capture_output=True, text=True, timeout=120)
if r.returncode != 0:
    sys.exit("zeroc report --json: status %d: %s" % (r.returncode, r.stderr))
rep = json.loads(r.stdout)

version = subprocess.run([zeroc, "version"], capture_output=True, text=True).stdout
if rep["zeroc"]["version"] not in version:
    fail("version %s, zeroc version says %r" % (rep["zeroc"]["version"], version))

flags = set()
for line in open("/proc/cpuinfo"):
    if line.startswith("flags"):
        flags = set(line.split(":", 1)[1].split())
        break
adam = rep["host_adam"]
if adam["selected"] not in adam["usable"] or not set(adam["usable"]) <= set(adam["compiled"]):
    fail("host Adam: selected %s, usable %s, compiled %s" % (adam["selected"], adam["usable"],
                                                            adam["compiled"]))
for name, need in (("avx512", {"avx512f", "avx512bw"}), ("avx2", {"avx2", "fma", "f16c"})):
    want = name in adam["compiled"] and need <= flags
    if (name in adam["usable"]) != want:
        fail("host Adam %s usable: %s, /proc/cpuinfo flags say %s" % (name, name in adam["usable"],
                                                                     want))

nproc = int(subprocess.run(["nproc"], capture_output=True, text=True).stdout)
nproc_all = int(subprocess.run(["nproc", "--all"], capture_output=True, text=True).stdout)
cpu = rep["cpu"]
if cpu["cpus_allowed"] != nproc or cpu["cpus_online"] != nproc_all:
    fail("cpus allowed %s online %s, nproc %d, nproc --all %d" % (cpu["cpus_allowed"],
                                                                 cpu["cpus_online"], nproc,
                                                                 nproc_all))
if not cpu["peak_flops"] or cpu["peak_flops"] <= 0:
    fail("no peak FLOP/s: %s" % cpu.get("peak_flops_how"))
topo = rep["topology"]
if rep["zeroc"]["options"]["hwloc"]:
    nodes = [d for d in os.listdir("/sys/devices/system/node") if re.fullmatch(r"node\d+", d)] \
        if os.path.isdir("/sys/devices/system/node") else ["node0"]
    if len(topo["numa_nodes"]) != len(nodes):
        fail("hwloc NUMA nodes %d, /sys has %d" % (len(topo["numa_nodes"]), len(nodes)))
    if topo["pus"] != nproc:
        fail("hwloc PUs %d, nproc %d" % (topo["pus"], nproc))

mem = rep["memory"]
total = meminfo("MemTotal")
if mem["mem_total"] != total:
    fail("MemTotal %s, /proc/meminfo %s" % (mem["mem_total"], total))
if abs(mem["mem_available"] - meminfo("MemAvailable")) > total // 10:
    fail("MemAvailable %s, /proc/meminfo now %s" % (mem["mem_available"],
                                                   meminfo("MemAvailable")))
soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
if mem["memlock_limit"] != (None if soft == resource.RLIM_INFINITY else soft):
    fail("memlock limit %s, getrlimit %s" % (mem["memlock_limit"], soft))

# io_uring_setup(2) here: x86-64 syscall 425.
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 4, params)
works = fd >= 0
if works:
    os.close(fd)
if rep["io_uring"]["built"] and rep["io_uring"]["works"] != works:
    fail("io_uring works: report %s, io_uring_setup here %s (errno %d)"
         % (rep["io_uring"]["works"], works, ctypes.get_errno()))

nv = rep["nvme_paths"][0]
try:
    fd = os.open(tmp, os.O_TMPFILE | os.O_RDWR | os.O_DIRECT, 0o600)
    os.close(fd)
    direct = True
except OSError as e:
    direct = e.errno != errno.EINVAL and e.errno != errno.EOPNOTSUPP
if nv.get("error"):
    fail("nvme probe of %s: %s" % (tmp, nv["error"]))
elif nv["o_direct"] != direct:
    fail("%s O_DIRECT: report %s, an O_TMPFILE|O_DIRECT open here %s" % (tmp, nv["o_direct"],
                                                                       direct))
elif not (nv["write_GBps"] > 0 and nv["read_GBps"] > 0):
    fail("the probe moved nothing: %s" % nv)
if os.listdir(tmp):
    fail("the probe left %s in %s" % (os.listdir(tmp), tmp))
os.rmdir(tmp)

try:
    ctypes.CDLL("libcuda.so.1")
    have_driver = True
except OSError:
    have_driver = False
cuda = rep["cuda"]
if cuda["driver"]["found"] != have_driver:
    fail("CUDA driver found: report %s, ctypes here %s" % (cuda["driver"]["found"], have_driver))
if not have_driver and (cuda["plugin"]["loads"] or not cuda["plugin"].get("reason")):
    fail("without the driver the plugin loads? %s" % cuda["plugin"])

if rep["mpi"]["mpirun"] != shutil.which("mpirun"):
    fail("mpirun %s, PATH has %s" % (rep["mpi"]["mpirun"], shutil.which("mpirun")))

t = subprocess.run([zeroc, "report"], capture_output=True, text=True, timeout=60)
for section in ("zeroc", "host_adam", "cpu", "topology", "memory", "io_uring", "nvme_paths",
                "cuda", "mpi"):
    if "\n%s\n" % section not in t.stdout:
        fail("the text report has no section %s" % section)
for bad in (["--probe-seconds", "0"], ["--bogus"], ["--nvme-path"]):
    b = subprocess.run([zeroc, "report"] + bad, capture_output=True, text=True)
    if b.returncode != 2:
        fail("zeroc report %s: status %d" % (" ".join(bad), b.returncode))

if failures:
    sys.exit("%d failure(s)" % len(failures))
print("zeroc report agrees with the machine")
