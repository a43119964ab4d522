#!/usr/bin/env python3
"""Checks what the documentation claims against the real binary (scripts/docs.sh runs it after
`mkdocs build --strict`, which checks the site's own links and anchors):

- every `switchboard …` command in a shell code block: its subcommand exists (`--help` exits
  0) and every `--flag` it uses is one that subcommand's `--help` lists;
- every `mcpServers` JSON block converts with `switchboard init` into a config that validates;
- every YAML code block is a config `switchboard validate` accepts (run in a scratch folder
  holding scripts/docs-fixtures/, with each `${VAR}` it names set), and every Cedar block is a
  policy a gateway starts with (`validate` does not parse policies);
- README.md's links into docs/ reach a page and, with `#anchor`, a heading of it;
- docs/metrics.md lists exactly the series core::metrics registers (names, types, labels, read
  from crates/core/src/metrics.rs), and a running gateway exposes none that it does not list.

A code block preceded by `<!-- docs-check: partial -->` (a fragment of a file) or
`<!-- docs-check: skip -->` is not run; use them sparingly.

    scripts/docs-check.py --bin target/debug/switchboard
"""
import argparse
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FIXTURES = ROOT / "scripts" / "docs-fixtures"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!--\s*docs-check:\s*(partial|skip)\b[^>]*-->\s*$")
SHELL = {"sh", "bash", "shell", "console"}


class Failures:
    def __init__(self):
        self.items = []

    def add(self, where, what):
        self.items.append(f"{where}: {what}")


def blocks():
    """(page, line, language, body, mark) for every fenced block of every page."""
    pages = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]
    for page in pages:
        text = page.read_text()
        for m in FENCE.finditer(text):
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.search(before)
            line = text[: m.start()].count("\n") + 1
            yield page.relative_to(ROOT), line, m.group(1), m.group(2), mark and mark.group(1)


# ---- commands -----------------------------------------------------------------------------

def commands(body):
    """The `switchboard …` command lines of a shell block, continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", body)
    for raw in joined.split("\n"):
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        line = line.split(" #", 1)[0].strip()
        line = line.rstrip("&").strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words.pop(0)
        if words[:3] == ["cargo", "run", "--release"]:
            words = ["switchboard"] + words[4:] if words[3:4] == ["--"] else ["switchboard"]
        if words and (words[0] == "switchboard" or words[0].endswith("/switchboard")):
            yield words[1:]


HELP_CACHE = {}


def help_of(binary, chain):
    key = tuple(chain)
    if key not in HELP_CACHE:
        out = subprocess.run(
            [binary, *chain, "--help"], capture_output=True, text=True, timeout=30
        )
        HELP_CACHE[key] = out
    return HELP_CACHE[key]


def subcommands(help_text):
    names = set()
    section = False
    for line in help_text.splitlines():
        if line.startswith("Commands:"):
            section = True
            continue
        if section:
            m = re.match(r"^  (\S+)", line)
            if m:
                names.add(m.group(1))
            elif line and not line.startswith(" "):
                section = False
    return names


def check_command(binary, words, where, failures):
    if not words:
        return
    chain = [words[0]]
    first = help_of(binary, chain)
    if first.returncode != 0:
        failures.add(where, f"`switchboard {words[0]} --help` exits {first.returncode}")
        return
    helps = [first.stdout]
    flags_used = []
    for word in words[1:]:
        if word == "--":
            break
        if word.startswith("--"):
            flags_used.append(word.split("=", 1)[0])
        elif not word.startswith("-") and word in subcommands(helps[-1]):
            chain.append(word)
            out = help_of(binary, chain)
            if out.returncode != 0:
                failures.add(where, f"`switchboard {' '.join(chain)} --help` fails")
                return
            helps.append(out.stdout)
    known = set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", "\n".join(helps)))
    for flag in flags_used:
        if flag not in known:
            failures.add(where, f"`switchboard {' '.join(chain)}` has no option {flag}")


# Flags of other programs that the pages name in passing (bubblewrap's, a peer's).
FOREIGN_FLAGS = {
    "--die-with-parent",
    "--unshare-all",
    "--disable-userns",
    "--stateful",
    "--no-dereference",
}


def check_inline_flags(binary, failures):
    """Every `--flag` a page names in inline code is an option of some subcommand."""
    known = set()
    top = help_of(binary, [])
    stack = [[name] for name in subcommands(top.stdout) if name != "help"]
    while stack:
        chain = stack.pop()
        out = help_of(binary, chain)
        known |= set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", out.stdout))
        stack += [chain + [n] for n in subcommands(out.stdout) if n != "help"]
    for page in sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]:
        text = FENCE.sub(lambda f: "\n" * f.group(0).count("\n"), page.read_text())
        for m in re.finditer(r"`(--[a-z][a-z0-9-]*)", text):
            flag = m.group(1)
            if flag not in known and flag not in FOREIGN_FLAGS:
                line = text[: m.start()].count("\n") + 1
                failures.add(f"{page.relative_to(ROOT)}:{line}", f"no subcommand has {flag}")
    if len(known) < 20:
        failures.add("--help", f"only {len(known)} options found")


# ---- configs ------------------------------------------------------------------------------

def scratch():
    folder = pathlib.Path(tempfile.mkdtemp(prefix="docs-check-"))
    shutil.copytree(FIXTURES, folder, dirs_exist_ok=True)
    for path in folder.rglob("*"):
        if path.is_file():
            path.chmod(0o600)
    return folder


def validate(binary, config_text, where, failures):
    folder = scratch()
    try:
        config = folder / "switchboard.yaml"
        config.write_text(config_text)
        env = dict(os.environ)
        env["PATH"] = f"{pathlib.Path(binary).resolve().parent}:{env.get('PATH', '')}"
        for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", config_text):
            env.setdefault(name, "docs-check-value-" + name.lower())
        out = subprocess.run(
            [binary, "validate", "--config", str(config)],
            capture_output=True, text=True, timeout=60, cwd=folder, env=env,
        )
        if out.returncode != 0:
            detail = (out.stderr or out.stdout).strip().replace(str(folder) + "/", "")
            failures.add(where, f"`switchboard validate` refused it:\n    {detail}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_mcp_json(binary, text, where, failures):
    """An `mcpServers` file converts with `init`, and the config it writes validates."""
    folder = scratch()
    try:
        (folder / "mcp.json").write_text(text)
        env = dict(os.environ)
        env["PATH"] = f"{pathlib.Path(binary).resolve().parent}:{env.get('PATH', '')}"
        for argv in (["init", "--from-mcp-json", "mcp.json", "--out", "converted.yaml"],
                     ["validate", "--config", "converted.yaml"]):
            out = subprocess.run([binary, *argv], capture_output=True, text=True,
                                 timeout=60, cwd=folder, env=env)
            if out.returncode != 0:
                detail = (out.stderr or out.stdout).strip()
                failures.add(where, f"`switchboard {argv[0]}` refused it:\n    {detail}")
                return
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_policy(binary, policy, where, failures):
    """`validate` does not parse a policy; a gateway does before it listens."""
    folder = scratch()
    try:
        (folder / "policy.cedar").write_text(policy)
        proc = subprocess.Popen(
            [binary, "run", "--port", "0", "--policy", "policy.cedar"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder,
        )
        listening = False
        for line in proc.stdout:
            if "listening on" in line:
                listening = True
                break
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        if not listening:
            failures.add(where, f"a gateway refused the policy:\n    {err.strip()[:600]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- README links -------------------------------------------------------------------------

def slug(heading):
    """Python-Markdown's toc slug, as MkDocs makes the anchors."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|\[|\]\([^)]*\)", "", heading)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page):
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*?)\s*$", text, re.M)}


