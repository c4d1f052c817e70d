#!/usr/bin/env python3
"""Record what Ansible itself makes of each inventory in this directory.

For every NAME.ini and NAME.yaml here, and every DIR/hosts.ini or
DIR/hosts.yaml (an inventory with group_vars/ and host_vars/ beside it),
writes NAME.ansible.json with:
  ansible      the ansible-core version that answered
  error        Ansible's error when it refuses the inventory (else absent)
  hostvars     each host's variables after precedence (ansible-inventory --list)
  group_names  each host's group_names
  patterns     for each line of NAME.patterns, the hosts
               `ansible -i NAME PATTERN --list-hosts` lists, in Ansible's order
and, for an inventory Ansible reads, the JSON it prints for it:
  NAME.list.json    `ansible-inventory -i NAME --list`, as printed
  NAME.export.json  `ansible-inventory -i NAME --list --export`, as printed
with, in NAME.ansible.json, how Ansible reads each of those two back as an
inventory script's output (its script plugin):
  json         {"list": {hostvars, group_names, patterns}, "export": {...}}

Every NAME.json here that is not one of those files is itself an inventory
script's output: Ansible reads it through its script plugin (a script that
prints it), and NAME.ansible.json records the same keys as above.

Each file is read by its own plugin only (ini, yaml or script), as relayctl
reads it, and a file Ansible cannot parse is an error, not an empty
inventory. The Go tests (ansible_test.go) compare relayctl's reading
against these answers without needing Ansible; run this (go generate
./plans/inventory, with ansible-core installed) to record them again.
"""
import contextlib
import glob
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDED = (".ansible.json", ".list.json", ".export.json")


def read(path):
    """What Ansible makes of one inventory source: its answers, and the raw
    --list output (None when Ansible refuses the source)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.release import __version__

    out = {"ansible": __version__}
    res = subprocess.run(["ansible-inventory", "-i", path, "--list"], capture_output=True, text=True)
    if res.returncode != 0:
        text = " ".join(res.stderr.split())
        _, _, why = text.partition(" plugin: ")
        out["error"] = unwrapped_path(os.path.dirname(os.path.abspath(path))).sub("", why.partition(" [WARNING]")[0] or text)
        return out, None
    out["hostvars"] = json.loads(res.stdout)["_meta"]["hostvars"]
    im = InventoryManager(loader=DataLoader(), sources=[path])
    out["group_names"] = {h.name: h.get_magic_vars()["group_names"] for h in im.get_hosts("all")}
    return out, (im, res.stdout)


def unwrapped_path(d):
    """A pattern of d + "/" in Ansible's message, which it wraps at 79
    columns, breaking lines after hyphens."""
    return re.compile("".join(re.escape(c) + (r"\s?" if c == "-" else "") for c in d + "/"))


def as_script(text, source):
    """Ansible's reading of text as an inventory script's output, with the
    patterns of the source it was printed for."""
    with script_printing(text) as script:
        out = child(sys.executable, "--read", script, "script", source)
    out.pop("ansible")
    return out


@contextlib.contextmanager
def script_printing(text):
    """An inventory script that prints text, in a temporary folder."""
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "output.json")
        with open(data, "w") as f:
            f.write(text)
        script = os.path.join(d, "inventory.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nexec cat %s\n" % shlex.quote(data))
        os.chmod(script, 0o755)
        yield script


def child(python, mode, path, plugin, *more):
    """Runs this script in a child process whose environment enables only
    the one plugin (Ansible reads its configuration at import)."""
    env = dict(os.environ,
               ANSIBLE_INVENTORY_ENABLED=plugin,
               ANSIBLE_INVENTORY_UNPARSED_FAILED="True",
               ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_HOST_PATTERN_MISMATCH="ignore")
    res = subprocess.run([python, __file__, mode, path, *more], env=env, capture_output=True, text=True, check=True,
                         cwd=HERE)
    return json.loads(res.stdout)


def patterns(im, path):
    found = {}
    pfile = os.path.splitext(path)[0] + ".patterns"
    if not os.path.exists(pfile):
        return found
    for line in open(pfile):
        p = line.strip()
        if not p or p.startswith("#"):
            continue
        p = p.removeprefix("refused: ")
        try:
            found[p] = [h.name for h in im.get_hosts(p)]
        except Exception as e:  # an AnsibleError, e.g. a subscript out of range
            found[p] = {"error": str(e)}
    return found


def one(path):
    """Runs in a child process whose environment fixes the plugin."""
    if path.endswith(".json"):  # an inventory script's output
        with open(path) as f, script_printing(f.read()) as script:
            out, read_ok = read(script)
            if read_ok is not None:
                out["patterns"] = patterns(read_ok[0], path)
        return out, {}
    out, read_ok = read(os.path.relpath(path, HERE))
    if read_ok is None:
        return out, {}
    im, listed = read_ok
    out["patterns"] = patterns(im, path)
    exported = subprocess.run(["ansible-inventory", "-i", os.path.relpath(path, HERE), "--list", "--export"], capture_output=True, text=True,
                              check=True).stdout
    out["json"] = {"list": as_script(listed, path), "export": as_script(exported, path)}
    return out, {".list.json": listed, ".export.json": exported}


def strict(v):
    """v with each NaN or infinity as {"__float": "NaN"}: the answers are
    read by Go's encoding/json, which has no such numbers."""
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return {"__float": json.dumps(v)}
    if isinstance(v, dict):
        return {k: strict(x) for k, x in v.items()}
    if isinstance(v, list):
        return [strict(x) for x in v]
    return v


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        out, files = one(sys.argv[2])
        print(json.dumps({"answer": out, "files": files}))
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--read":
        out, read_ok = read(sys.argv[2])
        if read_ok is not None:
            out["patterns"] = patterns(read_ok[0], sys.argv[3])
        print(json.dumps(out))
        return
    tool = shutil.which("ansible-inventory")
    if tool is None:
        sys.exit("record.py: ansible-inventory not found; install ansible-core (apt-get install ansible-core)")
    with open(tool) as f:  # the Python that Ansible itself runs on
        python = f.readline().removeprefix("#!").split()[0]
    paths = glob.glob(os.path.join(HERE, "*.ini")) + glob.glob(os.path.join(HERE, "*.yaml"))
    paths += [p for p in glob.glob(os.path.join(HERE, "*.json")) if not p.endswith(RECORDED)]
    # an inventory with group_vars/ and host_vars/ beside it is in its own directory
    paths += glob.glob(os.path.join(HERE, "*", "hosts.ini")) + glob.glob(os.path.join(HERE, "*", "hosts.yaml"))
    for path in sorted(paths):
        plugin = {".ini": "ini", ".yaml": "yaml", ".json": "script"}[os.path.splitext(path)[1]]
        got = child(python, "--one", path, plugin)
        base = os.path.splitext(path)[0]
        with open(base + ".ansible.json", "w") as f:
            f.write(json.dumps(strict(got["answer"]), indent=1, sort_keys=True, allow_nan=False) + "\n")
        for ext, text in got["files"].items():
            with open(base + ext, "w") as f:
                f.write(text)
        print("recorded", os.path.basename(base + ".ansible.json"), *sorted(got["files"]))


if __name__ == "__main__":
    main()
