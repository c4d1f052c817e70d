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

Each file is read by its own plugin only (ini or yaml), as relayctl reads
it, and a file Ansible cannot parse is an error, not an empty inventory.
The Go tests (ansible_test.go) compare relayctl's reading against these
answers without needing Ansible; run this (go generate ./plans/inventory,
with ansible-core installed) to record them again.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def one(path):
    """Runs in a child process whose environment fixes the plugin."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.release import __version__

    out = {"ansible": __version__}
    res = subprocess.run(["ansible-inventory", "-i", path, "--list"], capture_output=True, text=True)
    if res.returncode != 0:
        text = " ".join(res.stderr.split())
        _, _, why = text.partition(" plugin: ")
        out["error"] = why.partition(" [WARNING]")[0].replace(HERE + "/", "") or text.replace(HERE + "/", "")
        return out
    out["hostvars"] = json.loads(res.stdout)["_meta"]["hostvars"]
    im = InventoryManager(loader=DataLoader(), sources=[path])
    out["group_names"] = {h.name: h.get_magic_vars()["group_names"] for h in im.get_hosts("all")}
    patterns = {}
    pfile = os.path.splitext(path)[0] + ".patterns"
    if os.path.exists(pfile):
        for line in open(pfile):
            p = line.strip()
            if not p or p.startswith("#"):
                continue
            p = p.removeprefix("refused: ")
            try:
                patterns[p] = [h.name for h in im.get_hosts(p)]
            except Exception as e:  # an AnsibleError, e.g. a subscript out of range
                patterns[p] = {"error": str(e)}
    out["patterns"] = patterns
    return out


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2]), indent=1, sort_keys=True))
        return
    tool = shutil.which("ansible-inventory")
    if tool is None:
        sys.exit("record.py: ansible-inventory not found; install ansible-core (apt-get install ansible-core)")
    with open(tool) as f:  # the Python that Ansible itself runs on
        python = f.readline().removeprefix("#!").split()[0]
    paths = glob.glob(os.path.join(HERE, "*.ini")) + glob.glob(os.path.join(HERE, "*.yaml"))
    # an inventory with group_vars/ and host_vars/ beside it is in its own directory
    paths += glob.glob(os.path.join(HERE, "*", "hosts.ini")) + glob.glob(os.path.join(HERE, "*", "hosts.yaml"))
    for path in sorted(paths):
        env = dict(os.environ,
                   ANSIBLE_INVENTORY_ENABLED="ini" if path.endswith(".ini") else "yaml",
                   ANSIBLE_INVENTORY_UNPARSED_FAILED="True",
                   ANSIBLE_LOCALHOST_WARNING="False",
                   ANSIBLE_HOST_PATTERN_MISMATCH="ignore")
        res = subprocess.run([python, __file__, "--one", path], env=env, capture_output=True, text=True, check=True,
                             cwd=HERE)
        golden = os.path.splitext(path)[0] + ".ansible.json"
        with open(golden, "w") as f:
            f.write(res.stdout)
        print("recorded", os.path.basename(golden))


if __name__ == "__main__":
    main()
