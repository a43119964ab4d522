"""A Legacy stdio backend with a realistic catalog of 100 tools for one domain (tool search
tests: a large catalog across several backends, ranked by what a caller asks for).

Usage: catalog.py DOMAIN   (code | comms | data)

Tools are every verb of the domain applied to every noun of it (`create_issue`,
`send_email`, `delete_row`, ...), each with a description and an input schema written as a
real server's would be. `tools/call NAME` answers `NAME from DOMAIN`; an unlisted name is
-32602. Anything else but the handshake is -32601.
"""
import json
import sys

DOMAINS = {
    "code": (
        "GitHub",
        ["create", "get", "list", "update", "delete", "search", "close", "reopen", "lock", "export"],
        ["issue", "pull_request", "repository", "branch", "commit", "release", "workflow_run",
         "gist", "review_comment", "label"],
    ),
    "comms": (
        "Workspace mail and chat",
        ["send", "get", "list", "update", "delete", "search", "archive", "forward", "schedule",
         "export"],
        ["email", "draft", "calendar_event", "meeting", "chat_message", "channel", "contact",
         "reminder", "attachment", "thread"],
    ),
    "data": (
        "Warehouse and storage",
        ["insert", "get", "list", "update", "delete", "search", "copy", "backup", "restore",
         "export"],
        ["row", "table", "database", "saved_query", "bucket", "storage_object", "file",
         "directory", "snapshot", "dashboard"],
    ),
}

DOMAIN = sys.argv[1] if len(sys.argv) > 1 else "code"
SYSTEM, VERBS, NOUNS = DOMAINS[DOMAIN]


def phrase(noun):
    return noun.replace("_", " ")


def tool(verb, noun):
    what = phrase(noun)
    plural = what + ("es" if what.endswith(("s", "h")) else "s")
    descriptions = {
        "list": "List the %s in %s, newest first, with paging." % (plural, SYSTEM),
        "search": "Search %s in %s by keywords and filters." % (plural, SYSTEM),
        "export": "Export %s from %s as CSV or JSON." % (plural, SYSTEM),
    }
    description = descriptions.get(
        verb, "%s a %s in %s." % (verb.capitalize(), what, SYSTEM))
    return {
        "name": "%s_%s" % (verb, noun),
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {
                "%s_id" % noun: {"type": "string", "description": "The %s's id" % what},
                "fields": {"type": "object", "description": "Values to set or match"},
            },
        },
    }


TOOLS = [tool(v, n) for v in VERBS for n in NOUNS]
NAMES = {t["name"] for t in TOOLS}


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def handle(msg):
    rid, method = msg.get("id"), msg.get("method")
    params = msg.get("params") or {}
    if rid is None:
        return
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "catalog-" + DOMAIN, "version": "1"}}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call" and params.get("name") in NAMES:
        text = "%s from %s" % (params["name"], DOMAIN)
        send({"jsonrpc": "2.0", "id": rid,
              "result": {"content": [{"type": "text", "text": text}]}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32602, "message": "Unknown tool"}})
    else:
        send({"jsonrpc": "2.0", "id": rid,
              "error": {"code": -32601, "message": "Method not found"}})


for line in sys.stdin:
    line = line.strip()
    if line:
        handle(json.loads(line))