def check_readme_links(failures):
    text = (ROOT / "README.md").read_text()
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        file = (ROOT / path).resolve()
        if not file.exists():
            failures.add("README.md", f"link to {target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            failures.add("README.md", f"link to {target}: no such heading")


# ---- metrics ------------------------------------------------------------------------------

def registered_series():
    """{exposed name: (type, sorted labels)} from crates/core/src/metrics.rs."""
    src = (ROOT / "crates" / "core" / "src" / "metrics.rs").read_text()
    fields = {}
    body = re.search(r"pub\(crate\) struct Metrics \{(.*?)\n\}", src, re.S).group(1)
    for name, kind in re.findall(r"^\s*(\w+): (.+),$", body, re.M):
        fields[name] = kind
    labels = {}
    for struct, fbody in re.findall(r"struct (\w+Labels) \{(.*?)\n\}", src, re.S):
        labels[struct] = sorted(re.findall(r"^\s*(\w+): ", fbody, re.M))
    calls = re.findall(
        r"registry\.register(_with_unit)?\(\s*\"(\w+)\",\s*\"[^\"]*\",\s*(Unit::(\w+),\s*)?m\.(\w+)\.clone\(\)",
        src,
    )
    if len(calls) != src.count("registry.register"):
        raise SystemExit("docs-check: crates/core/src/metrics.rs registers series in a way "
                         "this checker does not read; update registered_series()")
    series = {}
    for _with_unit, name, _u, unit, field in calls:
        kind = fields[field]
        m = re.match(r"(?:Family<(\w+), (\w+)>|Latency<(\w+)>)", kind)
        if m.group(3):
            label_struct, metric = m.group(3), "histogram"
        else:
            label_struct, metric = m.group(1), m.group(2).lower()
        exposed = name + ("_" + unit.lower() if unit else "")
        if metric == "counter":
            exposed += "_total"
        series[exposed] = (metric, labels[label_struct])
    return series


def documented_series(failures):
    text = (DOCS / "metrics.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| ([^|]*) \|", text, re.M)
    documented = {}
    for name, metric, label_cell in rows:
        documented[name] = (metric, sorted(re.findall(r"`(\w+)`", label_cell)))
    if not documented:
        failures.add("docs/metrics.md", "no series table found")
    return documented


def scrape_running_gateway(binary, failures):
    """Families and label names a running gateway exposes after some traffic."""
    folder = scratch()
    (folder / "policy.cedar").write_text("permit(principal, action, resource);\n")
    proc = subprocess.Popen(
        [binary, "run", "--port", "0", "--policy", str(folder / "policy.cedar"),
         "--rate-limit", "3/m"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=folder,
    )
    try:
        url = None
        deadline = time.time() + 30
        while url is None and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            m = re.search(r"listening on (http://\S+/mcp)", line)
            url = m and m.group(1)
        if url is None:
            failures.add("metrics", "the gateway did not start")
            return {}
        session = None
        bodies = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "docs-check", "version": "1"}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
             "params": {"name": "echo", "arguments": {"text": "hi"}}},
            {"jsonrpc": "2.0", "id": 4, "method": "ping"},
        ] + [{"jsonrpc": "2.0", "id": 5 + i, "method": "tools/list"} for i in range(4)]
        for body in bodies:
            headers = {"Content-Type": "application/json",
                       "Accept": "application/json, text/event-stream",
                       "MCP-Protocol-Version": "2025-11-25"}
            if session:
                headers["Mcp-Session-Id"] = session
            req = urllib.request.Request(url, json.dumps(body).encode(), headers)
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    session = session or resp.headers.get("Mcp-Session-Id")
                    resp.read()
            except urllib.error.HTTPError as e:
                e.read()  # the rate limit's 429 is part of the plan
        with urllib.request.urlopen(url.replace("/mcp", "/metrics"), timeout=30) as resp:
            text = resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    exposed = {}
    types = dict(re.findall(r"^# TYPE (\w+) (\w+)", text, re.M))
    for family, metric in types.items():
        name = family + ("_total" if metric == "counter" else "")
        label_names = set()
        for m in re.finditer(r"^" + family + r"(?:_total|_bucket|_sum|_count)?\{([^}]*)\}", text, re.M):
            label_names |= set(re.findall(r"(\w+)=", m.group(1))) - {"le"}
        exposed[name] = (metric, sorted(label_names))
    return exposed


