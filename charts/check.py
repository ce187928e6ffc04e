#!/usr/bin/env python3
"""Checks the Helm chart with the real tools, offline (run by .ci/run):

- lint (Helm 4's SDK, helm-python-sdk) and render with every values file in charts/horizon/ci/;
- every rendered object validated against the Kubernetes schemas (kubernetes-validate,
  --strict); custom resources (cert-manager, Prometheus Operator) are reported, not validated;
- each daemon's pod laid out as the kubelet would mount it (ConfigMap, Secrets made with a dev
  CA), and its configuration checked there by the daemon (`horizon … --check`: it parses, and
  the certificate, key and player keys it names are there and right);
- values the schema must refuse, and required values missing, refused with their key named;
- every metric the alert rules and dashboards name is one the daemons export (docs/metrics.md).

- the dashboards type-checked against Grafana's schema (@grafana/schema, typescript --strict),
  when NODE_DIR (where both are installed with npm) is given.

Usage: charts/check.py HORIZON_BINARY OUT_DIR [NODE_DIR]
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import helm_python as helm
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CHART = os.path.join(HERE, "horizon")
ROOT = os.path.dirname(HERE)
KUBE_VERSION = "1.35"
CUSTOM_KINDS = {"Certificate", "ServiceMonitor", "PrometheusRule"}

failures = []


def fail(what):
    failures.append(what)
    print(f"FAIL: {what}")


def render(values, name="site"):
    chart = helm.Chart.load(CHART)
    chart.validate_schema(values)
    return chart.render(values, name=name, namespace="horizon", is_install=True)


def check_values_file(path, binary, out_dir):
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path) as f:
        values = yaml.safe_load(f)
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE_VERSION}.0")
    for m in report.get("messages", []):
        print(f"  lint [{name}] severity {m['severity']}: {m['path']}: {m['error']}")
        if m["severity"] >= 2:
            fail(f"lint {name}: {m['error']}")
    manifests = render(values)
    docs = []
    for template, text in sorted(manifests.items()):
        if template.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append((template, doc))
    kinds = sorted({d["kind"] for _, d in docs})
    print(f"  {name}: {len(docs)} objects: {', '.join(kinds)}")
    out = os.path.join(out_dir, name)
    os.makedirs(out, exist_ok=True)
    to_validate = []
    for i, (template, doc) in enumerate(docs):
        file = os.path.join(out, f"{i:02d}-{doc['kind'].lower()}.yaml")
        with open(file, "w") as f:
            yaml.safe_dump(doc, f)
        if doc["kind"] in CUSTOM_KINDS:
            print(f"  {name}: {doc['kind']} {doc['metadata']['name']}: custom resource, not validated")
        else:
            to_validate.append(file)
        if doc["kind"] == "ConfigMap":
            data = doc.get("data", {})
            # Every file first: a configuration names the others relative to itself.
            for key, text in data.items():
                with open(os.path.join(out, key), "w") as f:
                    f.write(text)
            if "pod-template.json" in data:
                # The game servers' pod template, validated as a PodTemplate object.
                template = {"apiVersion": "v1", "kind": "PodTemplate",
                            "metadata": {"name": "gameserver"},
                            "template": json.loads(data["pod-template.json"])}
                file = os.path.join(out, f"{i:02d}-podtemplate.yaml")
                with open(file, "w") as f:
                    yaml.safe_dump(template, f)
                to_validate.append(file)
    run = subprocess.run(
        ["kubernetes-validate", "--strict", "--quiet", "-k", KUBE_VERSION, *to_validate],
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        fail(f"kubernetes-validate {name}:\n{run.stdout}{run.stderr}")
    else:
        print(f"  {name}: {len(to_validate)} objects valid for Kubernetes {KUBE_VERSION}")
    return docs


def secrets_for(binary, out, values):
    """The Secrets a studio provides, made here as it would: a dev CA for the release's site
    and the core (`horizon certs init`), player keys (`horizon keys init`), an admin token.
    Keyed by Secret name; the core's and the site's certificate Secrets as the chart names
    them (an existingSecret, or cert-manager's)."""
    made = os.path.join(out, "secrets")
    site = values["site"]
    for args in (["certs", "init", "--force", "--sites", site, "--dir", made],
                 ["keys", "init", "--force", "--file", os.path.join(made, "player.keys")]):
        run = subprocess.run([binary, *args], capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"`horizon {' '.join(args)}`: {run.stderr}")
            return {}
    read = lambda f: open(os.path.join(made, f)).read()
    site_tls = {"ca.crt": read("ca.pem"), "tls.crt": read(f"{site}.pem"), "tls.key": read(f"{site}.key")}
    core_tls = {"ca.crt": read("ca.pem"), "tls.crt": read("horizon-core.pem"), "tls.key": read("horizon-core.key")}
    cert_manager = values["tls"]["certManager"]["enabled"]
    made = {
        "site-horizon-tls" if cert_manager else values["tls"]["existingSecret"]: site_tls,
        "site-horizon-core-tls" if cert_manager else values["core"]["tls"]["existingSecret"]: core_tls,
        values["tokens"]["existingSecret"]: {"player-keys": read("player.keys"), "admin-token": "a-token\n"},
    }
    # TLS to etcd: the CA of etcd's certificates and the cores' client certificate (here the
    # dev CA's, as a studio's own PKI would issue them).
    etcd_tls = values["core"]["store"].get("etcd", {}).get("tls", {}).get("existingSecret")
    if etcd_tls:
        made[etcd_tls] = core_tls
    return made


def check_pods(name, docs, values, binary, out):
    """Each daemon's pod laid out on disk as the kubelet would mount it (its ConfigMap and
    Secrets, items and subPaths as rendered), then its configuration checked there by the
    daemon itself (`horizon … --check`): the configuration parses, and the files it names are
    where the mounts put them and are what it needs (the certificate naming this daemon, the
    key its own, the player keys). Paths are taken under the pod's root, as in a chroot."""
    config_maps = {d["metadata"]["name"]: d.get("data", {}) for _, d in docs if d["kind"] == "ConfigMap"}
    secrets = secrets_for(binary, out, values)
    for _, doc in docs:
        if doc["kind"] not in ("StatefulSet", "Deployment"):
            continue
        component = doc["metadata"]["labels"].get("app.kubernetes.io/component")
        pod = doc["spec"]["template"]["spec"]
        # Absolute: the configuration is rewritten to name its files under it.
        root = os.path.abspath(os.path.join(out, f"{component}-root"))
        shutil.rmtree(root, ignore_errors=True)
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        container = pod["containers"][0]
        for mount in container.get("volumeMounts", []):
            volume = volumes.get(mount["name"], {})
            if "configMap" in volume:
                source, items = config_maps.get(volume["configMap"]["name"]), volume["configMap"].get("items")
            elif "secret" in volume:
                source, items = secrets.get(volume["secret"]["secretName"]), volume["secret"].get("items")
                if source is None and volume["secret"].get("optional"):
                    continue
            else:  # a claim, an emptyDir: an empty directory
                os.makedirs(root + mount["mountPath"], exist_ok=True)
                continue
            if source is None:
                fail(f"{name}: {component} mounts {mount['name']}, which nobody provides")
                continue
            files = {i["path"]: source[i["key"]] for i in items} if items else dict(source)
            if "subPath" in mount:
                if mount["subPath"] not in files:
                    fail(f"{name}: {component} mounts {mount['subPath']} of {mount['name']}, which holds no such key")
                    continue
                files = {"": files[mount["subPath"]]}
            for path, text in files.items():
                target = os.path.join(root + mount["mountPath"], path) if path else root + mount["mountPath"]
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w") as f:
                    f.write(text)
        config = next((a for a in container.get("args", []) if a.endswith(".toml")), None)
        if config is None or not os.path.exists(root + config):
            fail(f"{name}: {component} runs with {container.get('args')}: no configuration mounted at it")
            continue
        text = open(root + config).read()
        with open(root + config, "w") as f:
            f.write(re.sub(r'"(/(?:etc|var)/[^"]*)"', lambda m: f'"{root}{m.group(1)}"', text))
        run = subprocess.run([binary, component, "--config", root + config, "--check"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"{name}: the {component}'s configuration, as its pod mounts it, is refused by `horizon {component} --check`:\n{run.stderr}")
        else:
            print(f"  {name}: the {component}'s configuration and the files its pod mounts accepted by `horizon {component} --check`")


def merged(values):
    """A values file over the chart's defaults (the keys this script reads)."""
    with open(os.path.join(CHART, "values.yaml")) as f:
        out = yaml.safe_load(f)
    def over(a, b):
        for k, v in b.items():
            a[k] = over(a.get(k, {}), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
        return a
    return over(out, values)


def base_values():
    with open(os.path.join(CHART, "ci", "core-site.yaml")) as f:
        return yaml.safe_load(f)


def check_refusals():
    def with_change(path, value):
        v = base_values()
        node = v
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
        return v

    bad = [
        (("site",), "P A R", "site"),
        (("agent", "coreAddress"), "no-port", "coreAddress"),
        (("agent", "servers"), {"tickMs": 1}, "tickMs"),
        (("agent", "peers"), {"HKG": "x"}, "HKG"),
        (("core", "store"), {"size": "lots"}, "size"),
        (("agent", "replicas"), 2, "replicas"),
        (("agent", "servers"), {"podTemplate": {"spec": {"containers": []}}}, "podTemplate"),
        (("agent", "servers"), {"podTemplate": {"spec": {"restartPolicy": "Always", "containers": [{"name": "g"}]}}}, "podTemplate"),
        (("agent", "servers"), {"driver": "docker"}, "driver"),
        (("core", "stage"), "everywhere", "stage"),
        (("core", "replicas"), 2, "core.store.kind"),
        (("core", "store"), {"kind": "etcd", "etcd": {"endpoints": []}}, "core.store.etcd.endpoints"),
        (("core", "store"), {"kind": "etcd", "etcd": {"endpoints": ["etcd:2379"]}}, "endpoints"),
        (("core", "store"), {"kind": "zookeeper"}, "kind"),
        (("core", "store"), {"kind": "etcd", "etcd": {"endpoints": ["https://etcd:2379"]}}, "core.store.etcd.tls.existingSecret"),
        (("core", "coordinates"), {"PAR": [98, 2]}, "coordinates"),
    ]
    for path, value, key in bad:
        try:
            render(with_change(path, value))
            fail(f"values {'.'.join(path)} = {value!r} were accepted")
        except Exception as e:  # the SDK raises HelmValuesError naming the key
            if key not in str(e):
                fail(f"values {'.'.join(path)} = {value!r}: refused without naming {key}: {e}")
            else:
                print(f"  refused as it should: {'.'.join(path)} = {value!r}")
    # The core site's agent finds the release's own core when agent.coreAddress is empty; any
    # other site must name it.
    agent_toml = next(doc["data"]["agent.toml"]
                      for template, text in render(base_values()).items()
                      if not template.endswith("NOTES.txt")
                      for doc in yaml.safe_load_all(text)
                      if doc and doc["kind"] == "ConfigMap" and "agent.toml" in doc.get("data", {}))
    if 'core = "site-horizon-core:7400"' not in agent_toml:
        fail(f"the core site's agent does not default to the release's core:\n{agent_toml}")
    else:
        print("  the core site's agent dials the release's own core by default")
    with open(os.path.join(CHART, "ci", "relay-site.yaml")) as f:
        relay = yaml.safe_load(f)
    relay["agent"]["coreAddress"] = ""
    try:
        render(relay)
        fail("agent.coreAddress missing on a relay site was accepted")
    except Exception as e:
        if "agent.coreAddress" not in str(e):
            fail(f"agent.coreAddress missing on a relay site: refused without naming it: {e}")
        else:
            print("  required as it should: agent.coreAddress, on a relay site")
    for path, key in [(("tls", "existingSecret"), "tls.existingSecret"), (("core", "tls", "existingSecret"), "core.tls.existingSecret")]:
        try:
            render(with_change(path, ""))
            fail(f"{key} missing was accepted")
        except Exception as e:
            if key not in str(e):
                fail(f"{key} missing: refused without naming it: {e}")
            else:
                print(f"  required as it should: {key}")


def check_metric_names():
    documented = set(re.findall(r"`(horizon_[a-z_]+)[`{]", open(os.path.join(ROOT, "docs", "metrics.md")).read()))
    exported = documented | {"process_cpu_seconds_total", "process_resident_memory_bytes"}
    suffixes = ("_bucket", "_sum", "_count")
    texts = [open(os.path.join(CHART, "rules", "horizon-alerts.yaml")).read()]
    for d in glob.glob(os.path.join(CHART, "dashboards", "*.json")):
        for panel in json.load(open(d))["panels"]:
            texts.extend(t["expr"] for t in panel.get("targets", []))
    named = set()
    for t in texts:
        named |= set(re.findall(r"\b((?:horizon|process)_[a-z_]+)", t))
    missing = []
    for m in sorted(named):
        base = next((m[: -len(s)] for s in suffixes if m.endswith(s) and m[: -len(s)] in exported), m)
        if base not in exported:
            missing.append(m)
            fail(f"{m} is named by a rule or dashboard but no daemon exports it")
    if not missing:
        print(f"  {len(named)} metric names in rules and dashboards, all exported")


RUNBOOKS = "https://github.com/smd-g/horizon/blob/main/docs/operations.md"


def check_runbooks():
    """Every alert links its own runbook: a section of docs/operations.md named after it; the
    chart points the links at prometheusRule.runbookBaseUrl when it is set."""
    with open(os.path.join(CHART, "rules", "horizon-alerts.yaml")) as f:
        rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    with open(os.path.join(ROOT, "docs", "operations.md")) as f:
        sections = set(re.findall(r"^## (Horizon[A-Za-z]+)$", f.read(), re.M))
    for r in rules:
        url = r.get("annotations", {}).get("runbook_url", "")
        if url != f"{RUNBOOKS}#{r['alert'].lower()}":
            fail(f"{r['alert']}: runbook_url {url!r} is not its section of docs/operations.md")
        if r["alert"] not in sections:
            fail(f"{r['alert']}: no section '## {r['alert']}' in docs/operations.md")
    values = base_values()
    values["prometheusRule"] = {"enabled": True, "runbookBaseUrl": "https://runbooks.example.net/horizon"}
    rendered = [doc for t, text in render(values).items() if not t.endswith("NOTES.txt")
                for doc in yaml.safe_load_all(text) if doc and doc["kind"] == "PrometheusRule"]
    urls = [r["annotations"]["runbook_url"] for g in rendered[0]["spec"]["groups"] for r in g["rules"]]
    if not all(u.startswith("https://runbooks.example.net/horizon#horizon") for u in urls):
        fail(f"runbookBaseUrl is not applied: {urls}")
    else:
        print(f"  {len(rules)} alerts, each with its runbook section and URL (base configurable)")


def check_dashboards(node_dir):
    """Each dashboard as a TypeScript object literal typed `Dashboard`: literal types and excess
    properties are checked (an imported .json would be widened to plain strings)."""
    lines = ["import type { Dashboard } from '@grafana/schema';"]
    files = sorted(glob.glob(os.path.join(CHART, "dashboards", "*.json")))
    for i, f in enumerate(files):
        lines.append(f"// {os.path.basename(f)}\nexport const dashboard{i}: Dashboard = {open(f).read()};")
    with open(os.path.join(node_dir, "dashboards.ts"), "w") as f:
        f.write("\n".join(lines) + "\n")
    config = {
        "compilerOptions": {
            "strict": True, "noEmit": True, "target": "es2020", "skipLibCheck": True,
            "module": "nodenext", "moduleResolution": "nodenext",
        },
        "files": ["dashboards.ts"],
    }
    with open(os.path.join(node_dir, "tsconfig.json"), "w") as f:
        json.dump(config, f)
    run = subprocess.run(["npx", "--no-install", "tsc", "-p", "tsconfig.json"], cwd=node_dir,
                         capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"dashboards do not type-check against @grafana/schema:\n{run.stdout}{run.stderr}")
    else:
        print(f"  {len(files)} dashboards type-check against @grafana/schema")


def check_rbac(name, docs):
    """The agent may touch pods of its namespace, with the verbs the driver calls: no more."""
    wanted = {"get", "list", "watch", "create", "delete", "patch"}
    for _, doc in docs:
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            fail(f"{name}: {doc['kind']} {doc['metadata']['name']}: nothing cluster-wide")
        if doc["kind"] != "Role":
            continue
        for rule in doc.get("rules", []):
            words = rule.get("apiGroups", []) + rule.get("resources", []) + rule.get("verbs", [])
            if "*" in words:
                fail(f"{name}: Role {doc['metadata']['name']}: a wildcard in {rule}")
            if rule.get("resources") != ["pods"] or set(rule.get("verbs", [])) - wanted:
                fail(f"{name}: Role {doc['metadata']['name']}: more than pods {sorted(wanted)}: {rule}")
        print(f"  {name}: Role {doc['metadata']['name']}: pods {sorted(wanted)} in its namespace only")


def check_credentials(name, docs, values):
    """The core mounts its own certificate, never the site's; the agent mounts the player keys
    as a directory (a subPath would not see the Secret change) and takes no token from its
    environment."""
    for _, doc in docs:
        if doc["kind"] not in ("StatefulSet", "Deployment"):
            continue
        pod = doc["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        container = pod["containers"][0]
        component = doc["metadata"]["labels"].get("app.kubernetes.io/component")
        secret = volumes.get("certs", {}).get("secret", {}).get("secretName")
        if component == "core":
            # render() installs the release as "site": its fullname is site-horizon.
            cert_manager = values["tls"]["certManager"]["enabled"]
            wanted = "site-horizon-core-tls" if cert_manager else values["core"]["tls"]["existingSecret"]
            if secret == values["tls"].get("existingSecret") or secret != wanted:
                fail(f"{name}: the core mounts certificate Secret {secret}, not its own {wanted}")
            else:
                print(f"  {name}: the core mounts its own certificate ({secret})")
            items = [i["key"] for i in volumes.get("keys", {}).get("secret", {}).get("items", [])]
            if items != ["admin-token"]:
                fail(f"{name}: the core mounts {items or 'every key'} of the tokens Secret, not the admin token alone")
        if component == "agent":
            keys = volumes.get("keys", {}).get("secret", {})
            mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
            env = {e["name"] for e in container.get("env", [])}
            if keys.get("secretName") != values["tokens"]["existingSecret"] or "subPath" in mounts.get("keys", {"subPath": 1}):
                fail(f"{name}: the agent does not mount the player keys as a directory: {keys} {mounts.get('keys')}")
            elif env & {"HORIZON_SERVER_TOKEN", "HORIZON_PLAYER_TOKEN", "HORIZON_ADMIN_TOKEN"}:
                fail(f"{name}: the agent takes a shared token from its environment: {env}")
            else:
                print(f"  {name}: the agent mounts the player keys from {keys['secretName']} (reloadable)")


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    values_files = sorted(glob.glob(os.path.join(CHART, "ci", "*.yaml")))
    for path in values_files:
        print(f"chart with {os.path.relpath(path, ROOT)}")
        docs = check_values_file(path, binary, out_dir)
        check_rbac(os.path.basename(path), docs)
        with open(path) as f:
            values = merged(yaml.safe_load(f))
        check_credentials(os.path.basename(path), docs, values)
        check_pods(os.path.basename(path), docs, values, binary, os.path.join(out_dir, os.path.splitext(os.path.basename(path))[0]))
    print("values the schema refuses")
    check_refusals()
    print("metrics named by rules and dashboards")
    check_metric_names()
    print("runbooks")
    check_runbooks()
    if len(sys.argv) > 3:
        print("dashboards")
        check_dashboards(sys.argv[3])
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("chart: ok")


if __name__ == "__main__":
    main()