def check_metrics(binary, failures):
    registered = registered_series()
    documented = documented_series(failures)
    for name in sorted(set(registered) | set(documented)):
        if name not in documented:
            failures.add("docs/metrics.md", f"{name} is registered but not listed")
        elif name not in registered:
            failures.add("docs/metrics.md", f"{name} is listed but not registered")
        elif registered[name] != documented[name]:
            failures.add("docs/metrics.md",
                         f"{name}: listed as {documented[name]}, registered as {registered[name]}")
    exposed = scrape_running_gateway(binary, failures)
    if len(exposed) < 10:
        failures.add("metrics", f"a running gateway exposed only {sorted(exposed)}")
    for name, (metric, label_names) in exposed.items():
        if name not in documented:
            failures.add("docs/metrics.md", f"/metrics exposes {name}, which is not listed")
        elif documented[name] != (metric, label_names):
            failures.add("docs/metrics.md",
                         f"/metrics exposes {name} as {(metric, label_names)}, listed as {documented[name]}")
    return len(registered), len(exposed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    args = parser.parse_args()
    binary = str(pathlib.Path(args.bin).resolve())
    failures = Failures()
    counts = {"commands": 0, "configs": 0, "policies": 0, "mcp-json": 0, "marked": 0}
    for page, line, lang, body, mark in blocks():
        where = f"{page}:{line}"
        if mark:
            counts["marked"] += 1
            continue
        if lang in SHELL:
            for words in commands(body):
                counts["commands"] += 1
                check_command(binary, words, where, failures)
        elif lang == "yaml":
            counts["configs"] += 1
            validate(binary, body, where, failures)
        elif lang == "json" and '"mcpServers"' in body:
            counts["mcp-json"] += 1
            check_mcp_json(binary, body, where, failures)
        elif lang == "cedar":
            counts["policies"] += 1
            check_policy(binary, body, where, failures)
    check_readme_links(failures)
    deploy = (ROOT / "deploy" / "switchboard.yaml").read_text()
    if deploy not in (DOCS / "scale-out.md").read_text():
        failures.add("docs/scale-out.md", "does not quote deploy/switchboard.yaml as it is")
    check_inline_flags(binary, failures)
    registered, exposed = check_metrics(binary, failures)
    for item in failures.items:
        print(f"docs-check: {item}", file=sys.stderr)
    print(
        f"docs-check: {counts['commands']} commands, {counts['configs']} configs, "
        f"{counts['policies']} policies, {counts['mcp-json']} mcpServers files checked ({counts['marked']} blocks marked partial or "
        f"skip); metrics: {registered} series registered, {exposed} exposed by a running "
        f"gateway; {len(failures.items)} failure(s)"
    )
    return 1 if failures.items else 0


if __name__ == "__main__":
    sys.exit(main())
